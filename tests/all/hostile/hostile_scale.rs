//! A hostile user's scale, with real processes at the default timings
//! (heartbeat 10 s, session timeout and lease 30 s), on fs:
//!
//! - A policy of 30,001 patterns over 10,000 tables: the monitor plans
//!   them (its pass starts at the apply) and its lease is renewed and its
//!   heartbeat written at every heartbeat meanwhile, no round further
//!   apart than two heartbeats: the planner runs beside the tick that
//!   renews them, and its patterns are indexed (matched naively they cost
//!   28.8 s of CPU a pass, inside that tick).
//! - A task of 100,000 shards whose command fails, and a 3-file merge task
//!   submitted after it to the same node: the merge task's unit starts,
//!   and the task is done, within one round. The failing task's units sort
//!   first in the node's folder, and 100,000 failing units (each taken
//!   again up to its retries) are 50,000 rounds of a node's 2 slots:
//!   started in name order, the merge task would wait for them all.
// Real processes: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use serde_json::Value;

/// The default `--heartbeat`.
const ROUND: Duration = Duration::from_secs(10);

/// `(epoch, renewal)` of the newest lease, from `compactd nodes`.
fn lease(c: &Cluster) -> Option<(u64, u64)> {
    let out = c.compactd(&["nodes"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("monitor: "))?;
    let (_, rest) = line.split_once("(epoch ")?;
    let (epoch, rest) = rest.split_once(", renewal ")?;
    let (renewal, _) = rest.split_once(')')?;
    Some((epoch.parse().ok()?, renewal.parse().ok()?))
}

#[test]
fn a_monitor_planning_30001_patterns_over_10000_tables_keeps_its_lease_and_heartbeats() {
    let _turn = crate::common::turns::core();
    let mut c = Cluster::fs();
    c.timings = vec![];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("lake");
    // Table `t{i*3}` in schema `s{i % 10}`, one small file each (nothing
    // due: the pass visits and judges them all).
    for i in 0..10_000 {
        let p = data.join(format!("db/s{}/t{:05}/p0", i % 10, i * 3));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("f.txt"), "row\n").unwrap();
    }
    let mut patterns: Vec<String> = (0..30_000).map(|i| format!("db/s{}/t{i:05}", i % 10)).collect();
    patterns.push("db/*/t*".into());
    let policy = dir.path().join("many.toml");
    std::fs::write(
        &policy,
        format!(
            "name = \"many\"\ntables = [{}]\nexecutor = \"merge\"\nmin-small-files = 4\nmin-file-age = \"0s\"\n",
            patterns.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ")
        ),
    )
    .unwrap();
    let flags = ["--data", data.to_str().unwrap()];
    c.start_with("n1", &flags);
    c.wait_nodes(Duration::from_secs(30), "n1 the monitor", |r| monitor_of(r).as_deref() == Some("n1"));
    c.start_with("n2", &flags);
    c.wait_nodes(Duration::from_secs(40), "two nodes", |r| alive(r).len() == 2);
    let (epoch, _) = lease(&c).expect("a lease");

    let out = c.compactd(&["policy", "apply", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Three heartbeats of watching: each renewal's arrival noted.
    let start = Instant::now();
    let mut last = (start, lease(&c).expect("a lease").1);
    let mut widest = Duration::ZERO;
    let mut renewals = 0;
    while start.elapsed() < 3 * ROUND {
        let (e, r) = lease(&c).expect("a lease");
        assert_eq!(e, epoch, "the monitor lost its lease while planning\n{}", c.logs_text());
        if r != last.1 {
            widest = widest.max(last.0.elapsed());
            last = (Instant::now(), r);
            renewals += 1;
        }
        let rows = c.nodes();
        assert_eq!(alive(&rows).len(), 2, "a node lost its session while planning: {rows:#?}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(500));
    }
    widest = widest.max(last.0.elapsed());
    let out = c.compactd(&["tables", "--json"]);
    let planned = serde_json::from_slice::<Vec<Value>>(&out.stdout).map(|t| t.len()).unwrap_or(0);
    eprintln!("{renewals} renewals in {:?}, at most {widest:?} apart; {planned} tables planned", start.elapsed());
    assert!(planned > 0, "the planner visited no table\n{}", c.logs_text());
    assert!(widest <= 2 * ROUND, "the lease went {widest:?} unrenewed\n{}", c.logs_text());
}

#[test]
fn a_task_starts_within_a_round_beside_a_100000_shard_failing_task_on_the_same_node() {
    let _turn = crate::common::turns::core();
    let mut c = Cluster::fs();
    c.timings = vec![];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("lake");
    let part = data.join("db/public/small/p0");
    std::fs::create_dir_all(&part).unwrap();
    for f in 0..3 {
        std::fs::write(part.join(format!("f{f}.txt")), format!("{f}\n")).unwrap();
    }
    c.start_with("n1", &["--data", data.to_str().unwrap(), "--command", "fail=false"]);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"]);
    let submit = |args: &[&str]| c.submit(&[&["--db", "db", "--schema", "public"], args].concat());
    let failing = submit(&["--table", "noise", "--command-name", "fail", "--shards", "100000"]);
    // Its units are in the node's folder, failing.
    c.wait_status(&failing, Duration::from_secs(60), "the failing task's units dispatched", |s| {
        s["state"] == "Running" && s["subtasks"].as_array().is_some_and(|a| a.len() > 100)
    });
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    let merge = submit(&["--table", "small"]);
    let s = c.wait_status(&merge, ROUND, "the merge task done within a round", |s| s["state"] == "Done");
    eprintln!("the 3-file task was done {:?} after its submit, beside 100,000 failing units", start.elapsed());
    let noise = c.status(&failing);
    assert_ne!(noise["state"], "Done", "the failing task ended first: {noise:#}");
    assert_eq!(s["state"], "Done");
}
