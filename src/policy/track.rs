//! The planner's work between visits: per table, the partitions it has in
//! flight and the due ones waiting for a slot ([`Track`]), which its rounds
//! submit from as slots free up ([`super::share`]) without listing the
//! table again, and the summaries it rewrites when that changes.
//!
//! Everything here is the planner's memory, rebuilt from the tree: a visit
//! replaces a table's track with what it judged, and a new monitor starts
//! with none (its first pass finds what is in flight). A track is dropped
//! once nothing of its table is in flight or waiting. What a round learns
//! between visits comes from the tree too: a task in flight has ended when
//! its folder says so ([`Tracks::refresh`], one listing per task).
//!
//! The planner also remembers each table's summary as it last read or
//! wrote it ([`Known`]), so that a visit reads it from the tree only once
//! per planner: within its epoch the planner is the summaries' only writer
//! (every round is fenced), and a new monitor starts a new planner, which
//! reads them again. A summary whose write failed is forgotten (the tree
//! may hold either), and the memory is bounded ([`MAX_KNOWN_PARTITIONS`]):
//! beyond it summaries are read at each visit, as before.

use std::collections::{BTreeMap, VecDeque};

use layouts::policies::{PolicyDefinition, TableSummary};
use layouts::{TaskId, TaskState};
use store::Store;

use super::visit::{write_summary, Judged};
use super::{Owned, PlanReport};
use crate::tasks;

/// Due partitions the planner holds waiting at most, over all tables (the
/// rest are found again at a later pass): a bound on its memory whatever
/// the backlog.
pub const MAX_QUEUED: usize = 200_000;

/// Partitions' details the planner remembers at most in the summaries it
/// knows, over all tables ([`Known`]).
pub const MAX_KNOWN_PARTITIONS: usize = 200_000;

/// One table's work.
#[derive(Debug)]
pub struct Track {
    pub item: Owned,
    /// As judged at the last visit, then updated by the decisions since.
    pub summary: TableSummary,
    /// Partitions in flight: their task (`None`: not recorded yet) and
    /// when the planner learnt of it (a counter: the oldest are looked at
    /// first, as they are the likeliest to have ended).
    pub in_flight: BTreeMap<String, (Option<TaskId>, u64)>,
    /// Due partitions waiting for a slot: indices into `summary.detail`,
    /// most small files first.
    pub queue: VecDeque<usize>,
    /// Since when (wall ms) the oldest of them waits.
    pub since: u64,
    /// Why its policy may not submit now (paused or deleted since the
    /// visit, outside its windows, a command no node defines).
    pub blocked: Option<String>,
    /// Its summary changed since it was last written.
    pub dirty: bool,
}

/// Every table's track, by `<db>/<schema>/<table>`.
#[derive(Debug, Default)]
pub struct Tracks {
    pub by_table: BTreeMap<String, Track>,
    /// Counts what the planner learns is in flight, oldest first.
    learnt: u64,
    /// The tasks this planner submitted that it has not seen end: when
    /// (wall ms), for their round trip.
    sent: std::collections::HashMap<TaskId, u64>,
    /// The round trip of its tasks, decision to seen ended (wall ms, a
    /// moving average), once one was seen.
    round_trip_ms: Option<u64>,
    /// The summaries in the tree, as far as this planner knows them.
    pub known: Known,
}

/// Tables' summaries as they are in the tree (read or written by this
/// planner), by `<db>/<schema>/<table>`: a visit takes its table's, and the
/// summary is put back once written or found unchanged.
#[derive(Debug, Default)]
pub struct Known {
    by_table: BTreeMap<String, TableSummary>,
    /// Details held, over all summaries.
    partitions: usize,
}

impl Known {
    /// The table's summary as in the tree, if known (then forgotten: it is
    /// put back after the visit's write).
    pub fn take(&mut self, o: &Owned) -> Option<TableSummary> {
        let s = self.by_table.remove(&key(o))?;
        self.partitions -= s.detail.len();
        Some(s)
    }

    /// The tree holds `s` as the summary of the table `k` (unless memory
    /// is short: then it is read again at the next visit).
    fn put(&mut self, k: &str, s: TableSummary) {
        if let Some(old) = self.by_table.remove(k) {
            self.partitions -= old.detail.len();
        }
        if self.partitions + s.detail.len() <= MAX_KNOWN_PARTITIONS {
            self.partitions += s.detail.len();
            self.by_table.insert(k.to_string(), s);
        }
    }

    /// Forgets the summaries of the tables `keep` does not name.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let mut partitions = 0;
        self.by_table.retain(|k, s| {
            let kept = keep(k);
            partitions += if kept { s.detail.len() } else { 0 };
            kept
        });
        self.partitions = partitions;
    }
}

pub fn key(o: &Owned) -> String {
    format!("{}/{}/{}", o.db, o.schema, o.table)
}

impl Tracks {
    /// Units in flight over all tables.
    pub fn in_flight(&self) -> u64 {
        self.by_table.values().map(|t| t.in_flight.len() as u64).sum()
    }

    pub fn queued(&self) -> usize {
        self.by_table.values().map(|t| t.queue.len()).sum()
    }

    /// Replaces a table's track with what a visit judged.
    pub fn absorb(&mut self, item: &Owned, judged: Judged, wall_ms: u64) {
        let k = key(item);
        self.known.put(&k, judged.prev);
        let old = self.by_table.remove(&k);
        let room = MAX_QUEUED.saturating_sub(self.queued());
        let queue: VecDeque<usize> =
            judged.summary.detail.iter().enumerate().filter(|(_, d)| d.due).map(|(i, _)| i).take(room).collect();
        let old_in_flight = old.as_ref().map(|o| o.in_flight.clone()).unwrap_or_default();
        let since = old.filter(|o| !o.queue.is_empty() && !queue.is_empty()).map_or(wall_ms, |o| o.since);
        let mut in_flight = BTreeMap::new();
        for (part, task) in judged.in_flight {
            // Known before: keeps its age.
            let order = old_in_flight.get(&part).map(|(_, o)| *o).unwrap_or_else(|| self.learn());
            in_flight.insert(part, (task, order));
        }
        let track =
            Track { item: item.clone(), summary: judged.summary, in_flight, queue, since, blocked: None, dirty: true };
        self.by_table.insert(k, track);
    }

    /// Drops what waits in tables no longer planned by the policy that
    /// queued it (`keep` says which are). What is in flight stays counted.
    pub fn retain_queues(&mut self, keep: impl Fn(&str, &Track) -> bool) {
        for (k, t) in self.by_table.iter_mut() {
            if !t.queue.is_empty() && !keep(k, t) {
                t.queue.clear();
                t.dirty = true;
            }
        }
    }

    /// A task submitted at `wall_ms`.
    pub fn sent(&mut self, id: TaskId, wall_ms: u64) {
        if self.sent.len() >= MAX_QUEUED {
            // Tasks it never saw end (their tables left the planner): a
            // bound on its memory.
            self.sent.clear();
        }
        self.sent.insert(id, wall_ms);
    }

    /// Its tasks' round trip, decision to seen ended, if one was seen.
    pub fn round_trip_ms(&self) -> Option<u64> {
        self.round_trip_ms
    }

    /// The next age counter value.
    pub fn learn(&mut self) -> u64 {
        self.learnt += 1;
        self.learnt
    }

    /// Looks at tasks in flight, oldest first, and forgets those that
    /// ended: done, failed, stopped, or gone. At most `limit` listings (one
    /// a task, counted in `report`). Told how many ended (`want`, the `plan`
    /// pokes' count, which undercounts: a manager's tick that ends several
    /// pokes once), it stops at the first task still running once it found
    /// that many: tasks mostly end in the order they started.
    pub async fn refresh(
        &mut self,
        store: &Store,
        limit: u64,
        want: Option<u64>,
        wall_ms: u64,
        report: &mut PlanReport,
    ) {
        let mut all: Vec<(u64, String, String, TaskId)> = self
            .by_table
            .iter()
            .flat_map(|(k, t)| {
                t.in_flight.iter().filter_map(|(p, (id, order))| id.map(|id| (*order, k.clone(), p.clone(), id)))
            })
            .collect();
        all.sort();
        let mut found = 0;
        if want == Some(0) {
            return;
        }
        for (_, k, part, id) in all.into_iter().take(limit.max(1) as usize) {
            report.requests += 1;
            let dir = match tasks::read_dir(store, &id).await {
                Ok(d) => d,
                Err(e) => {
                    report.errors.push(format!("reading task {id}: {e}"));
                    continue;
                }
            };
            let ended = matches!(dir.state, Some(TaskState::Done | TaskState::Failed | TaskState::Cancel))
                || (dir.state.is_none() && !dir.has_info && dir.terms.is_empty());
            if !ended {
                if want.is_some_and(|w| found >= w) {
                    break;
                }
                continue;
            }
            found += 1;
            if let Some(at) = self.sent.remove(&id) {
                let took = wall_ms.saturating_sub(at);
                self.round_trip_ms = Some(self.round_trip_ms.map_or(took, |r| (3 * r + took) / 4));
            }
            let Some(t) = self.by_table.get_mut(&k) else { continue };
            t.in_flight.remove(&part);
            report.ended += 1;
            if let Some(d) = t.summary.detail.iter_mut().find(|d| d.partition == part) {
                // A stopped task's partition is held until its executors
                // surely ended: that is the next visit's to judge.
                if dir.state != Some(TaskState::Cancel) {
                    d.in_flight = false;
                    d.why = format!("its task {id} ended: judged again at the next visit");
                }
            }
            t.summary.in_flight = t.in_flight.len() as u64;
            t.dirty = true;
        }
    }

    /// Writes the summaries that changed (their state first), then drops
    /// the tracks with nothing in flight or waiting.
    pub async fn flush(&mut self, store: &Store, wall_ms: u64, report: &mut PlanReport) {
        let unknown = TableSummary::default();
        for (k, t) in self.by_table.iter_mut().filter(|(_, t)| t.dirty) {
            t.dirty = false;
            set_state(t, wall_ms);
            let prev = self.known.by_table.get(k).unwrap_or(&unknown);
            match write_summary(store, &t.item, &t.summary, prev).await {
                Ok(true) => {
                    report.requests += 1;
                    self.known.put(k, t.summary.clone());
                }
                Ok(false) => {}
                Err(e) => {
                    report.errors.push(format!("writing the summary of {k}: {e}"));
                    self.known.take(&t.item);
                }
            }
        }
        self.by_table.retain(|_, t| !t.queue.is_empty() || !t.in_flight.is_empty());
    }
}

/// Sets the summary's `state`, `queued` and `capped` from the track.
pub fn set_state(t: &mut Track, wall_ms: u64) {
    let s = &mut t.summary;
    let (queued, in_flight) = (t.queue.len() as u64, t.in_flight.len() as u64);
    let cap = t.item.policy.max_units_per_table;
    s.queued = queued;
    s.in_flight = in_flight;
    s.capped = queued > 0 && cap.is_some_and(|c| in_flight >= u64::from(c));
    s.state = state_text(s, t.blocked.as_deref(), &t.item.policy, wall_ms);
}

/// The table's state in words (the views add what time changes: see
/// `super::view`).
pub fn state_text(s: &TableSummary, blocked: Option<&str>, p: &PolicyDefinition, wall_ms: u64) -> String {
    let cap = p.max_units_per_table;
    if let Some(h) = s.hold.as_deref().or(blocked) {
        return h.to_string();
    }
    let retention = s.detail.iter().find(|d| super::retention::is_retention(d));
    let partitions = s.detail.iter().filter(|d| !super::retention::is_retention(d));
    let held: Vec<u64> = partitions.filter_map(|d| d.due_at_wall_ms).filter(|t| *t > wall_ms).collect();
    let min_interval = held.iter().min().map(|first| {
        format!("{} partition(s) held by min-interval, the first due at {}", held.len(), super::at(*first))
    });
    let mut parts = vec![];
    match (s.queued, s.capped) {
        (0, _) => {}
        (q, false) if s.in_flight > 0 && super::one_task_per_table(p) => {
            parts.push(format!("{q} due partition(s) waiting for the table's running task (one task at a time)"))
        }
        (q, true) => parts.push(format!(
            "at its cap of {} partitions at once (max-units-per-table): {q} due waiting",
            cap.unwrap_or_default()
        )),
        (q, false) => parts.push(format!("{q} due partition(s) waiting for a free slot")),
    }
    let expiring = retention.filter(|d| d.in_flight);
    let compacting = s.in_flight.saturating_sub(u64::from(expiring.is_some()));
    if compacting > 0 {
        parts.push(format!("compacting {compacting} partition(s)"));
    }
    if let Some(d) = expiring {
        parts.push(d.why.clone());
    }
    parts.extend(min_interval);
    if let Some(next) = retention.and_then(|d| d.due_at_wall_ms).filter(|t| *t > wall_ms) {
        parts.push(format!("retention next at {}", super::at(next)));
    }
    if parts.is_empty() {
        "nothing due".into()
    } else {
        parts.join("; ")
    }
}
