//! The planner: the monitor's duty that keeps the policies' tables compact.
//!
//! A **pass** visits every table some policy owns (the most specific
//! matching pattern wins; see [`super::assign`]), in the order of the
//! policies' weights. Each round (fenced like the monitor's other duties)
//! continues the pass where the previous round stopped, visiting tables
//! until it has spent its request budget ([`PlannerConfig::budget`]); a new
//! pass starts [`PlannerConfig::interval`] after the previous one ended, or
//! at once when a policy is applied or resumed ([`Planner::pass_soon`]). A
//! table is visited with one recursive listing of its folder on the data
//! backend (one request per 1,000 files on S3), one listing of its
//! `Decisions/`, and writes only for what changed; its `Summary` is read
//! at the planner's first visit only ([`super::track::Known`]). Where the
//! data backend lists on after a key (S3's `start-after`), a listing that
//! reaches the round's budget stops there and the next round goes on from
//! that key. A pass going on from an earlier
//! round drops the tables of policies paused or out of their windows since:
//! pausing takes effect at the next round.
//!
//! A partition is **due** when it has at least two small files and one of
//! its policy's thresholds is met (`min-small-files`, `min-small-bytes`, or
//! its oldest small file, as first seen by the planner, is older than
//! `max-small-age`), it is not being compacted (a stopped task counts as
//! compacting for [`PlannerConfig::stop_settle`] after it is first seen
//! stopped: its executors may run until their workers notice), and its last
//! decision is at least `min-interval` old.
//!
//! **Fair share, work-conserving.** A visit takes no decision: the due
//! partitions wait in the planner ([`super::track`]), and every round hands
//! the cluster's free slots to the tables that have some waiting, by weight
//! ([`super::share`]): a table alone with a backlog gets every slot, tables
//! with backlogs share them, and a small table gets the next slot that
//! frees. **Planning on change**: when a planner task ends (its manager
//! pokes the monitor) the planner runs a round at once ([`Planner::changed`])
//! that looks at its tasks in flight (one listing each) and submits into
//! the slots that freed, without listing any table again; the interval's
//! passes are what finds new files. A round spends at most its budget
//! (plus one table's visit, and one decision if it took none): what waits
//! beyond it is submitted by the next round, which the planner then runs
//! soon ([`PlanReport::more`]).
//!
//! **Exactly once.** A decision is the atomic create of the partition's
//! next `Decisions/<partition>.<seq>.Claim`, taken only when the previous
//! decision's task has ended; then the task is submitted carrying the
//! claim's marker, then `.Task` records its id. A planner that finds a
//! claim without `.Task` (its author died or was fenced mid-way) looks for
//! the marked task ([`crate::tasks::find_marked`]) and records it; only if
//! there is none, and the claim is its own or older than
//! [`crate::jobs::drive::CLAIM_GRACE_MS`], does it submit again.
//!
//! A policy with a `schedule` is planned in the first pass after each fire
//! (catch-up: one pass for any number of missed fires), recorded in its
//! `LastPass` when that pass ends, and what that pass found due is
//! submitted until it is all done; with `windows`, its tables are visited,
//! and their due partitions submitted, only while a window is open. Paused
//! policies' tables are not visited.

use std::collections::BTreeMap;
use std::time::Duration;

use layouts::formats::encode;
use layouts::policies::{self as paths, LastPass, PolicyDefinition, TableSummary};
use layouts::{Name, NodeId};
use store::Store;

use super::define::{self, read_json};
use super::share::{allocate, Capacity, Demand};
use super::track::{self, Tracks};
use super::visit::{executor_of, Listing, TableCursor, Visit};
use super::{assign, Owned, PlanReport, PolicyError};
use crate::schedule::{Cron, Windows};

#[derive(Debug, Clone)]
pub struct PlannerConfig {
    /// Time between the end of a pass and the start of the next.
    pub interval: Duration,
    /// How long a partition whose task was stopped stays in flight after
    /// the planner first sees it stopped: a stop deletes the units'
    /// folders, and a worker kills an executor when it sees its folder gone
    /// (its next poll, at most a heartbeat) or, cut from the backend, when
    /// its session guard fires (the session timeout). Set by `run` to its
    /// session timeout plus its heartbeat.
    pub stop_settle: Duration,
    /// Backend requests a round may spend (on S3 a table's listing stops at
    /// it and goes on next round; elsewhere a table is listed whole within
    /// one round).
    pub budget: u64,
    /// Time a round may spend visiting tables (with a clock, see
    /// [`Planner::with_clock`]): what is left of the pass goes on next
    /// round. A bound on its CPU, whatever the tables cost to judge.
    pub round_time: Duration,
    /// The monitor's round (its heartbeat): how long a unit may wait
    /// behind others on a slot, all together.
    pub heartbeat: Duration,
    /// Units waiting behind each slot at most (at least one). More than
    /// one only while the planner's tasks round trip (decision to seen
    /// ended) in a fraction of a round: `heartbeat / round trip` wait,
    /// at most this many, so that they all start within a round.
    pub max_waiting_per_slot: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            interval: Duration::from_secs(60),
            budget: 200,
            stop_settle: Duration::from_secs(40),
            round_time: Duration::from_secs(2),
            heartbeat: Duration::from_secs(10),
            max_waiting_per_slot: 3,
        }
    }
}

/// Per-policy figures of the last complete pass, for `/metrics` (labels:
/// the policy only, never a table or partition).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyCounts {
    pub tables: u64,
    pub due_partitions: u64,
    pub in_flight: u64,
    pub small_files: u64,
}

struct Pass {
    items: Vec<Owned>,
    next: usize,
    /// Where the listing of `items[next]` stopped, if a round's budget ran
    /// out in it.
    cursor: Option<TableCursor>,
    /// Scheduled policies planned in this pass: their fire, recorded in
    /// `LastPass` when the pass ends.
    fired: BTreeMap<Name, u64>,
}

/// Why a policy's tables are not visited now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Paused,
    /// Outside its windows: when one opens next.
    Closed {
        opens: Option<u64>,
    },
    /// A schedule that has not fired since its last planned fire: when it
    /// fires next.
    Schedule {
        next: Option<u64>,
    },
    /// Windows or schedule that do not parse (a definition written by hand).
    Bad(String),
}

impl Gate {
    /// Words for people, with the instant in the policy's zone.
    pub fn describe(&self, p: &PolicyDefinition) -> String {
        let when = |ms: u64| {
            let local = crate::schedule::local_time(ms, &p.time_zone).unwrap_or_default();
            format!("{} ({local}, {})", super::at(ms), p.time_zone)
        };
        match self {
            Gate::Paused => "paused".into(),
            Gate::Closed { opens } => format!(
                "outside its windows {}{}",
                p.windows.join(", "),
                opens.map(|t| format!(": opens at {}", when(t))).unwrap_or_default()
            ),
            Gate::Schedule { next } => format!(
                "waiting for its schedule {:?}{}",
                p.schedule.as_deref().unwrap_or_default(),
                next.map(|t| format!(": next fire at {}", when(t))).unwrap_or_default()
            ),
            Gate::Bad(why) => why.clone(),
        }
    }

    /// When it changes by itself (a window opens, the schedule fires).
    pub fn until(&self) -> Option<u64> {
        match self {
            Gate::Closed { opens } => *opens,
            Gate::Schedule { next } => *next,
            _ => None,
        }
    }
}

/// The planner's state between rounds; a new monitor starts a new pass.
pub struct Planner {
    cfg: PlannerConfig,
    me: NodeId,
    pass: Option<Pass>,
    next_pass_at: Duration,
    /// A pass was asked for while one was going on: the next starts when
    /// it ends, not an interval later.
    again: bool,
    /// What is in flight and what waits, per table.
    tracks: Tracks,
    /// The last complete pass's figures per policy.
    pub counts: BTreeMap<String, PolicyCounts>,
    /// The pass in progress's figures.
    current: BTreeMap<String, PolicyCounts>,
    /// Decisions taken by this planner per policy (monotonic).
    pub decisions: BTreeMap<String, u64>,
    /// Bounds a round's visits in time ([`PlannerConfig::round_time`]).
    clock: Option<crate::clock::SharedClock>,
}

impl Planner {
    pub fn new(cfg: PlannerConfig, me: NodeId) -> Planner {
        Planner {
            cfg,
            me,
            pass: None,
            next_pass_at: Duration::ZERO,
            again: false,
            tracks: Tracks::default(),
            counts: BTreeMap::new(),
            current: BTreeMap::new(),
            decisions: BTreeMap::new(),
            clock: None,
        }
    }

    /// Bounds each round's visits to [`PlannerConfig::round_time`] on `clock`.
    pub fn with_clock(mut self, clock: crate::clock::SharedClock) -> Planner {
        self.clock = Some(clock);
        self
    }

    /// Per policy: the last complete pass's figures and the decisions taken.
    pub fn figures(&self) -> Vec<(String, PolicyCounts, u64)> {
        let mut names: Vec<&String> = self.counts.keys().chain(self.decisions.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    self.counts.get(n).cloned().unwrap_or_default(),
                    self.decisions.get(n).copied().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Units in flight and due partitions waiting for a slot, as the
    /// planner knows them.
    pub fn backlog(&self) -> (u64, usize) {
        (self.tracks.in_flight(), self.tracks.queued())
    }

    /// Whether a round at `now` would do anything: a pass due or going on,
    /// partitions waiting, or tasks in flight to look at. An idle
    /// planner's rounds are skipped, fence check included.
    pub fn has_work(&self, now: Duration) -> bool {
        self.pass.is_some() || now >= self.next_pass_at || self.tracks.queued() > 0 || self.tracks.in_flight() > 0
    }

    /// Units waiting behind each slot now: one, or more while the tasks'
    /// round trip is a fraction of a round ([`PlannerConfig::heartbeat`]).
    pub fn waiting_per_slot(&self) -> u64 {
        let most = self.cfg.max_waiting_per_slot.max(1);
        match self.tracks.round_trip_ms() {
            None => 1,
            Some(r) => (self.cfg.heartbeat.as_millis() as u64 / r.max(1)).clamp(1, most),
        }
    }

    /// A policy was applied or resumed: the next round starts a pass (or,
    /// while one goes on, the next one starts as soon as it ends).
    pub fn pass_soon(&mut self) {
        if self.pass.is_some() {
            self.again = true;
        } else {
            self.next_pass_at = Duration::ZERO;
        }
    }

    /// One round: goes on with the pass (starting one when due), then
    /// hands the free slots to what waits, what its visits just found due
    /// included (so a table found due competes for the slots at once, not
    /// after those freed meanwhile went to the tables already waiting), and
    /// writes the summaries that changed.
    pub async fn round(
        &mut self,
        store: &Store,
        data: &Store,
        cap: &Capacity,
        now: Duration,
        wall_ms: u64,
    ) -> PlanReport {
        let mut report = PlanReport::default();
        self.pass_round(store, data, now, wall_ms, &mut report).await;
        self.share(store, data, cap, wall_ms, None, &mut report).await;
        self.tracks.flush(store, wall_ms, &mut report).await;
        report
    }

    /// A round on change: `ended` planner tasks were announced ended (the
    /// `plan` pokes; 0 when the last round left due partitions for lack of
    /// budget). Looks at the tasks in flight, oldest first, until it found
    /// that many ended, and submits into the slots that freed, listing no
    /// table.
    pub async fn changed(
        &mut self,
        store: &Store,
        data: &Store,
        cap: &Capacity,
        wall_ms: u64,
        ended: u64,
    ) -> PlanReport {
        let mut report = PlanReport::default();
        self.share(store, data, cap, wall_ms, Some(ended), &mut report).await;
        self.tracks.flush(store, wall_ms, &mut report).await;
        report
    }

    /// Visits tables of the pass within the round's budget, starting a pass
    /// when one is due. A pass that goes on from an earlier round first
    /// drops the tables of policies paused or out of their windows since
    /// (one stat per policy).
    async fn pass_round(&mut self, store: &Store, data: &Store, now: Duration, wall_ms: u64, report: &mut PlanReport) {
        match self.pass.as_mut() {
            None => {
                if now < self.next_pass_at {
                    return;
                }
                match self.start_pass(store, data, wall_ms, report).await {
                    Ok(p) => self.pass = Some(p),
                    Err(e) => {
                        report.errors.push(format!("starting a planning pass: {e}"));
                        self.next_pass_at = now + self.cfg.interval;
                        return;
                    }
                }
            }
            Some(pass) => recheck(store, pass, wall_ms, report).await,
        }
        let Some(pass) = self.pass.as_mut() else { return };
        // Every round takes at least one step, whatever the pass's start or
        // the recheck cost: a budget smaller than those still progresses.
        let mut stepped = false;
        let until = self.clock.as_ref().map(|c| c.mono() + self.cfg.round_time);
        let late = || until.is_some_and(|u| self.clock.as_ref().is_some_and(|c| c.mono() >= u));
        while pass.next < pass.items.len() && (!stepped || (report.requests < self.cfg.budget && !late())) {
            stepped = true;
            let item = &pass.items[pass.next];
            let mut visit = visit(store, data, &self.me, &self.cfg, wall_ms, item);
            let from = pass.cursor.take().unwrap_or_default();
            let left = self.cfg.budget.saturating_sub(report.requests).max(1);
            let result = match visit.list_data(from, Some(left)).await {
                Ok(Listing::More(cursor)) => {
                    pass.cursor = Some(cursor);
                    report.requests += visit.requests;
                    break;
                }
                Ok(Listing::Done(tallied)) => visit.table(tallied, self.tracks.known.take(item), report).await,
                Err(e) => Err(e),
            };
            *self.decisions.entry(item.policy.name.to_string()).or_default() += visit.decisions;
            report.requests += visit.requests;
            match result {
                Ok(judged) => {
                    let c = self.current.entry(item.policy.name.to_string()).or_default();
                    c.tables += 1;
                    c.small_files += judged.summary.small_files;
                    c.in_flight += judged.summary.in_flight;
                    c.due_partitions += judged.summary.detail.iter().filter(|p| p.due).count() as u64;
                    self.tracks.absorb(item, judged, wall_ms);
                }
                Err(e) => report.errors.push(format!("planning {}/{}/{}: {e}", item.db, item.schema, item.table)),
            }
            report.tables_visited += 1;
            pass.next += 1;
            if report.tables_visited.is_multiple_of(64) {
                tokio::task::yield_now().await;
            }
        }
        if pass.next >= pass.items.len() {
            for (policy, fire_ms) in std::mem::take(&mut pass.fired) {
                let last = LastPass { fire_ms, by: self.me.to_string() };
                report.requests += 1;
                if let Err(e) = store.put(&paths::policy_last_pass(&policy), encode(&last)).await {
                    report.errors.push(format!("recording the pass of policy {policy}: {e}"));
                }
            }
            self.pass = None;
            tracing::debug!(tables = self.current.values().map(|c| c.tables).sum::<u64>(), "planner pass ended");
            self.counts = std::mem::take(&mut self.current);
            self.next_pass_at = if std::mem::take(&mut self.again) { now } else { now + self.cfg.interval };
            report.pass_ended = true;
        }
    }

    /// Looks at the tasks in flight, then hands the free slots to the
    /// tables with due partitions waiting and takes those decisions, within
    /// the round's budget (one decision at least).
    async fn share(
        &mut self,
        store: &Store,
        data: &Store,
        cap: &Capacity,
        wall_ms: u64,
        ended: Option<u64>,
        report: &mut PlanReport,
    ) {
        // Also with nothing waiting: what ended is what `tables` shows,
        // and what the next due partitions find free.
        if self.tracks.in_flight() > 0 {
            self.tracks.refresh(store, (self.cfg.budget / 2).max(1), ended, wall_ms, report).await;
        }
        if self.tracks.queued() == 0 {
            return;
        }
        // Per policy, for the round: why it may not submit now.
        let mut open: BTreeMap<Name, Option<String>> = BTreeMap::new();
        let free = cap.target(self.waiting_per_slot()).saturating_sub(self.tracks.in_flight());
        let mut demands = vec![];
        let mut keys = vec![];
        let waiting: Vec<String> =
            self.tracks.by_table.iter().filter(|(_, t)| !t.queue.is_empty()).map(|(k, _)| k.clone()).collect();
        for k in waiting {
            let policy = self.tracks.by_table[&k].item.policy.clone();
            let why = match open.get(&policy.name) {
                Some(w) => w.clone(),
                None => {
                    let w = may_submit(store, &policy, cap, wall_ms, report).await;
                    open.insert(policy.name.clone(), w.clone());
                    w
                }
            };
            let t = self.tracks.by_table.get_mut(&k).expect("listed above");
            if t.blocked != why {
                t.blocked = why.clone();
                t.dirty = true;
            }
            // An Iceberg table's next task waits for its running one.
            let waits_for_its_task = super::one_task_per_table(&policy) && !t.in_flight.is_empty();
            if why.is_none() && !waits_for_its_task {
                let in_flight = t.in_flight.len() as u64;
                let queued = t.queue.len() as u64;
                demands.push(Demand {
                    weight: policy.weight,
                    in_flight,
                    queued,
                    cap: policy.max_units_per_table,
                    since: t.since,
                });
                keys.push(k);
            }
        }
        let (_, order) = allocate(&demands, free);
        // A slot is a partition; an Iceberg table's share of them is one
        // task, whose committer commits them together.
        // The retention is a task of its own, never in a compaction's; on
        // such a table it runs alone too, as its next task waits for the
        // running one.
        let mut picks: Vec<(usize, Vec<usize>)> = vec![];
        for idx in order {
            let t = self.tracks.by_table.get_mut(&keys[idx]).expect("listed above");
            let Some(i) = t.queue.pop_front() else { continue };
            let retention = |i: usize| super::retention::is_retention(&t.summary.detail[i]);
            let alone = super::one_task_per_table(&t.item.policy);
            match picks.iter_mut().find(|(k, _)| *k == idx) {
                Some((_, group)) if alone && (retention(i) || group.iter().any(|&j| retention(j))) => {
                    t.queue.push_front(i);
                }
                Some((_, group)) if alone => group.push(i),
                _ => picks.push((idx, vec![i])),
            }
        }
        let mut sent = vec![];
        for n in 0..picks.len() {
            // One decision at least, whatever it costs.
            if n > 0 && report.requests >= self.cfg.budget {
                report.more = true;
                // What is not decided waits in front, in its order.
                for (idx, group) in picks[n..].iter().rev() {
                    let t = self.tracks.by_table.get_mut(&keys[*idx]).expect("listed above");
                    group.iter().rev().for_each(|i| t.queue.push_front(*i));
                }
                break;
            }
            let (idx, group) = &picks[n];
            let order = self.tracks.learn();
            let t = self.tracks.by_table.get_mut(&keys[*idx]).expect("listed above");
            let track::Track { item, summary, in_flight, dirty, .. } = t;
            let mut visit = visit(store, data, &self.me, &self.cfg, wall_ms, item);
            match visit.decide(&mut summary.detail, group, report).await {
                Ok(now) => {
                    for i in now {
                        let d = &summary.detail[i];
                        in_flight.insert(d.partition.clone(), (d.task, order));
                        sent.extend(d.task);
                        if !super::retention::is_retention(d) {
                            summary.last_compaction_wall_ms = Some(wall_ms);
                            summary.last_task = d.task.or(summary.last_task);
                        }
                    }
                }
                Err(e) => report.errors.push(format!("deciding {}: {e}", track::key(item))),
            }
            *dirty = true;
            report.requests += visit.requests;
            *self.decisions.entry(item.policy.name.to_string()).or_default() += visit.decisions;
        }
        for id in sent {
            self.tracks.sent(id, wall_ms);
        }
    }

    async fn start_pass(
        &mut self,
        store: &Store,
        data: &Store,
        wall_ms: u64,
        report: &mut PlanReport,
    ) -> Result<Pass, PolicyError> {
        let mut bad = vec![];
        let rows = define::list(store, &mut bad).await?;
        report.errors.extend(bad.into_iter().map(|e| e.to_string()));
        let owned = assign(data, &rows).await?;
        let mut fired = BTreeMap::new();
        let mut gates = BTreeMap::new();
        for row in &rows {
            let p = &row.definition;
            gates.insert(p.name.clone(), gate(store, row.paused, p, wall_ms, &mut fired).await);
        }
        // What starting a pass cost: the listing of Policies/, a listing and
        // a read per policy, a LastPass read per scheduled one, and the data
        // root's listings down to the tables (counted per folder listed).
        let scheduled = rows.iter().filter(|r| r.definition.schedule.is_some()).count() as u64;
        let folders: std::collections::BTreeSet<String> =
            owned.iter().flat_map(|o| [o.db.to_string(), format!("{}/{}", o.db, o.schema)]).collect();
        report.requests += 1 + 2 * rows.len() as u64 + scheduled + 1 + folders.len() as u64;
        self.current = rows.iter().map(|r| (r.definition.name.to_string(), PolicyCounts::default())).collect();
        // What waits goes on waiting only in tables the same policy still
        // plans: open now, or planned at a fire and still being worked off.
        let owners: BTreeMap<String, &Name> = owned.iter().map(|o| (track::key(o), &o.policy.name)).collect();
        self.tracks.known.retain(|k| owners.contains_key(k));
        self.tracks.retain_queues(|k, t| {
            owners.get(k).is_some_and(|p| {
                **p == t.item.policy.name && matches!(gates.get(*p), Some(None | Some(Gate::Schedule { .. })))
            })
        });
        let mut items: Vec<Owned> =
            owned.into_iter().filter(|o| gates.get(&o.policy.name).is_some_and(Option::is_none)).collect();
        items.sort_by(|a, b| {
            b.policy
                .weight
                .cmp(&a.policy.weight)
                .then_with(|| (&a.db, &a.schema, &a.table).cmp(&(&b.db, &b.schema, &b.table)))
        });
        Ok(Pass { items, next: 0, cursor: None, fired })
    }
}

/// A round's visit of `item` (not a dry run). A free function: a round
/// borrows the planner's other fields mutably while it visits.
fn visit<'a>(
    store: &'a Store,
    data: &'a Store,
    me: &'a NodeId,
    cfg: &PlannerConfig,
    wall_ms: u64,
    item: &'a Owned,
) -> Visit<'a> {
    let settle_ms = cfg.stop_settle.as_millis() as u64;
    Visit { store, data, me, wall_ms, item, settle_ms, requests: 0, decisions: 0, dry: false }
}

/// Why a policy's waiting partitions may not be submitted now (`None`:
/// they may): deleted or paused since they were found (one listing of the
/// policy's folder), outside its windows, or naming a command no live
/// node defines.
async fn may_submit(
    store: &Store,
    p: &PolicyDefinition,
    cap: &Capacity,
    wall_ms: u64,
    report: &mut PlanReport,
) -> Option<String> {
    report.requests += 1;
    match store.list(&paths::policy_dir(&p.name)).await {
        Ok(files) if !files.iter().any(|f| f.name() == paths::POLICY_FILE) => {
            return Some("its policy was deleted".into())
        }
        Ok(files) if files.iter().any(|f| f.name() == paths::PAUSED) => return Some(Gate::Paused.describe(p)),
        Ok(_) => {}
        Err(e) => return Some(format!("waiting: its policy could not be read ({e})")),
    }
    if let Ok(w) = Windows::parse(&p.windows, &p.time_zone) {
        if !w.contains(wall_ms) {
            return Some(Gate::Closed { opens: w.next_open(wall_ms) }.describe(p));
        }
    }
    let e = executor_of(p);
    e.command_name.as_deref().and_then(|name| cap.undefined_command(name)).map(|why| format!("cannot submit: {why}"))
}

/// Drops from a pass going on from an earlier round the tables whose
/// policy has been paused or has left its windows since: pausing takes
/// effect at the next round, not the next pass.
async fn recheck(store: &Store, pass: &mut Pass, wall_ms: u64, report: &mut PlanReport) {
    let mut shut: BTreeMap<Name, bool> = BTreeMap::new();
    for item in &pass.items[pass.next..] {
        let p = &item.policy;
        if shut.contains_key(&p.name) {
            continue;
        }
        report.requests += 1;
        let paused = define::is_paused(store, &p.name).await.unwrap_or(false);
        let closed = Windows::parse(&p.windows, &p.time_zone).is_ok_and(|w| !w.contains(wall_ms));
        shut.insert(p.name.clone(), paused || closed);
    }
    if pass.items.get(pass.next).is_some_and(|o| shut[&o.policy.name]) {
        pass.cursor = None;
    }
    let (before, next) = (pass.items.len(), pass.next);
    let mut i = 0;
    pass.items.retain(|o| {
        i += 1;
        i - 1 < next || !shut[&o.policy.name]
    });
    if pass.items.len() < before {
        tracing::info!(
            dropped = before - pass.items.len(),
            "planner: tables of paused or closed policies left the pass"
        );
    }
}

/// Why a policy's tables are not visited now (`None`: they are). A
/// scheduled policy that fired is noted in `fired`.
pub(super) async fn gate(
    store: &Store,
    paused: bool,
    p: &PolicyDefinition,
    wall_ms: u64,
    fired: &mut BTreeMap<Name, u64>,
) -> Option<Gate> {
    if paused {
        return Some(Gate::Paused);
    }
    match Windows::parse(&p.windows, &p.time_zone) {
        Ok(w) if !w.contains(wall_ms) => return Some(Gate::Closed { opens: w.next_open(wall_ms) }),
        Ok(_) => {}
        Err(e) => return Some(Gate::Bad(format!("bad windows: {e}"))),
    }
    let Some(expr) = &p.schedule else { return None };
    let cron = match Cron::parse(expr, &p.time_zone) {
        Ok(c) => c,
        Err(e) => return Some(Gate::Bad(format!("bad schedule: {e}"))),
    };
    let last: Option<LastPass> = read_json(store, &paths::policy_last_pass(&p.name)).await.ok().flatten();
    match cron.due(last.map(|l| l.fire_ms), wall_ms) {
        Some(fire) => {
            fired.insert(p.name.clone(), fire);
            None
        }
        None => Some(Gate::Schedule { next: cron.next_after(wall_ms) }),
    }
}

/// What `plan --dry-run` shows.
#[derive(Debug, Default, serde::Serialize)]
pub struct DryRun {
    /// The cluster's executor slots (the live members'), and the planner
    /// tasks in flight the visits found.
    pub slots: u64,
    /// No node has run yet: `slots` are one node's default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub slots_assumed: bool,
    pub in_flight: u64,
    /// `<db>/<schema>/<table>/<partition>: why` per partition it would
    /// submit now (the free slots' share of each table).
    pub would_submit: Vec<String>,
    /// `<db>/<schema>/<table>: why` per table not visited now.
    pub not_visited: Vec<String>,
    pub tables: Vec<TableSummary>,
    pub errors: Vec<String>,
}

/// The planner's judgement now, without writing anything: every table
/// visited, and the free slots of `cap` shared as a round would.
pub async fn dry_run(store: &Store, data: &Store, cap: &Capacity, wall_ms: u64) -> Result<DryRun, PolicyError> {
    let mut out = DryRun { slots: cap.slots, slots_assumed: cap.is_assumed(), ..DryRun::default() };
    let mut bad = vec![];
    let rows = define::list(store, &mut bad).await?;
    out.errors.extend(bad.into_iter().map(|e| e.to_string()));
    let owned = assign(data, &rows).await?;
    let me = NodeId::parse("plan").expect("a valid id");
    let settle_ms = PlannerConfig::default().stop_settle.as_millis() as u64;
    let mut fired = BTreeMap::new();
    let mut tracks = Tracks::default();
    for item in &owned {
        if let Some(g) = gate(store, item.paused, &item.policy, wall_ms, &mut fired).await {
            out.not_visited.push(format!("{}: {}", track::key(item), g.describe(&item.policy)));
            continue;
        }
        let mut report = PlanReport::default();
        let mut visit = Visit { store, data, me: &me, wall_ms, item, settle_ms, requests: 0, decisions: 0, dry: true };
        let listed = visit.list_data(TableCursor::default(), None).await.map(Listing::tallied);
        match async { visit.table(listed?, None, &mut report).await }.await {
            Ok(judged) => tracks.absorb(item, judged, wall_ms),
            Err(e) => out.errors.push(format!("{}: {e}", track::key(item))),
        }
    }
    out.in_flight = tracks.in_flight();
    let mut demands = vec![];
    let mut keys = vec![];
    for (k, t) in tracks.by_table.iter_mut() {
        let p = &t.item.policy;
        let blocked = executor_of(p).command_name.as_deref().and_then(|n| cap.undefined_command(n));
        if let Some(why) = blocked {
            t.blocked = Some(format!("cannot submit: {why}"));
            continue;
        }
        if super::one_task_per_table(p) && !t.in_flight.is_empty() {
            continue;
        }
        let (in_flight, queued) = (t.in_flight.len() as u64, t.queue.len() as u64);
        demands.push(Demand { weight: p.weight, in_flight, queued, cap: p.max_units_per_table, since: 0 });
        keys.push(k.clone());
    }
    let (_, order) = allocate(&demands, cap.target(1).saturating_sub(out.in_flight));
    for idx in order {
        let t = tracks.by_table.get_mut(&keys[idx]).expect("listed above");
        let Some(i) = t.queue.pop_front() else { continue };
        let d = &mut t.summary.detail[i];
        out.would_submit.push(format!("{}/{}: {}", track::key(&t.item), d.partition, d.why));
        d.why = format!("would submit: {}", d.why);
        d.due = false;
    }
    for t in tracks.by_table.into_values() {
        let mut t = t;
        track::set_state(&mut t, wall_ms);
        out.tables.push(t.summary);
    }
    out.tables.sort_by(|a, b| (&a.db, &a.schema, &a.table).cmp(&(&b.db, &b.schema, &b.table)));
    Ok(out)
}
