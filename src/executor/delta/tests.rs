use std::sync::Arc;

use ::parquet::basic::Compression;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::vectors::tests::inline as inline_dv;
use super::*;

const TABLE: &str = "db/s/t/";

fn job(attempt: u32) -> DeltaJob {
    let options = parquet::ParquetOptions::for_target(1 << 20, Compression::UNCOMPRESSED);
    DeltaJob {
        merge: MergeJob {
            dir: TABLE.into(),
            task: "aaaaffff.16176931.56000000.0".into(),
            round: 1,
            attempt,
            target_size: 1 << 20,
            delay_before_commit: std::time::Duration::ZERO,
            min_age: std::time::Duration::ZERO,
            fence: None,
            now: std::time::UNIX_EPOCH,
            format: Format::Parquet(options),
            io: Default::default(),
        },
        partition: "p=1".into(),
        clock: crate::clock::ManualClock::new(),
    }
}

fn parquet_file(ids: std::ops::Range<i64>) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(ids))]).unwrap();
    let mut out = vec![];
    let mut w = ::parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    out
}

fn add(path: &str, size: usize) -> String {
    json!({"add": {"path": path, "partitionValues": {"p": "1"}, "size": size, "modificationTime": 1,
        "dataChange": true}})
    .to_string()
}

/// Version 0 (protocol, metadata) and one append per file, 10 rows each.
async fn table(store: &Store, files: usize) -> Vec<String> {
    let v0 = [
        json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}).to_string(),
        json!({"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}},
            "schemaString": "{}", "partitionColumns": ["p"], "configuration": {}}})
        .to_string(),
    ];
    store.put(&log::commit_path(TABLE, 0), v0.join("\n").into_bytes()).await.unwrap();
    let mut paths = vec![];
    for f in 0..files {
        let path = format!("p=1/part-{f}.parquet");
        let bytes = parquet_file(f as i64 * 10..f as i64 * 10 + 10);
        let size = bytes.len();
        store.put(&format!("{TABLE}{path}"), bytes).await.unwrap();
        store.put(&log::commit_path(TABLE, f as u64 + 1), add(&path, size).into_bytes()).await.unwrap();
        paths.push(path);
    }
    paths
}

fn info(read: u64) -> serde_json::Value {
    json!({"commitInfo": {"timestamp": 5, "operation": "OPTIMIZE", "readVersion": read, "compactd": job(1).marker()}})
}

/// A unit's commit body: its commitInfo (read version 2), then `lines`.
fn body(lines: &[String]) -> Body {
    Body { info: info(2), removes: lines.to_vec(), adds: vec![], fresh: None }
}

#[tokio::test]
async fn an_append_in_between_does_not_conflict_and_the_unit_takes_the_next_version() {
    let store = Store::memory().await;
    let inputs: BTreeSet<String> = table(&store, 2).await.into_iter().collect();
    store.put(&log::commit_path(TABLE, 3), add("p=1/other.parquet", 5).into_bytes()).await.unwrap();
    let lines = vec![json!({"remove": {"path": "p=1/part-0.parquet", "dataChange": false}}).to_string()];
    let landed = commit(&store, &job(1), 2, &inputs, body(&lines)).await.unwrap();
    assert_eq!(landed, Landed::Committed { version: 4, retries: 1 });
    let snap = log::load(&store, TABLE).await.unwrap();
    assert_eq!(snap.version, 4);
    assert!(snap.files.contains_key("p=1/other.parquet"), "the append is kept");
}

#[tokio::test]
async fn a_commit_that_removed_an_input_or_changed_the_schema_abandons_the_unit() {
    for winner in [
        json!({"remove": {"path": "p=1/part-1.parquet", "dataChange": true}}).to_string(),
        json!({"metaData": {"id": "x", "partitionColumns": ["q"], "configuration": {}}}).to_string(),
        json!({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"]}})
        .to_string(),
    ] {
        let store = Store::memory().await;
        let inputs: BTreeSet<String> = table(&store, 2).await.into_iter().collect();
        store.put(&log::commit_path(TABLE, 3), winner.clone().into_bytes()).await.unwrap();
        let landed = commit(&store, &job(1), 2, &inputs, body(&[])).await.unwrap();
        assert!(matches!(landed, Landed::Conflict { version: 3, .. }), "{winner}: {landed:?}");
        assert!(!store.exists(&log::commit_path(TABLE, 4)).await.unwrap(), "{winner}: committed anyway");
    }
}

#[tokio::test]
async fn a_version_holding_this_units_own_commit_is_its_commit() {
    // A create whose reply was lost and whose retry found the name taken.
    let store = Store::memory().await;
    let inputs: BTreeSet<String> = table(&store, 2).await.into_iter().collect();
    store.put(&log::commit_path(TABLE, 3), info(2).to_string().into_bytes()).await.unwrap();
    let landed = commit(&store, &job(1), 2, &inputs, body(&[])).await.unwrap();
    assert_eq!(landed, Landed::Committed { version: 3, retries: 0 });
    assert!(!store.exists(&log::commit_path(TABLE, 4)).await.unwrap());
}

#[tokio::test]
async fn a_unit_compacts_once_and_its_rerun_reports_the_same_commit() {
    let store = Store::memory().await;
    table(&store, 4).await;
    let (out, stats) = run(&store, &job(1)).await.unwrap();
    assert_eq!(out, Outcome::Committed { version_before: 4, version_after: 5, retries: 0 }, "{stats:?}");
    assert_eq!((stats["files_in"], stats["rows_in"], stats["rows_out"]), (4, 40, 40), "{stats:?}");
    let snap = log::load(&store, TABLE).await.unwrap();
    assert_eq!(snap.files.len(), 1, "{:?}", snap.files.keys());
    let only = snap.files.values().next().unwrap();
    assert!(only.path.starts_with("p=1/compactd-"), "{only:?}");
    // The table's schema string says nothing: numRecords only.
    let committed = log::read_commit(&store, TABLE, 5).await.unwrap().unwrap();
    assert!(committed.iter().any(|a| a.add.as_ref().is_some_and(|a| a.path == only.path)));
    let raw = String::from_utf8(store.read(&log::commit_path(TABLE, 5)).await.unwrap().unwrap().to_vec()).unwrap();
    assert!(raw.contains(r#""stats":"{\"numRecords\":40}""#), "{raw}");
    // The next attempt of the round (its node died before reporting).
    let (again, stats) = run(&store, &job(2)).await.unwrap();
    assert_eq!(again, Outcome::AlreadyCommitted { version: 5 });
    // It reports what the commit did, from the commit: the version its
    // attempt read, and its figures.
    let want = [("version_before", 4), ("version_after", 5), ("files_in", 4), ("files_out", 1), ("rows_in", 40)];
    for (k, v) in want {
        assert_eq!(stats.get(k), Some(&v), "{k}: {stats:?}");
    }
    assert_eq!(stats["rows_out"], 40);
    assert_eq!(log::load(&store, TABLE).await.unwrap().version, 5, "committed twice");
}

#[tokio::test]
async fn tables_needing_writer_features_compactd_lacks_are_refused_before_anything_is_written() {
    for protocol in [
        json!({"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors", "v2Checkpoint"],
            "writerFeatures": ["deletionVectors", "v2Checkpoint"]}),
        json!({"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"],
            "writerFeatures": ["columnMapping", "rowTracking", "domainMetadata", "inCommitTimestamp"]}),
        json!({"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["icebergCompatV2", "appendOnly"]}),
        json!({"minReaderVersion": 4, "minWriterVersion": 8}),
    ] {
        let store = Store::memory().await;
        table(&store, 3).await;
        store.put(&log::commit_path(TABLE, 4), json!({"protocol": protocol}).to_string().into_bytes()).await.unwrap();
        let err = run(&store, &job(1)).await.unwrap_err().to_string();
        assert!(err.contains("db/s/t/"), "{protocol}: {err}");
        assert!(!store.exists(&log::commit_path(TABLE, 5)).await.unwrap(), "{protocol}");
        let written: Vec<_> = store.list(&format!("{TABLE}p=1/")).await.unwrap();
        assert!(written.iter().all(|e| !e.name().starts_with("compactd-")), "{protocol}: {written:?}");
    }
    // Features that do not constrain a rewrite are fine.
    let store = Store::memory().await;
    table(&store, 3).await;
    let ok = json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "invariants", "checkConstraints"]}});
    store.put(&log::commit_path(TABLE, 4), ok.to_string().into_bytes()).await.unwrap();
    assert!(matches!(run(&store, &job(1)).await.unwrap().0, Outcome::Committed { .. }));
}

#[tokio::test]
async fn a_log_with_a_gap_or_a_bad_line_fails_naming_it() {
    let store = Store::memory().await;
    table(&store, 3).await;
    store.delete(&log::commit_path(TABLE, 2)).await.unwrap();
    let err = log::load(&store, TABLE).await.unwrap_err().to_string();
    assert!(err.contains("no commit 2"), "{err}");
    store.put(&log::commit_path(TABLE, 2), b"{\"add\": 5}\n".to_vec()).await.unwrap();
    let err = log::load(&store, TABLE).await.unwrap_err().to_string();
    assert!(err.contains("00000000000000000002.json") && err.contains("line 1"), "{err}");
    let err = log::load(&Store::memory().await, TABLE).await.unwrap_err().to_string();
    assert!(err.contains("not a Delta table"), "{err}");
}

#[tokio::test]
async fn a_remove_matches_its_add_however_the_path_is_encoded() {
    let store = Store::memory().await;
    table(&store, 3).await;
    // Another writer removed part-1 naming it encoded (`=` as %3D).
    let rm = json!({"remove": {"path": "p%3D1/part-1.parquet", "dataChange": true}}).to_string();
    store.put(&log::commit_path(TABLE, 4), rm.into_bytes()).await.unwrap();
    let snap = log::load(&store, TABLE).await.unwrap();
    assert_eq!(snap.files.len(), 2, "{:?}", snap.files.keys());
    let (out, stats) = run(&store, &job(1)).await.unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(stats["rows_in"], 20, "the removed file's rows came back: {stats:?}");
}

#[tokio::test]
async fn orphans_are_not_named_in_a_table_whose_log_this_reader_cannot_fully_read() {
    let store = Store::memory().await;
    table(&store, 2).await;
    store.put(&format!("{TABLE}p=1/compactd-x-r1-u0-a1-0.parquet"), b"x".to_vec()).await.unwrap();
    assert_eq!(orphans::find(&store, TABLE).await.unwrap().len(), 1);
    // A V2 checkpoint could be the only place naming a live file.
    store.put(&format!("{TABLE}_delta_log/00000000000000000002.checkpoint.0a1b.json"), b"{}".to_vec()).await.unwrap();
    let err = orphans::find(&store, TABLE).await.unwrap_err().to_string();
    assert!(err.contains("does not read"), "{err}");
}

#[tokio::test]
async fn an_earlier_attempt_of_the_round_that_committed_first_is_reported_already_committed() {
    let store = Store::memory().await;
    let inputs: BTreeSet<String> = table(&store, 2).await.into_iter().collect();
    // Attempt 1 took version 3 (removing the same inputs) while attempt 2 ran.
    let mut first = info(2);
    first["commitInfo"]["compactd"] = job(1).marker();
    let lines = [first.to_string(), json!({"remove": {"path": "p=1/part-0.parquet", "dataChange": false}}).to_string()];
    store.put(&log::commit_path(TABLE, 3), lines.join("\n").into_bytes()).await.unwrap();
    let second = job(2);
    let mut mine = body(&[]);
    mine.info["commitInfo"]["compactd"] = second.marker();
    let landed = commit(&store, &second, 2, &inputs, mine).await.unwrap();
    assert_eq!(landed, Landed::OtherAttempt { version: 3 });
    // Another round's commit of the same unit is a conflict like any other.
    let mut other_round = job(1);
    other_round.merge.round = 2;
    let mut theirs = body(&[]);
    theirs.info["commitInfo"]["compactd"] = other_round.marker();
    let landed = commit(&store, &other_round, 2, &inputs, theirs).await.unwrap();
    assert!(matches!(landed, Landed::Conflict { version: 3, .. }), "{landed:?}");
    // Run end to end: attempt 2 read version 2, attempt 1 commits first.
    let store = Store::memory().await;
    table(&store, 4).await;
    let mut slow = job(2);
    slow.merge.delay_before_commit = std::time::Duration::from_millis(1000);
    let late = tokio::spawn({
        let store = store.clone();
        async move { run(&store, &slow).await }
    });
    // Attempt 1 runs once attempt 2 has written its outputs (it read version
    // 4 before) and while it waits before its commit.
    while !store.list(&format!("{TABLE}p=1/")).await.unwrap().iter().any(|e| e.name().contains("-a2-")) {
        tokio::task::yield_now().await;
    }
    let (out, landed) = run(&store, &job(1)).await.unwrap();
    assert_eq!(out, Outcome::Committed { version_before: 4, version_after: 5, retries: 0 });
    let (out, stats) = late.await.unwrap().unwrap();
    assert_eq!(out, Outcome::AlreadyCommitted { version: 5 }, "{stats:?}");
    // The figures of the commit that landed (attempt 1's), not its own.
    let mut want = landed.clone();
    want.remove("commit_retries");
    assert_eq!(stats, want, "attempt 1 reported {landed:?}");
    assert_eq!(log::load(&store, TABLE).await.unwrap().version, 5, "committed twice");
    let left: Vec<String> = store.list(&format!("{TABLE}p=1/")).await.unwrap().into_iter().map(|e| e.path).collect();
    assert!(left.iter().all(|p| !p.contains("-a2-")), "attempt 2's files are left: {left:?}");
}

#[tokio::test]
async fn commit_timestamps_come_from_the_clock_at_commit_time_and_never_go_below_the_previous_commits() {
    let store = Store::memory().await;
    table(&store, 4).await;
    let clock = crate::clock::ManualClock::new();
    let mut j = job(1);
    j.clock = clock.clone();
    j.merge.now = std::time::UNIX_EPOCH; // the process start: not used
    clock.set_wall_ms(1_800_000_000_000);
    run(&store, &j).await.unwrap();
    let actions = log::read_commit(&store, TABLE, 5).await.unwrap().unwrap();
    assert_eq!(log::commit_timestamp(&actions), Some(1_800_000_000_000));
    let text = String::from_utf8(store.read(&log::commit_path(TABLE, 5)).await.unwrap().unwrap().to_vec()).unwrap();
    assert_eq!(text.matches("1800000000000").count(), 1 + 4 + 1, "commitInfo, 4 removes, 1 add: {text}");
    // The next commit of the table has a timestamp ahead of this clock.
    let store = Store::memory().await;
    table(&store, 4).await;
    let ahead = json!({"commitInfo": {"timestamp": 1_900_000_000_000i64, "operation": "WRITE"}});
    let other = parquet_file(1000..1010);
    let add5 = add("p=1/other.parquet", other.len());
    store.put(&format!("{TABLE}p=1/other.parquet"), other).await.unwrap();
    store.put(&log::commit_path(TABLE, 5), format!("{ahead}\n{add5}").into_bytes()).await.unwrap();
    run(&store, &j).await.unwrap();
    let actions = log::read_commit(&store, TABLE, 6).await.unwrap().unwrap();
    assert_eq!(log::commit_timestamp(&actions), Some(1_900_000_000_000), "read version's time");
    // A version taken while the unit ran, with a later time: stepped over, its time kept.
    let inputs: BTreeSet<String> = ["p=1/part-0.parquet".to_string()].into();
    let later = json!({"commitInfo": {"timestamp": 1_950_000_000_000i64, "operation": "WRITE"}});
    store.put(&log::commit_path(TABLE, 7), format!("{later}\n{add5}").into_bytes()).await.unwrap();
    let landed = commit(&store, &j, 6, &inputs, body(&[])).await.unwrap();
    assert_eq!(landed, Landed::Committed { version: 8, retries: 1 });
    let actions = log::read_commit(&store, TABLE, 8).await.unwrap().unwrap();
    assert_eq!(log::commit_timestamp(&actions), Some(1_950_000_000_000));
}

#[tokio::test]
async fn an_output_removed_before_the_commit_fails_the_unit_naming_it_and_nothing_is_committed() {
    let store = Store::memory().await;
    table(&store, 4).await;
    let mut j = job(1);
    j.merge.delay_before_commit = std::time::Duration::from_millis(300);
    let unit = tokio::spawn({
        let store = store.clone();
        async move { run(&store, &j).await }
    });
    // Wait for the output, then remove it as `vacuum-orphans` would.
    let output = loop {
        let files = store.list(&format!("{TABLE}p=1/")).await.unwrap();
        if let Some(f) = files.into_iter().find(|e| e.name().starts_with("compactd-")) {
            break f.path;
        }
        tokio::task::yield_now().await;
    };
    store.delete(&output).await.unwrap();
    let err = unit.await.unwrap().unwrap_err().to_string();
    assert!(err.contains(&output) && err.contains("vanished"), "{err}");
    assert!(!store.exists(&log::commit_path(TABLE, 5)).await.unwrap(), "a version names a missing file");
}

#[tokio::test]
async fn a_new_vector_on_a_file_replaces_its_old_one_in_either_order() {
    let dv = inline_dv(&[1]);
    let off = json!({"remove": {"path": "p=1/part-0.parquet", "dataChange": true}});
    let on = json!({"add": {"path": "p=1/part-0.parquet", "partitionValues": {"p": "1"}, "size": 1,
        "dataChange": true, "deletionVector": dv}});
    for pair in [[&off, &on], [&on, &off]] {
        let store = Store::memory().await;
        table(&store, 2).await;
        let lines: Vec<String> = pair.iter().map(|a| a.to_string()).collect();
        store.put(&log::commit_path(TABLE, 3), lines.join("\n").into_bytes()).await.unwrap();
        let snap = log::load(&store, TABLE).await.unwrap();
        let f = snap.files.get("p=1/part-0.parquet").expect("the file stays, with its new vector");
        assert_eq!(f.deletion_vector.as_ref(), Some(&dv));
    }
}

#[tokio::test]
async fn a_unit_applies_its_inputs_vectors_and_its_removes_name_them() {
    let store = Store::memory().await;
    table(&store, 3).await;
    // A DELETE of ids 11, 12 and 19 (rows 1, 2 and 9 of part-1).
    let dv = inline_dv(&[1, 2, 9]);
    let size = store.stat(&format!("{TABLE}p=1/part-1.parquet")).await.unwrap().unwrap().len;
    let delete = [
        json!({"remove": {"path": "p=1/part-1.parquet", "dataChange": true}}),
        json!({"add": {"path": "p=1/part-1.parquet", "partitionValues": {"p": "1"}, "size": size,
            "dataChange": true, "stats": "{\"numRecords\":10}", "deletionVector": dv}}),
    ];
    let lines: Vec<String> = delete.iter().map(|a| a.to_string()).collect();
    store.put(&log::commit_path(TABLE, 4), lines.join("\n").into_bytes()).await.unwrap();
    let (out, stats) = run(&store, &job(1)).await.unwrap();
    assert!(matches!(out, Outcome::Committed { version_after: 5, .. }), "{out:?}");
    assert_eq!((stats["rows_in"], stats["rows_out"], stats["rows_deleted"]), (30, 27, 3), "{stats:?}");
    let snap = log::load(&store, TABLE).await.unwrap();
    assert_eq!(snap.files.len(), 1);
    let only = snap.files.values().next().unwrap();
    assert_eq!(only.deletion_vector, None, "a rewritten file carries no vector");
    let bytes = store.read(&log::data_path(TABLE, &only.path).unwrap()).await.unwrap().unwrap();
    let ids: Vec<i64> = ::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024)
        .unwrap()
        .flat_map(|b| b.unwrap().column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
        .collect();
    let want: Vec<i64> = (0..30).filter(|i| ![11, 12, 19].contains(i)).collect();
    assert_eq!(ids, want);
    let committed =
        String::from_utf8(store.read(&log::commit_path(TABLE, 5)).await.unwrap().unwrap().to_vec()).unwrap();
    let removes: Vec<serde_json::Value> = committed
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?.get("remove").cloned())
        .collect();
    let with_dv: Vec<_> = removes.iter().filter(|r| r.get("deletionVector").is_some()).collect();
    assert_eq!(with_dv.len(), 1, "{committed}");
    assert_eq!(with_dv[0]["path"], "p=1/part-1.parquet");
    assert_eq!(with_dv[0]["deletionVector"], dv);
}

#[tokio::test]
async fn a_file_whose_vector_deletes_enough_is_rewritten_alone() {
    let store = Store::memory().await;
    table(&store, 1).await;
    let size = store.stat(&format!("{TABLE}p=1/part-0.parquet")).await.unwrap().unwrap().len;
    let delete = [
        json!({"remove": {"path": "p=1/part-0.parquet", "dataChange": true}}),
        json!({"add": {"path": "p=1/part-0.parquet", "partitionValues": {"p": "1"}, "size": size,
            "dataChange": true, "stats": "{\"numRecords\":10}", "deletionVector": inline_dv(&[0])}}),
    ];
    let lines: Vec<String> = delete.iter().map(|a| a.to_string()).collect();
    store.put(&log::commit_path(TABLE, 2), lines.join("\n").into_bytes()).await.unwrap();
    assert_eq!(partitions_to_compact(&store, TABLE, 1 << 20).await.unwrap(), vec!["p=1".to_string()]);
    let (out, stats) = run(&store, &job(1)).await.unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!((stats["files_in"], stats["rows_out"]), (1, 9), "{stats:?}");
}

#[tokio::test]
async fn a_vector_put_on_an_input_meanwhile_abandons_the_unit() {
    let store = Store::memory().await;
    let inputs: BTreeSet<String> = table(&store, 2).await.into_iter().collect();
    let winner = [
        json!({"remove": {"path": "p=1/part-1.parquet", "dataChange": true}}).to_string(),
        json!({"add": {"path": "p=1/part-1.parquet", "partitionValues": {"p": "1"}, "size": 1, "dataChange": true,
            "deletionVector": inline_dv(&[0])}})
        .to_string(),
    ];
    store.put(&log::commit_path(TABLE, 3), winner.join("\n").into_bytes()).await.unwrap();
    let landed = commit(&store, &job(1), 2, &inputs, body(&[])).await.unwrap();
    match landed {
        Landed::Conflict { version: 3, why } => assert!(why.contains("deletion vector"), "{why}"),
        other => panic!("{other:?}"),
    }
}
