//! The policy planner's own task: it runs beside the node's tick, never
//! inside it, so that however long a planning round takes (thousands of
//! tables, tens of thousands of patterns, a slow backend) the tick that
//! writes the heartbeat and renews the lease goes on.
//!
//! The node tells the task, through a [`PlannerLink`]:
//! - after each monitor round, a [`Grant`]: the epoch, the instant until
//!   which the lease may be acted on without renewal
//!   ([`crate::cluster::election::Election::acting_until`]) and the member
//!   view (the cluster's capacity), and that a round is due (at the
//!   monitor's pace, one per heartbeat); a node that is not the monitor
//!   withdraws the grant;
//! - that planner tasks ended (the count of `plan` pokes), or a policy was
//!   applied or resumed: a round runs at once.
//!
//! The task holds to its grant: it runs a round only before the grant's
//! instant, and only after one stat showed no newer epoch's lease (the
//! monitor's fence, [`crate::cluster::election::Election::fence`]); a
//! monitor round that finds the planner idle (no pass due or going on,
//! nothing waiting or in flight) runs no round and costs no stat. The tick
//! does not fence for the planner: that would be a stat per heartbeat, the
//! planner idle or not, beside the task's own. Once the stat found a newer
//! epoch the task ignores grants of its epoch (the tick learns it at its
//! next renewal). A new epoch starts a new planner (a new pass). At most one round runs at a
//! time, rounds start at least [`MIN_GAP`] apart (a burst of pokes is one
//! round), and a round that left work for lack of budget asks for the next
//! one [`MIN_GAP`] later. The task ends at the shutdown token, between
//! steps of a round if need be (a decision cut off half-way is completed
//! by the next planner, as after a crash); the daemon awaits it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use layouts::formats::Lease;
use layouts::{v2, NodeId};
use store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::cluster::wake::{Inbox, Poker, Pokes, Scope, Wakeup};
use crate::policy::planner::PolicyCounts;
use crate::policy::{Capacity, PlanReport, Planner, PlannerConfig};

/// Rounds start at least this far apart.
pub const MIN_GAP: Duration = Duration::from_millis(50);

/// What the monitor lets its planner act on.
#[derive(Debug, Clone)]
pub struct Grant {
    pub epoch: u64,
    /// Monotonic instant past which the lease may not be acted on.
    pub until: Duration,
    /// The member view: capacity and the managers' addresses.
    pub view: Lease,
}

#[derive(Default)]
struct Inner {
    grant: Option<Grant>,
    /// A monitor round passed: a full round is due.
    tick: bool,
    /// Planner tasks announced ended since the last round.
    ended: u64,
    /// A policy was applied or resumed: a pass is due.
    pass_soon: bool,
    figures: Vec<(String, PolicyCounts, u64)>,
}

struct Shared {
    inner: Mutex<Inner>,
    notify: Notify,
}

/// The node's side of the planner task.
#[derive(Clone)]
pub struct PlannerLink {
    shared: Arc<Shared>,
}

impl PlannerLink {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.shared.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A monitor round passed its fence: the planner may act until
    /// `grant.until`, and a round is due.
    pub fn tick(&self, grant: Grant) {
        self.with(|i| {
            i.grant = Some(grant);
            i.tick = true;
        });
        self.shared.notify.notify_one();
    }

    /// This node is not (or no longer) the monitor.
    pub fn withdraw(&self) {
        self.with(|i| i.grant = None);
    }

    /// `ended` planner tasks ended (`plan` pokes), and whether a policy was
    /// applied or resumed (`policy` pokes).
    pub fn changed(&self, ended: u64, policy: bool) {
        if ended == 0 && !policy {
            return;
        }
        self.with(|i| {
            i.ended += ended;
            i.pass_soon |= policy;
        });
        self.shared.notify.notify_one();
    }

    /// Per policy: the last complete pass's figures and the decisions taken.
    pub fn figures(&self) -> Vec<(String, PolicyCounts, u64)> {
        self.with(|i| i.figures.clone())
    }
}

/// What the task needs from its node.
pub struct PlannerTask {
    pub cfg: PlannerConfig,
    pub me: NodeId,
    pub store: Store,
    pub data: Store,
    pub clock: SharedClock,
    /// The node's own wake-up: a task it manages itself is announced there.
    pub wake: Arc<Wakeup>,
}

impl PlannerTask {
    /// Starts the task; it runs until `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> (PlannerLink, tokio::task::JoinHandle<()>) {
        let shared = Arc::new(Shared { inner: Mutex::new(Inner::default()), notify: Notify::new() });
        let link = PlannerLink { shared: shared.clone() };
        (link, tokio::spawn(self.run(shared, shutdown)))
    }

    async fn run(self, shared: Arc<Shared>, shutdown: CancellationToken) {
        let inbox = Inbox { store: self.store.clone(), from: self.me.to_string(), clock: self.clock.clone() };
        let poker = Poker::new(self.wake.clone(), Some(inbox.clone()));
        let mut planner: Option<(u64, Planner)> = None;
        // The newest epoch a stat found superseded.
        let mut superseded: Option<u64> = None;
        let mut follow_up: Option<Duration> = None;
        let mut last_start = Duration::ZERO;
        loop {
            let clock = &self.clock;
            // The task waits on real time here, as the daemon loop does.
            #[allow(clippy::disallowed_methods)]
            let sleep =
                tokio::time::sleep(follow_up.map_or(Duration::from_secs(3600), |at| at.saturating_sub(clock.mono())));
            tokio::select! {
                _ = shared.notify.notified() => {}
                _ = sleep => {}
                _ = shutdown.cancelled() => return,
            }
            #[allow(clippy::disallowed_methods)]
            let gap = tokio::time::sleep((last_start + MIN_GAP).saturating_sub(clock.mono()));
            tokio::select! {
                _ = gap => {}
                _ = shutdown.cancelled() => return,
            }
            let (grant, tick, ended, pass_soon) = {
                let mut i = shared.inner.lock().unwrap_or_else(|p| p.into_inner());
                (
                    i.grant.clone(),
                    std::mem::take(&mut i.tick),
                    std::mem::take(&mut i.ended),
                    std::mem::take(&mut i.pass_soon),
                )
            };
            let now = clock.mono();
            last_start = now;
            let due = follow_up.is_some_and(|at| now >= at);
            let Some(grant) = grant.filter(|g| now < g.until) else {
                // Not the monitor, or its lease not renewed lately: a new
                // grant (a new term) starts over.
                planner = planner.filter(|_| false);
                follow_up = None;
                continue;
            };
            if !(tick || ended > 0 || pass_soon || due) {
                continue;
            }
            let idle = planner.as_ref().is_some_and(|(e, p)| *e == grant.epoch && !p.has_work(now));
            if idle && ended == 0 && !pass_soon && !due {
                // Nothing to do this round: not even the fence's stat.
                continue;
            }
            if superseded.is_some_and(|e| e >= grant.epoch) {
                continue;
            }
            match self.store.exists(&v2::lease(grant.epoch + 1)).await {
                Ok(false) => {}
                Ok(true) => {
                    tracing::warn!(epoch = grant.epoch, "policy planning stops: a newer monitor epoch exists");
                    shared.inner.lock().unwrap_or_else(|p| p.into_inner()).grant = None;
                    planner = None;
                    superseded = Some(grant.epoch);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("fence check before policy planning failed: {e}");
                    continue;
                }
            }
            if planner.as_ref().is_none_or(|(epoch, _)| *epoch != grant.epoch) {
                let p = Planner::new(self.cfg.clone(), self.me.clone()).with_clock(clock.clone());
                planner = Some((grant.epoch, p));
            }
            let Some((_, p)) = planner.as_mut() else { continue };
            if pass_soon {
                p.pass_soon();
            }
            let cap = Capacity::of(Some(&grant.view));
            let wall = clock.wall_ms();
            let round = async {
                if tick || pass_soon {
                    p.round(&self.store, &self.data, &cap, now, wall).await
                } else {
                    p.changed(&self.store, &self.data, &cap, wall, ended).await
                }
            };
            let report = tokio::select! {
                r = round => r,
                _ = shutdown.cancelled() => return,
            };
            follow_up = report.more.then(|| clock.mono() + MIN_GAP);
            let figures = p.figures();
            shared.inner.lock().unwrap_or_else(|p| p.into_inner()).figures = figures;
            self.announce(&report, &grant.view, &poker, &inbox).await;
        }
    }

    /// Logs a round and pokes the managers of the tasks it submitted.
    async fn announce(&self, report: &PlanReport, view: &Lease, poker: &Poker, inbox: &Inbox) {
        for s in &report.submitted {
            tracing::info!("planner submitted {s}");
        }
        for e in &report.errors {
            tracing::warn!("planner: {e}");
        }
        let mut pokes = Pokes::default();
        report.managers.iter().for_each(|m| pokes.work(m));
        if pokes.take_own(&self.me) {
            self.wake.poke(Scope::Work);
        }
        if !pokes.is_empty() {
            let unsent = poker.send(&pokes, Some(view));
            crate::cluster::wake::stamp_all(inbox, &unsent).await;
        }
    }
}

impl super::Node {
    /// Starts the policy planner's own task (with the task layer and
    /// wake-ups: see this module); it acts while this node is the monitor and
    /// ends at `shutdown`, which its caller awaits.
    pub fn spawn_planner(
        &mut self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let (work, wake) = (self.work.as_ref()?, self.wake.clone()?);
        let task = PlannerTask {
            cfg: self.planner_cfg.clone(),
            me: self.cfg.id.clone(),
            store: self.store.clone(),
            data: work.data.clone(),
            clock: self.clock.clone(),
            wake,
        };
        let (link, handle) = task.spawn(shutdown);
        self.planner = Some(link);
        Some(handle)
    }

    /// The monitor's policy planner: after each monitor round its task may
    /// act until the lease's local validity ends, and runs a round, fenced
    /// by its own stat (this module). Nothing of it runs in the tick.
    pub(super) fn plan_policies(&mut self) {
        let Some(p) = self.planner.as_ref().filter(|_| self.monitor.is_some()) else { return };
        match (self.election.acting_until(), self.election.view()) {
            (Some((epoch, until)), Some(view)) => p.tick(Grant { epoch, until, view: view.clone() }),
            _ => p.withdraw(),
        }
    }
}
