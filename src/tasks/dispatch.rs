//! A manager's dispatch: which live node gets each pending unit, and what
//! is written there: a subtask folder per attempt (layout 2), or one batch
//! per node and dispatch round (layout 3: one `Info` for all its units,
//! whose lifecycle is then empty markers; layout 4: the same, the batch
//! named by its term too). Which layout a node gets is
//! [`super::manager::Placement::layout_for`]: the layout in force, and nothing for a
//! draining node or, once layout 3 or later is in force, a node that does
//! not read it.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use futures::StreamExt;
use layouts::formats::{self, SubtaskMeta};
use layouts::v3::{self, BatchInfo, BatchNo, BatchUnit};
use layouts::{v2, Name, NodeId, SubtaskState};
use store::Created;

use super::batches::BatchRun;
use super::discover::{self, Unit};
use super::manager::{Ctx, TaskManager, UnitState, DISPATCH_WINDOW, MAX_DISPATCH_PER_ROUND};
use super::placement::Ring;
use super::{TaskError, WRITE_CONCURRENCY};

/// One unit placed this round: the unit, its node, its attempt.
struct Placed {
    unit: usize,
    node: NodeId,
    attempt: u32,
}

impl TaskManager {
    pub(super) async fn dispatch_pending(&mut self, ctx: &mut Ctx<'_>) -> Result<(), TaskError> {
        let info = self.info.clone().expect("loaded");
        // Work for a named command goes to the members that define it; if
        // none advertises it (older nodes, a stale view), to any member,
        // whose worker then fails the attempt naming the command.
        let named = info.run.executor.as_ref().and_then(|e| e.command_name.clone());
        // Only members that take new work (not draining; reading the layout
        // in force) and run the task's executor: a node that does not know
        // it could not even read the task.
        let takes = |m: &&NodeId| ctx.placement.layout_for(m).is_some();
        let kind = info.run.executor.as_ref().map(|e| e.kind).unwrap_or(ctx.cfg.executor);
        let runs = |m: &&NodeId| kind.run_by(ctx.executors.get(*m).and_then(|e| e.as_deref()));
        let having: Vec<&NodeId> = match &named {
            Some(n) => ctx
                .members
                .keys()
                .filter(takes)
                .filter(|m| ctx.commands.get(*m).is_some_and(|c| c.contains(n)))
                .collect(),
            None => vec![],
        };
        let ring = if having.is_empty() {
            Ring::new(ctx.members.keys().filter(takes).filter(runs))
        } else {
            Ring::new(having.into_iter().filter(runs))
        };
        if ring.is_empty() {
            return Ok(());
        }
        // A commit unit waits until every other unit of the round ended.
        let others_ended = self
            .units()
            .iter()
            .zip(&self.runs)
            .all(|(unit, r)| *unit == Unit::Commit || matches!(r.state, UnitState::Done | UnitState::Failed));
        let mut dispatched = 0;
        let mut planned: Vec<Placed> = vec![];
        let mut held: HashMap<NodeId, usize> = HashMap::new();
        // Nodes that hold a unit of this task dispatched by an earlier
        // round, to their current incarnation, and not yet collected: they
        // list their folders at every poll until it is collected, so a new
        // unit needs a poke but no inbox stamp (see `Pokes::hint`).
        let mut announced: HashSet<NodeId> = Default::default();
        for r in &self.runs {
            match &r.state {
                UnitState::Dispatched { node, node_incarnation, .. } => {
                    *held.entry(node.clone()).or_default() += 1;
                    if *node_incarnation != 0 && ctx.members.get(node) == Some(node_incarnation) {
                        announced.insert(node.clone());
                    }
                }
                UnitState::Unsure { node } => *held.entry(node.clone()).or_default() += 1,
                _ => {}
            }
        }
        // Layout 3: a node gets a new batch only while at most half its
        // window is held, so that a batch stays large when units end one by
        // one (a batch costs its `Info`, the worker's read of it, its record
        // and its deletion, whatever its size: on S3 and HDFS those are most
        // of a unit's requests when batches shrink to a unit or two). Layout
        // 2 costs the same per unit either way.
        let refill_at = DISPATCH_WINDOW / 2;
        let full: HashSet<NodeId> = held
            .iter()
            .filter(|(n, h)| **h > refill_at && ctx.placement.layout_for(n) >= Some(v3::LAYOUT_3))
            .map(|(n, _)| n.clone())
            .collect();
        // Ring members whose window has room. A unit without a preferred
        // node goes to a ring member, so once none has room no later unit
        // can be placed this round, and the rest are not looked at: each
        // look is a ring lookup, and a task of 100,000 pending units made
        // every tick of its manager's node a long one when all were.
        let mut open: HashSet<&NodeId> = ring
            .members()
            .iter()
            .filter(|n| held.get(*n).copied().unwrap_or(0) < DISPATCH_WINDOW && !full.contains(*n))
            .collect();
        // Units with a preferred node (a reassignment) may go outside the
        // ring: the stop waits until the last of them was looked at.
        let mut preferring = self.runs.iter().filter(|r| r.state == UnitState::Pending && r.prefer.is_some()).count();
        let term = self.term();
        for u in 0..self.runs.len() {
            if open.is_empty() && preferring == 0 {
                break;
            }
            if self.runs[u].state != UnitState::Pending {
                continue;
            }
            if self.runs[u].prefer.is_some() {
                preferring -= 1;
            }
            if self.units()[u] == Unit::Commit && !others_ended {
                continue;
            }
            // The deadline bounds a round's time (a heartbeat is written
            // between ticks); the count bounds its burst, so that workers
            // start on the first units while the rest are written.
            if dispatched == MAX_DISPATCH_PER_ROUND || ctx.deadline.passed() {
                // The rest go out on the node's next tick, at once.
                ctx.pokes.work(ctx.me);
                break;
            }
            let key = format!("{}/{u}", self.id);
            let run = &mut self.runs[u];
            let node = match run.prefer.clone().filter(|n| ctx.members.contains_key(n) && takes(&n)) {
                Some(n) => n,
                None => ring.node_avoiding(&key, &run.avoid).expect("ring is not empty"),
            };
            let count = held.entry(node.clone()).or_default();
            if *count >= DISPATCH_WINDOW || full.contains(&node) {
                // Its window is full: this unit waits for a collected one.
                continue;
            }
            *count += 1;
            if *count >= DISPATCH_WINDOW {
                open.remove(&node);
            }
            run.prefer = None;
            dispatched += 1;
            run.attempt = v2::next_attempt(run.attempt, term);
            planned.push(Placed { unit: u, node, attempt: run.attempt });
        }
        let (v3_units, v2_units): (Vec<Placed>, Vec<Placed>) =
            planned.into_iter().partition(|p| ctx.placement.layout_for(&p.node) >= Some(v3::LAYOUT_3));
        let r2 = self.dispatch_subtasks(ctx, v2_units, &announced).await;
        let r3 = self.dispatch_batches(ctx, v3_units, &announced).await;
        r2.and(r3)
    }

    /// Layout 2: one subtask folder per attempt, its info written
    /// concurrently with the others'.
    async fn dispatch_subtasks(
        &mut self,
        ctx: &mut Ctx<'_>,
        placed: Vec<Placed>,
        announced: &HashSet<NodeId>,
    ) -> Result<(), TaskError> {
        let round = self.round_no();
        let planned: Vec<(usize, NodeId, Name, Vec<u8>)> = placed
            .into_iter()
            .map(|p| {
                let name = v2::subtask_name(&self.id, round, p.unit as u32, p.attempt);
                let bytes = self.subtask_bytes(ctx, p.unit, p.node.clone(), p.attempt);
                (p.unit, p.node, name, bytes)
            })
            .collect();
        let store = ctx.store;
        let results: Vec<(usize, NodeId, store::Result<Created>)> = futures::stream::iter(planned)
            .map(|(u, node, name, bytes)| async move {
                let r = store.create(&v2::subtask_info(&node, &name), bytes).await;
                (u, node, r)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut first_err = None;
        for (u, node, r) in results {
            match r {
                Ok(created) => {
                    poke(ctx, &node, announced);
                    // An existing folder of that name may already have been
                    // run by anyone: unknown runner, so the first collect
                    // checks its marker.
                    let node_incarnation =
                        if created == Created::Created { ctx.members.get(&node).copied().unwrap_or(0) } else { 0 };
                    self.runs[u].state = UnitState::Dispatched { node, node_incarnation, batch: None };
                }
                // It may exist all the same (a lost reply), or land later:
                // settled by the next collect, under the same name.
                Err(e) => {
                    self.runs[u].state = UnitState::Unsure { node };
                    first_err = first_err.or(Some(e));
                }
            }
        }
        first_err.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Layout 3: one batch per node, its `Info` written once for all its
    /// units, the batches concurrently.
    async fn dispatch_batches(
        &mut self,
        ctx: &mut Ctx<'_>,
        placed: Vec<Placed>,
        announced: &HashSet<NodeId>,
    ) -> Result<(), TaskError> {
        let mut by_node: BTreeMap<NodeId, Vec<Placed>> = BTreeMap::new();
        for p in placed {
            by_node.entry(p.node.clone()).or_default().push(p);
        }
        let round = self.round_no();
        let mut planned: Vec<(BatchNo, NodeId, Bytes)> = vec![];
        for (node, units) in by_node {
            self.last_batch = v2::next_attempt(self.last_batch, self.term());
            // Layout 3 readers that predate layout 4 know no term in a name.
            let n = if ctx.placement.layout >= v3::LAYOUT_4 {
                BatchNo::new(self.term(), self.last_batch)
            } else {
                BatchNo { term: None, n: self.last_batch }
            };
            let info = self.batch_info(ctx, &node, n, &units);
            let mut b = BatchRun::new(node.clone());
            b.units = units.iter().map(|p| (p.unit as u32, p.attempt)).collect();
            self.batches.insert(n, b);
            planned.push((n, node, Bytes::from(formats::encode(&info))));
        }
        let (store, id) = (ctx.store, self.id);
        let results: Vec<(BatchNo, NodeId, Bytes, store::Result<Created>)> = futures::stream::iter(planned)
            .map(|(n, node, bytes)| async move {
                let path = v3::batch_info(&node, &v3::batch_name(&id, round, n));
                let r = store.create(&path, bytes.clone()).await;
                (n, node, bytes, r)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut first_err = None;
        for (n, node, bytes, r) in results {
            let created = match r {
                Ok(c) => {
                    poke(ctx, &node, announced);
                    Some(c)
                }
                Err(e) => {
                    first_err = first_err.or(Some(e));
                    None
                }
            };
            let ni = match created {
                Some(Created::Created) => ctx.members.get(&node).copied().unwrap_or(0),
                _ => 0,
            };
            let units: Vec<u32> = self.batches.get(&n).map(|b| b.units.keys().copied().collect()).unwrap_or_default();
            if created.is_none() {
                // Settled by the next collect, under the same name.
                if let Some(b) = self.batches.get_mut(&n) {
                    b.unsure = Some(bytes);
                }
            }
            for u in units {
                self.runs[u as usize].state =
                    UnitState::Dispatched { node: node.clone(), node_incarnation: ni, batch: Some(n) };
            }
        }
        first_err.map_or(Ok(()), |e| Err(e.into()))
    }

    /// The info of unit `u`'s subtask, attempt `attempt` on `node`.
    pub(super) fn subtask_bytes(&self, ctx: &Ctx<'_>, u: usize, node: NodeId, attempt: u32) -> Vec<u8> {
        let info = self.info.as_ref().expect("loaded");
        let mut sub = info.clone();
        sub.sub_task_flag = true;
        sub.state = SubtaskState::Init.as_str().into();
        sub.result = Default::default();
        sub.run.partitions.clear();
        sub.run.done_units.clear();
        sub.run.failed_units.clear();
        sub.run.shards = None;
        let (partition, shard) = self.unit_target(u);
        sub.partition_name = partition.or(sub.partition_name);
        sub.run.subtask = Some(SubtaskMeta {
            parent: self.id,
            index: u as u32,
            round: info.run.round,
            attempt,
            term: self.term(),
            node,
            shard,
            manager: Some(ctx.me.clone()),
        });
        formats::encode(&sub)
    }

    /// The `Info` of batch `n` on `node` with `units`.
    fn batch_info(&self, ctx: &Ctx<'_>, node: &NodeId, n: BatchNo, units: &[Placed]) -> BatchInfo {
        let info = self.info.as_ref().expect("loaded");
        let mut task = info.clone();
        task.result = Default::default();
        task.run.partitions.clear();
        task.run.done_units.clear();
        task.run.failed_units.clear();
        let units = units
            .iter()
            .map(|p| {
                let (partition, shard) = self.unit_target(p.unit);
                BatchUnit {
                    unit: p.unit as u32,
                    attempt: p.attempt,
                    partition: partition.or(info.partition_name.clone()),
                    shard,
                }
            })
            .collect();
        BatchInfo {
            task,
            round: info.run.round,
            batch: n.n,
            term: self.term(),
            node: node.clone(),
            manager: ctx.me.clone(),
            units,
        }
    }

    /// The partition (or the commit unit's reserved name) and the shard
    /// unit `u` runs on.
    fn unit_target(&self, u: usize) -> (Option<Name>, Option<formats::Shard>) {
        match &self.units()[u] {
            Unit::Partition(p) => (Some(p.clone()), None),
            Unit::Shard(s) => (None, Some(*s)),
            Unit::Whole => (None, None),
            Unit::Commit => (Some(discover::commit_unit_name()), None),
        }
    }
}

/// A node given work: a poke, and an inbox stamp unless it already lists
/// its folder at every poll (see [`crate::cluster::wake::Pokes::hint`]).
fn poke(ctx: &mut Ctx<'_>, node: &NodeId, announced: &HashSet<NodeId>) {
    if announced.contains(node) {
        ctx.pokes.hint(node);
    } else {
        ctx.pokes.work(node);
    }
}
