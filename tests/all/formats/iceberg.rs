//! The `iceberg` executor, judged by Java Iceberg (the reference
//! implementation, `tests/support/iceberg`, one JVM for this file) and
//! pyiceberg: file-system tables Java's `HadoopTables` wrote on fs and on a
//! MiniDFSCluster are compacted by three `compactd` processes; both read
//! the same rows at the new snapshot and at every older one, the snapshot
//! is a `replace` whose removed and added files are exactly the planned
//! inputs and the outputs, every metric compactd wrote equals Java's
//! `ParquetUtil.fileMetrics`, and a predicate scan on each column returns
//! what a full scan and a filter do. Java appends in a loop on HDFS while
//! compactd compacts; concurrent deletes, position deletes and Java's own
//! rewrites of the inputs make the commit abandon the unit; SIGKILLs at the
//! commit's steps leave a table that reads at the old or the new snapshot;
//! and what compactd does not handle is refused by name, every byte kept.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use common::cluster::{Cluster, BIN};
use common::hdfs::HdfsCluster;
use common::iceberg::{pyiceberg_catalog_table, pyiceberg_read, pyiceberg_with, Java};
use common::iceberg_table::{
    assert_compacted, before, compact_table, hand_tree, hand_unit, live_in, make_table, outputs_with_javas_metrics,
    rows, run_ok, schema, start_three,
};
use common::s3::S3Server;
use serde_json::{json, Value};

/// Submits `db.s.t` as an `iceberg` task with `params`, waits, returns its
/// `status --json`.
fn compact(c: &Cluster, params: &[&str]) -> Value {
    compact_table(c, "t", params)
}

#[test]
fn three_nodes_compact_a_java_table_on_fs_and_java_and_pyiceberg_agree_at_every_snapshot() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let location = table.to_str().unwrap().to_string();
    make_table(java, &location, 6, 3);
    let old = before(java, &location);
    start_three(&mut c, &format!("fs://{}", data.display()));
    // On fs a Java writer can overwrite a version compactd created: a task
    // must state compactd is the sole writer.
    let refused = compact(&c, &[]);
    assert_eq!(refused["state"], "Failed", "{refused:#}");
    assert!(refused["error"].as_str().unwrap().contains("sole writer"), "{refused:#}");
    let status = compact(&c, &["iceberg.sole-writer=true"]);
    eprintln!("status: {status:#}");
    assert_eq!(status["stats"]["rows_in"], status["stats"]["rows_out"], "{status:#}");
    let new = assert_compacted(java, &location, &location, &old, &status);
    let text = c.compactd(&["status", status["id"].as_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(commit)") && text.contains(&format!("snapshot {} -> {new}", old.current)), "{text}");
    // A second task finds nothing small enough twice in a partition.
    let again = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(again["state"], "Done", "{again:#}");
    assert!(again["table_versions"].as_array().is_none_or(|v| v.is_empty()), "{again:#}");
}

#[test]
fn three_nodes_compact_a_file_system_table_on_s3_as_its_sole_writer_and_pyiceberg_agrees() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    let root = s3.new_bucket("iceberg-tree");
    let data = s3.new_bucket("iceberg-data");
    let env = s3.env();
    let (base, query) = data.split_once('?').unwrap();
    let table = format!("{base}/db/s/t?{query}");
    pyiceberg_with(&["s3_make", &table, "6", "40", "3"], &env);
    let old = pyiceberg_with(&["read", &table, "--key", "id"], &env);
    let old_current = old["current"].as_i64().unwrap().to_string();
    assert_eq!(old["snapshots"][&old_current]["files"].as_array().unwrap().len(), 18, "{old}");
    let mut c = Cluster::on(root, env.clone());
    start_three(&mut c, &data);
    // Java and Spark writers commit on S3 by checking then copying: only a
    // task that states compactd is the sole writer commits.
    let refused = compact(&c, &[]);
    assert!(refused["error"].as_str().unwrap_or("").contains("sole writer"), "{refused:#}");
    let status = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(status["state"], "Done", "{status:#}");
    let versions = status["table_versions"].as_array().expect("a commit");
    assert_eq!((versions.len(), versions[0]["version_after"].as_u64()), (1, Some(2)), "{status:#}");
    // pyiceberg, through the hint compactd wrote: one replace, the same
    // rows at it and every older snapshot, one compactd file a partition.
    let new = pyiceberg_with(&["read", &table, "--key", "id"], &env);
    let current = new["current"].as_i64().unwrap();
    assert_eq!(versions[0]["stats"]["snapshot_after"].as_u64(), Some(current as u64), "{status:#}");
    let now = &new["snapshots"][current.to_string()];
    assert_eq!((now["operation"].as_str(), now["parent"].to_string()), (Some("replace"), old_current.clone()), "{now}");
    assert_eq!(
        (&now["rows"], &now["digest"]),
        (&old["snapshots"][&old_current]["rows"], &old["snapshots"][&old_current]["digest"])
    );
    let files = now["files"].as_array().unwrap();
    assert!(files.len() == 3 && files.iter().all(|f| f.as_str().unwrap().contains("/compactd-")), "{now}");
    for (id, r) in old["snapshots"].as_object().unwrap() {
        assert_eq!(
            (&new["snapshots"][id]["rows"], &new["snapshots"][id]["digest"]),
            (&r["rows"], &r["digest"]),
            "{id}"
        );
    }
    let bucket = base.trim_start_matches("s3://").split('/').next().unwrap();
    let keys = s3.list_keys(bucket, "compactd/db/s/t/metadata/");
    assert!(keys.iter().any(|k| k.ends_with("/v2.metadata.json")), "{keys:?}");
}

#[test]
fn java_appends_on_hdfs_while_three_nodes_compact_and_no_row_is_lost_or_doubled() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let hdfs = HdfsCluster::shared();
    let root = hdfs.new_root("iceberg-tree");
    let data = hdfs.new_root("iceberg-data");
    let location = format!("{data}/db/s/t");
    make_table(java, &location, 6, 3);
    let first = before(java, &location);
    let mut c = Cluster::on(root, vec![]);
    start_three(&mut c, &data);
    // Java commits by a rename that refuses an existing target on HDFS, as
    // compactd does: no sole-writer statement needed, and both race.
    java.run(
        &json!({"cmd": "append_loop_start", "location": location, "appends": 15, "rows": 20, "start": 100, "parts": 3}),
    );
    let status = compact(&c, &[]);
    let appended = java.run(&json!({"cmd": "append_loop_wait"}));
    eprintln!("status: {status:#}");
    let batches = appended["batches"].as_array().unwrap();
    assert!(batches.iter().all(|b| b["ok"] == true), "{appended}");
    assert_eq!(status["state"], "Done", "{status:#}");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let list = snaps["snapshots"].as_array().unwrap();
    // History is linear: each snapshot's parent is the one before it.
    for w in list.windows(2) {
        assert_eq!(w[1]["parent"], w[0]["id"], "{snaps:#}");
    }
    let replace: Vec<&Value> = list.iter().filter(|s| s["operation"] == "replace").collect();
    assert_eq!(replace.len(), 1, "{snaps:#}");
    let (new, parent) = (replace[0]["id"].as_i64().unwrap(), replace[0]["parent"].as_i64().unwrap());
    let at = |id: i64| java.run(&json!({"cmd": "read", "location": location, "snapshot": id}));
    let (a, b) = (at(new), at(parent));
    assert_eq!((&a["count"], &a["digest"]), (&b["count"], &b["digest"]), "the replace changed no row");
    // Every row of every append is there once.
    let py = pyiceberg_read(&location, "id");
    let current = &py["snapshots"][py["current"].as_i64().unwrap().to_string()];
    let keys: Vec<u64> =
        current["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().parse().unwrap()).collect();
    let mut want: Vec<u64> = (0..6).flat_map(|b| (0..60).map(move |i| b * 1000 + i)).collect();
    want.extend((100..115u64).flat_map(|b| (0..20).map(move |i| b * 20 + i)));
    let (mut got, mut want) = (keys, want);
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "rows lost or doubled");
    for (id, r) in &first.reads {
        assert_eq!(py["snapshots"][id.to_string()]["rows"], r["count"], "snapshot {id}");
    }
    for f in outputs_with_javas_metrics(java, &location) {
        assert_eq!(f["length"], f["size"], "{f}");
    }
}

#[test]
fn a_commit_abandons_units_whose_inputs_were_deleted_rewritten_or_position_deleted_since_and_commits_the_rest() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let tmp = tempfile::tempdir().unwrap();
    let (data, tree) = (tmp.path().join("data"), tmp.path().join("tree"));
    let location = data.join("db/s/t").to_str().unwrap().to_string();
    make_table(java, &location, 4, 4);
    hand_tree(&tree, 5, &[0, 1, 2, 3]);
    for (u, p) in ["p0", "p1", "p2", "p3"].iter().enumerate() {
        let out = run_ok(&mut hand_unit(&data, &tree, &format!("spec0,part=\"{p}\""), u as u32, 1));
        assert!(out.contains("staged"), "{out}");
    }
    let p3_inputs = live_in(java, &location, "p3");
    let staged_before = java.run(&json!({"cmd": "snapshots", "location": location}))["current"].as_i64().unwrap();
    // Meanwhile: an input of p0 deleted, a row of an input of p1 deleted by
    // position, p2's inputs compacted by Java's own RewriteFiles.
    java.run(&json!({"cmd": "delete", "location": location, "path": live_in(java, &location, "p0")[0]}));
    java.run(&json!({"cmd": "posdelete", "location": location, "path": live_in(java, &location, "p1")[0], "pos": 0}));
    java.run(&json!({"cmd": "rewrite", "location": location, "paths": live_in(java, &location, "p2")}));
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    let out = run_ok(&mut hand_unit(&data, &tree, "_commit", 4, 1));
    assert!(out.contains("(1 units, 3 abandoned"), "{out}");
    // Only p3 was compactd's: its inputs are replaced, the rest is as the
    // concurrent writers left it, no row lost or doubled.
    let after = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&after["count"], &after["digest"]), (&theirs["count"], &theirs["digest"]));
    let p3 = live_in(java, &location, "p3");
    assert_eq!(p3.len(), 1, "{p3:?}");
    assert!(p3[0].contains("/compactd-"), "{p3:?}");
    for p in ["p0", "p1", "p2"] {
        assert!(live_in(java, &location, p).iter().all(|f| !f.contains("/compactd-")), "{p}");
        let dir = data.join(format!("db/s/t/data/part={p}"));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("compactd-"))
            .collect();
        assert!(left.is_empty(), "an abandoned unit's outputs were left in {}", dir.display());
    }
    // The other way round: Java's rewrite of files compactd replaced first
    // fails its validation; exactly one compaction wins.
    let lost =
        java.call(&json!({"cmd": "rewrite", "location": location, "paths": p3_inputs, "validate_from": staged_before}));
    assert_eq!(lost["ok"], false, "{lost}");
    assert!(lost["error"].as_str().unwrap().contains("Missing required files to delete"), "{lost}");
    outputs_with_javas_metrics(java, &location);
}

#[test]
fn an_equality_delete_committed_after_the_units_read_still_applies_to_the_outputs() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let tmp = tempfile::tempdir().unwrap();
    let (data, tree) = (tmp.path().join("data"), tmp.path().join("tree"));
    let location = data.join("db/s/t").to_str().unwrap().to_string();
    make_table(java, &location, 3, 2);
    hand_tree(&tree, 3, &[0, 1]);
    for (u, p) in ["p0", "p1"].iter().enumerate() {
        let out = run_ok(&mut hand_unit(&data, &tree, &format!("spec0,part=\"{p}\""), u as u32, 1));
        assert!(out.contains("staged"), "{out}");
    }
    let read_seq =
        java.run(&json!({"cmd": "snapshots", "location": location}))["snapshots"].as_array().unwrap().last().unwrap()
            ["sequence_number"]
            .as_i64()
            .unwrap();
    // Meanwhile Java deletes row id 2 (of p0) by equality, at a later
    // sequence number than the one the units read.
    let deleted = java.run(&json!({"cmd": "eqdelete", "location": location,
        "path": live_in(java, &location, "p0")[0], "column": "id", "value": 2}));
    assert!(deleted["sequence_number"].as_i64().unwrap() > read_seq, "{deleted}");
    let theirs = java.run(&json!({"cmd": "read", "location": location, "lines": true}));
    let has_id = |r: &Value, id: i64| {
        r["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| serde_json::from_str::<Value>(l.as_str().unwrap()).unwrap()["id"] == id)
    };
    assert!(!has_id(&theirs, 2) && has_id(&theirs, 4));
    // The commit goes ahead: its outputs keep the sequence number the units
    // read, so the delete, newer, applies to them as to the inputs.
    let out = run_ok(&mut hand_unit(&data, &tree, "_commit", 2, 1));
    assert!(out.contains("committed snapshot") && out.contains("(2 units, 0 abandoned"), "{out}");
    let after = java.run(&json!({"cmd": "read", "location": location, "lines": true}));
    assert_eq!((&after["count"], &after["digest"]), (&theirs["count"], &theirs["digest"]), "the deleted row came back");
    assert!(!has_id(&after, 2));
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let new = snaps["current"].as_i64().unwrap();
    let diff = java.run(&json!({"cmd": "diff", "location": location, "snapshot": new}));
    assert_eq!(diff["operation"], "replace");
    for f in diff["added"].as_array().unwrap() {
        assert_eq!(f["data_sequence_number"].as_i64(), Some(read_seq), "{f}");
    }
}

/// A v1 table keeps a removed partition field as `void`: an equality delete
/// written in that spec (after an upgrade to v2) is global, as Java's
/// `DeleteFileIndex` reads an unpartitioned spec, so it applies to every
/// partition of the older spec. compactd applies it while rewriting them
/// (its outputs keep the sequence number read, which the delete would no
/// longer reach), and it leaves with them.
#[test]
fn an_equality_delete_in_a_void_spec_applies_to_every_partition_and_is_applied_by_the_rewrite() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "properties": {"format-version": "1"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    let spec = java.run(&json!({"cmd": "drop_partition_field", "location": location, "name": "part"}));
    assert_eq!(spec["unpartitioned"], true, "{spec}");
    java.run(&json!({"cmd": "upgrade", "location": location, "version": 2}));
    // Data in the first spec (partitioned by part), written after the
    // upgrade (manifests compactd rewrites).
    for b in 0..3 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 20, 2), "files": 2, "spec_id": 0}));
    }
    // Rows 1001 (p1) and 2000 (p0) deleted by one global delete.
    java.run(&json!({"cmd": "eqdelete", "location": location, "spec": "current", "column": "id", "value": 1001}));
    java.run(&json!({"cmd": "eqdelete", "location": location, "spec": "current", "column": "id", "value": 2000}));
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(theirs["count"], 58, "{theirs}");
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]), "a deleted row came back");
    for p in ["p0", "p1"] {
        let files = live_in(java, &location, p);
        assert!(files.len() == 1 && files[0].contains("/compactd-"), "{p}: {files:?}");
    }
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["removed-equality-delete-files"], "2", "{current:#}");
}

/// Columns of the types the other tests' tables lack: uuid (its Parquet
/// logical type kept), fixed, binary, time, timestamp without zone, map.
/// Java reads the same rows and measures the same metrics; the outputs use
/// the table's codec.
#[test]
fn uuid_fixed_binary_time_and_map_columns_are_compacted_and_uuid_stays_a_uuid() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "u", "required": false, "type": "uuid"},
        {"id": 3, "name": "part", "required": false, "type": "string"},
        {"id": 4, "name": "f", "required": false, "type": "fixed[20]"},
        {"id": 5, "name": "b", "required": false, "type": "binary"},
        {"id": 6, "name": "t", "required": false, "type": "time"},
        {"id": 7, "name": "ts", "required": false, "type": "timestamp"},
        {"id": 8, "name": "m", "required": false,
         "type": {"type": "map", "key-id": 9, "key": "string", "value-id": 10, "value": "int", "value-required": false}},
    ]});
    java.run(&json!({"cmd": "create", "location": location, "schema": schema,
        "properties": {"write.parquet.compression-codec": "gzip"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..3u64 {
        let rows: Vec<Value> = (0..10u64)
            .map(|i| {
                let id = b * 100 + i;
                json!({"id": id, "u": format!("{:08x}-0000-4000-8000-{:012x}", id, id * 7919),
                    "part": format!("p{}", i % 2), "f": format!("{:040x}", id * 0x1234_5678_9abc),
                    "b": format!("{:0width$x}", id, width = 2 + 2 * (i as usize % 5)),
                    "t": format!("{:02}:{:02}:{:02}.123456", id % 24, i % 60, b),
                    "ts": format!("2024-03-{:02}T{:02}:00:00.000001", 1 + i, b),
                    "m": if i % 3 == 0 { Value::Null } else { json!({"k": i, "j": b}) }})
            })
            .collect();
        java.run(&json!({"cmd": "append", "location": location, "rows": rows, "files": 2}));
    }
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let outputs = outputs_with_javas_metrics(java, &location);
    assert_eq!(outputs.len(), 2, "{outputs:#?}");
    for f in outputs {
        let file = std::fs::File::open(f["path"].as_str().unwrap()).unwrap();
        let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).unwrap();
        use parquet::file::reader::FileReader;
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let u = schema.columns().iter().find(|c| c.name() == "u").unwrap().clone();
        assert_eq!(u.logical_type_ref(), Some(&parquet::basic::LogicalType::Uuid), "{}", f["path"]);
        // The table's codec, as every writer of it uses.
        let codec = reader.metadata().row_group(0).column(0).compression();
        assert!(matches!(codec, parquet::basic::Compression::GZIP(_)), "{codec:?}");
    }
}

/// A data file alone in its partition is rewritten when deletes remove
/// enough of its rows (30 %, Spark's `delete-ratio-threshold`), and its
/// delete files retire with it; a lone file without deletes is left alone.
#[test]
fn a_lone_file_most_deleted_is_rewritten_alone_and_its_deletes_retire() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    java.run(&json!({"cmd": "append", "location": location, "rows": rows(0, 40, 2), "files": 1}));
    let (p0, p1) = (live_in(java, &location, "p0"), live_in(java, &location, "p1"));
    assert_eq!((p0.len(), p1.len()), (1, 1));
    // 6 of p0's 20 rows, one position delete file each.
    for pos in [0, 3, 5, 8, 13, 19] {
        java.run(&json!({"cmd": "posdelete", "location": location, "path": p0[0], "pos": pos}));
    }
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(theirs["count"], 34);
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let now = live_in(java, &location, "p0");
    assert!(now.len() == 1 && now[0].contains("/compactd-"), "{now:?}");
    assert_eq!(live_in(java, &location, "p1"), p1, "a lone file without deletes was rewritten");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["removed-position-delete-files"], "6", "{current:#}");
    assert_eq!(current["summary"]["total-delete-files"], "0", "{current:#}");
}

/// Every file under `dir` with its bytes.
fn snapshot_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path().display().to_string(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn tables_compactd_does_not_handle_are_refused_by_name_and_keep_every_byte() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let loc = |t: &str| data.join(format!("db/s/{t}")).display().to_string();
    let create = |t: &str, props: Value| {
        java.run(&json!({"cmd": "create", "location": loc(t), "schema": schema(), "properties": props,
            "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
        for b in 0..3 {
            java.run(&json!({"cmd": "append", "location": loc(t), "rows": rows(b, 20, 2), "files": 2}));
        }
    };
    create("gz", json!({"write.metadata.compression-codec": "gzip"}));
    // (An encrypted table cannot be made here: Java 1.12 takes
    // `encryption.*` properties on format v3 only, refused above as v3.)
    java.run(&json!({"cmd": "create", "location": loc("avro"), "schema": schema(),
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..3 {
        java.run(
            &json!({"cmd": "append", "location": loc("avro"), "rows": rows(b, 20, 2), "files": 2, "format": "avro"}),
        );
    }
    create("posdel", json!({}));
    let p0 = live_in(java, &loc("posdel"), "p0");
    java.run(&json!({"cmd": "posdelete", "location": loc("posdel"), "path": p0[0], "pos": 1}));
    let cat = data.parent().unwrap().join("catalog");
    std::fs::create_dir_all(&cat).unwrap();
    pyiceberg_catalog_table(cat.to_str().unwrap(), &loc("metastore"));
    let before = snapshot_files(&data);
    start_three(&mut c, &format!("fs://{}", data.display()));
    let refused = [
        ("gz", "gzip"),
        ("metastore", "catalog's metadata file"),
        ("avro", "AVRO data: compactd rewrites Parquet only"),
    ];
    for (t, why) in refused {
        let s = compact_table(&c, t, &["iceberg.sole-writer=true"]);
        assert_eq!(s["state"], "Failed", "{t}: {s:#}");
        let err = s["error"].as_str().unwrap_or_default();
        assert!(err.contains(why) && err.contains(&format!("db/s/{t}/")), "{t}: {s:#}");
    }
    let after = snapshot_files(&data);
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    assert!(before == after, "a refused table changed");
    // A partition with a position delete is compacted with the delete
    // applied, and the delete file, spent, leaves with its data file.
    let theirs = java.run(&json!({"cmd": "read", "location": loc("posdel")}));
    let s = compact_table(&c, "posdel", &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    for p in ["p0", "p1"] {
        let files = live_in(java, &loc("posdel"), p);
        assert!(files.len() == 1 && files[0].contains("/compactd-"), "{p}: {files:?}");
    }
    let ours = java.run(&json!({"cmd": "read", "location": loc("posdel")}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let snaps = java.run(&json!({"cmd": "snapshots", "location": loc("posdel")}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["removed-position-delete-files"], "1", "{current:#}");
    assert_eq!(current["summary"]["total-delete-files"], "0", "{current:#}");
}

/// Where a unit or a commit is killed: (what runs, the shim's mode, its
/// path pattern).
const KILLS: [(&str, &str, &str); 4] = [
    ("unit", "link-before", "/Staged/r1.u0"),
    ("commit", "link-before", ".metadata.json"),
    ("commit", "link-after", ".metadata.json"),
    ("commit", "rename-before", "version-hint.text"),
];

#[test]
fn a_unit_or_commit_killed_at_its_steps_leaves_a_table_read_at_the_old_or_new_snapshot_and_the_rerun_commits_once() {
    let _turn = crate::common::turns::waits();
    use std::os::unix::process::ExitStatusExt;
    let java = Java::shared();
    for (k, (what, at, pattern)) in KILLS.iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let (data, tree) = (tmp.path().join("data"), tmp.path().join("tree"));
        let location = data.join("db/s/t").display().to_string();
        make_table(java, &location, 3, 2);
        hand_tree(&tree, 3, &[0, 1]);
        let old = java.run(&json!({"cmd": "read", "location": location}));
        let label = format!("kill {k}: {what} at {at} {pattern}");
        let unit = |key: &str, index: u32, attempt: u32| hand_unit(&data, &tree, key, index, attempt);
        let mut first = if *what == "unit" { unit("spec0,part=\"p0\"", 0, 1) } else { unit("_commit", 2, 1) };
        if *what == "commit" {
            run_ok(&mut unit("spec0,part=\"p0\"", 0, 1));
            run_ok(&mut unit("spec0,part=\"p1\"", 1, 1));
        }
        first.stdout(Stdio::null()).stderr(Stdio::null());
        common::killat::arm(&mut first, at, pattern, 1);
        let status = first.status().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{label}: not killed");
        // Java and pyiceberg read the table whole, at the old snapshot or
        // the new one (Java lists; pyiceberg follows the hint).
        let now = java.run(&json!({"cmd": "read", "location": location}));
        assert_eq!((&now["count"], &now["digest"]), (&old["count"], &old["digest"]), "{label}");
        let py = pyiceberg_read(&location, "id");
        let cur = py["current"].as_i64().unwrap().to_string();
        assert_eq!(py["snapshots"][&cur]["rows"], old["count"], "{label}: {py}");
        // The rerun completes: it commits, or finds the killed commit.
        if *what == "unit" {
            run_ok(&mut unit("spec0,part=\"p0\"", 0, 2));
            run_ok(&mut unit("spec0,part=\"p1\"", 1, 1));
        }
        let out = run_ok(&mut unit("_commit", 2, 2));
        let expect = if *at == "link-before" { "committed snapshot" } else { "an earlier attempt" };
        assert!(out.contains(expect), "{label}: {out}");
        let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
        let replaces = snaps["snapshots"].as_array().unwrap().iter().filter(|s| s["operation"] == "replace").count();
        assert_eq!(replaces, 1, "{label}: {snaps:#}");
        let now = java.run(&json!({"cmd": "read", "location": location}));
        assert_eq!((&now["count"], &now["digest"]), (&old["count"], &old["digest"]), "{label}");
        assert_eq!(now["files"], 2, "{label}: {now}");
        let py = pyiceberg_read(&location, "id");
        assert_eq!(py["current"], snaps["current"], "{label}: the hint is brought up to date");
        // The killed attempt's files no snapshot names are orphans: named
        // by `check --data`, removed by `vacuum-orphans` only.
        let data_uri = format!("fs://{}", data.display());
        let tree_uri = format!("fs://{}", tree.display());
        let check =
            Command::new(BIN).args(["--root", &tree_uri, "check", "--data", &data_uri, "--json"]).output().unwrap();
        let anomalies: Vec<Value> = serde_json::from_slice(&check.stdout)
            .unwrap_or_else(|e| panic!("{label}: check --json: {e}: {}", String::from_utf8_lossy(&check.stderr)));
        let named: Vec<&str> = anomalies
            .iter()
            .filter(|a| a["problem"].as_str().unwrap_or("").contains("orphan of the iceberg executor"))
            .filter_map(|a| a["path"].as_str())
            .collect();
        match k {
            0 => assert!(named.len() == 1 && named[0].contains("-a1-0.parquet"), "{label}: {anomalies:#?}"),
            1 => assert!(
                !named.is_empty() && named.iter().all(|p| p.contains("/metadata/") && p.contains("-a1-")),
                "{label}: {named:?}"
            ),
            _ => assert!(named.is_empty(), "{label}: {named:?}"),
        }
        let vac = Command::new(BIN)
            .args(["--root", &tree_uri, "vacuum-orphans", "--data", &data_uri, "--older-than", "1ms"])
            .arg("--unknown-tasks-finished")
            .output()
            .unwrap();
        assert!(vac.status.success(), "{label}: {}", String::from_utf8_lossy(&vac.stderr));
        for p in &named {
            assert!(!data.join(p).exists(), "{label}: {p} not vacuumed");
        }
        let again = java.run(&json!({"cmd": "read", "location": location}));
        assert_eq!(again["digest"], old["digest"], "{label}: vacuum removed a live file");
    }
}
