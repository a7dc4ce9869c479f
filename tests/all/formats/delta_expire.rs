//! The `expire` executor on Delta tables, judged by tools nobody here
//! wrote: deltalake (its reads and its own `VACUUM` dry run) on fs, where
//! the executor is also SIGKILLed at exact points of a run and rerun; Spark
//! (reads, time travel, a reader pinned at the oldest version kept during
//! the run, `VACUUM … DRY RUN`) and the NameNode's own count on
//! a real HDFS, for a table of 2,000 small files compacted, then expired.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::{alive, monitor_of, reading_during, Cluster, BIN};
use common::hdfs::HdfsCluster;
use common::parquet::{compact_with, copy_dir, delta_tool, files_below as files_of};
use common::s3::S3Server;
use common::spark::Spark;
use serde_json::{json, Value};

fn start_three(c: &mut Cluster, data: &str) {
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", data, "--target-size", "8MiB", "--executor", "delta"]);
    }
    c.wait_nodes(Duration::from_secs(60), "three nodes alive and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

/// Submits an `expire` task of `db.s.t` with `params`; its `status --json`
/// once it ended.
fn expire(c: &Cluster, params: &[&str]) -> Value {
    let with: Vec<String> = params.iter().map(|p| format!("--param={p}")).collect();
    c.expire(&with.iter().map(String::as_str).collect::<Vec<_>>())
}

fn data_files(dir: &Path) -> Vec<String> {
    files_of(dir).into_iter().filter(|f| f.ends_with(".parquet") && !f.starts_with("_delta_log")).collect()
}

const FORCED_ZERO: [&str; 3] = ["expire.older-than=0", "expire.log-older-than=0", "expire.force=true"];

#[test]
fn expire_on_fs_keeps_the_tables_own_retention_refuses_a_shorter_one_and_forced_frees_what_deltalake_would() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let t = table.to_str().unwrap();
    let generated = delta_tool(&["gen", "--table", t, "--appends", "40", "--partitions", "4", "--rows", "100"], &[]);
    let data_uri = format!("fs://{}", data.display());
    start_three(&mut c, &data_uri);
    let compacted = compact_with(&c, "delta");
    assert_eq!(compacted["state"], "Done", "{compacted:#}");
    let newest = delta_tool(&["check", "--table", t, "--rows-at", "key"], &[]);
    let version = newest["version"].as_u64().unwrap();
    let before = data_files(&table);
    assert_eq!(before.len(), 40 + 4, "40 small files and 4 compacted ones: {before:?}");

    // The table's own retention (7 days): every replaced file is younger.
    let s = expire(&c, &[]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["stats"]["data_files_deleted"], 0, "{s:#}");
    assert_eq!(data_files(&table), before);

    // Shorter than the table's own: refused by name, before any unit runs.
    let s = expire(&c, &["expire.older-than=1h"]);
    assert_eq!(s["state"], "Failed", "{s:#}");
    assert!(s.to_string().contains("delta.deletedFileRetentionDuration (7d)"), "{s:#}");
    let out = c.expire_with_data(&data_uri, &["expire.older-than=1h"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("expire.force=true"), "submit --data refuses it: {err}");
    assert_eq!(data_files(&table), before);

    // Forced, keeping the last two versions: the newest compaction's inputs
    // stay for the version before it.
    let mut params = FORCED_ZERO.to_vec();
    params.push("expire.retain-last=2");
    let s = expire(&c, &params);
    assert_eq!(s["state"], "Done", "{s:#}");
    let kept = delta_tool(&["check", "--table", t, "--min-version", &(version - 1).to_string()], &[]);
    assert_eq!(kept["rows"], generated["rows"], "{kept}");
    let (at_2, logs_2) = (data_files(&table).len(), files_of(&table.join("_delta_log")));
    assert!(at_2 > 4 && at_2 < 44, "{at_2} data files after retain-last=2");
    assert!(logs_2.contains(&format!("{:020}.checkpoint.parquet", version - 1)), "{logs_2:?}");

    // Forced, the newest version only: its files alone stay, deltalake's own
    // VACUUM finds nothing more, and reads the same rows.
    let s = expire(&c, &FORCED_ZERO);
    assert_eq!(s["state"], "Done", "{s:#}");
    let left = data_files(&table);
    let active = delta_tool(&["files", "--table", t], &[]);
    assert_eq!(left.len() as u64, active["files"].as_u64().unwrap(), "{left:?} {active}");
    assert_eq!(left.len(), 4, "{left:?}");
    let vacuum = delta_tool(&["vacuum-dry", "--table", t], &[]);
    assert_eq!(vacuum["files"], json!([]), "deltalake would delete more: {vacuum}");
    let now = delta_tool(&["check", "--table", t, "--min-version", &version.to_string()], &[]);
    assert_eq!(now["rows"], generated["rows"], "{now}");
    let logs = files_of(&table.join("_delta_log"));
    let commits: Vec<&String> = logs.iter().filter(|f| f.ends_with(".json") && !f.starts_with('.')).collect();
    assert_eq!(commits, vec![&format!("{version:020}.json")], "the log starts at the newest version: {logs:?}");
    // An old version is gone, as deltalake says.
    let old = Command::new(common::parquet::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/delta_tool.py"))
        .args(["check", "--table", t, "--min-version", "0"])
        .output()
        .unwrap();
    assert!(!old.status.success(), "version 0 still reads: {}", String::from_utf8_lossy(&old.stdout));
    // `check --data` names no anomaly: versions a retention made unreadable
    // are printed apart.
    let check = c.compactd(&["check", "--data", &data_uri]);
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "check: {}{err}", String::from_utf8_lossy(&check.stdout));
    // On a schedule: a repeat task, each round the same retention.
    let mut params: Vec<String> = FORCED_ZERO.iter().map(|p| format!("--param={p}")).collect();
    params.extend(["--repeat", "2", "--interval", "1s"].map(String::from));
    let s = c.expire(&params.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!((&s["state"], &s["round"]), (&json!("Done"), &json!(2)), "{s:#}");
    assert_eq!(s["stats"]["data_files_deleted"], 0, "nothing left to delete in round 2: {s:#}");
    assert_eq!(data_files(&table).len(), 4);
    eprintln!("fs: {} data files before, {at_2} with the last two versions kept, {} after", before.len(), left.len());
}

/// Where a run of `__expire` is killed: a file operation, its path's
/// pattern, and which matching call.
const KILLS: [(&str, &str, u32); 5] = [
    ("rename-after", "_last_checkpoint", 1),
    ("unlink-before", "part-", 1),
    ("unlink-before", "part-", 20),
    ("unlink-before", ".json", 1),
    ("unlink-before", ".json", 30),
];

#[test]
fn a_sigkilled_expire_leaves_a_table_deltalake_reads_and_the_rerun_finishes() {
    let _turn = crate::common::turns::waits();
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template/db/s/t");
    std::fs::create_dir_all(&template).unwrap();
    let tt = template.to_str().unwrap();
    let generated = delta_tool(&["gen", "--table", tt, "--appends", "40", "--partitions", "2", "--rows", "100"], &[]);
    // Compacted by a unit run by hand, one partition per commit.
    for part in ["part=0", "part=1"] {
        let out = Command::new(BIN)
            .args(["--root", &format!("fs://{}", tmp.path().join("template").display()), "__merge"])
            .args(["--dir", "db/s/t/", "--task", "by-hand", "--round", "1", "--attempt", "1"])
            .args(["--target-size", "8388608", "--format", "delta", "--partition", part])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let version = generated["version"].as_u64().unwrap() + 2;
    let run = |root: &Path| {
        common::cluster::expire_unit(
            root,
            &[("expire.older-than", "0"), ("expire.log-older-than", "0"), ("expire.force", "true")],
        )
    };
    // The run that is not killed: what every rerun must end at.
    let whole = tmp.path().join("whole");
    copy_dir(&tmp.path().join("template"), &whole);
    let out = run(&whole).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = files_of(&whole.join("db/s/t"));
    let mut killed = 0;
    for (i, (at, pattern, nth)) in KILLS.into_iter().enumerate() {
        let what = format!("kill at {at} {pattern:?} #{nth}");
        let root = tmp.path().join(format!("k{i}"));
        copy_dir(&tmp.path().join("template"), &root);
        let table = root.join("db/s/t");
        let t = table.to_str().unwrap();
        let mut cmd = run(&root);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        common::killat::arm(&mut cmd, at, pattern, nth);
        let status = cmd.status().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}: not killed ({status})");
        killed += 1;
        // The newest version reads right whatever was deleted (deltalake's
        // replay, its files read by pyarrow).
        let f = delta_tool(&["files", "--table", t, "--parts", "2"], &[]);
        assert_eq!((f["version"].as_u64(), &f["rows"]), (Some(version), &json!([2000, 2000])), "{what}: {f}");
        let out = run(&root).output().unwrap();
        assert!(out.status.success(), "{what}: the rerun: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(files_of(&table), want, "{what}: the rerun ends where an unkilled run does");
        let c = delta_tool(&["check", "--table", t, "--min-version", &version.to_string()], &[]);
        assert_eq!(c["rows"], generated["rows"], "{what}: {c}");
        let vacuum = delta_tool(&["vacuum-dry", "--table", t], &[]);
        assert_eq!(vacuum["files"], json!([]), "{what}: {vacuum}");
    }
    assert_eq!(killed, KILLS.len());
}

#[test]
fn on_s3_expire_deletes_by_the_listings_ages_and_deltalake_finds_nothing_more() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    let data_uri = s3.new_bucket("expire-data");
    let env = s3.env();
    // s3://bucket/prefix?endpoint=… → s3://bucket/prefix/db/s/t?endpoint=…
    let (base, query) = data_uri.split_once('?').unwrap();
    let t = format!("{base}/db/s/t?{query}");
    let generated = delta_tool(&["gen", "--table", &t, "--appends", "20", "--partitions", "2", "--rows", "50"], &env);
    let compactd = |args: &[&str], params: &[(&str, &str)]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["--root", &data_uri]).args(args).envs(env.iter().map(|(k, v)| (k, v)));
        for (k, v) in params {
            cmd.env(format!("COMPACTD_PARAM_EXPIRE_{k}"), v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    for part in ["part=0", "part=1"] {
        let unit = ["--round", "1", "--attempt", "1", "--target-size", "8388608", "--format", "delta"];
        compactd(
            &[&["__merge", "--dir", "db/s/t/", "--task", "by-hand"][..], &unit, &["--partition", part]].concat(),
            &[],
        );
    }
    // The table's own retention: every object is younger than a week.
    let kept = compactd(&["__expire", "--dir", "db/s/t/"], &[]);
    assert!(kept.contains("0 data files"), "{kept}");
    let out =
        compactd(&["__expire", "--dir", "db/s/t/"], &[("OLDER_THAN", "0"), ("LOG_OLDER_THAN", "0"), ("FORCE", "true")]);
    assert!(out.contains("20 data files"), "the 20 replaced objects deleted: {out}");
    // The log now starts at the newest version's checkpoint: deltalake and
    // the log replay read it alike.
    let newest = (generated["version"].as_u64().unwrap() + 2).to_string();
    let c = delta_tool(&["check", "--table", &t, "--min-version", &newest], &env);
    assert_eq!((&c["files"], &c["rows"]), (&json!(2), &generated["rows"]), "{c}");
    let vacuum = delta_tool(&["vacuum-dry", "--table", &t], &env);
    assert_eq!(vacuum["files"], json!([]), "deltalake would delete more: {vacuum}");
}

#[test]
fn on_hdfs_a_compacted_then_expired_table_of_2000_files_leaves_the_namenode_what_spark_still_reads() {
    let _turn = crate::common::turns::SPARK_DELTA.turn();
    let Some(spark) = Spark::shared() else { return };
    let hdfs = HdfsCluster::shared();
    let (root, data_uri) = (hdfs.new_root("expire-tree"), hdfs.new_root("expire-data"));
    let t = format!("{data_uri}/db/s/t");
    let write = |from: u64, n: u64, per_file: u64| {
        let rows: Vec<Value> = (from..from + n).map(|i| json!([i, format!("row-{i}")])).collect();
        spark.run(&json!({"cmd": "write", "format": "delta", "path": t, "schema": "id BIGINT, s STRING",
            "rows": rows, "mode": "append", "files": 1, "options": {"maxRecordsPerFile": per_file.to_string()}}))
    };
    // Version 0: one Spark task writing a file per row, 2,000 small files.
    write(0, 2000, 1);
    let (_, files_written, bytes_written) = hdfs.count(&t);
    assert!(files_written > 2000, "{files_written} files");
    let mut c = Cluster::on(root, vec![]);
    start_three(&mut c, &data_uri);
    // Version 1: compactd's OPTIMIZE.
    let compacted = compact_with(&c, "delta");
    assert_eq!(compacted["state"], "Done", "{compacted:#}");
    let (_, files_compacted, bytes_compacted) = hdfs.count(&t);
    // Version 2: an append of 10 rows.
    write(2000, 10, 10);
    // A read's answer, failed or not ({ok, lines} or {ok: false, error}).
    let read = |version: Option<u64>| {
        let mut cmd = json!({"cmd": "read", "format": "delta", "path": t, "lines": true});
        if let Some(v) = version {
            cmd["version"] = json!(v);
        }
        spark.call(&cmd)
    };
    let want_1 = read(Some(1))["lines"].clone();
    let want_2 = read(None)["lines"].clone();
    assert_eq!((want_1.as_array().map(Vec::len), want_2.as_array().map(Vec::len)), (Some(2000), Some(2010)));

    // Forced to zero, the last two versions kept: version 0's files go,
    // while a reader pinned at version 1, the oldest kept, reads every row
    // of it again and again.
    let rpcs = hdfs.namenode_rpcs_settled();
    let mut params = FORCED_ZERO.to_vec();
    params.push("expire.retain-last=2");
    let (s, reads) = reading_during(
        || expire(&c, &params),
        || assert_eq!(read(Some(1))["lines"], want_1, "the reader pinned at version 1, during the expiry"),
    );
    assert_eq!(s["state"], "Done", "{s:#}");
    let expire_rpcs = hdfs.namenode_rpcs_settled() - rpcs;
    let (_, files_after, bytes_after) = hdfs.count(&t);
    assert_eq!(read(None)["lines"], want_2, "Spark reads the same rows at the newest version");
    assert_eq!(read(Some(1))["lines"], want_1, "and at the version before it (retain-last=2)");
    let gone = read(Some(0));
    assert_eq!(gone["ok"], false, "version 0 is expired: {}", gone.to_string().chars().take(300).collect::<String>());
    assert!(gone["error"].as_str().is_some_and(|e| e.contains("DELTA_VERSION_NOT_FOUND")), "Spark's own error: {gone}");
    let vacuum = spark.run(&json!({"cmd": "vacuum_dry", "path": t}));
    assert_eq!(vacuum["files"], json!([]), "Spark's VACUUM would delete more: {vacuum}");

    // The newest version only: the NameNode keeps its files and the log
    // from its checkpoint on.
    let s = expire(&c, &FORCED_ZERO);
    assert_eq!(s["state"], "Done", "{s:#}");
    let (_, files_final, bytes_final) = hdfs.count(&t);
    let vacuum = spark.run(&json!({"cmd": "vacuum_dry", "path": t}));
    assert_eq!(vacuum["files"], json!([]), "Spark's VACUUM would delete more: {vacuum}");
    assert_eq!(read(None)["lines"], want_2);
    assert!(!read(Some(1))["ok"].as_bool().unwrap(), "version 1 is expired now");
    let detail = spark.run(&json!({"cmd": "sql", "sql": format!("DESCRIBE DETAIL delta.`{t}`"), "lines": true}));
    let detail: Value = serde_json::from_str(detail["lines"][0].as_str().unwrap()).unwrap();
    let live = detail["numFiles"].as_u64().unwrap();
    // Left beside the live files: the newest commit, its checkpoint,
    // `_last_checkpoint`, and the newest commit's checksum where Spark
    // wrote one (`2.crc`).
    let metadata = files_final - live;
    assert!((3..=4).contains(&metadata), "{files_final} files on the NameNode for {live} live ones ({s:#})");
    eprintln!(
        "hdfs: files (bytes) on the NameNode: {files_written} ({bytes_written}) written, {files_compacted} \
         ({bytes_compacted}) compacted, {files_after} ({bytes_after}) expired keeping 2 versions ({expire_rpcs} \
         NameNode RPCs, {reads} pinned reads meanwhile), {files_final} ({bytes_final}) keeping 1: {live} live files and {metadata} of the log"
    );
}
