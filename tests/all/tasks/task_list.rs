//! `compactd list` on a large `Scheduler/`: the rows it reads are bounded by
//! `--limit`, a state filter costs one recursive listing (not a request per
//! task), rows come newest first, and an unreadable task is reported and
//! skipped. Memory store behind the counting layer, so requests are counted
//! exactly; `COMPACTD_LIST_TASKS=100000` runs the full size (CI runs
//! 10,000).
// Real time only to print how long a page took.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use compactd::tasks::{self, TaskQuery, TaskSpec};
use layouts::formats::{self, Lease, Member};
use layouts::{v2, Name, NodeId, TaskId, TaskState};
use store::layers::{CountingLayer, OpCounter};
use store::{RootUri, Store};

const RUNNING: usize = 100;

/// Every 10th task of the newest 1,000 is still running, the rest ended.
fn is_running(i: usize, n: usize) -> bool {
    i + 1000 >= n && i.is_multiple_of(10)
}

async fn tree(uri: &RootUri, n: usize) -> (Store, OpCounter, Vec<TaskId>) {
    let counter = OpCounter::new();
    let c = counter.clone();
    let store = Store::open_with(uri, move |op| op.layer(CountingLayer::new(c.clone()))).await.unwrap();
    let node = NodeId::parse("n1").unwrap();
    let lease = Lease {
        epoch: 1,
        holder: node.clone(),
        holder_incarnation: 1,
        renewal: 0,
        lease_ms: 30_000,
        wall_ms: 0,
        members: vec![Member {
            node,
            incarnation: 1,
            session_timeout_ms: 30_000,
            commands: vec![],
            addr: None,
            executor: None,
            executors: None,
            slots: None,
            layouts: None,
            draining: false,
        }],
        offline: vec![],
        last_event: 0,
        released: false,
        layout: None,
    };
    store.create(&v2::lease(1), formats::encode(&lease)).await.unwrap();
    let mut ids = vec![];
    for i in 0..n {
        let spec = TaskSpec::table(
            Name::parse("db").unwrap(),
            Name::parse("s").unwrap(),
            Name::parse(&format!("t{i}")).unwrap(),
        );
        // One millisecond apart: creation order is id order.
        let id = tasks::submit(&store, spec, 1_800_000_000_000 + i as u64).await.unwrap();
        let state = if is_running(i, n) { TaskState::Running } else { TaskState::Done };
        store.create(&v2::task_status(&id, state), Vec::new()).await.unwrap();
        ids.push(id);
    }
    (store, counter, ids)
}

#[tokio::test]
async fn list_pages_are_bounded_by_the_limit_and_a_state_filter_is_one_listing() {
    let _turn = crate::common::turns::waits();
    let n: usize = std::env::var("COMPACTD_LIST_TASKS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    assert!(n >= 1000, "COMPACTD_LIST_TASKS must be at least 1000");
    let (store, counter, ids) = tree(&RootUri::Memory, n).await;
    let newest: Vec<TaskId> = ids.iter().rev().copied().collect();
    let running: Vec<TaskId> =
        newest.iter().enumerate().filter(|(k, _)| is_running(n - 1 - k, n)).map(|(_, id)| *id).collect();
    assert_eq!(running.len(), RUNNING);

    // The default page: the newest 100, one listing of `Scheduler/` and
    // at most a LIST and two GETs per row.
    counter.reset();
    let t = Instant::now();
    let page = tasks::list_page(&store, &TaskQuery { limit: Some(100), states: vec![] }).await.unwrap();
    let ops = counter.snapshot();
    eprintln!("{n} tasks, --limit 100: {:?} {ops}", t.elapsed());
    assert_eq!((page.total, page.matched, page.problems.len()), (n, n, 0));
    assert_eq!(page.rows.iter().map(|r| r.id).collect::<Vec<_>>(), newest[..100]);
    assert!(ops.list <= 1 + 100, "{ops}");
    assert!(ops.read <= 2 * 100, "{ops}");
    assert_eq!(ops.create + ops.put + ops.delete, 0, "list writes nothing: {ops}");
    assert_eq!(page.rows[0].table, format!("db.s.t{}", n - 1));

    // A state filter: one recursive listing, then two GETs per shown row,
    // whatever the number of ended tasks.
    counter.reset();
    let t = Instant::now();
    let q = TaskQuery { limit: Some(50), states: vec![TaskState::Running] };
    let page = tasks::list_page(&store, &q).await.unwrap();
    let ops = counter.snapshot();
    eprintln!("{n} tasks, --state Running --limit 50: {:?} {ops}", t.elapsed());
    assert_eq!((page.total, page.matched), (n, RUNNING));
    assert_eq!(page.rows.iter().map(|r| r.id).collect::<Vec<_>>(), running[..50]);
    assert!(page.rows.iter().all(|r| r.state == Some(TaskState::Running)));
    assert_eq!(ops.list, 1, "{ops}");
    assert!(ops.read <= 2 * 50, "{ops}");

    // All running ones; two states at once.
    let q = TaskQuery { limit: None, states: vec![TaskState::Running, TaskState::Failed] };
    let page = tasks::list_page(&store, &q).await.unwrap();
    assert_eq!(page.rows.iter().map(|r| r.id).collect::<Vec<_>>(), running);

    // An unreadable task in the page is named and skipped, not fatal.
    let bad = newest[3];
    store.put(&v2::task_info(&bad), b"{ not json".to_vec()).await.unwrap();
    let page = tasks::list_page(&store, &TaskQuery { limit: Some(10), states: vec![] }).await.unwrap();
    assert_eq!(page.rows.len(), 9);
    assert!(!page.rows.iter().any(|r| r.id == bad));
    assert_eq!(page.problems.len(), 1, "{:?}", page.problems);
    assert!(page.problems[0].contains(&bad.to_string()), "{:?}", page.problems);
}

/// The CLI: the footnote on stderr when rows are left out, `--state` lists,
/// and a state name that does not exist is refused (exit 2) naming it.
#[tokio::test]
async fn the_cli_pages_filters_and_refuses_unknown_states() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let (_store, _, ids) = tree(&RootUri::parse(root.to_str().unwrap()).unwrap(), 1000).await;
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_compactd"))
            .args(["--root", root.to_str().unwrap(), "list"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--limit", "3"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 4, "header and 3 rows:\n{text}");
    assert!(text.lines().nth(1).unwrap().starts_with(&ids[999].to_string()), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("showing the newest 3 of 1000 tasks"), "{err}");

    let out = run(&["--state", "Running,Failed", "--limit", "0", "--json"]);
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), RUNNING);
    assert!(rows.iter().all(|r| r["state"] == "Running"));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = run(&["--state", "Sleeping"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Sleeping"), "{err}");
}
