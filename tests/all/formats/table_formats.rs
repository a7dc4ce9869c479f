//! compactd never changes a table it does not own. Tables written by their
//! own tools (deltalake, pyiceberg) and laid out as their formats lie on
//! disk (Hudi, Hive ACID, a Spark streaming sink, Paimon, Databricks
//! transactional writes, DuckLake), plus a plain Parquet table the text
//! merge must not concatenate: every executor that does not own one is
//! refused naming the format, at `submit` and by the task's manager; a
//! `db/*/*` policy with the default executor plans over them for 10 s and
//! shows each as refused; every file keeps its bytes, and the formats' own
//! readers read the same rows.
// Real processes: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster};
use common::parquet::python;
use serde_json::Value;

fn formats_tool(args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/table_formats.py");
    let out = Command::new(python()).arg(script).args(args).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    assert!(out.status.success(), "table_formats {args:?}: {v}\n{}", String::from_utf8_lossy(&out.stderr));
    v
}

/// What a refusal of each fixture must name, and the executor that owns
/// it (none: every built-in executor refuses it).
fn expected(format: &str) -> (&'static str, Option<&'static str>) {
    match format {
        "delta" => ("is a Delta Lake table", Some("delta")),
        "iceberg" => ("is an Apache Iceberg table", Some("iceberg")),
        "hudi" => ("is an Apache Hudi table", None),
        "spark-streaming-sink" => ("Spark Structured Streaming file sink", None),
        "paimon" => ("is an Apache Paimon table", None),
        "databricks-transactional" => ("Databricks transactional writes", None),
        "ducklake" => ("is a DuckLake table", None),
        "hive-acid" | "hive-acid-partitioned" => ("is a Hive ACID (transactional) table", None),
        "plain-parquet" => ("is Parquet: the merge executor concatenates newline-delimited text", Some("parquet")),
        other => panic!("no expectation for {other}"),
    }
}

fn split(table: &str) -> (&str, &str, &str) {
    let mut it = table.split('/');
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

fn sums(data: &Path) -> BTreeMap<String, String> {
    serde_json::from_value(formats_tool(&["sums", "--root", data.to_str().unwrap()])).unwrap()
}

#[test]
fn no_executor_changes_a_table_it_does_not_own_and_a_policy_leaves_every_byte() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let tables: BTreeMap<String, String> =
        serde_json::from_value(formats_tool(&["make", "--root", data.to_str().unwrap()])).unwrap();
    let before = sums(&data);
    let uri = format!("fs://{}", data.display());
    c.start_with("n1", &["--data", &uri, "--plan-interval", "1s"]);
    c.wait_nodes(Duration::from_secs(30), "a node and a monitor", |r| alive(r).len() == 1 && monitor_of(r).is_some());

    // At submit, with the data backend known: refused before a task exists.
    for (format, table) in &tables {
        let (db, schema, name) = split(table);
        let (phrase, owner) = expected(format);
        for exec in ["merge", "parquet", "delta", "iceberg"] {
            if owner == Some(exec) || (format == "plain-parquet" && exec != "merge") {
                continue;
            }
            let out = c.compactd(&[
                "submit",
                "--db",
                db,
                "--schema",
                schema,
                "--table",
                name,
                "--executor",
                exec,
                "--data",
                &uri,
            ]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{format} with {exec} was accepted: {err}");
            assert!(err.contains(phrase), "{format} with {exec}: {err}");
            if format != "plain-parquet" {
                assert!(err.contains(&format!("the {exec} executor never changes it")), "{format}/{exec}: {err}");
            }
        }
    }

    // Without it, the task's manager refuses: the task fails with the reason.
    for (format, exec) in [("iceberg", "merge"), ("hudi", "parquet"), ("hive-acid", "delta"), ("hive-acid", "merge")] {
        let (db, schema, name) = split(&tables[format]);
        let out = c.compactd(&["submit", "--db", db, "--schema", schema, "--table", name, "--executor", exec]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let status = c.wait_status(&id, Duration::from_secs(30), "the task ends", |s| {
            s["state"] != "Init" && s["state"] != "Running"
        });
        assert_eq!(status["state"], "Failed", "{format}/{exec}: {status:#}");
        let error = status.to_string();
        assert!(error.contains(expected(format).0), "{format}/{exec}: {status:#}");
    }

    // The default executor recorded at submit is the node's (merge), and a
    // unit of it refuses a Parquet partition by itself: a task naming the
    // partition skips discovery's look.
    let (db, schema, name) = split(&tables["plain-parquet"]);
    let out =
        c.compactd(&["submit", "--db", db, "--schema", schema, "--table", name, "--partition", "part=b", "--wait"]);
    assert!(!out.status.success());
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let status = c.status(&id);
    assert_eq!(status["state"], "Failed", "{status:#}");
    assert!(status.to_string().contains("is Parquet"), "{status:#}");

    // A policy over every table with the default executor, unattended.
    let policy = c.fs_path().parent().unwrap().join("all.toml");
    std::fs::write(
        &policy,
        "name = \"all\"\ntables = [\"db/*/*\"]\nexecutor = \"merge\"\nmin-small-files = 2\nmin-file-age = \"0s\"\n",
    )
    .unwrap();
    let out = c.compactd(&["policy", "apply", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_secs(10));
    let out = c.compactd(&["tables", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = seen.to_string();
    for (format, table) in &tables {
        let (db, schema, name) = split(table);
        let row = seen
            .as_array()
            .unwrap()
            .iter()
            .find(|t| {
                t["db"] == db && t["schema"] == schema && t["table"].as_str().unwrap().rsplit('/').next() == Some(name)
            })
            .unwrap_or_else(|| panic!("{table} not in tables: {text}"));
        let state = row["state"].as_str().unwrap_or_default();
        assert!(state.starts_with("refused: ") && state.contains(expected(format).0), "{format}: {row:#}");
    }
    // The policy submitted nothing: the tasks are the five of this test.
    let listed: Value = serde_json::from_slice(&c.compactd(&["list", "--json"]).stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(5), "the policy submitted tasks: {listed:#}");

    // Every byte of every table is where it was, and the formats' readers agree.
    c.terminate("n1");
    assert_eq!(sums(&data), before, "a file of a foreign table changed");
    let rows = formats_tool(&["read", "--root", data.to_str().unwrap()]);
    assert_eq!(rows["delta_rows"], 40, "{rows}");
    assert_eq!(rows["iceberg_rows"], 40, "{rows}");
}
