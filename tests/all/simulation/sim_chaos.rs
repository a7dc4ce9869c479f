//! Seeded chaos simulation of membership, election and fencing.
//!
//! In-process [`Node`]s share one memory store behind a seeded
//! [`FaultLayer`] and one [`ManualClock`]. A seeded schedule generator
//! drives them round by round: it ticks a random subset of the nodes in a
//! random order, crashes nodes (drops them, and later restarts them as a new
//! `Node` under the same id: a new incarnation), makes nodes leave cleanly
//! (SIGTERM) and come back, pauses nodes (skips their ticks, often past
//! their lease and session), toggles the fault rates (errors, and lost
//! replies: the operation happened but the caller got an error), and
//! advances the clock by 50–300 ms. Everything is deterministic for a seed.
//!
//! Invariants, checked from the tree (through the same store with faults
//! paused) and from the nodes:
//! - (a) every event's `by`, and every offline record's `declared_by`, is
//!   the holder of the lease of its epoch (lease holders are recorded as they
//!   are observed, since old leases are deleted); an epoch never changes
//!   holder;
//! - (a') *sim-strict*: nothing is written for an epoch older than one that
//!   already existed at the end of the previous round, and event epochs never
//!   decrease along the sequence numbers. In this simulation a tick is atomic
//!   (no other node runs and the clock does not move between a fence check
//!   and the write it guards), so any such write is a fence that let a stale
//!   monitor through;
//! - (b) no two running nodes are monitor of the same epoch, and a node that
//!   believes it is monitor of epoch E is the holder recorded for E;
//! - (c) after the chaos (faults off, every node restarted and resumed, the
//!   clock running on with ticks): exactly one monitor, every follower sees
//!   its epoch, its member view is exactly the live nodes with their current
//!   incarnations, every heartbeat file holds its node's current incarnation,
//!   and no live incarnation has an offline record;
//! - (d) every offline record is eventually `cleaned`, and a `cleaned` record
//!   never goes back;
//! - (e) events are well-formed (they decode, their `seq` is their file
//!   name, `MonitorElected` names its writer, an offline record's
//!   `event_seq` is a `NodeOffline` of that incarnation) and no sequence
//!   number is ever used twice (a number that disappeared, by purge, never
//!   comes back).
//!
//! - (f) tasks (in `chaos_schedules` and `replay`; the regression tests
//!   replay their original membership-only schedules): three tasks of three
//!   shards with the in-process `noop` executor are submitted during the
//!   chaos (through the faulty store, retried); after it every one is
//!   `Done` with exactly one success per shard (`done_units` holds each unit
//!   once, `successCount` equals the shards, nothing failed): a stale
//!   attempt's result accepted, or a unit counted twice, breaks it.
//!
//! Running it:
//! - `cargo test --all-features --test all sim_chaos::` runs `COMPACTD_SIM_SCHEDULES` schedules
//!   (default 1000) with seeds `COMPACTD_SIM_SEED_BASE..` (default 0), on
//!   two threads;
//! - a failure prints the seed, the violated invariant, the tail of the
//!   schedule and a one-line replay command:
//!   `COMPACTD_SIM_SEED=<seed> cargo test --all-features --test all sim_chaos::replay -- --nocapture`
//!   (the replay prints the whole schedule; add `COMPACTD_SIM_LOG=debug`
//!   for the nodes' own logs, each line tagged with the node and the time).
//!
//! The schedule generator is here, the invariants read from the tree after
//! every round in `sim_chaos/observe.rs`, the replays of the seeds it found
//! in `sim_chaos/regressions.rs`; the harness itself is `compactd-sim`.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use compactd::clock::{Clock, SharedClock};
use compactd::node::{Node, NodeConfig};
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, TaskSpec};
use layouts::formats::{self, Event, EventKind, Lease, OfflineRecord};
use layouts::formats::{ExecutorKind, ExecutorSpec};
use layouts::{v2, NodeId};
use layouts::{Name, TaskId, TaskState};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use store::layers::{FaultConfig, FaultHandle, FaultLayer};
use store::{RootUri, Store};

const HEARTBEAT: Duration = Duration::from_millis(200);
const SESSION: Duration = Duration::from_millis(1500);
const LEASE: Duration = Duration::from_millis(1500);
/// Chaos rounds per schedule.
const ROUNDS: usize = 60;
/// Clock step of the settle phase.
const SETTLE_STEP: Duration = Duration::from_millis(100);
/// Longest the cluster may take to converge once the chaos is over.
const SETTLE_MAX: Duration = Duration::from_secs(15);
/// Actions kept in a failure message (the replay prints them all).
const TRACE_TAIL: usize = 40;

fn cfg(id: &NodeId, retention: Duration) -> NodeConfig {
    let mut c = NodeConfig::new(id.clone());
    c.heartbeat = HEARTBEAT;
    c.session_timeout = SESSION;
    c.lease = LEASE;
    c.event_retention = retention;
    c
}

/// A slot's schedule beside its node (the harness's `Slot::extra`): a
/// crashed/left node waiting to restart, or a paused one.
#[derive(Default)]
struct Schedule {
    /// Round at which a down node restarts.
    restart_at: usize,
    /// The node does not tick before this round (a pause: SIGSTOP).
    paused_until: usize,
}

/// What the observer has seen of the tree so far.
#[derive(Default)]
struct Observed {
    /// epoch -> holder, as first read (leases are deleted later).
    holders: BTreeMap<u64, NodeId>,
    /// Newest epoch seen at the end of the previous round.
    newest_before: u64,
    /// Every event ever seen, by seq.
    events: BTreeMap<u64, Event>,
    /// Seqs seen once and gone since (purged).
    gone_events: BTreeSet<u64>,
    /// Present at the last observation.
    present_events: BTreeSet<u64>,
    offline: BTreeMap<(NodeId, u64), OfflineRecord>,
    /// Records seen once and gone since (purged after the retention).
    purged_offline: BTreeSet<(NodeId, u64)>,
}

#[derive(Debug)]
struct Failure {
    seed: u64,
    what: String,
    trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "sim_chaos: seed {} violated an invariant: {}", self.seed, self.what)?;
        let skip = self.trace.len().saturating_sub(TRACE_TAIL);
        writeln!(f, "last {} of {} schedule steps:", self.trace.len() - skip, self.trace.len())?;
        for line in &self.trace[skip..] {
            writeln!(f, "  {line}")?;
        }
        write!(
            f,
            "replay: COMPACTD_SIM_SEED={} cargo test --all-features --test all sim_chaos::replay -- --nocapture",
            self.seed
        )
    }
}

type Check = Result<(), String>;

struct Sim {
    seed: u64,
    rng: StdRng,
    store: Store,
    faults: FaultHandle,
    cluster: sim::Cluster<Schedule>,
    round: usize,
    retention: Duration,
    seen: Observed,
    trace: Vec<String>,
    /// The task layer, when this schedule runs tasks.
    work: Option<(WorkConfig, Store)>,
    /// Submitted tasks and their shard counts.
    tasks: Vec<(TaskId, u32)>,
    /// Rounds at which a task is (still) to be submitted.
    submits: Vec<usize>,
    /// When the settle phase began (faults off).
    settle_start: Duration,
}

/// Statistics of one schedule, to show that the chaos does something.
#[derive(Debug, Default, Clone, Copy)]
struct Summary {
    epochs: u64,
    events: usize,
    offline: usize,
    crashes: usize,
    pauses: usize,
    leaves: usize,
    injected: u64,
    settle_ms: u128,
}

impl std::ops::AddAssign for Summary {
    fn add_assign(&mut self, o: Summary) {
        self.epochs += o.epochs;
        self.events += o.events;
        self.offline += o.offline;
        self.crashes += o.crashes;
        self.pauses += o.pauses;
        self.leaves += o.leaves;
        self.injected += o.injected;
        self.settle_ms = self.settle_ms.max(o.settle_ms);
    }
}

impl Sim {
    async fn new(seed: u64) -> Sim {
        Self::with(seed, None, None).await
    }

    /// A sim with a fixed node count and/or event retention (directed
    /// scenarios); the rest from the seed.
    async fn with(seed: u64, nodes: Option<usize>, fixed_retention: Option<Duration>) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.random_range(3..=5);
        let n = nodes.unwrap_or(n);
        let fault = FaultLayer::new(FaultConfig {
            seed: seed ^ 0x5eed_fa17,
            error_rate: 0.0,
            lost_reply: 0.0,
            ..FaultConfig::default()
        });
        let faults = fault.handle();
        // One memory backend for all nodes: every clone of the store shares
        // the operator, and so the fault layer's RNG and settings.
        let store = Store::open_with(&RootUri::Memory, move |op| op.layer(fault.clone())).await.expect("memory store");
        // Sometimes a short retention, so that purges (and gaps) happen.
        let retention = if rng.random_bool(0.3) {
            Duration::from_millis(rng.random_range(1000..4000))
        } else {
            Duration::from_secs(2 * 3600)
        };
        let retention = fixed_retention.unwrap_or(retention);
        let mut sim = Sim {
            seed,
            rng,
            store,
            faults,
            // The schedule moves the clock itself (per round and settle step).
            cluster: sim::Cluster::new(SETTLE_STEP),
            round: 0,
            retention,
            seen: Observed::default(),
            trace: Vec::new(),
            work: None,
            tasks: Vec::new(),
            submits: Vec::new(),
            settle_start: Duration::ZERO,
        };
        sim.log(format!("{n} nodes, event retention {retention:?}"));
        for i in 1..=n {
            let id = NodeId::parse(&format!("n{i}")).unwrap();
            let node = sim.new_node(&id);
            sim.cluster.push(node, Schedule::default());
        }
        sim
    }

    fn new_node(&self, id: &NodeId) -> Node {
        let clock: SharedClock = self.cluster.shared_clock();
        let node = Node::new(cfg(id, self.retention), self.store.clone(), clock);
        match &self.work {
            Some((cfg, data)) => node.with_work(cfg.clone(), data.clone()),
            None => node,
        }
    }

    /// Turns the task layer on (before the nodes start): every node runs
    /// subtasks with the in-process `noop` executor, and tasks are submitted
    /// during the chaos. Draws nothing from the schedule's RNG.
    async fn with_tasks(mut self) -> Sim {
        let work = WorkConfig {
            executor: ExecutorKind::Noop,
            retries: 1000,
            max_running: 8,
            sweep: Duration::from_secs(1),
            history_retention: Duration::from_secs(3600),
            ..WorkConfig::default()
        };
        self.work = Some((work, Store::memory().await));
        for slot in self.cluster.slots.iter_mut() {
            let id = slot.id.clone();
            slot.node = None;
            slot.extra.restart_at = 0;
            let _ = id;
        }
        for i in 0..self.cluster.slots.len() {
            let id = self.cluster.slots[i].id.clone();
            self.cluster.slots[i].node = Some(self.new_node(&id));
        }
        self.submits = vec![4, 12, 25];
        self.log("tasks: 3 tasks of 3 noop shards, submitted at r4, r12, r25".into());
        self
    }

    /// Submits the tasks due this round; a submit that fails (faults) is
    /// retried next round.
    async fn submit_due(&mut self) {
        if self.work.is_none() {
            return;
        }
        let due: Vec<usize> = self.submits.iter().copied().filter(|r| *r <= self.round).collect();
        for r in due {
            let mut spec =
                TaskSpec::table(Name::parse("sim").unwrap(), Name::parse("s").unwrap(), Name::parse("t").unwrap());
            spec.shards = Some(3);
            spec.executor =
                Some(ExecutorSpec { kind: ExecutorKind::Noop, command: None, command_name: None, timeout_ms: None });
            match tasks::submit(&self.store, spec, self.cluster.clock.wall_ms()).await {
                Ok(id) => {
                    self.log(format!("submitted task {id}"));
                    self.tasks.push((id, 3));
                    self.submits.retain(|x| *x != r);
                }
                Err(e) => self.log(format!("submit failed (retried next round): {e}")),
            }
        }
    }

    /// (f): every submitted task is Done with exactly one success per shard.
    async fn tasks_done(&self) -> Check {
        if !self.submits.is_empty() {
            return Err(format!("(f) {} tasks not submitted yet", self.submits.len()));
        }
        self.faults.pause();
        let mut r = Ok(());
        for (id, shards) in &self.tasks {
            let dir = tasks::read_dir(&self.store, id).await.expect("observer list (faults paused)");
            if dir.state != Some(TaskState::Done) {
                r = Err(format!("(f) task {id} is {:?}, not Done", dir.state));
                break;
            }
            let info = tasks::read_info(&self.store, id).await.expect("task info");
            let mut units = info.run.done_units.clone();
            units.sort_unstable();
            let want: Vec<u32> = (0..*shards).collect();
            if info.result.success_count != u64::from(*shards) || info.result.failed_count != 0 || units != want {
                r = Err(format!(
                    "(f) task {id}: success {} failed {} done units {:?}, want {shards} successes once each",
                    info.result.success_count, info.result.failed_count, info.run.done_units
                ));
                break;
            }
        }
        self.faults.resume();
        r
    }

    fn log(&mut self, what: String) {
        let t = self.cluster.clock.mono().as_millis();
        self.trace.push(format!("r{:03} t={t}ms {what}", self.round));
    }

    fn fail(&self, what: String) -> Failure {
        let mut what = format!("{what} (round {}, t={}ms)\nnodes:", self.round, self.cluster.clock.mono().as_millis());
        for (i, s) in self.cluster.slots.iter().enumerate() {
            match &s.node {
                None => what += &format!("\n  {}: down until r{}", s.id, s.extra.restart_at),
                Some(n) => {
                    what += &format!(
                        "\n  {}: {}monitor {:?}, view epoch {:?} held by {:?}, {:?}",
                        s.id,
                        if self.running(i) { "" } else { "(paused) " },
                        n.monitor_epoch(),
                        n.view().map(|v| v.epoch),
                        n.view().map(|v| v.holder.to_string()),
                        n.stats()
                    )
                }
            }
        }
        what += &format!("\nlease holders seen: {:?}", self.seen.holders);
        Failure { seed: self.seed, what, trace: self.trace.clone() }
    }

    /// Ticks node `i`, inside a span naming it (for `COMPACTD_SIM_LOG`).
    async fn tick(&mut self, i: usize) {
        self.cluster.tick(i).await;
    }

    fn running(&self, i: usize) -> bool {
        self.cluster.slots[i].node.is_some() && self.cluster.slots[i].extra.paused_until <= self.round
    }

    /// (b): no two running nodes are monitor of one epoch; a monitor of E
    /// is the recorded holder of E.
    fn check_monitors(&self) -> Check {
        let mut by_epoch: BTreeMap<u64, &NodeId> = BTreeMap::new();
        for (i, s) in self.cluster.slots.iter().enumerate() {
            let Some(node) = s.node.as_ref().filter(|_| self.running(i)) else {
                continue;
            };
            if !node.is_monitor() {
                continue;
            }
            let Some(epoch) = node.monitor_epoch() else {
                return Err(format!("{} is monitor without an epoch", s.id));
            };
            if let Some(other) = by_epoch.insert(epoch, &s.id) {
                return Err(format!("(b) two running monitors of epoch {epoch}: {other} and {}", s.id));
            }
            if let Some(h) = self.seen.holders.get(&epoch) {
                if *h != s.id {
                    return Err(format!(
                        "(b) {} believes it is monitor of epoch {epoch}, whose lease holder is {h}",
                        s.id
                    ));
                }
            }
        }
        Ok(())
    }

    async fn list_names(&self, dir: &str) -> Vec<String> {
        self.store
            .list(dir)
            .await
            .expect("observer list (faults paused)")
            .iter()
            .map(|e| e.name().to_string())
            .collect()
    }

    async fn read(&self, path: &str) -> Option<bytes::Bytes> {
        self.store.read(path).await.expect("observer read (faults paused)")
    }

    /// One chaos round: maybe crash/leave/pause/restart/toggle faults, tick
    /// a random subset in a random order, advance the clock.
    async fn chaos_round(&mut self, summary: &mut Summary) -> Result<(), Failure> {
        let n = self.cluster.slots.len();
        // Restarts of crashed or departed nodes: a new incarnation.
        for i in 0..n {
            if self.cluster.slots[i].node.is_none() && self.cluster.slots[i].extra.restart_at <= self.round {
                let id = self.cluster.slots[i].id.clone();
                let node = self.new_node(&id);
                self.log(format!("restart {id} (incarnation {})", node.stats().incarnation));
                self.cluster.slots[i].node = Some(node);
            }
        }
        let i = self.rng.random_range(0..n);
        let roll: f64 = self.rng.random();
        if roll < 0.03 && self.cluster.slots[i].node.is_some() {
            // SIGKILL: gone without a word.
            let node = self.cluster.slots[i].node.take().unwrap();
            let back = self.round + self.rng.random_range(2..25);
            self.cluster.slots[i].extra.restart_at = back;
            self.cluster.slots[i].extra.paused_until = 0;
            self.log(format!(
                "crash {} (monitor {:?}, incarnation {}), back at r{back}",
                node.id(),
                node.monitor_epoch(),
                node.stats().incarnation
            ));
            summary.crashes += 1;
        } else if roll < 0.04 && self.running(i) {
            // SIGTERM: a clean leave.
            let mut node = self.cluster.slots[i].node.take().unwrap();
            node.leave().await;
            let back = self.round + self.rng.random_range(2..25);
            self.cluster.slots[i].extra.restart_at = back;
            self.log(format!("leave {} (monitor {:?}), back at r{back}", node.id(), node.monitor_epoch()));
            summary.leaves += 1;
        } else if roll < 0.09 && self.running(i) {
            // SIGSTOP: often past the lease and the session.
            let rounds = self.rng.random_range(1..30);
            self.cluster.slots[i].extra.paused_until = self.round + rounds;
            let node = self.cluster.slots[i].node.as_ref().unwrap();
            self.log(format!("pause {} (monitor {:?}) for {rounds} rounds", node.id(), node.monitor_epoch()));
            summary.pauses += 1;
        }
        if self.rng.random_bool(0.08) {
            let rate = [0.0, 0.0, 0.05, 0.2, 0.5][self.rng.random_range(0..5)];
            let lost = [0.0, 0.3, 0.7][self.rng.random_range(0..3)];
            self.faults.set_error_rate(rate);
            self.faults.set_lost_reply(lost);
            self.log(format!("faults: error rate {rate}, lost replies {lost}"));
        }

        let mut order: Vec<usize> = (0..n).filter(|i| self.running(*i)).collect();
        order.shuffle(&mut self.rng);
        let p_tick = self.rng.random_range(0.6..1.0);
        for i in order {
            if !self.rng.random_bool(p_tick) {
                continue;
            }
            self.tick(i).await;
            self.check_monitors().map_err(|e| self.fail(e))?;
        }
        self.submit_due().await;
        self.observe().await.map_err(|e| self.fail(e))?;
        self.check_monitors().map_err(|e| self.fail(e))?;
        let step = Duration::from_millis(self.rng.random_range(50..=300));
        self.cluster.clock.advance(step);
        self.round += 1;
        Ok(())
    }

    /// (c) and (d): the state the cluster must converge to.
    fn converged(&self) -> Check {
        let monitors: Vec<&Node> =
            self.cluster.slots.iter().filter_map(|s| s.node.as_ref()).filter(|n| n.is_monitor()).collect();
        if monitors.len() != 1 {
            return Err(format!(
                "(c) {} monitors: {:?}",
                monitors.len(),
                monitors.iter().map(|n| n.id()).collect::<Vec<_>>()
            ));
        }
        let mon = monitors[0];
        let view = mon.view().ok_or("(c) the monitor has no view")?;
        let want: BTreeSet<(NodeId, u64)> =
            self.cluster.nodes().map(|n| (n.id().clone(), n.stats().incarnation)).collect();
        let have: BTreeSet<(NodeId, u64)> = view.members.iter().map(|m| (m.node.clone(), m.incarnation)).collect();
        if want != have {
            return Err(format!(
                "(c) the monitor {} (epoch {}) has members {have:?}, the live incarnations are {want:?}",
                mon.id(),
                view.epoch
            ));
        }
        for s in &self.cluster.slots {
            let n = s.node.as_ref().unwrap();
            // A node whose beats failed in the chaos ends that incarnation at
            // its session guard's deadline, even when the faults stopped
            // just before: settled means a beat counted since.
            if n.last_beat_ok().is_none_or(|b| b < self.settle_start) {
                return Err(format!("(c) {} has counted no heartbeat since the chaos ended", n.id()));
            }
            let v = n.view().ok_or_else(|| format!("(c) {} has no view", n.id()))?;
            if v.epoch != view.epoch {
                return Err(format!(
                    "(c) {} sees epoch {} held by {}, the monitor is {} of epoch {}",
                    n.id(),
                    v.epoch,
                    v.holder,
                    mon.id(),
                    view.epoch
                ));
            }
        }
        for (key, rec) in &self.seen.offline {
            if self.seen.purged_offline.contains(key) {
                continue;
            }
            if want.contains(key) {
                return Err(format!("(c) live incarnation {}.{} has an offline record: {rec:?}", key.0, key.1));
            }
            if !rec.cleaned {
                return Err(format!("(d) offline record not cleaned: {rec:?}"));
            }
        }
        Ok(())
    }

    async fn heartbeats_current(&mut self) -> Check {
        self.faults.pause();
        let mut r = Ok(());
        for s in &self.cluster.slots {
            let n = s.node.as_ref().unwrap();
            let hb = self.read(&v2::heartbeat(n.id())).await;
            let hb = hb.and_then(|b| formats::decode::<layouts::formats::Heartbeat>(&b).ok());
            if hb.as_ref().map(|h| h.incarnation) != Some(n.stats().incarnation) {
                r = Err(format!("(c) heartbeat of {} is {hb:?}, its incarnation is {}", n.id(), n.stats().incarnation));
                break;
            }
        }
        self.faults.resume();
        r
    }

    async fn run(mut self) -> Result<Summary, Failure> {
        let mut summary = Summary::default();
        for _ in 0..ROUNDS {
            self.chaos_round(&mut summary).await?;
        }
        // The chaos is over: faults off, everyone back, time runs on.
        self.faults.set_error_rate(0.0);
        self.faults.set_lost_reply(0.0);
        for i in 0..self.cluster.slots.len() {
            self.cluster.slots[i].extra.paused_until = 0;
            if self.cluster.slots[i].node.is_none() {
                let id = self.cluster.slots[i].id.clone();
                let node = self.new_node(&id);
                self.cluster.slots[i].node = Some(node);
            }
        }
        self.log("settle: faults off, all nodes running".into());
        let start = self.cluster.clock.mono();
        self.settle_start = start;
        let mut stable = 0;
        let mut last_err = String::new();
        while self.cluster.clock.mono() - start < SETTLE_MAX {
            for i in 0..self.cluster.slots.len() {
                self.tick(i).await;
                self.check_monitors().map_err(|e| self.fail(e))?;
            }
            self.observe().await.map_err(|e| self.fail(e))?;
            self.cluster.clock.advance(SETTLE_STEP);
            self.round += 1;
            self.submit_due().await;
            let r = match self.converged() {
                Ok(()) => match self.heartbeats_current().await {
                    Ok(()) => self.tasks_done().await,
                    e => e,
                },
                e => e,
            };
            match r {
                // Converged, and stays so for a few rounds.
                Ok(()) => {
                    stable += 1;
                    if stable >= 5 {
                        summary.settle_ms = (self.cluster.clock.mono() - start).as_millis();
                        summary.epochs = self.seen.holders.keys().max().copied().unwrap_or(0);
                        summary.events = self.seen.events.len();
                        summary.offline = self.seen.offline.len();
                        summary.injected = self.faults.injected();
                        return Ok(summary);
                    }
                }
                Err(e) => {
                    if stable > 0 {
                        return Err(self.fail(format!("converged, then diverged: {e}")));
                    }
                    last_err = e;
                }
            }
        }
        Err(self.fail(format!("not converged {SETTLE_MAX:?} after the chaos: {last_err}")))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Runs one schedule; a panic inside a node or the harness is a failure too.
fn run_seed(rt: &tokio::runtime::Runtime, seed: u64) -> Result<Summary, Failure> {
    run_seed_with(rt, seed, true)
}

/// `tasks`: run the task layer too (the regression tests replay their
/// original membership-only schedules without it).
fn run_seed_with(rt: &tokio::runtime::Runtime, seed: u64, with_tasks: bool) -> Result<Summary, Failure> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async {
            let mut sim = Sim::new(seed).await;
            if with_tasks {
                sim = sim.with_tasks().await;
            }
            sim.run().await
        })
    })) {
        Ok(r) => r,
        Err(p) => Err(Failure {
            seed,
            what: format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("?")
            ),
            trace: vec!["(replay to see the schedule)".into()],
        }),
    }
}

use store::testing::env_u64;

#[test]
fn chaos_schedules() {
    let _turn = crate::common::turns::machine();
    let count = env_u64("COMPACTD_SIM_SCHEDULES").unwrap_or(1000);
    let base = env_u64("COMPACTD_SIM_SEED_BASE").unwrap_or(0);
    let threads = 2u64;
    let started = std::time::Instant::now();
    // COMPACTD_SIM_KEEP_GOING=1: run every schedule, list every failure.
    let keep_going = std::env::var_os("COMPACTD_SIM_KEEP_GOING").is_some();
    let results: Vec<(Summary, Vec<Failure>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let rt = runtime();
                    let mut total = Summary::default();
                    let mut failures = Vec::new();
                    let mut seed = base + t;
                    while seed < base + count {
                        match run_seed(&rt, seed) {
                            Ok(sum) => total += sum,
                            Err(f) if keep_going => {
                                eprintln!("seed {seed}: {}", f.what.lines().next().unwrap_or(""));
                                failures.push(f)
                            }
                            Err(f) => return (total, vec![f]),
                        }
                        seed += threads;
                    }
                    (total, failures)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = Summary::default();
    let mut failures = Vec::new();
    for (sum, f) in results {
        total += sum;
        failures.extend(f);
    }
    eprintln!(
        "sim_chaos: {count} schedules from seed {base} in {:?}: {} epochs, {} events, {} offline declarations, \
         {} crashes, {} leaves, {} pauses, {} injected faults, longest settle {} ms",
        started.elapsed(),
        total.epochs,
        total.events,
        total.offline,
        total.crashes,
        total.leaves,
        total.pauses,
        total.injected,
        total.settle_ms
    );
    let failed = failures.len();
    if let Some(f) = failures.into_iter().min_by_key(|f| f.seed) {
        panic!("{f}\n({failed} failed schedules)");
    }
    // The chaos must actually exercise failover, declarations and faults.
    assert!(total.epochs > count, "too few elections: {total:?}");
    assert!(total.offline as u64 > count / 4, "too few offline declarations: {total:?}");
    assert!(total.injected > count, "too few injected faults: {total:?}");
}

/// Replays one seed: `COMPACTD_SIM_SEED=<seed> cargo test
/// --all-features --test all sim_chaos::replay -- --nocapture`. Without the variable it does nothing.
#[test]
fn replay() {
    let _turn = crate::common::turns::machine();
    let Some(seed) = env_u64("COMPACTD_SIM_SEED") else {
        return;
    };
    if let Ok(filter) = std::env::var("COMPACTD_SIM_LOG") {
        // e.g. COMPACTD_SIM_LOG=debug: the nodes' own logs, one span per tick.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .without_time()
            .with_writer(std::io::stderr)
            .try_init();
    }
    let rt = runtime();
    match run_seed(&rt, seed) {
        Ok(sum) => eprintln!("seed {seed} passed: {sum:?}"),
        Err(f) => {
            eprintln!("full schedule of seed {seed}:");
            for l in &f.trace {
                eprintln!("  {l}");
            }
            panic!("{f}");
        }
    }
}

#[path = "sim_chaos/observe.rs"]
mod observe;
#[path = "sim_chaos/regressions.rs"]
mod regressions;
