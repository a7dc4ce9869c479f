//! The Iceberg tables the tests write with Java (`HadoopTables`): a schema
//! of every type compactd writes metrics for, partitioned by `part`, rows
//! in batches, and what Java says of a table before compactd changes it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::iceberg::Java;

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
