//! A node's task layer: its worker, the tasks it manages, and the monitor's
//! task duties (hand-overs and the sweep), run from [`Node`]'s tick. The
//! node decides when (its tick, its role); this file decides what the task
//! layer does in that round.

use std::collections::BTreeMap;
use std::time::Duration;

use layouts::{v2, TaskId};
use store::Store;

use super::Node;
use crate::clock::Deadline;
use crate::tasks::manager::{Ctx, Flow, FolderCache, Placement, TaskManager};
use crate::tasks::worker::{list_node, WorkConfig, Worker};

/// An idle node lists its folder at least every this many polls even if its
/// inbox stamp did not change (10 minutes at the default 10 s polls): the
/// net under a writer that died between its write and its poke or stamp.
pub const FULL_LIST_EVERY: u32 = 60;

/// What an idle node knows of its inbox ([`crate::cluster::wake::stamp`]).
#[derive(Debug, Default)]
pub(super) struct InboxWatch {
    /// The stamp's bytes when last read (`Some(None)`: no stamp); `None`
    /// until read, or when a listing is owed regardless.
    pub(super) last: Option<Option<bytes::Bytes>>,
    /// Polls since the last listing of the folder.
    pub(super) polls_since_list: u32,
    /// The last listing found nothing: no subtask, no task to manage.
    pub(super) empty: bool,
    /// A `work` poke arrived that the next poll must honour with a listing.
    pub(super) poked: bool,
}

/// The task layer of a node: its worker, the tasks it manages, and the
/// monitor's task duties.
pub struct Work {
    pub cfg: WorkConfig,
    pub data: Store,
    pub(super) worker: Worker,
    pub(super) managers: BTreeMap<TaskId, TaskManager>,
    pub(super) next_sweep_at: Duration,
    /// The monitor's sweep pass in progress, if any.
    pub(super) sweep: Option<crate::monitor::tasks::SweepPass>,
    /// Tasks of offline managers the monitor has still to hand over.
    /// With the incarnation declared offline.
    pub(super) handovers: std::collections::VecDeque<(layouts::NodeId, u64, TaskId)>,
    /// Ticks so far: which manager goes first (see `work_round`).
    pub(super) rotation: usize,
}

impl Node {
    /// The task layer's round. `view_fresh`: the lease was read this tick.
    pub(super) async fn work_round(&mut self, deadline: &Deadline, view_fresh: bool) {
        if self.work.is_none() {
            return;
        }
        let me = self.cfg.id.clone();
        if !self.folder_may_have_changed().await {
            return;
        }
        let folder = match list_node(&self.store, &me).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("listing this node's folder failed: {e}");
                // The stamp that asked for this listing is not spent.
                self.inbox.last = None;
                return;
            }
        };
        self.inbox.empty = folder.is_idle();
        if !view_fresh && !folder.manages.is_empty() && !self.is_member() {
            // Poked to manage a task while our view (read at the last poll)
            // does not list us yet: read the lease now rather than leave
            // the task for the next poll. Only then, so pokes cost no GET.
            if let Err(e) = self.election_round(deadline.now()).await {
                tracing::warn!("election round failed: {e}");
            }
        }
        // This node's ended markers: old ones are removed.
        self.mark_ended(Some(&folder.ended)).await;
        // Read after the election round above, which may have ended the
        // incarnation: nothing is claimed or managed under an old one.
        let incarnation = self.stats.incarnation;
        let members = self.members();
        let offline = self.declared_offline();
        let member_commands = self.member_commands();
        let member_executors = self.member_executors();
        let placement = Placement::from_view(self.election.view());
        let wall = self.clock.wall_ms();
        let is_member = members.get(&me) == Some(&incarnation);
        let Some(work) = self.work.as_mut() else {
            return;
        };
        if let Err(e) = work.worker.round(&self.store, &work.cfg, incarnation, &folder, wall, deadline).await {
            tracing::warn!("worker round failed: {e}");
        }
        self.pokes.extend(work.worker.take_pokes());
        if !is_member {
            // Not (yet) in the monitor's view: managing now could race the
            // node the monitor handed our tasks to.
            return;
        }
        work.managers.retain(|id, _| folder.manages.contains(id));
        for id in &folder.manages {
            work.managers.entry(*id).or_insert_with(|| TaskManager::new(*id));
        }
        let mut cache = FolderCache::default();
        cache.insert(me.clone(), folder);
        let mut done = vec![];
        // Out of time, the managers after the current one wait a tick; who
        // goes first rotates, so that under load no task starves.
        work.rotation = work.rotation.wrapping_add(1);
        let first = work.rotation % work.managers.len().max(1);
        let order: Vec<TaskId> = work.managers.keys().cycle().skip(first).take(work.managers.len()).copied().collect();
        for id in order {
            if deadline.passed() {
                break;
            }
            let m = work.managers.get_mut(&id).expect("listed above");
            let mut ctx = Ctx {
                store: &self.store,
                data: &work.data,
                me: &me,
                members: &members,
                offline: &offline,
                commands: &member_commands,
                executors: &member_executors,
                placement: &placement,
                cfg: &work.cfg,
                wall_ms: wall,
                folders: &mut cache,
                deadline,
                pokes: &mut self.pokes,
            };
            match m.round(&mut ctx).await {
                Ok(Flow::Continue) => {}
                Ok(Flow::Finished(_)) => {
                    if let Some(w) = &self.wake {
                        w.ends.ended(id);
                    }
                    done.push(id)
                }
                Ok(Flow::Fenced) => done.push(id),
                Err(e) => tracing::warn!(task = %id, "manager round failed: {e}"),
            }
        }
        for id in done {
            work.managers.remove(&id);
            if let Err(e) = self.store.delete(&layouts::v2::manage_pointer(&me, &id)).await {
                tracing::warn!(task = %id, "removing the manager pointer failed: {e}");
            }
        }
    }

    /// Whether this tick must list the node's folder. Yes when poked, busy
    /// (running subtasks, managing tasks, or a non-empty folder at the last
    /// listing), every [`FULL_LIST_EVERY`] polls, and when the inbox stamp
    /// changed since it was last read. The stamp is read before the listing
    /// it triggers, so a stamp written after that read is seen as a change
    /// at the next poll: a write announced by a stamp is never missed.
    pub(super) async fn folder_may_have_changed(&mut self) -> bool {
        // A draining node lists at every tick: what it was given meanwhile
        // is released at once.
        let busy = self.draining.is_some()
            || self.work.as_ref().is_some_and(|w| w.worker.running() > 0 || !w.managers.is_empty());
        let w = &mut self.inbox;
        let must = std::mem::take(&mut w.poked) || busy || !w.empty || w.polls_since_list + 1 >= FULL_LIST_EVERY;
        if !must {
            w.polls_since_list += 1;
            match self.store.read(&v2::inbox(&self.cfg.id)).await {
                Ok(now) if w.last.as_ref() == Some(&now) => return false,
                Ok(now) => w.last = Some(now),
                Err(e) => tracing::warn!("reading this node's inbox stamp failed, listing the folder instead: {e}"),
            }
        } else if w.last.is_none() {
            // Not read yet: read it now, so that the next idle poll compares
            // against a stamp older than this listing.
            w.last = self.store.read(&v2::inbox(&self.cfg.id)).await.ok();
        }
        self.inbox.polls_since_list = 0;
        true
    }

    /// The monitor's task duties after a membership scan: hand over the
    /// tasks of offline managers, and start or continue a sweep pass
    /// ([`crate::monitor::tasks::SweepPass`]), together for at most half the
    /// tick's budget, so the monitor's own work keeps the rest; what is left
    /// goes on in the next ticks.
    pub(super) async fn sweep_tasks(
        &mut self,
        now: Duration,
        offline: Vec<(layouts::NodeId, u64)>,
        deadline: &Deadline,
    ) {
        let Some(work) = self.work.as_ref() else { return };
        let sweep_due = now >= work.next_sweep_at || work.sweep.is_some();
        if offline.is_empty() && work.handovers.is_empty() && !sweep_due {
            return;
        }
        // Candidates: the members, and always the monitor itself (its own
        // view may not list it yet right after an election).
        // Not draining nodes, nor nodes that do not read the layout in force:
        // with none, a task whose manager is over is left, never ended.
        let mut members = crate::tasks::may_manage(self.election.view());
        if !members.contains(&self.cfg.id) && self.draining.is_none() {
            members.push(self.cfg.id.clone());
        }
        let Some(epoch) = self.monitor_duty_allowed(now, "monitor task duty").await else { return };
        let wall = self.clock.wall_ms();
        // Half the tick's budget (a quarter of the session or lease).
        let share = self.cfg.session_timeout.min(self.cfg.lease) / 8;
        let until = Deadline::new(self.clock.clone(), (self.clock.mono() + share).min(deadline.at()));
        // A node declared offline under an old incarnation but alive under a
        // new one keeps its tasks.
        for (node, inc) in offline.into_iter().filter(|(n, _)| !members.contains(n)) {
            match crate::monitor::tasks::managed_by(&self.store, &node).await {
                Ok(tasks) => {
                    let Some(work) = self.work.as_mut() else { return };
                    work.handovers.extend(tasks.into_iter().map(|t| (node.clone(), inc, t)));
                }
                Err(e) => tracing::warn!(%node, "listing the tasks of an offline manager failed: {e}"),
            }
        }
        let Some(work) = self.work.as_mut() else { return };
        while let Some((node, inc, task)) = work.handovers.front().cloned() {
            if until.passed() {
                deadline.leave_work();
                return;
            }
            work.handovers.pop_front();
            if members.contains(&node) {
                continue;
            }
            let mut r = crate::monitor::tasks::SweepReport::default();
            match crate::monitor::tasks::take_over(&self.store, &node, inc, &task, &members, wall, &mut r).await {
                Ok(()) => r.reassigned.iter().for_each(|(_, to)| self.pokes.work(to)),
                // Left to the sweep, which hands over any active task whose
                // manager is not live.
                Err(e) => tracing::warn!(%node, %task, "handing over a task of an offline manager failed: {e}"),
            }
        }
        if !sweep_due {
            return;
        }
        if work.sweep.is_none() {
            work.next_sweep_at = now + work.cfg.sweep;
            work.sweep = Some(Default::default());
        }
        let declared = self.declared_offline();
        let Some(work) = self.work.as_mut() else { return };
        let Some(pass) = work.sweep.as_mut() else { return };
        let swept =
            crate::monitor::tasks::sweep(&self.store, pass, &members, &declared, &work.cfg, wall, epoch, &until).await;
        match swept {
            Ok((r, finished)) => {
                if finished {
                    work.sweep = None;
                    if let Some(m) = &self.metrics {
                        m.tasks_by_state(&r.by_state);
                    }
                } else {
                    deadline.leave_work();
                }
                r.reassigned.iter().for_each(|(_, to)| self.pokes.work(to));
                if r.archived + r.garbage_removed + r.reassigned.len() + r.waiting.len() > 0 {
                    tracing::info!(
                        archived = r.archived,
                        garbage = r.garbage_removed,
                        reassigned = r.reassigned.len(),
                        waiting = r.waiting.len(),
                        "task sweep"
                    )
                }
            }
            Err(e) => {
                // The next pass starts over from a new listing.
                work.sweep = None;
                tracing::warn!("task sweep failed: {e}");
            }
        }
    }
}
