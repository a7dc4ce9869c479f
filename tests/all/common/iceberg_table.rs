//! The Iceberg tables the tests write with Java (`HadoopTables`): a schema
//! of every type compactd writes metrics for, partitioned by `part`, rows
//! in batches, and what Java says of a table before compactd changes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::{alive, monitor_of, Cluster, BIN};
use super::iceberg::{pyiceberg_read, Java};

/// Starts n1, n2, n3 on `data` (`iceberg` executor, 8 MiB target) and waits
/// for all three and a monitor.
pub fn start_three(c: &mut Cluster, data: &str) {
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", data, "--target-size", "8MiB", "--executor", "iceberg"]);
    }
    c.wait_nodes(Duration::from_secs(60), "three nodes alive and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

/// Submits `db.s.<table>` as an `iceberg` task with `params`, waits,
/// returns its `status --json`.
pub fn compact_table(c: &Cluster, table: &str, params: &[&str]) -> Value {
    compact_partitions(c, table, &[], params)
}

/// The same, naming the task's `partitions` (unit keys).
pub fn compact_partitions(c: &Cluster, table: &str, partitions: &[&str], params: &[&str]) -> Value {
    let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", table, "--executor", "iceberg"];
    for p in partitions {
        args.extend(["--partition", p]);
    }
    for p in params {
        args.extend(["--param", p]);
    }
    args.extend(["--wait", "--json"]);
    let out = c.compactd(&args);
    let id: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("submit: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text()));
    c.status(id["id"].as_str().unwrap())
}

/// Java's `ParquetUtil.fileMetrics` of each of compactd's outputs, asserted
/// equal to the metrics its manifest holds; the outputs' entries (`path`,
/// `length`, `size`, `stored`, `java`).
pub fn outputs_with_javas_metrics(java: &Java, location: &str) -> Vec<Value> {
    let metrics = java.run(&json!({"cmd": "metrics", "location": location}));
    let outputs: Vec<Value> = metrics["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().contains("/compactd-"))
        .cloned()
        .collect();
    for f in &outputs {
        assert_eq!(f["stored"], f["java"], "metrics of {}", f["path"]);
    }
    outputs
}

/// A schema of the types compactd writes metrics for (and a list and a
/// double, which get counts and sizes only), partitioned by `part`.
pub fn schema() -> Value {
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

pub fn rows(batch: u64, n: u64, parts: u64) -> Vec<Value> {
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
pub fn make_table(java: &Java, location: &str, appends: u64, parts: u64) {
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..appends {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 60, parts), "files": 2}));
    }
}

/// What Java and pyiceberg say of the table after compactd's commit, held
/// against what they said before: the checks every compacted table passes.
pub struct Before {
    pub current: i64,
    pub live: BTreeSet<String>,
    pub reads: BTreeMap<i64, Value>,
}

pub fn before(java: &Java, location: &str) -> Before {
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

/// The live data files of partition `part` (`part=<part>`) of the table.
pub fn live_in(java: &Java, location: &str, part: &str) -> Vec<String> {
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    snaps["live"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .filter(|p| p.contains(&format!("/part={part}/")))
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect()
}

/// The task of units run by hand ([`hand_tree`], [`hand_unit`]).
pub const TASK: &str = "aaaaffff.16176931.56000000.0";

/// A scheduler tree for units run by hand: the task's folder and a subtask
/// folder per unit (the fence), units `done` recorded as succeeded.
pub fn hand_tree(tree: &Path, units: u32, done: &[u32]) {
    std::fs::create_dir_all(tree.join("Compaction_V2/Registry")).unwrap();
    let outcomes = tree.join(format!("Compaction_V2/Scheduler/{TASK}/Outcomes"));
    std::fs::create_dir_all(&outcomes).unwrap();
    for u in 0..units {
        for a in 1..=3 {
            let d = tree.join(format!("Compaction_V2/TaskAssigned/n1/{TASK}.r1.u{u}.a{a}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("TaskInfo.pc.db"), "{}").unwrap();
        }
    }
    for u in done {
        std::fs::write(outcomes.join(format!("Done.r1.u{u}")), "").unwrap();
    }
}

/// `compactd __merge --format iceberg` of unit `index` (`key`; `_commit`
/// for the commit) at `attempt`, by hand.
pub fn hand_unit(data: &Path, tree: &Path, key: &str, index: u32, attempt: u32) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", data.to_str().unwrap(), "__merge", "--dir", "db/s/t/", "--task", TASK])
        .args(["--round", "1", "--attempt", &attempt.to_string(), "--target-size", "8MiB", "--format", "iceberg"])
        .args(["--partition", key, "--fence-root", &format!("fs://{}", tree.display())])
        .args(["--fence-dir", &format!("Compaction_V2/TaskAssigned/n1/{TASK}.r1.u{index}.a{attempt}/")])
        .env("COMPACTD_PARAM_ICEBERG_SOLE_WRITER", "true");
    cmd
}

pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Java and pyiceberg read the compacted table: one `replace` snapshot on
/// top of the old one, the same rows at it and at every older snapshot,
/// removed = the planned inputs, added = the outputs, metrics equal to
/// Java's, predicate scans equal to filters. Returns the new snapshot id.
pub fn assert_compacted(java: &Java, location: &str, py_location: &str, old: &Before, status: &Value) -> i64 {
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
    assert_eq!(
        (&now["count"], &now["digest"]),
        (&old.reads[&old.current]["count"], &old.reads[&old.current]["digest"])
    );
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
        assert!(f["path"].as_str().unwrap().rsplit('/').next().unwrap().starts_with("compactd-"), "{f}");
        assert_eq!(f["data_sequence_number"].as_i64(), Some(old_seq), "the outputs keep the read snapshot's: {f}");
        assert_eq!(f["file_sequence_number"].as_i64(), s["sequence_number"].as_i64(), "{f}");
        assert!(f.get("sort_order_id").is_none(), "never copied from the inputs: {f}");
    }
    // Every metric compactd wrote is Java's, and sizes are real lengths.
    let outputs = outputs_with_javas_metrics(java, location);
    assert_eq!(outputs.len(), added.len());
    for f in outputs {
        assert_eq!(f["length"], f["size"], "{f}");
        assert!(!f["stored"]["lower_bounds"].as_object().unwrap().is_empty(), "{f}");
    }
    let p = java.run(&json!({"cmd": "predicates", "location": location}));
    assert_eq!(p["mismatches"], 0, "{p:#}");
    assert!(p["predicates"].as_u64().unwrap() > 100, "{p:#}");
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
