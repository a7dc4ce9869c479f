//! Warm shutdown with real processes: a first SIGTERM lets the units a node
//! runs finish and report (once, nowhere else), gives back what it had not
//! started, hands its task over, shows `draining` in `nodes`, and leaves
//! within the drain bound; a second SIGTERM stops the executors at once.
//! On fs and on HDFS (a MiniDFSCluster). A whole cluster stopping at once
//! leaves its tasks to resume after a restart, never cancelled.
//!
//! Each shard's command appends the node's name to a start file and, once
//! its sleep is over, to a file of its own: "ran to its end exactly once,
//! on that node" is read from those files, not from compactd.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use serde_json::Value;

/// Units the draining node runs when the SIGTERM comes.
const RUNNING: usize = 8;
/// Units it was given but had not started: released to the other node.
const WAITING: usize = 4;
/// How long each unit runs.
const UNIT_SECS: u64 = 4;

/// The command of node `node`: records its start and its end, by shard.
fn command(dir: &Path, node: &str, secs: u64) -> String {
    let d = dir.display();
    format!("echo {node} >> {d}/start.{{shard_index}}; sleep {secs}; echo {node} >> {d}/end.{{shard_index}}")
}

fn lines(p: PathBuf) -> Vec<String> {
    std::fs::read_to_string(p).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
}

fn started(dir: &Path, shards: usize) -> usize {
    (0..shards).filter(|i| dir.join(format!("start.{i}")).exists()).count()
}

/// Sessions long enough that a loaded 2-core host running a MiniDFSCluster
/// does not end an incarnation (which reruns units for its own reasons).
const TIMINGS: &[&str] = &["--heartbeat", "300ms", "--session-timeout", "5s", "--lease", "5s"];

/// n1 alone takes a task of RUNNING + WAITING shards (RUNNING at once) in
/// `layout` (4 or 3: once the switch is raised to it; 2: `--max-layout 2`); n2 joins
/// afterwards, with nothing of the task on it yet.
fn setup(c: &mut Cluster, dir: &Path, secs: u64, drain_timeout: &str, layout: u32) -> String {
    c.timings = TIMINGS.to_vec();
    let max = RUNNING.to_string();
    let max_layout = layout.to_string();
    let cmd1 = command(dir, "n1", secs);
    let args = ["--executor", "command", "--command", &cmd1, "--max-running", &max, "--drain-timeout", drain_timeout];
    c.start_with("n1", &[&args[..], &["--max-layout", &max_layout]].concat());
    c.wait_nodes(Duration::from_secs(60), &format!("n1 alive, layout {layout} in force"), |r| {
        alive(r) == ["n1"] && r.iter().all(|x| x["layout_in_force"] == layout)
    });
    let shards = (RUNNING + WAITING).to_string();
    let id = c.submit(&["--shards", &shards, "--manager", "n1"]);
    let t = Instant::now();
    while started(dir, RUNNING + WAITING) < RUNNING {
        assert!(t.elapsed() < Duration::from_secs(30), "n1 did not start {RUNNING} units\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let cmd2 = command(dir, "n2", 0);
    c.start_with(
        "n2",
        &["--executor", "command", "--command", &cmd2, "--max-running", &max, "--max-layout", &max_layout],
    );
    c.wait_nodes(Duration::from_secs(30), "n1 and n2 alive", |r| alive(r).len() == 2);
    id
}

fn sigterm(c: &Cluster, node: &str) {
    assert_eq!(unsafe { libc::kill(c.pid(node), libc::SIGTERM) }, 0);
}

fn warm(c: &mut Cluster, layout: u32) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let id = setup(c, dir, UNIT_SECS, "60s", layout);
    let running: Vec<usize> = (0..RUNNING + WAITING).filter(|i| dir.join(format!("start.{i}")).exists()).collect();
    assert_eq!(running.len(), RUNNING, "{running:?}\n{}", c.logs_text());
    let t = Instant::now();
    sigterm(c, "n1");
    // `nodes` shows it draining while its units run.
    let rows = c.wait_nodes(Duration::from_secs(UNIT_SECS), "n1 draining", |r| {
        r.iter().any(|x| x["id"] == "n1" && x["draining"] == true)
    });
    assert!(rows.iter().all(|x| x["layouts"].as_array().is_some_and(|l| !l.is_empty())), "{rows:#?}");
    let text = String::from_utf8_lossy(&c.compactd(&["nodes"]).stdout).to_string();
    assert!(text.contains("n1: draining") || t.elapsed() >= Duration::from_secs(UNIT_SECS), "{text}");
    let status = c.wait_exit("n1", Duration::from_secs(60));
    let left = t.elapsed();
    assert_eq!(status.code(), Some(0), "n1 left with {status}\n{}", c.logs_text());
    assert!(left < Duration::from_secs(30), "n1 left {left:?} after SIGTERM, past its bound\n{}", c.logs_text());
    // Its units ran to their end on n1 before it left.
    for i in &running {
        assert_eq!(lines(dir.join(format!("end.{i}"))), ["n1"], "shard {i}\n{}", c.logs_text());
    }
    let s = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    // Every shard ran to its end exactly once: the running ones on n1, the
    // released ones on n2; nothing started twice.
    for i in 0..RUNNING + WAITING {
        let on = if running.contains(&i) { "n1" } else { "n2" };
        assert_eq!(lines(dir.join(format!("start.{i}"))), [on], "shard {i} started\n{}", c.logs_text());
        assert_eq!(lines(dir.join(format!("end.{i}"))), [on], "shard {i} ended\n{}", c.logs_text());
    }
    let log = std::fs::read_to_string(c.log_path("n1")).unwrap();
    assert!(log.contains("drained"), "{log}");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    c.terminate("n2");
}

fn second_sigterm_stops_at_once(c: &mut Cluster) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let id = setup(c, dir, 600, "10m", 4);
    sigterm(c, "n1");
    c.wait_nodes(Duration::from_secs(10), "n1 draining", |r| {
        r.iter().any(|x| x["id"] == "n1" && x["draining"] == true)
    });
    let t = Instant::now();
    sigterm(c, "n1");
    let status = c.wait_exit("n1", Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "n1 left with {status}");
    assert!(t.elapsed() < Duration::from_secs(10), "a second SIGTERM took {:?}", t.elapsed());
    // Its executors died with it: none of them reaches its end.
    std::thread::sleep(Duration::from_secs(1));
    let ended_on_n1 =
        (0..RUNNING + WAITING).filter(|i| lines(dir.join(format!("end.{i}"))).contains(&"n1".into())).count();
    assert_eq!(ended_on_n1, 0);
    // The units go on on n2 (n2 ends them at once).
    let s = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| s["state"] == "Done");
    assert_eq!(s["state"], "Done");
    c.terminate("n2");
}

#[test]
fn fs_a_first_sigterm_lets_running_units_finish_and_report_once() {
    warm(&mut Cluster::fs(), 4);
}

#[test]
fn fs_layout_3_a_first_sigterm_lets_running_units_finish_and_report_once() {
    warm(&mut Cluster::fs(), 3);
}

#[test]
fn fs_layout_2_a_first_sigterm_lets_running_units_finish_and_report_once() {
    warm(&mut Cluster::fs(), 2);
}

#[test]
fn fs_a_second_sigterm_stops_at_once() {
    second_sigterm_stops_at_once(&mut Cluster::fs());
}

#[test]
fn hdfs_a_first_sigterm_lets_running_units_finish_and_report_once() {
    let hdfs = HdfsCluster::shared();
    warm(&mut Cluster::on(hdfs.new_root("warm"), vec![]), 4);
}

/// Whether the newest lease (fs) lists `node` as draining: what every
/// member's view says once it read that lease.
fn lease_says_draining(c: &Cluster, node: &str) -> bool {
    let dir = c.fs_path().join("Compaction_V2/Election");
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .filter(|n| n.starts_with("Lease."))
        .max();
    let Some(name) = newest else { return false };
    let text = std::fs::read_to_string(c.fs_path().join("Compaction_V2/Election").join(name)).unwrap_or_default();
    serde_json::from_str::<Value>(&text).ok().is_some_and(|l| {
        l["members"].as_array().is_some_and(|m| m.iter().any(|m| m["node"] == node && m["draining"] == true))
    })
}

/// The whole cluster stops at once: the manager (n2) drains first and
/// leaves still managing its task (no member may take it: the monitor n1
/// drains too, running the task's units); the monitor must leave the task
/// alone rather than cancel it, and after a restart it ends Done, each
/// unit run once.
#[test]
fn fs_a_whole_cluster_stopping_leaves_its_tasks_to_resume() {
    let mut c = Cluster::fs();
    c.timings = TIMINGS.to_vec();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let cmd1 = command(dir, "n1", 8);
    // Sweeps often: the monitor's sweep hands over tasks whose manager left.
    c.start_with("n1", &["--executor", "command", "--command", &cmd1, "--drain-timeout", "60s", "--sweep", "1s"]);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"] && monitor_of(r).is_some());
    let id = c.submit(&["--shards", "2", "--manager", "n1"]);
    let t = Instant::now();
    while started(dir, 2) < 2 {
        assert!(t.elapsed() < Duration::from_secs(30), "n1 did not start 2 units\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let cmd2 = command(dir, "n2", 0);
    c.start_with("n2", &["--executor", "command", "--command", &cmd2]);
    c.wait_nodes(Duration::from_secs(30), "n1 and n2 alive", |r| alive(r).len() == 2);
    let out = c.compactd(&["reassign", &id, "--manager", "n2"]);
    assert!(out.status.success(), "reassign: {}", String::from_utf8_lossy(&out.stderr));
    c.wait_status(&id, Duration::from_secs(30), "n2 managing", |s| s["manager"] == "n2");
    // The monitor drains first, and every view says so before n2 drains:
    // n2 then has nobody to hand its task to.
    sigterm(&c, "n1");
    let t = Instant::now();
    while !lease_says_draining(&c, "n1") {
        assert!(t.elapsed() < Duration::from_secs(10), "no lease says n1 drains\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    sigterm(&c, "n2");
    let status = c.wait_exit("n2", Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "n2 left with {status}\n{}", c.logs_text());
    let status = c.wait_exit("n1", Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "n1 left with {status}\n{}", c.logs_text());
    let s = c.status(&id);
    assert_eq!(s["state"], "Running", "a stopped cluster ended its task: {s:#}\n{}", c.logs_text());
    for n in ["n1", "n2"] {
        let cmd = command(dir, n, 0);
        c.start_with(n, &["--executor", "command", "--command", &cmd, "--sweep", "1s"]);
    }
    let s = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    for i in 0..2 {
        assert_eq!(lines(dir.join(format!("start.{i}"))), ["n1"], "shard {i} started\n{}", c.logs_text());
        assert_eq!(lines(dir.join(format!("end.{i}"))), ["n1"], "shard {i} ended\n{}", c.logs_text());
    }
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    c.terminate("n1");
    c.terminate("n2");
}

/// Layout 2, the task managed by another node (n2) than the draining one
/// (n1), which holds RUNNING units running and WAITING it had not started:
/// the released ones run on n3 while n1's still run (not after n1 left),
/// and a release is no failure (the manager allows no retry at all).
#[test]
fn fs_layout_2_units_a_draining_node_releases_go_elsewhere_at_once_uncounted() {
    let mut c = Cluster::fs();
    c.timings = TIMINGS.to_vec();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let max = RUNNING.to_string();
    let secs = 6;
    // Only n1, later n3, define `w`: the manager n2 places every unit there.
    let w1 = format!("w={}", command(dir, "n1", secs));
    let pin = ["--max-layout", "2"];
    c.start_with("n1", &[&["--command", &w1, "--max-running", &max, "--drain-timeout", "60s"], &pin[..]].concat());
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"] && monitor_of(r).is_some());
    c.start_with("n2", &[&["--retries", "0"], &pin[..]].concat());
    c.wait_nodes(Duration::from_secs(30), "n1 and n2 alive", |r| alive(r).len() == 2);
    let shards = (RUNNING + WAITING).to_string();
    let id = c.submit(&["--shards", &shards, "--command-name", "w", "--manager", "n2"]);
    let t = Instant::now();
    while started(dir, RUNNING + WAITING) < RUNNING {
        assert!(t.elapsed() < Duration::from_secs(30), "n1 did not start {RUNNING} units\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let running: Vec<usize> = (0..RUNNING + WAITING).filter(|i| dir.join(format!("start.{i}")).exists()).collect();
    assert_eq!(running.len(), RUNNING, "{running:?}\n{}", c.logs_text());
    let w3 = format!("w={}", command(dir, "n3", 0));
    c.start_with("n3", &[&["--command", &w3], &pin[..]].concat());
    c.wait_nodes(Duration::from_secs(30), "3 alive", |r| alive(r).len() == 3);
    sigterm(&c, "n1");
    let t = Instant::now();
    while started(dir, RUNNING + WAITING) < RUNNING + WAITING {
        let ended_on_n1 = (0..RUNNING + WAITING).filter(|i| dir.join(format!("end.{i}")).exists()).count();
        assert!(
            ended_on_n1 == 0 || t.elapsed() < Duration::from_secs(1),
            "the released units waited for the draining node's own to end\n{}",
            c.logs_text()
        );
        assert!(t.elapsed() < Duration::from_secs(60), "the released units never started\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A draining node is refused as a manager, naming why.
    assert!(lease_says_draining(&c, "n1"), "the manager acted on a view that says n1 drains");
    let out = c.compactd(&["reassign", &id, "--manager", "n1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("n1 may not manage") && err.contains("draining"), "{err}");
    let status = c.wait_exit("n1", Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "n1 left with {status}\n{}", c.logs_text());
    let s = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    assert_eq!(s["manager"], "n2", "{s:#}");
    assert_eq!(s["result"]["failed"], 0, "{s:#}");
    for i in 0..RUNNING + WAITING {
        let on = if running.contains(&i) { "n1" } else { "n3" };
        assert_eq!(lines(dir.join(format!("start.{i}"))), [on], "shard {i} started\n{}", c.logs_text());
        assert_eq!(lines(dir.join(format!("end.{i}"))), [on], "shard {i} ended\n{}", c.logs_text());
    }
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    c.terminate("n2");
    c.terminate("n3");
}
