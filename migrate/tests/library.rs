//! Library tests of the upgrader on the in-memory backend.

use std::path::{Path, PathBuf};

use compactd_migrate as migrate;
use layouts::formats::{self, UpgradePhase, UpgradedTaskInfo};
use migrate::{Mode, Options, Outcome, Report, TaskEvent};
use store::testing::snapshot;
use store::{Created, Store};

fn seed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/v1-seed")
}

async fn load_dir(store: &Store, dir: &Path) {
    let files = store::testing::local_files(dir);
    for (p, b) in files {
        assert_eq!(store.create(&p, b).await.unwrap(), Created::Created);
    }
}

async fn run(store: &Store, mode: Mode) -> Report {
    run_with(store, mode, false).await
}

async fn run_with(store: &Store, mode: Mode, force: bool) -> Report {
    let opts = Options { mode, concurrency: 4, force, ..Options::default() };
    migrate::run(store, &opts, &|_: &TaskEvent| {}).await.unwrap()
}

const SEED_V2: &[(&str, &str)] = &[
    ("345ef1df.15833923.56000000.0", "Done"),
    ("345ef1df.16149283.56000000.0", "Cancel"),
    ("345ef1df.16176067.56000000.0", "Init"),
    ("345ef1df.16176931.56000000.0", "Init"),
];

const SEED_V1: &[&str] = &[
    "compct.xcloud24_9876.0.1583392356000.Done",
    "compct.xcloud24_9876.0.1614928356000.Cancel",
    "compct.xcloud24_9876.0.1617606756000.Assigned",
    "compct.xcloud24_9876.0.1617693156000",
];

#[tokio::test]
async fn seed_tree_upgrades_to_the_seed_picture_and_finalizes() {
    let store = Store::memory().await;
    load_dir(&store, &seed_dir()).await;
    let v1_before = snapshot(&store, "Compaction/").await;
    assert!(
        migrate::upgrade_in_progress(&store).await.unwrap().is_some(),
        "a never-upgraded v1 tree blocks the daemon"
    );

    let plan = run(&store, Mode::DryRun).await;
    assert_eq!((plan.v1_tasks, plan.would_migrate, plan.failed), (4, 4, 0));
    assert!(snapshot(&store, "Compaction_V2/").await.is_empty(), "dry run wrote");

    let r = run(&store, Mode::Apply).await;
    assert_eq!((r.v1_tasks, r.migrated, r.already_done, r.failed), (4, 4, 0, 0));
    assert_eq!((r.subtasks, r.subtasks_finished, r.orphans), (1, 1, 0));
    assert!(r.is_clean());
    assert_eq!(r.state, Some(UpgradePhase::Complete));

    let mut want: Vec<String> = Vec::new();
    for (id, state) in SEED_V2 {
        want.push(format!("Compaction_V2/Scheduler/{id}/Status.{state}"));
        want.push(format!("Compaction_V2/Scheduler/{id}/TaskInfo.pc.db"));
    }
    for f in SEED_V1 {
        want.push(format!("Compaction_V2/TaskUpgradeLock/{f}.lock"));
    }
    want.push("Compaction_V2/TaskUpgradeLock/UpgradeState.json".into());
    want.sort();
    let v2 = snapshot(&store, "Compaction_V2/").await;
    let got: Vec<String> = v2.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(got, want);
    assert_eq!(snapshot(&store, "Compaction/").await, v1_before, "v1 touched");

    // Task 2 carries its finished subtask in its result counts.
    let info: UpgradedTaskInfo = formats::decode(
        &store.read("Compaction_V2/Scheduler/345ef1df.16176067.56000000.0/TaskInfo.pc.db").await.unwrap().unwrap(),
    )
    .unwrap();
    assert_eq!(info.info.result.success_count, 1);
    assert_eq!(info.info.table_name.as_str(), "events");
    assert!(info.info.repeat_flag);
    assert_eq!(info.upgraded_from.as_str(), SEED_V1[2]);
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None);

    // A rerun changes nothing.
    let r2 = run(&store, Mode::Apply).await;
    assert_eq!((r2.migrated, r2.already_done), (0, 4));
    assert_eq!(snapshot(&store, "Compaction_V2/").await, v2);

    let v = run(&store, Mode::Verify).await;
    assert_eq!((v.verified, v.unmigrated, v.failed), (4, 0, 0));
    assert!(v.is_clean());
    assert_eq!(snapshot(&store, "Compaction_V2/").await, v2, "verify wrote");

    let f = run(&store, Mode::Finalize).await;
    assert!(f.refused.is_none(), "{:?}", f.refused);
    assert!(snapshot(&store, "Compaction/").await.is_empty());
    let left: Vec<String> = snapshot(&store, "Compaction_V2/").await.into_iter().map(|(p, _)| p).collect();
    assert_eq!(left.len(), 8);
    assert!(left.iter().all(|p| p.starts_with("Compaction_V2/Scheduler/")));
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None);
    // Finalize again is a no-op.
    assert!(run(&store, Mode::Finalize).await.refused.is_none());
}

#[tokio::test]
async fn bad_input_is_reported_and_left_untouched() {
    let store = Store::memory().await;
    load_dir(&store, &seed_dir()).await;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("Compaction/Scheduler/compct.xcloud24_9876.0.1617000000000", b"db_name: d\n".to_vec()),
        (
            "Compaction/Scheduler/compct.xcloud24_9876.0.1617000001000.Running",
            b"db_name: d\nschema_name: s\ntable_name: t\n".to_vec(),
        ),
        ("Compaction/Scheduler/notatask", b"x".to_vec()),
        ("Compaction/Scheduler/compct.xcloud24_9876.0.1617000002000", vec![b'#'; layouts::v1::MAX_V1_FILE_BYTES + 1]),
        ("Compaction/Scheduler/compct.xcloud24_9876.0.1617000003000", b"\xff\xfe\x00".to_vec()),
        ("Compaction/Scheduler/compct.xcloud24_9876.0.1617000004000/inner", b"folder".to_vec()),
        (
            "Compaction/Scheduler/compct.xcloud24_9876.0.1617000005000",
            b"CompactTaskId: compct.other.0.1617000005000\ndb_name: d\nschema_name: s\ntable_name: t\n".to_vec(),
        ),
        // An orphan subtask, and entries that are not subtasks.
        ("Compaction/TaskAssigned/xcloud25_9876/compct.xcloud99_9876.1.1617000009000/Status.Success", Vec::new()),
        ("Compaction/TaskAssigned/straycfile", Vec::new()),
        ("Compaction/TaskAssigned/xcloud25_9876/stray", Vec::new()),
        ("Compaction/TaskAssigned/xcloud25_9876/compct.bad/Status.Init", Vec::new()),
    ];
    for (p, b) in &bad {
        store.create(p, b.clone()).await.unwrap();
    }
    let v1_before = snapshot(&store, "Compaction/").await;
    let r = run(&store, Mode::Apply).await;
    assert_eq!(r.migrated, 4, "{r:#?}");
    assert_eq!(r.failed, 7, "{r:#?}");
    assert_eq!(r.orphans, 1, "{r:#?}");
    assert_eq!(r.problems, 3, "{r:#?}");
    assert!(!r.is_clean());
    let reasons: Vec<String> = r.failures.iter().map(|i| i.to_string()).collect();
    for want in [
        "task info has no",
        "unknown state suffix",
        "does not start with",
        "over the",
        "not UTF-8",
        "a folder where",
        "CompactTaskId",
    ] {
        assert!(reasons.iter().any(|r| r.contains(want)), "{want} not in {reasons:#?}");
    }
    assert!(r.failures.iter().all(|i| i.path.starts_with("Compaction/Scheduler/")));
    assert_eq!(snapshot(&store, "Compaction/").await, v1_before, "v1 touched");
    // Some task files are not migrated: the root stays half upgraded until
    // they are fixed (and migrated) or removed by a forced finalize.
    assert_eq!(r.state, Some(UpgradePhase::Running));
    assert!(migrate::upgrade_in_progress(&store).await.unwrap().is_some());
    let f = run(&store, Mode::Finalize).await;
    assert!(f.refused.as_deref().unwrap().contains("--force"), "{:?}", f.refused);
    assert_eq!(snapshot(&store, "Compaction/").await, v1_before);
    let f = run_with(&store, Mode::Finalize, true).await;
    assert!(f.refused.is_none());
    assert!(snapshot(&store, "Compaction/").await.is_empty());
}

#[tokio::test]
async fn open_subtasks_are_carried_and_broken_ones_block_their_task() {
    let store = Store::memory().await;
    let main = "Compaction/Scheduler/compct.n1.0.1617000000000.Assigned";
    store.create(main, b"db_name: d\nschema_name: s\ntable_name: t\nsuccessCount: 2\n".to_vec()).await.unwrap();
    let sub = |w: &str, k: u32| format!("Compaction/TaskAssigned/{w}/compct.n1.{k}.1617000000000");
    let info = |p: &str| format!("db_name: d\nschema_name: s\ntable_name: t\npartition_name: {p}\n").into_bytes();
    store.create(&format!("{}/Status.Running", sub("w1", 1)), Vec::new()).await.unwrap();
    store.create(&format!("{}/TaskInfo", sub("w1", 1)), info("p1")).await.unwrap();
    store.create(&format!("{}/TaskInfo", sub("w2", 2)), info("p2")).await.unwrap(); // no marker: open
    store.create(&format!("{}/Status.Success", sub("w3", 3)), Vec::new()).await.unwrap();
    store.create(&format!("{}/Status.Failed", sub("w3", 4)), Vec::new()).await.unwrap();
    let r = run(&store, Mode::Apply).await;
    assert_eq!((r.migrated, r.subtasks, r.subtasks_open, r.subtasks_finished), (1, 4, 2, 2));
    let id = migrate::v2_id_of("compct.n1.0.1617000000000.Assigned").unwrap();
    let got: UpgradedTaskInfo =
        formats::decode(&store.read(&layouts::v2::task_info(&id)).await.unwrap().unwrap()).unwrap();
    let parts: Vec<&str> = got.info.run.partitions.iter().map(|p| p.as_str()).collect();
    assert_eq!(parts, ["p1", "p2"]);
    assert_eq!((got.info.result.success_count, got.info.result.failed_count), (3, 1));

    // A second task whose open subtask has an unreadable TaskInfo is not
    // migrated (its subtask would be lost), and is reported.
    let main2 = "Compaction/Scheduler/compct.n1.0.1617000001000.Assigned";
    store.create(main2, b"db_name: d\nschema_name: s\ntable_name: t\n".to_vec()).await.unwrap();
    store.create("Compaction/TaskAssigned/w1/compct.n1.1.1617000001000/TaskInfo", b"garbage".to_vec()).await.unwrap();
    let r = run(&store, Mode::Apply).await;
    assert_eq!((r.migrated, r.already_done, r.failed), (0, 1, 1), "{r:#?}");
    assert!(r.failures[0].reason.contains("subtask"), "{:?}", r.failures);
    let id2 = migrate::v2_id_of("compct.n1.0.1617000001000.Assigned").unwrap();
    assert!(!store.exists(&layouts::v2::task_info(&id2)).await.unwrap());
    assert_eq!(r.state, Some(UpgradePhase::Running));
    assert!(migrate::upgrade_in_progress(&store).await.unwrap().is_some());
}

#[tokio::test]
async fn torn_task_info_is_repaired_and_collisions_are_never_overwritten() {
    let store = Store::memory().await;
    load_dir(&store, &seed_dir()).await;
    // A killed upgrader left an empty TaskInfo (fs creates write in place).
    let torn = "Compaction_V2/Scheduler/345ef1df.16176931.56000000.0/TaskInfo.pc.db";
    store.create(torn, b"{\n  \"CompactTa".to_vec()).await.unwrap();
    // Another v2 task already holds the id of task 4.
    let taken = "Compaction_V2/Scheduler/345ef1df.15833923.56000000.0/TaskInfo.pc.db";
    let foreign = br#"{"CompactTaskId":"345ef1df.15833923.56000000.0","CompactTaskState":"Init","repeat_flag":false,"sub_task_flag":false,"db_name":"x","schema_name":"y","table_name":"z"}"#;
    store.create(taken, foreign.to_vec()).await.unwrap();
    let events = std::sync::Mutex::new(Vec::new());
    let opts = Options { mode: Mode::Apply, concurrency: 2, force: false, ..Options::default() };
    let r = migrate::run(&store, &opts, &|e: &TaskEvent| events.lock().unwrap().push(e.clone())).await.unwrap();
    assert_eq!((r.migrated, r.failed), (3, 1), "{r:#?} {:#?}", events.lock().unwrap());
    assert!(r.failures[0].reason.contains("collision"));
    assert_eq!(&store.read(taken).await.unwrap().unwrap()[..], &foreign[..]);
    let repaired: UpgradedTaskInfo = formats::decode(&store.read(torn).await.unwrap().unwrap()).unwrap();
    assert_eq!(repaired.upgraded_from.as_str(), SEED_V1[3]);
    assert!(!store
        .exists("Compaction_V2/TaskUpgradeLock/compct.xcloud24_9876.0.1583392356000.Done.lock")
        .await
        .unwrap());
    assert_eq!(events.lock().unwrap().len(), 4);
    assert!(events.lock().unwrap().iter().any(|e| matches!(e.outcome, Outcome::Failed(_))));
    // Verify reports the collision, finalize refuses even with force? No:
    // a collision is a task that cannot be migrated, force may remove it.
    let v = run(&store, Mode::Verify).await;
    assert_eq!((v.verified, v.failed), (3, 1));
    let f = run(&store, Mode::Finalize).await;
    assert!(f.refused.is_some());
}

#[tokio::test]
async fn unmigrated_tasks_block_finalize_even_with_force() {
    let store = Store::memory().await;
    load_dir(&store, &seed_dir()).await;
    run(&store, Mode::Apply).await;
    // A v1 node made a new task after the upgrade.
    store
        .create(
            "Compaction/Scheduler/compct.xcloud24_9876.0.1700000000000",
            b"db_name: d\nschema_name: s\ntable_name: t\n".to_vec(),
        )
        .await
        .unwrap();
    let v = run(&store, Mode::Verify).await;
    assert_eq!((v.verified, v.unmigrated), (4, 1));
    let f = run_with(&store, Mode::Finalize, true).await;
    assert!(f.refused.as_deref().unwrap().contains("run `compactd upgrade` first"));
    assert!(store.exists("Compaction/Scheduler/compct.xcloud24_9876.0.1700000000000").await.unwrap());
    let r = run(&store, Mode::Apply).await;
    assert_eq!((r.migrated, r.already_done), (1, 4));
    assert!(run(&store, Mode::Finalize).await.refused.is_none());
}

#[tokio::test]
async fn generated_tree_upgrades_with_bounded_concurrency() {
    let store = Store::memory().await;
    let spec = migrate::fixture::Spec { tasks: 500, seed: 3 };
    migrate::fixture::write(&store, &spec, 8).await.unwrap();
    let r = run(&store, Mode::Apply).await;
    assert_eq!((r.v1_tasks, r.migrated, r.failed, r.orphans, r.problems), (500, 500, 0, 0, 0), "{r:#?}");
    assert!(r.subtasks > 100);
    let dirs = store.list("Compaction_V2/Scheduler/").await.unwrap();
    assert_eq!(dirs.len(), 500);
    let v = run(&store, Mode::Verify).await;
    assert_eq!(v.verified, 500);
}

#[tokio::test]
async fn the_tripwire_stands_where_no_upgrade_does_and_never_hides_one() {
    use migrate::tripwire::{arm, Armed};
    let store = Store::memory().await;
    // A tree with no upgrade: armed by a create, then found standing.
    assert_eq!(arm(&store, 4, 1, "n1").await.unwrap(), Armed::Now);
    assert_eq!(arm(&store, 4, 2, "n2").await.unwrap(), Armed::Already);
    assert_eq!(arm(&store, 3, 2, "n2").await.unwrap(), Armed::Already);
    let s = migrate::read_state(&store).await.unwrap().unwrap();
    // What the releases before it decide on: `running`, and why in `by`.
    assert_eq!((s.state, s.phase()), (UpgradePhase::Running, UpgradePhase::Complete));
    assert!(s.by.contains("NOT AN UPGRADE") && s.by.contains("layout 4"), "{}", s.by);
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None, "this build starts");
    // An upgrade pass over it with nothing to do leaves it standing.
    let before = snapshot(&store, "Compaction_V2/").await;
    let r = run(&store, Mode::Apply).await;
    assert_eq!(r.state, Some(UpgradePhase::Complete));
    assert_eq!(snapshot(&store, "Compaction_V2/").await, before);

    // An upgrade of a v1 tree found beside it replaces the tripwire by its
    // own marker; once complete, the tripwire is armed over it again.
    load_dir(&store, &seed_dir()).await;
    let r = run(&store, Mode::Apply).await;
    assert_eq!(r.state, Some(UpgradePhase::Complete));
    assert_eq!(migrate::read_state(&store).await.unwrap().unwrap().tripwire, None);
    assert_eq!(arm(&store, 4, 3, "n1").await.unwrap(), Armed::Now);
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None);

    // A half-done upgrade is never overwritten: its marker stops the older
    // releases already.
    let half = Store::memory().await;
    load_dir(&half, &seed_dir()).await;
    let marker = formats::UpgradeState {
        state: UpgradePhase::Running,
        wall_ms: 1,
        by: "an upgrade".into(),
        v1_tasks: 4,
        tripwire: None,
    };
    half.put(layouts::v2::UPGRADE_STATE, formats::encode(&marker)).await.unwrap();
    assert_eq!(arm(&half, 4, 2, "n1").await.unwrap(), Armed::Left);
    assert_eq!(migrate::read_state(&half).await.unwrap().unwrap(), marker);
    assert!(migrate::upgrade_in_progress(&half).await.unwrap().is_some());
    // Nor is a file nobody can read.
    half.put(layouts::v2::UPGRADE_STATE, b"{torn".to_vec()).await.unwrap();
    assert_eq!(arm(&half, 4, 2, "n1").await.unwrap(), Armed::Left);
}
