//! Iceberg tables across format versions, judged by Java Iceberg and
//! pyiceberg: a v1 table upgraded to v2 (its v1 manifests rewritten as v2
//! ones) and v3 columns added with an `initial-default`, which the outputs
//! hold as values where the inputs had none.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use common::cluster::Cluster;
use common::iceberg::Java;
use common::iceberg_table::{
    assert_compacted, before, compact_table, outputs_with_javas_metrics, rows, schema, start_three,
};
use serde_json::{json, Value};

fn compact(c: &Cluster, params: &[&str]) -> Value {
    compact_table(c, "t", params)
}

/// A table written in format v1 and upgraded to v2 keeps its v1 manifests
/// (an upgrade rewrites none): compactd rewrites them as v2 manifests, the
/// entries' sequence numbers 0 as the upgrade left them.
#[test]
fn a_table_upgraded_from_v1_is_compacted_through_the_manifests_it_wrote_as_v1() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "properties": {"format-version": "1"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..3 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 60, 3), "files": 2}));
    }
    java.run(&json!({"cmd": "upgrade", "location": location, "version": 2}));
    // Until a writer commits after the upgrade, the current manifest list
    // is v1's, which a v2 commit cannot extend: refused at the start.
    start_three(&mut c, &format!("fs://{}", data.display()));
    let before_refusal = std::fs::read_dir(data.join("db/s/t/metadata")).unwrap().count();
    let refused = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(refused["state"], "Failed", "{refused:#}");
    assert!(refused.to_string().contains("written before the table's upgrade"), "{refused:#}");
    assert_eq!(std::fs::read_dir(data.join("db/s/t/metadata")).unwrap().count(), before_refusal);
    for b in 3..5 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 60, 3), "files": 2}));
    }
    let old = before(java, &location);
    let status = compact(&c, &["iceberg.sole-writer=true"]);
    assert_compacted(java, &location, &location, &old, &status);
}

/// v3 columns added with an `initial-default` after files were written:
/// Java's readers fill the default into the rows of the older files, and
/// the outputs must hold it (null would change those rows). A required
/// column with a default is compacted too.
#[test]
fn columns_added_with_an_initial_default_hold_it_in_the_outputs() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    java.run(&json!({"cmd": "create", "location": location, "schema": schema(),
        "properties": {"format-version": "3"},
        "spec": [{"name": "part", "transform": "identity", "source-id": 3, "field-id": 1000}]}));
    for b in 0..2 {
        java.run(&json!({"cmd": "append", "location": location, "rows": rows(b, 40, 2), "files": 2}));
    }
    for (name, ty, default, required) in [
        ("level", "int", json!(5), false),
        ("tag", "string", json!("x"), true),
        ("since", "date", json!("2024-02-29"), false),
    ] {
        java.run(&json!({"cmd": "add_column", "location": location, "name": name, "type": ty,
            "default": default, "required": required}));
    }
    for b in 2..4 {
        let mut r = rows(b, 40, 2);
        for row in &mut r {
            row["level"] = json!(7);
            row["tag"] = json!("y");
            row["since"] = json!("2025-01-01");
        }
        java.run(&json!({"cmd": "append", "location": location, "rows": r, "files": 2}));
    }
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let old = snaps["current"].as_i64().unwrap();
    let theirs = java.run(&json!({"cmd": "read", "location": location}));
    start_three(&mut c, &format!("fs://{}", data.display()));
    let s = compact(&c, &["iceberg.sole-writer=true"]);
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["table_versions"].as_array().map(Vec::len), Some(1), "{s:#}");
    let ours = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&ours["count"], &ours["digest"]), (&theirs["count"], &theirs["digest"]), "a default was lost");
    let again = java.run(&json!({"cmd": "read", "location": location, "snapshot": old}));
    assert_eq!(again["digest"], theirs["digest"]);
    assert!(ours["files"].as_u64() < theirs["files"].as_u64(), "{ours}");
    outputs_with_javas_metrics(java, &location);
}
