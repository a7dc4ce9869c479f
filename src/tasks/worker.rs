//! Worker duties: run the unit attempts found in this node's own
//! `TaskAssigned/<node>/` folder, in either layout (a subtask folder per
//! attempt, or batches of empty markers), and write their ends there.
//!
//! A worker reads nothing but its own folder (one recursive LIST per poll),
//! the info of a subtask it starts, and the `Info` of a batch once.
//! Invariants:
//! - An attempt is **claimed** before it runs, and only while the node's
//!   session guard lets this incarnation start executors ([`super::claim`]).
//! - It never resumes an attempt claimed by another incarnation: that
//!   one's manager waits until the incarnation is declared offline or ended.
//! - An attempt whose manager takes it back (`Cancel`) is killed, and its
//!   end is reported as `Failed` once the executor is dead, or at once if it
//!   does not run here: the manager gives the unit to another node only
//!   after that acknowledgement (or a declaration). An attempt whose folder
//!   (or batch) disappears is killed at once.
//! - A draining worker starts nothing, releases what it has not claimed
//!   ([`super::report::release_unstarted`]) and keeps reporting what runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use layouts::formats::ExecutorKind;
use layouts::v3::BatchInfo;
use layouts::{Name, NodeId, SubtaskState};
use store::Store;

use super::claim::{prepare, prepare_batch, read_batch_info, Prepared};
use super::report::{release_unstarted, write_report};
use crate::clock::Deadline;
use crate::cluster::wake::{Pokes, Scope, Wakeup};
use crate::executor::{self, ExecRequest, Running};
use crate::tasks::WRITE_CONCURRENCY;

pub use super::claim::command_for;
pub use super::config::WorkConfig;
pub use super::folder::{list_node, NodeFolder, Slot, SubFolder};

/// Where a worker records its executors' starts and ends and their I/O:
/// the node's metrics, which the HTTP listener serves (`serve::metrics`,
/// a layer above that implements this).
pub trait RunMetrics: Send + Sync {
    /// The counters the built-in executors' I/O is added to.
    fn io_stats(&self) -> Arc<executor::throttle::IoStats>;
    fn subtask_started(&self, executor: &str);
    fn subtask_finished(&self, executor: &str, success: bool, took: Duration);
}

struct RunningSub {
    /// `None` for the in-process `noop` executor, done at the next poll.
    exec: Option<Running>,
    kind: ExecutorKind,
    /// Who dispatched it: poked when its result is written.
    manager: Option<NodeId>,
    /// Monotonic start, for the executor duration metric.
    started: Duration,
    /// Its folder has a `Cancel` mark: killed, its end still to report.
    cancelled: bool,
}

/// An attempt this round may start.
enum Candidate {
    /// A layout 2 subtask; `marked`: claimed already (by whom is read).
    Sub { name: Name, marked: bool },
    /// A layout 3 unit; `ours`: this incarnation's claim is there already.
    Unit { batch: String, unit: u32, attempt: u32, ours: bool },
}

impl Candidate {
    /// The task it is of (empty for a name that does not parse).
    fn task(&self) -> String {
        let task = match self {
            Candidate::Sub { name, .. } => layouts::v2::parse_subtask_name(name.as_str()).map(|(t, ..)| t),
            Candidate::Unit { batch, .. } => layouts::v3::parse_batch_name(batch).map(|(t, ..)| t),
        };
        task.map(|t| t.to_string()).unwrap_or_default()
    }
}

/// The order in which attempts start: one of each task in turn (the task
/// first in line changing every round), not in name order, so that no
/// task, however many units it has in this folder or however fast they
/// fail, keeps another task's units from starting within a round.
fn fair_order(candidates: Vec<Candidate>, rotation: usize) -> Vec<Candidate> {
    let mut by_task: BTreeMap<String, std::collections::VecDeque<Candidate>> = BTreeMap::new();
    for c in candidates {
        by_task.entry(c.task()).or_default().push_back(c);
    }
    let mut queues: Vec<_> = by_task.into_values().collect();
    let n = queues.len().max(1);
    queues.rotate_left(rotation % n);
    let mut out = Vec::new();
    while queues.iter().any(|q| !q.is_empty()) {
        out.extend(queues.iter_mut().filter_map(|q| q.pop_front()));
    }
    out
}

/// The subtasks this node is running.
pub struct Worker {
    me: NodeId,
    running: BTreeMap<Slot, RunningSub>,
    /// Results not yet written to the tree, with the manager to poke.
    reports: BTreeMap<Slot, (ExecutorKind, executor::Finished, Option<NodeId>)>,
    /// Attempts this incarnation saw claimed by an earlier one (never run).
    reported: BTreeSet<Slot>,
    /// Layout 3 batch infos read (never rewritten), or why one cannot be
    /// run from; kept while the batch is in the folder.
    infos: BTreeMap<String, Result<Arc<BatchInfo>, String>>,
    /// Draining: nothing starts; places released so far.
    draining: bool,
    released: BTreeSet<String>,
    /// Woken when an executor ends, so that its result is reported at
    /// once instead of at the next poll.
    wake: Option<Arc<Wakeup>>,
    /// Managers to wake: a result of theirs was written.
    pokes: Pokes,
    metrics: Option<Arc<dyn RunMetrics>>,
    /// Its live executors' process groups, under the node's session guard.
    groups: executor::Groups,
    /// The node's I/O limit of its built-in executors, if one is set.
    io: Option<executor::throttle::IoLimit>,
    /// Rounds so far: which task's attempts start first ([`fair_order`]).
    rotation: usize,
}

impl Worker {
    pub fn new(me: NodeId) -> Worker {
        Worker {
            me,
            running: BTreeMap::new(),
            reports: BTreeMap::new(),
            reported: Default::default(),
            infos: BTreeMap::new(),
            draining: false,
            released: Default::default(),
            wake: None,
            pokes: Pokes::default(),
            metrics: None,
            groups: executor::Groups::guarded(),
            io: None,
            rotation: 0,
        }
    }

    /// Limits the I/O of the built-in executors it starts from now on.
    pub fn set_io_limit(&mut self, mut io: executor::throttle::IoLimit) {
        if let Some(m) = &self.metrics {
            io.count_into(m.io_stats());
        }
        self.io = Some(io);
    }

    /// The process groups of its live executors.
    pub fn groups(&self) -> executor::Groups {
        self.groups.clone()
    }

    /// Records executor starts, ends and durations into `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<dyn RunMetrics>) {
        if let Some(io) = self.io.as_mut() {
            io.count_into(metrics.io_stats());
        }
        self.metrics = Some(metrics);
    }

    /// The managers to wake since the last call.
    pub fn take_pokes(&mut self) -> Pokes {
        self.pokes.take()
    }

    /// Wakes `wake` whenever an executor ends.
    pub fn set_wakeup(&mut self, wake: Arc<Wakeup>) {
        self.wake = Some(wake);
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Executors running, or ends not yet reported.
    pub fn busy(&self) -> bool {
        !self.running.is_empty() || !self.reports.is_empty()
    }

    /// Starts nothing from now on and releases what is not claimed (warm
    /// shutdown); running attempts go on and are reported.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// Reports what finished and is not reported yet, until `deadline`: a
    /// node leaving at once says what is done before it kills the rest.
    pub async fn flush_reports(
        &mut self,
        store: &Store,
        incarnation: u64,
        wall_ms: u64,
        deadline: &Deadline,
    ) -> store::Result<()> {
        self.collect_finished(deadline.now());
        self.write_reports(store, incarnation, wall_ms, deadline).await
    }

    /// Kills every executor: the node rejoined under a new incarnation, so
    /// this work is no longer its own (managers re-dispatch it).
    pub fn drop_all(&mut self) {
        self.reports.clear();
        for (slot, mut r) in std::mem::take(&mut self.running) {
            tracing::warn!(subtask = %slot, "dropping the work of the old incarnation");
            if let Some(e) = r.exec.as_mut() {
                e.kill();
            }
        }
    }

    /// The manager of a layout 3 attempt, from its batch's info.
    fn manager_of(&self, slot: &Slot) -> Option<NodeId> {
        match slot {
            Slot::Sub(_) => None,
            Slot::Unit { batch, .. } => self.infos.get(batch).and_then(|i| i.as_ref().ok()).map(|i| i.manager.clone()),
        }
    }

    /// One poll over this node's folder.
    pub async fn round(
        &mut self,
        store: &Store,
        cfg: &WorkConfig,
        incarnation: u64,
        folder: &NodeFolder,
        wall_ms: u64,
        deadline: &Deadline,
    ) -> store::Result<()> {
        // Moved away (its folder or info is gone): kill, and forget any
        // unsent report.
        let gone: Vec<Slot> =
            self.running.keys().chain(self.reports.keys()).filter(|s| s.gone_from(folder)).cloned().collect();
        for slot in gone {
            self.reports.remove(&slot);
            if let Some(mut r) = self.running.remove(&slot) {
                tracing::info!(subtask = %slot, "subtask moved away: killing its executor");
                if let Some(e) = r.exec.as_mut() {
                    e.kill();
                }
            }
        }
        self.infos.retain(|b, _| folder.batches.contains_key(b));
        self.released.retain(|p| folder.batches.contains_key(p) || folder.subtasks.contains_key(p));
        // Taken back (a `Cancel` mark): kill, and report its end once it is
        // dead (the manager waits for that).
        self.cancel(folder);
        self.collect_finished(deadline.now());
        let finished_here: BTreeSet<Slot> = self.reports.keys().cloned().collect();
        self.write_reports(store, incarnation, wall_ms, deadline).await?;
        if deadline.passed() {
            return Ok(());
        }
        if self.draining {
            let (n, managers) = release_unstarted(store, &self.me, folder, wall_ms, &mut self.released).await?;
            if n > 0 {
                tracing::info!(released = n, "draining: released what this node had not started");
            }
            managers.iter().for_each(|m| self.pokes.hint(m));
            return Ok(());
        }
        // New: start, as many as there is room for. The claims and reads go
        // out concurrently; each attempt's executor starts once its own
        // claim is made (and, in a batch, the batch listed after it).
        if !self.groups.may_start(incarnation, deadline.now()) {
            // The session guard is closed (no heartbeat counted yet, or past
            // its deadline): claim nothing that could not start.
            return Ok(());
        }
        let mut first_err = self.read_infos(store, folder).await.err();
        let room = cfg.max_running.saturating_sub(self.running.len());
        self.rotation = self.rotation.wrapping_add(1);
        let candidates = self.start_candidates(folder, incarnation, &finished_here);
        let candidates: Vec<Candidate> = fair_order(candidates, self.rotation).into_iter().take(room).collect();
        if let Err(e) = self.start(store, cfg, incarnation, candidates, wall_ms, deadline).await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Kills the attempts marked `Cancel`, and acknowledges those that do
    /// not run here (never started here, or by an earlier incarnation of
    /// this process, whose executors were killed at its rejoin).
    fn cancel(&mut self, folder: &NodeFolder) {
        let subs = folder.subtasks.keys().map(|n| Slot::Sub(n.clone()));
        let units = folder
            .batches
            .iter()
            .flat_map(|(b, f)| f.units.keys().map(|(u, a)| Slot::Unit { batch: b.clone(), unit: *u, attempt: *a }));
        let mut acks = vec![];
        for slot in subs.chain(units).filter(|s| s.cancelled_in(folder)) {
            match self.running.get_mut(&slot) {
                Some(r) if !r.cancelled => {
                    tracing::info!(subtask = %slot, "subtask cancelled by its manager: killing its executor");
                    r.cancelled = true;
                    if let Some(e) = r.exec.as_mut() {
                        e.kill();
                    }
                }
                None if !self.reports.contains_key(&slot) => acks.push(slot),
                _ => {}
            }
        }
        for slot in acks {
            let f = executor::Finished {
                success: false,
                exit_code: None,
                error: Some("cancelled by its manager; not running on this node".into()),
                tail: String::new(),
            };
            let manager = self.manager_of(&slot);
            self.reports.insert(slot, (ExecutorKind::Noop, f, manager));
        }
    }

    /// Ended executors become reports: kept until written (a failed write
    /// is retried next poll instead of losing the result).
    fn collect_finished(&mut self, now: Duration) {
        let finished: Vec<Slot> = self
            .running
            .iter_mut()
            .filter_map(|(slot, r)| {
                let done = match r.exec.as_mut() {
                    Some(e) => e.try_finish(now),
                    None => {
                        Some(executor::Finished { success: true, exit_code: Some(0), error: None, tail: String::new() })
                    }
                };
                done.map(|f| {
                    if let Some(m) = &self.metrics {
                        m.subtask_finished(r.kind.label(), f.success, now.saturating_sub(r.started));
                    }
                    self.reports.insert(slot.clone(), (r.kind, f, r.manager.clone()));
                    slot.clone()
                })
            })
            .collect();
        for slot in &finished {
            self.running.remove(slot);
        }
    }

    /// Writes the reports, [`WRITE_CONCURRENCY`] at a time (on fs each is a
    /// synced write, and concurrent syncs share the journal's commits);
    /// each one's order (output, then status, then the poke) is kept inside
    /// its own future. Unwritten reports are kept for the next poll.
    async fn write_reports(
        &mut self,
        store: &Store,
        incarnation: u64,
        wall_ms: u64,
        deadline: &Deadline,
    ) -> store::Result<()> {
        let me = self.me.clone();
        let pending: Vec<_> = self.reports.iter().map(|(n, r)| (n.clone(), r.clone())).collect();
        let mut first_err = None;
        let mut writes = futures::stream::iter(pending)
            .take_while(|_| std::future::ready(!deadline.passed()))
            .map(|(slot, (kind, f, manager))| {
                let me = &me;
                async move {
                    let r = write_report(store, me, incarnation, wall_ms, &slot, kind, &f).await;
                    (slot, manager, r)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY);
        while let Some((slot, manager, r)) = writes.next().await {
            match r {
                Ok(state) => {
                    self.reports.remove(&slot);
                    if let Some(m) = &manager {
                        self.pokes.hint(m);
                    }
                    tracing::info!(subtask = %slot, %state, "subtask finished");
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Reads the `Info` of every batch not read yet (once: it never
    /// changes). One that cannot be run from is released, so that its
    /// manager gives its units to another node instead of waiting.
    async fn read_infos(&mut self, store: &Store, folder: &NodeFolder) -> store::Result<()> {
        let me = &self.me;
        let want: Vec<Name> = folder
            .batches
            .iter()
            // A released batch only for a claim of it that has not ended:
            // it may be this incarnation's, to report unstarted.
            .filter(|(_, f)| !f.released || f.units.values().any(|m| !m.running.is_empty() && !m.terminal()))
            .filter(|(b, f)| f.has_info && !self.infos.contains_key(*b))
            .filter_map(|(b, _)| Name::parse(b).ok())
            .collect();
        type Read = (Name, store::Result<Option<Result<BatchInfo, String>>>);
        let read: Vec<Read> = futures::stream::iter(want)
            .map(|b| async move {
                let r = read_batch_info(store, me, &b).await;
                (b, r)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut first_err = None;
        for (b, r) in read {
            match r {
                Ok(Some(Ok(info))) => {
                    self.infos.insert(b.to_string(), Ok(Arc::new(info)));
                }
                Ok(Some(Err(why))) => {
                    tracing::warn!(batch = %b, "releasing the batch: {why}");
                    match store.create(&layouts::v3::batch_released(me, &b), Vec::new()).await {
                        Ok(_) => {
                            self.infos.insert(b.to_string(), Err(why));
                        }
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The attempts this round may start, in the order it starts them: the
    /// subtask folders by name, then each batch's units in its order. Not
    /// running here, not finished here, and unclaimed; or claimed by this
    /// incarnation, which lost track of it (the claim's write landed but
    /// its reply was lost): then it is started again, or, released since,
    /// reported as never started.
    fn start_candidates(
        &self,
        folder: &NodeFolder,
        incarnation: u64,
        finished_here: &BTreeSet<Slot>,
    ) -> Vec<Candidate> {
        let free = |s: &Slot| !self.running.contains_key(s) && !finished_here.contains(s);
        let subs = folder
            .subtasks
            .iter()
            .filter(|(name, f)| f.has_info && free(&Slot::Sub(name.to_string())))
            .filter(|(name, f)| {
                // Running but not run here: by an earlier incarnation (its
                // manager re-dispatches it), or by this one (`prepare`
                // reads the mark to tell).
                f.markers.is_empty()
                    || (f.state() == SubtaskState::Running && !self.reported.contains(&Slot::Sub(name.to_string())))
            })
            .filter_map(|(name, f)| {
                Name::parse(name).ok().map(|n| Candidate::Sub { name: n, marked: !f.markers.is_empty() })
            });
        let units = folder.batches.iter().filter(|(_, f)| f.has_info).flat_map(move |(b, f)| {
            let info = self.infos.get(b).and_then(|i| i.as_ref().ok()).cloned();
            info.into_iter().flat_map(move |info| {
                let b = b.clone();
                info.units
                    .iter()
                    .filter_map(|u| {
                        let m = f.marks(u.unit, u.attempt);
                        let slot = Slot::Unit { batch: b.clone(), unit: u.unit, attempt: u.attempt };
                        // Ours even if released since: `prepare_batch` lists the
                        // batch and reports it ended unstarted, which its
                        // manager waits for (the claim may have come first).
                        let ours = m.running == [incarnation] && !(m.cancel || m.terminal() || m.output);
                        let fresh = m == Default::default() && !f.released;
                        (free(&slot) && (fresh || ours)).then_some(Candidate::Unit {
                            batch: b.clone(),
                            unit: u.unit,
                            attempt: u.attempt,
                            ours,
                        })
                    })
                    .collect::<Vec<_>>()
            })
        });
        subs.chain(units).collect()
    }

    /// Claims `candidates` and starts those that are this incarnation's.
    async fn start(
        &mut self,
        store: &Store,
        cfg: &WorkConfig,
        incarnation: u64,
        candidates: Vec<Candidate>,
        wall_ms: u64,
        deadline: &Deadline,
    ) -> store::Result<()> {
        let me = self.me.clone();
        let mut subs = vec![];
        let mut batches: BTreeMap<String, Vec<(u32, u32, bool)>> = BTreeMap::new();
        for c in candidates {
            match c {
                Candidate::Sub { name, marked } => subs.push((name, marked)),
                Candidate::Unit { batch, unit, attempt, ours } => {
                    batches.entry(batch).or_default().push((unit, attempt, ours))
                }
            }
        }
        let mut first_err = None;
        let mut starts = futures::stream::iter(subs)
            .take_while(|_| std::future::ready(!deadline.passed()))
            .map(|(sub, marked)| {
                let me = &me;
                async move {
                    let r = prepare(store, cfg, me, incarnation, &sub, marked, wall_ms).await;
                    (Slot::Sub(sub.to_string()), r)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY);
        let mut prepared = vec![];
        while let Some((slot, r)) = starts.next().await {
            match r {
                Ok(p) => prepared.push((slot, p)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        drop(starts);
        type Job = (Name, Arc<BatchInfo>, Vec<(u32, u32, bool)>);
        let jobs: Vec<Job> = batches
            .into_iter()
            .filter_map(|(b, units)| {
                let info = self.infos.get(&b)?.as_ref().ok()?.clone();
                Some((Name::parse(&b).ok()?, info, units))
            })
            .collect();
        let mut claims = futures::stream::iter(jobs)
            .take_while(|_| std::future::ready(!deadline.passed()))
            .map(|(b, info, units)| {
                let me = &me;
                async move {
                    let (out, err) = prepare_batch(store, cfg, me, incarnation, &b, &info, units).await;
                    (b, out, err)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY);
        while let Some((b, out, err)) = claims.next().await {
            if let Some(e) = err {
                first_err.get_or_insert(e);
            }
            for ((unit, attempt), p) in out {
                prepared.push((Slot::Unit { batch: b.to_string(), unit, attempt }, p));
            }
        }
        drop(claims);
        for (slot, p) in prepared {
            match p {
                Prepared::Start { req, manager } => self.launch(&slot, &req, manager, incarnation, deadline.now()),
                Prepared::Earlier => {
                    tracing::info!(subtask = %slot, "claimed by another incarnation of this node (or taken back by its manager): leaving it");
                    self.reported.insert(slot);
                }
                Prepared::Released { manager } => {
                    tracing::info!(subtask = %slot, "released after this node claimed it: not started");
                    let f = executor::Finished {
                        success: false,
                        exit_code: None,
                        error: Some("released before it started; nothing ran".into()),
                        tail: String::new(),
                    };
                    self.reports.insert(slot, (ExecutorKind::Noop, f, Some(manager)));
                    if let Some(w) = &self.wake {
                        w.poke(Scope::Work);
                    }
                }
                Prepared::Nothing => {}
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Starts the executor of `slot`, whose claim is written.
    fn launch(&mut self, slot: &Slot, req: &ExecRequest, manager: Option<NodeId>, incarnation: u64, now: Duration) {
        let kind = req.kind;
        if kind == ExecutorKind::Noop {
            self.running.insert(slot.clone(), RunningSub { exec: None, kind, manager, started: now, cancelled: false });
            if let Some(m) = &self.metrics {
                m.subtask_started(kind.label());
            }
            // Done already: report on the next tick, not the next poll.
            if let Some(w) = &self.wake {
                w.poke(Scope::Work);
            }
            return;
        }
        let on_exit = self.wake.clone().map(|w| Box::new(move || w.poke(Scope::Work)) as executor::OnExit);
        match executor::spawn(req, now, &self.groups, incarnation, self.io.as_ref(), on_exit) {
            Ok(exec) => {
                tracing::info!(subtask = %slot, pid = exec.pid(), ?kind, "subtask started");
                let r = RunningSub { exec: Some(exec), kind, manager, started: now, cancelled: false };
                self.running.insert(slot.clone(), r);
                if let Some(m) = &self.metrics {
                    m.subtask_started(kind.label());
                }
            }
            Err(e) => {
                // Reported like an executor that failed at once: the
                // manager retries the unit (on another attempt).
                tracing::warn!(subtask = %slot, "could not start the executor: {e}");
                let error = Some(format!("could not start the executor: {e}"));
                let f = executor::Finished { success: false, exit_code: None, error, tail: String::new() };
                self.reports.insert(slot.clone(), (kind, f, manager));
                if let Some(w) = &self.wake {
                    w.poke(Scope::Work);
                }
            }
        }
    }
}

#[cfg(test)]
mod fairness {
    use super::*;
    use layouts::TaskId;

    /// A task with 300 units in the folder (failing ones are taken again
    /// and again) and a task with one, in either layout: with one free slot
    /// a round, the small one starts within two rounds, with two at once.
    #[test]
    fn a_large_task_does_not_keep_a_small_one_from_starting() {
        let big = TaskId::parse("aaaaaaaa.17000000.00000000.0").unwrap();
        let small = TaskId::parse("ffffffff.17000000.00000000.0").unwrap();
        for layout in [2, 3] {
            let of = |t: &TaskId, u: u32| match layout {
                2 => Candidate::Sub { name: layouts::v2::subtask_name(t, 0, u, 0), marked: false },
                _ => Candidate::Unit {
                    batch: layouts::v3::batch_name(t, 0, layouts::v3::BatchNo::new(1, 1)).to_string(),
                    unit: u,
                    attempt: 1,
                    ours: false,
                },
            };
            let names = || {
                let mut v: Vec<Candidate> = (0..300).map(|u| of(&big, u)).collect();
                v.push(of(&small, 0));
                v
            };
            let is_small = |c: &Candidate| c.task().starts_with("ffffffff");
            let first = fair_order(names(), 1);
            assert!(first.iter().take(2).any(is_small), "layout {layout}");
            let picked: Vec<bool> = (0..2).map(|r| fair_order(names(), r).first().is_some_and(is_small)).collect();
            assert!(picked.contains(&true), "layout {layout}: one slot a round, the small task waits a round at most");
            assert_eq!(first.len(), 301, "every candidate stays in line");
        }
    }
}
