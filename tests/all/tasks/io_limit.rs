//! `run --io-limit`: a node's built-in executors, several at once, read and
//! write no faster than the limit, and merge right; without the flag they
//! ask nothing. Real processes: a node, its `__merge` children, the CLI.
//!
//! The timing assertion is a lower bound, the limiter's correctness
//! property (granted bytes never pass one burst plus the limit times the
//! time elapsed), not a performance figure: a slow machine only makes it
//! easier to hold.
// Real processes: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const PARTITIONS: usize = 4;
const FILES: usize = 6;
/// 64-byte lines, 512 KiB a file: 3 MiB a partition, 12 MiB in all, merged
/// into one file a partition (12 MiB written).
const LINES_PER_FILE: usize = 8192;

/// Writes the table; returns every line, sorted.
fn make_table(data: &Path) -> Vec<String> {
    let mut all = vec![];
    for p in 0..PARTITIONS {
        let dir = data.join(format!("db/s/t/dt={p}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES {
            let mut text = String::with_capacity(LINES_PER_FILE * 64);
            for l in 0..LINES_PER_FILE {
                let line = format!("{:x<63}", format!("p{p}-f{f}-l{l:06}-"));
                text += &line;
                text.push('\n');
                all.push(line);
            }
            std::fs::write(dir.join(format!("part-{f}")), text).unwrap();
        }
    }
    all.sort();
    all
}

/// Every line of the table's data files, sorted; asserts one file a partition.
fn read_table(data: &Path) -> Vec<String> {
    let mut all = vec![];
    for p in 0..PARTITIONS {
        let dir = data.join(format!("db/s/t/dt={p}"));
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with(['_', '.']))
            .collect();
        assert_eq!(files.len(), 1, "dt={p} is not merged into one file: {files:?}");
        all.extend(std::fs::read_to_string(files[0].path()).unwrap().lines().map(str::to_string));
    }
    all.sort();
    all
}

/// The value of an unlabelled metric in a `/metrics` text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// Starts one node on a fresh table with `extra` flags, merges the table
/// with two executors at once; returns how long the task took, the node's
/// `/metrics` and the test's dirs (kept alive).
fn merge_with(extra: &[&str]) -> (Duration, String, Cluster, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let want = make_table(&data);
    let mut c = Cluster::fs();
    let data_uri = format!("fs://{}", data.display());
    let mut args = vec!["--data", &data_uri, "--target-size", "8MiB", "--max-running", "2"];
    args.extend_from_slice(extra);
    c.start_with("n1", &args);
    let rows = c.wait_nodes(Duration::from_secs(30), "the node alive and monitor", |r| {
        alive(r).len() == 1 && monitor_of(r).is_some()
    });
    let addr = rows[0]["addr"].as_str().expect("the node listens").to_string();
    let started = Instant::now();
    let out =
        c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--data", &data_uri, "--wait", "--json"]);
    let took = started.elapsed();
    assert!(out.status.success(), "submit --wait failed: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text());
    let id: Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = c.status(id["id"].as_str().unwrap());
    assert_eq!(status["state"], "Done", "{status:#}");
    assert_eq!(read_table(&data), want, "the merged table lost or changed lines");
    let (code, metrics) = common::http::get(&addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    (took, metrics, c, tmp)
}

#[test]
fn two_executors_at_once_stay_under_the_node_limit_and_merge_right() {
    let _turn = crate::common::turns::waits();
    let limit = 4 * MIB;
    let (took, metrics, _c, _tmp) = merge_with(&["--io-limit", "4MiB"]);
    // Read 12 MiB, wrote 12 MiB (every input ends with a newline).
    let bytes = 2 * (PARTITIONS * FILES * LINES_PER_FILE * 64) as u64;
    let granted = metric(&metrics, "compactd_io_limit_bytes_total") as u64;
    assert!(granted >= bytes, "granted {granted} bytes for {bytes} read and written\n{metrics}");
    let waited = metric(&metrics, "compactd_io_limit_wait_seconds_total");
    assert!(waited > 0.0, "nobody waited for the limit\n{metrics}");
    // One burst (a tenth of a second of the limit, at least 1 MiB) may go
    // at once; everything else at the limit.
    let burst = (limit / 10).max(MIB);
    let least = Duration::from_secs_f64((bytes - burst) as f64 / limit as f64);
    eprintln!("{bytes} bytes at {limit} B/s: {took:?} (at least {least:?}), executors waited {waited:.1} s in all");
    assert!(took >= least, "{bytes} bytes read and written in {took:?}: faster than the limit allows ({least:?})");
}

#[test]
fn without_a_limit_executors_ask_nothing() {
    let _turn = crate::common::turns::waits();
    let (took, metrics, _c, _tmp) = merge_with(&[]);
    eprintln!("unlimited: {took:?}");
    assert_eq!(metric(&metrics, "compactd_io_limit_bytes_total"), 0.0, "{metrics}");
    assert_eq!(metric(&metrics, "compactd_io_limit_wait_seconds_total"), 0.0, "{metrics}");
}
