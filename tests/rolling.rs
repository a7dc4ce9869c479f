//! A rolling restart across the layout switch, with real processes on fs:
//! three nodes pinned to layout 2 (`run --max-layout 2`: they advertise
//! what a node of the previous release does) run a command task of 90
//! shards; each is replaced in turn, by a warm SIGTERM, by a node that reads
//! layout 3. The switch stays down while a pinned node is alive and goes up
//! after the last one left, with the task still running: units dispatched
//! in layout 2 finish in layout 2, the rest run in batches. Every shard runs
//! to its end exactly once (each command appends to a file of its own),
//! the task ends Done and `check` is clean.
//!
//! The same from layout 3 to layout 4 (`--max-layout 3`: what a node of
//! the version before layout 4 advertises): batches named without their
//! term, dispatched before the switch, finish as they are; a task
//! submitted after it is recorded under layout 4's names.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster};
use serde_json::Value;

const SHARDS: usize = 90;
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const TIMINGS: &[&str] = &["--heartbeat", "300ms", "--session-timeout", "3s", "--lease", "3s"];

fn start(c: &mut Cluster, node: &str, dir: &Path, max_layout: &str) {
    let d = dir.display();
    let cmd = format!("echo {node} >> {d}/start.{{shard_index}}; sleep 2; echo {node} >> {d}/end.{{shard_index}}");
    c.start_with(node, &["--executor", "command", "--command", &cmd, "--max-running", "2", "--max-layout", max_layout]);
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|s| s.lines().count()).unwrap_or(0)
}

fn layout_in_force(rows: &[Value]) -> u64 {
    rows.iter().filter_map(|r| r["layout_in_force"].as_u64()).max().unwrap_or(2)
}

#[test]
fn a_rolling_restart_across_the_layout_switch_runs_every_shard_once() {
    roll_across(2, 3);
}

#[test]
fn a_rolling_restart_from_layout_3_to_4_runs_every_shard_once() {
    roll_across(3, 4);
}

fn roll_across(from: u64, to: u64) {
    let mut c = Cluster::fs();
    c.timings = TIMINGS.to_vec();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for n in NODES {
        start(&mut c, n, dir, &from.to_string());
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive, their layout in force", |r| {
        alive(r).len() == 3 && layout_in_force(r) == from
    });
    let shards = SHARDS.to_string();
    let id = c.submit(&["--shards", &shards]);
    // Let a few rounds of work start, then replace the nodes one at a time.
    let t = Instant::now();
    while (0..SHARDS).filter(|i| dir.join(format!("end.{i}")).exists()).count() < 9 {
        assert!(t.elapsed() < Duration::from_secs(60), "no work ends\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    for (k, n) in NODES.iter().enumerate() {
        let rows = c.nodes();
        assert_eq!(layout_in_force(&rows), from, "the switch went up while a layout {from} node is alive: {rows:#?}");
        assert_eq!(unsafe { libc::kill(c.pid(n), libc::SIGTERM) }, 0);
        let status = c.wait_exit(n, Duration::from_secs(60));
        assert_eq!(status.code(), Some(0), "{n} left with {status}\n{}", c.logs_text());
        start(&mut c, n, dir, &to.to_string());
        c.wait_nodes(Duration::from_secs(30), &format!("{n} back ({k})"), |r| alive(r).len() == 3);
    }
    // Every node reads the new layout now: the switch goes up a session
    // later, with the task (dispatched in the old one) still running.
    c.wait_nodes(Duration::from_secs(30), "the new layout in force", |r| layout_in_force(r) == to);
    assert_eq!(c.status(&id)["state"], "Running", "the task ended before the switch: nothing crossed it");
    let s = c.wait_status(&id, Duration::from_secs(120), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    for i in 0..SHARDS {
        assert_eq!(lines(&dir.join(format!("start.{i}"))), 1, "shard {i} started\n{}", c.logs_text());
        assert_eq!(lines(&dir.join(format!("end.{i}"))), 1, "shard {i} ended\n{}", c.logs_text());
    }
    // A task submitted now runs in batches, recorded per batch.
    let id2 = c.submit(&["--table", "t2", "--shards", "6"]);
    let outcomes = c.fs_path().join(format!("Compaction_V2/Scheduler/{id2}/Outcomes"));
    let t = Instant::now();
    // Layout 4 names the term in a record's name.
    let record = if to == 4 { "Batch.r1.t" } else { "Batch.r1.b" };
    while !std::fs::read_dir(&outcomes)
        .is_ok_and(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(record)))
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no batch record after the switch\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = c.wait_status(&id2, Duration::from_secs(60), "the second task to end", |s| s["state"] == "Done");
    assert_eq!(s["state"], "Done");
    let rows = c.nodes();
    assert!(rows.iter().all(|r| !r["draining"].as_bool().unwrap_or(false)), "{rows:#?}");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    for n in NODES {
        assert_eq!(c.terminate(n), Some(0));
    }
}
