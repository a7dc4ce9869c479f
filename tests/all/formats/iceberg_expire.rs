//! The `expire` executor on Iceberg tables, judged by Java Iceberg (its
//! reads at every snapshot kept, its own `ExpireSnapshots` planned with the
//! same settings, and the files its reachability utilities say nothing
//! reaches, as `remove_orphan_files` finds them) and pyiceberg: on fs a
//! table Java wrote and compactd compacted, expired by the table's own
//! age, refused a shorter one, forced to two snapshots then one; SIGKILL at
//! each step of a run (after the metadata commit, among the data,
//! manifest, list and metadata deletes) then rerun to the files an unkilled
//! run leaves; a writer committing while the expiry is stopped right
//! before its commit (its commit loses, it reads and plans again, the
//! append stays); on a real HDFS a table of 2,000 small files Spark wrote,
//! compacted, then expired: the NameNode's count, Spark's reads of the
//! snapshots kept (one pinned at the oldest, again and again during the
//! run) and its error for an expired one, then Spark's own
//! `remove_orphan_files` (dry run) and `expire_snapshots` finding nothing,
//! Java's expiry planning nothing more and its reachability finding nothing
//! unreached.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

use common::cluster::{reading_during, Cluster};
use common::hdfs::HdfsCluster;
use common::iceberg::{pyiceberg_read, Java};
use common::iceberg_table::{before, compact_table, live_in, make_table, rows, start_three};
use common::parquet::{copy_dir, files_below as files_of};
use common::spark::Spark;
use serde_json::{json, Value};

const SOLE: &str = "iceberg.sole-writer=true";

/// Submits an `expire` task of `db.s.t` with `params` (and `SOLE`); its
/// `status --json` once it ended.
fn expire(c: &Cluster, params: &[&str]) -> Value {
    let mut with: Vec<String> = params.iter().map(|p| format!("--param={p}")).collect();
    with.push(format!("--param={SOLE}"));
    c.expire(&with.iter().map(String::as_str).collect::<Vec<_>>())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The snapshot ids Java lists, in its order (the commits').
fn snapshot_ids(java: &Java, location: &str) -> Vec<i64> {
    let s = java.run(&json!({"cmd": "snapshots", "location": location}));
    s["snapshots"].as_array().unwrap().iter().map(|s| s["id"].as_i64().unwrap()).collect()
}

/// What Java's reachability finds that nothing reaches below the table.
fn unreachable(java: &Java, location: &str) -> Value {
    java.run(&json!({"cmd": "unreachable", "location": location}))
}

fn data_files(dir: &Path) -> Vec<String> {
    files_of(dir).into_iter().filter(|f| f.starts_with("data/") && !f.contains("/.")).collect()
}

#[test]
fn expire_on_fs_keeps_the_tables_own_age_refuses_a_shorter_one_and_forced_leaves_only_what_java_reaches() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let location = table.to_str().unwrap().to_string();
    make_table(java, &location, 6, 3);
    // A position delete the compaction applies: its file is then spent.
    java.run(&json!({"cmd": "posdelete", "location": location, "path": live_in(java, &location, "p1")[0], "pos": 0}));
    let data_uri = format!("fs://{}", data.display());
    start_three(&mut c, &data_uri);
    let compacted = compact_table(&c, "t", &[SOLE]);
    assert_eq!(compacted["state"], "Done", "{compacted:#}");
    let old = before(java, &location);
    let ids = snapshot_ids(java, &location);
    assert_eq!(ids.len(), 8, "create-less: 6 appends, a delete, the compaction: {ids:?}");
    let files = files_of(&table);
    assert!(unreachable(java, &location)["unreachable"] == json!([]), "nothing unreachable before");

    // The table's own age (5 days): every snapshot is younger.
    let s = expire(&c, &[]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!((s["stats"]["snapshots_expired"].as_u64(), s["stats"]["bytes_freed"].as_u64()), (Some(0), Some(0)));
    assert_eq!(files_of(&table), files, "nothing deleted");
    assert_eq!(snapshot_ids(java, &location), ids);

    // Shorter than the table's own: refused by name, before any unit runs,
    // and by `submit --data`.
    let s = expire(&c, &["expire.older-than=1h"]);
    assert_eq!(s["state"], "Failed", "{s:#}");
    assert!(s.to_string().contains("history.expire.max-snapshot-age-ms (5d)"), "{s:#}");
    let out = c.expire_with_data(&data_uri, &["expire.older-than=1h", SOLE]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("expire.force=true"), "submit --data refuses it: {err}");
    assert_eq!(files_of(&table), files);

    // Forced, keeping two snapshots: the compaction and the one before, as
    // Java's own expiry with the same settings keeps, each reading as before.
    let s = expire(&c, &["expire.older-than=0", "expire.force=true", "expire.retain-last=2"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let two = snapshot_ids(java, &location);
    assert_eq!(two, ids[6..].to_vec(), "{s:#}");
    let plan = java.run(&json!({"cmd": "expire_plan", "location": location, "older_than": now_ms(), "retain_last": 2}));
    assert_eq!(plan["expired"], json!([]), "Java would expire more: {plan}");
    for id in &two {
        let r = java.run(&json!({"cmd": "read", "location": location, "snapshot": id}));
        assert_eq!((&r["count"], &r["digest"]), (&old.reads[id]["count"], &old.reads[id]["digest"]), "snapshot {id}");
    }
    // The expired snapshots were appends: every data file they reached is
    // still read (the compaction's inputs by the snapshot before it); their
    // manifest lists are gone.
    let at_two = data_files(&table).len();
    assert_eq!(at_two, data_files_in(&files), "{s:#}");
    assert!(s["stats"]["lists_deleted"].as_u64() >= Some(6), "{s:#}");
    assert_eq!(unreachable(java, &location)["unreachable"], json!([]), "{s:#}");

    // Forced, the newest snapshot only: its files alone stay, Java and
    // pyiceberg read the same rows, an expired snapshot no longer reads.
    // An unfinished compaction's output, which no metadata names yet, stays
    // too (then it goes, as its task's commit or `vacuum-orphans` would
    // decide, so that the checks below see the table alone).
    let unfinished = table.join("data/part=p0/compactd-t9-r1-u0123456789abcdef-a1-0.parquet");
    std::fs::write(&unfinished, b"an output its task has not committed yet").unwrap();
    let s = expire(&c, &["expire.older-than=0", "expire.force=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert!(unfinished.exists(), "a file no metadata names is not the expiry's: {s:#}");
    std::fs::remove_file(&unfinished).unwrap();
    assert_eq!(snapshot_ids(java, &location), vec![old.current]);
    assert_eq!(s["stats"]["delete_files_deleted"], 1, "the delete file the compaction applied: {s:#}");
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(now["digest"], old.reads[&old.current]["digest"]);
    let live = java.run(&json!({"cmd": "snapshots", "location": location}))["live"].as_array().unwrap().len();
    assert_eq!(data_files(&table).len(), live, "{:?}", data_files(&table));
    let gone = java.call(&json!({"cmd": "read", "location": location, "snapshot": ids[0]}));
    assert_ne!(gone["ok"], true, "an expired snapshot still reads: {gone}");
    // Java's local writes leave a Hadoop checksum beside each file: it goes
    // with its file.
    let after = files_of(&table);
    for f in after.iter().filter(|f| f.ends_with(".crc")) {
        let (dir, name) = f.rsplit_once('/').unwrap_or(("", f));
        let of = name.strip_prefix('.').and_then(|n| n.strip_suffix(".crc")).unwrap();
        let of = if dir.is_empty() { of.to_string() } else { format!("{dir}/{of}") };
        assert!(after.contains(&of), "{f} outlived its file");
    }
    let orphans = unreachable(java, &location);
    assert_eq!(orphans["unreachable"], json!([]), "{orphans}");
    let py = pyiceberg_read(&location, "id");
    assert_eq!(py["current"].as_i64(), Some(old.current), "{py}");
    assert_eq!(py["snapshots"][old.current.to_string()]["rows"], old.reads[&old.current]["count"], "{py}");
    // `check --data` names no anomaly.
    let check = c.compactd(&["check", "--data", &data_uri]);
    assert!(
        check.status.success(),
        "check: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    eprintln!(
        "fs: {} files before ({} data), {at_two} data files with two snapshots kept, {} files after ({} data): {}",
        files.len(),
        data_files_in(&files),
        files_of(&table).len(),
        data_files(&table).len(),
        s["stats"]
    );
}

fn data_files_in(files: &[String]) -> usize {
    files.iter().filter(|f| f.starts_with("data/") && !f.contains("/.")).count()
}

/// Where a run of `__expire` is killed: a file operation, its path's
/// pattern, and which matching call.
const KILLS: [(&str, &str, u32); 6] = [
    ("link-after", ".metadata.json", 1),
    ("unlink-before", ".parquet", 1),
    ("unlink-before", ".parquet", 9),
    ("unlink-before", "-m", 2),
    ("unlink-before", "snap-", 2),
    ("unlink-before", ".metadata.json", 1),
];

#[test]
fn a_sigkilled_iceberg_expire_leaves_a_table_java_reads_and_the_rerun_finishes() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template/db/s/t");
    std::fs::create_dir_all(template.parent().unwrap()).unwrap();
    let location = template.to_str().unwrap().to_string();
    make_table(java, &location, 6, 2);
    // Java's own rewrites replace every file of both partitions: their
    // inputs are what the expiry frees.
    for part in ["p0", "p1"] {
        java.run(&json!({"cmd": "rewrite", "location": location, "paths": live_in(java, &location, part)}));
    }
    // Few metadata versions kept: the older ones go too.
    java.run(&json!({"cmd": "set_properties", "location": location,
        "properties": {"write.metadata.previous-versions-max": "3"}}));
    let want_rows = java.run(&json!({"cmd": "read", "location": location}));
    let run = |root: &Path| {
        common::cluster::expire_unit(
            root,
            &[("expire.older-than", "0"), ("expire.force", "true"), ("iceberg.sole-writer", "true")],
        )
    };
    // The run that is not killed: what every rerun must end at. The copies
    // keep the table's absolute location: each is moved into the
    // template's place to run and to be read.
    let whole = tmp.path().join("whole");
    copy_dir(&tmp.path().join("template"), &whole);
    let at_template = |root: &Path, f: &dyn Fn()| {
        let aside = tmp.path().join("aside");
        std::fs::rename(tmp.path().join("template"), &aside).unwrap();
        std::fs::rename(root, tmp.path().join("template")).unwrap();
        f();
        std::fs::rename(tmp.path().join("template"), root).unwrap();
        std::fs::rename(&aside, tmp.path().join("template")).unwrap();
    };
    let template_root = tmp.path().join("template");
    at_template(&whole, &|| {
        let out = run(&template_root).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("expired"), "{text}");
        eprintln!("unkilled: {text}");
    });
    let want = files_of(&whole.join("db/s/t"));
    let mut killed = 0;
    for (i, (at, pattern, nth)) in KILLS.into_iter().enumerate() {
        let what = format!("kill at {at} {pattern:?} #{nth}");
        let root = tmp.path().join(format!("k{i}"));
        copy_dir(&tmp.path().join("template"), &root);
        at_template(&root, &|| {
            let mut cmd = run(&template_root);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            common::killat::arm(&mut cmd, at, pattern, nth);
            let status = cmd.status().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}: not killed ({status})");
            // The current snapshot reads right whatever was deleted.
            let r = java.run(&json!({"cmd": "read", "location": location}));
            assert_eq!(r["digest"], want_rows["digest"], "{what}");
            let out = run(&template_root).output().unwrap();
            assert!(out.status.success(), "{what}: the rerun: {}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(files_of(&template), want, "{what}: the rerun ends where an unkilled run does");
            assert_eq!(unreachable(java, &location)["unreachable"], json!([]), "{what}");
        });
        killed += 1;
    }
    assert_eq!(killed, KILLS.len());
}

#[test]
fn a_writer_committing_while_the_expiry_is_about_to_commit_loses_nothing() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let location = table.to_str().unwrap().to_string();
    make_table(java, &location, 4, 2);
    let version = || {
        let hint = std::fs::read_to_string(table.join("metadata/version-hint.text")).unwrap();
        hint.trim().parse::<u64>().unwrap()
    };
    let read = version();
    // The expiry stops right before it creates its new metadata version:
    // its plan is made from version `read`.
    let mut cmd = common::cluster::expire_unit(
        tmp.path(),
        &[("expire.older-than", "0"), ("expire.force", "true"), ("iceberg.sole-writer", "true")],
    );
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    common::killat::arm_stop(&mut cmd, "create-before", ".metadata.json", 1);
    let child = cmd.spawn().unwrap();
    common::killat::wait_stopped(child.id());
    // Meanwhile a writer commits version `read + 1`: an append.
    java.run(&json!({"cmd": "append", "location": location, "rows": rows(100, 30, 2), "files": 1}));
    assert_eq!(version(), read + 1);
    let want = java.run(&json!({"cmd": "read", "location": location}));
    let appended = java.run(&json!({"cmd": "snapshots", "location": location}))["current"].as_i64().unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Its create found the writer's version: it read the table again and
    // committed the next, over the append, which no snapshot loses.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("in metadata version {}", read + 2)), "{text}");
    assert_eq!(version(), read + 2);
    assert_eq!(snapshot_ids(java, &location), vec![appended], "the append is the snapshot kept: {text}");
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&want["count"], &want["digest"]), "{text}");
    assert_eq!(unreachable(java, &location)["unreachable"], json!([]), "{text}");
}

#[test]
fn on_hdfs_a_compacted_then_expired_iceberg_table_of_2000_files_leaves_the_namenode_what_spark_still_reads() {
    let _turn = crate::common::turns::SPARK_ICEBERG.turn();
    let Some(spark) = Spark::iceberg() else { return };
    let hdfs = HdfsCluster::shared();
    let (root, data_uri) = (hdfs.new_root("iceberg-expire-tree"), hdfs.new_root("iceberg-expire-data"));
    let t = format!("{data_uri}/db/s/t");
    spark.run(&json!({"cmd": "catalog", "name": "x", "warehouse": format!("{data_uri}/db")}));
    spark.run(&json!({"cmd": "sql", "sql": "CREATE TABLE x.s.t (id BIGINT, s STRING, part STRING) USING iceberg \
        PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', 'write.spark.fanout.enabled'='true', \
        'write.distribution-mode'='none')"}));
    // One append of 2,000 files: 100 tasks, each writing a range of 30 ids
    // into the 20 partitions (`id % 20`).
    spark.run(&json!({"cmd": "sql", "sql": "INSERT INTO x.s.t SELECT /*+ REPARTITION_BY_RANGE(100, id) */ id, \
        concat('row-', id), concat('p', id % 20) FROM range(3000)"}));
    let (_, files_written, bytes_written) = hdfs.count(&t);
    assert!(files_written > 2000, "{files_written} files");
    let mut c = Cluster::on(root, vec![]);
    start_three(&mut c, &data_uri);
    let compacted = compact_table(&c, "t", &[]);
    assert_eq!(compacted["state"], "Done", "{compacted:#}");
    let (_, files_compacted, bytes_compacted) = hdfs.count(&t);
    spark.run(&json!({"cmd": "sql", "sql": "INSERT INTO x.s.t VALUES (5000, 'late', 'p0'), (5001, 'late', 'p1')"}));
    let snapshots: Vec<i64> = spark.run(&json!({"cmd": "query",
        "sql": "SELECT snapshot_id FROM x.s.t.snapshots ORDER BY committed_at"}))["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["snapshot_id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(snapshots.len(), 3, "the append, compactd's replace, the insert: {snapshots:?}");
    let read = |snapshot: Option<i64>| spark.call(&json!({"cmd": "table", "table": "x.s.t", "snapshot": snapshot}));
    let (want_2, want_3) = (read(Some(snapshots[1])), read(None));
    assert_eq!((&want_2["count"], &want_3["count"]), (&json!(3000), &json!(3002)));

    // Forced to zero, the last two snapshots kept: the append's files go,
    // while a reader pinned at compactd's replace, the oldest kept, reads
    // every row of it again and again.
    let rpcs = hdfs.namenode_rpcs_settled();
    let (s, reads) = reading_during(
        || expire(&c, &["expire.older-than=0", "expire.force=true", "expire.retain-last=2"]),
        || assert_eq!(read(Some(snapshots[1]))["digest"], want_2["digest"], "the pinned reader, during the expiry"),
    );
    assert_eq!(s["state"], "Done", "{s:#}");
    let expire_rpcs = hdfs.namenode_rpcs_settled() - rpcs;
    let (_, files_after, bytes_after) = hdfs.count(&t);
    assert_eq!(read(None)["digest"], want_3["digest"], "Spark reads the same rows at the newest snapshot");
    assert_eq!(read(Some(snapshots[1]))["digest"], want_2["digest"], "and at the one before it");
    let gone = read(Some(snapshots[0]));
    assert_eq!(gone["ok"], false, "the first snapshot is expired: {gone}");
    assert!(gone["error"].as_str().is_some_and(|e| e.contains(&snapshots[0].to_string())), "Spark's own error: {gone}");

    // The newest only: Spark's own expiry and orphan search find nothing
    // more, nor do Java's expiry planned with the same settings and its
    // reachability (the rule of `remove_orphan_files`).
    let s = expire(&c, &["expire.older-than=0", "expire.force=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let (_, files_final, bytes_final) = hdfs.count(&t);
    assert_eq!(read(None)["digest"], want_3["digest"]);
    let java = Java::shared();
    let plan = java.run(&json!({"cmd": "expire_plan", "location": t, "older_than": now_ms(), "retain_last": 1}));
    assert_eq!(plan["expired"], json!([]), "Java would expire more: {plan}");
    let orphans = unreachable(java, &t);
    assert_eq!(orphans["unreachable"], json!([]), "{orphans}");
    assert_eq!(orphans["files"], files_final, "{orphans}");
    // remove_orphan_files refuses an age under a day: every file of the
    // table is made two days old first, so that all are candidates.
    spark.run(&json!({"cmd": "age", "location": t, "mtime_ms": now_ms() - 2 * 86_400_000}));
    // A procedure's arguments are literals.
    let at = |sql: &str| spark.run(&json!({"cmd": "query", "sql": sql}))["rows"][0]["t"].as_str().unwrap().to_string();
    let (day_ago, now) = (
        at("SELECT CAST(current_timestamp() - INTERVAL 25 HOURS AS STRING) AS t"),
        at("SELECT CAST(current_timestamp() AS STRING) AS t"),
    );
    let orphans = spark
        .run(&json!({"cmd": "query", "sql": format!("CALL x.system.remove_orphan_files(table => 's.t', \
        older_than => TIMESTAMP '{day_ago}', dry_run => true)")}));
    assert_eq!(orphans["rows"], json!([]), "Spark's remove_orphan_files would delete: {orphans}");
    let expired = spark.run(&json!({"cmd": "query", "sql": format!("CALL x.system.expire_snapshots(table => 's.t', \
        older_than => TIMESTAMP '{now}', retain_last => 1)")}));
    let deleted = &expired["rows"][0];
    let counts: Vec<&str> = deleted.as_object().unwrap().values().filter_map(Value::as_str).collect();
    assert!(counts.len() >= 5 && counts.iter().all(|n| *n == "0"), "Spark's expire_snapshots deleted: {expired}");
    let after_spark = hdfs.count(&t).1;
    assert!((files_final..=files_final + 1).contains(&after_spark), "{files_final} files, then {after_spark}");
    assert_eq!(read(None)["digest"], want_3["digest"]);
    let live = spark.run(&json!({"cmd": "query", "sql": "SELECT count(*) AS n FROM x.s.t.files"}))["rows"][0]["n"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let metadata = files_final - live;
    eprintln!(
        "hdfs: files (bytes) on the NameNode: {files_written} ({bytes_written}) written, {files_compacted} \
         ({bytes_compacted}) compacted, {files_after} ({bytes_after}) expired keeping 2 snapshots ({expire_rpcs} \
         NameNode RPCs, {reads} pinned reads meanwhile), {files_final} ({bytes_final}) keeping 1: {live} live files and {metadata} of metadata ({})",
        s["stats"]
    );
    // Left beside the live files: the metadata versions the log keeps, the
    // hint, one manifest list and its manifests.
    assert!(metadata <= 12, "{files_final} files on the NameNode for {live} live ones ({s:#})");
}
