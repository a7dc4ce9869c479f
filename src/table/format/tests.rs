use super::*;
use store::Store;

fn judge(rels: &[&str]) -> Findings {
    let mut d = Detector::new();
    for r in rels {
        d.observe(r, &format!("db/s/t/{r}"));
    }
    d.finish()
}

fn formats(rels: &[&str]) -> Vec<TableFormat> {
    judge(rels).formats().collect()
}

#[test]
fn each_format_is_told_by_its_markers_from_a_folder_listing() {
    assert_eq!(formats(&["_delta_log/", "day=1/"]), [TableFormat::Delta]);
    assert_eq!(formats(&[".hoodie/", "p=1/"]), [TableFormat::Hudi]);
    assert_eq!(formats(&["_spark_metadata/", "part-0.json"]), [TableFormat::SparkStreamingSink]);
    assert_eq!(formats(&["delta_0000001_0000001_0000/", "base_0000005/"]), [TableFormat::HiveAcid]);
    assert_eq!(formats(&["delete_delta_0000003_0000003_0000/"]), [TableFormat::HiveAcid]);
    assert_eq!(formats(&["base_0000005_v0000123/"]), [TableFormat::HiveAcid]);
    assert_eq!(formats(&["_latest.manifest", "data/"]), [TableFormat::Lance]);
    assert_eq!(formats(&["_committed_8573512382734", "part-0.parquet"]), [TableFormat::DatabricksTransactional]);
    assert_eq!(formats(&["_versions/", "data/"]), [TableFormat::Lance]);
    assert_eq!(formats(&["Fact/", "Metadata/"]), [TableFormat::CarbonData]);
    assert_eq!(formats(&["Metadata/tablestatus"]), [TableFormat::CarbonData]);
    assert_eq!(formats(&["_metadata", "_common_metadata", "p=1/"]), [TableFormat::ParquetSummary]);
    assert_eq!(formats(&["p=1/ducklake-0195b7e2-2b1c-7c3e-9d7a-2f0c4e1b5a6d.parquet"]), [TableFormat::DuckLake]);
    assert_eq!(formats(&["p=1/clicks+0+0000000000+0000000999.avro"]), [TableFormat::KafkaConnect]);
    assert_eq!(formats(&["base/metadata/v1.metadata.json", "change/"]), [TableFormat::Iceberg], "Amoro's mixed");
    assert_eq!(formats(&["dt=1/bucket-0/data-1.orc"]), [TableFormat::Paimon]);
    assert!(judge(&["_common_metadata"]).is_empty(), "a schema alone names no file");
}

#[test]
fn writes_in_progress_show_as_busy_not_as_a_format() {
    for busy in [
        "_temporary/0/",
        "__magic/job/",
        "__magic_job-1234/",
        ".spark-staging-5c1f/",
        ".hive-staging_hive_2026-11-26/",
        "_impala_insert_staging/",
        "p=1/.part-0.inprogress.0a1b",
        "__magic/x.pending",
    ] {
        let f = judge(&[busy, "p=1/"]);
        assert!(f.is_empty(), "{busy}");
        assert!(f.busy(0).is_some(), "{busy}");
    }
    assert_eq!(judge(&["p=1/", "_SUCCESS"]).busy(0), None);
}

fn entry(path: &str, special: bool, modified_ms: Option<i64>) -> store::Entry {
    store::Entry {
        path: path.to_string(),
        is_dir: path.ends_with('/'),
        special: special.then_some("symbolic link"),
        len: None,
        version: None,
        modified_ms,
    }
}

#[test]
fn a_write_in_progress_holds_a_table_only_while_it_is_young() {
    let mut d = Detector::new();
    d.observe_entry("db/s/t/", &entry("db/s/t/_temporary/0/part-0", false, Some(1_000)));
    d.observe_entry("db/s/t/", &entry("db/s/t/_temporary/0/part-1", false, Some(5_000)));
    let f = d.finish();
    assert_eq!(f.busy(5_000 + BUSY_WINDOW_MS - 1), Some("db/s/t/_temporary/"));
    assert_eq!(f.busy(5_000 + BUSY_WINDOW_MS), None, "a failed job's leftover, not a write");
}

#[test]
fn a_marker_that_is_a_symbolic_link_still_marks() {
    for (link, format) in [("_delta_log", TableFormat::Delta), (".hoodie", TableFormat::Hudi)] {
        let mut d = Detector::new();
        d.observe_entry("db/s/t/", &entry(&format!("db/s/t/{link}"), true, None));
        assert_eq!(d.finish().formats().collect::<Vec<_>>(), [format], "{link}");
    }
}

#[test]
fn above_a_table_only_a_roots_markers_count() {
    let above = |rels: &[&str]| {
        let mut d = Detector::above();
        for r in rels {
            d.observe(r, &format!("db/s/{r}"));
        }
        d.finish().formats().collect::<Vec<_>>()
    };
    assert_eq!(above(&["_delta_log/", "date=2026-11-01/"]), [TableFormat::Delta]);
    assert_eq!(above(&["metadata/v1.metadata.json", "data/"]), [TableFormat::Iceberg]);
    assert_eq!(above(&[".hoodie/"]), [TableFormat::Hudi]);
    // Sibling tables named like partition-level markers mean nothing there.
    assert!(above(&["bucket-1/", "Fact/", "base_2024/", "delta_1_1/", "_metadata", "t/_committed_1"]).is_empty());
}

#[test]
fn a_kafka_topic_may_hold_dots() {
    assert_eq!(formats(&["p=1/prod.events+0+0000000000+0000000999.json"]), [TableFormat::KafkaConnect]);
    assert!(judge(&["p=1/prod.events+0+x+1.json"]).is_empty());
}

#[test]
fn partition_markers_count_at_any_depth() {
    assert_eq!(formats(&["p=1/.hoodie_partition_metadata"]), [TableFormat::Hudi]);
    assert_eq!(formats(&["p=1/.hoodie_partition_metadata.parquet"]), [TableFormat::Hudi]);
    assert_eq!(formats(&["p=1/delta_0000002_0000002_0000/bucket_00000"]), [TableFormat::HiveAcid]);
    assert_eq!(formats(&["p=1/_orc_acid_version"]), [TableFormat::HiveAcid]);
    assert_eq!(formats(&["nested/_delta_log/00000000000000000000.json"]), [TableFormat::Delta]);
}

#[test]
fn a_metadata_folder_is_iceberg_only_with_iceberg_files_in_it() {
    let mut d = Detector::new();
    d.observe("metadata/", "db/s/t/metadata/");
    d.observe("data/", "db/s/t/data/");
    assert_eq!(d.to_look_into(), ["metadata/"]);
    d.observe("metadata/v3.metadata.json", "db/s/t/metadata/v3.metadata.json");
    assert!(d.to_look_into().is_empty());
    assert_eq!(d.finish().formats().collect::<Vec<_>>(), [TableFormat::Iceberg]);
    for iceberg in [
        "metadata/00002-6b1a2f52-7f4c-4c1e-9a1e-5d7d7f2a3b4c.metadata.json",
        "metadata/v1.gz.metadata.json",
        "metadata/v1.metadata.json.gz",
        "metadata/version-hint.text",
        "metadata/snap-123-1-abc.avro",
    ] {
        assert_eq!(formats(&[iceberg]), [TableFormat::Iceberg], "{iceberg}");
    }
    // A plain table with a partition folder that happens to be called so.
    assert!(judge(&["metadata/part-0.jsonl", "metadata/part-1.jsonl"]).is_empty());
}

#[test]
fn paimon_needs_snapshots_beside_schemas() {
    assert_eq!(formats(&["snapshot/LATEST", "schema/schema-0", "bucket-0/"]), [TableFormat::Paimon]);
    assert_eq!(formats(&["snapshot/snapshot-12", "schema/"]), [TableFormat::Paimon]);
    assert!(judge(&["snapshot/LATEST"]).is_empty(), "no schema folder");
    let mut d = Detector::new();
    d.observe("snapshot/", "db/s/t/snapshot/");
    assert!(d.to_look_into().is_empty(), "no schema folder: nothing to look into");
    d.observe("schema/", "db/s/t/schema/");
    assert_eq!(d.to_look_into(), ["snapshot/"]);
}

#[test]
fn plain_hive_folders_and_lookalikes_are_plain() {
    assert!(judge(&["day=2024-01-01/", "day=2024-01-02/part-0.parquet", "_SUCCESS", "_compactd/"]).is_empty());
    assert!(judge(&["delta_x/", "base_/", "delta_1/", "deltas_1_2/", "_committed_x", "_started_"]).is_empty());
    assert!(judge(&["p=1/a+b.json", "p=1/x+1+2.json", "p=1/ducklake-short.parquet", "base/x.json"]).is_empty());
    assert!(judge(&["p=1/metadata/v1.metadata.json"]).is_empty(), "an Iceberg metadata folder only at the root");
}

#[test]
fn each_executor_changes_only_what_it_owns() {
    let delta = judge(&["_delta_log/"]);
    assert_eq!(delta.refusal("db/s/t/", ExecutorKind::Delta), None);
    let why = delta.refusal("db/s/t/", ExecutorKind::Merge).unwrap();
    assert!(why.contains("db/s/t/ is a Delta Lake table (db/s/t/_delta_log/)"), "{why}");
    assert!(why.contains("the merge executor never changes it"), "{why}");
    assert!(why.contains("`--executor delta`"), "{why}");
    assert!(delta.refusal("db/s/t/", ExecutorKind::Parquet).unwrap().contains("the parquet executor"));
    assert_eq!(delta.refusal("db/s/t/", ExecutorKind::Command), None, "a command is the user's own");

    let hudi = judge(&[".hoodie/"]);
    let why = hudi.refusal("db/s/t/", ExecutorKind::Delta).unwrap();
    assert!(why.contains("an Apache Hudi table") && why.contains("compactd has no executor for it"), "{why}");

    let xtable = judge(&["_delta_log/", "metadata/v2.metadata.json", ".hoodie/"]);
    let why = xtable.refusal("db/s/t/", ExecutorKind::Delta).unwrap();
    assert!(why.contains("several table formats") && why.contains("XTable"), "{why}");

    assert_eq!(Findings::default().refusal("db/s/t/", ExecutorKind::Merge), None);
}

#[tokio::test]
async fn judge_looks_above_the_table_and_into_its_partition() {
    let store = Store::memory().await;
    // A Delta table partitioned by date then hour: `date=…` looks like a table.
    store.put("db/events/_delta_log/00000000000000000000.json", "{}").await.unwrap();
    store.put("db/events/date=1/hour=0/part-0.parquet", "x").await.unwrap();
    let why = judge_with(&store, "db/events/date=1/", Some("db/events/date=1/hour=0/"), ExecutorKind::Parquet).await;
    assert!(why.is_some_and(|w| w.contains("is a Delta Lake table (db/events/_delta_log/)")));
    store.put("db/s/t/p=1/a.parquet", "x").await.unwrap();
    let why = judge_with(&store, "db/s/t/", Some("db/s/t/p=1/"), ExecutorKind::Merge).await.unwrap();
    assert!(why.contains("db/s/t/p=1/a.parquet is Parquet"), "{why}");
    assert_eq!(judge_with(&store, "db/s/t/", Some("db/s/t/p=1/"), ExecutorKind::Parquet).await, None);
    assert_eq!(judge_with(&store, "db/s/t/", Some("db/s/t/p=1/"), ExecutorKind::Command).await, None);
}

async fn judge_with(store: &Store, table: &str, part: Option<&str>, kind: ExecutorKind) -> Option<String> {
    super::judge(store, table, None, part, kind).await.unwrap()
}

#[tokio::test]
async fn detect_looks_into_a_metadata_folder_only_when_it_must() {
    let store = Store::memory().await;
    store.put("db/s/t/metadata/v1.metadata.json", "{}").await.unwrap();
    store.put("db/s/t/data/x.parquet", "x").await.unwrap();
    store.put("db/s/u/metadata/part-0.jsonl", "{}\n").await.unwrap();
    store.put("db/s/v/p=1/a.jsonl", "{}\n").await.unwrap();
    assert!(detect(&store, "db/s/t/").await.unwrap().contains(TableFormat::Iceberg));
    assert!(detect(&store, "db/s/u/").await.unwrap().is_empty());
    assert!(detect(&store, "db/s/v/").await.unwrap().is_empty());
    assert!(detect(&store, "db/s/missing/").await.unwrap().is_empty());
}
