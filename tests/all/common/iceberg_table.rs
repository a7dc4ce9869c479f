//! The Iceberg tables the tests write with Java (`HadoopTables`): a schema
//! of every type compactd writes metrics for, partitioned by `part`, rows
//! in batches, and what Java says of a table before compactd changes it.

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::{alive, monitor_of, Cluster};
use super::iceberg::Java;

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
    let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", table, "--executor", "iceberg"];
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
