//! The one simulation harness: in-process [`Node`]s sharing one
//! [`ManualClock`], ticked in rounds. Every simulation test and benchmark
//! builds its cluster on it (`tests/sim_*.rs`, `tests/all/tasks/task_regressions.rs`,
//! `benches/`); how each node is made (its store, fault or counting layers,
//! configuration) stays with the caller, which passes finished nodes in.
//!
//! A dev-dependency only: nothing here ships in the binary.
//!
//! A round ticks every running, unpaused node once, in slot order, then
//! moves the clock by one step; crashes, pauses and restarts are changes to
//! a slot between rounds. Per-slot state a test needs beside the node (a
//! fault handle, a restart schedule) rides in [`Slot::extra`].

use std::sync::Arc;
use std::time::Duration;

use clock::{Clock, ManualClock, SharedClock};
use compactd::node::Node;
use layouts::NodeId;

/// One node's place in the cluster: a running node, or a crashed one.
pub struct Slot<X = ()> {
    pub id: NodeId,
    /// `None`: crashed (SIGKILL); its files stay in the tree.
    pub node: Option<Node>,
    /// Does not tick (SIGSTOP).
    pub paused: bool,
    pub extra: X,
}

impl<X> Slot<X> {
    /// Running and not paused: it ticks in a round.
    pub fn ticking(&self) -> bool {
        self.node.is_some() && !self.paused
    }
}

pub struct Cluster<X = ()> {
    pub clock: Arc<ManualClock>,
    pub slots: Vec<Slot<X>>,
    /// How far the clock moves after each round.
    pub step: Duration,
}

impl<X> Cluster<X> {
    /// An empty cluster on a new [`ManualClock`].
    pub fn new(step: Duration) -> Self {
        Cluster { clock: ManualClock::new(), slots: Vec::new(), step }
    }

    /// The clock to give the nodes.
    pub fn shared_clock(&self) -> SharedClock {
        self.clock.clone()
    }

    pub fn push(&mut self, node: Node, extra: X) {
        self.slots.push(Slot { id: node.id().clone(), node: Some(node), paused: false, extra });
    }

    /// The slot of node `id`; panics if there is none (a test bug).
    pub fn slot(&mut self, id: &str) -> &mut Slot<X> {
        self.slots.iter_mut().find(|s| s.id.as_str() == id).unwrap_or_else(|| panic!("no node {id} in the sim"))
    }

    /// Ticks slot `i` if it is ticking, inside a span naming the node and
    /// the simulated time (`RUST_LOG`-style filters can follow one node).
    pub async fn tick(&mut self, i: usize) {
        use tracing::Instrument;
        let t = self.clock.mono().as_millis() as u64;
        let slot = &mut self.slots[i];
        if !slot.ticking() {
            return;
        }
        let span = tracing::info_span!("node", id = %slot.id, t);
        slot.node.as_mut().expect("ticking").tick().instrument(span).await;
    }

    /// Ticks every ticking node once, then moves the clock one step.
    pub async fn round(&mut self) {
        for i in 0..self.slots.len() {
            self.tick(i).await;
        }
        self.clock.advance(self.step);
    }

    pub async fn rounds(&mut self, n: usize) {
        for _ in 0..n {
            self.round().await;
        }
    }

    /// How many rounds cover `d` of simulated time.
    pub fn rounds_for(&self, d: Duration) -> usize {
        (d.as_nanos() / self.step.as_nanos().max(1)) as usize
    }

    /// Rounds covering `d` of simulated time.
    pub async fn run_for(&mut self, d: Duration) {
        self.rounds(self.rounds_for(d)).await;
    }

    /// SIGKILL: the node is gone, its files stay.
    pub fn crash(&mut self, id: &str) {
        self.slot(id).node = None;
    }

    /// The running nodes.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.slots.iter().filter_map(|s| s.node.as_ref())
    }

    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.slots.iter_mut().filter_map(|s| s.node.as_mut())
    }

    /// Ids of the ticking nodes that believe they are monitor.
    pub fn monitors(&self) -> Vec<NodeId> {
        self.slots
            .iter()
            .filter(|s| s.ticking() && s.node.as_ref().is_some_and(|n| n.is_monitor()))
            .map(|s| s.id.clone())
            .collect()
    }
}
