use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;

const TABLE: &str = "db/s/t/";
/// The wall time of every run: day 100 (ms since the epoch).
const NOW_S: u64 = 100 * 86_400;

/// A table on fs (Delta's retention reads files' ages from the listing).
/// Version 0 adds `a` and `b`, version 1 (on day 50) removes both and adds
/// `c`, version 2 (on day 99) removes `c` and adds `d`, whose deletion
/// vector is in a file, as is `b`'s old one. Every file was written on the
/// day of its version, the log files too.
async fn table(configuration: serde_json::Value) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_data(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
    let day = |d: u64| d * 86_400_000;
    let dv = |uuid_z85: &str| json!({"storageType": "u", "pathOrInlineDv": uuid_z85, "offset": 1, "sizeInBytes": 10, "cardinality": 1});
    // The protocol's own example of a vector in a file (no folder prefix).
    let dv_b = "^-aqEH.-t@S}K{vb[*k^";
    let add = |p: &str, dv: Option<serde_json::Value>| {
        json!({"add": {"path": p, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true,
            "deletionVector": dv}})
        .to_string()
    };
    let remove = |p: &str, at: u64, dv: Option<serde_json::Value>| {
        json!({"remove": {"path": p, "deletionTimestamp": day(at), "dataChange": true, "deletionVector": dv}})
            .to_string()
    };
    let v0 = [
        json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}).to_string(),
        json!({"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}}, "schemaString": "{}",
            "partitionColumns": [], "configuration": configuration}})
        .to_string(),
        add("a.parquet", None),
        add("b.parquet", Some(dv(dv_b))),
    ];
    let v1 = [remove("a.parquet", 50, None), remove("b.parquet", 50, Some(dv(dv_b))), add("c.parquet", None)];
    let cdc =
        json!({"cdc": {"path": "_change_data/cdc-2.parquet", "partitionValues": {}, "size": 1, "dataChange": false}});
    let v2 = [remove("c.parquet", 99, None), add("d.parquet", None), cdc.to_string()];
    for (v, (lines, at)) in [(&v0[..], 1), (&v1[..], 50), (&v2[..], 99)].into_iter().enumerate() {
        put(&store, dir.path(), &log::commit_path(TABLE, v as u64), lines.join("\n").into_bytes(), at).await;
    }
    for (f, at) in
        [("a.parquet", 1), ("b.parquet", 1), ("c.parquet", 50), ("d.parquet", 99), ("_change_data/cdc-2.parquet", 99)]
    {
        put(&store, dir.path(), &format!("{TABLE}{f}"), b"data".to_vec(), at).await;
    }
    let b_vector = vectors::file_of(TABLE, &dv(dv_b)).unwrap();
    put(&store, dir.path(), &b_vector, b"vector".to_vec(), 1).await;
    // Another writer's file no version names, an unnamed compactd output,
    // and what VACUUM never looks into.
    put(&store, dir.path(), &format!("{TABLE}stray.parquet"), b"x".to_vec(), 1).await;
    let ours = format!("{TABLE}compactd-t1-r1-u0123456789abcdef-a1-0.parquet");
    put(&store, dir.path(), &ours, b"x".to_vec(), 1).await;
    put(&store, dir.path(), &format!("{TABLE}_compactd/staged.parquet"), b"x".to_vec(), 1).await;
    put(&store, dir.path(), &format!("{TABLE}.hidden.parquet"), b"x".to_vec(), 1).await;
    (dir, store)
}

async fn put(store: &Store, root: &std::path::Path, path: &str, bytes: Vec<u8>, day: u64) {
    store.put(path, bytes).await.unwrap();
    let f = std::fs::File::options().write(true).open(root.join(path)).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(day * 86_400)).unwrap();
}

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW_S)
}

async fn files(store: &Store) -> Vec<String> {
    let all: Vec<store::Entry> = store.list_stream(TABLE, true).try_collect().await.unwrap();
    let mut out: Vec<String> =
        all.into_iter().filter(|e| !e.is_dir).map(|e| e.path[TABLE.len()..].to_string()).collect();
    out.sort();
    out
}

fn forced(older_than: Duration) -> Retention {
    Retention {
        older_than: Some(older_than),
        log_older_than: Some(older_than),
        retain_last: Some(1),
        force: true,
        dry_run: false,
    }
}

#[tokio::test]
async fn a_retention_shorter_than_the_tables_own_is_refused_unless_forced() {
    let (_dir, store) = table(json!({})).await;
    let before = files(&store).await;
    let r = Retention { older_than: Some(Duration::from_secs(3600)), retain_last: Some(1), ..Retention::default() };
    let e = run(&store, TABLE, &r, now()).await.unwrap_err().to_string();
    assert!(e.contains("delta.deletedFileRetentionDuration (7d)") && e.contains("expire.force=true"), "{e}");
    // The table's own, shorter, is its to choose.
    let (_dir2, own) = table(json!({"delta.deletedFileRetentionDuration": "interval 1 hours",
        "delta.logRetentionDuration": "interval 1 hours"}))
    .await;
    run(&own, TABLE, &r, now()).await.unwrap();
    assert_eq!(files(&store).await, before, "a refused run deletes nothing");
    let forced = Retention { force: true, ..r };
    assert!(run(&store, TABLE, &forced, now()).await.unwrap().data_files_deleted > 0);
}

#[tokio::test]
async fn the_default_retention_deletes_only_what_no_version_of_the_last_week_reads() {
    let (_dir, store) = table(json!({})).await;
    let out = run(&store, TABLE, &Retention { retain_last: Some(1), ..Retention::default() }, now()).await.unwrap();
    let left = files(&store).await;
    // a and b were removed on day 50 (and b's vector with it), c on day 99:
    // c stays for the versions of the last week.
    for gone in ["a.parquet", "b.parquet", "stray.parquet"] {
        assert!(!left.contains(&gone.to_string()), "{gone} deleted: {left:?}");
    }
    assert!(!left.iter().any(|f| f.starts_with("deletion_vector_")), "b's vector deleted: {left:?}");
    for kept in ["c.parquet", "d.parquet", "_compactd/staged.parquet", ".hidden.parquet"] {
        assert!(left.contains(&kept.to_string()), "{kept} kept: {left:?}");
    }
    assert!(
        left.iter().any(|f| f.starts_with("compactd-t1")),
        "an unnamed compactd output is vacuum-orphans': {left:?}"
    );
    assert_eq!((out.data_files_deleted, out.compactd_unnamed_kept), (4, 1), "{out}");
    // Logs are kept 30 days: versions 0 and 1 are 50 and 99 days old, but
    // the log may only start at a checkpoint of version 2, the newest, so
    // one is written and the two before it go.
    assert_eq!(out.checkpoint_written, Some(2), "{out}");
    assert_eq!(out.log_files_deleted, 2, "{out}");
    assert_eq!(out.oldest_readable, 2, "{out}");
    let snap = log::load(&store, TABLE).await.unwrap();
    assert_eq!(snap.files.keys().cloned().collect::<Vec<_>>(), vec!["d.parquet".to_string()]);
}

#[tokio::test]
async fn a_forced_zero_retention_keeps_the_newest_version_and_retain_last_keeps_more() {
    let (_dir, store) = table(json!({})).await;
    let mut r = forced(Duration::ZERO);
    r.retain_last = Some(2);
    let out = run(&store, TABLE, &r, now()).await.unwrap();
    let left = files(&store).await;
    assert!(left.contains(&"c.parquet".to_string()), "version 1 is among the last 2: {left:?}");
    assert!(left.contains(&"_change_data/cdc-2.parquet".to_string()), "version 2's change data: {left:?}");
    assert_eq!(out.checkpoint_written, Some(1), "{out}");
    assert!(left.contains(&format!("_delta_log/{:020}.json", 1)), "{left:?}");
    assert!(!left.contains(&format!("_delta_log/{:020}.json", 0)), "{left:?}");

    let out = run(&store, TABLE, &forced(Duration::ZERO), now()).await.unwrap();
    let left = files(&store).await;
    assert!(!left.contains(&"c.parquet".to_string()), "{left:?}");
    assert!(left.contains(&"d.parquet".to_string()), "{left:?}");
    assert!(!left.contains(&"_change_data/cdc-2.parquet".to_string()), "change data goes by age: {left:?}");
    assert_eq!((out.data_files_deleted, out.oldest_readable, out.checkpoint_written), (2, 2, Some(2)), "{out}");
    // Run again: nothing left to do.
    let again = run(&store, TABLE, &forced(Duration::ZERO), now()).await.unwrap();
    assert_eq!((again.data_files_deleted, again.log_files_deleted, again.checkpoint_written), (0, 0, None), "{again}");
}

#[tokio::test]
async fn a_dry_run_deletes_nothing_and_names_what_a_run_deletes() {
    let (_dir, store) = table(json!({})).await;
    let before = files(&store).await;
    let mut r = forced(Duration::ZERO);
    r.dry_run = true;
    let dry = run(&store, TABLE, &r, now()).await.unwrap();
    assert_eq!(files(&store).await, before);
    let wet = run(&store, TABLE, &forced(Duration::ZERO), now()).await.unwrap();
    assert_eq!(dry.deleted[..dry.data_files_deleted as usize], wet.deleted[..wet.data_files_deleted as usize]);
}

#[tokio::test]
async fn retained_versions_behind_a_checkpoint_that_dropped_their_tombstones_keep_their_files() {
    // A checkpoint of version 2 written on day 100 keeps the tombstones of
    // the last week only: c's, not a's and b's (removed on day 50).
    let (_dir, store) = table(json!({})).await;
    let snap = log::load(&store, TABLE).await.unwrap();
    checkpoint::write_at(&store, TABLE, 2, &snap.metadata, now()).await.unwrap().unwrap();
    let cp = log::load_with_tombstones(&store, TABLE).await.unwrap();
    assert_eq!(cp.tombstones.as_ref().unwrap().len(), 1, "the checkpoint dropped a's and b's tombstones");
    // Every version kept by count: a and b (and b's vector) stay.
    let r = Retention { retain_last: Some(3), ..Retention::default() };
    run(&store, TABLE, &r, now()).await.unwrap();
    let left = files(&store).await;
    for kept in ["a.parquet", "b.parquet"] {
        assert!(left.contains(&kept.to_string()), "{kept} is read by version 0: {left:?}");
    }
    assert!(left.iter().any(|f| f.starts_with("deletion_vector_")), "b's vector: {left:?}");
    // By time: a retention of 60 days, longer than the table's week, keeps
    // what was removed on day 50 too.
    let r =
        Retention { older_than: Some(Duration::from_secs(60 * 86_400)), retain_last: Some(1), ..Retention::default() };
    run(&store, TABLE, &r, now()).await.unwrap();
    assert!(files(&store).await.contains(&"a.parquet".to_string()));
    // The table's own week: they go.
    run(&store, TABLE, &Retention { retain_last: Some(1), ..Retention::default() }, now()).await.unwrap();
    assert!(!files(&store).await.contains(&"a.parquet".to_string()));
}

#[tokio::test]
async fn a_table_naming_a_file_by_an_absolute_path_is_refused() {
    let (dir, store) = table(json!({})).await;
    let abs = format!("file://{}/{TABLE}abs.parquet", dir.path().display());
    let line =
        json!({"add": {"path": abs, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}});
    put(&store, dir.path(), &log::commit_path(TABLE, 3), line.to_string().into_bytes(), 99).await;
    put(&store, dir.path(), &format!("{TABLE}abs.parquet"), b"x".to_vec(), 1).await;
    let before = files(&store).await;
    let e = run(&store, TABLE, &forced(Duration::ZERO), now()).await.unwrap_err().to_string();
    assert!(e.contains("not inside the table's folder"), "{e}");
    assert_eq!(files(&store).await, before);
}

#[tokio::test]
async fn a_hint_naming_a_checkpoint_that_goes_goes_first() {
    // Checkpoints of versions 1 and 2, the hint still naming 1 (a run killed
    // between its checkpoint and the hint's update).
    let (_dir, store) = table(json!({})).await;
    let meta = log::load(&store, TABLE).await.unwrap().metadata.clone();
    let hint = format!("{TABLE}{LOG_DIR}_last_checkpoint");
    checkpoint::write_at(&store, TABLE, 1, &meta, now()).await.unwrap().unwrap();
    let stale = store.read(&hint).await.unwrap().unwrap();
    checkpoint::write_at(&store, TABLE, 2, &meta, now()).await.unwrap().unwrap();
    store.put(&hint, stale).await.unwrap();
    let out = run(&store, TABLE, &forced(Duration::ZERO), now()).await.unwrap();
    assert!(out.deleted.iter().any(|p| p.ends_with(&format!("{:020}.checkpoint.parquet", 1))), "{out}");
    assert_eq!(store.read(&hint).await.unwrap(), None, "the hint named a deleted checkpoint");
    assert_eq!(log::load(&store, TABLE).await.unwrap().version, 2);
}

/// What `run` checks right before deleting: the files (and vectors) the
/// commits after the version it read name.
#[tokio::test]
async fn a_file_a_commit_made_since_names_is_kept() {
    let (_dir, store) = table(json!({})).await;
    let since = named_since(&store, TABLE, 1).await.unwrap();
    assert!(since.contains(&format!("{TABLE}c.parquet")) && since.contains(&format!("{TABLE}d.parquet")));
    assert!(named_since(&store, TABLE, 2).await.unwrap().is_empty());
}

#[test]
fn hidden_follows_vacuum() {
    let cols = vec!["_p".to_string()];
    assert!(hidden("_compactd/x.parquet", &cols));
    assert!(hidden("p=1/.x.parquet.crc", &cols));
    assert!(hidden("_delta_log/0.json", &cols));
    assert!(!hidden("_change_data/x.parquet", &cols));
    assert!(!hidden("_p=1/x.parquet", &cols));
    assert!(!hidden("p=1/x.parquet", &cols));
}
