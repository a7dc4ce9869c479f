//! Warm shutdown with real processes: a first SIGTERM lets the units a node
//! runs finish and report (once, nowhere else), gives back what it had not
//! started, hands its task over, shows `draining` in `nodes`, and leaves
//! within the drain bound; a second SIGTERM stops the executors at once.
//! On fs and on HDFS (a MiniDFSCluster). A whole cluster stopping at once
//! leaves its tasks to resume after a restart, never cancelled.
//!
//! Each shard's command appends the node's name to a start file and, once
//! its sleep is over, to a file of its own: "ran to its end exactly once,
//! on that node" is read from those files, not from compactd. What systemd
//! hears is read from a notify socket the test binds.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
    let _turn = crate::common::turns::waits();
    warm(&mut Cluster::fs(), 4);
}

#[test]
fn fs_layout_3_a_first_sigterm_lets_running_units_finish_and_report_once() {
    let _turn = crate::common::turns::waits();
    warm(&mut Cluster::fs(), 3);
}

#[test]
fn fs_layout_2_a_first_sigterm_lets_running_units_finish_and_report_once() {
    let _turn = crate::common::turns::waits();
    warm(&mut Cluster::fs(), 2);
}

#[test]
fn fs_a_second_sigterm_stops_at_once() {
    let _turn = crate::common::turns::waits();
    second_sigterm_stops_at_once(&mut Cluster::fs());
}

#[test]
fn hdfs_a_first_sigterm_lets_running_units_finish_and_report_once() {
    let _turn = crate::common::turns::waits();
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
    let _turn = crate::common::turns::waits();
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
    let _turn = crate::common::turns::waits();
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

/// What a service manager hears on its notify socket: each line of each
/// message, with when it came.
struct Notices {
    got: Arc<Mutex<Vec<(Instant, String)>>>,
    done: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Notices {
    fn listen(path: &Path) -> Notices {
        let sock = UnixDatagram::bind(path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let got: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let done: Arc<AtomicBool> = Arc::default();
        let reader = {
            let (got, done) = (got.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !done.load(Ordering::Relaxed) {
                    if let Ok(n) = sock.recv(&mut buf) {
                        let at = Instant::now();
                        let text = String::from_utf8_lossy(&buf[..n]).to_string();
                        got.lock().unwrap().extend(text.lines().map(|l| (at, l.to_string())));
                    }
                }
            })
        };
        Notices { got, done, reader: Some(reader) }
    }

    fn lines(&self) -> Vec<(Instant, String)> {
        self.got.lock().unwrap().clone()
    }

    fn wait_for(&self, line: &str, limit: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.lines().iter().any(|(_, l)| l == line) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Processes whose command line holds `needle` (an executor's shell names
/// the test's own directory in its command).
fn processes_naming(needle: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

/// The drain timeout passes with units still running. systemd hears
/// `STOPPING=1` at the SIGTERM, not at the leave, and while the node drains
/// `EXTEND_TIMEOUT_USEC`, renewed, each asking past the drain's end with
/// room for the leave, so that its stop timeout never cuts the drain short;
/// the node exits 0 within what it asked. The units still running are
/// killed, the incarnation is marked ended as the node leaves, and the
/// other node runs them again to their end: every unit is accounted for.
#[test]
fn fs_past_the_drain_timeout_systemd_follows_the_drain_and_the_killed_units_run_elsewhere() {
    let _turn = crate::common::turns::waits();
    const DRAIN: Duration = Duration::from_secs(12);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let sock = dir.join("notify.sock");
    let notices = Notices::listen(&sock);
    let mut c = Cluster::fs();
    c.node_env.insert("n1".into(), vec![("NOTIFY_SOCKET".into(), sock.display().to_string())]);
    let id = setup(&mut c, dir, 600, &format!("{}s", DRAIN.as_secs()), 4);
    let running: Vec<usize> = (0..RUNNING + WAITING).filter(|i| dir.join(format!("start.{i}")).exists()).collect();
    assert_eq!(running.len(), RUNNING, "{running:?}\n{}", c.logs_text());
    assert!(notices.wait_for("READY=1", Duration::from_secs(30)), "no READY=1: {:?}", notices.lines());
    let t = Instant::now();
    sigterm(&c, "n1");
    let status = c.wait_exit("n1", DRAIN + Duration::from_secs(60));
    let exited = Instant::now();
    assert_eq!(status.code(), Some(0), "n1 left with {status}\n{}", c.logs_text());
    let left = exited - t;
    assert!(left >= DRAIN, "n1 left {left:?} after SIGTERM, before its drain timeout\n{}", c.logs_text());
    assert!(left < DRAIN + Duration::from_secs(30), "n1 left {left:?} after SIGTERM\n{}", c.logs_text());
    // The leave's own messages were sent before it exited; one more poll
    // of the socket takes them in.
    std::thread::sleep(Duration::from_millis(300));
    let got = notices.lines();
    let seen = || got.iter().map(|(at, l)| format!("{:?} {l}", at.saturating_duration_since(t))).collect::<Vec<_>>();

    let ready: Vec<Instant> = got.iter().filter(|(_, l)| l == "READY=1").map(|(at, _)| *at).collect();
    assert!(ready.len() == 1 && ready[0] < t, "READY=1 once, before the SIGTERM: {:#?}", seen());
    let stopping: Vec<Instant> = got.iter().filter(|(_, l)| l == "STOPPING=1").map(|(at, _)| *at).collect();
    assert_eq!(stopping.len(), 1, "{:#?}", seen());
    let stopping = stopping[0];
    assert!(
        stopping >= t && stopping < t + Duration::from_secs(5),
        "STOPPING=1 came {:?} after SIGTERM, not at once: {:#?}",
        stopping.saturating_duration_since(t),
        seen()
    );
    let asks: Vec<(Instant, Duration)> = got
        .iter()
        .filter_map(|(at, l)| {
            l.strip_prefix("EXTEND_TIMEOUT_USEC=").map(|v| (*at, Duration::from_micros(v.parse().unwrap())))
        })
        .collect();
    assert!(asks.iter().all(|(at, _)| *at >= stopping), "an extension before STOPPING=1: {:#?}", seen());
    let drain_end = t + DRAIN;
    let during: Vec<&(Instant, Duration)> = asks.iter().filter(|(at, _)| *at < drain_end).collect();
    // One at the SIGTERM, renewed while the drain lasts.
    assert!(during.len() >= 2, "the extension is not renewed while draining: {:#?}", seen());
    assert!(during[0].0 < t + Duration::from_secs(5), "no extension at the SIGTERM: {:#?}", seen());
    for (at, ask) in &during {
        assert!(
            *at + *ask >= drain_end + Duration::from_secs(60),
            "an extension of {ask:?} {:?} after SIGTERM leaves the leave less than a minute past the drain: {:#?}",
            at.saturating_duration_since(t),
            seen()
        );
    }
    let deadline = asks.iter().map(|(at, ask)| *at + *ask).max().unwrap();
    assert!(exited < deadline, "n1 exited past the stop timeout it asked for: {:#?}", seen());

    // The units still running at the timeout: killed (no executor of n1
    // outlives it, none ran to its end there), the incarnation marked
    // ended as n1 left, so that their manager runs them again at once.
    let log = std::fs::read_to_string(c.log_path("n1")).unwrap();
    assert!(log.contains("the drain timeout passed"), "{log}");
    let shells = processes_naming(&format!("echo n1 >> {}/", dir.display()));
    assert!(shells.is_empty(), "n1's executors outlived it: {shells:#?}");
    let assigned = c.fs_path().join("Compaction_V2/TaskAssigned/n1");
    let ended = std::fs::read_dir(&assigned)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("Ended."));
    assert!(ended, "n1 left no ended marker in {}\n{}", assigned.display(), c.logs_text());
    let s = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    // Every shard ran to its end exactly once, on n2: the killed ones after
    // their start on n1, the released ones there only.
    for i in 0..RUNNING + WAITING {
        let starts: &[&str] = if running.contains(&i) { &["n1", "n2"] } else { &["n2"] };
        assert_eq!(lines(dir.join(format!("start.{i}"))), starts, "shard {i} started\n{}", c.logs_text());
        assert_eq!(lines(dir.join(format!("end.{i}"))), ["n2"], "shard {i} ended\n{}", c.logs_text());
    }
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
    c.terminate("n2");
}
