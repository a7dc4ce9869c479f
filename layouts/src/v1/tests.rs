//! Tests of the v1 parsers and the v1 → v2 mapping.

use super::*;

const SEED_INFO: &str = "\
CompactTaskId: \"compct.xcloud24_9876.0.1617606756000\"
CompactTaskState: \"Assigned\"
repeat_flag: false
sub_task_flag: true
RepeatInfo:
\trepeatCount: 0
\trepeatInterval: 0
ResulttInfo:
\tsuccessCount: 1
\tfailedCount: 0
db_name: sales
schema_name: public
table_name: orders
partition_name:
";

#[test]
fn seed_names_parse_and_map() {
    let cases = [
        ("compct.xcloud24_9876.0.1617693156000", V1State::Init, "345ef1df.16176931.56000000.0", TaskState::Init),
        (
            "compct.xcloud24_9876.0.1617606756000.Assigned",
            V1State::Assigned,
            "345ef1df.16176067.56000000.0",
            TaskState::Init,
        ),
        (
            "compct.xcloud24_9876.0.1614928356000.Cancel",
            V1State::Cancel,
            "345ef1df.16149283.56000000.0",
            TaskState::Cancel,
        ),
        ("compct.xcloud24_9876.0.1583392356000.Done", V1State::Done, "345ef1df.15833923.56000000.0", TaskState::Done),
    ];
    for (file, state, id, v2) in cases {
        let f = V1TaskFile::parse(file).unwrap();
        assert_eq!(f.state, state);
        assert_eq!(f.file_name(), file);
        assert_eq!(v2_id(&f.name).unwrap().to_string(), id);
        assert_eq!(v2_state(f.state), v2);
    }
    // The seed's drawing, with its placeholder hash.
    let n = V1Name::parse("compct.xcloud24_9876.0.1617693156000").unwrap();
    let id = TaskId::new(0xaaaaffff, n.unix_ms, n.seq).unwrap();
    assert_eq!(id.to_string(), "aaaaffff.16176931.56000000.0");
    assert_eq!(n.node.code(), 0x345ef1df);
}

#[test]
fn subtask_belongs_to_main_task_of_same_node_and_time() {
    let sub = parse_subtask_dir("compct.xcloud24_9876.1.1617606756000").unwrap();
    let main = V1TaskFile::parse("compct.xcloud24_9876.0.1617606756000.Assigned").unwrap();
    assert_eq!(sub.main_key(), main.name.main_key());
    assert!(parse_subtask_dir("compct.xcloud24_9876.1.1617606756000.Done").is_err());
}

#[test]
fn dotted_node_ids_and_bad_names() {
    let f = V1TaskFile::parse("compct.host-1.example.3.1617693156000.Done").unwrap();
    assert_eq!(f.name.node.as_str(), "host-1.example");
    assert_eq!(f.name.seq, 3);
    for bad in [
        "",
        "..",
        "../compct.x.0.1617693156000",
        "compct.x.0.1617693156000/..",
        "compct.x.0.1617693156000.Running",
        "compct.x.0.1617693156000.assigned",
        "compct.x.0.161769315600",
        "compct.x.0.16176931560000",
        "compct.x.01.1617693156000",
        "compct.x.-1.1617693156000",
        "compct..0.1617693156000",
        "compct.x y.0.1617693156000",
        "compct.x\n.0.1617693156000",
        "compct.x.0.1617693156000\0",
        "compct.0.1617693156000",
        "task.x.0.1617693156000",
        "compct.x.99999999999.1617693156000",
        "compct.x.0.0000000000000",
        "compct.表.0.1617693156000",
    ] {
        assert!(V1TaskFile::parse(bad).is_err(), "{bad:?} accepted");
    }
    let err = V1TaskFile::parse("compct.x.0.1617693156000.Running").unwrap_err();
    assert!(err.to_string().contains("unknown state suffix"), "{err}");
}

#[test]
fn seed_task_info_parses_with_legacy_spelling() {
    let info = parse_task_info(SEED_INFO.as_bytes()).unwrap();
    assert_eq!(info.task_id.as_deref(), Some("compct.xcloud24_9876.0.1617606756000"));
    assert!(info.sub_task_flag && !info.repeat_flag);
    assert_eq!(info.result.success_count, 1);
    assert_eq!(info.db_name.as_str(), "sales");
    assert_eq!(info.partition_name, None);
    let modern = SEED_INFO.replace("ResulttInfo", "ResultInfo");
    assert_eq!(parse_task_info(modern.as_bytes()).unwrap(), info);
    let crlf = SEED_INFO.replace('\n', "\r\n");
    assert_eq!(parse_task_info(crlf.as_bytes()).unwrap(), info);
}

#[test]
fn lenient_forms() {
    let text = "\u{feff}# comment\n---\nextra_key: whatever\ndb_name: 'd'  # trailing\n\
                schema_name: s\ntable_name: \"t\"\nRepeatInfo: {repeatCount: 3, repeatInterval: 60000}\n\
                repeat_flag: True\nno colon here\npartition_name: dt=2021-04-06\n";
    let info = parse_task_info(text.as_bytes()).unwrap();
    assert_eq!(info.repeat.repeat_count, 3);
    assert_eq!(info.repeat.repeat_interval, 60000);
    assert!(info.repeat_flag);
    assert_eq!(info.table_name.as_str(), "t");
    assert_eq!(info.partition_name.unwrap().as_str(), "dt=2021-04-06");
    assert_eq!(info.result, ResultInfo::default());
}

#[test]
fn strict_validation() {
    let base = "db_name: d\nschema_name: s\ntable_name: t\n";
    assert!(parse_task_info(base.as_bytes()).is_ok());
    for (extra, want) in [
        ("db_name: ../etc\n", "Duplicate"),
        ("repeatCount: -1\n", "BadValue"),
        ("repeatCount: 1e3\n", "BadValue"),
        ("successCount: 99999999999999999999999\n", "BadValue"),
        ("repeat_flag: maybe\n", "BadValue"),
        ("partition_name: a/b\n", "BadValue"),
    ] {
        let e = parse_task_info(format!("{base}{extra}").as_bytes()).unwrap_err();
        assert!(format!("{e:?}").starts_with(want), "{extra:?}: {e:?}");
    }
    assert_eq!(parse_task_info(b"db_name: d\nschema_name: s\n").unwrap_err(), V1Error::Missing("table_name"));
    assert_eq!(
        parse_task_info(b"db_name: ..\nschema_name: s\ntable_name: t").unwrap_err(),
        V1Error::BadValue {
            key: "db_name",
            value: "..".into(),
            reason: crate::name::NameError::Dots("..".into()).to_string()
        }
    );
    assert_eq!(parse_task_info(b"\xff\xfe").unwrap_err(), V1Error::NotUtf8);
    let big = vec![b'#'; MAX_V1_FILE_BYTES + 1];
    assert_eq!(parse_task_info(&big).unwrap_err(), V1Error::TooLarge(MAX_V1_FILE_BYTES + 1));
}

#[test]
fn upgrade_task_maps_and_checks_ids() {
    let file = V1TaskFile::parse("compct.xcloud24_9876.0.1617606756000.Assigned").unwrap();
    let info = parse_task_info(SEED_INFO.as_bytes()).unwrap();
    let mut subs = SubtaskTally::default();
    subs.add(SubtaskState::Success, Name::parse("p1").ok());
    subs.add(SubtaskState::Running, Name::parse("p3").ok());
    subs.add(SubtaskState::Init, Name::parse("p2").ok());
    subs.add(SubtaskState::Init, Name::parse("p2").ok());
    subs.add(SubtaskState::Failed, Name::parse("p4").ok());
    let up = upgrade_task(&file, &info, &subs).unwrap();
    assert_eq!(up.info.id.to_string(), "345ef1df.16176067.56000000.0");
    assert_eq!(up.info.state, "Init");
    assert_eq!(up.info.result.success_count, 2);
    assert_eq!(up.info.result.failed_count, 1);
    assert_eq!(up.info.run.partitions.iter().map(Name::as_str).collect::<Vec<_>>(), ["p2", "p3"]);
    assert_eq!(up.upgraded_from.as_str(), "compct.xcloud24_9876.0.1617606756000.Assigned");
    assert!(same_origin(&up, &file));
    let later = V1TaskFile::parse("compct.xcloud24_9876.0.1617606756000.Done").unwrap();
    assert!(same_origin(&up, &later));
    let other = V1TaskFile::parse("compct.xcloud24_9876.1.1617606756000").unwrap();
    assert!(!same_origin(&up, &other));
    // Deterministic: same input, same bytes.
    assert_eq!(crate::formats::encode(&up), crate::formats::encode(&upgrade_task(&file, &info, &subs).unwrap()));
    // The file format round-trips, and plain TaskInfo readers accept it.
    let bytes = crate::formats::encode(&up);
    let back: UpgradedTaskInfo = crate::formats::decode(&bytes).unwrap();
    assert_eq!(back, up);
    let plain: TaskInfo = crate::formats::decode(&bytes).unwrap();
    assert_eq!(plain, up.info);
    // A whole-table open subtask empties the list (empty = everything).
    subs.add(SubtaskState::Init, None);
    assert!(upgrade_task(&file, &info, &subs).unwrap().info.run.partitions.is_empty());
    // CompactTaskId must name this task.
    let other_file = V1TaskFile::parse("compct.xcloud24_9876.0.1617693156000").unwrap();
    assert!(matches!(upgrade_task(&other_file, &info, &subs), Err(V1Error::IdMismatch { .. })));
}

/// Deterministic xorshift, so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let alphabet: &[u8] = b"compct.xcloud_9876:01234567890 \t\n\r#'\"{},-/\\.AssignedDoneCancel\0\xff\xc3\xa9";
    let valid_name = b"compct.xcloud24_9876.0.1617606756000.Assigned";
    for round in 0..20_000 {
        // Random bytes from a hostile alphabet, or a mutated valid input.
        let base: &[u8] = if round % 2 == 0 { SEED_INFO.as_bytes() } else { valid_name };
        let mut bytes = if round % 3 == 0 {
            (0..rng.below(80)).map(|_| alphabet[rng.below(alphabet.len())]).collect::<Vec<u8>>()
        } else {
            base.to_vec()
        };
        for _ in 0..rng.below(6) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(3) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 if at < bytes.len() => bytes[at] = alphabet[rng.below(alphabet.len())],
                _ => bytes.insert(at, alphabet[rng.below(alphabet.len())]),
            }
        }
        if let Ok(info) = parse_task_info(&bytes) {
            // Whatever parses is valid.
            for n in [&info.db_name, &info.schema_name, &info.table_name] {
                assert!(Name::parse(n.as_str()).is_ok());
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(f) = V1TaskFile::parse(&text) {
            // Whatever parses round-trips and maps.
            assert_eq!(f.file_name(), text);
            assert!(v2_id(&f.name).is_ok());
            assert!(Name::parse(&f.file_name()).is_ok());
        }
        let _ = parse_subtask_dir(&text);
    }
}
