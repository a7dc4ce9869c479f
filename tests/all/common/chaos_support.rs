//! Helpers of the process chaos tests (`tests/all/simulation/chaos.rs`): starting a node with
//! its own environment, pausing a node's whole process tree (a frozen
//! machine: the daemon and the executors it started), scanning `/proc` for
//! processes left behind, and keeping the evidence of a failed run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::Cluster;

/// Starts `node` like [`Cluster::start_with`], with `env` added to the
/// cluster's shared environment for this process only (an executor inherits
/// its worker's environment, so this is how a command learns its node).
pub fn start_with_env(c: &mut Cluster, node: &str, extra: &[&str], env: &[(String, String)]) {
    let saved = c.env.clone();
    c.env.extend(env.iter().cloned());
    c.start_with(node, extra);
    c.env = saved;
}

/// One line of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub state: char,
}

/// Every process of the machine (that we can read).
pub fn procs() -> Vec<Proc> {
    let mut out = vec![];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parens.
        let Some(after) = stat.rsplit_once(')').map(|x| x.1) else {
            continue;
        };
        let f: Vec<&str> = after.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let (Ok(ppid), Ok(pgid)) = (f[1].parse(), f[2].parse()) else {
            continue;
        };
        out.push(Proc { pid, ppid, pgid, state: f[0].chars().next().unwrap_or('?') });
    }
    out
}

/// The live (not zombie) descendants of `root`, parents before children.
pub fn descendants(root: i32) -> Vec<Proc> {
    let all = procs();
    let mut children: BTreeMap<i32, Vec<Proc>> = BTreeMap::new();
    for p in &all {
        children.entry(p.ppid).or_default().push(*p);
    }
    let mut out = vec![];
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        for c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if c.state != 'Z' {
                out.push(*c);
                queue.push(c.pid);
            }
        }
    }
    out
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: a plain syscall; ESRCH (the process just ended) is fine.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGSTOPs `root` and then every descendant, until a scan finds every
/// descendant stopped (a child may fork while we walk). Individual pids are
/// signalled, never a process group: a child that has not yet called
/// `setpgid` is still in the test runner's group. Returns the stopped pids.
pub fn stop_tree(root: i32) -> Vec<i32> {
    signal(root, libc::SIGSTOP);
    let mut stopped: BTreeSet<i32> = BTreeSet::new();
    let start = Instant::now();
    loop {
        let running: Vec<Proc> = descendants(root).into_iter().filter(|p| p.state != 'T' && p.state != 't').collect();
        if running.is_empty() || start.elapsed() > Duration::from_secs(2) {
            break;
        }
        for p in running {
            signal(p.pid, libc::SIGSTOP);
            stopped.insert(p.pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stopped.into_iter().collect()
}

/// SIGCONTs the descendants of `root` and `root` itself; with
/// `root_after`, the descendants run that long before their parent does (a
/// resumed machine schedules its processes in any order: this is the order
/// in which a worker reacts last).
pub fn cont_tree(root: i32, root_after: Duration) {
    for p in descendants(root) {
        signal(p.pid, libc::SIGCONT);
    }
    if !root_after.is_zero() {
        std::thread::sleep(root_after);
    }
    signal(root, libc::SIGCONT);
}

/// Pids, not zombies, whose environment holds `KEY=VALUE` (`marker`), with
/// their command lines.
pub fn live_with_env(marker: &str) -> Vec<(i32, String)> {
    let needle = marker.as_bytes();
    let mut out = vec![];
    for p in procs() {
        if p.state == 'Z' {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{}/environ", p.pid)) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle) {
            let cmd = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            out.push((p.pid, cmd.trim().to_string()));
        }
    }
    out
}

/// Waits until no live process carries `marker` in its environment; returns
/// those still alive after `timeout`.
pub fn wait_no_process_with_env(marker: &str, timeout: Duration) -> Vec<(i32, String)> {
    let start = Instant::now();
    loop {
        let left = live_with_env(marker);
        if left.is_empty() || start.elapsed() > timeout {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every file of `dir` that parses as JSON, by file name (unparsable files
/// are returned as `Err(text)`).
pub fn read_json_dir(dir: &Path) -> BTreeMap<String, Result<Value, String>> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        if !e.path().is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().to_string();
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        out.insert(name, serde_json::from_str(&text).map_err(|_| text));
    }
    out
}

/// Copies a tree (files and folders; nothing else) to `dst`.
pub fn copy_tree(src: &Path, dst: &Path) {
    let _ = std::fs::create_dir_all(dst);
    let Ok(rd) = std::fs::read_dir(src) else {
        return;
    };
    for e in rd.flatten() {
        let to = dst.join(e.file_name());
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            copy_tree(&e.path(), &to);
        } else if t.is_file() {
            let _ = std::fs::copy(e.path(), &to);
        }
    }
}

/// Keeps the evidence of a failed run (logs, the tree, records) in a folder
/// that outlives the test's temporary ones; returns it.
pub fn keep_evidence(name: &str, dirs: &[(&str, PathBuf)]) -> PathBuf {
    let out = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&out);
    for (label, dir) in dirs {
        copy_tree(dir, &out.join(label));
    }
    out
}

/// Lease holders as observed by polling `Election/` (old leases are
/// deleted, so they must be watched while they exist): epoch → holders seen.
#[derive(Debug, Default, Clone)]
pub struct LeaseWatch {
    pub holders: BTreeMap<u64, BTreeSet<String>>,
}

impl LeaseWatch {
    pub fn observe(&mut self, election_dir: &Path) {
        for (_, v) in read_json_dir(election_dir) {
            if let Ok(v) = v {
                if let (Some(e), Some(h)) = (v["epoch"].as_u64(), v["holder"].as_str()) {
                    self.holders.entry(e).or_default().insert(h.to_string());
                }
            }
        }
    }
}
