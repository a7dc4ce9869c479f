//! Backend operations of the scheduler, counted by an OpenDAL layer (not a
//! test: `cargo bench --bench ops`).
//!
//! 1. An idle 3-node cluster with the default timings (heartbeat 10 s,
//!    session 30 s, lease 30 s): operations per node per minute by kind,
//!    heartbeats shown apart.
//! 2. A subtask lifecycle: one task of N shards with a no-op command
//!    executor (`true`) on the same cluster, run to the end: operations per
//!    subtask by kind, with the idle cluster's share over the same ticks
//!    subtracted.
//!
//! Nodes are in-process over one fs root (each with its own counting layer)
//! and an injected clock, so ten simulated minutes take seconds.
// A benchmark measures real time.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use compactd::node::{Node, NodeConfig};
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, TaskSpec};
use layouts::formats::{ExecutorKind, ExecutorSpec};
use layouts::{Name, NodeId, TaskState};
use store::layers::{CountingLayer, OpCounter, OpCounts};
use store::{RootUri, Store};

struct Cluster {
    _dir: tempfile::TempDir,
    sim: sim::Cluster,
    counters: Vec<OpCounter>,
    admin: Store,
}

async fn cluster(n: usize) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let uri = RootUri::parse(&format!("fs://{}", dir.path().join("root").display())).unwrap();
    let data =
        Store::open(&RootUri::parse(&format!("fs://{}", dir.path().join("data").display())).unwrap()).await.unwrap();
    let tick = NodeConfig::new(NodeId::parse("x").unwrap()).tick_interval();
    let mut sim = sim::Cluster::new(tick);
    let mut counters = vec![];
    for i in 1..=n {
        let counter = OpCounter::new();
        let c = counter.clone();
        let store = Store::open_with(&uri, move |op| op.layer(CountingLayer::new(c.clone()))).await.unwrap();
        let cfg = NodeConfig::new(NodeId::parse(&format!("n{i}")).unwrap());
        // The task below carries its template (`true`) inline.
        let work = WorkConfig { max_running: 1000, allow_inline: true, ..WorkConfig::default() };
        sim.push(Node::new(cfg, store, sim.shared_clock()).with_work(work, data.clone()), ());
        counters.push(counter);
    }
    let admin = Store::open(&uri).await.unwrap();
    Cluster { _dir: dir, sim, counters, admin }
}

impl Cluster {
    async fn round(&mut self) {
        self.sim.round().await;
    }

    fn snapshot(&self) -> Vec<OpCounts> {
        self.counters.iter().map(|c| c.snapshot()).collect()
    }

    fn reset(&self) {
        for c in &self.counters {
            c.reset();
        }
    }
}

fn per(c: &OpCounts, d: f64) -> String {
    format!(
        "create {:.2}  put {:.2}  read {:.2}  stat {:.2}  list {:.2} (pages {:.2})  delete {:.2}  other {:.2}  | total {:.2}",
        c.create as f64 / d,
        c.put as f64 / d,
        c.read as f64 / d,
        c.stat as f64 / d,
        c.list as f64 / d,
        c.list_pages_est as f64 / d,
        c.delete as f64 / d,
        c.other as f64 / d,
        c.total() as f64 / d
    )
}

#[tokio::main]
async fn main() {
    let shards: u32 = std::env::var("COMPACTD_BENCH_SHARDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);

    // 1. Idle.
    let mut c = cluster(3).await;
    let warm = c.sim.rounds_for(Duration::from_secs(120));
    for _ in 0..warm {
        c.round().await;
    }
    c.reset();
    let minutes = 10.0;
    let rounds = c.sim.rounds_for(Duration::from_secs(600));
    for _ in 0..rounds {
        c.round().await;
    }
    let idle = c.snapshot();
    println!("== idle cluster: 3 nodes, heartbeat 10s, lease 30s, session 30s; {rounds} polls of {:?} = {minutes} simulated minutes", c.sim.step);
    for (i, node) in c.sim.nodes().enumerate() {
        let role = if node.is_monitor() { "monitor" } else { "member " };
        let hb = rounds as f64 / minutes; // one heartbeat put per poll at these timings
        let mut beyond = idle[i];
        beyond.put -= (hb * minutes) as u64;
        println!("  {} {role} per minute: {}", node.id(), per(&idle[i], minutes));
        println!("  {} {role} beyond its {hb:.0} heartbeat puts/min: {}", node.id(), per(&beyond, minutes));
    }
    let idle_per_round: OpCounts = idle.iter().copied().sum();

    // 2. Subtask lifecycle.
    let mut spec =
        TaskSpec::table(Name::parse("bench").unwrap(), Name::parse("jobs").unwrap(), Name::parse("noop").unwrap());
    spec.shards = Some(shards);
    spec.executor = Some(ExecutorSpec {
        kind: ExecutorKind::Command,
        command: Some("true".into()),
        command_name: None,
        timeout_ms: None,
    });
    c.reset();
    let id = tasks::submit(&c.admin, spec, layouts_wall(&c)).await.unwrap();
    let mut task_rounds = 0;
    let started = std::time::Instant::now();
    loop {
        c.round().await;
        task_rounds += 1;
        // let the `true` processes exit in real time
        tokio::time::sleep(Duration::from_millis(30)).await;
        let dir = tasks::read_dir(&c.admin, &id).await.unwrap();
        if dir.state.is_some_and(|s| s.is_terminal()) {
            assert_eq!(dir.state, Some(TaskState::Done));
            break;
        }
        assert!(task_rounds < 10_000, "task did not finish");
    }
    let total: OpCounts = c.snapshot().into_iter().sum();
    let idle_share = idle_per_round.scaled(task_rounds as f64 / rounds as f64);
    let task_only = total - idle_share;
    println!("== subtask lifecycle: 1 task of {shards} shards, no-op command executor, 3 nodes; {task_rounds} polls ({:.1}s real)", started.elapsed().as_secs_f64());
    println!("  all operations per subtask:            {}", per(&total, shards as f64));
    println!("  minus the idle cluster over {task_rounds} polls: {}", per(&task_only, shards as f64));
}

fn layouts_wall(c: &Cluster) -> u64 {
    use compactd::clock::Clock;
    c.sim.clock.wall_ms()
}
