//! The tables as the planner last saw them (`compactd tables`, the status
//! page), each with its state now: what holds it, why, and when that
//! changes; and what the planner would submit now (`compactd plan
//! --dry-run`).
//!
//! A summary is the planner's last visit; what time changes since (a
//! window opening, a schedule firing, `min-interval` running out, a pause)
//! is judged here, at the instant the caller gives (tests give a manual
//! clock's).

use std::collections::BTreeMap;

use futures::TryStreamExt;
use layouts::policies::{self as paths, TableSummary};
use serde::Serialize;
use store::Store;

use super::define::{self, read_json};
use super::planner::{dry_run, gate, DryRun, Gate};
use super::{track, PolicyError, PolicyRow};

/// One table of `compactd tables`.
#[derive(Debug, Clone, Serialize)]
pub struct TableView {
    /// `<db>/<schema>/<table>`.
    pub table: String,
    pub paused: bool,
    /// The policy the summary names is deleted: nothing plans the table
    /// any more (unless another policy matches it: its next pass rewrites
    /// the summary).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub policy_deleted: bool,
    /// Its state now, with the reason and when it changes.
    pub status: TableStatus,
    /// What its last compaction (the summary's `lastTask`) changed: the
    /// table (metadata) version and Iceberg snapshot read and committed,
    /// files, bytes and rows in and out, as `status` shows them. Absent
    /// for executors that record no versions, and once the task is gone
    /// from `Scheduler/` (archived).
    #[serde(rename = "lastCompaction", skip_serializing_if = "Option::is_none")]
    pub last_compaction: Option<crate::tasks::view::TableChange>,
    /// The table's retention (`expire-every`) in words: what it freed
    /// (`expiredFiles`, `expiredBytes`), when it last ran, what it waits
    /// for; absent when its policy runs none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
    #[serde(flatten)]
    pub summary: TableSummary,
}

/// What a table waits for, now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableStatus {
    /// One of `policy-deleted`, `paused`, `refused`, `write-in-progress`,
    /// `cannot-submit`, `outside-windows`, `waiting-for-schedule`,
    /// `capped`, `queued`, `compacting`, `expiring` (the table's retention
    /// runs, no compaction), `min-interval`, `nothing-due`.
    pub state: &'static str,
    /// In words, naming the instants in the policy's zone too.
    pub reason: String,
    /// When the state changes by itself (a window opens, the schedule
    /// fires, `min-interval` runs out), if time decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_wall_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl TableStatus {
    fn new(state: &'static str, reason: String, until_wall_ms: Option<u64>) -> TableStatus {
        TableStatus { state, reason, until_wall_ms, until: until_wall_ms.map(super::at) }
    }
}

/// The state of a table whose summary is `s`, owned by `policy` (`None`:
/// deleted), whose gate now is `gate`, at `wall_ms`.
pub fn status(s: &TableSummary, policy: Option<&PolicyRow>, gate: Option<&Gate>, wall_ms: u64) -> TableStatus {
    let Some(row) = policy else {
        return TableStatus::new("policy-deleted", "its policy was deleted: not planned".into(), None);
    };
    let p = &row.definition;
    if row.paused {
        return TableStatus::new("paused", format!("policy {} is paused", p.name), None);
    }
    if let Some(h) = &s.hold {
        let state = if h.starts_with("refused") {
            "refused"
        } else if h.starts_with("waiting: a write is in progress") {
            "write-in-progress"
        } else {
            "cannot-submit"
        };
        return TableStatus::new(state, h.clone(), None);
    }
    let now = track::state_text(s, None, p, wall_ms);
    match gate {
        Some(g @ Gate::Closed { .. }) => return TableStatus::new("outside-windows", g.describe(p), g.until()),
        Some(g @ Gate::Schedule { .. }) => {
            let reason =
                if s.in_flight + s.queued > 0 { format!("{now}; then {}", g.describe(p)) } else { g.describe(p) };
            return TableStatus::new("waiting-for-schedule", reason, g.until());
        }
        Some(g) => return TableStatus::new("cannot-submit", g.describe(p), None),
        None => {}
    }
    let partitions = s.detail.iter().filter(|d| !super::retention::is_retention(d));
    let first_due = partitions.filter_map(|d| d.due_at_wall_ms).filter(|t| *t > wall_ms).min();
    let expiring = s.detail.iter().any(|d| super::retention::is_retention(d) && d.in_flight);
    let state = if s.capped {
        "capped"
    } else if s.queued > 0 {
        "queued"
    } else if s.in_flight > u64::from(expiring) {
        "compacting"
    } else if expiring {
        "expiring"
    } else if first_due.is_some() {
        "min-interval"
    } else {
        "nothing-due"
    };
    TableStatus::new(state, now, first_due)
}

/// The first `limit` table summaries in the tree, by name, with their
/// state at `wall_ms`; unreadable ones in `bad`.
pub async fn tables(
    store: &Store,
    limit: usize,
    bad: &mut Vec<PolicyError>,
    wall_ms: u64,
) -> Result<Vec<TableView>, PolicyError> {
    let mut bad_rows = vec![];
    let rows = define::list(store, &mut bad_rows).await?;
    let by_name: BTreeMap<String, &PolicyRow> = rows.iter().map(|r| (r.definition.name.to_string(), r)).collect();
    // A policy that could not be read is not a deleted one.
    let unreadable: Vec<String> = bad_rows
        .iter()
        .filter_map(|e| match e {
            PolicyError::Malformed { path, .. } => {
                path.strip_prefix(paths::POLICIES).and_then(|p| p.split('/').next()).map(str::to_string)
            }
            _ => None,
        })
        .collect();
    bad.extend(bad_rows);
    let mut gates = BTreeMap::new();
    for r in &rows {
        let g = gate(store, false, &r.definition, wall_ms, &mut BTreeMap::new()).await;
        gates.insert(r.definition.name.to_string(), g);
    }
    let mut paths_found = vec![];
    let mut s = store.list_stream(paths::TABLES, true);
    while let Some(e) = s.try_next().await? {
        // <db>/<schema>/<table>/Summary, not the decisions below it.
        let Some(rel) = e.path.strip_prefix(paths::TABLES) else { continue };
        if rel.split('/').count() == 4 && rel.ends_with(&format!("/{}", paths::SUMMARY)) {
            paths_found.push(e.path);
        }
    }
    paths_found.sort();
    paths_found.truncate(limit);
    let mut out = vec![];
    for p in paths_found {
        match read_json::<TableSummary>(store, &p).await {
            Ok(Some(summary)) => {
                let row = by_name.get(&summary.policy).copied();
                let deleted = row.is_none() && !unreadable.contains(&summary.policy);
                let status = if row.is_none() && !deleted {
                    TableStatus::new("cannot-submit", "its policy cannot be read".into(), None)
                } else {
                    status(&summary, row, gates.get(&summary.policy).and_then(Option::as_ref), wall_ms)
                };
                let last_compaction = match &summary.last_task {
                    Some(id) => match crate::tasks::view::table_change(store, id).await {
                        Ok(c) => c,
                        Err(crate::tasks::TaskError::NotFound(_)) => None,
                        Err(e) => {
                            bad.push(PolicyError::Malformed {
                                path: p.clone(),
                                problem: format!("its last task: {e}"),
                            });
                            None
                        }
                    },
                    None => None,
                };
                out.push(TableView {
                    table: format!("{}/{}/{}", summary.db, summary.schema, summary.table),
                    paused: row.is_some_and(|r| r.paused),
                    policy_deleted: deleted,
                    status,
                    last_compaction,
                    retention: super::retention::describe(&summary),
                    summary,
                })
            }
            Ok(None) => {}
            Err(e) => bad.push(e),
        }
    }
    out.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(out)
}

/// What the planner would submit now, and why (nothing is written): the
/// free slots of the live members shared as a round would; before any
/// node ran (no lease), those of one node at the default slots.
pub async fn plan(store: &Store, data: &Store, wall_ms: u64) -> Result<DryRun, PolicyError> {
    let cap = match crate::cluster::election::newest_lease(store).await? {
        Some(view) => super::Capacity::of(Some(&view)),
        None => super::Capacity::assumed(),
    };
    dry_run(store, data, &cap, wall_ms).await
}
