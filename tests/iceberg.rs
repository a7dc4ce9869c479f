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

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster, BIN};
use common::hdfs::HdfsCluster;
use common::iceberg::{pyiceberg_catalog_table, pyiceberg_read, Java};
use serde_json::{json, Value};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const TASK: &str = "aaaaffff.16176931.56000000.0";

/// A schema of the types compactd writes metrics for (and a list and a
/// double, which get counts and sizes only), partitioned by `part`.
fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "s", "required": false, "type": "string"},
        {"id": 3, "name": "part", "required": false, "type": "string"},
        {"id": 4, "name": "d", "required": false, "type": "double"},
        {"id": 5, "name": "dt", "required": false, "type": "date"},
        {"id": 6, "name": "ts", "required": false, "type": "timestamptz"},
        {"id": 7, "name": "dec", "required": false, "type": "decimal(10,2)"},
        {"id": 8, "name": "n", "required": false, "type": "int"},
        {"id": 9, "name": "b", "required": false, "type": "boolean"},
        {"id": 10, "name": "l", "required": false,
         "type": {"type": "list", "element-id": 11, "element": "int", "element-required": false}},
        {"id": 12, "name": "st", "required": false,
         "type": {"type": "struct", "fields": [{"id": 13, "name": "x", "required": false, "type": "string"}]}},
    ]})
}

fn rows(batch: u64, n: u64, parts: u64) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let id = batch * 1000 + i;
            json!({
                "id": id,
                "s": if i % 7 == 0 { Value::Null } else { json!(format!("value-{:06}-{}", id, "é".repeat((i % 3) as usize))) },
                "part": format!("p{}", i % parts),
                "d": (i as f64) * 0.25,
                "dt": format!("2024-{:02}-{:02}", 1 + (id % 12), 1 + (id % 28)),
                "ts": format!("2024-01-01T{:02}:{:02}:{:02}.123456Z", id % 24, i % 60, batch % 60),
                "dec": format!("{}.{:02}", id % 1000, i % 100),
                "n": if i % 5 == 0 { Value::Null } else { json!((id % 97) as i64 - 40) },
                "b": i % 2 == 0,
                "l": [i, i + 1],
                "st": {"x": format!("x{}", i % 4)},
            })
        })
        .collect()
}

/// Creates `db/s/t` at `location` with Java and appends `appends` batches
/// (two files per partition each).
fn make_table(java: &Java, location: &str, appends: u64, parts: u64) {
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..appends {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 60, parts), "files": 2}));
    }
}

fn start_three(c: &mut Cluster, data: &str) {
    for n in NODES {
        c.start_with(n, &["--data", data, "--target-size", "8MiB", "--executor", "iceberg"]);
    }
    c.wait_nodes(Duration::from_secs(30), "three nodes alive and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

/// Submits `db.s.t` as an `iceberg` task with `params`, waits, returns its
/// `status --json`.
fn compact(c: &Cluster, params: &[&str]) -> Value {
    let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", "iceberg"];
    for p in params {
        args.extend(["--param", p]);
    }
    args.extend(["--wait", "--json"]);
    let out = c.compactd(&args);
    let id: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("submit: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text()));
    c.status(id["id"].as_str().unwrap())
}

/// What Java and pyiceberg say of the table after compactd's commit, held
/// against what they said before: the checks every compacted table passes.
struct Before {
    current: i64,
    live: BTreeSet<String>,
    reads: BTreeMap<i64, Value>,
}

fn before(java: &Java, location: &str) -> Before {
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let current = snaps["current"].as_i64().unwrap();
    let live = snaps["live"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
    let mut reads = BTreeMap::new();
    for s in snaps["snapshots"].as_array().unwrap() {
        let id = s["id"].as_i64().unwrap();
        reads.insert(id, java.run(&json!({"cmd": "read", "location": location, "snapshot": id})));
    }
    Before { current, live, reads }
}

/// Java and pyiceberg read the compacted table: one `replace` snapshot on
/// top of the old one, the same rows at it and at every older snapshot,
/// removed = the planned inputs, added = the outputs, metrics equal to
/// Java's, predicate scans equal to filters. Returns the new snapshot id.
fn assert_compacted(java: &Java, location: &str, py_location: &str, old: &Before, status: &Value) -> i64 {
    assert_eq!(status["state"], "Done", "{status:#}");
    let versions = status["table_versions"].as_array().expect("table_versions in status --json");
    assert_eq!(versions.len(), 1, "one commit for the whole task: {status:#}");
    let commit = &versions[0];
    assert_eq!(commit["version_after"].as_u64().unwrap(), commit["version_before"].as_u64().unwrap() + 1, "{commit}");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let new = snaps["current"].as_i64().unwrap();
    assert_eq!(commit["stats"]["snapshot_after"].as_u64(), Some(new as u64), "{commit}");
    assert_eq!(commit["stats"]["snapshot_before"].as_u64(), Some(old.current as u64), "{commit}");
    let list = snaps["snapshots"].as_array().unwrap();
    let s = list.iter().find(|s| s["id"].as_i64() == Some(new)).unwrap();
    assert_eq!(s["operation"], "replace", "{s}");
    assert_eq!(s["parent"].as_i64(), Some(old.current), "{s}");
    assert_eq!(s["summary"]["added-records"], s["summary"]["deleted-records"], "{s}");
    let parent = list.iter().find(|s| s["id"].as_i64() == Some(old.current)).unwrap();
    assert_eq!(s["summary"]["total-records"], parent["summary"]["total-records"], "{s}");
    // The same rows at the new snapshot and at every older one.
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&old.reads[&old.current]["count"], &old.reads[&old.current]["digest"]));
    assert!(now["files"].as_u64().unwrap() < old.reads[&old.current]["files"].as_u64().unwrap(), "{now}");
    for (id, r) in &old.reads {
        let again = java.run(&json!({"cmd": "read", "location": location, "snapshot": id}));
        assert_eq!((&again["count"], &again["digest"]), (&r["count"], &r["digest"]), "snapshot {id}");
    }
    // Exactly the planned inputs out, the outputs in.
    let diff = java.run(&json!({"cmd": "diff", "location": location, "snapshot": new}));
    let removed: BTreeSet<String> =
        diff["removed"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    let added: Vec<&Value> = diff["added"].as_array().unwrap().iter().collect();
    assert_eq!(removed, old.live, "every input was small: all are replaced");
    assert_eq!(added.len() as u64, commit["stats"]["committed_files_out"].as_u64().unwrap(), "{diff}");
    let old_seq = parent["sequence_number"].as_i64().unwrap();
    for f in &added {
        assert!(f["path"].as_str().unwrap().rsplit('/').next().unwrap().starts_with(&format!("compactd-")), "{f}");
        assert_eq!(f["data_sequence_number"].as_i64(), Some(old_seq), "the outputs keep the read snapshot's: {f}");
        assert_eq!(f["file_sequence_number"].as_i64(), s["sequence_number"].as_i64(), "{f}");
        assert!(f.get("sort_order_id").is_none(), "never copied from the inputs: {f}");
    }
    // Every metric compactd wrote is Java's, and sizes are real lengths.
    let metrics = java.run(&json!({"cmd": "metrics", "location": location}));
    let outputs: Vec<&Value> = metrics["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().contains("/compactd-"))
        .collect();
    assert_eq!(outputs.len(), added.len());
    for f in outputs {
        assert_eq!(f["length"], f["size"], "{f}");
        assert_eq!(f["stored"], f["java"], "metrics of {}", f["path"]);
        assert!(!f["stored"]["lower_bounds"].as_object().unwrap().is_empty(), "{f}");
    }
    let p = java.run(&json!({"cmd": "predicates", "location": location}));
    assert_eq!(p["mismatches"], 0, "{p:#}");
    // pyiceberg agrees, through the version hint, at every snapshot.
    let py = pyiceberg_read(py_location, "id");
    assert_eq!(py["current"].as_i64(), Some(new), "{py}");
    for (id, r) in &old.reads {
        assert_eq!(py["snapshots"][id.to_string()]["rows"], r["count"], "snapshot {id}");
    }
    assert_eq!(py["snapshots"][new.to_string()]["digest"], py["snapshots"][old.current.to_string()]["digest"]);
    assert_eq!(py["snapshots"][new.to_string()]["operation"], "replace");
    new
}

#[test]
fn three_nodes_compact_a_java_table_on_fs_and_java_and_pyiceberg_agree_at_every_snapshot() {
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
    assert_compacted(java, &location, &location, &old, &status);
    // A second task finds nothing small enough twice in a partition.
    let again = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(again["state"], "Done", "{again:#}");
    assert!(again["table_versions"].as_array().is_none_or(|v| v.is_empty()), "{again:#}");
}
