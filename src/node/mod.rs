//! One cluster node: heartbeat, election, monitor duties and event
//! consumption, advanced one [`Node::tick`] at a time.
//!
//! The node owns all its state; the daemon calls `tick` on an interval and
//! tests call it directly with a [`ManualClock`](crate::clock::ManualClock),
//! so every timeout is testable without sleeping. A tick never fails: backend
//! errors and unreadable files are logged and retried on the next tick.

pub mod claim;
pub mod daemon;
mod drain;
mod plan;
mod session;
mod work;

pub use plan::{Grant, PlannerLink, PlannerTask};

pub use session::report_trip;

use work::InboxWatch;
pub use work::{Work, FULL_LIST_EVERY};

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use layouts::formats::{EventKind, Lease};
use layouts::{v2, NodeId};
use store::Store;

use std::collections::BTreeMap;

use crate::clock::{Deadline, SharedClock};
use crate::cluster::election::{Election, Step};
use crate::cluster::events::EventConsumer;
use crate::cluster::wake::{Poker, Pokes, Scope, Wakeup, Woken};
use crate::monitor::{Monitor, MonitorError};

use crate::tasks::worker::{WorkConfig, Worker};

/// Fraction of the session after the start of the last counted heartbeat
/// at which the session guard kills the node's executors and ends its
/// incarnation ([`session`], layouts/PROTOCOL.md "The session guard").
pub const GUARD_FRACTION: f64 = 0.8;

/// `run --drain-timeout`'s default: long enough for a typical compaction
/// unit to end after a first SIGTERM. systemd's stop timeout follows the
/// drain (the daemon extends it while it drains, `serve::systemd`), so
/// contrib/compactd.service's `TimeoutStopSec` only bounds a daemon too
/// stuck to say so.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a node leaving spends at most on reporting the units that
/// finished since its last tick, before it kills the rest: short, since a
/// second SIGTERM means "now".
const LEAVE_FLUSH: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    pub heartbeat: Duration,
    pub session_timeout: Duration,
    pub lease: Duration,
    pub event_retention: Duration,
    /// The highest tree layout this node lets the cluster switch to
    /// (`run --max-layout`): it advertises the layouts it reads up to it.
    pub max_layout: u32,
    /// As a tree's first monitor, put the newest layout in force at once
    /// on a tree no older node joined (monitor/layout.rs). `compactd run`
    /// sets it; `new` does not, so that in-process clusters keep writing
    /// their first tasks in layout 2, which their checks read.
    pub newest_on_fresh_tree: bool,
    /// How long a warm shutdown waits for running units before it stops
    /// them (`run --drain-timeout`; zero: a first SIGTERM stops at once).
    pub drain_timeout: Duration,
}

impl NodeConfig {
    pub fn new(id: NodeId) -> Self {
        NodeConfig {
            id,
            heartbeat: Duration::from_secs(10),
            session_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            event_retention: Duration::from_secs(2 * 3600),
            max_layout: layouts::v3::NEWEST,
            newest_on_fresh_tree: false,
            drain_timeout: DRAIN_TIMEOUT,
        }
    }

    /// The layouts its heartbeat advertises: those it reads, up to
    /// `max_layout`.
    pub fn layouts(&self) -> Vec<u32> {
        layouts::v3::READS.iter().copied().filter(|l| *l <= self.max_layout).collect()
    }

    /// How often the daemon ticks: often enough to beat on time, to renew a
    /// lease three times per lease, and to notice an expired lease within
    /// one poll.
    pub fn tick_interval(&self) -> Duration {
        self.heartbeat.min(self.lease / 3).max(Duration::from_millis(10))
    }
}

/// Counters a test or `compactd nodes` can read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub incarnation: u64,
    pub rejoins: u64,
    pub fenced_actions: u64,
    pub elected: u64,
    pub events_seen: u64,
    pub event_gaps: u64,
}

pub struct Node {
    cfg: NodeConfig,
    store: Store,
    clock: SharedClock,
    beat: u64,
    /// When the last counted heartbeat write started (monotonic).
    last_beat_ok: Option<Duration>,
    /// The session guard's deadline in force (`None` before this
    /// incarnation's first counted beat): see [`session`].
    guard: Option<Duration>,
    /// Incarnations that ended here, whose `Ended` marker is still to write.
    ended: Vec<(u64, String)>,
    next_beat_at: Duration,
    next_scan_at: Duration,
    election: Election,
    monitor: Option<Monitor>,
    consumer: Option<EventConsumer>,
    reported: HashSet<String>,
    stats: NodeStats,
    work: Option<Work>,
    /// The lease this node took over from, kept until its monitor starts.
    previous_view: Option<Lease>,
    /// Job instances were running at the last drive.
    jobs_active: bool,
    next_jobs_at: Duration,
    /// When the job drive next looks at the job schedules: a sweep
    /// interval after it last did, or the next fire instant if sooner.
    next_schedules_at: Duration,
    /// Wake-ups: this node's own (its executors poke it), the sender of its
    /// pokes, and the address its heartbeat advertises. None in-process.
    wake: Option<Arc<Wakeup>>,
    poker: Option<Poker>,
    addr: Option<String>,
    /// Nodes to poke once this tick's writes are done.
    pokes: Pokes,
    inbox: InboxWatch,
    /// This incarnation's join marker is written (`Registry/Joins/`).
    join_marked: bool,
    /// The previous process under this id is known gone (its id claim was
    /// taken over): the incarnation its heartbeat names has ended.
    prior_gone: bool,
    /// The previous process's heartbeat was read; this incarnation is larger.
    prior_checked: bool,
    metrics: Option<Arc<crate::serve::metrics::Metrics>>,
    /// The policy planner's task, while this node is the monitor ([`plan`]),
    /// and the settings it starts with.
    planner: Option<PlannerLink>,
    planner_cfg: crate::policy::PlannerConfig,
    /// Set by a first SIGTERM: when this node started draining (monotonic).
    draining: Option<Duration>,
    /// The join marker that makes the monitor read the draining heartbeat
    /// is written.
    drain_announced: bool,
    /// The epoch of the view under which `Registry/` was last listed for
    /// layout markers (at start, then once per new monitor).
    layout_listed_epoch: Option<u64>,
    /// The highest layout in force this node has judged whether it can
    /// take part in.
    layout_judged: u32,
}

impl Node {
    pub fn new(cfg: NodeConfig, store: Store, clock: SharedClock) -> Node {
        let incarnation = clock.wall_ms().max(1);
        let election = Election::new(cfg.id.clone(), incarnation, cfg.lease).with_clock(clock.clone());
        Node {
            cfg,
            store,
            clock,
            beat: 0,
            last_beat_ok: None,
            guard: None,
            ended: Vec::new(),
            next_beat_at: Duration::ZERO,
            next_scan_at: Duration::ZERO,
            election,
            monitor: None,
            consumer: None,
            reported: HashSet::new(),
            stats: NodeStats { incarnation, ..NodeStats::default() },
            work: None,
            previous_view: None,
            jobs_active: false,
            next_jobs_at: Duration::ZERO,
            next_schedules_at: Duration::ZERO,
            wake: None,
            poker: None,
            addr: None,
            pokes: Pokes::default(),
            inbox: InboxWatch::default(),
            join_marked: false,
            prior_gone: false,
            prior_checked: false,
            metrics: None,
            planner: None,
            planner_cfg: crate::policy::PlannerConfig::default(),
            draining: None,
            drain_announced: false,
            layout_listed_epoch: None,
            layout_judged: 0,
        }
    }

    /// Records what this node does into `metrics` (its worker's executors,
    /// the monitor's sweep and event log).
    pub fn with_metrics(mut self, metrics: Arc<crate::serve::metrics::Metrics>) -> Node {
        if let Some(w) = self.work.as_mut() {
            w.worker.set_metrics(metrics.clone());
        }
        self.metrics = Some(metrics);
        self
    }

    /// This process claimed the node id after the previous one was gone
    /// ([`claim`]): the incarnation the previous one left in the heartbeat
    /// is marked ended at the first beat.
    pub fn previous_process_gone(&mut self) {
        self.prior_gone = true;
    }

    /// When the last counted heartbeat write started (monotonic).
    pub fn last_beat_ok(&self) -> Option<Duration> {
        self.last_beat_ok
    }

    /// The process groups of this node's executors (with the task layer).
    pub fn executor_groups(&self) -> Option<crate::executor::Groups> {
        Some(self.work.as_ref()?.worker.groups())
    }

    /// The session guard's deadline in force: by then this node's executors
    /// are dead and its incarnation over, unless a heartbeat counts first
    /// ([`session`]). `None` before this incarnation's first counted beat
    /// (no executor may start then).
    pub fn guard_deadline(&self) -> Option<Duration> {
        self.guard
    }

    /// The newest member view lists this node under its incarnation.
    pub fn is_member(&self) -> bool {
        self.members().get(&self.cfg.id) == Some(&self.stats.incarnation)
    }

    /// Monitor only: change events in the log (see [`Monitor::events_kept`]).
    pub fn monitor_events_kept(&self) -> Option<usize> {
        self.monitor.as_ref().and_then(|m| m.events_kept())
    }

    /// Enables wake-ups: the node advertises `addr` (where its listener
    /// feeds `wake`), its executors poke `wake` when they end, and it pokes
    /// the nodes its writes concern.
    pub fn with_wakeups(mut self, addr: Option<String>, wake: Arc<Wakeup>) -> Node {
        self.addr = addr;
        self.poker = Some(Poker::new(wake.clone(), Some(self.stamper())));
        if let Some(w) = self.work.as_mut() {
            w.worker.set_wakeup(wake.clone());
        }
        self.wake = Some(wake);
        self
    }

    /// Enables the task layer: this node runs subtasks and manages tasks.
    pub fn with_work(mut self, cfg: WorkConfig, data: Store) -> Node {
        let mut worker = Worker::new(self.cfg.id.clone());
        if let Some(rate) = cfg.io_limit {
            worker.set_io_limit(crate::executor::throttle::IoLimit::new(rate, self.clock.clone()));
        }
        if let Some(w) = &self.wake {
            worker.set_wakeup(w.clone());
        }
        if let Some(m) = &self.metrics {
            worker.set_metrics(m.clone());
        }
        self.work = Some(Work {
            cfg,
            data,
            worker,
            managers: BTreeMap::new(),
            next_sweep_at: Duration::ZERO,
            sweep: None,
            handovers: Default::default(),
            rotation: 0,
        });
        self
    }

    /// Executors running on this node.
    pub fn running_subtasks(&self) -> usize {
        self.work.as_ref().map(|w| w.worker.running()).unwrap_or(0)
    }

    pub fn id(&self) -> &NodeId {
        &self.cfg.id
    }

    /// What the metrics registry records after a tick.
    pub fn tick_report(&self) -> crate::serve::metrics::TickReport {
        let s = self.stats();
        crate::serve::metrics::TickReport {
            incarnation: s.incarnation,
            fenced_actions: s.fenced_actions,
            rejoins: s.rejoins,
            is_monitor: self.is_monitor(),
            epoch: self.view().map(|v| v.epoch).unwrap_or(0),
            running: self.running_subtasks(),
            events_kept: self.monitor_events_kept(),
            members: self.view().map(|v| (v.members.len(), v.offline.len())),
            policies: self.planner.as_ref().map(PlannerLink::figures).unwrap_or_default(),
        }
    }

    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Makes a monitor's next task sweep due at its next scan instead of
    /// after `--sweep` (simulations: a sweep over a prepared tree).
    pub fn sweep_now(&mut self) {
        if let Some(w) = self.work.as_mut() {
            w.next_sweep_at = Duration::ZERO;
        }
    }

    pub fn is_monitor(&self) -> bool {
        self.election.is_leader() && self.monitor.is_some()
    }

    pub fn monitor_epoch(&self) -> Option<u64> {
        self.election.epoch()
    }

    /// The newest lease this node has read or written.
    pub fn view(&self) -> Option<&Lease> {
        self.election.view()
    }

    /// One round of work (a poll). Never fails; problems are logged and
    /// retried. Returns true when task work was left for the next tick
    /// because this one ran out of time (see [`Deadline`]): the caller
    /// should tick again at once instead of waiting a poll interval.
    pub async fn tick(&mut self) -> bool {
        self.tick_with(None).await
    }

    /// What this node stamps other nodes' inboxes with.
    fn stamper(&self) -> crate::cluster::wake::Inbox {
        crate::cluster::wake::Inbox {
            store: self.store.clone(),
            from: self.cfg.id.to_string(),
            clock: self.clock.clone(),
        }
    }

    /// A poll tick that also serves pokes that arrived since the last tick
    /// (the daemon's poll when both are due): a `work` poke makes the poll
    /// list the folder even if the inbox stamp says nothing changed.
    pub async fn tick_poll(&mut self, pending: Woken) -> bool {
        self.inbox.poked |= pending.has(Scope::Work);
        self.tick_with(None).await
    }

    /// A tick between polls, for pokes: only what `woken` asks for (the
    /// node's folder, the monitor's job drive), plus whatever is due by the
    /// clock (a heartbeat, a lease renewal, a membership scan). A follower
    /// does not read the lease here: that is the poll's job, and a flood of
    /// pokes must not multiply it.
    pub async fn tick_woken(&mut self, woken: Woken) -> bool {
        self.tick_with(Some(woken)).await
    }

    async fn tick_with(&mut self, woken: Option<Woken>) -> bool {
        if let (Some(w), Some(p)) = (&self.wake, &self.planner) {
            // Counted, not coalesced: how many planner tasks ended.
            let (ended, policy) = w.take_planner_pokes();
            p.changed(ended, policy > 0);
        }
        let busy = self.tick_inner(woken).await;
        let mut pokes = self.pokes.take();
        if self.election.is_leader() && pokes.take_plan() {
            // A task this monitor managed ended: its own planner's.
            if let Some(p) = &self.planner {
                p.changed(1, false);
            }
        }
        if pokes.take_own(&self.cfg.id) {
            self.inbox.poked = true;
            if let Some(w) = &self.wake {
                w.poke(Scope::Work);
            }
        }
        if pokes.is_empty() {
            return busy;
        }
        let inbox = self.stamper();
        if self.poker.is_none() {
            // In-process (no listener, no wake-ups): every node it wrote for
            // finds out from its stamp.
            crate::cluster::wake::stamp_all(&inbox, &pokes.work_nodes()).await;
            return busy;
        }
        if woken.is_some() && !self.election.is_leader() && pokes.resolve(self.election.view()).unknown > 0 {
            // A node to poke that our view (read at the last poll) does not
            // list: it joined since. Read the newest view once, now.
            if let Err(e) = self.election_round(self.clock.mono()).await {
                tracing::warn!("election round failed: {e}");
            }
        }
        if let Some(p) = &self.poker {
            let unsent = p.send(&pokes, self.election.view());
            crate::cluster::wake::stamp_all(&inbox, &unsent).await;
        }
        busy
    }

    async fn tick_inner(&mut self, woken: Option<Woken>) -> bool {
        let poll = woken.is_none();
        let woken = woken.unwrap_or(Woken::ALL);
        let now = self.clock.mono();
        // A quarter of the session (or lease): the next heartbeat (or lease
        // renewal) is late by at most that plus one backend operation, well
        // inside the session; a shorter budget would cut busy ticks short
        // and repeat their listings for nothing.
        let budget = self.cfg.session_timeout.min(self.cfg.lease) / 4;
        let incarnation = self.stats.incarnation;
        self.check_guard(now);
        if self.stats.incarnation != incarnation {
            // A new incarnation beats at the next tick, once the daemon has
            // checked that no newer process took this node id meanwhile (a
            // process stalled past its session must not beat beside it).
            return true;
        }
        if now >= self.next_beat_at {
            match self.write_heartbeat(now).await {
                Ok(()) => self.announce_drain().await,
                Err(e) => tracing::warn!("heartbeat failed: {e}"),
            }
        }
        if !self.ended.is_empty() {
            self.mark_ended(None).await;
        }
        // Task work stops at the guard's deadline too: past it this
        // incarnation may be declared offline, and its writes are stale.
        let deadline = Deadline::new(self.clock.clone(), (now + budget).min(self.guard.unwrap_or(Duration::MAX)));
        if poll || self.election.is_leader() {
            if let Err(e) = self.election_round(now).await {
                tracing::warn!("election round failed: {e}");
            }
        }
        if self.election.is_leader() && self.monitor.is_none() {
            // Elected, but taking up the duties failed (a transient error):
            // a lease holder must not sit idle while followers defer to it.
            self.start_monitor(now, None).await;
        }
        if self.election.is_leader() && now >= self.next_scan_at {
            self.monitor_round(now, &deadline).await;
        } else {
            if !poll && woken.has(Scope::Monitor) && self.monitor.is_some() {
                // A job step's task ended, or a job was triggered: drive now.
                self.jobs_active = true;
                self.drive_jobs(now).await;
            }
            if self.monitor.is_some()
                && self.work.as_ref().is_some_and(|w| w.sweep.is_some() || !w.handovers.is_empty())
            {
                // Hand-overs and a sweep pass go on in the next ticks, not
                // the next scan.
                self.sweep_tasks(now, vec![], &deadline).await;
            }
        }
        if woken.has(Scope::Work) {
            if !poll {
                self.inbox.poked = true;
            }
            self.work_round(&deadline, poll || self.election.is_leader()).await;
            self.hand_over_managed().await;
        }
        if poll {
            if let Err(e) = self.consume_events().await {
                tracing::warn!("reading change events failed: {e}");
            }
        }
        deadline.cut_short()
    }

    /// Live members and their incarnations, from the newest view.
    fn members(&self) -> BTreeMap<layouts::NodeId, u64> {
        self.election
            .view()
            .map(|v| v.members.iter().map(|m| (m.node.clone(), m.incarnation)).collect())
            .unwrap_or_default()
    }

    /// Incarnations the newest view lists as declared offline.
    fn declared_offline(&self) -> std::collections::BTreeSet<(layouts::NodeId, u64)> {
        self.election
            .view()
            .map(|v| v.offline.iter().map(|m| (m.node.clone(), m.incarnation)).collect())
            .unwrap_or_default()
    }

    /// The command names each member advertises (from the view).
    /// The executors each member advertises (`None`: an older node).
    fn member_executors(&self) -> BTreeMap<layouts::NodeId, Option<Vec<String>>> {
        self.election
            .view()
            .map(|v| v.members.iter().map(|m| (m.node.clone(), m.executors.clone())).collect())
            .unwrap_or_default()
    }

    fn member_commands(&self) -> BTreeMap<layouts::NodeId, Vec<String>> {
        self.election
            .view()
            .map(|v| v.members.iter().map(|m| (m.node.clone(), m.commands.clone())).collect())
            .unwrap_or_default()
    }

    async fn election_round(&mut self, now: Duration) -> store::Result<()> {
        let wall = self.clock.wall_ms();
        match self.election.step(&self.store, now, wall).await? {
            Step::Nothing => {}
            Step::Elected { epoch, previous } => {
                self.stats.elected += 1;
                tracing::info!(epoch, "elected monitor");
                self.previous_view = previous;
                self.start_monitor(now, None).await;
            }
            Step::SteppedDown(f) => {
                self.stats.fenced_actions += 1;
                self.monitor = None;
                tracing::warn!("stepping down without acting: {f}");
            }
        }
        if !self.election.is_leader() {
            self.monitor = None;
            if let Some(p) = &self.planner {
                p.withdraw();
            }
            if let Some(w) = self.work.as_mut() {
                // Left to the next monitor's sweep.
                w.sweep = None;
                w.handovers.clear();
            }
        }
        // The layout in force is sticky: an older monitor elected meanwhile
        // publishes no layout, which must not lower it (see
        // [`Election::raise_layout_floor`]). Listed at start and once per
        // new epoch.
        let epoch = self.election.view().map(|v| v.epoch);
        if epoch.is_some() && epoch != self.layout_listed_epoch {
            match crate::tasks::listed_layout(&self.store).await {
                Ok(n) => {
                    self.election.raise_layout_floor(n);
                    self.layout_listed_epoch = epoch;
                }
                Err(e) => tracing::warn!("listing the layout markers failed (retried next round): {e}"),
            }
        }
        // `run` refuses such a tree; one whose layout went past this node's
        // while it ran (it started as a fresh tree's switch went up) gets
        // no work either, and must say why.
        let in_force = self.election.view().map_or(layouts::v3::LAYOUT_2, Lease::layout);
        if in_force > self.layout_judged {
            self.layout_judged = in_force;
            if let Some(why) = layouts::v3::cannot_take_part(in_force, self.cfg.max_layout) {
                tracing::error!("{why}; until then this node is given no work");
            }
        }
        if let Some(view) = self.election.view() {
            if view.offline.iter().any(|m| m.node == self.cfg.id && m.incarnation == self.stats.incarnation) {
                self.rejoin("the monitor declared this incarnation offline");
            }
        }
        Ok(())
    }

    /// The monitor epoch fence ([`Election::fence`]) before a monitor duty
    /// (task sweep, jobs); a fenced monitor steps
    /// down and counts the refused action. Returns the epoch if it may act.
    async fn monitor_duty_allowed(&mut self, now: Duration, duty: &str) -> Option<u64> {
        match self.election.fence(&self.store, now).await {
            Ok(Ok(epoch)) => Some(epoch),
            Ok(Err(f)) => {
                self.stats.fenced_actions += 1;
                self.monitor = None;
                tracing::warn!("{duty} refused, stepping down: {f}");
                None
            }
            Err(e) => {
                tracing::warn!("fence check before {duty} failed: {e}");
                None
            }
        }
    }

    /// The monitor drives job instances (only it, fenced by its epoch):
    /// every round while instances run, otherwise once per sweep interval,
    /// so that an idle cluster does not pay two listings per round for jobs.
    async fn drive_jobs(&mut self, now: Duration) {
        let Some(work) = self.work.as_ref() else { return };
        if self.monitor.is_none() || (!self.jobs_active && now < self.next_jobs_at) {
            return;
        }
        let sweep = work.cfg.sweep;
        if self.monitor_duty_allowed(now, "job drive").await.is_none() {
            return;
        }
        let wall = self.clock.wall_ms();
        let schedules = now >= self.next_schedules_at;
        match crate::jobs::drive_round(&self.store, &self.cfg.id, wall, schedules).await {
            Ok(report) => {
                self.jobs_active = report.instances > 0;
                report.managers.iter().for_each(|m| self.pokes.work(m));
                for e in report.errors {
                    tracing::warn!("job drive: {e}");
                }
                if schedules {
                    let to_fire = report.next_fire_ms.map(|f| Duration::from_millis(f.saturating_sub(wall)));
                    self.next_schedules_at = now + to_fire.map_or(sweep, |d| d.min(sweep));
                }
            }
            Err(e) => {
                tracing::warn!("job drive failed: {e}");
                self.next_schedules_at = self.next_schedules_at.max(now + sweep);
            }
        }
        self.next_jobs_at = (now + sweep).min(self.next_schedules_at);
    }

    async fn start_monitor(&mut self, now: Duration, _why: Option<&str>) {
        let wall = self.clock.wall_ms();
        let previous = self.previous_view.clone();
        match Monitor::start(
            &self.store,
            &mut self.election,
            self.cfg.id.clone(),
            previous,
            now,
            wall,
            self.cfg.event_retention,
        )
        .await
        {
            Ok(mut m) => {
                m.layout.look_fresh(&self.store, self.cfg.newest_on_fresh_tree).await;
                self.monitor = Some(m);
                self.next_scan_at = now;
                self.election.renew_soon();
            }
            Err(e) => self.monitor_failed(e),
        }
    }

    async fn monitor_round(&mut self, now: Duration, deadline: &Deadline) {
        let Some(monitor) = self.monitor.as_mut() else {
            return;
        };
        let wall = self.clock.wall_ms();
        match monitor.scan(&self.store, &mut self.election, now, wall).await {
            Ok(report) => {
                for a in report.anomalies {
                    if self.reported.insert(a.path.clone()) {
                        tracing::warn!(path = %a.path, "skipping: {}", a.problem);
                    }
                }
                for m in &report.joined {
                    tracing::info!(node = %m.node, incarnation = m.incarnation, "node joined");
                }
                for m in &report.left {
                    tracing::info!(node = %m.node, incarnation = m.incarnation, "node left");
                }
                let offline: Vec<(layouts::NodeId, u64)> =
                    report.declared_offline.iter().map(|m| (m.node.clone(), m.incarnation)).collect();
                if report.view_changed {
                    self.election.renew_soon();
                    if let Err(e) = self.election_round(now).await {
                        tracing::warn!("publishing the member view failed: {e}");
                    }
                }
                self.next_scan_at = now + self.cfg.heartbeat;
                self.sweep_tasks(now, offline, deadline).await;
                self.drive_jobs(now).await;
                self.plan_policies();
            }
            Err(e) => self.monitor_failed(e),
        }
    }

    fn monitor_failed(&mut self, e: MonitorError) {
        match e {
            MonitorError::Fenced(f) => {
                self.stats.fenced_actions += 1;
                self.monitor = None;
                tracing::warn!("monitor action refused, stepping down: {f}");
            }
            // Transient: the monitor state stays, the scan is retried.
            other => tracing::warn!("monitor round failed: {other}"),
        }
    }

    async fn consume_events(&mut self) -> store::Result<()> {
        let Some(last) = self.election.view().map(|v| v.last_event) else {
            return Ok(());
        };
        // A node follows the log from the moment it first sees it; the state
        // before that is in the member view.
        let consumer = self.consumer.get_or_insert(EventConsumer { cursor: last });
        if last < consumer.cursor {
            // The log is behind our cursor (restored from elsewhere, or
            // renumbered by an older version): follow it from here.
            consumer.cursor = last;
            self.stats.event_gaps += 1;
            tracing::warn!("the change log is behind this node's cursor; resynchronising from the member view");
            return Ok(());
        }
        if last == consumer.cursor {
            return Ok(());
        }
        let polled = consumer.poll(&self.store).await?;
        if polled.gap {
            self.stats.event_gaps += 1;
            tracing::warn!(
                "change events were purged before this node read them; resynchronising from the member view"
            );
        }
        for path in polled.unreadable {
            if self.reported.insert(path.clone()) {
                tracing::warn!(%path, "skipping unreadable change event");
            }
        }
        for e in polled.events {
            self.stats.events_seen += 1;
            tracing::debug!(seq = e.seq, epoch = e.epoch, "event {:?}", e.kind);
            if let EventKind::NodeOffline { node, incarnation } = &e.kind {
                if *node == self.cfg.id && *incarnation == self.stats.incarnation {
                    self.rejoin("a change event declared this incarnation offline");
                }
            }
        }
        Ok(())
    }

    /// Leaves the cluster cleanly: releases the lease if monitor, then
    /// removes the heartbeat so the monitor logs the departure at once.
    pub async fn leave(&mut self) {
        if let Some(w) = self.work.as_mut() {
            // What finished since the last tick is done work: reported
            // (briefly) before the rest is killed, or it would run again.
            let until = Deadline::new(self.clock.clone(), self.clock.mono() + LEAVE_FLUSH);
            let wall = self.clock.wall_ms();
            if let Err(e) = w.worker.flush_reports(&self.store, self.stats.incarnation, wall, &until).await {
                tracing::warn!("reporting finished units before leaving failed (their managers run them again): {e}");
            }
            // Executors first: the ended marker says they are dead.
            w.worker.groups().close();
            w.worker.drop_all();
            self.ended.push((self.stats.incarnation, "the node left the cluster".into()));
            self.mark_ended(None).await;
        }
        let wall = self.clock.wall_ms();
        if let Err(e) = self.election.release(&self.store, wall).await {
            tracing::warn!("releasing the lease failed: {e}");
        }
        self.monitor = None;
        if let Err(e) = self.store.delete(&v2::heartbeat(&self.cfg.id)).await {
            tracing::warn!("removing the heartbeat failed: {e}");
        }
        // A departed node's inbox stamp is read by nobody: one file less per
        // node that ever ran (a later write into its folder stamps anew).
        if let Err(e) = self.store.delete(&v2::inbox(&self.cfg.id)).await {
            tracing::warn!("removing the inbox stamp failed: {e}");
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.cfg.id).field("stats", &self.stats).finish()
    }
}
