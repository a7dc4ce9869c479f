//! The manager of one task: splits it into one unit per partition (or
//! shard), places each on a live node by consistent hashing, collects the
//! states, re-dispatches failures (bounded retries, next live node on the
//! ring), keeps the task's result counts and state current, removes
//! finished work, runs repeat rounds, and handles stop and reassign
//! requests. It writes the layout in force (its node's view): a subtask
//! folder per attempt (layout 2), or one batch per node and dispatch round
//! (layout 3, only to nodes that read it); it collects both.
//!
//! Invariants:
//! - Only the manager of the highest `Manager.<term>` acts; every round
//!   starts with one LIST of the task folder, and a higher term ends this
//!   manager's work on the task (fencing).
//! - Only the newest attempt of a unit counts: subtask folders and batch
//!   markers carry the attempt in their name (`<task>.r<round>.u<unit>.a<attempt>`,
//!   `u<unit>.a<attempt>.…`), older attempts are deleted or released, and
//!   their results ignored.
//! - A unit's outcome is recorded in a create-once file before what it ran
//!   from is deleted: its own `Done.r<round>.u<unit>` (`Failed.…`) for a
//!   subtask folder, its batch's `Batch.r<round>.t<term>.b<batch>` once every unit
//!   of the batch ended, before the batch folder goes. A stale manager
//!   cannot erase it, and a new manager rebuilds exactly: recorded units
//!   are finished, units with a folder or batch are in flight, the rest are
//!   dispatched again.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use layouts::formats::{self, Lease, TaskInfo};
use layouts::v3::BatchNo;
use layouts::{v2, v3, Name, NodeId, TaskId, TaskState};
use store::Store;

use crate::clock::Deadline;
use crate::cluster::wake::Pokes;
use crate::tasks::batches::BatchRun;
use crate::tasks::discover::{self, Unit};
use crate::tasks::folder::{list_node, NodeFolder};
use crate::tasks::worker::WorkConfig;
use crate::tasks::{self, TaskDir, TaskError};

/// Subtasks a manager dispatches per round (the rest in the next tick,
/// which the manager asks for by waking its own node).
pub(super) const MAX_DISPATCH_PER_ROUND: usize = 256;

/// Units of one task a node holds at once (dispatched, not yet collected).
/// The rest wait in the manager, not in the node's folder, which every
/// tick of that node and of its managers lists again: a window keeps those
/// listings small however large the task (and a finished unit frees its
/// place at the manager's next tick, which the worker's poke triggers).
pub const DISPATCH_WINDOW: usize = 256;

/// Node folders listed during one tick, shared by every task of the node,
/// and the subtask and batch folders of the whole cluster (one recursive
/// listing of `TaskAssigned/`, made on the first rebuild of the tick): a
/// node that becomes manager of many tasks at once (a restart, a
/// hand-over) rebuilds them all from one listing, not one listing per task.
#[derive(Debug, Default)]
pub struct FolderCache {
    map: HashMap<NodeId, NodeFolder>,
    /// (node, folder name) of every subtask and batch folder.
    assigned: Option<Vec<(String, String)>>,
}

impl FolderCache {
    pub fn insert(&mut self, node: NodeId, folder: NodeFolder) {
        self.map.insert(node, folder);
    }

    /// Every subtask and batch folder under `TaskAssigned/` as (node,
    /// name), listed once per tick.
    pub async fn assigned(&mut self, store: &Store) -> store::Result<&[(String, String)]> {
        use futures::TryStreamExt;
        if self.assigned.is_none() {
            let mut seen: BTreeSet<(String, String)> = Default::default();
            let mut entries = store.list_stream(v2::TASK_ASSIGNED, true);
            while let Some(e) = entries.try_next().await? {
                let rel = &e.path[v2::TASK_ASSIGNED.len()..];
                let mut parts = rel.split('/');
                if let (Some(node), Some(sub), Some(_)) = (parts.next(), parts.next(), parts.next()) {
                    if v2::parse_subtask_name(sub).is_some() || v3::parse_batch_name(sub).is_some() {
                        seen.insert((node.to_string(), sub.to_string()));
                    }
                }
            }
            self.assigned = Some(seen.into_iter().collect());
        }
        Ok(self.assigned.as_deref().unwrap_or_default())
    }

    pub async fn get(&mut self, store: &Store, node: &NodeId) -> store::Result<&NodeFolder> {
        if !self.map.contains_key(node) {
            let f = list_node(store, node).await?;
            self.map.insert(node.clone(), f);
        }
        Ok(&self.map[node])
    }
}

/// What a manager may place where, from its node's view of the cluster:
/// the layout in force, who reads it, who drains.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The layout in force (`Registry/Layout.<n>` as the view says).
    pub layout: u32,
    /// Members whose heartbeat says they read the layout in force (from
    /// layout 3 on; layout 2 every version reads).
    pub readers: BTreeSet<NodeId>,
    /// Members whose heartbeat says they are draining: nothing new goes
    /// there.
    pub draining: BTreeSet<NodeId>,
}

impl Default for Placement {
    /// Layout 2 in force, nobody draining.
    fn default() -> Self {
        Placement { layout: v3::LAYOUT_2, readers: BTreeSet::new(), draining: BTreeSet::new() }
    }
}

impl Placement {
    pub fn from_view(view: Option<&Lease>) -> Placement {
        let Some(v) = view else { return Placement::default() };
        let layout = v.layout();
        Placement {
            layout,
            readers: v.members.iter().filter(|m| m.reads(layout)).map(|m| m.node.clone()).collect(),
            draining: v.members.iter().filter(|m| m.draining).map(|m| m.node.clone()).collect(),
        }
    }

    /// The layout a manager writes for `node`, or `None` if nothing new
    /// may go there: a draining node, or, once layout 3 or later is in
    /// force, a node that does not read it.
    pub fn layout_for(&self, node: &NodeId) -> Option<u32> {
        if self.draining.contains(node) {
            return None;
        }
        if self.layout >= v3::LAYOUT_3 {
            return self.readers.contains(node).then_some(self.layout);
        }
        Some(v3::LAYOUT_2)
    }
}

/// What a manager round needs from its node.
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub data: &'a Store,
    pub me: &'a NodeId,
    /// Live members and their incarnations.
    pub members: &'a BTreeMap<NodeId, u64>,
    /// Incarnations the view lists as declared offline.
    pub offline: &'a std::collections::BTreeSet<(NodeId, u64)>,
    /// The command names each member advertises.
    pub commands: &'a BTreeMap<NodeId, Vec<String>>,
    /// The executors each member advertises (`None`: an older node, see
    /// [`formats::ExecutorKind::run_by`]).
    pub executors: &'a BTreeMap<NodeId, Option<Vec<String>>>,
    /// The layout in force, and who may get new work in which layout.
    pub placement: &'a Placement,
    pub cfg: &'a WorkConfig,
    pub wall_ms: u64,
    pub folders: &'a mut FolderCache,
    /// Past it, the round leaves the rest of its work for the next one.
    pub deadline: &'a Deadline,
    /// Nodes to wake after the tick: workers whose folder changed, the
    /// monitor when a job step's task ended.
    pub pokes: &'a mut Pokes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum UnitState {
    Pending,
    /// Its current attempt is on `node`, in a subtask folder (`batch`
    /// `None`) or in batch `batch`. `node_incarnation`: the incarnation
    /// seen running it, or the member one when it was created (0: unknown).
    Dispatched {
        node: NodeId,
        node_incarnation: u64,
        batch: Option<BatchNo>,
    },
    /// The create of its current attempt's subtask folder on `node` failed:
    /// the attempt may exist (the reply was lost) or still land. Created
    /// again under the same name, never a new one, until that is settled
    /// (see `collect`). (A batch whose create failed is unsure as a whole:
    /// [`BatchRun::unsure`].)
    Unsure {
        node: NodeId,
    },
    /// Its attempt in batch `batch` ended for good (a success, or a
    /// failure past the retries): final once the batch's record is written.
    Ending {
        batch: BatchNo,
    },
    Done,
    Failed,
}

/// A unit whose current attempt its manager takes back: it goes elsewhere
/// once that attempt is proven ended (see [`super::collect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TakeBack {
    pub(super) why: String,
    /// The attempt's end counts as a failure of the unit.
    pub(super) count: bool,
    /// Where the unit goes next (a reassign request naming a node).
    pub(super) prefer: Option<NodeId>,
    /// Its folder vanished: the incarnation whose declaration ends it.
    pub(super) wait_for: Option<u64>,
}

impl TakeBack {
    pub(super) fn new(why: &str, count: bool) -> TakeBack {
        TakeBack { why: why.into(), count, prefer: None, wait_for: None }
    }
}

#[derive(Debug, Clone)]
pub(super) struct UnitRun {
    pub(super) state: UnitState,
    pub(super) attempt: u32,
    pub(super) failures: u32,
    pub(super) avoid: Vec<NodeId>,
    pub(super) prefer: Option<NodeId>,
    pub(super) taken_back: Option<TakeBack>,
    /// Waiting for the end of a runner the view does not list (logged once).
    pub(super) waiting: bool,
}

impl UnitRun {
    fn new() -> Self {
        UnitRun {
            state: UnitState::Pending,
            attempt: 0,
            failures: 0,
            avoid: vec![],
            prefer: None,
            taken_back: None,
            waiting: false,
        }
    }
}

/// What the node should do with this manager after a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The task reached a terminal state.
    Finished(TaskState),
    /// Another node manages the task now.
    Fenced,
}

pub struct TaskManager {
    pub id: TaskId,
    term: u64,
    pub(super) info: Option<TaskInfo>,
    units: Vec<Unit>,
    pub(super) runs: Vec<UnitRun>,
    /// Set by `load` when the task cannot run at all (it then fails with
    /// this as its error): a merge task found no partition to compact, or
    /// named partitions that are not there, or its info is over a limit.
    cannot_run: Option<String>,
    /// Units that failed for good and are not yet written to the task info.
    /// With the last attempt's error, recorded in the unit's `Failed.*` file.
    pub(super) unrecorded_failed: std::collections::BTreeMap<u32, String>,
    /// This round's layout 3 batches not yet recorded.
    pub(super) batches: BTreeMap<BatchNo, BatchRun>,
    /// The highest batch number (of any term) this round has seen or used.
    pub(super) last_batch: u32,
}

impl TaskManager {
    pub fn new(id: TaskId) -> Self {
        TaskManager {
            id,
            term: 0,
            info: None,
            units: vec![],
            runs: vec![],
            unrecorded_failed: Default::default(),
            cannot_run: None,
            batches: BTreeMap::new(),
            last_batch: 0,
        }
    }

    pub(super) fn term(&self) -> u64 {
        self.term
    }

    pub(super) fn units(&self) -> &[Unit] {
        &self.units
    }

    pub(super) fn name(&self, round: u32, unit: usize, attempt: u32) -> Name {
        v2::subtask_name(&self.id, round, unit as u32, attempt)
    }

    pub(super) fn round_no(&self) -> u32 {
        self.info.as_ref().map(|i| i.run.round).unwrap_or(0)
    }

    fn info(&mut self) -> &mut TaskInfo {
        self.info.as_mut().expect("loaded")
    }

    /// One round of management. Returns what became of the task.
    pub async fn round(&mut self, ctx: &mut Ctx<'_>) -> Result<Flow, TaskError> {
        let dir = tasks::read_dir(ctx.store, &self.id).await?;
        if self.term == 0 {
            // First round: are we the manager of the newest term?
            match tasks::read_term(ctx.store, &self.id, dir.term()).await? {
                Some(t) if &t.node == ctx.me && Some(&t.incarnation) == ctx.members.get(ctx.me) => self.term = t.term,
                Some(t) if &t.node == ctx.me => {
                    // Given to an earlier incarnation of this node: take a new
                    // term, so that attempt numbers stay unique and that
                    // earlier self (if merely paused) is fenced.
                    self.term = tasks::reassign_manager(ctx.store, &self.id, ctx.me, "restart", ctx.wall_ms).await?;
                    return Ok(Flow::Continue);
                }
                Some(_) => return Ok(Flow::Fenced),
                None => return Ok(Flow::Continue), // being written
            }
        }
        if dir.term() > self.term {
            tracing::info!(task = %self.id, "a newer manager term exists: handing the task over");
            return Ok(Flow::Fenced);
        }
        let Some(state) = dir.state.filter(|_| dir.has_info) else {
            return Ok(Flow::Continue);
        };
        if state.is_terminal() {
            return Ok(Flow::Finished(state));
        }
        if self.info.is_none() {
            if let Err(e) = self.load(ctx, state, &dir).await {
                if dir.stop {
                    // Stop ends a task even when it cannot be loaded (its
                    // table's backend fails, its info is damaged).
                    tracing::warn!(task = %self.id, "stopping a task that could not be loaded: {e}");
                    return self.stop_unloaded(ctx).await;
                }
                return Err(e);
            }
        }
        if let Some(why) = self.cannot_run.take() {
            tracing::warn!(task = %self.id, "{why}");
            self.info().run.error = Some(why);
            return self.finish(ctx, TaskState::Failed).await;
        }
        // A cron task waits in Init for its first fire instant.
        let first_due = self.info.as_ref().and_then(|i| i.run.next_round_at_ms);
        let waiting = state == TaskState::Init && first_due.is_some_and(|due| ctx.wall_ms < due);
        if state == TaskState::Init && !waiting {
            self.start_round(ctx, 1).await?;
            ctx.store.create(&v2::task_status(&self.id, TaskState::Running), Vec::new()).await?;
            ctx.store.delete(&v2::task_status(&self.id, TaskState::Init)).await?;
            tracing::info!(task = %self.id, units = self.units.len(), "task started");
        }
        if dir.stop {
            return self.cancel(ctx).await;
        }
        self.handle_reassign(ctx, &dir.reassign).await?;
        let info = self.info.as_ref().expect("loaded");
        if waiting {
            return Ok(Flow::Continue);
        }
        if let Some(due) = info.run.next_round_at_ms {
            if ctx.wall_ms < due {
                return Ok(Flow::Continue);
            }
            let next = info.run.round + 1;
            self.start_round(ctx, next).await?;
        }
        self.collect(ctx).await?;
        self.record_batches(ctx).await?;
        self.dispatch_pending(ctx).await?;
        if self.unrecorded_failed.is_empty()
            && self.runs.iter().all(|r| matches!(r.state, UnitState::Done | UnitState::Failed))
        {
            return self.end_round(ctx).await;
        }
        Ok(Flow::Continue)
    }

    async fn load(&mut self, ctx: &mut Ctx<'_>, state: TaskState, dir: &TaskDir) -> Result<(), TaskError> {
        let mut info = tasks::read_info(ctx.store, &self.id).await?;
        tasks::repeat::stored_cron(&info)?;
        // Over a limit (written by an older or foreign writer): refused
        // before anything is allocated for its units.
        if let Err(e) = layouts::limits::check_run(&info.run) {
            self.cannot_run = Some(format!("refused: {e}"));
            self.info = Some(info);
            return Ok(());
        }
        let plan = discover::plan(ctx.data, &mut info, ctx.cfg.executor, ctx.cfg.target_size).await?;
        if plan.record && plan.cannot_run.is_none() {
            ctx.store.put(&v2::task_info(&self.id), formats::encode(&info)).await?;
        }
        self.units = plan.units;
        self.cannot_run = plan.cannot_run;
        self.runs = vec![UnitRun::new(); self.units.len()];
        let round = info.run.round;
        // What this round has recorded: its outcome files.
        let mut dir = dir.clone();
        tasks::read_outcomes(ctx.store, &self.id, &mut dir).await?;
        for (ok, r, u) in &dir.outcomes {
            if let Some(run) = self.runs.get_mut(*u as usize).filter(|_| *r == round) {
                run.state = if *ok { UnitState::Done } else { UnitState::Failed };
            }
        }
        if state == TaskState::Running {
            self.rebuild(ctx, round, &dir).await?;
            // Outcomes again, listed *after* the folders: a unit recorded and
            // its folder deleted (by an old manager) in between is seen here.
            let fresh = tasks::read_dir_with_outcomes(ctx.store, &self.id).await?;
            for (ok, r, u) in &fresh.outcomes {
                if let Some(run) = self.runs.get_mut(*u as usize).filter(|_| *r == round) {
                    run.state = if *ok { UnitState::Done } else { UnitState::Failed };
                }
            }
            self.release_recorded();
            self.last_batch = self.last_batch.max(fresh.batch_records(round).map(|b| b.n).max().unwrap_or(0));
        }
        // Loaded only once everything above succeeded: a failure leaves the
        // manager unloaded, to start over next round.
        self.info = Some(info);
        Ok(())
    }

    async fn start_round(&mut self, ctx: &mut Ctx<'_>, round: u32) -> Result<(), TaskError> {
        tracing::debug!(task = %self.id, round, "start round");
        // The previous round's outcome files, as they are (one or two
        // LISTs, then one delete each: fewer requests than a blind delete of
        // both names of every unit).
        let old = tasks::read_dir_with_outcomes(ctx.store, &self.id).await?;
        let old_outcomes: Vec<String> = if round > 1 { old.round_files(&self.id, round - 1) } else { vec![] };
        let wall = ctx.wall_ms;
        let fired = tasks::repeat::round_fire(self.info(), wall)?;
        let info = self.info();
        info.run.round = round;
        info.run.next_round_at_ms = None;
        info.run.fired_ms = fired;
        info.run.done_units.clear();
        info.run.failed_units.clear();

        info.run.started_wall_ms.get_or_insert(wall);
        info.state = TaskState::Running.as_str().into();
        let bytes = formats::encode(info);
        ctx.store.put(&v2::task_info(&self.id), bytes).await?;
        self.runs = vec![UnitRun::new(); self.units.len()];
        self.batches.clear();
        self.last_batch = 0;
        // The previous round's outcome files are summarized in the info:
        // drop them so that the task folder does not grow with rounds.
        for path in old_outcomes {
            let _ = ctx.store.delete(&path).await;
        }
        Ok(())
    }

    async fn end_round(&mut self, ctx: &mut Ctx<'_>) -> Result<Flow, TaskError> {
        let units = |want: UnitState| -> Vec<u32> {
            self.runs.iter().enumerate().filter(|(_, r)| r.state == want).map(|(u, _)| u as u32).collect()
        };
        let (done, failed) = (units(UnitState::Done), units(UnitState::Failed));
        let mut info = self.info.clone().expect("loaded");
        // Add this round's outcomes into the counts once (the summary is
        // idempotent: a retry after a failed write adds nothing twice).
        if info.run.counted_round < info.run.round {
            info.result.success_count += done.len() as u64;
            info.result.failed_count += failed.len() as u64;
            info.run.counted_round = info.run.round;
        }
        info.run.done_units = done;
        info.run.failed_units = failed.clone();
        let more = info.repeat_flag && (info.repeat.repeat_count == 0 || info.run.round < info.repeat.repeat_count);
        let next = if more { tasks::repeat::next_round_at(&info, ctx.wall_ms)? } else { None };
        if let (true, Some(next)) = (failed.is_empty(), next) {
            info.run.next_round_at_ms = Some(next);
            ctx.store.put(&v2::task_info(&self.id), formats::encode(&info)).await?;
            tracing::info!(task = %self.id, round = info.run.round, next, "round finished; the next is due");
            self.info = Some(info);
            return Ok(Flow::Continue);
        }
        self.info = Some(info);
        self.finish(ctx, if failed.is_empty() { TaskState::Done } else { TaskState::Failed }).await
    }

    async fn cancel(&mut self, ctx: &mut Ctx<'_>) -> Result<Flow, TaskError> {
        let round = self.info.as_ref().expect("loaded").run.round;
        for u in 0..self.runs.len() {
            if let UnitState::Dispatched { node, batch: None, .. } | UnitState::Unsure { node } =
                self.runs[u].state.clone()
            {
                let name = self.name(round, u, self.runs[u].attempt);
                // The worker kills the executor when its folder disappears.
                super::remove::remove_folder(ctx.store, &v2::subtask_dir(&node, &name)).await?;
                // Its worker kills the executor at once instead of at its next poll.
                ctx.pokes.work(&node);
            }
        }
        // Every batch with it (the worker kills what runs from a batch
        // that disappears).
        for (n, b) in std::mem::take(&mut self.batches) {
            super::remove::remove_folder(ctx.store, &v3::batch_dir(&b.node, &v3::batch_name(&self.id, round, n)))
                .await?;
            ctx.pokes.work(&b.node);
        }
        tracing::info!(task = %self.id, "task stopped on request");
        self.finish(ctx, TaskState::Cancel).await
    }

    /// Ends a stopped task this manager could not load: with its info as
    /// stored where it reads, else by its status marker alone. Nothing of
    /// it runs under this term; what an earlier manager dispatched is
    /// removed with the finished task's folders by the monitor's sweep.
    async fn stop_unloaded(&mut self, ctx: &mut Ctx<'_>) -> Result<Flow, TaskError> {
        self.runs.clear();
        if let Ok(info) = tasks::read_info(ctx.store, &self.id).await {
            self.info = Some(info);
            return self.finish(ctx, TaskState::Cancel).await;
        }
        ctx.store.create(&v2::task_status(&self.id, TaskState::Cancel), Vec::new()).await?;
        for old in [TaskState::Init, TaskState::Running] {
            ctx.store.delete(&v2::task_status(&self.id, old)).await?;
        }
        Ok(Flow::Finished(TaskState::Cancel))
    }

    async fn finish(&mut self, ctx: &mut Ctx<'_>, state: TaskState) -> Result<Flow, TaskError> {
        let wall = ctx.wall_ms;
        let info = self.info();
        info.state = state.as_str().into();
        info.run.finished_wall_ms = Some(wall);
        info.run.next_round_at_ms = None;
        let bytes = formats::encode(info);
        ctx.store.put(&v2::task_info(&self.id), bytes).await?;
        ctx.store.create(&v2::task_status(&self.id, state), Vec::new()).await?;
        for old in [TaskState::Init, TaskState::Running] {
            ctx.store.delete(&v2::task_status(&self.id, old)).await?;
        }
        tracing::info!(task = %self.id, %state, "task finished");
        if info_is_job_step(self.info()) {
            ctx.pokes.monitor();
        }
        if self.info().run.params.contains_key(layouts::policies::MARKER_PARAM) {
            // A policy's task: its slot is free for the planner's next.
            ctx.pokes.plan();
        }
        Ok(Flow::Finished(state))
    }
}

/// A job step's task (the monitor drives the job when it ends).
fn info_is_job_step(info: &TaskInfo) -> bool {
    info.run.params.contains_key(layouts::formats::JOB_STEP_PARAM)
}
