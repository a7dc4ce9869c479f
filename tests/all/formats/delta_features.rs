//! Delta tables with today's features, written by Spark with Delta (the
//! reference implementation), compacted by three `compactd` processes and
//! judged by Spark.
//!
//! - Deletion vectors, as Spark's `DELETE`, `UPDATE` and `MERGE` leave them
//!   (merge-on-read):
//!   the same rows at the new version and at every older one, no rewritten
//!   file carrying a vector, every vector compactd retired named by its
//!   `remove`, compactd's checkpoint (vectors included) read by Spark,
//!   fewer files, and Spark's own `OPTIMIZE`, `VACUUM`, `RESTORE`, change
//!   data feed and further DML working afterwards; and the same statements
//!   racing compactions: every row once, every commit kept.
//! - Type widening (`INT` to `BIGINT`, `FLOAT` to `DOUBLE`): files of both
//!   types compact together, read back exactly at every version.
//! - Column mapping (`name` mode) after renames of a data and a partition
//!   column, a dropped and an added column: read back exactly at every
//!   version, statistics and partition values under physical names.
//! - Liquid clustering (`CLUSTER BY`): compacted into unclustered files,
//!   read back exactly; Spark's `OPTIMIZE` clusters again afterwards.
//! - Row tracking (with deletion vectors, columns mapped by `id` and one
//!   renamed): every row keeps its stable id
//!   and commit version (`_metadata.row_id`, `row_commit_version`) through
//!   compactd's rewrite, its files get fresh ids under a raised high-water
//!   mark, and Spark's DML and `OPTIMIZE` afterwards keep the ids of the
//!   rows they leave alone.
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

/// Runs `q` in Spark; it must succeed.
fn sql(spark: &Spark, q: String) {
    let out = spark.call(&json!({"cmd": "sql", "sql": q}));
    assert_eq!(out["ok"], true, "{q}: {out}");
}

/// The files a full scan of the table opens.
fn files(spark: &Spark, t: &str) -> Value {
    spark.run(&json!({"cmd": "scan", "format": "delta", "path": t, "where": "true"}))["files"].clone()
}

/// A Delta table Spark writes in the data folder of a fresh cluster on fs.
struct Lake {
    c: Cluster,
    data: std::path::PathBuf,
    table: std::path::PathBuf,
}

/// What Spark read of the table before compactd touched it: each
/// version's rows, its latest version, the files a full scan opened.
struct Before {
    at: Vec<Value>,
    latest: u64,
    files: Value,
}

/// What the compaction left: the log, compactd's versions, the latest.
struct After {
    actions: Vec<(u64, Value)>,
    ours: Vec<u64>,
    latest: u64,
}

impl Lake {
    fn new() -> Lake {
        let c = Cluster::fs();
        let data = c.fs_path().parent().unwrap().join("data");
        let table = data.join("db/s/t");
        std::fs::create_dir_all(table.parent().unwrap()).unwrap();
        Lake { c, data, table }
    }

    fn t(&self) -> String {
        self.table.to_str().unwrap().to_string()
    }

    fn before(&self, spark: &Spark) -> Before {
        let latest = log_actions(&self.table).last().unwrap().0;
        let at = (0..=latest).map(|ver| read(spark, &self.t(), Some(ver))).collect();
        Before { at, latest, files: files(spark, &self.t()) }
    }

    /// Three nodes compact the table: Spark reads every version as before,
    /// and a full scan opens fewer files.
    fn compact(&mut self, spark: &Spark, before: &Before, v: &mut Verdict) -> After {
        start_three(&mut self.c, &format!("fs://{}", self.data.display()), "delta");
        let status = compact_with(&self.c, "delta");
        assert_eq!(status["state"], "Done", "{status:#}");
        let actions = log_actions(&self.table);
        let ours = compactd_versions(&actions);
        v.check(!ours.is_empty(), || format!("compactd committed nothing: {status:#}"));
        let latest = actions.last().unwrap().0;
        for ver in 0..=latest {
            let want = &before.at[ver.min(before.latest) as usize];
            let got = read(spark, &self.t(), Some(ver));
            v.check(&got == want, || format!("version {ver}: Spark read {got}, want {want}"));
        }
        let after = files(spark, &self.t());
        v.check(after.as_u64() < before.files.as_u64(), || format!("files {} -> {after}", before.files));
        eprintln!("files {} -> {after}", before.files);
        After { actions, ours, latest }
    }
}

#[test]
fn spark_reads_a_compacted_delta_table_with_deletion_vectors_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "deletion vectors";
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut lake = Lake::new();
    let t = &lake.t();
    let mut v = Verdict::default();
    let sql = |q: String| sql(spark, q);
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
    let before_actions = log_actions(&lake.table);
    let vectors_written =
        before_actions.iter().filter(|(_, a)| a.pointer("/add/deletionVector").is_some_and(|d| !d.is_null())).count();
    assert!(vectors_written >= 3, "Spark wrote {vectors_written} files with deletion vectors: the test tests nothing");
    let before = lake.before(spark);
    let latest_before = before.latest;
    eprintln!(
        "{test}: Spark wrote versions 0..={latest_before} ({vectors_written} vectors) in {:?}",
        started.elapsed()
    );
    let After { actions: after_actions, ours, latest } = lake.compact(spark, &before, &mut v);
    // Spark's versions end at 9: compactd's first commit is version 10,
    // whose checkpoint it writes (with the vectors of the files it keeps),
    // and from which Spark reads versions 10 on.
    v.check(
        latest_before == 9 && lake.table.join("_delta_log/00000000000000000010.checkpoint.parquet").exists(),
        || format!("no checkpoint of version 10 (Spark's last version {latest_before})"),
    );
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
    // compactd's commits change no data: no change rows.
    let first = ours.first().copied().unwrap_or(latest);
    let changes = spark.call(&json!({"cmd": "sql",
        "sql": format!("SELECT * FROM table_changes_by_path('{t}', {first}, {latest})")}));
    v.check(changes["ok"] == true && changes["rows"] == 0, || {
        format!("the change data feed of its commits: {changes}")
    });
    eprintln!("{test}: compacted ({} commits)", ours.len());

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
    v.check(restored == before.at[latest_before as usize], || format!("after RESTORE to {latest}: {restored}"));
    let vacuumed = spark.call(&json!({"cmd": "vacuum", "path": t}));
    v.check(vacuumed["ok"] == true, || format!("VACUUM: {vacuumed}"));
    v.check(read(spark, t, None) == restored, || "VACUUM changed the rows".into());
    eprintln!("{test}: {:?} in all", started.elapsed());
    v.finish(test);
}

/// Statement `i` of the racing DML: deletes, updates and merges in turn,
/// each over a different slice of the ids.
fn statement(i: usize) -> String {
    let k = i / 3;
    match i % 3 {
        0 => format!("DELETE FROM {{t}} WHERE id % 17 = {k}"),
        1 => format!("UPDATE {{t}} SET s = 'u{i}' WHERE id % 13 = {k}"),
        _ => format!(
            "MERGE INTO {{t}} AS t USING (SELECT id FROM {{t}} WHERE id % 19 = {k}) AS src ON t.id = src.id \
             WHEN MATCHED THEN UPDATE SET s = 'm{i}'"
        ),
    }
}

/// What statement `i` does to `rows` (id -> (part, s)).
fn apply(i: usize, rows: &mut std::collections::BTreeMap<i64, (i64, String)>) {
    let k = (i / 3) as i64;
    match i % 3 {
        0 => rows.retain(|id, _| id % 17 != k),
        1 => rows.iter_mut().filter(|(id, _)| *id % 13 == k).for_each(|(_, r)| r.1 = format!("u{i}")),
        _ => rows.iter_mut().filter(|(id, _)| *id % 19 == k).for_each(|(_, r)| r.1 = format!("m{i}")),
    }
}

const RACING_STATEMENTS: usize = 12;

#[test]
fn spark_deletes_updates_and_merges_racing_compaction_lose_no_row_and_no_commit() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "DML racing compaction";
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut lake = Lake::new();
    let t = lake.t();
    let mut v = Verdict::default();
    let create = spark.call(&json!({"cmd": "sql", "sql": format!(
        "CREATE TABLE delta.`{t}` ({SCHEMA}) USING delta PARTITIONED BY (part) TBLPROPERTIES \
         ('delta.enableDeletionVectors' = 'true')")}));
    assert_eq!(create["ok"], true, "{create}");
    let mut model = std::collections::BTreeMap::new();
    for a in 0..APPENDS {
        let rows = rows(a);
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows,
                          "partition_by": ["part"]}));
        for r in rows {
            model.insert(r[0].as_i64().unwrap(), (r[1].as_i64().unwrap(), r[2].as_str().unwrap().to_string()));
        }
    }
    start_three(&mut lake.c, &format!("fs://{}", lake.data.display()), "delta");
    let c = &lake.c;
    let statements: Vec<String> = (0..RACING_STATEMENTS).map(statement).collect();
    let cmd = json!({"cmd": "dml_loop", "path": t, "statements": statements});
    let writer = std::thread::spawn(move || spark.call_within(&cmd, std::time::Duration::from_secs(900)));
    // Compactions, one after another, while the statements run: each one
    // a round over the partitions due.
    let (mut rounds, mut during) = (0, 0);
    while !writer.is_finished() {
        let s = compact_with(c, "delta");
        v.check(s["state"] == "Done", || format!("a compaction during the statements: {s:#}"));
        let units = s["table_versions"].as_array().cloned().unwrap_or_default();
        let committed = units.iter().filter(|u| u["version_after"].as_u64() > u["version_before"].as_u64()).count();
        during += committed;
        rounds += 1;
        if committed == 0 {
            // Nothing was due: the next statement's commit is what makes
            // work, so a round at once would only cost a task.
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    let looped = writer.join().unwrap();
    assert_eq!(looped["ok"], true, "the statements: {looped}");
    let results = looped["results"].as_array().unwrap();
    let mut applied = vec![];
    for r in results {
        let i = r["i"].as_u64().unwrap() as usize;
        if r["ok"] == true {
            apply(i, &mut model);
            applied.push(i);
        } else {
            // Refused for compactd's concurrent commit: the user's
            // statement failed whole, as beside any other writer.
            v.check(r["conflict"] == true, || format!("statement {i} failed otherwise: {r}"));
        }
    }
    v.check(during > 0, || format!("no compaction committed during the statements ({rounds} rounds)"));
    v.check(!applied.is_empty(), || "every statement was refused".into());
    let last = compact_with(c, "delta");
    v.check(last["state"] == "Done", || format!("the last compaction: {last:#}"));

    // Every row exactly once, as the statements that committed left it.
    let got = spark.run(&json!({"cmd": "read", "format": "delta", "path": t, "lines": true}));
    let mut seen: std::collections::BTreeMap<i64, (i64, String)> = std::collections::BTreeMap::new();
    let mut twice = 0;
    for l in got["lines"].as_array().unwrap() {
        let r: Value = serde_json::from_str(l.as_str().unwrap()).unwrap();
        let row = (r["part"].as_i64().unwrap(), r["s"].as_str().unwrap().to_string());
        twice += usize::from(seen.insert(r["id"].as_i64().unwrap(), row).is_some());
    }
    let differ: Vec<_> = model.iter().filter(|(id, r)| seen.get(id) != Some(r)).take(3).collect();
    let extra = seen.keys().filter(|id| !model.contains_key(id)).count();
    v.check(twice == 0 && differ.is_empty() && extra == 0, || {
        format!(
            "{} rows read, {} expected: {twice} twice, {extra} extra, first differing {differ:?}",
            seen.len(),
            model.len()
        )
    });
    // Each statement that committed did so once; none that failed did.
    let history = spark.run(&json!({"cmd": "history", "path": t}))["history"].as_array().unwrap().clone();
    for i in 0..RACING_STATEMENTS {
        let commits = history.iter().filter(|h| h["userMetadata"] == format!("dml-{i}").as_str()).count();
        let want = usize::from(applied.contains(&i));
        v.check(commits == want, || format!("statement {i}: {commits} commits, want {want}"));
    }
    eprintln!(
        "{test}: {} of {RACING_STATEMENTS} statements committed, {rounds} compactions ({during} units committed \
         during), {:?} in all",
        applied.len(),
        started.elapsed()
    );
    v.finish(test);
}

#[test]
fn spark_reads_a_compacted_delta_table_whose_column_types_widened_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "type widening";
    let Some(spark) = Spark::shared() else { return };
    let mut lake = Lake::new();
    let t = &lake.t();
    let mut v = Verdict::default();
    let sql = |q: String| sql(spark, q);
    let (narrow, wide) = ("id BIGINT, part INT, n INT, x FLOAT", "id BIGINT, part INT, n BIGINT, x DOUBLE");
    sql(format!(
        "CREATE TABLE delta.`{t}` ({narrow}) USING delta PARTITIONED BY (part) TBLPROPERTIES \
         ('delta.enableTypeWidening' = 'true')"
    ));
    let write = |a: i64, schema: &str, big: bool| {
        let rows: Vec<Value> = (0..2)
            .flat_map(|part| {
                (0..ROWS).map(move |k| {
                    let id = a * 1000 + part * 100 + k;
                    let n = if big { (1i64 << 40) + id } else { id };
                    json!([id, part, n, id as f64 / 8.0])
                })
            })
            .collect();
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": schema, "rows": rows,
                          "partition_by": ["part"]}));
    };
    for a in 0..3 {
        write(a, narrow, false);
    }
    sql(format!("ALTER TABLE delta.`{t}` ALTER COLUMN n TYPE BIGINT"));
    sql(format!("ALTER TABLE delta.`{t}` ALTER COLUMN x TYPE DOUBLE"));
    for a in 3..6 {
        write(a, wide, true);
    }
    let before = lake.before(spark);
    lake.compact(spark, &before, &mut v);
    // Spark's own work over compactd's files.
    write(6, wide, true);
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true, || format!("Spark's OPTIMIZE: {optimized}"));
    let all = read(spark, t, None);
    v.check(all["count"] == 7 * 2 * ROWS, || format!("after Spark's append and OPTIMIZE: {all}"));
    v.finish(test);
}

#[test]
fn spark_reads_a_compacted_delta_table_with_renamed_and_dropped_columns_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "column mapping";
    let Some(spark) = Spark::shared() else { return };
    let mut lake = Lake::new();
    let t = &lake.t();
    let mut v = Verdict::default();
    let sql = |q: String| sql(spark, q);
    sql(format!(
        "CREATE TABLE delta.`{t}` (id BIGINT, part INT, s STRING, old STRING) USING delta PARTITIONED BY (part) \
         TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    ));
    let write = |a: i64, schema: &str, partition: &str| {
        let rows: Vec<Value> = (0..2)
            .flat_map(|part| (0..ROWS).map(move |k| json!([a * 1000 + part * 100 + k, part, format!("a{a}-{k}"), "x"])))
            .collect();
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": schema, "rows": rows,
                          "partition_by": [partition]}));
    };
    for a in 0..3 {
        write(a, "id BIGINT, part INT, s STRING, old STRING", "part");
    }
    sql(format!("ALTER TABLE delta.`{t}` RENAME COLUMN s TO label"));
    sql(format!("ALTER TABLE delta.`{t}` RENAME COLUMN part TO p2"));
    sql(format!("ALTER TABLE delta.`{t}` DROP COLUMN old"));
    sql(format!("ALTER TABLE delta.`{t}` ADD COLUMNS (extra STRING)"));
    for a in 3..6 {
        write(a, "id BIGINT, p2 INT, label STRING, extra STRING", "p2");
    }
    let before = lake.before(spark);
    let After { actions: after, ours, .. } = lake.compact(spark, &before, &mut v);
    // compactd's files: partition values and statistics under the columns'
    // physical names, as the protocol asks of a table that maps columns.
    for (ver, a) in after.iter().filter(|(ver, _)| ours.contains(ver)) {
        let Some(add) = a.get("add") else { continue };
        let keys: Vec<&String> = add["partitionValues"].as_object().unwrap().keys().collect();
        v.check(keys.len() == 1 && keys[0].starts_with("col-"), || format!("v{ver} partition values {keys:?}"));
        let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap_or("{}")).unwrap();
        let min = stats["minValues"].as_object().cloned().unwrap_or_default();
        v.check(!min.is_empty() && min.keys().all(|k| k.starts_with("col-") || k == "id"), || {
            format!("v{ver} statistics {stats}")
        });
    }
    // Data skipping by compactd's statistics: ids 5100-5110 are in the
    // last append's part of partition 1; partition 0's file ends at 5039,
    // which only its statistics tell Spark.
    let selective =
        spark.run(&json!({"cmd": "scan", "format": "delta", "path": t, "where": "id BETWEEN 5100 AND 5110"}));
    v.check(selective["files"] == 1 && selective["rows"] == 11, || format!("a selective query read {selective}"));
    write(6, "id BIGINT, p2 INT, label STRING, extra STRING", "p2");
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true, || format!("Spark's OPTIMIZE: {optimized}"));
    let all = read(spark, t, None);
    v.check(all["count"] == 7 * 2 * ROWS, || format!("after Spark's append and OPTIMIZE: {all}"));
    v.finish(test);
}

#[test]
fn spark_reads_a_compacted_delta_table_clustered_by_a_column_and_optimizes_it_again() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "clustering";
    let Some(spark) = Spark::shared() else { return };
    let mut lake = Lake::new();
    let t = &lake.t();
    let mut v = Verdict::default();
    let create = spark.call(&json!({"cmd": "sql",
        "sql": format!("CREATE TABLE delta.`{t}` ({SCHEMA}) USING delta CLUSTER BY (id)")}));
    assert_eq!(create["ok"], true, "{create}");
    for a in 0..APPENDS {
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows(a)}));
    }
    let before = lake.before(spark);
    let After { actions: after, ours, .. } = lake.compact(spark, &before, &mut v);
    for (ver, a) in after.iter().filter(|(ver, _)| ours.contains(ver)) {
        if let Some(add) = a.get("add") {
            v.check(add.pointer("/tags/clusteringProvider").is_none(), || format!("v{ver}: {add}"));
        }
    }
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true, || format!("Spark's OPTIMIZE: {optimized}"));
    v.check(read(spark, t, None) == before.at[before.latest as usize], || "Spark's OPTIMIZE changed the rows".into());
    v.finish(test);
}

/// Every row's id, stable row id and stable commit version, as Spark reads
/// them at the table's latest version (canonical lines).
fn row_identities(spark: &Spark, t: &str) -> Vec<Value> {
    let q = format!(
        "SELECT id, _metadata.row_id AS row_id, _metadata.row_commit_version AS row_commit_version \
         FROM delta.`{t}`"
    );
    let out = spark.call(&json!({"cmd": "sql", "sql": q, "lines": true}));
    assert_eq!(out["ok"], true, "{out}");
    out["lines"].as_array().unwrap().clone()
}

#[test]
fn spark_reads_the_same_row_ids_and_commit_versions_after_compactd_compacts_a_row_tracking_table() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let test = "row tracking";
    let Some(spark) = Spark::shared() else { return };
    let mut lake = Lake::new();
    let t = &lake.t();
    let mut v = Verdict::default();
    let sql = |q: String| sql(spark, q);
    // With deletion vectors: an UPDATE leaves the rows it rewrote with
    // materialized ids in new files, and vectors on the old ones.
    sql(format!(
        "CREATE TABLE delta.`{t}` ({SCHEMA}) USING delta PARTITIONED BY (part) TBLPROPERTIES \
         ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true', \
         'delta.columnMapping.mode' = 'id')"
    ));
    for a in 0..APPENDS {
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows(a),
                          "partition_by": ["part"]}));
    }
    sql(format!("UPDATE delta.`{t}` SET s = 'updated' WHERE id % 11 = 0"));
    sql(format!("DELETE FROM delta.`{t}` WHERE id % 7 = 0"));
    // Columns mapped by id: data files name them by field id, which the
    // rewrite keeps; a rename changes only the schema.
    sql(format!("ALTER TABLE delta.`{t}` RENAME COLUMN s TO label"));
    sql(format!("ALTER TABLE delta.`{t}` RENAME COLUMN label TO s"));
    let ids_before = row_identities(spark, t);
    let distinct = |ids: &[Value]| {
        let ids: std::collections::BTreeSet<String> = ids
            .iter()
            .map(|l| serde_json::from_str::<Value>(l.as_str().unwrap()).unwrap()["row_id"].to_string())
            .collect();
        ids.len()
    };
    assert_eq!(distinct(&ids_before), ids_before.len(), "Spark's row ids are not unique before compaction");
    let before = lake.before(spark);
    let After { actions, ours, .. } = lake.compact(spark, &before, &mut v);
    let ids_after = row_identities(spark, t);
    let differ = ids_before.iter().zip(&ids_after).filter(|(a, b)| a != b).count();
    v.check(ids_after.len() == ids_before.len() && differ == 0, || {
        format!(
            "{} rows' ids and commit versions before, {} after, {differ} differ; first before {}, after {}",
            ids_before.len(),
            ids_after.len(),
            ids_before[0],
            ids_after.first().cloned().unwrap_or_default()
        )
    });
    // Each of compactd's commits gives its files fresh ids above the mark
    // before it, and raises the mark past them.
    let mut mark = -1i64;
    for (ver, a) in &actions {
        if let Some(m) = a.pointer("/domainMetadata/configuration").and_then(Value::as_str) {
            let m: Value = serde_json::from_str(m).unwrap();
            let new = m["rowIdHighWaterMark"].as_i64().unwrap();
            v.check(new >= mark, || format!("v{ver} lowers the mark from {mark} to {new}"));
            mark = new;
        }
        if let (true, Some(add)) = (ours.contains(ver), a.get("add")) {
            let base = add["baseRowId"].as_i64();
            v.check(base.is_some() && add["defaultRowCommitVersion"] == json!(ver), || format!("v{ver}: {add}"));
            let rows = serde_json::from_str::<Value>(add["stats"].as_str().unwrap()).unwrap()["numRecords"].as_i64();
            v.check(base.zip(rows).is_some_and(|(b, n)| b + n - 1 <= mark), || format!("v{ver}: {add} past {mark}"));
        }
    }
    // Spark's own DML and OPTIMIZE over compactd's files keep the ids of
    // the rows they do not change, and assign none twice.
    sql(format!("UPDATE delta.`{t}` SET s = 'again' WHERE id % 5 = 0"));
    spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows(APPENDS),
                      "partition_by": ["part"]}));
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true, || format!("Spark's OPTIMIZE: {optimized}"));
    let ids_last = row_identities(spark, t);
    v.check(distinct(&ids_last) == ids_last.len(), || "row ids repeat after Spark's DML and OPTIMIZE".into());
    let kept: std::collections::BTreeSet<&str> = ids_last.iter().filter_map(Value::as_str).collect();
    let untouched: Vec<&Value> = ids_after
        .iter()
        .filter(|l| {
            let r: Value = serde_json::from_str(l.as_str().unwrap()).unwrap();
            r["id"].as_i64().unwrap() % 5 != 0
        })
        .collect();
    let lost = untouched.iter().filter(|l| !l.as_str().is_some_and(|l| kept.contains(l))).count();
    v.check(lost == 0, || format!("{lost} of {} unchanged rows changed id or version", untouched.len()));
    v.finish(test);
}
