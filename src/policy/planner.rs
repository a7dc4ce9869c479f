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
//! changed.
//!
//! A partition is **due** when it has at least two small files and one of
//! its policy's thresholds is met (`min-small-files`, `min-small-bytes`, or
//! its oldest small file, as first seen by the planner, is older than
//! `max-small-age`), it is not being compacted, and its last decision is at
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

use futures::TryStreamExt;
use layouts::formats::{encode, ExecutorKind, ExecutorSpec};
use layouts::policies::{
    self as paths, DecisionClaim, DecisionFile, DecisionTask, LastPass, PartitionSummary, PolicyDefinition,
    TableSummary,
};
use layouts::{Name, NodeId, TaskId, TaskState};
use store::{Created, Store};

use super::define::{self, read_json};
use super::{assign, Owned, PolicyError};
use crate::schedule::{Cron, Windows};
use crate::tasks::{self, TaskError, TaskSpec};

/// Parameter carrying a planner task's target size to the built-in executors.
pub const TARGET_SIZE_PARAM: &str = "compactd_target_size";

#[derive(Debug, Clone)]
pub struct PlannerConfig {
    /// Time between the end of a pass and the start of the next.
    pub interval: Duration,
    /// Backend requests a round may spend visiting tables (a table is
    /// visited whole: one with more files than this takes one round).
    pub budget: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig { interval: Duration::from_secs(60), budget: 200 }
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

/// What one round did.
#[derive(Debug, Default)]
pub struct PlanReport {
    pub tables_visited: u64,
    pub requests: u64,
    /// `<db>/<schema>/<table>/<partition> <task>` per submission.
    pub submitted: Vec<String>,
    /// Managers of submitted tasks, to poke.
    pub managers: Vec<NodeId>,
    pub errors: Vec<String>,
    pub pass_ended: bool,
}

struct Pass {
    items: Vec<Owned>,
    next: usize,
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
    pub async fn round(&mut self, store: &Store, data: &Store, now: Duration, wall_ms: u64) -> PlanReport {
        let mut report = PlanReport::default();
        if self.pass.is_none() {
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
        let Some(pass) = self.pass.as_mut() else { return report };
        while pass.next < pass.items.len() && report.requests < self.cfg.budget {
            let item = &pass.items[pass.next];
            let mut visit = Visit { store, data, me: &self.me, wall_ms, item, requests: 0, decisions: 0, dry: false };
            let result = visit.table(&mut report).await;
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
        self.current = rows.iter().map(|r| (r.definition.name.to_string(), PolicyCounts::default())).collect();
        let mut items: Vec<Owned> =
            owned.into_iter().filter(|o| open.get(&o.policy.name).copied() == Some(true)).collect();
        items.sort_by(|a, b| {
            b.policy
                .weight
                .cmp(&a.policy.weight)
                .then_with(|| (&a.db, &a.schema, &a.table).cmp(&(&b.db, &b.schema, &b.table)))
        });
        Ok(Pass { items, next: 0, fired })
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
        let mut visit = Visit { store, data, me: &me, wall_ms, item, requests: 0, decisions: 0, dry: true };
        match visit.table(&mut report).await {
            Ok(summary) => {
                out.would_submit.extend(report.submitted);
                out.tables.push(summary);
            }
            Err(e) => out.errors.push(format!("{}/{}/{}: {e}", item.db, item.schema, item.table)),
        }
    }
    Ok(out)
}

/// One partition as listed.
#[derive(Default)]
struct Listed {
    files: u64,
    bytes: u64,
    small_files: u64,
    small_bytes: u64,
}

/// The newest decision of a partition, from the `Decisions/` listing.
#[derive(Default, Clone, Copy)]
struct Newest {
    seq: u64,
    claim: bool,
    task: bool,
}

struct Visit<'a> {
    store: &'a Store,
    data: &'a Store,
    me: &'a NodeId,
    wall_ms: u64,
    item: &'a Owned,
    requests: u64,
    decisions: u64,
    /// `plan --dry-run`: judge, write nothing.
    dry: bool,
}

impl Visit<'_> {
    async fn table(&mut self, report: &mut PlanReport) -> Result<TableSummary, PolicyError> {
        let o = self.item;
        let p = &*o.policy;
        let listed = self.list_data().await?;
        let (newest, stale) = self.list_decisions().await?;
        let summary_path = paths::table_summary(&o.db, &o.schema, &o.table);
        self.requests += 1;
        let prev: TableSummary = read_json(self.store, &summary_path).await.ok().flatten().unwrap_or_default();
        let prev_detail: BTreeMap<&str, &PartitionSummary> =
            prev.detail.iter().map(|d| (d.partition.as_str(), d)).collect();
        let mut names: Vec<&Name> = listed.keys().chain(newest.keys()).collect();
        names.sort();
        names.dedup();
        let mut detail = vec![];
        let mut last_compaction = prev.last_compaction_wall_ms;
        for name in names {
            let l = listed.get(name);
            let n = newest.get(name).copied().unwrap_or_default();
            let before = prev_detail.get(name.as_str()).copied();
            let (files, small_files, small_bytes) =
                l.map(|l| (l.files, l.small_files, l.small_bytes)).unwrap_or_default();
            let mut d = PartitionSummary {
                partition: name.to_string(),
                files,
                small_files,
                small_bytes,
                small_since_wall_ms: (small_files > 0)
                    .then(|| before.and_then(|b| b.small_since_wall_ms).unwrap_or(self.wall_ms)),
                last_compaction_wall_ms: before.and_then(|b| b.last_compaction_wall_ms),
                seq: n.seq,
                task: before.filter(|b| b.seq == n.seq).and_then(|b| b.task),
                in_flight: false,
                due: false,
                why: String::new(),
            };
            if n.seq > 0 {
                self.follow(name, n, before, &mut d, report).await?;
            }
            if let Some(t) = d.last_compaction_wall_ms {
                last_compaction = Some(last_compaction.map_or(t, |l: u64| l.max(t)));
            }
            self.judge(p, &mut d);
            if d.small_files > 0 || d.in_flight {
                detail.push(d);
            }
        }
        // Fair share: at most the cap in flight per table, most small files first.
        let in_flight = detail.iter().filter(|d| d.in_flight).count() as u64;
        let mut room = u64::from(p.max_units_per_table).saturating_sub(in_flight);
        let mut due: Vec<usize> = (0..detail.len()).filter(|i| detail[*i].due).collect();
        due.sort_by(|a, b| detail[*b].small_files.cmp(&detail[*a].small_files).then(a.cmp(b)));
        let mut state = if due.is_empty() { "nothing due".to_string() } else { String::new() };
        for i in due {
            if room == 0 {
                detail[i].why =
                    format!("{} (waiting: the table is at its cap of {})", detail[i].why, p.max_units_per_table);
                state = format!("at its cap of {} partitions at once", p.max_units_per_table);
                continue;
            }
            if self.decide(&mut detail[i], report).await? {
                room -= 1;
            }
        }
        if state.is_empty() {
            state = "submitting".into();
        }
        for path in stale.into_iter().filter(|_| !self.dry) {
            // The older decisions of a partition: their tasks have ended.
            self.requests += 1;
            if let Err(e) = self.store.delete(&path).await {
                report.errors.push(format!("removing {path}: {e}"));
            }
        }
        detail.sort_by(|a, b| b.small_files.cmp(&a.small_files).then_with(|| a.partition.cmp(&b.partition)));
        detail.truncate(layouts::policies::MAX_SUMMARY_PARTITIONS);
        let summary = TableSummary {
            db: o.db.to_string(),
            schema: o.schema.to_string(),
            table: o.table.to_string(),
            policy: p.name.to_string(),
            policy_version: p.version,
            checked_wall_ms: self.wall_ms,
            partitions: listed.len() as u64,
            files: listed.values().map(|l| l.files).sum(),
            bytes: listed.values().map(|l| l.bytes).sum(),
            small_files: listed.values().map(|l| l.small_files).sum(),
            small_bytes: listed.values().map(|l| l.small_bytes).sum(),
            in_flight: detail.iter().filter(|d| d.in_flight).count() as u64,
            last_compaction_wall_ms: last_compaction,
            state,
            detail,
        };
        let unchanged = TableSummary { checked_wall_ms: prev.checked_wall_ms, ..summary.clone() } == prev;
        if !unchanged && !self.dry {
            self.requests += 1;
            self.store.put(&summary_path, encode(&summary)).await?;
        }
        Ok(summary)
    }

    /// The table's partitions on the data backend: one streamed recursive
    /// listing; only regular files directly in a partition folder count.
    async fn list_data(&mut self) -> Result<BTreeMap<Name, Listed>, PolicyError> {
        let o = self.item;
        let dir = tasks::table_dir(&o.db, &o.schema, &o.table);
        let small = o.policy.small_file_size;
        let mut out: BTreeMap<Name, Listed> = BTreeMap::new();
        let mut entries = 0u64;
        let mut stream = self.data.list_stream(&dir, true);
        while let Some(e) = stream.try_next().await? {
            entries += 1;
            let Some(rel) = e.path.strip_prefix(&dir) else { continue };
            let Some((part, file)) = rel.split_once('/') else { continue };
            if file.contains('/') || file.starts_with(['_', '.']) || e.special.is_some() || e.is_dir {
                continue;
            }
            if layouts::limits::reserved_partition(part) || part.len() > paths::MAX_PLANNED_PARTITION_BYTES {
                continue;
            }
            let Ok(part) = Name::parse(part) else { continue };
            let len = e.len.unwrap_or(0);
            let l = out.entry(part).or_default();
            l.files += 1;
            l.bytes += len;
            if len < small {
                l.small_files += 1;
                l.small_bytes += len;
            }
        }
        self.requests += 1 + entries / 1000;
        Ok(out)
    }

    /// Each partition's newest decision, and the files of older ones.
    async fn list_decisions(&mut self) -> Result<(BTreeMap<Name, Newest>, Vec<String>), PolicyError> {
        let o = self.item;
        self.requests += 1;
        let mut newest: BTreeMap<Name, Newest> = BTreeMap::new();
        let mut all = vec![];
        for e in self.store.list(&paths::decisions_dir(&o.db, &o.schema, &o.table)).await? {
            let Some((part, seq, file)) = paths::parse_decision(e.name()) else { continue };
            let n = newest.entry(part.clone()).or_default();
            if seq > n.seq {
                *n = Newest { seq, claim: false, task: false };
            }
            if seq == n.seq {
                match file {
                    DecisionFile::Claim => n.claim = true,
                    DecisionFile::Task => n.task = true,
                }
            }
            all.push((part, seq, e.path));
        }
        let stale = all
            .into_iter()
            .filter(|(p, seq, _)| newest.get(p).is_some_and(|n| *seq < n.seq))
            .map(|(_, _, p)| p)
            .collect();
        Ok((newest, stale))
    }

    /// Brings the partition's newest decision forward: is its task still
    /// running, and when did it start?
    async fn follow(
        &mut self,
        name: &Name,
        n: Newest,
        before: Option<&PartitionSummary>,
        d: &mut PartitionSummary,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        let path = |f| paths::decision(&o.db, &o.schema, &o.table, name, n.seq, f);
        // Seen ended at this sequence number: nothing to read.
        if let Some(b) = before.filter(|b| b.seq == n.seq && !b.in_flight && b.task.is_some()) {
            d.last_compaction_wall_ms = b.last_compaction_wall_ms;
            return Ok(());
        }
        if !n.task {
            if !n.claim {
                return Ok(());
            }
            self.requests += 1;
            let Some(claim) = read_json::<DecisionClaim>(self.store, &path(DecisionFile::Claim)).await? else {
                return Ok(());
            };
            d.in_flight = true;
            d.last_compaction_wall_ms = Some(claim.wall_ms);
            d.why = "being submitted".into();
            self.recover(name, n.seq, &claim, d, report).await?;
            return Ok(());
        }
        let task = match d.task {
            Some(t) => t,
            None => {
                self.requests += 1;
                match read_json::<DecisionTask>(self.store, &path(DecisionFile::Task)).await? {
                    Some(t) => {
                        d.last_compaction_wall_ms = Some(t.wall_ms);
                        t.task
                    }
                    None => return Ok(()),
                }
            }
        };
        d.task = Some(task);
        self.requests += 1;
        let dir = tasks::read_dir(self.store, &task).await?;
        let ended = matches!(dir.state, Some(TaskState::Done | TaskState::Failed | TaskState::Cancel))
            || (dir.state.is_none() && !dir.has_info && dir.terms.is_empty());
        d.in_flight = !ended;
        if d.in_flight {
            d.why = format!("being compacted by task {task}");
        }
        Ok(())
    }

    /// A claim without a recorded task (see the module doc).
    async fn recover(
        &mut self,
        name: &Name,
        seq: u64,
        claim: &DecisionClaim,
        d: &mut PartitionSummary,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        self.requests += 2;
        if let Some(id) = tasks::find_marked(self.store, paths::MARKER_PARAM, &claim.marker, claim.wall_ms).await? {
            return self.record(name, seq, id, d).await;
        }
        let mine = claim.by == self.me.as_str();
        if self.dry {
            return Ok(());
        }
        if mine || self.wall_ms >= claim.wall_ms.saturating_add(crate::jobs::drive::CLAIM_GRACE_MS) {
            self.submit(name, seq, claim, d, report).await?;
        }
        Ok(())
    }

    /// Sets why the partition is or is not due.
    fn judge(&self, p: &PolicyDefinition, d: &mut PartitionSummary) {
        if d.in_flight {
            return;
        }
        if d.small_files < 2 {
            d.why = format!("{} small file(s): nothing to merge", d.small_files);
            return;
        }
        let mut reasons = vec![];
        if let Some(n) = p.min_small_files.filter(|n| d.small_files >= *n) {
            reasons.push(format!("{} small files >= {n}", d.small_files));
        }
        if let Some(b) = p.min_small_bytes.filter(|b| d.small_bytes >= *b) {
            reasons.push(format!("{} small bytes >= {b}", d.small_bytes));
        }
        if let (Some(age), Some(since)) = (p.max_small_age_ms, d.small_since_wall_ms) {
            if self.wall_ms >= since.saturating_add(age) {
                reasons.push(format!("small files for {} s >= {} s", (self.wall_ms - since) / 1000, age / 1000));
            }
        }
        if reasons.is_empty() {
            d.why = format!("{} small files, {} bytes: under the thresholds", d.small_files, d.small_bytes);
            return;
        }
        if let Some(last) = d.last_compaction_wall_ms {
            let next = last.saturating_add(p.min_interval_ms);
            if self.wall_ms < next {
                d.why = format!(
                    "{}; waiting for min-interval ({} s left)",
                    reasons.join(", "),
                    (next - self.wall_ms).div_ceil(1000)
                );
                return;
            }
        }
        d.due = true;
        d.why = reasons.join(", ");
    }

    /// Takes the partition's next decision; true if it is now in flight.
    async fn decide(&mut self, d: &mut PartitionSummary, report: &mut PlanReport) -> Result<bool, PolicyError> {
        let o = self.item;
        let Ok(name) = Name::parse(&d.partition) else { return Ok(false) };
        let seq = d.seq + 1;
        let claim = DecisionClaim {
            policy: o.policy.name.clone(),
            policy_version: o.policy.version,
            by: self.me.to_string(),
            wall_ms: self.wall_ms,
            marker: paths::marker(&o.db, &o.schema, &o.table, &name, seq),
            why: d.why.clone(),
        };
        if self.dry {
            report.submitted.push(format!("{}/{}/{}/{name}: {}", o.db, o.schema, o.table, d.why));
            d.why = format!("would submit: {}", d.why);
            d.due = false;
            return Ok(true);
        }
        self.requests += 1;
        let path = paths::decision(&o.db, &o.schema, &o.table, &name, seq, DecisionFile::Claim);
        d.seq = seq;
        d.task = None;
        d.in_flight = true;
        d.due = false;
        d.last_compaction_wall_ms = Some(self.wall_ms);
        if self.store.create(&path, encode(&claim)).await? == Created::Exists {
            // Another planner took this decision: it submits.
            d.why = "being submitted by another planner".into();
            return Ok(true);
        }
        self.submit(&name, seq, &claim, d, report).await?;
        Ok(d.in_flight)
    }

    async fn submit(
        &mut self,
        name: &Name,
        seq: u64,
        claim: &DecisionClaim,
        d: &mut PartitionSummary,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        let mut spec = TaskSpec::table(o.db.clone(), o.schema.clone(), o.table.clone());
        spec.partitions = vec![name.clone()];
        spec.executor = Some(executor_of(&o.policy));
        spec.params.insert(paths::MARKER_PARAM.into(), claim.marker.clone());
        spec.params.insert(TARGET_SIZE_PARAM.into(), o.policy.target_size.to_string());
        self.requests += 6;
        match tasks::submit_placed(self.store, spec, self.wall_ms).await {
            Ok(placed) => {
                report.managers.push(placed.manager);
                report.submitted.push(format!("{}/{}/{}/{name} {}", o.db, o.schema, o.table, placed.id));
                self.decisions += 1;
                self.record(name, seq, placed.id, d).await
            }
            Err(TaskError::Invalid(problem)) => self.give_up(name, seq, problem, d).await,
            Err(e @ TaskError::Limit(_)) => self.give_up(name, seq, e.to_string(), d).await,
            // No live node, a store error: the claim is ours; the next
            // visit submits again.
            Err(e) => {
                d.why = format!("submitting failed, retried next visit: {e}");
                Ok(())
            }
        }
    }

    async fn record(&mut self, name: &Name, seq: u64, id: TaskId, d: &mut PartitionSummary) -> Result<(), PolicyError> {
        let o = self.item;
        let t = DecisionTask { task: id, by: self.me.to_string(), wall_ms: self.wall_ms };
        let path = paths::decision(&o.db, &o.schema, &o.table, name, seq, DecisionFile::Task);
        self.requests += 1;
        if self.store.create(&path, encode(&t)).await? == Created::Exists {
            if let Ok(Some(other)) = read_json::<DecisionTask>(self.store, &path).await {
                if other.task != id {
                    tracing::warn!(partition = %name, duplicate = %id, kept = %other.task, "stopping a duplicate planner task");
                    let _ = tasks::stop(self.store, &id, "planner: duplicate", self.wall_ms).await;
                }
                d.task = Some(other.task);
            }
        } else {
            d.task = Some(id);
        }
        d.in_flight = true;
        d.why = format!("being compacted by task {}", d.task.map(|t| t.to_string()).unwrap_or_default());
        Ok(())
    }

    /// A task that can never be submitted: the claim goes, the reason stays
    /// in the summary, and the partition is judged again next pass.
    async fn give_up(
        &mut self,
        name: &Name,
        seq: u64,
        problem: String,
        d: &mut PartitionSummary,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        tracing::warn!(table = %format!("{}/{}/{}", o.db, o.schema, o.table), partition = %name, "planner cannot submit: {problem}");
        self.requests += 1;
        self.store.delete(&paths::decision(&o.db, &o.schema, &o.table, name, seq, DecisionFile::Claim)).await?;
        d.seq = seq - 1;
        d.in_flight = false;
        d.why = format!("cannot submit: {problem}");
        Ok(())
    }
}

/// The executor a policy names.
pub fn executor_of(p: &PolicyDefinition) -> ExecutorSpec {
    let (kind, command_name) = match p.executor.as_str() {
        "merge" => (ExecutorKind::Merge, None),
        "parquet" => (ExecutorKind::Parquet, None),
        name => (ExecutorKind::Command, Some(name.to_string())),
    };
    ExecutorSpec { kind, command: None, command_name, timeout_ms: None }
}

/// An instant for people (UTC, RFC 3339).
fn at(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
