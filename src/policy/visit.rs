//! One visit of a table by the planner: its partitions as listed on the
//! data backend (resumable across rounds where the backend lists from a
//! key, see [`TableCursor`]), its `Decisions/` (followed by
//! [`super::decide`]) and `Summary`; judging each partition and the
//! table's retention ([`super::retention`]), and writing the summary when
//! it changed. Decisions are taken by [`super::decide`].
//!
//! A visit counts the backend requests it makes in `requests` (a listing
//! page is 1,000 entries on S3), so the round can hold its budget.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use layouts::formats::{encode, ExecutorKind, ExecutorSpec};
use layouts::policies::{self as paths, PartitionSummary, PolicyDefinition, TableSummary};
use layouts::{Name, NodeId, TaskId};
use store::Store;

use super::define::read_json;
use super::retention::is_retention;
use super::{Owned, PlanReport, PolicyError};
use crate::tasks;

/// Entries in one listing page on S3 (and what a page is counted as
/// elsewhere).
const PAGE: u64 = 1000;

/// One partition as listed.
#[derive(Default)]
pub(super) struct Listed {
    files: u64,
    bytes: u64,
    small_files: u64,
    small_bytes: u64,
}

/// Where a table's listing stopped when a round's budget ran out: the
/// partitions tallied so far and the last key listed. The next round lists
/// on after that key (S3's `start-after`), so a table with more files than
/// a round's budget takes several rounds instead of one over budget.
#[derive(Default)]
pub(super) struct TableCursor {
    listed: BTreeMap<Name, Listed>,
    after: Option<String>,
    /// What the entries listed so far tell of the table's format.
    detector: crate::table::Detector,
    /// A file the policy's executor could not rewrite (a Parquet file in a
    /// table a text `merge` policy owns).
    foreign_file: Option<String>,
}

/// A table's complete listing, judged.
#[derive(Default)]
pub(super) struct Tallied {
    listed: BTreeMap<Name, Listed>,
    findings: crate::table::Findings,
    foreign_file: Option<String>,
}

/// A table as one visit judged it; its summary is written once the fair
/// share has decided what of it is submitted.
pub(super) struct Judged {
    /// Its `state`, `queued` and `capped` are the fair share's to set.
    pub summary: TableSummary,
    /// The summary as read at the visit (written only if it changed).
    pub prev: TableSummary,
    /// Every partition in flight (also those the summary's detail leaves
    /// out), with its task when known.
    pub in_flight: Vec<(String, Option<TaskId>)>,
}

/// Writes a table's summary when something but `checkedWallMs` changed
/// since `prev`; returns whether it wrote (one request).
pub(super) async fn write_summary(
    store: &Store,
    o: &Owned,
    summary: &TableSummary,
    prev: &TableSummary,
) -> Result<bool, PolicyError> {
    if (TableSummary { checked_wall_ms: prev.checked_wall_ms, ..summary.clone() }) == *prev {
        return Ok(false);
    }
    store.put(&paths::table_summary(&o.db, &o.schema, &o.table), encode(summary)).await?;
    Ok(true)
}

pub(super) enum Listing {
    Done(Tallied),
    /// The budget ran out first: go on from here next round.
    More(TableCursor),
}

impl Listing {
    /// The partitions tallied: all of them from a listing without a budget.
    pub fn tallied(self) -> Tallied {
        match self {
            Listing::Done(t) => t,
            Listing::More(cursor) => cursor.finish(),
        }
    }
}

impl TableCursor {
    fn finish(self) -> Tallied {
        Tallied { listed: self.listed, findings: self.detector.finish(), foreign_file: self.foreign_file }
    }
}

pub(super) struct Visit<'a> {
    pub store: &'a Store,
    pub data: &'a Store,
    pub me: &'a NodeId,
    pub wall_ms: u64,
    pub item: &'a Owned,
    /// [`super::PlannerConfig::stop_settle`] in ms.
    pub settle_ms: u64,
    pub requests: u64,
    pub decisions: u64,
    /// `plan --dry-run`: judge, write nothing.
    pub dry: bool,
}

impl Visit<'_> {
    /// Judges the table from its complete listing: follows each
    /// partition's newest decision (completing one its author left half
    /// done), says why each partition is or is not due, and removes the
    /// files of older decisions. Takes no new decision: which due
    /// partitions are submitted is the fair share's ([`super::share`]).
    /// `known`: the table's summary as in the tree, if the planner knows
    /// it (else it is read).
    pub async fn table(
        &mut self,
        tallied: Tallied,
        known: Option<TableSummary>,
        report: &mut PlanReport,
    ) -> Result<Judged, PolicyError> {
        let o = self.item;
        let p = &*o.policy;
        let Tallied { listed, mut findings, foreign_file } = tallied;
        findings.extend(o.above.clone());
        let dir = tasks::table_dir(&o.db, &o.schema, &o.table);
        let kind = executor_of(p).kind;
        // A table the policy's executor must not change is shown, never
        // planned; a write in progress holds the table for this pass.
        let hold = findings
            .refusal(&dir, kind)
            .or_else(|| foreign_file.and_then(|f| crate::table::file::text_merge_refusal_by_name(&f)))
            .map(|why| format!("refused: {why}"))
            .or_else(|| findings.busy(self.wall_ms as i64).map(|at| format!("waiting: a write is in progress ({at})")));
        let (newest, stale) = self.list_decisions().await?;
        let prev = match known {
            Some(s) => s,
            None => {
                self.requests += 1;
                let path = paths::table_summary(&o.db, &o.schema, &o.table);
                read_json(self.store, &path).await.ok().flatten().unwrap_or_default()
            }
        };
        let prev_detail: BTreeMap<&str, &PartitionSummary> =
            prev.detail.iter().map(|d| (d.partition.as_str(), d)).collect();
        let mut names: Vec<&Name> = listed.keys().chain(newest.keys()).collect();
        names.sort();
        names.dedup();
        // The table's retention is not a partition: judged apart below.
        names.retain(|n| n.as_str() != paths::EXPIRE_DECISION);
        let mut detail = vec![];
        let mut last_compaction = prev.last_compaction_wall_ms;
        let mut newest_task = prev.last_compaction_wall_ms.zip(prev.last_task);
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
                due_at_wall_ms: None,
                stopped_seen_wall_ms: None,
            };
            if n.seq > 0 {
                self.follow(name, n, &newest, before, &mut d, report).await?;
            }
            if let Some(t) = d.last_compaction_wall_ms {
                last_compaction = Some(last_compaction.map_or(t, |l: u64| l.max(t)));
                if let Some(task) = d.task.filter(|_| newest_task.is_none_or(|(at, _)| t >= at)) {
                    newest_task = Some((t, task));
                }
            }
            self.judge(p, &mut d);
            if d.small_files > 0 || d.in_flight {
                detail.push(d);
            }
        }
        let mut freed = TableSummary {
            expired_files: prev.expired_files,
            expired_bytes: prev.expired_bytes,
            expire_counted: prev.expire_counted,
            ..TableSummary::default()
        };
        let before = prev_detail.get(paths::EXPIRE_DECISION).copied();
        let retention = self.retention(&newest, before, &mut freed, report).await?;
        detail.extend(retention);
        if let Some(why) = &hold {
            for d in detail.iter_mut().filter(|d| d.due) {
                d.due = false;
                d.why = why.clone();
            }
        }
        for path in stale.into_iter().filter(|_| !self.dry) {
            // The older decisions of a partition: their tasks have ended.
            self.requests += 1;
            if let Err(e) = self.store.delete(&path).await {
                report.errors.push(format!("removing {path}: {e}"));
            }
        }
        let in_flight: Vec<(String, Option<TaskId>)> =
            detail.iter().filter(|d| d.in_flight).map(|d| (d.partition.clone(), d.task)).collect();
        // The retention first, then most small files first: the fair share
        // submits in this order.
        detail.sort_by(|a, b| {
            (!is_retention(a), b.small_files, &a.partition).cmp(&(!is_retention(b), a.small_files, &b.partition))
        });
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
            in_flight: in_flight.len() as u64,
            last_compaction_wall_ms: last_compaction,
            last_task: newest_task.map(|(_, task)| task),
            state: String::new(),
            hold,
            queued: 0,
            capped: false,
            detail,
            expired_files: freed.expired_files,
            expired_bytes: freed.expired_bytes,
            expire_counted: freed.expire_counted,
        };
        Ok(Judged { summary, prev, in_flight })
    }

    /// The table's partitions on the data backend, from `from` on: one
    /// streamed recursive listing; only regular files directly in a
    /// partition folder count. With a `budget` (in requests), where the
    /// backend resumes listings after a key, stops once that many pages are
    /// listed and returns where it stopped.
    pub async fn list_data(&mut self, from: TableCursor, budget: Option<u64>) -> Result<Listing, PolicyError> {
        let o = self.item;
        let dir = tasks::table_dir(&o.db, &o.schema, &o.table);
        let small = o.policy.small_file_size;
        if o.policy.executor == "delta" {
            return self.list_delta(&dir, small).await;
        }
        if o.policy.executor == "iceberg" {
            return self.list_iceberg(&dir, small).await;
        }
        let mut cursor = from;
        let text = executor_of(&o.policy).kind == ExecutorKind::Merge;
        let stop_at = budget.filter(|_| self.data.lists_from_key()).map(|b| b.max(1) * PAGE);
        let mut entries = 0u64;
        // Files written since this are a writer's, maybe still in flight:
        // no small files yet (the executor takes them as no inputs either).
        let young_after = self.wall_ms.saturating_sub(o.policy.min_file_age_ms()) as i64;
        let after = cursor.after.take();
        let mut stream = self.data.list_stream_after(&dir, after.as_deref());
        while let Some(e) = stream.try_next().await? {
            entries += 1;
            tally(&mut cursor.listed, &dir, small, young_after, &e);
            // The table's format and files, from the same listing: no
            // request of its own.
            cursor.detector.observe_entry(&dir, &e);
            if let Some(rel) = e.path.strip_prefix(dir.as_str()) {
                // Inputs of the text merge only: hidden files and compactd's
                // own are none.
                let input = !e.is_dir && !rel.split('/').any(|s| s.starts_with(['_', '.']));
                if text
                    && input
                    && cursor.foreign_file.is_none()
                    && crate::table::file::text_merge_refusal_by_name(&e.path).is_some()
                {
                    cursor.foreign_file = Some(e.path.clone());
                }
            }
            if stop_at.is_some_and(|s| entries >= s) {
                self.requests += entries.div_ceil(PAGE);
                cursor.after = Some(e.path);
                return Ok(Listing::More(cursor));
            }
        }
        drop(stream);
        self.requests += 1 + entries / PAGE;
        // A candidate metadata folder the listing showed only as a name
        // (a backend that lists folders) is looked into.
        for sub in cursor.detector.to_look_into() {
            self.requests += 1;
            for e in self.data.list(&format!("{dir}{sub}")).await? {
                cursor.detector.observe_entry(&dir, &e);
            }
        }
        Ok(Listing::Done(cursor.finish()))
    }

    /// A Delta table's partitions as its log has them: only active files
    /// count (files a compaction removed stay in the folders until Delta's
    /// VACUUM, and would make a compact table look due forever).
    async fn list_delta(&mut self, dir: &str, small: u64) -> Result<Listing, PolicyError> {
        use crate::executor::delta::{log, vectors, writable, DeltaError};
        let malformed = |problem| PolicyError::Malformed { path: dir.to_string(), problem };
        let snap = match log::load(self.data, dir).await {
            Ok(s) => s,
            Err(DeltaError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(malformed(e.to_string())),
        };
        self.requests += snap.reads;
        // A table its units would refuse is reported, not planned.
        writable(&snap).map_err(|why| malformed(format!("not compacted: {why}")))?;
        let mut out: BTreeMap<Name, Listed> = BTreeMap::new();
        let keys = snap.metadata.partition_keys();
        for f in snap.files.values() {
            let key = log::partition_key(&keys, &f.partition_values);
            let Ok(part) = Name::parse(&key) else { continue };
            // A file whose deletion vector deletes enough of its rows counts
            // as small, whatever its size: its rewrite retires them.
            let small = if vectors::due(f) { u64::MAX } else { small };
            out.entry(part).or_default().count(f.size.max(0) as u64, small);
        }
        // The table folder itself: another format's metadata beside the log
        // (Apache XTable, UniForm) makes it no executor's.
        self.requests += 1;
        let findings = crate::table::format::detect(self.data, dir).await?;
        Ok(Listing::Done(Tallied { listed: out, findings, foreign_file: None }))
    }

    /// An Iceberg table's partitions (spec and tuple, named as its units)
    /// as its current snapshot has them: live data files only (delete
    /// files are applied by the units that rewrite them).
    async fn list_iceberg(&mut self, dir: &str, small: u64) -> Result<Listing, PolicyError> {
        use crate::executor::iceberg::{live_data_files, IcebergError};
        let sizing = crate::executor::iceberg::Sizing::of_policy(&self.item.policy);
        let files =
            live_data_files(self.data, &crate::executor::iceberg::catalog::Catalog::default(), dir, &sizing).await;
        let files = match files {
            Ok(f) => f,
            Err(IcebergError::Store(e)) => return Err(e.into()),
            Err(e) => {
                return Err(PolicyError::Malformed { path: dir.to_string(), problem: format!("not compacted: {e}") })
            }
        };
        self.requests += 2 + files.len() as u64 / 1000;
        let mut out: BTreeMap<Name, Listed> = BTreeMap::new();
        for f in files {
            let Ok(part) = Name::parse(&f.key) else { continue };
            // A file most of whose rows deletes may remove counts as small:
            // its rewrite retires them.
            let small = if f.heavy { u64::MAX } else { small };
            out.entry(part).or_default().count(f.size, small);
        }
        self.requests += 1;
        let findings = crate::table::format::detect(self.data, dir).await?;
        Ok(Listing::Done(Tallied { listed: out, findings, foreign_file: None }))
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
                d.due_at_wall_ms = Some(next);
                d.why = format!(
                    "{}; held by min-interval until {} ({} s left)",
                    reasons.join(", "),
                    super::at(next),
                    (next - self.wall_ms).div_ceil(1000)
                );
                return;
            }
        }
        d.due = true;
        d.why = reasons.join(", ");
    }
}

/// Counts one listed entry of table folder `dir` in its partition.
fn tally(out: &mut BTreeMap<Name, Listed>, dir: &str, small: u64, young_after: i64, e: &store::Entry) {
    let Some(rel) = e.path.strip_prefix(dir) else { return };
    let Some((part, file)) = rel.split_once('/') else { return };
    if file.contains('/') || file.starts_with(['_', '.']) || e.special.is_some() || e.is_dir {
        return;
    }
    if layouts::limits::reserved_partition(part) || part.len() > paths::MAX_PLANNED_PARTITION_BYTES {
        return;
    }
    let Ok(part) = Name::parse(part) else { return };
    let in_flight = e.modified_ms.is_some_and(|m| m > young_after) || crate::table::format::is_in_progress_name(file);
    out.entry(part).or_default().count(e.len.unwrap_or(0), if in_flight { 0 } else { small });
}

impl Listed {
    /// Counts a file of `len` bytes (small under `small`).
    fn count(&mut self, len: u64, small: u64) {
        self.files += 1;
        self.bytes += len;
        if len < small {
            self.small_files += 1;
            self.small_bytes += len;
        }
    }
}

/// The executor a policy names.
pub fn executor_of(p: &PolicyDefinition) -> ExecutorSpec {
    let (kind, command_name) = match p.executor.as_str() {
        "merge" => (ExecutorKind::Merge, None),
        "parquet" => (ExecutorKind::Parquet, None),
        "delta" => (ExecutorKind::Delta, None),
        "iceberg" => (ExecutorKind::Iceberg, None),
        name => (ExecutorKind::Command, Some(name.to_string())),
    };
    ExecutorSpec { kind, command: None, command_name, timeout_ms: None }
}
