//! Spark with Iceberg's runtime (Iceberg 1.12 on Spark 4.1, one session for
//! this file) on a table it wrote and compactd compacted: Spark reads the
//! same rows after compactd's `replace`, and its maintenance procedures
//! work on the result and remove nothing live: `expire_snapshots` deletes
//! exactly the files compactd replaced, `rewrite_manifests` rewrites
//! manifests compactd wrote, `remove_orphan_files` finds only a file that
//! no snapshot names (none of compactd's outputs or metadata); then Spark
//! appends and compactd compacts the table again, over Spark's manifests.
//! pyiceberg reads the same rows throughout.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::iceberg::pyiceberg_read;
use common::iceberg_table::{compact_table, start_three};
use common::spark::Spark;
use serde_json::{json, Value};

const SCHEMA: &str = "id BIGINT, s STRING, part STRING";
const PARTS: u64 = 3;
const ROWS: u64 = 30;
/// A timestamp after every file and snapshot of the test: the procedures'
/// age limits then leave nothing out because of its age.
const FUTURE: &str = "TIMESTAMP '2999-01-01 00:00:00'";

fn rows(batch: u64) -> Vec<Value> {
    (0..ROWS)
        .map(|i| {
            let id = batch * 1000 + i;
            let s = if i % 7 == 0 { Value::Null } else { json!(format!("v{id}")) };
            json!([id, s, format!("p{}", i % PARTS)])
        })
        .collect()
}

fn query(spark: &Spark, sql: &str) -> Vec<Value> {
    spark.run(&json!({"cmd": "query", "sql": sql}))["rows"].as_array().unwrap().clone()
}

fn read(spark: &Spark) -> (Value, Value) {
    let r = spark.run(&json!({"cmd": "table", "table": "m.s.t"}));
    (r["count"].clone(), r["digest"].clone())
}

/// The table's live data files as Spark lists them, without a scheme.
fn live(spark: &Spark) -> BTreeSet<String> {
    query(spark, "SELECT file_path FROM m.s.t.files")
        .iter()
        .map(|r| r["file_path"].as_str().unwrap().trim_start_matches("file:").to_string())
        .collect()
}

fn compact(c: &Cluster) -> Value {
    let status = compact_table(c, "t", &["iceberg.sole-writer=true"]);
    assert_eq!(status["state"], "Done", "{status:#}");
    let versions = status["table_versions"].as_array().expect("a commit");
    assert_eq!(versions.len(), 1, "{status:#}");
    status
}

fn operations(spark: &Spark) -> Vec<String> {
    query(spark, "SELECT operation FROM m.s.t.snapshots ORDER BY committed_at")
        .iter()
        .map(|r| r["operation"].as_str().unwrap().to_string())
        .collect()
}

/// Sets the modification time of every file under `dir` to `age` ago.
fn age_all(dir: &Path, age: Duration) {
    let when = std::time::SystemTime::now() - age;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            age_all(&e.path(), age);
        } else {
            std::fs::File::options().write(true).open(e.path()).unwrap().set_modified(when).unwrap();
        }
    }
}

fn all_exist(files: &BTreeSet<String>) -> bool {
    files.iter().all(|f| Path::new(f).exists())
}

#[test]
fn spark_maintenance_after_compactds_replace_works_and_removes_nothing_live() {
    let _turn = crate::common::turns::SPARK_ICEBERG.turn();
    let Some(spark) = Spark::iceberg() else { return };
    let started = Instant::now();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let warehouse = data.join("db");
    std::fs::create_dir_all(&warehouse).unwrap();
    let location = warehouse.join("s/t");
    spark.run(&json!({"cmd": "catalog", "name": "m", "warehouse": warehouse}));
    spark.run(&json!({"cmd": "sql", "sql": format!(
        "CREATE TABLE m.s.t ({SCHEMA}) USING iceberg PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2')")}));
    for b in 0..6 {
        spark.run(&json!({"cmd": "write", "table": "m.s.t", "schema": SCHEMA, "rows": rows(b)}));
    }
    let before = read(spark);
    let inputs = live(spark);
    assert_eq!(inputs.len() as u64, 6 * PARTS, "{inputs:?}");
    c.start_with("n1", &["--data", &format!("fs://{}", data.display()), "--target-size", "8MiB"]);
    c.wait_nodes(Duration::from_secs(30), "a node and a monitor", |r| alive(r).len() == 1 && monitor_of(r).is_some());

    // Spark reads compactd's replace: the same rows, in one file a partition.
    compact(&c);
    assert_eq!(read(spark), before);
    assert_eq!(operations(spark).last().map(String::as_str), Some("replace"));
    let outputs = live(spark);
    assert_eq!(outputs.len() as u64, PARTS, "{outputs:?}");
    assert!(outputs.iter().all(|f| f.contains("/compactd-")), "{outputs:?}");

    // A file no snapshot names, for remove_orphan_files to find.
    let stray = location.join("data/part=p0/stray-00000.parquet");
    std::fs::write(&stray, b"not a table's file").unwrap();

    // expire_snapshots deletes the replaced inputs, and only them.
    let expired = query(
        spark,
        &format!("CALL m.system.expire_snapshots(table => 's.t', older_than => {FUTURE}, retain_last => 1)"),
    );
    assert_eq!(expired[0]["deleted_data_files_count"], (6 * PARTS).to_string(), "{expired:?}");
    assert!(inputs.iter().all(|f| !Path::new(f).exists()), "an input survived expiry");
    assert!(all_exist(&outputs), "expire_snapshots deleted an output");
    assert_eq!(read(spark), before);

    // rewrite_manifests rewrites compactd's manifests into Spark's.
    let manifests = query(spark, "CALL m.system.rewrite_manifests('s.t')");
    assert!(manifests[0]["rewritten_manifests_count"].as_str().unwrap() != "0", "{manifests:?}");
    assert_eq!(read(spark), before);
    assert_eq!(live(spark), outputs);

    // remove_orphan_files: the stray file, nothing compactd wrote or that
    // any metadata names. It refuses an age limit under a day: every file
    // of the table is made two days old, so that all are candidates.
    age_all(&location, Duration::from_secs(2 * 86_400));
    let day_ago = query(spark, "SELECT CAST(current_timestamp() - INTERVAL 25 HOURS AS STRING) AS t");
    let day_ago = day_ago[0]["t"].as_str().unwrap();
    let orphans = query(
        spark,
        &format!("CALL m.system.remove_orphan_files(table => 's.t', older_than => TIMESTAMP '{day_ago}')"),
    );
    let orphans: Vec<&str> = orphans.iter().map(|r| r["orphan_file_location"].as_str().unwrap()).collect();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert!(orphans[0].ends_with("/data/part=p0/stray-00000.parquet"), "{orphans:?}");
    assert!(!stray.exists());
    assert!(all_exist(&outputs), "remove_orphan_files deleted an output");
    let metadata: BTreeSet<String> = query(spark, "SELECT path FROM m.s.t.all_manifests")
        .iter()
        .map(|r| r["path"].as_str().unwrap().trim_start_matches("file:").to_string())
        .collect();
    assert!(!metadata.is_empty() && all_exist(&metadata), "{metadata:?}");
    assert_eq!(read(spark), before);

    // Spark appends, compactd compacts again over Spark's manifests.
    for b in 6..8 {
        spark.run(&json!({"cmd": "write", "table": "m.s.t", "schema": SCHEMA, "rows": rows(b)}));
    }
    let grown = read(spark);
    assert_eq!(grown.0, json!(8 * ROWS));
    compact(&c);
    assert_eq!(read(spark), grown);
    assert_eq!(live(spark).len() as u64, PARTS);
    // compactd's first replace (the one snapshot expiry kept), Spark's
    // manifest rewrite (a replace too), two appends, compactd's replace.
    assert_eq!(operations(spark), ["replace", "replace", "append", "append", "replace"]);
    let py = pyiceberg_read(location.to_str().unwrap(), "id");
    let current = &py["snapshots"][py["current"].as_i64().unwrap().to_string()];
    assert_eq!(current["rows"], grown.0, "{py}");
    eprintln!("spark maintenance: {:?} in all", started.elapsed());
}

/// Spark's merge-on-read `DELETE`, `UPDATE` and `INSERT` on an HDFS table
/// (whose commits refuse a taken version, as compactd's do) while three
/// nodes compact it, three rounds: Spark retries a statement whose commit a
/// compaction won, compactd abandons a unit a delete reached first, and in
/// the end every row is there exactly once with the value the statements
/// gave it, each statement committed once.
#[test]
fn spark_deletes_and_updates_racing_compaction_on_hdfs_lose_no_row_and_no_commit() {
    let _turn = crate::common::turns::SPARK_ICEBERG.turn();
    let Some(spark) = Spark::iceberg() else { return };
    let started = Instant::now();
    let hdfs = common::hdfs::HdfsCluster::shared();
    let (root, data_uri) = (hdfs.new_root("iceberg-race-tree"), hdfs.new_root("iceberg-race-data"));
    spark.run(&json!({"cmd": "catalog", "name": "r", "warehouse": format!("{data_uri}/db")}));
    spark.run(&json!({"cmd": "sql", "sql": "CREATE TABLE r.s.t (id BIGINT, v BIGINT, part STRING) USING iceberg \
        PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', \
        'write.update.mode'='merge-on-read', 'commit.retry.num-retries'='20')"}));
    // The model: id -> v, as the statements leave it.
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    let insert = |ids: std::ops::Range<i64>, model: &mut BTreeMap<i64, i64>| {
        let rows: Vec<String> = ids.clone().map(|i| format!("({i}, 0, 'p{}')", i % 3)).collect();
        model.extend(ids.map(|i| (i, 0)));
        format!("INSERT INTO r.s.t VALUES {}", rows.join(", "))
    };
    for b in 0..4 {
        let stmt = insert(b * 30..(b + 1) * 30, &mut model);
        spark.run(&json!({"cmd": "sql", "sql": stmt}));
    }
    let mut statements = vec![];
    for r in 0..3i64 {
        statements.push(format!("DELETE FROM r.s.t WHERE id % 7 = {r}"));
        model.retain(|id, _| id % 7 != r);
        statements.push("UPDATE r.s.t SET v = v + 1 WHERE id % 2 = 0".to_string());
        model.iter_mut().filter(|(id, _)| *id % 2 == 0).for_each(|(_, v)| *v += 1);
        statements.push(insert(1000 * (r + 1)..1000 * (r + 1) + 20, &mut model));
        statements.push(format!("UPDATE r.s.t SET v = v + 10 WHERE id % 3 = {r}"));
        model.iter_mut().filter(|(id, _)| *id % 3 == r).for_each(|(_, v)| *v += 10);
    }
    let mut c = Cluster::on(root, vec![]);
    start_three(&mut c, &data_uri);
    let n = statements.len();
    let cmd = json!({"cmd": "sql_loop", "statements": statements, "retries": 8});
    let writer = std::thread::spawn(move || spark.call_within(&cmd, Duration::from_secs(900)));
    let mut compactions = vec![];
    while !writer.is_finished() {
        compactions.push(compact_table(&c, "t", &[]));
    }
    let looped = writer.join().unwrap();
    assert!(looped["ok"] == true && looped["errors"] == json!([]), "the statements: {looped}");
    compactions.push(compact_table(&c, "t", &[]));
    let committed = compactions
        .iter()
        .filter(|s| s["state"] == "Done" && s["table_versions"].as_array().is_some_and(|v| !v.is_empty()))
        .count();
    assert!(compactions.iter().all(|s| s["state"] == "Done"), "{compactions:#?}");
    assert!(committed >= 2, "{committed} compactions committed of {}", compactions.len());
    let got = query(spark, "SELECT id, v FROM r.s.t");
    let mut seen: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in &got {
        let id: i64 = r["id"].as_str().unwrap().parse().unwrap();
        seen.entry(id).or_default().push(r["v"].as_str().unwrap().parse().unwrap());
    }
    let want: BTreeMap<i64, Vec<i64>> = model.iter().map(|(id, v)| (*id, vec![*v])).collect();
    assert_eq!(seen, want, "rows differ from the statements' model");
    // Every statement's commit once (retried ones too), and compactd's.
    let ops = query(spark, "SELECT operation, count(*) AS n FROM r.s.t.snapshots GROUP BY 1");
    let count = |op: &str| {
        ops.iter().find(|r| r["operation"] == op).map_or(0, |r| r["n"].as_str().unwrap().parse::<usize>().unwrap())
    };
    assert_eq!(count("append") + count("overwrite") + count("delete"), 4 + n, "{ops:?}");
    assert!(count("replace") >= 2, "{ops:?}");
    let retried = looped["done"].as_array().unwrap().iter().filter(|d| d["tries"].as_u64() > Some(1)).count();
    eprintln!(
        "iceberg race on hdfs: {n} statements ({retried} retried), {} compactions ({committed} committed) in {:?}",
        compactions.len(),
        started.elapsed()
    );
}
