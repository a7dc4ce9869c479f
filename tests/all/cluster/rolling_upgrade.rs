//! A rolling upgrade from the previous release, with real processes on fs:
//! `.ci/build-previous.sh` builds it from git (the commit before layout 3
//! and warm shutdown) into `<target>/previous/compactd`.
//!
//! - Three old nodes run a command task of 90 shards; they are replaced one
//!   at a time (SIGTERM, as old nodes stop: their running executors are
//!   killed) by this build. The switch stays at layout 2 while an old node
//!   is alive; every shard runs to its end exactly once (each command
//!   appends to a file of its own once its sleep is over), the task ends
//!   Done, and `check` is clean. Once only new nodes remain, the newest
//!   layout (4) is put in force.
//! - The reverse order: a new node joins two old ones; a task runs across
//!   the three in layout 2, and the switch stays down until the old ones
//!   are gone.
//! - The tripwire: once layout 4 is in force, the previous release started
//!   on the tree exits 1 before it writes anything (every file of the tree
//!   is the same after, bytes, mode and time), saying why.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster, BIN};
use serde_json::Value;

/// The previous release's binary; the test fails (it does not skip)
/// without it.
fn previous() -> String {
    let target = Path::new(BIN).parent().and_then(Path::parent).expect("<target>/debug/compactd");
    let p: PathBuf = std::env::var_os("COMPACTD_PREVIOUS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("previous/compactd"));
    assert!(p.exists(), "{} is missing: run `bash .ci/build-previous.sh` (CI does)", p.display());
    p.display().to_string()
}

fn command(dir: &Path, node: &str, secs: u32) -> String {
    let d = dir.display();
    format!("echo {node} >> {d}/start.{{shard_index}}; sleep {secs}; echo {node} >> {d}/end.{{shard_index}}")
}

fn start(c: &mut Cluster, bin: &str, node: &str, dir: &Path) {
    let cmd = command(dir, node, 1);
    c.start_bin(bin, node, &["--executor", "command", "--command", &cmd, "--max-running", "3"]);
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|s| s.lines().count()).unwrap_or(0)
}

fn layout_in_force(rows: &[Value]) -> u64 {
    rows.iter().filter_map(|r| r["layout_in_force"].as_u64()).max().unwrap_or(2)
}

/// Submits with the previous release's CLI: the task is written as it
/// writes tasks.
fn submit(c: &Cluster, bin: &str, shards: usize) -> String {
    let shards = shards.to_string();
    let out = Command::new(bin)
        .args([
            "--root", &c.root, "submit", "--db", "d", "--schema", "s", "--table", "t", "--shards", &shards, "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string()
}

fn done(c: &Cluster, id: &str) {
    let s = c.wait_status(id, Duration::from_secs(180), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
}

fn ran_once(c: &Cluster, dir: &Path, shards: usize) {
    for i in 0..shards {
        assert_eq!(lines(&dir.join(format!("end.{i}"))), 1, "shard {i} ran to its end\n{}", c.logs_text());
    }
}

#[test]
fn three_old_nodes_replaced_one_at_a_time_run_every_shard_to_its_end_once() {
    let _turn = crate::common::turns::waits();
    let old = previous();
    let mut c = Cluster::fs();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for n in ["n1", "n2", "n3"] {
        start(&mut c, &old, n, dir);
    }
    c.wait_nodes(Duration::from_secs(30), "3 old nodes alive", |r| alive(r).len() == 3);
    let id = submit(&c, &old, 90);
    let t = Instant::now();
    while (0..90).filter(|i| dir.join(format!("end.{i}")).exists()).count() < 9 {
        assert!(t.elapsed() < Duration::from_secs(60), "no work ends\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    for n in ["n1", "n2", "n3"] {
        let rows = c.nodes();
        assert_eq!(layout_in_force(&rows), 2, "layout 3 went in force beside an old node: {rows:#?}");
        assert_eq!(unsafe { libc::kill(c.pid(n), libc::SIGTERM) }, 0);
        let status = c.wait_exit(n, Duration::from_secs(60));
        assert_eq!(status.code(), Some(0), "old {n} left with {status}\n{}", c.logs_text());
        start(&mut c, BIN, n, dir);
        c.wait_nodes(Duration::from_secs(30), &format!("new {n} alive"), |r| alive(r).len() == 3);
    }
    done(&c, &id);
    ran_once(&c, dir, 90);
    c.wait_nodes(Duration::from_secs(30), "the newest layout in force", |r| layout_in_force(r) == 4);
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    for n in ["n1", "n2", "n3"] {
        assert_eq!(c.terminate(n), Some(0));
    }
}

#[test]
fn a_new_node_joining_old_ones_keeps_the_switch_down_until_they_are_gone() {
    let _turn = crate::common::turns::waits();
    let old = previous();
    let mut c = Cluster::fs();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for n in ["n1", "n2"] {
        start(&mut c, &old, n, dir);
    }
    // The new node joins a cluster of old ones: they are members first. A
    // new node starting at the same moment as old ones on a fresh tree may
    // find no trace of them and put the newest layout in force
    // (layouts/PROTOCOL.md, "A fresh tree starts at the newest layout").
    c.wait_nodes(Duration::from_secs(30), "2 old nodes alive", |r| alive(r).len() == 2);
    start(&mut c, BIN, "n3", dir);
    c.wait_nodes(Duration::from_secs(30), "2 old and 1 new node alive", |r| alive(r).len() == 3);
    let id = submit(&c, BIN, 30);
    done(&c, &id);
    ran_once(&c, dir, 30);
    // The first task's shards were placed when its manager last read the
    // member list, which may predate the new node: a second task, placed
    // once every manager has seen it for a whole task's length, gives it
    // its share.
    let id = submit(&c, BIN, 30);
    done(&c, &id);
    for i in 0..30 {
        assert_eq!(lines(&dir.join(format!("end.{i}"))), 2, "shard {i} of each task ran to its end once");
    }
    let on_new = (0..30).filter(|i| std::fs::read_to_string(dir.join(format!("end.{i}"))).unwrap().contains("n3"));
    assert!(on_new.count() > 0, "the new node ran nothing of the second task");
    // Well past a session: still layout 2 while the old nodes live.
    std::thread::sleep(Duration::from_secs(3));
    let rows = c.nodes();
    assert_eq!(layout_in_force(&rows), 2, "{rows:#?}");
    for n in ["n1", "n2"] {
        assert_eq!(c.terminate(n), Some(0));
    }
    c.wait_nodes(Duration::from_secs(30), "the newest layout in force", |r| layout_in_force(r) == 4);
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    assert_eq!(c.terminate("n3"), Some(0));
}

/// Every entry under `dir`: its path, and for a file its bytes, mode and
/// modification time (what a start that "touches nothing" must keep).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32, i128)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            if m.is_dir() {
                todo.push(p.clone());
                out.push((p, Vec::new(), m.mode(), mtime));
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default(), m.mode(), mtime));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_previous_release_stops_on_a_layout_4_tree_without_touching_it() {
    let _turn = crate::common::turns::waits();
    let old = previous();
    let mut c = Cluster::fs();
    let dir = tempfile::tempdir().unwrap();
    start(&mut c, BIN, "n1", dir.path());
    c.wait_nodes(Duration::from_secs(30), "layout 4 in force", |r| layout_in_force(r) == 4);
    let fs_root = PathBuf::from(c.root.strip_prefix("fs://").unwrap());
    let state = fs_root.join("Compaction_V2/TaskUpgradeLock/UpgradeState.json");
    let t = Instant::now();
    while !std::fs::read_to_string(&state).is_ok_and(|s| s.contains("tripwire")) {
        assert!(t.elapsed() < Duration::from_secs(30), "no tripwire at {}\n{}", state.display(), c.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = submit(&c, BIN, 3);
    done(&c, &id);
    assert_eq!(c.terminate("n1"), Some(0));
    let before = snapshot(&fs_root);
    for node in ["n1", "n2"] {
        // Bounded: a release that does not stop would run as a daemon.
        let out = Command::new("timeout")
            .args(["30", &old, "--root", &c.root, "run", "--node-id", node, "--allow-root"])
            .args(&c.timings)
            .env("COMPACTD_LISTEN", "127.0.0.1:0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "the previous release as {node}: {err}");
        assert!(err.contains("NOT AN UPGRADE") && err.contains("layout 4"), "{err}");
    }
    assert_eq!(snapshot(&fs_root), before, "the previous release changed the tree");
    // This build starts on it (the tripwire is no upgrade) and the task's
    // history is there.
    start(&mut c, BIN, "n1", dir.path());
    c.wait_nodes(Duration::from_secs(30), "n1 alive again", |r| alive(r).len() == 1);
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    assert_eq!(c.terminate("n1"), Some(0));
}
