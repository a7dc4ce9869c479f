use std::collections::BTreeMap;

use serde_json::json;

use super::*;

const TABLE: &str = "db/s/t/";
const DAY_MS: i64 = 86_400_000;

/// 2026-01-01T00:00:00Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

fn now_ms() -> i64 {
    now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn add(path: &str) -> Value {
    json!({"add": {"path": path, "partitionValues": {"p": if path.contains("null") { Value::Null } else { json!("1") }},
        "size": 100, "modificationTime": 7, "dataChange": true,
        "stats": format!("{{\"numRecords\":3,\"minValues\":{{\"id\":\"{path}\"}}}}"), "tags": {"origin": "test"}}})
}

fn remove(path: &str, age_days: i64) -> Value {
    json!({"remove": {"path": path, "deletionTimestamp": now_ms() - age_days * DAY_MS, "dataChange": true,
        "extendedFileMetadata": true, "partitionValues": {"p": "1"}, "size": 100, "tags": {"origin": "test"}}})
}

fn txn(app: &str, version: i64, last_updated: i64) -> Value {
    json!({"txn": {"appId": app, "version": version, "lastUpdated": last_updated}})
}

fn metadata(configuration: &[(&str, &str)]) -> Value {
    let configuration: BTreeMap<&str, &str> = configuration.iter().copied().collect();
    json!({"metaData": {"id": "tbl", "name": null, "format": {"provider": "parquet", "options": {}},
        "schemaString": "{\"type\":\"struct\",\"fields\":[]}", "partitionColumns": ["p"],
        "configuration": configuration, "createdTime": 5}})
}

async fn commit(store: &Store, version: u64, actions: &[Value]) {
    let body: Vec<String> = actions.iter().map(Value::to_string).collect();
    store.put(&log::commit_path(TABLE, version), body.join("\n").into_bytes()).await.unwrap();
}

/// Versions 0 to 10: files added, removed (a tombstone a day old, one a
/// month old), added again after their removal, and an application's
/// transactions.
async fn ten(store: &Store) {
    let protocol = json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}});
    commit(store, 0, &[protocol, metadata(&[])]).await;
    for v in 1..=8u64 {
        commit(store, v, &[add(&format!("p=1/f{v}.parquet")), txn("app", v as i64, now_ms())]).await;
    }
    commit(store, 9, &[remove("p=1/f1.parquet", 1), remove("p=1/f2.parquet", 30), add("p=1/null.parquet")]).await;
    // f3 removed, then added again: active; f%204 encoded in the remove.
    commit(store, 10, &[remove("p=1/f3.parquet", 1), add("p=1/f3.parquet"), remove("p%3D1/f4.parquet", 1)]).await;
}

/// The actions of the checkpoint of `version`, by kind.
async fn actions(store: &Store, version: u64) -> BTreeMap<String, Vec<Value>> {
    let mut rows = rows(store, &path(TABLE, version), None, Columns::All).await.unwrap().unwrap();
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    while let Some(lines) = rows.try_next().await.unwrap() {
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let row: serde_json::Map<String, Value> = serde_json::from_slice(line).unwrap();
            let (k, v) = row.into_iter().find(|(_, v)| !v.is_null()).expect("one action per row");
            out.entry(k).or_default().push(v);
        }
    }
    out
}

fn paths(actions: &BTreeMap<String, Vec<Value>>, kind: &str) -> Vec<String> {
    let mut p: Vec<String> =
        actions.get(kind).into_iter().flatten().map(|a| a["path"].as_str().unwrap().to_string()).collect();
    p.sort();
    p
}

#[tokio::test]
async fn a_checkpoint_holds_the_reconciled_log_and_the_log_reader_reads_it_alone() {
    let store = Store::memory().await;
    ten(&store).await;
    let before = log::load(&store, TABLE).await.unwrap();
    let meta = before.metadata.clone();
    let w = write(&store, TABLE, 10, &meta, now()).await.unwrap().expect("version 10 is on the interval");
    let got = actions(&store, 10).await;
    // Active files with their stats and tags; young tombstones only.
    assert_eq!(
        paths(&got, "add"),
        ["p=1/f3.parquet", "p=1/f5.parquet", "p=1/f6.parquet", "p=1/f7.parquet", "p=1/f8.parquet", "p=1/null.parquet"]
    );
    assert_eq!(paths(&got, "remove"), ["p%3D1/f4.parquet", "p=1/f1.parquet"]);
    let f5 = got["add"].iter().find(|a| a["path"] == "p=1/f5.parquet").unwrap();
    assert_eq!(f5["stats"], add("p=1/f5.parquet")["add"]["stats"]);
    assert_eq!(f5["tags"], json!({"origin": "test"}));
    let null = got["add"].iter().find(|a| a["path"] == "p=1/null.parquet").unwrap();
    assert_eq!(null["partitionValues"], json!({"p": null}), "a null partition value keeps its key");
    assert_eq!(got["txn"], vec![json!({"appId": "app", "version": 8, "lastUpdated": now_ms()})]);
    assert_eq!(got["protocol"].len(), 1);
    assert_eq!(got["metaData"][0]["partitionColumns"], json!(["p"]));
    assert_eq!(w, Written { actions: 6 + 2 + 1 + 2, adds: 6, bytes: w.bytes });
    let last: Value =
        serde_json::from_slice(&store.read(&format!("{TABLE}_delta_log/_last_checkpoint")).await.unwrap().unwrap())
            .unwrap();
    assert_eq!(last, json!({"version": 10, "size": 11, "sizeInBytes": w.bytes, "numOfAddFiles": 6}));
    assert_eq!(store.stat(&path(TABLE, 10)).await.unwrap().unwrap().len, w.bytes);
    // The commits it covers cleaned up: the log reader reads the same table.
    for v in 0..10 {
        store.delete(&log::commit_path(TABLE, v)).await.unwrap();
    }
    let after = log::load(&store, TABLE).await.unwrap();
    assert_eq!((after.version, after.files.clone()), (10, before.files.clone()));
    assert_eq!(after.metadata.partition_columns, before.metadata.partition_columns);
    // Written once: a second call finds it there.
    assert_eq!(write(&store, TABLE, 10, &meta, now()).await.unwrap(), None);
}

#[tokio::test]
async fn the_next_checkpoint_copies_the_last_one_and_the_commits_after_it() {
    let store = Store::memory().await;
    ten(&store).await;
    let meta = log::load(&store, TABLE).await.unwrap().metadata.clone();
    write(&store, TABLE, 10, &meta, now()).await.unwrap().unwrap();
    for v in 0..10 {
        store.delete(&log::commit_path(TABLE, v)).await.unwrap();
    }
    // After it: f5 removed, f1 (a tombstone in checkpoint 10) added again,
    // the application's next transaction, a new file.
    commit(&store, 11, &[remove("p=1/f5.parquet", 0), add("p=1/f1.parquet"), txn("app", 9, now_ms())]).await;
    for v in 12..=20u64 {
        commit(&store, v, &[add(&format!("p=1/g{v}.parquet"))]).await;
    }
    let before = log::load(&store, TABLE).await.unwrap();
    write(&store, TABLE, 20, &meta, now()).await.unwrap().unwrap();
    let got = actions(&store, 20).await;
    let adds = paths(&got, "add");
    assert!(adds.contains(&"p=1/f1.parquet".to_string()) && !adds.contains(&"p=1/f5.parquet".to_string()), "{adds:?}");
    assert_eq!(adds.len(), before.files.len());
    assert_eq!(paths(&got, "remove"), ["p%3D1/f4.parquet", "p=1/f5.parquet"], "f1's tombstone went with its add");
    assert_eq!(got["txn"].len(), 1);
    assert_eq!(got["txn"][0]["version"], 9);
    for v in 10..20 {
        store.delete(&log::commit_path(TABLE, v)).await.unwrap();
    }
    let after = log::load(&store, TABLE).await.unwrap();
    assert_eq!((after.version, &after.files), (20, &before.files));
}

#[tokio::test]
async fn only_versions_on_the_interval_get_one_and_tables_asking_for_more_get_none() {
    let store = Store::memory().await;
    ten(&store).await;
    let meta = log::load(&store, TABLE).await.unwrap().metadata.clone();
    assert_eq!(write(&store, TABLE, 9, &meta, now()).await.unwrap(), None);
    let five = Metadata {
        configuration: [("delta.checkpointInterval".to_string(), Some("5".to_string()))].into(),
        ..meta.clone()
    };
    assert!(write(&store, TABLE, 5, &five, now()).await.unwrap().is_some());
    let structs = Metadata {
        configuration: [("delta.checkpoint.writeStatsAsStruct".to_string(), Some("true".to_string()))].into(),
        ..meta.clone()
    };
    assert!(write(&store, TABLE, 10, &structs, now()).await.is_err());
    // Stats left out when the table says so.
    let no_json = Metadata {
        configuration: [("delta.checkpoint.writeStatsAsJson".to_string(), Some("false".to_string()))].into(),
        ..meta.clone()
    };
    write(&store, TABLE, 10, &no_json, now()).await.unwrap().unwrap();
    assert!(actions(&store, 10).await["add"].iter().all(|a| a.get("stats").is_none_or(Value::is_null)));
    // Domain metadata compactd cannot carry: nothing written.
    commit(&store, 20, &[json!({"domainMetadata": {"domain": "d", "configuration": "{}", "removed": false}})]).await;
    for v in 11..20 {
        commit(&store, v, &[]).await;
    }
    let e = write(&store, TABLE, 20, &meta, now()).await.unwrap_err();
    assert!(e.to_string().contains("domainMetadata"), "{e}");
    assert!(!store.exists(&path(TABLE, 20)).await.unwrap());
}

#[test]
fn retention_intervals_parse_as_spark_writes_them() {
    assert_eq!(parse_interval("interval 1 week"), Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_interval("7 days"), Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_interval("INTERVAL 2 hours 30 minutes"), Some(Duration::from_secs(9_000)));
    assert_eq!(parse_interval("1 month"), None);
    assert_eq!(parse_interval("soon"), None);
}
