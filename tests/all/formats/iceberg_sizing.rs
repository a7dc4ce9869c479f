//! How much an `iceberg` task takes on, judged by Java Iceberg: the
//! table's own `write.target-file-size-bytes` and metadata retention, and a
//! partition larger than the group size split into file groups that any
//! node rewrites, committed in one snapshot, or without a group that
//! failed (partial progress), a position delete across groups retiring
//! only with all of them.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::cluster::Cluster;
use common::iceberg::Java;
use common::iceberg_table::{
    compact_partitions, compact_table, hand_tree, hand_unit, live_in, outputs_with_javas_metrics, rows, run_ok, schema,
    start_three, TASK,
};
use serde_json::{json, Value};

fn compact(c: &Cluster, params: &[&str]) -> Value {
    compact_table(c, "t", params)
}

/// The table's `write.target-file-size-bytes` sets what is small (where a
/// policy's task does not name a target): a table whose files are over
/// three quarters of it is left alone, and compacted once it is raised. With
/// `write.metadata.delete-after-commit.enabled` the commit deletes the
/// metadata file that falls out of `previous-versions-max`, as Java's
/// commits do.
#[test]
fn the_tables_target_file_size_and_metadata_retention_are_honoured() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "properties": {"write.target-file-size-bytes": "1000",
            "write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "2"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..3 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 40, 2), "files": 1}));
    }
    let files = live_in(java, &location, "p0");
    assert!(files.iter().all(|f| std::fs::metadata(f.trim_start_matches("file:")).unwrap().len() > 750), "{files:?}");
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert!(s["table_versions"].as_array().is_none_or(|v| v.is_empty()), "nothing is small at 1000 bytes: {s:#}");
    assert_eq!(live_in(java, &location, "p0"), files);
    java.run(&json!({"cmd": "set_properties", "location": location,
        "properties": {"write.target-file-size-bytes": "100000"}}));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["table_versions"].as_array().map(Vec::len), Some(1), "{s:#}");
    let now = live_in(java, &location, "p0");
    assert!(now.len() == 1 && now[0].contains("/compactd-"), "{now:?}");
    // The current version and the two its log holds.
    let metadata: Vec<String> = std::fs::read_dir(data.join("db/s/t/metadata"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    assert_eq!(metadata.len(), 3, "{metadata:?}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(ours["count"], 120, "{ours}");
}

/// A table of one partition of 24 small files and one position delete
/// file naming a row of each, as a Spark `DELETE` over the partition
/// writes it; its data files.
fn one_partition_and_a_delete_across_it(java: &Java, location: &str) -> Vec<String> {
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..12 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 20, 1), "files": 2}));
    }
    let files = live_in(java, location, "p0");
    assert_eq!(files.len(), 24, "{files:?}");
    java.run(&json!({"cmd": "posdelete", "location": location, "paths": files, "pos": 0}));
    files
}

/// The bytes of data files (as manifests name them) on fs.
fn bytes_of(files: &[String]) -> u64 {
    files.iter().map(|f| std::fs::metadata(f.trim_start_matches("file:")).unwrap().len()).sum()
}

/// The inputs a unit's staged record names.
fn staged_inputs(tree: &Path, task: &str, unit: u32) -> BTreeSet<String> {
    let path = tree.join(format!("Compaction_V2/Scheduler/{task}/Staged/r1.u{unit}.a1"));
    let record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    record["inputs"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect()
}

#[test]
fn a_large_partition_is_rewritten_as_file_groups_by_three_nodes_in_one_snapshot_that_retires_a_delete_across_them() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    let files = one_partition_and_a_delete_across_it(java, &location);
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(theirs["count"], 240 - 24);
    let bytes = bytes_of(&files);
    start_three(&mut c, &format!("fs://{}", data.display()));
    // Groups of a third of the partition's bytes: three.
    let group = format!("iceberg.max-file-group-size-bytes={}", bytes / 3 + 1);
    let s = compact(&c, &["iceberg.sole-writer=true", &group]);
    assert_eq!(s["state"], "Done", "{s:#}");
    let versions = s["table_versions"].as_array().expect("table_versions");
    assert_eq!(versions.len(), 1, "one snapshot for every group: {s:#}");
    assert_eq!(s["result"]["success"], 4, "three groups and the commit: {s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let now = live_in(java, &location, "p0");
    assert!((2..=3).contains(&now.len()) && now.iter().all(|f| f.contains("/compactd-")), "{now:?}");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["removed-position-delete-files"], "1", "{current:#}");
    assert_eq!(current["summary"]["total-delete-files"], "0", "{current:#}");
    outputs_with_javas_metrics(java, &location);
}

#[test]
fn groups_that_finished_commit_when_another_failed_and_a_delete_it_shares_stays() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let tmp = tempfile::tempdir().unwrap();
    let (data, tree) = (tmp.path().join("data"), tmp.path().join("tree"));
    let location = data.join("db/s/t").to_str().unwrap().to_string();
    let files = one_partition_and_a_delete_across_it(java, &location);
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    // Both groups staged; the second's unit then failed (no outcome).
    hand_tree(&tree, 3, &[0]);
    for k in 0..2 {
        let out = run_ok(&mut hand_unit(&data, &tree, &format!("spec0,part=\"p0\"#g{k}of2"), k, 1));
        assert!(out.contains("staged"), "{out}");
    }
    let (g0, g1) = (staged_inputs(&tree, TASK, 0), staged_inputs(&tree, TASK, 1));
    assert!(g0.is_disjoint(&g1), "{g0:?} {g1:?}");
    assert_eq!(g0.union(&g1).cloned().collect::<BTreeSet<_>>(), files.iter().cloned().collect());
    let out = run_ok(&mut hand_unit(&data, &tree, "_commit", 2, 1));
    assert!(out.contains("(1 units"), "{out}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let now: BTreeSet<String> = live_in(java, &location, "p0").into_iter().collect();
    let (outputs, kept): (BTreeSet<String>, BTreeSet<String>) = now.into_iter().partition(|f| f.contains("/compactd-"));
    assert_eq!(kept, g1, "the failed group's files stay as they were");
    assert!(!outputs.is_empty());
    // The delete still names rows of the second group's files: it stays.
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["total-delete-files"], "1", "{current:#}");
    outputs_with_javas_metrics(java, &location);
}

/// A partition named by the task (as a policy's task names them) is split
/// into file groups too, and the groups are what the task records.
#[test]
fn a_named_partition_is_split_into_file_groups() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    let files = one_partition_and_a_delete_across_it(java, &location);
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    let bytes = bytes_of(&files);
    start_three(&mut c, &format!("fs://{}", data.display()));
    let group = format!("iceberg.max-file-group-size-bytes={}", bytes / 2 + 1);
    let s = compact_partitions(&c, "t", &["spec0,part=\"p0\""], &["iceberg.sole-writer=true", &group]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["result"]["success"], 3, "two groups and the commit: {s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let now = live_in(java, &location, "p0");
    assert!(now.len() == 2 && now.iter().all(|f| f.contains("/compactd-")), "{now:?}");
}

/// `iceberg.delete-file-threshold` makes a data file due once that many
/// delete files apply to it, equality deletes included (Spark's
/// `delete-file-threshold`): files over the target size under a stream
/// of equality deletes are rewritten, and the deletes leave with them.
#[test]
fn files_under_enough_equality_deletes_are_due_at_the_delete_file_threshold() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "properties": {"write.target-file-size-bytes": "1000"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..2 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 40, 2), "files": 1}));
    }
    let p0 = live_in(java, &location, "p0");
    for id in [0, 2, 1004] {
        java.run(&json!({"cmd": "eqdelete", "location": location, "path": p0[0], "column": "id", "value": id}));
    }
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!(theirs["count"], 77, "{theirs}");
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert!(s["table_versions"].as_array().is_none_or(|v| v.is_empty()), "no file is small: {s:#}");
    let s = compact(&c, &["iceberg.sole-writer=true", "iceberg.delete-file-threshold=3"]);
    assert_eq!(s["table_versions"].as_array().map(Vec::len), Some(1), "{s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));
    let now = live_in(java, &location, "p0");
    assert!(now.len() == 1 && now[0].contains("/compactd-"), "{now:?}");
    assert_eq!(live_in(java, &location, "p1").len(), 2, "p1 has no deletes: left alone");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(current["summary"]["removed-equality-delete-files"], "3", "{current:#}");
}

/// A partition named twice is one unit (a unit list that held it twice
/// would rewrite its files twice and add their rows again); and should
/// two staged units name one input all the same, the commit takes the
/// first and abandons the other.
#[test]
fn a_partition_named_twice_is_rewritten_once() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    one_partition_and_a_delete_across_it(java, &location);
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    start_three(&mut c, &format!("fs://{}", data.display()));
    let p = "spec0,part=\"p0\"";
    let s = compact_partitions(&c, "t", &[p, p], &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["result"]["success"], 2, "one unit and the commit: {s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]));

    // By hand: two units of one partition staged, both recorded done.
    let java_table = tempfile::tempdir().unwrap();
    let (data, tree) = (java_table.path().join("data"), java_table.path().join("tree"));
    let location = data.join("db/s/t").to_str().unwrap().to_string();
    one_partition_and_a_delete_across_it(java, &location);
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    hand_tree(&tree, 3, &[0, 1]);
    for u in 0..2 {
        assert!(run_ok(&mut hand_unit(&data, &tree, p, u, 1)).contains("staged"));
    }
    let out = run_ok(&mut hand_unit(&data, &tree, "_commit", 2, 1));
    assert!(out.contains("(1 units, 1 abandoned"), "{out}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]), "rows added twice");
}
