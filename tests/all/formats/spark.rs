//! Spark with Delta Lake, the reference implementation of Delta and the
//! engine most users read their tables with, judges compactd's output
//! (tests/all/common/spark.rs: one Spark session for this file).
//!
//! - Delta: a partitioned table Spark wrote (dates before 1582, timestamps
//!   before 1900, decimal, string, array and struct columns; many small
//!   appends per partition), once in Spark's default mode and once in LEGACY
//!   mode (dates rebased to the hybrid Julian calendar, as Spark 2 wrote
//!   them), is compacted by three `compactd` processes; Spark then reads the
//!   same rows with its default settings and with the EXCEPTION read mode at
//!   the new version and at every older one, `DESCRIBE HISTORY` shows
//!   compactd's OPTIMIZE, a selective query reads no more files than the
//!   partitions holding matching rows, and Spark's own append, OPTIMIZE,
//!   VACUUM and checkpoint work afterwards with the rows exact.
//! - Hive-style Parquet (no Delta), default and LEGACY, compacted by the
//!   `parquet` executor: Spark reads the same rows in both read modes; an
//!   output whose dictionary fell back to PLAIN pages is pruned by Spark's
//!   Parquet library (statistics and dictionaries) without losing a row.
//! - HDFS: Spark appends in a loop to a Delta table while compactd compacts
//!   it over and over: every row once, every append's commit present, the
//!   history one line.
//!
//! Every check of a test runs even when an earlier one failed; the test
//! fails at its end naming each failed check.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use common::parquet::compact_with;
use common::spark::{exception_read, legacy_write, Spark};
use serde_json::{json, Value};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const PARTITIONS: u64 = 3;
/// Spark appends, each one file in every partition: versions 0-7, so that
/// the third of compactd's three OPTIMIZE commits lands on version 10, a
/// multiple of the checkpoint interval, and writes the checkpoint Spark
/// then reads from.
const APPENDS: u64 = 8;
/// Rows per partition per append.
const ROWS: u64 = 20;
const SCHEMA: &str = "id BIGINT, part INT, d DATE, ts TIMESTAMP, amount DECIMAL(12,3), s STRING, ds ARRAY<DATE>, \
                      st STRUCT<d: DATE, s: STRING, n: DECIMAL(10,2)>";
/// Matches rows of partition 1 only (ids are `part * 1_000_000 + k`), by a
/// column that is not the partition column: only file statistics can skip
/// the other partitions' files.
const SELECTIVE: &str = "id BETWEEN 1000000 AND 1999999";

/// A date before the Gregorian switch (years 1-1581).
fn date(k: u64, salt: u64) -> String {
    let y = 1 + (k * 37 + salt * 101) % 1581;
    format!("{y:04}-{:02}-{:02}", 1 + (k + salt) % 12, 1 + (k * 7 + salt) % 28)
}

/// A timestamp before 1900 (years 1-1899), to the microsecond.
fn timestamp(k: u64, salt: u64) -> String {
    let y = 1 + (k * 13 + salt * 59) % 1899;
    let (mo, d, h, mi, s) = (1 + k % 12, 1 + (k * 3) % 28, k % 24, (k * 7) % 60, (k * 11) % 60);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z", (k * 7919) % 1_000_000)
}

/// The rows of one append to one partition: the calendar's edges first,
/// then varied values, some nulls, empty and non-empty arrays.
fn rows(part: u64, append: u64) -> Vec<Value> {
    (0..ROWS)
        .map(|r| {
            let k = append * ROWS + r;
            let (d, ts) = match r {
                0 => ("0001-01-01".to_string(), "0001-01-01T00:00:00.000000Z".to_string()),
                1 => ("1582-10-04".to_string(), "1582-10-04T23:59:59.999999Z".to_string()),
                2 => ("1582-10-15".to_string(), "1899-12-31T23:59:59.999999Z".to_string()),
                _ => (date(k, part), timestamp(k, part)),
            };
            let sign = if k.is_multiple_of(2) { "-" } else { "" };
            let amount = (k % 7 != 3).then(|| format!("{sign}{}.{:03}", k * 7919 % 1_000_000, k * 31 % 1000));
            let s = (k % 11 != 5).then(|| format!("p{part}-a{append}-r{r}-é"));
            let ds: Vec<String> = (0..k % 3).map(|i| date(k, 10 + i)).collect();
            let st = (k % 9 != 4)
                .then(|| json!({"d": date(k, 20), "s": format!("s{k}"), "n": format!("{}.{:02}", k % 1000, k % 100)}));
            json!([part * 1_000_000 + k, part, d, ts, amount, s, ds, st])
        })
        .collect()
}

/// Every partition's rows of one append.
fn append_rows(append: u64) -> Vec<Value> {
    (0..PARTITIONS).flat_map(|p| rows(p, append)).collect()
}

/// The rows Spark made of `rows` (the canonical lines a `write` answers)
/// hold the dates, timestamps and strings given, and the same decimals:
/// the judge's own input path loses nothing, so every later difference is
/// the table's.
fn check_written(v: &mut Verdict, rows: &[Value], written: &Value) {
    let got = lines(written);
    v.check(got.len() == rows.len(), || format!("Spark made {} rows of {}", got.len(), rows.len()));
    let by_id: BTreeMap<u64, &Value> = rows.iter().map(|r| (r[0].as_u64().unwrap(), r)).collect();
    let dec = |x: &Value| x.as_f64().or_else(|| x.as_str().and_then(|s| s.parse().ok()));
    for l in &got {
        let g: Value = serde_json::from_str(l).unwrap();
        let want = by_id[&g["id"].as_u64().unwrap()];
        let same = g["d"] == want[2]
            && g["ts"] == want[3]
            && dec(&g["amount"]) == dec(&want[4])
            && g["s"] == want[5]
            && g["ds"] == want[6]
            && g["st"]["d"] == want[7]["d"]
            && g["st"]["s"] == want[7]["s"]
            && dec(&g["st"]["n"]) == dec(&want[7]["n"]);
        if !v.check(same, || format!("Spark holds {l} for the row {want}")) {
            return;
        }
    }
}

fn lines(v: &Value) -> Vec<String> {
    v["lines"].as_array().expect("lines").iter().map(|l| l.as_str().unwrap().to_string()).collect()
}

fn modes() -> [(&'static str, Value); 2] {
    [("default", json!({})), ("EXCEPTION-mode", exception_read())]
}

pub(super) fn start_three(c: &mut Cluster, data: &str, executor: &str) {
    for n in NODES {
        c.start_with(n, &["--data", data, "--target-size", "8MiB", "--executor", executor]);
    }
    c.wait_nodes(Duration::from_secs(30), "three nodes alive and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

/// The checks of one test: each failure is printed when found and all are
/// named when the test ends, so one run shows everything that fails.
#[derive(Default)]
pub(super) struct Verdict(Vec<String>);

impl Verdict {
    pub(super) fn check(&mut self, ok: bool, what: impl FnOnce() -> String) -> bool {
        if !ok {
            let what = what();
            eprintln!("FAILED: {what}");
            self.0.push(what);
        }
        ok
    }

    /// `got` (a `read` answer) holds exactly `want`; a difference is shown
    /// by id: how many are missing, extra, changed, and the first change.
    fn same_rows(&mut self, what: &str, got: &Value, want: &[String]) -> bool {
        if got["ok"] != true {
            // Spark's first line names the error; the rest explains it.
            let e = got["error"].as_str().unwrap_or("?");
            let e: String = e.lines().next().unwrap_or(e).chars().take(400).collect();
            return self.check(false, || format!("{what}: Spark failed: {e}"));
        }
        let got = lines(got);
        if got == want {
            return true;
        }
        let by_id = |ls: &[String]| -> BTreeMap<i64, String> {
            ls.iter().map(|l| (serde_json::from_str::<Value>(l).unwrap()["id"].as_i64().unwrap(), l.clone())).collect()
        };
        let (g, w) = (by_id(&got), by_id(want));
        let missing = w.keys().filter(|k| !g.contains_key(k)).count();
        let extra = g.keys().filter(|k| !w.contains_key(k)).count();
        let changed: Vec<i64> = w.keys().filter(|k| g.get(k).is_some_and(|l| l != &w[k])).copied().collect();
        let first = changed.first().map(|k| format!("; first: want {} got {}", w[k], g[k])).unwrap_or_default();
        self.check(false, || {
            format!(
                "{what}: {} rows, want {}: {missing} missing, {extra} extra, {} changed{first}",
                got.len(),
                want.len(),
                changed.len()
            )
        })
    }

    pub(super) fn finish(self, test: &str) {
        assert!(self.0.is_empty(), "{test}: {} checks failed:\n- {}", self.0.len(), self.0.join("\n- "));
    }
}

/// The table (at `version`, else the latest) read once per read mode:
/// `(mode, answer)` for Spark's default settings and the EXCEPTION mode.
fn read_modes(spark: &Spark, format: &str, path: &str, version: Option<u64>) -> Vec<(&'static str, Value)> {
    let confs: Vec<Value> = modes().into_iter().map(|(_, conf)| conf).collect();
    let mut cmd = json!({"cmd": "read", "format": format, "path": path, "confs": confs, "lines": true});
    if let Some(v) = version {
        cmd["version"] = json!(v);
    }
    if format == "parquet" {
        cmd["schema"] = json!(SCHEMA);
    }
    let out = spark.call(&cmd);
    let reads = match out["reads"].as_array() {
        Some(r) => r.clone(),
        // The table could not be opened: every mode fails alike.
        None => vec![out.clone(); 2],
    };
    modes().into_iter().map(|(m, _)| m).zip(reads).collect()
}

/// Every mode reads exactly `want`.
fn same_rows_in_every_mode(v: &mut Verdict, what: &str, reads: Vec<(&str, Value)>, want: &[String]) {
    for (mode, got) in reads {
        v.same_rows(&format!("{what}, a {mode} read"), &got, want);
    }
}

/// The data files (not hidden, not compactd's own folder) under `table`.
fn data_files(table: &Path) -> Vec<String> {
    let mut out = vec![];
    for d in
        std::fs::read_dir(table).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("part="))
    {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            if f.path().is_file() && name.ends_with(".parquet") && !name.starts_with(['.', '_']) {
                out.push(format!("{}/{name}", d.file_name().to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// Every file below `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn delta_table_judged_by_spark(test: &str, legacy: bool) {
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let t = table.to_str().unwrap();
    let write_conf = if legacy { legacy_write() } else { json!({}) };
    let mut v = Verdict::default();
    let write = |append: u64, v: &mut Verdict| {
        let rows = append_rows(append);
        let w = spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": SCHEMA, "rows": rows,
                                  "partition_by": ["part"], "conf": write_conf}));
        check_written(v, &rows, &w);
        lines(&w)
    };
    // Version n holds appends 0..=n.
    let mut at_version: Vec<Vec<String>> = vec![];
    let mut all: Vec<String> = vec![];
    for a in 0..APPENDS {
        all.extend(write(a, &mut v));
        all.sort();
        at_version.push(all.clone());
    }
    // The judge reads its own table exactly, in both modes, and skips
    // files by their statistics: what compactd's output is held to.
    same_rows_in_every_mode(&mut v, "before compaction", read_modes(spark, "delta", t, None), &all);
    let scan = |what: &str| spark.run(&json!({"cmd": "scan", "format": "delta", "path": t, "where": what}));
    let before = scan(SELECTIVE);
    v.check(before["files"] == APPENDS && before["rows"] == APPENDS * ROWS, || {
        format!("before compaction the selective query read {before} (want the {APPENDS} files of part=1)")
    });
    eprintln!("{test}: Spark wrote {APPENDS} appends in {:?}", started.elapsed());

    start_three(&mut c, &format!("fs://{}", data.display()), "delta");
    // A table Spark wrote is no other executor's: refused by name, and not
    // a byte of it changes.
    let untouched = contents(&table);
    for exec in ["merge", "parquet"] {
        let data_uri = format!("fs://{}", data.display());
        let args = ["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", exec, "--data", &data_uri];
        let out = c.compactd(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        v.check(
            !out.status.success()
                && err.contains("is a Delta Lake table")
                && err.contains(&format!("the {exec} executor never changes it")),
            || format!("submit --executor {exec} of a Spark-written Delta table: {err}"),
        );
    }
    v.check(contents(&table) == untouched, || "a refused submit changed the table".to_string());
    let status = compact_with(&c, "delta");
    assert_eq!(status["state"], "Done", "{status:#}");
    let units = status["table_versions"].as_array().map_or(0, Vec::len);
    assert_eq!(units as u64, PARTITIONS, "one OPTIMIZE commit per partition: {status:#}");
    let latest = APPENDS - 1 + PARTITIONS;

    let history = spark.run(&json!({"cmd": "history", "path": t}))["history"].as_array().unwrap().clone();
    let versions: Vec<u64> = history.iter().map(|h| h["version"].as_u64().unwrap()).collect();
    v.check(versions == (0..=latest).collect::<Vec<_>>(), || format!("history versions {versions:?}"));
    for h in &history[APPENDS as usize..] {
        v.check(
            h["operation"] == "OPTIMIZE" && h["engineInfo"].as_str().is_some_and(|e| e.starts_with("compactd/")),
            || format!("DESCRIBE HISTORY does not show compactd's OPTIMIZE: {h}"),
        );
    }
    // compactd's checkpoint of version 10: `_last_checkpoint` names it, and
    // Spark starts from it (the reads at the newest versions below).
    let last = std::fs::read_to_string(table.join("_delta_log/_last_checkpoint")).unwrap_or_default();
    v.check(
        latest == 10
            && table.join("_delta_log/00000000000000000010.checkpoint.parquet").exists()
            && serde_json::from_str::<Value>(&last).is_ok_and(|l| l["version"] == 10),
        || format!("compactd's commit at version {latest} left no checkpoint of version 10: _last_checkpoint {last:?}"),
    );
    for version in 0..=latest {
        let want = &at_version[version.min(APPENDS - 1) as usize];
        let reads = read_modes(spark, "delta", t, Some(version));
        same_rows_in_every_mode(&mut v, &format!("compacted, version {version}"), reads, want);
    }
    let after = scan(SELECTIVE);
    v.check(after["rows"] == APPENDS * ROWS, || format!("the selective query after compaction: {after}"));
    v.check(after["files"].as_u64().is_some_and(|f| f <= 1), || {
        format!(
            "after compaction the selective query read {} files ({} bytes), want at most 1 (one partition holds \
             matching rows); before: {} files ({} bytes)",
            after["files"], after["bytes"], before["files"], before["bytes"]
        )
    });

    // Spark's own maintenance over compactd's files.
    all.extend(write(APPENDS, &mut v));
    all.sort();
    same_rows_in_every_mode(&mut v, "after Spark's append", read_modes(spark, "delta", t, None), &all);
    let optimized = spark.call(&json!({"cmd": "optimize", "path": t}));
    v.check(optimized["ok"] == true && optimized["metrics"]["numFilesRemoved"].as_u64() > Some(0), || {
        format!("Spark's OPTIMIZE: {optimized}")
    });
    same_rows_in_every_mode(&mut v, "after Spark's OPTIMIZE", read_modes(spark, "delta", t, None), &all);
    let vacuumed = spark.call(&json!({"cmd": "vacuum", "path": t}));
    v.check(vacuumed["ok"] == true && vacuumed["deleted"].as_u64() > Some(0), || format!("VACUUM: {vacuumed}"));
    let active = scan("true");
    let on_disk = data_files(&table);
    v.check(active["files"] == on_disk.len(), || format!("after VACUUM {active} but on disk {on_disk:?}"));
    let checkpoint = spark.call(&json!({"cmd": "checkpoint", "path": t}));
    v.check(checkpoint["ok"] == true, || format!("checkpoint: {checkpoint}"));
    let reads = read_modes(spark, "delta", t, None);
    same_rows_in_every_mode(&mut v, "after VACUUM and a checkpoint", reads, &all);
    eprintln!("{test}: {:?} in all", started.elapsed());
    v.finish(test);
}

#[test]
fn spark_reads_a_compacted_delta_table_it_wrote_in_its_default_mode_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    delta_table_judged_by_spark("delta, default mode", false);
}

#[test]
fn spark_reads_a_compacted_delta_table_it_wrote_in_legacy_mode_at_every_version() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    delta_table_judged_by_spark("delta, LEGACY mode", true);
}

fn parquet_table_judged_by_spark(test: &str, legacy: bool) {
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let t = table.to_str().unwrap();
    let write_conf = if legacy { legacy_write() } else { json!({}) };
    let mut v = Verdict::default();
    let mut all: Vec<String> = vec![];
    for a in 0..APPENDS {
        let rows = append_rows(a);
        let w = spark.run(&json!({"cmd": "write", "format": "parquet", "path": t, "schema": SCHEMA, "rows": rows,
                                  "partition_by": ["part"], "conf": write_conf}));
        check_written(&mut v, &rows, &w);
        all.extend(lines(&w));
    }
    all.sort();
    assert_eq!(data_files(&table).len() as u64, APPENDS * PARTITIONS, "{:?}", data_files(&table));
    same_rows_in_every_mode(&mut v, "before compaction", read_modes(spark, "parquet", t, None), &all);
    start_three(&mut c, &format!("fs://{}", data.display()), "parquet");
    let status = compact_with(&c, "parquet");
    assert_eq!(status["state"], "Done", "{status:#}");
    let files = data_files(&table);
    v.check(files.len() as u64 == PARTITIONS, || format!("after compaction: {files:?}"));
    same_rows_in_every_mode(&mut v, "compacted", read_modes(spark, "parquet", t, None), &all);
    eprintln!("{test}: {:?} in all", started.elapsed());
    v.finish(test);
}

#[test]
fn spark_reads_a_compacted_hive_parquet_table_it_wrote_in_its_default_mode() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    parquet_table_judged_by_spark("parquet, default mode", false);
}

#[test]
fn spark_reads_a_compacted_hive_parquet_table_it_wrote_in_legacy_mode() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    parquet_table_judged_by_spark("parquet, LEGACY mode", true);
}

/// Rows of the high-cardinality table: more distinct 110-byte strings than
/// one dictionary page holds (1 MiB in compactd's writer), so an output's
/// `s` chunk starts dictionary-encoded and falls back to PLAIN pages.
const DISTINCT_ROWS: u64 = 36_000;

/// Row `i`'s `s`: distinct, sorting as `i`.
fn distinct_s(i: u64) -> String {
    format!("row-{i:09}-{}", &(i * 7919).to_string().repeat(100)[..96])
}

/// Spark's Parquet library prunes row groups by their statistics and, for
/// a chunk its encoding statistics call all-dictionary, by the dictionary
/// alone: a footer that called a chunk with PLAIN pages all-dictionary
/// would make Spark (and Delta readers, and Iceberg's own reader, which
/// trusts the same statistics) skip rows that are there. Spark writes one
/// partition of high-cardinality strings, the `parquet` executor compacts
/// it, and each filtered read with pushdown returns what the same read
/// without pushdown does, and the rows the generator made.
#[test]
fn spark_prunes_a_compacted_file_whose_dictionary_fell_back_by_its_footer_and_loses_no_row() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(&table).unwrap();
    let t = table.to_str().unwrap();
    let s_sql =
        "substr(concat('row-', lpad(cast(id AS STRING), 9, '0'), '-', repeat(cast(id * 7919 AS STRING), 100)), 1, 110)";
    spark.run(&json!({"cmd": "sql", "sql": format!(
        "INSERT OVERWRITE DIRECTORY '{t}/part=0' USING parquet \
         SELECT /*+ REPARTITION_BY_RANGE(3, id) */ id, {s_sql} AS s, concat('k', cast(id % 5 AS STRING)) AS k \
         FROM range({DISTINCT_ROWS})")}));
    let inputs = data_files(&table);
    assert_eq!(inputs.len(), 3, "{inputs:?}");
    // parquet-java wrote `s` without a dictionary (its values are unique),
    // and compactd then writes it plain too: one input written again by
    // pyarrow, which dictionary-encodes until its 1 MiB limit, makes the
    // output's `s` start with a dictionary and fall back.
    let first = table.join(&inputs[0]);
    let rewrite = "import sys, pyarrow.parquet as pq\nt = pq.read_table(sys.argv[1])\n\
                   pq.write_table(t, sys.argv[1], use_dictionary=True)";
    let out = std::process::Command::new(common::parquet::python()).args(["-c", rewrite]).arg(&first).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let crc = first.with_file_name(format!(".{}.crc", first.file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_file(crc);
    start_three(&mut c, &format!("fs://{}", data.display()), "parquet");
    let status = compact_with(&c, "parquet");
    assert_eq!(status["state"], "Done", "{status:#}");
    let files = data_files(&table);
    assert_eq!(files.len(), 1, "{files:?}");
    // The case is there: as parquet-mr reads the footer, `s` has a
    // dictionary page and PLAIN data pages, `k` dictionary pages only.
    let footer = spark.run(&json!({"cmd": "footer", "path": table.join(&files[0])}));
    let chunk = |col: &str| footer["chunks"].as_array().unwrap().iter().find(|c| c["column"] == col).unwrap().clone();
    let (s, k) = (chunk("s"), chunk("k"));
    assert!(s["dictionary_pages"] == json!(["PLAIN"]) && s["data_pages"]["PLAIN"].as_u64() > Some(0), "{footer:#}");
    assert_eq!(s["non_dictionary_pages"], true, "{footer:#}");
    assert_eq!(k["non_dictionary_pages"], false, "{footer:#}");
    let n = DISTINCT_ROWS;
    let mut wheres: Vec<(String, u64)> = vec![];
    for i in [0, 8192, 16384, 24000, n - 1] {
        let v = distinct_s(i);
        wheres.push((format!("s = '{v}'"), 1));
        wheres.push((format!("s < '{v}'"), i));
        wheres.push((format!("s >= '{v}'"), n - i));
    }
    wheres.push((format!("s IN ('{}', '{}')", distinct_s(100), distinct_s(n - 100)), 2));
    wheres.push((format!("s = '{}'", &distinct_s(20000)[..14]), 0));
    wheres.push(("k = 'k3'".into(), n / 5));
    wheres.push(("k IN ('k1', 'k9')".into(), n / 5));
    wheres.push(("k = 'k9'".into(), 0));
    let mut v = Verdict::default();
    for (w, want) in &wheres {
        let confs = json!([{}, {"spark.sql.parquet.filterPushdown": "false"}]);
        let out = spark.run(&json!({"cmd": "read", "format": "parquet", "path": t, "where": w, "confs": confs}));
        let (pushed, plain) = (&out["reads"][0], &out["reads"][1]);
        v.check(pushed["count"] == *want && pushed["digest"] == plain["digest"], || {
            format!("{w}: with pushdown {pushed}, without {plain}, want {want} rows")
        });
    }
    eprintln!("dictionary fallback: {} filtered reads, {:?} in all", wheres.len(), started.elapsed());
    v.finish("dictionary fallback");
}

/// Appends before the nodes start, then during the compactions.
const FIRST_APPENDS: u64 = 4;
const LOOP_APPENDS: u64 = 16;
const LOOP_ROWS: u64 = 30;

#[test]
fn spark_appending_on_hdfs_while_compactd_compacts_loses_no_row_and_no_commit() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let Some(spark) = Spark::shared() else { return };
    let started = Instant::now();
    let hdfs = HdfsCluster::shared();
    let (root, data_uri) = (hdfs.new_root("spark-tree"), hdfs.new_root("spark-data"));
    let t = format!("{data_uri}/db/s/t");
    let appends = |start: u64, n: u64| {
        json!({"cmd": "append_loop", "path": t, "appends": n, "start_batch": start, "rows": LOOP_ROWS,
               "partitions": PARTITIONS})
    };
    let first = spark.run(&appends(0, FIRST_APPENDS));
    assert_eq!(first["errors"], json!([]), "{first}");
    let mut c = Cluster::on(root, vec![]);
    start_three(&mut c, &data_uri, "delta");
    let cmd = appends(FIRST_APPENDS, LOOP_APPENDS);
    let writer = std::thread::spawn(move || spark.call_within(&cmd, Duration::from_secs(600)));
    let mut v = Verdict::default();
    // Units each compaction committed (a unit that found its partition
    // compact commits nothing).
    let compact = |v: &mut Verdict| {
        let s = compact_with(&c, "delta");
        v.check(s["state"] == "Done", || format!("a compaction during the appends: {s:#}"));
        s["table_versions"]
            .as_array()
            .map_or(0, |u| u.iter().filter(|u| u["version_after"].as_u64() > u["version_before"].as_u64()).count())
    };
    let (mut compactions, mut during) = (0, 0);
    while !writer.is_finished() {
        during += compact(&mut v);
        compactions += 1;
    }
    let looped = writer.join().unwrap();
    assert!(looped["ok"] == true, "the appends: {looped}");
    let committed = during + compact(&mut v);
    let batches = FIRST_APPENDS + LOOP_APPENDS;
    v.check(looped["errors"] == json!([]), || format!("an append failed: {}", looped["errors"]));
    v.check(during > 0, || format!("no compaction committed during the appends ({compactions} ran)"));

    // Every row exactly once, in its batch.
    let got = spark.run(&json!({"cmd": "read", "format": "delta", "path": t, "lines": true}));
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    for l in lines(&got) {
        let r: Value = serde_json::from_str(&l).unwrap();
        let (id, batch) = (r["id"].as_u64().unwrap(), r["batch"].as_u64().unwrap());
        v.check(batch == id / LOOP_ROWS, || format!("row {l} is not in its batch"));
        *seen.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).collect();
    let lost: Vec<u64> = (0..batches * LOOP_ROWS).filter(|id| !seen.contains_key(id)).collect();
    v.check(twice.is_empty() && lost.is_empty() && seen.len() as u64 == batches * LOOP_ROWS, || {
        format!(
            "{} rows: {} ids twice (first {:?}), {} lost (first {:?})",
            seen.len(),
            twice.len(),
            twice.first(),
            lost.len(),
            lost.first()
        )
    });

    // One line of history: every version once, each append's commit once,
    // each compaction compactd's OPTIMIZE.
    let history = spark.run(&json!({"cmd": "history", "path": t}))["history"].as_array().unwrap().clone();
    let versions: Vec<u64> = history.iter().map(|h| h["version"].as_u64().unwrap()).collect();
    v.check(versions == (0..history.len() as u64).collect::<Vec<_>>(), || format!("history versions {versions:?}"));
    let mut writes: BTreeMap<String, u64> = BTreeMap::new();
    let mut optimizes = 0;
    for h in &history {
        match h["operation"].as_str() {
            Some("WRITE") => *writes.entry(h["userMetadata"].as_str().unwrap_or("?").to_string()).or_default() += 1,
            Some("OPTIMIZE") => {
                optimizes += 1;
                v.check(h["engineInfo"].as_str().is_some_and(|e| e.starts_with("compactd/")), || format!("{h}"));
            }
            _ => {
                v.check(false, || format!("an unexpected commit: {h}"));
            }
        }
        v.check(h["version"] == 0 || h["readVersion"].as_u64() < h["version"].as_u64(), || format!("{h}"));
    }
    let want: BTreeMap<String, u64> = (0..batches).map(|b| (format!("batch-{b}"), 1)).collect();
    v.check(writes == want, || format!("the appends' commits in the history: {writes:?}"));
    v.check(optimizes == committed, || format!("{optimizes} OPTIMIZE commits in the history, {committed} committed"));
    let distinct: BTreeSet<u64> = versions.iter().copied().collect();
    eprintln!(
        "hdfs: {batches} appends, {compactions} compactions ({during} units committed during the appends), {} \
         versions, {:?} in all",
        distinct.len(),
        started.elapsed()
    );
    v.finish("hdfs appends");
}
