//! A daemon whose stderr breaks keeps running, with real
//! `compactd run` processes on an fs root:
//!
//! - stderr on `/dev/full` (every write fails with ENOSPC);
//! - stderr a pipe whose reader closes after one line (`2>&1 | head -1`:
//!   writes fail with EPIPE, SIGPIPE being ignored by the daemon);
//! - stderr a pipe nobody reads (writes would block once it is full).
//!
//! Each node keeps heartbeating and stays alive in `nodes --json`, counts
//! the dropped lines in `/metrics`, and leaves on SIGTERM within 5 s with
//! exit code 0 (before the fix, tracing's writer panicked: exit 101, or a
//! dead signal task and a node that ignored SIGTERM).
// Real processes: waits on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster, BIN, TEST_TIMINGS};
use serde_json::Value;

fn spawn(c: &Cluster, node: &str, stderr: Stdio) -> Child {
    Command::new(BIN)
        .args(["--root", &c.root, "run", "--node-id", node, "--listen", "127.0.0.1:0"])
        .args(TEST_TIMINGS)
        .arg("--data")
        .arg(c.fs_path().with_file_name("data"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn compactd run")
}

/// SIGKILLs and reaps a child that failed a check, then panics.
fn fail(child: &mut Child, why: String) -> ! {
    let _ = child.kill();
    let _ = child.wait();
    panic!("{why}");
}

fn row(c: &Cluster, node: &str) -> Option<Value> {
    c.nodes().into_iter().find(|r| r["id"] == node)
}

/// The value of an unlabelled counter in a `/metrics` text.
fn counter(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Makes an idle node log: `tasks` submits of a table that does not exist,
/// each failed by the node (its manager) with a warning and an info line.
fn noise(c: &Cluster, tasks: usize) {
    for i in 0..tasks {
        let table = format!("missing{i}");
        let out = c.compactd(&["submit", "--db", "d", "--schema", "s", "--table", &table]);
        assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The node joins, logs `tasks` failed tasks' worth of lines, its heartbeat
/// advances, `/metrics` counts dropped log lines (if `drops`), and SIGTERM
/// ends it with 0 within 5 s.
fn keeps_running_and_leaves(c: &Cluster, node: &str, mut child: Child, tasks: usize, drops: bool) {
    let start = Instant::now();
    let first = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{node} exited with {status} while joining (its stderr is broken)");
        }
        if let Some(r) = row(c, node).filter(|r| alive(std::slice::from_ref(r)).len() == 1 && r["addr"].is_string()) {
            break r;
        }
        if start.elapsed() > Duration::from_secs(20) {
            fail(&mut child, format!("{node} did not join within 20 s: {:#?}", c.nodes()));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let addr = first["addr"].as_str().unwrap().to_string();
    noise(c, tasks);
    let beat0 = row(c, node).and_then(|r| r["beat"].as_u64()).unwrap_or(0);
    // Heartbeats go on (200 ms apart), and the lost lines are counted.
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{node} exited with {status} (its stderr is broken)");
        }
        let beat = row(c, node).and_then(|r| r["beat"].as_u64()).unwrap_or(0);
        let metrics = common::http::get(&addr, "/metrics").map(|(_, body)| body).unwrap_or_default();
        let dropped = counter(&metrics, "compactd_log_lines_dropped_total").unwrap_or(0.0);
        if beat >= beat0 + 5 && (dropped > 0.0 || !drops) {
            eprintln!("{node}: beat {beat0} -> {beat}, {dropped} log lines dropped");
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            fail(&mut child, format!("{node}: beat {beat0} -> {beat}, dropped lines {dropped} after 20 s\n{metrics}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let rows = c.nodes();
    assert!(alive(&rows).contains(&node.to_string()), "{rows:#?}");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0), "{node} left with {status}");
            eprintln!("{node}: left {:?} after SIGTERM", start.elapsed());
            return;
        }
        if start.elapsed() > Duration::from_secs(5) {
            fail(&mut child, format!("{node} still running 5 s after SIGTERM"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_full_stderr_drops_log_lines_and_the_node_runs_on() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let child = spawn(&c, "full", Stdio::from(full));
    keeps_running_and_leaves(&c, "full", child, 1, true);
}

#[test]
fn a_stderr_pipe_closed_after_one_line_drops_log_lines_and_the_node_runs_on() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut child = spawn(&c, "piped", Stdio::from(writer));
    // `| head -1`: one line, then the reader is gone.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = vec![];
        let mut b = [0u8; 1];
        while reader.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
    });
    let line = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(line) => line,
        Err(_) => fail(&mut child, "no log line within 20 s".into()),
    };
    assert!(line.contains("INFO"), "{line}");
    // The reader is closed: the lines of these tasks meet EPIPE.
    keeps_running_and_leaves(&c, "piped", child, 1, true);
}

/// A reader that never reads (a stalled log shipper): once the pipe's
/// buffer is full every write to stderr would block. The node's threads
/// never wait on it; lines beyond the queue are dropped.
#[test]
fn a_stalled_stderr_pipe_does_not_block_the_node() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let (reader, writer) = std::io::pipe().unwrap();
    // Shrink the pipe so that it fills within the first ticks.
    use std::os::fd::AsRawFd;
    unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    let child = spawn(&c, "stalled", Stdio::from(writer));
    // 20 failed tasks log more than the pipe holds; beats go on while it is
    // full (the queue holds those lines, so none is dropped yet).
    keeps_running_and_leaves(&c, "stalled", child, 20, false);
    drop(reader);
}
