//! Membership at 1,000 nodes. In-process nodes on one memory store
//! (whose listings carry versions, as S3's do), each behind its own fault
//! layer (seeded errors) and counting layer, on one manual clock, at the
//! default timings (heartbeat 10 s, session and lease 30 s).
//!
//! Checked: membership converges; never two monitors of one epoch; crashed
//! nodes are declared offline and nodes restarted under the same id rejoin
//! under new incarnations; and the monitor's work per tick stays bounded
//! whatever the cluster size: its requests per tick do not grow with nodes
//! (a beat is read off the heartbeat listing), and priced at 2 ms per
//! request, done one after another, a tick stays far under its budget
//! (a quarter of the session).
//!
//! CI runs the short form (1,000 nodes, about four simulated minutes);
//! `COMPACTD_SIM_LONG=1` runs 30 simulated minutes with a wave of crashes
//! and restarts every two minutes and a monitor crash in every other wave.
//! `COMPACTD_SIM_NODES=N` changes the size.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use compactd::clock::Clock;
use compactd::node::{Node, NodeConfig};
use layouts::{v2, NodeId};
use sim::Cluster;
use store::layers::{CountingLayer, FaultConfig, FaultHandle, FaultLayer, OpCounter};
use store::Store;

/// One round is one poll of every node, as in the daemon (`tick_interval`:
/// 10 s at the default timings).
const STEP: Duration = Duration::from_secs(10);
/// What one backend request is priced at when judging a monitor tick.
const PER_REQUEST: Duration = Duration::from_millis(2);

struct Extra {
    counter: OpCounter,
    _faults: FaultHandle,
}

struct Sim {
    store: Store,
    cluster: Cluster<Extra>,
    /// (epoch → monitor) ever seen: never two per epoch.
    monitors: BTreeMap<u64, NodeId>,
    /// Requests of each monitor tick.
    monitor_ticks: Vec<u64>,
    seed: u64,
}

fn node_id(i: usize) -> NodeId {
    NodeId::parse(&format!("n{i:04}")).unwrap()
}

impl Sim {
    async fn new(n: usize, seed: u64) -> Sim {
        let store = Store::memory().await;
        let mut sim =
            Sim { store, cluster: Cluster::new(STEP), monitors: BTreeMap::new(), monitor_ticks: vec![], seed };
        for i in 0..n {
            let (node, extra) = sim.make(&node_id(i), i as u64);
            sim.cluster.push(node, extra);
        }
        sim
    }

    fn make(&self, id: &NodeId, salt: u64) -> (Node, Extra) {
        let counter = OpCounter::new();
        let faults = FaultLayer::new(FaultConfig {
            seed: self.seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            error_rate: 0.002,
            ..FaultConfig::default()
        });
        let handle = faults.handle();
        let c = counter.clone();
        let store = self.store.layered(move |op| op.layer(faults.clone()).layer(CountingLayer::new(c.clone())));
        let node = Node::new(NodeConfig::new(id.clone()), store, self.cluster.shared_clock());
        (node, Extra { counter, _faults: handle })
    }

    /// One round, measuring the monitor's ticks and checking one monitor
    /// per epoch.
    async fn round(&mut self) {
        for i in 0..self.cluster.slots.len() {
            let before = self.cluster.slots[i].extra.counter.snapshot();
            self.cluster.tick(i).await;
            let slot = &self.cluster.slots[i];
            if let Some(epoch) = slot.node.as_ref().and_then(|n| n.monitor_epoch()) {
                let spent = slot.extra.counter.snapshot() - before;
                self.monitor_ticks.push(spent.total());
                if std::env::var("COMPACTD_SIM_DEBUG").is_ok() {
                    eprintln!("t={:?} monitor tick: {spent}", self.cluster.clock.mono());
                }
                let holder = self.monitors.entry(epoch).or_insert_with(|| slot.id.clone());
                assert_eq!(*holder, slot.id, "two monitors of epoch {epoch}");
            }
        }
        if std::env::var("COMPACTD_SIM_DEBUG").is_ok() {
            let rejoins: u64 = self.cluster.nodes().map(|n| n.stats().rejoins).sum();
            let offline = self.store.list(v2::OFFLINE).await.unwrap().len();
            eprintln!(
                "t={:?} rejoins {rejoins} offline records {offline} view {}",
                self.cluster.clock.mono(),
                self.view().len()
            );
        }
        self.cluster.clock.advance(STEP);
    }

    async fn run(&mut self, d: Duration) {
        for _ in 0..self.cluster.rounds_for(d) {
            self.round().await;
        }
    }

    /// The newest member view, as the current monitor publishes it.
    fn view(&self) -> BTreeMap<NodeId, u64> {
        let m = self.cluster.monitors();
        let Some(m) = m.first() else { return BTreeMap::new() };
        let node = self.cluster.slots.iter().find(|s| &s.id == m).and_then(|s| s.node.as_ref()).unwrap();
        node.view().map(|v| v.members.iter().map(|m| (m.node.clone(), m.incarnation)).collect()).unwrap_or_default()
    }

    fn incarnation(&self, id: &NodeId) -> u64 {
        self.cluster.slots.iter().find(|s| &s.id == id).and_then(|s| s.node.as_ref()).unwrap().stats().incarnation
    }

    /// Runs until the view lists exactly the running nodes under their
    /// current incarnations; returns the simulated time it took.
    async fn converge(&mut self, limit: Duration, what: &str) -> Duration {
        let start = self.cluster.clock.mono();
        loop {
            self.round().await;
            let want: BTreeMap<NodeId, u64> = self
                .cluster
                .slots
                .iter()
                .filter(|s| s.ticking())
                .map(|s| (s.id.clone(), s.node.as_ref().unwrap().stats().incarnation))
                .collect();
            let view = self.view();
            if view == want && self.cluster.monitors().len() == 1 {
                return self.cluster.clock.mono() - start;
            }
            let waited = self.cluster.clock.mono() - start;
            if waited > limit {
                let missing = want.iter().filter(|(n, i)| view.get(*n) != Some(*i)).count();
                let extra = view.iter().filter(|(n, i)| want.get(*n) != Some(*i)).count();
                panic!(
                    "{what}: no convergence after {waited:?}: {missing} running nodes not (yet) members, {extra} \
                     members not running; monitors {:?}",
                    self.cluster.monitors()
                );
            }
        }
    }

    /// Crashes `crash` nodes (not the monitor unless `monitor_too`) and
    /// restarts `restart` of them at once under the same ids.
    async fn wave(&mut self, crash: &[NodeId], restart: &[NodeId]) {
        for id in crash {
            self.cluster.crash(id.as_str());
        }
        self.cluster.clock.advance(Duration::from_millis(1));
        for (k, id) in restart.iter().enumerate() {
            let (node, extra) = self.make(id, 1_000_000 + k as u64 + self.cluster.clock.mono().as_millis() as u64);
            let slot = self.cluster.slot(id.as_str());
            slot.node = Some(node);
            slot.extra = extra;
        }
    }

    async fn offline_of(&self, id: &NodeId) -> Vec<u64> {
        let mut out = vec![];
        for e in self.store.list(v2::OFFLINE).await.unwrap() {
            if let Some((n, inc)) = v2::parse_offline_marker(e.name()) {
                if &n == id {
                    out.push(inc);
                }
            }
        }
        out
    }
}

fn env_u64(name: &str) -> Option<u64> {
    store::testing::env_u64(name)
}

#[test]
fn a_thousand_nodes_converge_with_one_monitor_per_epoch_and_a_bounded_monitor_tick() {
    // One thread on a manual clock: it keeps one core busy for minutes and
    // does not mind being slowed.
    let _turn = crate::common::turns::core();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(a_thousand_nodes());
}

async fn a_thousand_nodes() {
    let n = env_u64("COMPACTD_SIM_NODES").unwrap_or(1000) as usize;
    let long = env_u64("COMPACTD_SIM_LONG").unwrap_or(0) > 0;
    let seed = env_u64("COMPACTD_SIM_SEED").unwrap_or(20261124);
    eprintln!("sim_scale: {n} nodes, seed {seed} (COMPACTD_SIM_SEED), long={long}");
    // Wall time of the simulation itself, for the log line only.
    #[allow(clippy::disallowed_methods)]
    let wall = std::time::Instant::now();
    let mut sim = Sim::new(n, seed).await;
    let budget = NodeConfig::new(node_id(0)).session_timeout / 4;

    let took = sim.converge(Duration::from_secs(120), "start").await;
    eprintln!("all {n} nodes members after {took:?} simulated");

    // Steady state: what a monitor tick costs when nothing changes, once
    // every node (the monitor's node too) has read the thousand join events.
    sim.run(Duration::from_secs(60)).await;
    sim.monitor_ticks.clear();
    sim.run(Duration::from_secs(60)).await;
    let steady = sim.monitor_ticks.clone();
    let max = *steady.iter().max().unwrap();
    let mean = steady.iter().sum::<u64>() as f64 / steady.len() as f64;
    eprintln!("steady monitor ticks: {} ticks, max {max} requests, mean {mean:.2}", steady.len());
    println!(
        "RESULT {}",
        serde_json::json!({
            "part": "scan_sim", "nodes": n, "monitor_ticks": steady.len(), "max_requests_per_tick": max,
            "mean_requests_per_tick": mean, "converged_s": took.as_secs_f64(),
        })
    );
    assert!(max <= 16, "a steady monitor tick made {max} requests with {n} nodes: it must not grow with nodes");
    assert!(PER_REQUEST * max as u32 <= budget / 10, "{max} requests at {PER_REQUEST:?} each vs budget {budget:?}");

    let waves = if long { 15 } else { 1 };
    for w in 0..waves {
        let monitor = sim.cluster.monitors()[0].clone();
        // Ten nodes crash; five of them are restarted under the same ids
        // right away (new incarnations), five stay down. In every other wave
        // of the long form the monitor is among the crashed.
        let mut crash: Vec<NodeId> =
            (0..10).map(|k| node_id((w * 37 + k * 97 + 1) % n)).filter(|id| id != &monitor).collect();
        crash.dedup();
        if long && w % 2 == 1 {
            crash[0] = monitor.clone();
        }
        let restart: Vec<NodeId> = crash.iter().step_by(2).cloned().collect();
        let old: BTreeMap<NodeId, u64> = crash.iter().map(|id| (id.clone(), sim.incarnation(id))).collect();
        sim.monitor_ticks.clear();
        sim.wave(&crash, &restart).await;
        let took = sim.converge(Duration::from_secs(120), &format!("wave {w}")).await;
        let max = *sim.monitor_ticks.iter().max().unwrap_or(&0);
        eprintln!(
            "wave {w}: {} crashed, {} restarted; converged after {took:?} simulated; busiest monitor tick {max} \
             requests ({:?} at {PER_REQUEST:?} each)",
            crash.len(),
            restart.len(),
            PER_REQUEST * max as u32
        );
        assert!(PER_REQUEST * max as u32 <= budget, "monitor tick of {max} requests over the budget {budget:?}");
        let view = sim.view();
        for id in &crash {
            let declared = sim.offline_of(id).await;
            assert!(declared.contains(&old[id]), "{id}'s old incarnation {} was not declared offline", old[id]);
            if restart.contains(id) {
                assert_ne!(view.get(id), Some(&old[id]), "{id} rejoined under its old incarnation");
                assert!(view.contains_key(id), "{id} restarted but is no member");
            } else {
                assert!(!view.contains_key(id), "{id} is down but a member");
            }
        }
        if long {
            sim.run(Duration::from_secs(120)).await;
        }
    }
    let epochs: BTreeSet<u64> = sim.monitors.keys().copied().collect();
    eprintln!(
        "sim_scale done: {n} nodes, {} simulated, {} epochs, {:.1} s wall",
        humantime(sim.cluster.clock.mono()),
        epochs.len(),
        wall.elapsed().as_secs_f64()
    );
}

fn humantime(d: Duration) -> String {
    format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
}
