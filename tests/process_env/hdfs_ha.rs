//! compactd on an HA name service (`hdfs://minidfs-ns/…`, two NameNodes, the
//! name service resolved from `HADOOP_CONF_DIR` as Hadoop clients do),
//! through NameNode fail-overs: 3 `compactd` processes run a task while the
//! active NameNode changes twice; the task ends Done, no unit runs on two
//! nodes at once, the tree checks clean, and a store keeps reading and
//! writing across the fail-overs.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use common::runs::{assert_no_overlap, read_runs, recording_command};
use serde_json::Value;
use store::{Created, RootUri, Store};

#[test]
fn a_task_runs_through_namenode_failovers_of_a_name_service() {
    let mut process_env = crate::Env::take();
    const SHARDS: u32 = 6;
    let hdfs = HdfsCluster::start_ha();
    let conf = hdfs.conf_dir();
    let env = vec![("HADOOP_CONF_DIR".to_string(), conf.display().to_string())];
    // This process's own store finds the name service the same way.
    process_env.set("HADOOP_CONF_DIR", &conf);
    let root = format!("{}/ha-tree", hdfs.url());
    assert!(root.starts_with("hdfs://minidfs-ns/"), "{root}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(Store::open(&RootUri::parse(&format!("{}/ha-store", hdfs.url())).unwrap())).unwrap();
    assert_eq!(rt.block_on(store.create("before", b"1".to_vec())).unwrap(), Created::Created);

    let mut c = Cluster::on(root, env);
    let records = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_uri = format!("fs://{}", data.path().display());
    for n in ["n1", "n2", "n3"] {
        let cmd = recording_command(records.path(), n, 3);
        c.start_with(n, &["--data", &data_uri, "--executor", "command", "--command", &cmd, "--max-running", "6"]);
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive and a monitor", |r| alive(r).len() == 3 && monitor_of(r).is_some());
    let task = c.submit(&["--shards", &SHARDS.to_string()]);
    let start = Instant::now();
    while read_runs(records.path()).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "no unit started\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    hdfs.failover();
    // The store goes on against the new active NameNode.
    assert_eq!(rt.block_on(store.create("after", b"2".to_vec())).unwrap(), Created::Created);
    assert_eq!(rt.block_on(store.create("before", b"3".to_vec())).unwrap(), Created::Exists);
    std::thread::sleep(Duration::from_secs(2));
    hdfs.failover();
    let start = Instant::now();
    let st = loop {
        let st: Value = serde_json::from_slice(&c.compactd(&["status", &task, "--json"]).stdout).unwrap_or(Value::Null);
        if st["state"] == "Done" {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "not done: {st:#}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(st["result"]["success"], SHARDS as u64, "{st:#}");
    let runs = read_runs(records.path());
    assert_no_overlap(&runs);
    eprintln!("{} runs of {SHARDS} units through 2 fail-overs", runs.values().map(Vec::len).sum::<usize>());
    assert_eq!(&rt.block_on(store.read("before")).unwrap().unwrap()[..], b"1");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}
