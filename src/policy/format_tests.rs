//! Policies over tables whose own metadata says which files are live: a
//! Delta table's partitions judged by its log, not by its folders.

use layouts::formats;

use super::tests::{apply, pass, planner, stores, task_ids, write, T0};
use crate::tasks;

#[tokio::test]
async fn a_delta_tables_partitions_are_judged_by_its_log_not_by_its_folders() {
    let (tree, data) = stores().await;
    apply(&tree, "executor = \"delta\"").await;
    let log = "db/public/t1/_delta_log/";
    let add = |p: &str, f: usize| {
        serde_json::json!({"add": {"path": format!("part={p}/f{f}.parquet"), "partitionValues": {"part": p},
            "size": 100, "modificationTime": 1, "dataChange": true}})
        .to_string()
    };
    let mut v0 = vec![
        serde_json::json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}).to_string(),
        serde_json::json!({"metaData": {"id": "x", "partitionColumns": ["part"], "configuration": {}}}).to_string(),
    ];
    v0.extend((0..5).map(|f| add("1", f)));
    v0.extend((0..6).map(|f| add("2", f)));
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
