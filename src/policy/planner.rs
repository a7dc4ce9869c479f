//! The planner: the monitor's duty that keeps the policies' tables compact.
//!
//! A **pass** visits every table some policy owns (the most specific
//! matching pattern wins; see [`super::assign`]), in the order of the
//! policies' weights. Each monitor round (fenced like the monitor's other
//! duties) continues the pass where the previous round stopped, visiting
//! tables until it has spent its request budget ([`PlannerConfig::budget`]);
//! a new pass starts [`PlannerConfig::interval`] after the previous one
//! ended. A table is visited with one recursive listing of its folder on
//! the data backend (one request per 1,000 files on S3), one listing of its
//! `Decisions/`, one read of its `Summary`, and writes only for what
//! changed. Where the data backend lists on after a key (S3's
//! `start-after`), a listing that reaches the round's budget stops there and
//! the next round goes on from that key, so a round spends at most its
//! budget plus one table's fixed requests and its decisions, plus what
//! starting a pass costs (the policies' listing and reads, the data root's
//! listings down to the tables), all counted in [`PlanReport::requests`].
//! A pass going on from an earlier round drops the tables of policies
//! paused or out of their windows since: pausing takes effect at the next
//! round.
//!
//! A partition is **due** when it has at least two small files and one of
//! its policy's thresholds is met (`min-small-files`, `min-small-bytes`, or
//! its oldest small file, as first seen by the planner, is older than
//! `max-small-age`), it is not being compacted (a stopped task counts as
//! compacting for [`PlannerConfig::stop_settle`] after it is first seen
//! stopped: its executors may run until their workers notice), and its last decision is at
//! least `min-interval` old. A table submits at most `max-units-per-table`
//! partitions at once, most small files first: a table with a huge backlog
//! takes that many slots, not every slot (fair share).
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
//! `LastPass` when that pass ends; with `windows`, its tables are visited
//! only while a window is open. Paused policies' tables are not visited.

use std::collections::BTreeMap;
use std::time::Duration;

use layouts::formats::encode;
use layouts::policies::{self as paths, LastPass, PolicyDefinition, TableSummary};
use layouts::{Name, NodeId};
use store::Store;

use super::define::{self, read_json};
use super::visit::{Listing, TableCursor, Visit};
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
    /// Backend requests a round may spend visiting tables (on S3 a table's
    /// listing stops at it and goes on next round; elsewhere a table is
    /// listed whole within one round).
    pub budget: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig { interval: Duration::from_secs(60), budget: 200, stop_settle: Duration::from_secs(40) }
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

/// The planner's state between rounds; a new monitor starts a new pass.
pub struct Planner {
    cfg: PlannerConfig,
    me: NodeId,
    pass: Option<Pass>,
    next_pass_at: Duration,
    /// The last complete pass's figures per policy.
    pub counts: BTreeMap<String, PolicyCounts>,
    /// The pass in progress's figures.
    current: BTreeMap<String, PolicyCounts>,
    /// Decisions taken by this planner per policy (monotonic).
    pub decisions: BTreeMap<String, u64>,
}

impl Planner {
    pub fn new(cfg: PlannerConfig, me: NodeId) -> Planner {
        Planner {
            cfg,
            me,
            pass: None,
            next_pass_at: Duration::ZERO,
            counts: BTreeMap::new(),
            current: BTreeMap::new(),
            decisions: BTreeMap::new(),
        }
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

    /// One round: starts a pass when due, visits tables within the budget.
    /// A pass that goes on from an earlier round first drops the tables of
    /// policies paused or out of their windows since (one stat per policy).
    pub async fn round(&mut self, store: &Store, data: &Store, now: Duration, wall_ms: u64) -> PlanReport {
        let mut report = PlanReport::default();
        match self.pass.as_mut() {
            None => {
                if now < self.next_pass_at {
                    return report;
                }
                match self.start_pass(store, data, wall_ms, &mut report).await {
                    Ok(p) => self.pass = Some(p),
                    Err(e) => {
                        report.errors.push(format!("starting a planning pass: {e}"));
                        self.next_pass_at = now + self.cfg.interval;
                        return report;
                    }
                }
            }
            Some(pass) => recheck(store, pass, wall_ms, &mut report).await,
        }
        let Some(pass) = self.pass.as_mut() else { return report };
        // Every round takes at least one step, whatever the pass's start or
        // the recheck cost: a budget smaller than those still progresses.
        let mut stepped = false;
        while pass.next < pass.items.len() && (!stepped || report.requests < self.cfg.budget) {
            stepped = true;
            let item = &pass.items[pass.next];
            let mut visit = Visit {
                store,
                data,
                me: &self.me,
                wall_ms,
                item,
                settle_ms: self.cfg.stop_settle.as_millis() as u64,
                requests: 0,
                decisions: 0,
                dry: false,
            };
            let from = pass.cursor.take().unwrap_or_default();
            let left = self.cfg.budget.saturating_sub(report.requests).max(1);
            let result = match visit.list_data(from, Some(left)).await {
                Ok(Listing::More(cursor)) => {
                    pass.cursor = Some(cursor);
                    report.requests += visit.requests;
                    break;
                }
                Ok(Listing::Done(tallied)) => visit.table(tallied, &mut report).await,
                Err(e) => Err(e),
            };
            *self.decisions.entry(item.policy.name.to_string()).or_default() += visit.decisions;
            match result {
                Ok(summary) => {
                    let c = self.current.entry(item.policy.name.to_string()).or_default();
                    c.tables += 1;
                    c.small_files += summary.small_files;
                    c.in_flight += summary.in_flight;
                    c.due_partitions += summary.detail.iter().filter(|p| p.due).count() as u64;
                }
                Err(e) => report.errors.push(format!("planning {}/{}/{}: {e}", item.db, item.schema, item.table)),
            }
            report.requests += visit.requests;
            report.tables_visited += 1;
            pass.next += 1;
        }
        if pass.next >= pass.items.len() {
            for (policy, fire_ms) in std::mem::take(&mut pass.fired) {
                let last = LastPass { fire_ms, by: self.me.to_string() };
                if let Err(e) = store.put(&paths::policy_last_pass(&policy), encode(&last)).await {
                    report.errors.push(format!("recording the pass of policy {policy}: {e}"));
                }
            }
            self.pass = None;
            tracing::debug!(tables = self.current.values().map(|c| c.tables).sum::<u64>(), "planner pass ended");
            self.counts = std::mem::take(&mut self.current);
            self.next_pass_at = now + self.cfg.interval;
            report.pass_ended = true;
        }
        report
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
        let mut open = BTreeMap::new();
        for row in &rows {
            let p = &row.definition;
            open.insert(p.name.clone(), gate(store, row.paused, p, wall_ms, &mut fired).await.is_none());
        }
        // What starting a pass cost: the listing of Policies/, a listing and
        // a read per policy, a LastPass read per scheduled one, and the data
        // root's listings down to the tables (counted per folder listed).
        let scheduled = rows.iter().filter(|r| r.definition.schedule.is_some()).count() as u64;
        let folders: std::collections::BTreeSet<String> =
            owned.iter().flat_map(|o| [o.db.to_string(), format!("{}/{}", o.db, o.schema)]).collect();
        report.requests += 1 + 2 * rows.len() as u64 + scheduled + 1 + folders.len() as u64;
        self.current = rows.iter().map(|r| (r.definition.name.to_string(), PolicyCounts::default())).collect();
        let mut items: Vec<Owned> =
            owned.into_iter().filter(|o| open.get(&o.policy.name).copied() == Some(true)).collect();
        items.sort_by(|a, b| {
            b.policy
                .weight
                .cmp(&a.policy.weight)
                .then_with(|| (&a.db, &a.schema, &a.table).cmp(&(&b.db, &b.schema, &b.table)))
        });
        Ok(Pass { items, next: 0, cursor: None, fired })
    }
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
async fn gate(
    store: &Store,
    paused: bool,
    p: &PolicyDefinition,
    wall_ms: u64,
    fired: &mut BTreeMap<Name, u64>,
) -> Option<String> {
    if paused {
        return Some("paused".into());
    }
    match Windows::parse(&p.windows, &p.time_zone) {
        Ok(w) if !w.contains(wall_ms) => {
            let at = w.next_open(wall_ms).map(|t| format!(" (opens at {})", at(t))).unwrap_or_default();
            return Some(format!("outside its windows{at}"));
        }
        Ok(_) => {}
        Err(e) => return Some(format!("bad windows: {e}")),
    }
    let Some(expr) = &p.schedule else { return None };
    let cron = match Cron::parse(expr, &p.time_zone) {
        Ok(c) => c,
        Err(e) => return Some(format!("bad schedule: {e}")),
    };
    let last: Option<LastPass> = read_json(store, &paths::policy_last_pass(&p.name)).await.ok().flatten();
    match cron.due(last.map(|l| l.fire_ms), wall_ms) {
        Some(fire) => {
            fired.insert(p.name.clone(), fire);
            None
        }
        None => {
            let at = cron.next_after(wall_ms).map(|t| format!(" (next at {})", at(t))).unwrap_or_default();
            Some(format!("waiting for its schedule {expr:?}{at}"))
        }
    }
}

/// What `plan --dry-run` shows.
#[derive(Debug, Default, serde::Serialize)]
pub struct DryRun {
    /// `<db>/<schema>/<table>/<partition>: why` per partition it would submit.
    pub would_submit: Vec<String>,
    /// `<db>/<schema>/<table>: why` per table not visited now.
    pub not_visited: Vec<String>,
    pub tables: Vec<TableSummary>,
    pub errors: Vec<String>,
}

/// The planner's judgement now, without writing anything.
pub async fn dry_run(store: &Store, data: &Store, wall_ms: u64) -> Result<DryRun, PolicyError> {
    let mut out = DryRun::default();
    let mut bad = vec![];
    let rows = define::list(store, &mut bad).await?;
    out.errors.extend(bad.into_iter().map(|e| e.to_string()));
    let owned = assign(data, &rows).await?;
    let me = NodeId::parse("plan").expect("a valid id");
    let mut fired = BTreeMap::new();
    for item in &owned {
        if let Some(why) = gate(store, item.paused, &item.policy, wall_ms, &mut fired).await {
            out.not_visited.push(format!("{}/{}/{}: {why}", item.db, item.schema, item.table));
            continue;
        }
        let mut report = PlanReport::default();
        let settle_ms = PlannerConfig::default().stop_settle.as_millis() as u64;
        let mut visit = Visit { store, data, me: &me, wall_ms, item, settle_ms, requests: 0, decisions: 0, dry: true };
        let listed = visit.list_data(TableCursor::default(), None).await.map(Listing::tallied);
        match async { visit.table(listed?, &mut report).await }.await {
            Ok(summary) => {
                out.would_submit.extend(report.submitted);
                out.tables.push(summary);
            }
            Err(e) => out.errors.push(format!("{}/{}/{}: {e}", item.db, item.schema, item.table)),
        }
    }
    Ok(out)
}

/// An instant for people (UTC, RFC 3339).
fn at(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
