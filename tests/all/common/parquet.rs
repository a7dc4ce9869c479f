//! pyarrow and DuckDB as judges of the Parquet executor: runs
//! `tests/support/parquet_tool.py` with the venv `.ci/install-parquet-tools.sh`
//! makes at `.venv-parquet/` (or the python named by
//! `COMPACTD_TEST_PARQUET_PYTHON`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::cluster::Cluster;

pub fn python() -> PathBuf {
    let p = match std::env::var_os("COMPACTD_TEST_PARQUET_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-parquet/bin/python"),
    };
    if !p.exists() {
        panic!(
            "the Parquet tools' python {} does not exist: run `bash .ci/install-parquet-tools.sh` from the \
             repository root (it makes .venv-parquet with pyarrow and duckdb), or set COMPACTD_TEST_PARQUET_PYTHON",
            p.display()
        );
    }
    p
}

/// Runs the tool; (success, the JSON of its last stdout line, stderr).
pub fn tool_result(args: &[&str], env: &[(String, String)]) -> (bool, Value, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/parquet_tool.py");
    let out = Command::new(python()).arg(script).args(args).envs(env.iter().cloned()).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("null");
    let v = serde_json::from_str(last).unwrap_or(Value::Null);
    (out.status.success(), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs the tool and asserts it succeeded.
pub fn tool(args: &[&str], env: &[(String, String)]) -> Value {
    let (ok, v, err) = tool_result(args, env);
    assert!(ok, "parquet_tool {args:?} failed: {v}\n{err}");
    v
}

/// Runs `tests/support/delta_tool.py` (deltalake and a pyarrow log
/// replay); asserts success; its last JSON line.
pub fn delta_tool(args: &[&str], env: &[(String, String)]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/delta_tool.py");
    let out = Command::new(python()).arg(script).args(args).envs(env.iter().cloned()).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    assert!(out.status.success(), "delta_tool {args:?} failed: {v}\n{}", String::from_utf8_lossy(&out.stderr));
    v
}

/// `cp -a` of a folder.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let st = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(st.success());
}

/// The table's files below `dir`, relative, sorted (hidden ones too).
pub fn files_below(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Submits the table `db.s.t` with the parquet executor, waits for it to
/// end and returns its `status --json`.
pub fn compact_table(c: &Cluster) -> Value {
    compact_with(c, "parquet")
}

/// Submits the table `db.s.t` with `executor`, waits for it to end and
/// returns its `status --json`.
pub fn compact_with(c: &Cluster, executor: &str) -> Value {
    compact_within(c, executor, super::cluster::WAIT_LIMIT)
}

/// [`compact_with`], for a task that may take longer than a command's
/// usual limit (a bulk commit replayed by a debug build on a loaded machine).
pub fn compact_within(c: &Cluster, executor: &str, limit: std::time::Duration) -> Value {
    let out = c.compactd_within(
        limit,
        &["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", executor, "--wait", "--json"],
    );
    assert!(out.status.success(), "submit --wait failed: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text());
    let id: Value = serde_json::from_slice(&out.stdout).unwrap();
    c.status(id["id"].as_str().unwrap())
}

/// The figures in `status --json` add up to the table that was generated.
pub fn assert_figures(status: &Value, generated: &Value) {
    assert_eq!(status["state"], "Done", "{status:#}");
    let st = &status["stats"];
    assert_eq!(st["rows_in"], generated["rows"], "{status:#}");
    assert_eq!(st["rows_out"], generated["rows"], "{status:#}");
    assert!(st["files_out"].as_u64().unwrap() < st["files_in"].as_u64().unwrap(), "{status:#}");
    assert!(st["bytes_in"].as_u64().unwrap() > 0 && st["bytes_out"].as_u64().unwrap() > 0, "{status:#}");
}
