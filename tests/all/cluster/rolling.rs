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
//!
//! Around the switch: a tree no older node ever joined starts at the
//! newest layout, without a session's wait; and a node facing a layout in
//! force that it cannot take part in (newer than it reads, or above its
//! `--max-layout`) refuses to start and writes nothing.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{alive, output_within, Cluster, BIN, TEST_TIMINGS};
use layouts::formats;
use layouts::v3::LayoutSwitch;
use layouts::{v2, v3, NodeId};
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
    let _turn = crate::common::turns::waits();
    roll_across(2, 3);
}

#[test]
fn a_rolling_restart_from_layout_3_to_4_runs_every_shard_once() {
    let _turn = crate::common::turns::waits();
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

/// Three nodes started at once on an empty tree, with sessions of a
/// minute: the tree's first monitor puts layout 4 in force as soon as they
/// are members, and a task submitted 2 s after they joined, well inside
/// the first session, is dispatched in layout 4 batches (named by their
/// manager's term; no layout 2 subtask folder ever appears) and recorded
/// per batch.
#[test]
fn a_fresh_tree_starts_at_the_newest_layout_without_a_session() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    c.timings = vec!["--heartbeat", "200ms", "--session-timeout", "60s", "--lease", "1500ms"];
    let started = Instant::now();
    for n in NODES {
        c.start_with(n, &["--executor", "command", "--command", "sleep 1", "--max-running", "1"]);
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive", |r| alive(r).len() == 3);
    std::thread::sleep(Duration::from_secs(2));
    let rows = c.nodes();
    assert_eq!(layout_in_force(&rows), 4, "a fresh tree still waits for a session: {rows:#?}\n{}", c.logs_text());
    let marker = std::fs::read(c.fs_path().join(v3::layout_marker(4))).expect("Registry/Layout.4");
    let switch: LayoutSwitch = formats::decode(&marker).unwrap();
    assert_eq!((switch.layout, switch.epoch), (4, 1), "put in force by the tree's first monitor: {switch:?}");
    let id = c.submit(&["--shards", "6"]);
    let submitted = started.elapsed();
    assert!(submitted < Duration::from_secs(30), "submitted {submitted:?} after the start: not inside the session");
    let assigned = c.fs_path().join(v2::TASK_ASSIGNED);
    let mut batches = BTreeSet::new();
    let t = Instant::now();
    loop {
        for n in NODES {
            for e in std::fs::read_dir(assigned.join(n)).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(v2::parse_subtask_name(&name).is_none(), "a layout 2 subtask folder: {n}/{name}");
                if let Some((task, round, batch)) = v3::parse_batch_name(&name) {
                    assert!(task.to_string() == id && round == 1, "{name}");
                    assert!(batch.term.is_some(), "a batch named without its term (layout 3): {n}/{name}");
                    batches.insert(format!("{n}/{name}"));
                }
            }
        }
        let s = c.status(&id);
        if s["state"] != "Running" && s["state"] != "Init" {
            assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the task did not end: {s:#}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!batches.is_empty(), "no batch folder seen while the task ran\n{}", c.logs_text());
    let outcomes: Vec<String> = std::fs::read_dir(c.fs_path().join(v2::outcomes_dir(&id.parse().unwrap())))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !outcomes.is_empty()
            && outcomes.iter().all(|o| v3::parse_batch_record(o).is_some_and(|(_, b)| b.term.is_some())),
        "outcomes not recorded per layout 4 batch: {outcomes:?}"
    );
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    for n in NODES {
        assert_eq!(c.terminate(n), Some(0));
    }
}

/// Every entry below `root`, sorted, with its kind and mode and what it
/// holds (a file's bytes, a link's target).
fn tree(root: &Path) -> Vec<(String, String, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = vec![];
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let kind = format!("{:?} {:o}", m.file_type(), m.permissions().mode());
            let held = if m.is_symlink() {
                std::fs::read_link(&p).unwrap().display().to_string().into_bytes()
            } else if m.is_dir() {
                dirs.push(p.clone());
                vec![]
            } else {
                std::fs::read(&p).unwrap()
            };
            out.push((rel, kind, held));
        }
    }
    out.sort();
    out
}

/// `run` on `c`'s tree exits 1 at once, saying `says`, and leaves the tree
/// byte for byte as it was.
fn refused(c: &Cluster, extra: &[&str], says: &[&str]) {
    let before = tree(&c.fs_path());
    let data = format!("fs://{}", c.fs_path().parent().unwrap().join("data").display());
    let t = Instant::now();
    let out = output_within(
        Command::new(BIN)
            .args(["--root", &c.root, "run", "--node-id", "n2", "--data", &data, "--allow-root"])
            .args(TEST_TIMINGS)
            .args(extra)
            .env("COMPACTD_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "info"),
        Duration::from_secs(60),
    );
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "run {extra:?} was not refused: {err}");
    assert!(took < Duration::from_secs(10), "refused only after {took:?}");
    for s in ["refusing to start", "nothing was written to the tree"].iter().chain(says) {
        assert!(err.contains(s), "run {extra:?} does not say {s:?}: {err}");
    }
    assert!(tree(&c.fs_path()) == before, "run {extra:?} changed the tree before refusing");
}

/// A tree at layout 5 (its marker as a monitor of a newer release writes
/// it) and a tree at layout 4 under `--max-layout 3`: `run` refuses to
/// start, naming the layout in force, what this node reads and what to do,
/// and writes nothing (no probe, id claim, heartbeat or lease attempt).
#[test]
fn a_node_refuses_a_layout_in_force_it_cannot_take_part_in_and_writes_nothing() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    c.start("n1");
    c.wait_nodes(Duration::from_secs(30), "n1 alive, layout 4 in force", |r| {
        alive(r).len() == 1 && layout_in_force(r) == 4
    });
    assert_eq!(c.terminate("n1"), Some(0));
    refused(&c, &["--max-layout", "3"], &["layout 4 is in force", "Registry/Layout.4", "--max-layout 3", "without"]);
    let switch = LayoutSwitch { layout: 5, epoch: 9, monitor: NodeId::parse("n9").unwrap(), wall_ms: 1 };
    std::fs::write(c.fs_path().join(v3::layout_marker(5)), formats::encode(&switch)).unwrap();
    let newer = ["layout 5 is in force", "Registry/Layout.5", "reads layouts 2 to 4", "a release that reads layout 5"];
    for extra in [&[][..], &["--max-layout", "3"]] {
        refused(&c, extra, &newer);
    }
}
