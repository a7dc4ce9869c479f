//! Acceptance tests of compaction tasks with real `compactd` processes:
//! end to end with the merge executor (every line preserved), a SIGKILLed
//! worker, a SIGKILLed manager, stopping a repeat task, a paused worker
//! whose late result must not count; on fs, on a loopback S3 server and on a
//! real HDFS.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use common::s3::S3Server;
use serde_json::Value;

const PARTITIONS: usize = 6;

fn make_table(data_uri: &str) -> Vec<String> {
    common::table::make_table(data_uri, PARTITIONS)
}

/// Every line of the table's data files, sorted, and per partition the
/// attempts whose merge committed (every commit rolled forward).
fn read_table(data_uri: &str) -> (Vec<String>, BTreeMap<String, Vec<u64>>) {
    let (lines, commits) = common::table::read_table(data_uri, PARTITIONS);
    let attempts = commits
        .into_iter()
        .map(|(p, cs)| {
            assert!(cs.iter().all(|(_, done)| *done), "a commit of {p} was not rolled forward: {cs:?}");
            (p, cs.into_iter().map(|(a, _)| a).collect())
        })
        .collect();
    (lines, attempts)
}

fn start3(c: &mut Cluster, data: &str) {
    // Room for every subtask of a small task even if the ring puts them all
    // on one node.
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", data, "--sweep", "1s", "--max-running", "8", "--allow-inline-commands"]);
    }
    c.wait_nodes(Duration::from_secs(20), "3 alive nodes and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

fn running_on(s: &Value, not: &[&str]) -> Option<(String, String)> {
    s["subtasks"].as_array().unwrap().iter().find_map(|t| {
        let node = t["node"].as_str().unwrap();
        (t["state"] == "Running" && !not.contains(&node))
            .then(|| (node.to_string(), t["partition"].as_str().unwrap_or("").to_string()))
    })
}

/// End to end with a worker SIGKILLed while it runs a subtask.
fn killed_worker(c: &mut Cluster, data: &str) {
    let want = make_table(data);
    start3(c, data);
    let task = c.submit(&["--db", "db"]);
    let s = c.wait_status(&task, Duration::from_secs(20), "a subtask running on a non-manager node", |s| {
        let manager = s["manager"].as_str().unwrap_or("");
        running_on(s, &[manager]).is_some()
    });
    let manager = s["manager"].as_str().unwrap().to_string();
    let (victim, partition) = running_on(&s, &[&manager]).unwrap();
    c.kill(&victim);
    let s = c.wait_status(&task, Duration::from_secs(40), "the task to end", |s| {
        s["state"] != "Running" && s["state"] != "Init"
    });
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["result"]["success"], PARTITIONS as u64, "{s:#}");
    assert_eq!(s["result"]["failed"], 0);
    let (got, commits) = read_table(data);
    assert_eq!(got, want, "every line preserved exactly once");
    assert_eq!(commits.len(), PARTITIONS, "{commits:?}");
    assert!(commits.values().all(|a| a.len() == 1), "one commit per partition: {commits:?}");
    // The killed worker's merge died with it (before its commit, thanks to
    // the delay): the partition was merged by a later attempt elsewhere.
    assert!(commits[&partition][0] >= 2, "{partition} was not run again: {commits:?}");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

fn slow_merge_env() -> Vec<(String, String)> {
    vec![("COMPACTD_TEST_MERGE_DELAY_MS".into(), "2500".into())]
}

#[test]
fn fs_compaction_end_to_end_with_a_killed_worker() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    c.env = slow_merge_env();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    killed_worker(&mut c, &data);
}

#[test]
fn s3_compaction_end_to_end_with_a_killed_worker() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    s3.set_env();
    let root = s3.new_bucket("tasks");
    let data = s3.new_bucket("data");
    let mut env = s3.env();
    env.extend(slow_merge_env());
    let mut c = Cluster::on(root, env);
    killed_worker(&mut c, &data);
}

#[test]
fn fs_a_killed_manager_hands_its_task_over() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    c.env = slow_merge_env();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    let want = make_table(&data);
    start3(&mut c, &data);
    let task = c.submit(&["--db", "db", "--manager", "n2"]);
    c.wait_status(&task, Duration::from_secs(20), "subtasks running", |s| running_on(s, &[]).is_some());
    c.kill("n2");
    let s = c.wait_status(&task, Duration::from_secs(60), "the task to end", |s| {
        s["state"] != "Running" && s["state"] != "Init"
    });
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_ne!(s["manager"], "n2", "{s:#}");
    assert!(s["manager_term"].as_u64().unwrap() >= 2);
    assert_eq!(s["result"]["success"], PARTITIONS as u64);
    let (got, commits) = read_table(&data);
    assert_eq!(got, want);
    assert!(commits.values().all(|a| a.len() == 1), "{commits:?}");
}

fn pid_alive(pid: i32) -> bool {
    // A zombie is not running; /proc/<pid>/stat says Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rsplit_once(')').map(|x| x.1.split_whitespace().next() != Some("Z")).unwrap_or(false),
        Err(_) => false,
    }
}

#[test]
fn fs_stopping_a_repeat_task_cancels_it_and_kills_its_executors() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    let pids = c.fs_path().with_file_name("pids");
    std::fs::create_dir_all(&pids).unwrap();
    start3(&mut c, &data);
    let cmd = format!("echo $$ > {}/{{subtask}}.pid; exec sleep 60", pids.display());
    let task = c.submit(&["--db", "db", "--shards", "3", "--repeat", "0", "--interval", "100ms", "--command", &cmd]);
    c.wait_status(&task, Duration::from_secs(20), "3 running executors", |s| {
        s["subtasks"].as_array().unwrap().iter().filter(|t| t["state"] == "Running").count() == 3
    });
    std::thread::sleep(Duration::from_millis(300));
    let started: Vec<i32> = std::fs::read_dir(&pids)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap().trim().trim_matches('\'').parse().unwrap())
        .collect();
    assert_eq!(started.len(), 3, "{started:?}");
    assert!(started.iter().all(|p| pid_alive(*p)));
    let out = c.compactd(&["stop", &task]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = c.wait_status(&task, Duration::from_secs(20), "Cancel", |s| s["state"] == "Cancel");
    assert!(s["subtasks"].as_array().unwrap().is_empty(), "{s:#}");
    let start = Instant::now();
    while started.iter().any(|p| pid_alive(*p)) {
        assert!(start.elapsed() < Duration::from_secs(10), "executors still running: {started:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The processes whose parent is `pid` (from every thread's `children`).
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten() {
        let t = t.unwrap().path();
        let kids = std::fs::read_to_string(t.join("children")).unwrap_or_default();
        out.extend(kids.split_whitespace().map(|p| p.parse::<i32>().unwrap()));
    }
    out
}

#[test]
fn fs_a_sigkilled_daemon_takes_its_executors_and_what_they_started_with_it() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let pids = c.fs_path().with_file_name("pids");
    std::fs::create_dir_all(&pids).unwrap();
    c.start_with("n1", &["--allow-inline-commands"]);
    c.wait_nodes(Duration::from_secs(20), "n1 alive", |r| alive(r).len() == 1);
    // The shell, and a process it started in the background: a death signal
    // to the shell alone (what executors used to get) leaves the second.
    let cmd =
        format!("sleep 60 & echo $! > {d}/{{subtask}}.bg; echo $$ > {d}/{{subtask}}.sh; wait", d = pids.display());
    let task = c.submit(&["--db", "db", "--shards", "2", "--command", &cmd]);
    c.wait_status(&task, Duration::from_secs(20), "2 running executors", |s| {
        s["subtasks"].as_array().unwrap().iter().filter(|t| t["state"] == "Running").count() == 2
    });
    let read_pids = || -> Vec<i32> {
        std::fs::read_dir(&pids)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok()?.trim().parse().ok())
            .collect()
    };
    let start = Instant::now();
    while read_pids().len() < 4 {
        assert!(start.elapsed() < Duration::from_secs(10), "pid files: {:?}", read_pids());
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = read_pids();
    assert!(started.iter().all(|p| pid_alive(*p)), "{started:?}");
    // The daemon's own children: its two executors and its reaper.
    let reapers: Vec<i32> = children_of(c.pid("n1"))
        .into_iter()
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default().ends_with(b"__reaper\0"))
        .collect();
    assert_eq!(reapers.len(), 1, "the daemon runs one reaper");
    c.kill("n1");
    let start = Instant::now();
    while started.iter().chain(&reapers).any(|p| pid_alive(*p)) {
        let left: Vec<_> = started.iter().chain(&reapers).filter(|p| pid_alive(**p)).collect();
        assert!(start.elapsed() < Duration::from_secs(5), "still running after the daemon was killed: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn fs_a_paused_workers_late_result_is_not_accepted() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    c.env = slow_merge_env();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    let want = make_table(&data);
    start3(&mut c, &data);
    let monitor = monitor_of(&c.nodes()).unwrap();
    // Managed by the monitor: the two other nodes are plain workers.
    let task = c.submit(&["--db", "db", "--manager", &monitor]);
    let s = c.wait_status(&task, Duration::from_secs(20), "a subtask running on a plain worker", |s| {
        let manager = s["manager"].as_str().unwrap_or("");
        running_on(s, &[manager, &monitor]).is_some()
    });
    let manager = s["manager"].as_str().unwrap().to_string();
    let (victim, partition) = running_on(&s, &[&manager, &monitor]).unwrap();
    c.pause(&victim);
    // Past its session timeout the manager gives the subtask to another node.
    c.wait_status(&task, Duration::from_secs(20), "the subtask re-dispatched", |s| {
        s["state"] == "Done"
            || s["subtasks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["partition"] == partition.as_str() && t["attempt"].as_u64() >= Some(2))
    });
    c.resume(&victim);
    let s = c.wait_status(&task, Duration::from_secs(40), "the task to end", |s| {
        s["state"] != "Running" && s["state"] != "Init"
    });
    assert_eq!(s["state"], "Done", "{s:#}");
    // Exactly one success per partition: the late result was not counted.
    assert_eq!(s["result"]["success"], PARTITIONS as u64, "{s:#}");
    std::thread::sleep(Duration::from_secs(2));
    let s = c.status(&task);
    assert_eq!(s["result"]["success"], PARTITIONS as u64, "{s:#}");
    let (got, commits) = read_table(&data);
    assert_eq!(got, want, "every line exactly once: the merge was not committed twice");
    assert_eq!(commits[&partition].len(), 1, "{commits:?}");
    let log = std::fs::read_to_string(c.log_path(&victim)).unwrap();
    assert!(log.contains("rejoining with a new incarnation"), "{log}");
}

#[test]
fn fs_reassign_a_subtask_and_a_manager_then_archive_the_history() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--sweep", "1s", "--history-retention", "1s", "--allow-inline-commands"]);
    }
    c.wait_nodes(Duration::from_secs(20), "3 alive nodes", |r| alive(r).len() == 3 && monitor_of(r).is_some());
    let task = c.submit(&["--db", "db", "--shards", "3", "--manager", "n1", "--command", "sleep 4"]);
    let s = c.wait_status(&task, Duration::from_secs(20), "a running subtask", |s| running_on(s, &[]).is_some());
    let sub = s["subtasks"].as_array().unwrap().iter().find(|t| t["state"] == "Running").unwrap().clone();
    let from = sub["node"].as_str().unwrap().to_string();
    let to = ["n1", "n2", "n3"].into_iter().find(|n| *n != from).unwrap();
    let unit = sub["shard"].as_u64().unwrap();
    let out = c.compactd(&["reassign", sub["id"].as_str().unwrap(), "--to", to]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.wait_status(&task, Duration::from_secs(20), "the subtask on the new node", |s| {
        s["subtasks"].as_array().unwrap().iter().any(|t| t["shard"] == unit && t["node"] == to && t["attempt"] == 2)
    });
    let out = c.compactd(&["reassign", &task, "--manager", "n3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = c.wait_status(&task, Duration::from_secs(30), "the task done under n3", |s| s["state"] == "Done");
    assert_eq!(s["manager"], "n3", "{s:#}");
    assert_eq!(s["manager_term"], 2);
    assert_eq!(s["result"]["success"], 3);
    assert_eq!(s["result"]["failed"], 0, "a reassignment is not a failure");
    // Past the history retention the monitor archives it into Compress/.
    let start = Instant::now();
    loop {
        let list: Vec<Value> = serde_json::from_slice(&c.compactd(&["list", "--json"]).stdout).unwrap();
        if list.iter().all(|t| t["id"] != task.as_str()) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never archived\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let hist: Vec<Value> = serde_json::from_slice(&c.compactd(&["history", "--json"]).stdout).unwrap();
    let h = hist.iter().find(|t| t["info"]["CompactTaskId"] == task.as_str()).expect("in the history");
    assert_eq!(h["state"], "Done");
    assert_eq!(h["info"]["ResultInfo"]["successCount"], 3);
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    assert!(std::fs::read_dir(c.fs_path().join("Compaction_V2/Scheduler/Compress")).unwrap().count() >= 1);
}

/// A merge task for a table with no partition folders (missing, empty, or
/// the wrong `--data`) fails, naming what was looked at; it is not Done
/// with nothing done.
#[test]
fn fs_a_table_without_partitions_fails_naming_the_path() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    std::fs::create_dir_all(c.fs_path().with_file_name("data").join("db/s/empty")).unwrap();
    c.start_with("n1", &["--data", &data]);
    c.wait_nodes(Duration::from_secs(20), "n1 alive and monitor", |r| alive(r).len() == 1 && monitor_of(r).is_some());
    for table in ["missing", "empty"] {
        let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", table, "--wait", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!("no partition folders under db/s/{table}/");
        assert!(err.contains(&want) && err.contains("Failed"), "{err}");
        let id: Value = serde_json::from_slice(&out.stdout).unwrap();
        let s = c.status(id["id"].as_str().unwrap());
        assert_eq!(s["state"], "Failed", "{s:#}");
        assert!(s["error"].as_str().is_some_and(|e| e.contains(&want)), "{s:#}");
    }
}

#[test]
fn hdfs_compaction_end_to_end_with_a_killed_worker() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let root = hdfs.new_root("tasks");
    let data = hdfs.new_root("data");
    let mut c = Cluster::on(root, slow_merge_env());
    killed_worker(&mut c, &data);
    // A reader that is not compactd (hdfs-native's Python client through
    // pyarrow) sees every line once, in one file per partition.
    let lines = common::table::read_merged_through_python(&data, PARTITIONS);
    assert_eq!(lines, read_table(&data).0);
    assert_eq!(lines.len(), PARTITIONS * 100);
    // The tree does not keep what finished work left: no subtask folder
    // (nor an empty one of a failed create) stays below a node's folder
    // (every file and folder is NameNode memory).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tree = rt.block_on(store::Store::open(&store::RootUri::parse(&c.root).unwrap())).unwrap();
    let start = Instant::now();
    loop {
        use futures::TryStreamExt;
        let left: Vec<String> = rt
            .block_on(tree.list_tree("Compaction_V2/TaskAssigned/").map_ok(|e| e.path).try_collect::<Vec<_>>())
            .unwrap()
            .into_iter()
            .filter(|p| p.trim_end_matches('/').matches('/').count() > 2)
            // A node that lost its session and rejoined marks the old
            // incarnation ended, a marker kept for a while by design.
            .filter(|p| !p.rsplit('/').next().is_some_and(|n| n.starts_with(layouts::v2::ENDED_PREFIX)))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "left below TaskAssigned/: {left:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Writes `files` more files of 10 lines into each of 3 partitions of
/// `db/s/t` on the data backend; returns their lines.
fn add_files(data_uri: &str, batch: usize, files: usize) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(store::Store::open(&store::RootUri::parse(data_uri).unwrap())).unwrap();
    let mut lines = vec![];
    for p in 0..3 {
        for f in 0..files {
            let mine: Vec<String> = (0..10).map(|l| format!("b{batch}-p{p}-f{f}-l{l}")).collect();
            let path = format!("db/s/t/dt={p}/part-{batch}-{f:03}");
            rt.block_on(store.put(&path, (mine.join("\n") + "\n").into_bytes())).unwrap();
            lines.extend(mine);
        }
    }
    lines
}

/// Submits `n` merge tasks of the table at the same moment; their ids.
fn submit_at_once(c: &Cluster, n: usize) -> Vec<String> {
    let go = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    go.wait();
                    c.submit(&["--db", "db", "--executor", "merge"])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn wait_done(c: &Cluster, tasks: &[String]) {
    for task in tasks {
        let s = c.wait_status(task, Duration::from_secs(90), "the task to end", |s| {
            s["state"] != "Running" && s["state"] != "Init" && !s.is_null()
        });
        assert_eq!(s["state"], "Done", "{s:#}");
        assert_eq!(s["result"]["failed"], 0, "{s:#}");
    }
}

/// Two, then five, merge tasks of one table submitted at the same moment
/// on 3 nodes, a node SIGKILLed while the five run: each partition is
/// changed by one task at a time, so every line is there exactly once
/// (two such submits left 2,000 lines for 1,200 when each task committed
/// the plan it made from the same files).
fn racing_tasks_keep_every_line_once(c: &mut Cluster, data: &str) {
    // Long enough between staging and commit that the tasks' units overlap.
    c.env.push(("COMPACTD_TEST_MERGE_DELAY_MS".into(), "400".into()));
    let mut want = add_files(data, 0, 40);
    start3(c, data);
    let two = submit_at_once(c, 2);
    wait_done(c, &two);
    want.sort();
    let got = read_table(data).0;
    assert_eq!(got.len(), want.len(), "lines lost or duplicated");
    assert_eq!(got, want);

    want.extend(add_files(data, 1, 40));
    want.sort();
    let five = submit_at_once(c, 5);
    // A worker dies with units of the racing tasks running on it (it may
    // manage another of them: its tasks are handed over).
    let s = c.wait_status(&five[0], Duration::from_secs(30), "a unit running on a node besides the manager", |s| {
        s["subtasks"].is_array()
            && (running_on(s, &[s["manager"].as_str().unwrap_or("")]).is_some() || s["state"] == "Done")
    });
    if let Some((victim, _)) = running_on(&s, &[s["manager"].as_str().unwrap_or("")]) {
        c.kill(&victim);
    }
    wait_done(c, &five);
    let got = read_table(data).0;
    assert_eq!(got.len(), want.len(), "lines lost or duplicated");
    assert_eq!(got, want);
}

#[test]
fn fs_tasks_racing_on_one_table_keep_every_line_once() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    racing_tasks_keep_every_line_once(&mut c, &data);
}

#[test]
fn s3_tasks_racing_on_one_table_keep_every_line_once() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    s3.set_env();
    let root = s3.new_bucket("race");
    let data = s3.new_bucket("racedata");
    let mut c = Cluster::on(root, s3.env());
    racing_tasks_keep_every_line_once(&mut c, &data);
}
