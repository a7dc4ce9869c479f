//! Policies over tables whose own metadata says which files are live: a
//! Delta table's partitions judged by its log, not by its folders; its
//! retention (`expire-every`) decided beside them.

use layouts::formats;
use layouts::policies::{self as paths, DecisionFile};
use store::Store;

use super::tests::{apply, finish, n, pass, planner, stores, task_ids, write, HOUR, T0};
use crate::tasks;

#[tokio::test]
async fn a_delta_tables_partitions_are_judged_by_its_log_not_by_its_folders() {
    let (tree, data) = stores().await;
    apply(&tree, "executor = \"delta\"").await;
    let log = "db/public/t1/_delta_log/";
    let mut v0 = first_commit(&[("1", 5), ("2", 6)]);
    // part=3: large files whose vectors delete a tenth of their rows (small
    // by that: their rewrite retires the deletes), part=4 a hundredth.
    for (p, gone) in [("3", 100), ("4", 10)] {
        let dv = serde_json::json!({"storageType": "i", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": gone});
        let big = |f| {
            serde_json::json!({"add": {"path": format!("part={p}/big{f}.parquet"), "partitionValues":
            {"part": p}, "size": 1u64 << 30, "stats": "{\"numRecords\":1000}", "deletionVector": dv}})
        };
        v0.extend((0..5).map(|f| big(f).to_string()));
    }
    data.put(&format!("{log}{:020}.json", 0), v0.join("\n")).await.unwrap();
    // part=2 was compacted: its six small files are removed from the table
    // but stay in the folder (until Delta's VACUUM).
    let mut v1: Vec<String> = (0..6)
        .map(|f| {
            serde_json::json!({"remove": {"path": format!("part=2/f{f}.parquet"), "dataChange": false}}).to_string()
        })
        .collect();
    v1.push(
        serde_json::json!({"add": {"path": "part=2/big.parquet", "partitionValues": {"part": "2"},
            "size": 1u64 << 30, "modificationTime": 1, "dataChange": false}})
        .to_string(),
    );
    data.put(&format!("{log}{:020}.json", 1), v1.join("\n")).await.unwrap();
    write(&data, "t1", "part=2", 6).await;
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    let mut submitted = r.submitted.clone();
    submitted.sort();
    assert_eq!(submitted.len(), 2, "{submitted:?}");
    assert!(submitted[0].starts_with("db/public/t1/part=1 "), "{submitted:?}");
    assert!(submitted[1].starts_with("db/public/t1/part=3 "), "{submitted:?}");
    let ids = task_ids(&tree).await;
    let info = tasks::read_info(&tree, &ids[0]).await.unwrap();
    assert_eq!(info.run.executor.as_ref().map(|e| e.kind), Some(formats::ExecutorKind::Delta));
}

/// The first commit of a Delta table partitioned by `part`: protocol,
/// metadata, and small files (100 bytes) in each `(partition, files)`.
fn first_commit(parts: &[(&str, usize)]) -> Vec<String> {
    let mut v0 = vec![
        serde_json::json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}).to_string(),
        serde_json::json!({"metaData": {"id": "x", "partitionColumns": ["part"], "configuration": {}}}).to_string(),
    ];
    for (p, files) in parts {
        v0.extend((0..*files).map(|f| {
            serde_json::json!({"add": {"path": format!("part={p}/f{f}.parquet"), "partitionValues": {"part": p},
                "size": 100, "modificationTime": 1, "dataChange": true}})
            .to_string()
        }));
    }
    v0
}

/// A Delta table `db/public/t1` of two partitions with five small files
/// each (due at a policy's four).
async fn delta_table(data: &Store) {
    let v0 = first_commit(&[("1", 5), ("2", 5)]);
    data.put(&format!("db/public/t1/_delta_log/{:020}.json", 0), v0.join("\n")).await.unwrap();
}

#[tokio::test]
async fn a_retention_is_a_task_of_its_own_decided_once_per_period_and_never_doubled() {
    let (tree, data) = stores().await;
    apply(&tree, "executor = \"delta\"\nexpire-every = \"1h\"\nexpire-retain-last = 3").await;
    delta_table(&data).await;
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 3, "two partitions and the retention: {:?}", r.submitted);
    let ids = task_ids(&tree).await;
    let mut expire = vec![];
    for id in &ids {
        let info = tasks::read_info(&tree, id).await.unwrap();
        if info.run.executor.as_ref().map(|e| e.kind) == Some(formats::ExecutorKind::Expire) {
            assert!(info.run.partitions.is_empty(), "the whole table: {:?}", info.run.partitions);
            assert_eq!(info.run.params.get(paths::MARKER_PARAM).map(String::as_str), Some("db/public/t1/.expire#1"));
            assert_eq!(info.run.params.get("expire.retain-last").map(String::as_str), Some("3"));
            expire.push(*id);
        } else {
            assert_eq!(info.run.partitions.len(), 1, "a partition a task, as for any Delta table");
        }
    }
    assert_eq!(expire.len(), 1, "{ids:?}");
    let views = super::view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let s = &views[0].summary;
    assert_eq!((s.detail[0].partition.as_str(), s.detail[0].in_flight), (".expire", true), "{s:?}");
    assert_eq!(s.last_task.map(|t| t != expire[0]), Some(true), "the last compaction is a compaction's");
    // While it runs, and once it ended within the hour: not again.
    assert!(pass(&mut planner("n1"), &tree, &data, T0 + 1000).await.submitted.is_empty());
    for id in &ids {
        finish(&tree, id).await;
    }
    let r = pass(&mut planner("n1"), &tree, &data, T0 + 2000).await;
    assert!(r.submitted.iter().all(|s| !s.contains(".expire")), "{:?}", r.submitted);
    let views = super::view::tables(&tree, usize::MAX, &mut vec![], T0 + 2000).await.unwrap();
    let retention = views[0].retention.clone().unwrap_or_default();
    assert!(retention.starts_with("freed 0 files, 0 bytes; last decided "), "{retention}");
    assert!(retention.contains("retention every 1h: next at"), "{retention}");
    assert_eq!(views[0].summary.expire_counted, Some(expire[0]), "its figures read once");
    // An hour after it was decided: the next one, decision 2. Its author
    // dies between the submit and the record: the next planner records
    // the task it finds, and submits none.
    let r = pass(&mut planner("n1"), &tree, &data, T0 + HOUR + 1).await;
    let again: Vec<&String> = r.submitted.iter().filter(|s| s.contains(".expire")).collect();
    assert_eq!(again.len(), 1, "{:?}", r.submitted);
    let task = paths::decision(&n("db"), &n("public"), &n("t1"), &n(".expire"), 2, DecisionFile::Task);
    assert!(tree.exists(&task).await.unwrap());
    tree.delete(&task).await.unwrap();
    tree.delete(&paths::table_summary(&n("db"), &n("public"), &n("t1"))).await.unwrap();
    let before = task_ids(&tree).await.len();
    let r = pass(&mut planner("n2"), &tree, &data, T0 + HOUR + 2).await;
    assert!(r.submitted.iter().all(|s| !s.contains(".expire")), "{:?}", r.submitted);
    assert!(tree.exists(&task).await.unwrap(), "the found task is recorded");
    assert_eq!(task_ids(&tree).await.len(), before + r.submitted.len());
}

#[tokio::test]
async fn a_scheduled_retention_waits_for_its_next_fire_and_runs_once_per_fire() {
    let (tree, data) = stores().await;
    apply(&tree, "executor = \"delta\"\nexpire-every = \"0 3 * * *\"").await;
    delta_table(&data).await;
    // 01:00 UTC: the partitions are due, the retention at 03:00.
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 2, "{:?}", r.submitted);
    let views = super::view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let retention = views[0].retention.clone().unwrap_or_default();
    assert!(retention.contains("retention on schedule 0 3 * * * (UTC): next at 2026-11-25T03:00:00Z"), "{retention}");
    let r = pass(&mut planner("n1"), &tree, &data, T0 + 2 * HOUR + 1000).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    assert!(r.submitted[0].starts_with("db/public/t1/.expire "), "{:?}", r.submitted);
    for id in task_ids(&tree).await {
        finish(&tree, &id).await;
    }
    let r = pass(&mut planner("n1"), &tree, &data, T0 + 3 * HOUR).await;
    assert!(r.submitted.iter().all(|s| !s.contains(".expire")), "once per fire: {:?}", r.submitted);
}
