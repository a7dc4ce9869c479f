//! Delta tables with deletion vectors, as Spark's `DELETE`, `UPDATE` and
//! `MERGE` leave them (merge-on-read), compacted by three `compactd`
//! processes and judged by Spark with Delta, the reference implementation:
//! the same rows at the new version and at every older one, no rewritten
//! file carrying a vector, every vector compactd retired named by its
//! `remove`, compactd's checkpoint (vectors included) read by Spark, fewer
//! files, and Spark's own `OPTIMIZE`, `VACUUM`, `RESTORE`, change data feed
//! and further DML working afterwards.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::Instant;

use common::cluster::Cluster;
use common::parquet::compact_with;
use common::spark::Spark;
use serde_json::{json, Value};

use super::spark::{start_three, Verdict};

const SCHEMA: &str = "id BIGINT, part INT, s STRING";
const APPENDS: i64 = 6;
/// Rows per partition per append.
const ROWS: i64 = 40;

/// The rows of append `a`: two partitions, ids unique across appends.
fn rows(a: i64) -> Vec<Value> {
    (0..2).flat_map(|part| (0..ROWS).map(move |k| json!([a * 1000 + part * 100 + k, part, format!("a{a}")]))).collect()
}

/// Every action of the table's log, by version.
fn log_actions(table: &Path) -> Vec<(u64, Value)> {
    let mut out = vec![];
    for e in std::fs::read_dir(table.join("_delta_log")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(v) = name.strip_suffix(".json").and_then(|v| v.parse::<u64>().ok()) else { continue };
        for line in std::fs::read_to_string(e.path()).unwrap().lines().filter(|l| !l.trim().is_empty()) {
            out.push((v, serde_json::from_str(line).unwrap()));
        }
    }
    out.sort_by_key(|(v, _)| *v);
    out
}

/// The versions compactd committed.
fn compactd_versions(actions: &[(u64, Value)]) -> Vec<u64> {
    let mut v: Vec<u64> = actions
        .iter()
        .filter(|(_, a)| {
            a.pointer("/commitInfo/engineInfo").and_then(Value::as_str).is_some_and(|e| e.starts_with("compactd/"))
        })
        .map(|(v, _)| *v)
        .collect();
    v.dedup();
    v
}

/// The table read by Spark at `version` (else its latest): row count and
/// digest.
fn read(spark: &Spark, t: &str, version: Option<u64>) -> Value {
    let mut cmd = json!({"cmd": "read", "format": "delta", "path": t});
    if let Some(v) = version {
        cmd["version"] = json!(v);
    }
    let r = spark.call(&cmd);
    json!({"ok": r["ok"], "count": r["count"], "digest": r["digest"], "error": r["error"]})
}

#[test]
fn spark_reads_a_compacted_delta_table_with_deletion_vectors_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "deletion vectors";
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let t = table.to_str().unwrap();
    let mut v = Verdict::default();
    let sql = |q: String| {
        let out = spark.call(&json!({"cmd": "sql", "sql": q}));
        assert_eq!(out["ok"], true, "{q}: {out}");
    };
    sql(format!(
        "CREATE TABLE delta.`{t}` ({SCHEMA}) USING delta PARTITIONED BY (part) TBLPROPERTIES \
         ('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true')"
    ));
    for a in 0..APPENDS {
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows(a),
                          "partition_by": ["part"]}));
    }
    // Merge-on-read: each leaves vectors on the files it touches.
    sql(format!("DELETE FROM delta.`{t}` WHERE id % 7 = 0"));
    sql(format!("UPDATE delta.`{t}` SET s = 'updated' WHERE id % 11 = 0"));
    sql(format!(
        "MERGE INTO delta.`{t}` AS t USING (SELECT id, part FROM delta.`{t}` WHERE id % 13 = 0) AS src \
         ON t.id = src.id WHEN MATCHED AND src.id % 2 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET s = 'merged'"
    ));
    let before_actions = log_actions(&table);
    let latest_before = before_actions.last().unwrap().0;
    let vectors_written =
        before_actions.iter().filter(|(_, a)| a.pointer("/add/deletionVector").is_some_and(|d| !d.is_null())).count();
    assert!(vectors_written >= 3, "Spark wrote {vectors_written} files with deletion vectors: the test tests nothing");
    let at: Vec<Value> = (0..=latest_before).map(|ver| read(spark, t, Some(ver))).collect();
    let files_before =
        spark.run(&json!({"cmd": "scan", "format": "delta", "path": t, "where": "true"}))["files"].clone();
    eprintln!(
        "{test}: Spark wrote versions 0..={latest_before} ({vectors_written} vectors) in {:?}",
        started.elapsed()
    );

    start_three(&mut c, &format!("fs://{}", data.display()), "delta");
    let status = compact_with(&c, "delta");
    assert_eq!(status["state"], "Done", "{status:#}");
    let after_actions = log_actions(&table);
    let ours = compactd_versions(&after_actions);
    v.check(!ours.is_empty(), || format!("compactd committed nothing: {status:#}"));
    let latest = after_actions.last().unwrap().0;
    // Spark's versions end at 9: compactd's first commit is version 10,
    // whose checkpoint it writes (with the vectors of the files it keeps),
    // and from which Spark reads versions 10 on.
    v.check(latest_before == 9 && table.join("_delta_log/00000000000000000010.checkpoint.parquet").exists(), || {
        format!("no checkpoint of version 10 (Spark's last version {latest_before})")
    });
    // No file compactd added carries a vector; each of its removes names
    // the vector its file had, as the log holds it.
    let mut active_vectors = std::collections::BTreeMap::new();
    for (ver, a) in &after_actions {
        if let Some(add) = a.get("add") {
            if ours.contains(ver) {
                v.check(add.get("deletionVector").is_none_or(Value::is_null), || format!("v{ver}: {add}"));
            }
            active_vectors.insert(add["path"].as_str().unwrap().to_string(), add.get("deletionVector").cloned());
        }
        if let Some(remove) = a.get("remove") {
            let path = remove["path"].as_str().unwrap();
            if ours.contains(ver) {
                let had = active_vectors.get(path).cloned().flatten().filter(|d| !d.is_null());
                let named = remove.get("deletionVector").cloned().filter(|d| !d.is_null());
                v.check(had == named, || format!("v{ver} removes {path} naming {named:?}; it had {had:?}"));
            }
        }
    }
    for ver in 0..=latest {
        let want = &at[(ver.min(latest_before)) as usize];
        let got = read(spark, t, Some(ver));
        v.check(&got == want, || format!("version {ver}: Spark read {got}, want {want}"));
    }
    let files_after =
        spark.run(&json!({"cmd": "scan", "format": "delta", "path": t, "where": "true"}))["files"].clone();
    v.check(files_after.as_u64() < files_before.as_u64(), || format!("files {files_before} -> {files_after}"));
    // compactd's commits change no data: no change rows.
    let first = ours.first().copied().unwrap_or(latest);
    let changes = spark.call(&json!({"cmd": "sql",
        "sql": format!("SELECT * FROM table_changes_by_path('{t}', {first}, {latest})")}));
    v.check(changes["ok"] == true && changes["rows"] == 0, || {
        format!("the change data feed of its commits: {changes}")
    });
    eprintln!("{test}: compacted ({} commits), files {files_before} -> {files_after}", ours.len());

    // Spark's own maintenance and DML over compactd's files.
    sql(format!("DELETE FROM delta.`{t}` WHERE id % 5 = 0"));
    let after_delete = read(spark, t, None);
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true, || format!("Spark's OPTIMIZE: {optimized}"));
    v.check(read(spark, t, None) == after_delete, || "Spark's OPTIMIZE changed the rows".into());
    // Back to compactd's version (its files still there), then VACUUM.
    let restore =
        spark.call(&json!({"cmd": "sql", "sql": format!("RESTORE TABLE delta.`{t}` TO VERSION AS OF {latest}")}));
    v.check(restore["ok"] == true, || format!("RESTORE: {restore}"));
    let restored = read(spark, t, None);
    v.check(restored == at[latest_before as usize], || format!("after RESTORE to {latest}: {restored}"));
    let vacuumed = spark.call(&json!({"cmd": "vacuum", "path": t}));
    v.check(vacuumed["ok"] == true, || format!("VACUUM: {vacuumed}"));
    v.check(read(spark, t, None) == restored, || "VACUUM changed the rows".into());
    eprintln!("{test}: {:?} in all", started.elapsed());
    v.finish(test);
}
