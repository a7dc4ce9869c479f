//! Process chaos: real `compactd` processes on an fs root, random
//! SIGKILL + restart of any node (the monitor and task managers included)
//! and SIGSTOP/SIGCONT pauses longer than the lease, while 20 tasks of 50
//! partitions run a command executor that records every execution.
//!
//! Invariants checked at the end (every violation is listed, then the logs,
//! the tree and the records are kept in `$TMPDIR/compactd-chaos-<seed>/`):
//! - every task is `Done` with `success == 50`, `failed == 0`, and its
//!   `done_units` are exactly the units 0..49, each once (a stale attempt's
//!   result counted on top of the current one would show as a double count
//!   or a duplicate unit);
//! - every unit has a completed execution; each `(task, unit, attempt)` was
//!   executed at most once (one attempt is one folder on one node, and a
//!   worker never reruns a folder marked `Running`); and the newest attempt
//!   that started of each unit completed: a unit is never dispatched again
//!   once counted, so if a newer attempt was still cut short, the manager
//!   counted an older, stale attempt;
//! - no two monitors acted in one epoch: all change events of an epoch have
//!   the same `by` (and `MonitorElected` names it), each offline record's
//!   `declared_by` is that same node, and the lease of every epoch, watched
//!   while the chaos runs, only ever named one holder;
//! - no daemon exits by itself and no log holds a panic;
//! - `compactd check` finds nothing, with the nodes running and after they
//!   left; no executor process is left once the nodes are stopped.
//!
//! The seed is printed; `COMPACTD_CHAOS_SEED=<n>` replays the same chaos
//! decisions (timings of real processes still vary from run to run).
//! `COMPACTD_CHAOS_LONG=1` runs more tasks, longer commands and a longer
//! time limit; `COMPACTD_CHAOS_CALM=1` the same work without kills or pauses
//! (the reference for throughput and executions per unit).
//!
//! A second group of tests checks that the merge executor's commit is fenced:
//! a worker paused past its session, whose subtask was given to another
//! node, must not commit its stale attempt when it resumes.
//!
//! The chaos driver and the record-based invariants it checks at the end are read together here; the fenced merge commit is `chaos/fenced_merge.rs`.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::chaos_support::{self as cs, LeaseWatch};
use common::cluster::{alive, monitor_of, Cluster};
use common::table::Commits;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

const NODES: [&str; 5] = ["n1", "n2", "n3", "n4", "n5"];
const PARTITIONS: usize = 50;

struct Settings {
    tasks: usize,
    /// Seconds each execution sleeps.
    sleep: &'static str,
    /// The chaos stops when every task is terminal or after this long.
    chaos_limit: Duration,
    /// Then every task must be terminal within this long.
    settle_limit: Duration,
}

fn settings(long: bool) -> Settings {
    if long {
        Settings {
            tasks: 60,
            sleep: "0.5",
            chaos_limit: Duration::from_secs(20 * 60),
            settle_limit: Duration::from_secs(300),
        }
    } else {
        Settings {
            tasks: 20,
            sleep: "0.2",
            chaos_limit: Duration::from_secs(150),
            settle_limit: Duration::from_secs(90),
        }
    }
}

fn seed() -> u64 {
    match std::env::var("COMPACTD_CHAOS_SEED") {
        Ok(s) => s.trim().parse().expect("COMPACTD_CHAOS_SEED is a number"),
        Err(_) => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            (t.as_nanos() as u64) % 1_000_000
        }
    }
}

fn run_json(c: &Cluster, args: &[&str]) -> Option<Value> {
    let out = c.compactd(args);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// `list --json` rows by task id (a task whose info is being replaced may
/// be missing from one listing).
fn list(c: &Cluster) -> BTreeMap<String, Value> {
    let rows = run_json(c, &["list", "--limit", "0", "--json"]).and_then(|v| v.as_array().cloned()).unwrap_or_default();
    rows.into_iter().filter_map(|r| Some((r["id"].as_str()?.to_string(), r))).collect()
}

fn terminal(state: &Value) -> bool {
    matches!(state.as_str(), Some("Done" | "Failed" | "Cancel"))
}

fn all_terminal(c: &Cluster, ids: &[String]) -> bool {
    let rows = list(c);
    ids.iter().all(|id| rows.get(id).is_some_and(|r| terminal(&r["state"])))
}

/// One execution of the recording command.
#[derive(Debug, Clone)]
struct Exec {
    file: String,
    task: String,
    unit: usize,
    attempt: u64,
    node: String,
    worker_pid: i32,
    start_ns: u128,
    end_ns: Option<u128>,
}

/// The command template: one record file per execution, `start` line
/// before the work and `end` line after it.
fn recording_command(dir: &Path, sleep: &str) -> String {
    format!(
        "f={dir}/$COMPACTD_SUBTASK.$$; \
         echo \"start $CHAOS_NODE $PPID $COMPACTD_TASK $COMPACTD_PARTITION $COMPACTD_ATTEMPT $(date +%s%N)\" > \"$f\"; \
         sleep {sleep}; \
         echo \"end $(date +%s%N)\" >> \"$f\"",
        dir = dir.display()
    )
}

fn read_records(dir: &Path, bad: &mut Vec<String>) -> Vec<Exec> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let file = e.file_name().to_string_lossy().to_string();
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let mut lines = text.lines();
        let Some(start) = lines.next() else {
            // Killed between the redirect and the echo: nothing ran.
            continue;
        };
        let f: Vec<&str> = start.split_whitespace().collect();
        if f.len() != 7 || f[0] != "start" {
            bad.push(format!("record {file}: malformed start line {start:?}"));
            continue;
        }
        let unit = f[4].strip_prefix('p').and_then(|u| u.parse().ok());
        let (Some(unit), Ok(attempt), Ok(worker_pid), Ok(start_ns)) = (unit, f[5].parse(), f[2].parse(), f[6].parse())
        else {
            bad.push(format!("record {file}: malformed start line {start:?}"));
            continue;
        };
        let end_ns = lines.next().and_then(|l| l.strip_prefix("end ")).and_then(|t| t.trim().parse().ok());
        out.push(Exec {
            file,
            task: f[3].to_string(),
            unit,
            attempt,
            node: f[1].to_string(),
            worker_pid,
            start_ns,
            end_ns,
        });
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PauseKind {
    /// Only the daemon: its executors keep running (a stalled daemon).
    Daemon,
    /// The daemon and every process below it (a frozen machine).
    Machine,
}

#[derive(Debug, Default)]
struct Counts {
    kills: usize,
    kills_of_monitor: usize,
    kills_of_manager: usize,
    pauses_daemon: usize,
    pauses_machine: usize,
    pauses_of_monitor: usize,
    pauses_of_manager: usize,
    unexpected_exits: usize,
}

/// The cluster under chaos: which nodes are paused and how, what was done.
struct Chaos {
    c: Cluster,
    node_args: Vec<String>,
    marker: String,
    rng: StdRng,
    paused: BTreeMap<String, (Instant, PauseKind)>,
    counts: Counts,
    actions: Vec<String>,
    t0: Instant,
}

impl Chaos {
    fn start(&mut self, node: &str) {
        let args: Vec<&str> = self.node_args.iter().map(String::as_str).collect();
        let env = [("CHAOS_NODE".to_string(), node.to_string()), self.marker_env()];
        cs::start_with_env(&mut self.c, node, &args, &env);
    }

    fn marker_env(&self) -> (String, String) {
        let (k, v) = self.marker.split_once('=').unwrap();
        (k.to_string(), v.to_string())
    }

    fn note(&mut self, what: String) {
        let line = format!("{:>7.1}s {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("chaos: {line}");
        self.actions.push(line);
    }

    fn resume(&mut self, node: &str) {
        if let Some((_, kind)) = self.paused.remove(node) {
            let pid = self.c.pid(node);
            match kind {
                PauseKind::Daemon => self.c.resume(node),
                PauseKind::Machine => cs::cont_tree(pid, Duration::ZERO),
            }
            self.note(format!("SIGCONT {node} ({kind:?})"));
        }
    }

    fn resume_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self.paused.iter().filter(|(_, (t, _))| *t <= now).map(|(n, _)| n.clone()).collect();
        for n in due {
            self.resume(&n);
        }
    }

    fn resume_all(&mut self) {
        let all: Vec<String> = self.paused.keys().cloned().collect();
        for n in all {
            self.resume(&n);
        }
    }

    /// Restarts nodes that exited although nobody killed them (a crash of
    /// the daemon is a finding); returns what it found.
    fn restart_exited(&mut self) -> Vec<String> {
        let mut found = vec![];
        for n in NODES {
            if !self.paused.contains_key(n) && !self.c.is_running(n) {
                let log = std::fs::read_to_string(self.c.log_path(n)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
                found.push(format!("{n} exited by itself; log tail:\n{}", tail.join("\n")));
                self.counts.unexpected_exits += 1;
                self.note(format!("{n} exited by itself: restarting it"));
                // `is_running` reaped it; the new process replaces it.
                self.start(n);
            }
        }
        found
    }

    /// One chaos action on a node picked at random, with a bias to the
    /// monitor and the managers of unfinished tasks.
    fn act(&mut self) {
        let candidates: Vec<String> =
            NODES.iter().filter(|n| !self.paused.contains_key(**n)).map(|n| n.to_string()).collect();
        if candidates.is_empty() {
            return;
        }
        let monitor = run_json(&self.c, &["nodes", "--json"])
            .and_then(|v| v.as_array().cloned())
            .and_then(|rows| monitor_of(&rows));
        let managers: BTreeSet<String> = list(&self.c)
            .values()
            .filter(|r| !terminal(&r["state"]))
            .filter_map(|r| r["manager"].as_str().map(str::to_string))
            .collect();
        let pick = self.rng.random_range(0..3);
        let preferred: Vec<String> = match pick {
            0 => monitor.iter().filter(|m| candidates.contains(m)).cloned().collect(),
            1 => managers.iter().filter(|m| candidates.contains(m)).cloned().collect(),
            _ => vec![],
        };
        let pool = if preferred.is_empty() { &candidates } else { &preferred };
        let node = pool[self.rng.random_range(0..pool.len())].clone();
        let is_monitor = monitor.as_deref() == Some(node.as_str());
        let is_manager = managers.contains(&node);
        let role = match (is_monitor, is_manager) {
            (true, true) => " (monitor, manager)",
            (true, false) => " (monitor)",
            (false, true) => " (manager)",
            _ => "",
        };
        // Keep at least 2 nodes unpaused.
        let may_pause = NODES.len() - self.paused.len() > 2;
        if may_pause && self.rng.random_bool(0.5) {
            let kind = if self.rng.random_bool(0.5) { PauseKind::Daemon } else { PauseKind::Machine };
            let dur = Duration::from_millis(self.rng.random_range(2000..=4000));
            let pid = self.c.pid(&node);
            match kind {
                PauseKind::Daemon => self.c.pause(&node),
                PauseKind::Machine => {
                    cs::stop_tree(pid);
                }
            }
            match kind {
                PauseKind::Daemon => self.counts.pauses_daemon += 1,
                PauseKind::Machine => self.counts.pauses_machine += 1,
            }
            self.counts.pauses_of_monitor += is_monitor as usize;
            self.counts.pauses_of_manager += is_manager as usize;
            self.paused.insert(node.clone(), (Instant::now() + dur, kind));
            self.note(format!("SIGSTOP {node}{role} for {dur:?} ({kind:?})"));
        } else {
            self.c.kill(&node);
            self.counts.kills += 1;
            self.counts.kills_of_monitor += is_monitor as usize;
            self.counts.kills_of_manager += is_manager as usize;
            self.note(format!("SIGKILL {node}{role}, restarting it"));
            self.start(&node);
        }
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        // Never leave a frozen process behind, whatever happened.
        for (n, (_, kind)) in std::mem::take(&mut self.paused) {
            if kind == PauseKind::Machine {
                cs::cont_tree(self.c.pid(&n), Duration::ZERO);
            }
        }
    }
}

/// Checks the epochs: all events of an epoch by one node, offline records
/// declared by that node, one lease holder per epoch as observed.
fn check_epochs(root: &Path, leases: &LeaseWatch, v: &mut Vec<String>) -> (usize, usize, usize) {
    let tree = root.join("Compaction_V2");
    let mut by_epoch: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let events = cs::read_json_dir(&tree.join("Registry/Events"));
    for (name, e) in &events {
        let Ok(e) = e else {
            v.push(format!("event {name} does not parse"));
            continue;
        };
        let (Some(epoch), Some(by)) = (e["epoch"].as_u64(), e["by"].as_str()) else {
            v.push(format!("event {name} has no epoch or by: {e}"));
            continue;
        };
        by_epoch.entry(epoch).or_default().insert(by.to_string());
        if e["kind"] == "MonitorElected" && e["node"].as_str() != Some(by) {
            v.push(format!("event {name}: MonitorElected names {} but was written by {by}", e["node"]));
        }
    }
    for (epoch, writers) in &by_epoch {
        if writers.len() > 1 {
            v.push(format!("epoch {epoch}: events written by several monitors {writers:?}"));
        }
        if let Some(h) = leases.holders.get(epoch) {
            if !writers.is_subset(h) {
                v.push(format!("epoch {epoch}: events by {writers:?}, but the lease was held by {h:?}"));
            }
        }
    }
    for (epoch, holders) in &leases.holders {
        if holders.len() > 1 {
            v.push(format!("epoch {epoch}: the lease named several holders {holders:?}"));
        }
    }
    let offline = cs::read_json_dir(&tree.join("Registry/Offline"));
    for (name, r) in &offline {
        let Ok(r) = r else {
            v.push(format!("offline record {name} does not parse"));
            continue;
        };
        let (Some(epoch), Some(by)) = (r["epoch"].as_u64(), r["declared_by"].as_str()) else {
            v.push(format!("offline record {name} has no epoch or declared_by: {r}"));
            continue;
        };
        if let Some(writers) = by_epoch.get(&epoch) {
            if !writers.contains(by) || writers.len() > 1 {
                v.push(format!("offline record {name}: declared by {by} in epoch {epoch}, events by {writers:?}"));
            }
        }
        if let Some(h) = leases.holders.get(&epoch) {
            if !h.contains(by) {
                v.push(format!("offline record {name}: declared by {by} in epoch {epoch}, lease held by {h:?}"));
            }
        }
    }
    (events.len(), offline.len(), by_epoch.len().max(leases.holders.len()))
}

/// Checks the execution records against the tasks; returns a summary.
/// Checks the execution records; returns a summary line and the number of
/// executions.
fn check_records(records: &Path, ids: &[String], done: &BTreeSet<String>, v: &mut Vec<String>) -> (String, usize) {
    let execs = read_records(records, v);
    let known: BTreeSet<&String> = ids.iter().collect();
    let mut by_unit: BTreeMap<(String, usize), Vec<&Exec>> = BTreeMap::new();
    for e in &execs {
        if !known.contains(&e.task) || e.unit >= PARTITIONS {
            v.push(format!("record {}: unknown task or unit: {e:?}", e.file));
            continue;
        }
        by_unit.entry((e.task.clone(), e.unit)).or_default().push(e);
    }
    let mut stale = 0;
    let mut overlapping = 0;
    let mut cut = 0;
    // Units of a task that did not end `Done` are reported with the task.
    for id in ids.iter().filter(|id| done.contains(*id)) {
        for u in 0..PARTITIONS {
            let Some(list) = by_unit.get(&(id.clone(), u)) else {
                v.push(format!("task {id} unit {u}: never executed"));
                continue;
            };
            if !list.iter().any(|e| e.end_ns.is_some()) {
                v.push(format!("task {id} unit {u}: no execution completed: {list:?}"));
            }
            let mut attempts: BTreeMap<u64, Vec<&Exec>> = BTreeMap::new();
            for e in list {
                attempts.entry(e.attempt).or_default().push(e);
            }
            for (a, runs) in &attempts {
                if runs.len() > 1 {
                    v.push(format!("task {id} unit {u}: attempt {a} executed {} times: {runs:?}", runs.len()));
                }
            }
            let (newest, runs) = attempts.iter().next_back().unwrap();
            if runs.iter().all(|e| e.end_ns.is_none()) {
                v.push(format!(
                    "task {id} unit {u}: the newest attempt {newest} was cut short, so an older attempt was \
                     counted: {list:?}"
                ));
            }
            stale += list.iter().filter(|e| e.attempt < *newest).count();
            cut += list.iter().filter(|e| e.end_ns.is_none()).count();
            // Two executions of one unit at once (an old attempt still
            // running when the new one started): allowed, counted.
            for a in list.iter() {
                for b in list.iter() {
                    if a.attempt < b.attempt && a.end_ns.is_none_or(|end| end > b.start_ns) && a.start_ns < b.start_ns {
                        overlapping += 1;
                    }
                }
            }
        }
    }
    let workers: BTreeSet<(String, i32)> = execs.iter().map(|e| (e.node.clone(), e.worker_pid)).collect();
    let line = format!(
        "{} executions ({} of older attempts, {} cut short, {} overlapping a newer attempt) by {} worker processes",
        execs.len(),
        stale,
        cut,
        overlapping,
        workers.len()
    );
    (line, execs.len())
}

#[test]
fn fs_chaos_tasks_survive_kills_and_pauses() {
    let _turn = crate::common::turns::machine();
    let seed = seed();
    let long = std::env::var("COMPACTD_CHAOS_LONG").is_ok_and(|v| v == "1");
    // The same work without kills or pauses: the reference for throughput
    // and executions per unit under chaos.
    let calm = std::env::var("COMPACTD_CHAOS_CALM").is_ok_and(|v| v == "1");
    let s = settings(long);
    eprintln!("chaos seed: {seed} (replay with COMPACTD_CHAOS_SEED={seed}); long mode: {long}; calm: {calm}");
    let t0 = Instant::now();

    let c = Cluster::fs();
    let base = c.fs_path().parent().unwrap().to_path_buf();
    let root = c.fs_path();
    let records = base.join("records");
    let data = base.join("data");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let node_args: Vec<String> =
        ["--data", &format!("fs://{}", data.display()), "--sweep", "1s", "--max-running", "4", "--retries", "20"]
            .iter()
            .chain(&["--allow-inline-commands"])
            .map(|s| s.to_string())
            .collect();
    let mut ch = Chaos {
        c,
        node_args,
        marker: format!("CHAOS_RUN={seed}-{}", std::process::id()),
        rng: StdRng::seed_from_u64(seed),
        paused: BTreeMap::new(),
        counts: Counts::default(),
        actions: vec![],
        t0,
    };
    for n in NODES {
        ch.start(n);
    }
    ch.c.wait_nodes(Duration::from_secs(30), "5 alive nodes and a monitor", |r| {
        alive(r).len() == NODES.len() && monitor_of(r).is_some()
    });

    // Watch the lease of every epoch while it exists.
    let watch = Arc::new(Mutex::new(LeaseWatch::default()));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (watch, stop, dir) = (watch.clone(), stop_watch.clone(), root.join("Compaction_V2/Election"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                watch.lock().unwrap().observe(&dir);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let command = recording_command(&records, s.sleep);
    let parts: Vec<String> = (0..PARTITIONS).map(|p| format!("p{p}")).collect();
    let mut ids = vec![];
    for t in 0..s.tasks {
        let table = format!("t{t}");
        let mut args =
            vec!["submit", "--db", "db", "--schema", "s", "--table", &table, "--json", "--command", &command];
        for p in &parts {
            args.extend_from_slice(&["--partition", p]);
        }
        let out = ch.c.compactd(&args);
        assert!(out.status.success(), "submit failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let submitted = Instant::now();
    eprintln!("chaos: {} tasks of {PARTITIONS} partitions submitted after {:?}", ids.len(), t0.elapsed());

    // The chaos.
    let mut violations: Vec<String> = vec![];
    let mut next_action = Instant::now() + Duration::from_millis(ch.rng.random_range(1000..=3000));
    let mut next_poll = Instant::now();
    let mut finished_during_chaos = false;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        ch.resume_due();
        violations.extend(ch.restart_exited());
        let now = Instant::now();
        if now >= next_poll {
            next_poll = now + Duration::from_secs(1);
            if all_terminal(&ch.c, &ids) {
                finished_during_chaos = true;
                break;
            }
        }
        if submitted.elapsed() > s.chaos_limit {
            break;
        }
        if now >= next_action && !calm {
            ch.act();
            next_action = Instant::now() + Duration::from_millis(ch.rng.random_range(1000..=3000));
        }
    }
    ch.resume_all();
    let chaos_time = submitted.elapsed();
    ch.note(format!("chaos over (every task terminal: {finished_during_chaos})"));

    // Settle: every task terminal, then every subtask folder swept.
    let start = Instant::now();
    while !all_terminal(&ch.c, &ids) {
        violations.extend(ch.restart_exited());
        if start.elapsed() > s.settle_limit {
            violations.push(format!("tasks not terminal {:?} after the chaos", s.settle_limit));
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let work_time = submitted.elapsed();
    let start = Instant::now();
    loop {
        let left: usize = ids
            .iter()
            .filter_map(|id| run_json(&ch.c, &["status", id, "--json"]))
            .map(|s| s["subtasks"].as_array().map(Vec::len).unwrap_or(0))
            .sum();
        if left == 0 {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            violations.push(format!("{left} subtask folders left 20s after every task ended"));
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    // Tasks.
    let rows = list(&ch.c);
    for id in &ids {
        let Some(r) = rows.get(id) else {
            violations.push(format!("task {id} missing from list"));
            continue;
        };
        if r["state"] != "Done" || r["success"] != PARTITIONS as u64 || r["failed"] != 0 {
            violations.push(format!("task {id}: {r}"));
        }
        let info_path = root.join(format!("Compaction_V2/Scheduler/{id}/TaskInfo.pc.db"));
        let info: Value =
            serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap_or_default()).unwrap_or(Value::Null);
        let mut done: Vec<u64> =
            info["done_units"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
        done.sort();
        if done != (0..PARTITIONS as u64).collect::<Vec<_>>() {
            violations.push(format!("task {id}: done_units are not 0..{PARTITIONS} once each: {done:?}"));
        }
        if info["failed_units"].as_array().is_some_and(|a| !a.is_empty()) {
            violations.push(format!("task {id}: failed units {}", info["failed_units"]));
        }
    }

    // Records and epochs.
    let done: BTreeSet<String> =
        ids.iter().filter(|id| rows.get(*id).is_some_and(|r| r["state"] == "Done")).cloned().collect();
    let (summary, executions) = check_records(&records, &ids, &done, &mut violations);
    stop_watch.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let leases = watch.lock().unwrap().clone();
    let (n_events, n_offline, n_epochs) = check_epochs(&root, &leases, &mut violations);

    // The tree, with the nodes running.
    let check = ch.c.compactd(&["check", "--json"]);
    if !check.status.success() {
        violations.push(format!("compactd check (nodes running): {}", String::from_utf8_lossy(&check.stdout)));
    }
    // Stop every node cleanly; nothing of theirs may keep running.
    for n in NODES {
        if let Some(code) = ch.c.terminate(n).filter(|c| *c != 0) {
            violations.push(format!("{n} exited with {code} on SIGTERM"));
        }
    }
    let left = cs::wait_no_process_with_env(&ch.marker, Duration::from_secs(3));
    if !left.is_empty() {
        violations.push(format!("processes left after every node stopped: {left:?}"));
    }
    let check = ch.c.compactd(&["check", "--json"]);
    if !check.status.success() {
        violations.push(format!("compactd check (nodes stopped): {}", String::from_utf8_lossy(&check.stdout)));
    }
    let mut fenced_log_lines = 0;
    let mut redispatched = 0;
    for n in NODES {
        let log = std::fs::read_to_string(ch.c.log_path(n)).unwrap_or_default();
        if log.contains("panicked") {
            violations.push(format!("{n}'s log holds a panic"));
        }
        fenced_log_lines += log.lines().filter(|l| l.contains("stepping down")).count();
        redispatched += log.lines().filter(|l| l.contains("dispatching again")).count();
    }

    let k = &ch.counts;
    eprintln!(
        "chaos summary (seed {seed}): chaos {chaos_time:?}, all tasks terminal after {work_time:?}, total {:?}\n  \
         {} kills ({} of the monitor, {} of a manager), {} daemon pauses, {} machine pauses ({} of the monitor, \
         {} of a manager), {} unexpected exits\n  {summary}\n  {redispatched} re-dispatches, {fenced_log_lines} \
         step-downs logged, {n_epochs} epochs, {n_events} events, {n_offline} offline records",
        t0.elapsed(),
        k.kills,
        k.kills_of_monitor,
        k.kills_of_manager,
        k.pauses_daemon,
        k.pauses_machine,
        k.pauses_of_monitor,
        k.pauses_of_manager,
        k.unexpected_exits,
    );
    // For bench/run.sh (long mode, release): one machine-readable line.
    println!(
        "RESULT {}",
        serde_json::json!({
            "part": "chaos", "seed": seed, "long": long, "calm": calm, "tasks": ids.len(),
            "units": ids.len() * PARTITIONS, "executions": executions,
            "work_s": work_time.as_secs_f64(), "kills": k.kills, "kills_of_monitor": k.kills_of_monitor,
            "pauses_daemon": k.pauses_daemon, "pauses_machine": k.pauses_machine, "epochs": n_epochs,
            "offline_records": n_offline, "violations": violations.len(),
        })
    );
    if !violations.is_empty() {
        let logs = ch.c.log_path("n1").parent().unwrap().to_path_buf();
        let kept = cs::keep_evidence(
            &format!("compactd-chaos-{seed}"),
            &[("logs", logs), ("root", root.clone()), ("records", records.clone())],
        );
        std::fs::write(kept.join("actions.txt"), ch.actions.join("\n")).unwrap();
        panic!(
            "chaos seed {seed}: {} violations (evidence kept in {}):\n- {}",
            violations.len(),
            kept.display(),
            shown(&violations)
        );
    }
}

/// The first violations, one per line (all of them are worth the same
/// story; the evidence folder has the rest).
fn shown(violations: &[String]) -> String {
    let mut s: Vec<String> = violations.iter().take(30).map(|v| v.chars().take(1500).collect()).collect();
    if violations.len() > 30 {
        s.push(format!("... and {} more", violations.len() - 30));
    }
    s.join("\n- ")
}

#[path = "chaos/fenced_merge.rs"]
mod fenced_merge;
