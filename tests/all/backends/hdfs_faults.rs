//! Faults of HDFS itself, with real `compactd` processes on a real HDFS (a
//! NameNode and 3 DataNodes in one JVM, tests/all/common/hdfs.rs):
//! - the NameNode stopped for longer than a session while units run, then
//!   restarted on the same storage folders: every node's executors die
//!   within its session (the session guard), the nodes rejoin, the task ends
//!   Done, and no unit ever runs on two nodes at once;
//! - the monitor, which also manages the task, SIGKILLed while a task of
//!   many shards runs in batches (layouts 3 and 4): a new monitor takes
//!   over, the task ends Done with every shard run to its end, and `check`
//!   is clean (exit 0, no anomaly) the moment it is;
//! - a DataNode killed while merge executors write multi-block outputs: every
//!   unit's write completes on the remaining DataNodes or the unit is
//!   retried; no partial output is ever committed (every line once);
//! - every DataNode stopped while a file is replaced: the replace fails
//!   (after the store's retries) and the old content stays;
//! - a `complete` that fails (a failpoint where a DataNode pipeline dies
//!   between the last write and `complete`): the store's retry of the close
//!   writes the whole content again (small files) or publishes nothing
//!   (streamed files); found by the DataNode test, where a retried close
//!   once published an empty lease;
//! - a listing while the NameNode is down fails as a whole: it never comes
//!   back as a shorter (here: empty) listing after the store's retry, as it
//!   once did (`compactd nodes` printed an empty cluster with exit 0).
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use common::runs::{assert_no_overlap, read_runs, recording_command};
use serde_json::Value;
use store::{RootUri, Store};

const SESSION: Duration = Duration::from_secs(3);

fn submit(c: &Cluster, extra: &[&str]) -> String {
    let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", "t", "--json"];
    args.extend_from_slice(extra);
    let out = c.compactd(&args);
    assert!(out.status.success(), "submit failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string()
}

fn wait_done(c: &Cluster, task: &str, timeout: Duration) -> Value {
    let start = Instant::now();
    loop {
        let st: Value = serde_json::from_slice(&c.compactd(&["status", task, "--json"]).stdout).unwrap_or(Value::Null);
        if st["state"] == "Done" {
            return st;
        }
        assert!(start.elapsed() < timeout, "not done after {timeout:?}: {st:#}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn incarnations(c: &Cluster) -> BTreeMap<String, u64> {
    c.nodes().iter().map(|r| (r["id"].as_str().unwrap().to_string(), r["incarnation"].as_u64().unwrap())).collect()
}

#[test]
fn the_namenode_stopped_past_a_session_mid_task_then_restarted() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    const SHARDS: u32 = 6;
    let hdfs = HdfsCluster::faults();
    let mut c = Cluster::on(hdfs.new_root("nn-stop"), vec![]);
    c.timings = vec!["--heartbeat", "300ms", "--session-timeout", "3s", "--lease", "3s"];
    let records = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_uri = format!("fs://{}", data.path().display());
    for n in ["n1", "n2", "n3"] {
        let cmd = recording_command(records.path(), n, 8);
        c.start_with(
            n,
            &[
                "--data",
                &data_uri,
                "--executor",
                "command",
                "--command",
                &cmd,
                "--max-running",
                "6",
                "--backend-timeout",
                "1s",
                "--backend-retries",
                "0",
            ],
        );
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive and a monitor", |r| alive(r).len() == 3 && monitor_of(r).is_some());
    let before = incarnations(&c);
    let task = submit(&c, &["--shards", &SHARDS.to_string()]);
    let start = Instant::now();
    while read_runs(records.path()).len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(30), "units never started\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    hdfs.stop_namenode();
    let stopped = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    std::thread::sleep(SESSION * 2 + Duration::from_secs(1));
    // Bounded by the session guard: nothing ran on past the session, though
    // no node could tell the others anything.
    for r in read_runs(records.path()).values().flatten() {
        assert!(
            r.last_ns < stopped + (SESSION + Duration::from_millis(700)).as_nanos(),
            "a run on {} went on {} ms after the NameNode stopped: {r:?}",
            r.node,
            (r.last_ns.saturating_sub(stopped)) / 1_000_000
        );
    }
    hdfs.restart_namenode();
    let st = wait_done(&c, &task, Duration::from_secs(120));
    assert_eq!(st["result"]["success"], SHARDS as u64, "{st:#}");
    let runs = read_runs(records.path());
    let killed = assert_no_overlap(&runs);
    assert!(killed >= 1, "no run was cut short: the kill proved nothing: {runs:?}");
    assert!(killed >= 1, "no run was cut short: the NameNode stop proved nothing: {runs:?}");
    let after = incarnations(&c);
    for (n, inc) in &before {
        assert_ne!(after.get(n), Some(inc), "{n} kept its incarnation through a NameNode stop past its session");
    }
    eprintln!(
        "NameNode stop: {} runs of {SHARDS} units, {killed} cut short, all nodes rejoined: {after:?}",
        runs.values().map(Vec::len).sum::<usize>()
    );
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

#[test]
fn the_monitor_sigkilled_mid_task_in_layout_3() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    the_monitor_sigkilled_mid_task_in(3);
}

#[test]
fn the_monitor_sigkilled_mid_task_in_layout_4() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    the_monitor_sigkilled_mid_task_in(4);
}

fn the_monitor_sigkilled_mid_task_in(layout: u32) {
    const SHARDS: u32 = 40;
    let hdfs = HdfsCluster::faults();
    let mut c = Cluster::on(hdfs.new_root(&format!("monitor-kill-{layout}")), vec![]);
    let max_layout = layout.to_string();
    c.timings = vec!["--heartbeat", "300ms", "--session-timeout", "3s", "--lease", "3s"];
    let records = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_uri = format!("fs://{}", data.path().display());
    for n in ["n1", "n2", "n3"] {
        let cmd = recording_command(records.path(), n, 1);
        let args = ["--executor", "command", "--command", &cmd, "--max-running", "4", "--max-layout", &max_layout];
        c.start_with(n, &[&["--data", &data_uri][..], &args].concat());
    }
    // The layout in force (it rises a session after every member reads
    // it): the task runs in batches from its first dispatch.
    let rows = c.wait_nodes(Duration::from_secs(60), "3 alive, a monitor, the layout in force", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some() && r.iter().all(|x| x["layout_in_force"] == layout)
    });
    let monitor = monitor_of(&rows).unwrap();
    // Managed by the monitor: both of its roles are taken over.
    let task = submit(&c, &["--shards", &SHARDS.to_string(), "--manager", &monitor]);
    // Killed while units run on it too, not only while it dispatches.
    let start = Instant::now();
    loop {
        let runs = read_runs(records.path());
        let on_it = runs.values().flatten().filter(|r| r.node == monitor && !r.ended).count();
        if runs.len() >= 8 && on_it >= 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "units never started on {monitor}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill(&monitor);
    c.wait_nodes(Duration::from_secs(30), "a new monitor", |r| {
        alive(r).len() == 2 && monitor_of(r).is_some_and(|m| m != monitor)
    });
    let st = wait_done(&c, &task, Duration::from_secs(180));
    // At once: what the killed monitor left (its batches, claims, creates
    // cut short) is either gone or reported as pending the sweep.
    let check = c.compactd(&["check"]);
    assert_eq!(st["result"]["success"], SHARDS as u64, "{st:#}");
    assert!(
        check.status.success(),
        "check right after Done:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let runs = read_runs(records.path());
    assert_eq!(runs.len(), SHARDS as usize, "shards never ran: {runs:?}");
    for (unit, rs) in &runs {
        assert!(rs.iter().any(|r| r.ended), "shard {unit} never ran to its end: {rs:?}");
    }
    let killed = assert_no_overlap(&runs);
    let again = runs.values().map(|rs| rs.len() - 1).sum::<usize>();
    eprintln!(
        "layout {layout}, monitor {monitor} killed: {} runs of {SHARDS} shards ({killed} cut short, {again} run again); \
         check right after Done: {}",
        runs.values().map(Vec::len).sum::<usize>(),
        String::from_utf8_lossy(&check.stderr).lines().count()
    );
}

/// Lines per input file (about 1.7 MB each: outputs span several of the
/// test cluster's 1 MiB blocks).
const LINES: usize = 20_000;
const PARTITIONS: usize = 4;
const FILES: usize = 4;

fn line(p: usize, f: usize, l: usize) -> String {
    format!("p{p}-f{f}-l{l:06}-{}", "x".repeat(64))
}

#[test]
fn a_datanode_killed_while_executors_write() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    let hdfs = HdfsCluster::faults();
    let data = hdfs.new_root("dn-kill-data");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(Store::open(&RootUri::parse(&data).unwrap())).unwrap();
    let mut want = vec![];
    for p in 0..PARTITIONS {
        for f in 0..FILES {
            let mut text = String::new();
            for l in 0..LINES {
                let s = line(p, f, l);
                text += &s;
                text.push('\n');
                want.push(s);
            }
            rt.block_on(store.put(&format!("db/s/t/dt={p}/part-{f}"), text.into_bytes())).unwrap();
        }
    }
    want.sort();
    let mut c = Cluster::on(hdfs.new_root("dn-kill"), vec![]);
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", &data, "--max-running", "4", "--sweep", "1s"]);
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive and a monitor", |r| alive(r).len() == 3 && monitor_of(r).is_some());
    let task = submit(&c, &[]);
    c.wait_status(&task, Duration::from_secs(30), "a unit running", |s| {
        s["subtasks"].as_array().is_some_and(|subs| subs.iter().any(|t| t["state"] == "Running"))
    });
    hdfs.stop_datanode(1);
    let st = wait_done(&c, &task, Duration::from_secs(120));
    hdfs.restart_datanodes();
    assert_eq!(st["result"]["success"], PARTITIONS as u64, "{st:#}");
    // Every line once, in one file per partition, as a reader that is not
    // compactd sees the table.
    let got = common::table::read_merged_through_python(&data, PARTITIONS);
    assert_eq!(got.len(), want.len(), "lines lost or doubled");
    assert!(got == want, "the merged lines differ from the input");
    // Failed attempts may leave the empty folder of a create that never
    // completed; until the monitor's sweep removes them `check` reports
    // them as pending that sweep, not as anomalies: clean as soon as Done.
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

#[test]
fn a_replace_that_cannot_reach_any_datanode_publishes_nothing() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    let hdfs = HdfsCluster::faults();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The default options: requests retried, as a node's store is.
    let store = rt.block_on(Store::open(&RootUri::parse(&hdfs.new_root("no-datanode")).unwrap())).unwrap();
    rt.block_on(store.put("k", b"v1".to_vec())).unwrap();
    // Index 0 three times: the cluster renumbers the ones left.
    for _ in 0..3 {
        hdfs.stop_datanode(0);
    }
    let put = rt.block_on(store.put("k", b"v2".to_vec()));
    let created = rt.block_on(store.create("fresh", b"new".to_vec()));
    hdfs.restart_datanodes();
    assert!(put.is_err(), "a replace without DataNodes succeeded: {put:?}");
    assert!(created.is_err(), "a create without DataNodes succeeded: {created:?}");
    assert_eq!(&rt.block_on(store.read("k")).unwrap().unwrap()[..], b"v1", "the old content is gone");
    assert!(rt.block_on(store.read("fresh")).unwrap().is_none(), "a failed create left a file");
    assert!(rt.block_on(store.list("")).unwrap().iter().all(|e| e.name() == "k"), "something else is listed");
}

#[test]
fn a_failed_complete_is_retried_whole_or_publishes_nothing() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    use store::hdfs::failpoint::fail_next_completes;
    let hdfs = HdfsCluster::faults();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(Store::open(&RootUri::parse(&hdfs.new_root("failed-complete")).unwrap())).unwrap();
    rt.block_on(async {
        store.put("k", b"v1".to_vec()).await.unwrap();
        // One failed complete: the retried close writes it all again.
        fail_next_completes(1);
        store.put("k", b"v2".to_vec()).await.unwrap();
        assert_eq!(&store.read("k").await.unwrap().unwrap()[..], b"v2");
        // Failing past the retries: an error, and the old content stays.
        fail_next_completes(100);
        assert!(store.put("k", b"v3".to_vec()).await.is_err());
        assert!(store.create("once", b"x".to_vec()).await.is_err());
        fail_next_completes(0);
        assert_eq!(&store.read("k").await.unwrap().unwrap()[..], b"v2", "a failed replace changed the file");
        assert!(store.read("once").await.unwrap().is_none());
        // A streamed write (past the writer's 8 MiB buffer): a failed
        // complete publishes nothing, even when the close is retried.
        let big: Vec<u8> = (0..9 << 20).map(|i| (i % 251) as u8).collect();
        store.put("big", big.clone()).await.unwrap();
        fail_next_completes(1);
        let mut w = store.writer("big").await.unwrap();
        w.write(bytes::Bytes::from(vec![7u8; 9 << 20])).await.unwrap();
        assert!(w.close().await.is_err(), "a streamed write whose complete failed was published");
        let now = store.read_range("big", 0, big.len() as u64).await.unwrap().unwrap();
        assert!(now == big, "the streamed replace changed the file");
        let names: Vec<String> = store.list("").await.unwrap().into_iter().map(|e| e.path).collect();
        assert_eq!(names, ["big", "k"], "temp files are listed");
    });
}

#[test]
fn a_listing_that_loses_the_namenode_fails_instead_of_coming_back_short() {
    let _turn = crate::common::turns::HDFS_FAULTS.turn();
    let hdfs = HdfsCluster::faults();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(Store::open(&RootUri::parse(&hdfs.new_root("short-list")).unwrap())).unwrap();
    rt.block_on(async {
        for i in 0..10 {
            store.put(&format!("d/f{i}"), b"x".to_vec()).await.unwrap();
        }
        assert_eq!(store.list("d/").await.unwrap().len(), 10);
    });
    hdfs.stop_namenode();
    let listed = rt.block_on(store.list("d/"));
    let streamed = rt.block_on(async {
        use futures::TryStreamExt;
        store.list_stream("d/", true).try_collect::<Vec<_>>().await
    });
    hdfs.restart_namenode();
    assert!(listed.is_err(), "a listing without a NameNode answered {listed:?}");
    assert!(streamed.is_err(), "a recursive listing without a NameNode answered {streamed:?}");
    assert_eq!(rt.block_on(store.list("d/")).unwrap().len(), 10, "after the restart");
}

/// The faults' cluster is handed only to a test holding the group's turn: a
/// test that forgot it would stop a NameNode under another.
#[test]
#[should_panic(expected = "takes `turns::HDFS_FAULTS.turn()` first")]
fn the_faults_cluster_is_refused_to_a_test_without_its_groups_turn() {
    let _turn = crate::common::turns::waits();
    HdfsCluster::faults();
}
