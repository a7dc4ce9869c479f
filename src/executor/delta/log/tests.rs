use super::paths::NULL_PARTITION;
use super::*;

#[test]
fn unit_names_escape_what_would_break_them() {
    let cols = vec!["day".to_string(), "k".to_string()];
    let vals: BTreeMap<String, Option<String>> =
        [("day".into(), Some("2026-11-25".into())), ("k".into(), Some("a,b/c=d%".into()))].into();
    assert_eq!(partition_key(&cols, &vals), "day=2026-11-25,k=a%2Cb%2Fc%3Dd%25");
    let nulls: BTreeMap<String, Option<String>> = [("day".into(), None), ("k".into(), Some(String::new()))].into();
    assert_eq!(partition_key(&cols, &nulls), "day=__HIVE_DEFAULT_PARTITION__,k=__HIVE_DEFAULT_PARTITION__");
    assert_eq!(partition_key(&[], &vals), WHOLE_TABLE);
    let literal: BTreeMap<String, Option<String>> =
        [("day".into(), Some(NULL_PARTITION.into())), ("k".into(), None)].into();
    assert_eq!(partition_key(&cols, &literal), "day=%5F_HIVE_DEFAULT_PARTITION__,k=__HIVE_DEFAULT_PARTITION__");
}

#[test]
fn log_names_are_classified_strictly() {
    assert!(matches!(classify("00000000000000000007.json"), LogFile::Commit(7)));
    assert!(matches!(classify("7.json"), LogFile::Other));
    assert!(matches!(
        classify("00000000000000000010.checkpoint.parquet"),
        LogFile::Checkpoint { version: 10, part: 1, parts: 1 }
    ));
    assert!(matches!(
        classify("00000000000000000010.checkpoint.0000000002.0000000003.parquet"),
        LogFile::Checkpoint { version: 10, part: 2, parts: 3 }
    ));
    assert!(matches!(classify("00000000000000000010.checkpoint.abc.parquet"), LogFile::Other));
    assert!(matches!(classify("00000000000000000010.crc"), LogFile::Other));
    assert!(matches!(classify("00000000000000000010.checkpoint.0000000000.0000000000.parquet"), LogFile::Other));
    assert!(matches!(classify("00000000000000000010.checkpoint.0000000003.0000000002.parquet"), LogFile::Other));
}

#[tokio::test]
async fn a_whole_checkpoint_is_used_beside_an_incomplete_one_of_the_same_version_and_hidden_files_are_skipped() {
    let store = Store::memory().await;
    let log = format!("db/s/t/{LOG_DIR}");
    for name in [
        "00000000000000000005.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000005.checkpoint.parquet",
        "00000000000000000005.json",
        "00000000000000000007.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000007.json",
        ".00000000000000000005.checkpoint.parquet.crc",
        ".00000000000000000005.json.crc",
        ".tmp/00000000000000000008.json",
    ] {
        store.put(&format!("{log}{name}"), b"x".to_vec()).await.unwrap();
    }
    let l = list_log(&store, "db/s/t/", None).await.unwrap();
    assert_eq!(l.commits.keys().copied().collect::<Vec<_>>(), vec![5, 7]);
    assert!(l.unread.is_empty(), "{:?}", l.unread);
    assert_eq!(l.complete_checkpoint(7), None, "part 2 of 2 is missing");
    let v5 = l.complete_checkpoint(5).expect("the single-file checkpoint of 5 is whole");
    assert_eq!(v5.len(), 1);
    assert!(v5[0].0.ends_with("05.checkpoint.parquet"), "{v5:?}");
    assert_eq!(l.newest_complete_checkpoint(7).map(|(v, _)| v), Some(5));
    // What this reader cannot read is named.
    store.put(&format!("{log}00000000000000000005.checkpoint.0a1b.json"), b"{}".to_vec()).await.unwrap();
    store.put(&format!("{log}_sidecars/x.parquet"), b"x".to_vec()).await.unwrap();
    let l = list_log(&store, "db/s/t/", None).await.unwrap();
    assert_eq!(l.unread.len(), 2, "{:?}", l.unread);
}

#[test]
fn files_outside_the_table_are_refused() {
    assert_eq!(data_path("db/s/t/", "p%3D1/a%20b.parquet").unwrap(), "db/s/t/p=1/a b.parquet");
    for bad in ["s3://other/x.parquet", "/etc/passwd", "p=1/../../x", "%2E%2E/x"] {
        assert!(data_path("db/s/t/", bad).is_err(), "{bad}");
    }
}
