//! The read-only view of a whole cluster that any node's status page (`/`)
//! and its JSON API (`/api/…`) serve, read from the tree.
//!
//! Owns: what the page shows and how it is read ([`collect`]), and its HTML
//! ([`render_index`], [`render_task`], [`render_job`], in `html.rs`). Invariants: nothing
//! here writes; every value from the tree reaches HTML through [`esc`];
//! what one view reads is bounded ([`Limits`]) whatever the size of the
//! tree; an unreadable part is listed in `problems` and skipped, never a
//! failed page. The page needs no network: no script, no CDN asset, the
//! style inline.

use std::collections::BTreeMap;

use futures::StreamExt;
use layouts::formats::{self, Event, EventKind};
use layouts::{v2, Name, NodeId, TaskId, TaskState};
use serde::Serialize;
use store::Store;

mod html;
pub use html::{dag_svg, esc, render_error, render_index, render_job, render_task};

use crate::cluster::liveness::DatedHeartbeat;
use crate::jobs::instance::JobView;
use crate::tasks::{self, SubtaskStatus};

/// One node as `compactd nodes` and the page show it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub id: String,
    pub alive: bool,
    pub monitor: bool,
    pub incarnation: Option<u64>,
    pub beat: Option<u64>,
    pub last_beat_wall_ms: Option<u64>,
    pub session_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub pid: Option<u32>,
    pub version: Option<String>,
    pub fenced_actions: u64,
    pub event_cursor: u64,
    pub addr: Option<String>,
    pub declared_offline: bool,
    /// The node's wall clock minus the backend's, from its last heartbeat
    /// (see [`crate::cluster::liveness::DatedHeartbeat::clock_skew_ms`]);
    /// None where the backend's listing has no timestamps (memory).
    /// Nothing compactd decides depends on it: sessions and leases run on
    /// each observer's monotonic clock. It is shown so that a skewed host
    /// is seen, not hidden.
    pub clock_skew_ms: Option<i64>,
    /// Its heartbeat says it is draining (a first SIGTERM): it starts
    /// nothing new and leaves once its running units reported.
    pub draining: bool,
    /// The tree layouts its heartbeat says it reads (`[2]` for a node that
    /// predates the list).
    pub layouts: Vec<u32>,
    /// The layout in force in the cluster (`Registry/Layout.<n>`, as the
    /// lease says).
    pub layout_in_force: u32,
}

impl NodeRow {
    /// A live node that cannot read the layout in force: it gets no new
    /// work (`nodes` says "upgrade it").
    pub fn behind_layout(&self) -> bool {
        self.alive && !self.layouts.contains(&self.layout_in_force)
    }
}

/// A skew at least this large is flagged (`nodes`, the status page), or
/// one heartbeat interval plus 5 s if that is larger ([`skew_flagged`]):
/// more than the measurement's own error (up to one heartbeat interval,
/// S3's whole seconds).
pub const SKEW_FLAG_MS: i64 = 15_000;

/// Whether `row`'s skew is beyond what its measurement can be off by.
pub fn skew_flagged(row: &NodeRow) -> bool {
    let bound = SKEW_FLAG_MS.max(row.heartbeat_ms.unwrap_or(0) as i64 + 5_000);
    row.clock_skew_ms.is_some_and(|s| s.abs() >= bound)
}

/// `+120.3 s`, `-0.4 s`.
pub fn fmt_skew(ms: i64) -> String {
    format!("{:+.1} s", ms as f64 / 1000.0)
}

pub use crate::cluster::election::newest_lease;

/// Every node with a heartbeat, in the member view, or declared offline
/// and not purged yet (`declared_offline`, its heartbeat usually gone). A
/// node is `alive` only with a heartbeat present and its incarnation in
/// the view; `monitor` only with a heartbeat and an unreleased lease.
pub async fn nodes(store: &Store) -> store::Result<Vec<NodeRow>> {
    let lease = newest_lease(store).await?;
    nodes_with(store, lease.as_ref(), &mut Vec::new()).await
}

/// [`nodes`] in the member view `lease`, noting in `skipped` the entries of
/// `Registry/Nodes/` that are not heartbeats (`compactd nodes` names them).
pub async fn nodes_with(
    store: &Store,
    lease: Option<&formats::Lease>,
    skipped: &mut Vec<layouts::Anomaly>,
) -> store::Result<Vec<NodeRow>> {
    let (dated, bad) = crate::cluster::liveness::read_heartbeats_dated(store).await?;
    skipped.extend(bad);
    // The markers too: a lease written by an older monitor omits the layout.
    let in_force = lease.map(formats::Lease::layout).unwrap_or(layouts::layout::LAYOUT_2);
    let in_force = in_force.max(tasks::listed_layout(store).await?);
    let mut ids: BTreeMap<NodeId, Option<&DatedHeartbeat>> = dated.iter().map(|(k, d)| (k.clone(), Some(d))).collect();
    // Nodes declared offline are shown until the monitor purges their
    // record, whether or not their heartbeat file is still there.
    for m in lease.iter().flat_map(|l| l.members.iter().chain(&l.offline)) {
        ids.entry(m.node.clone()).or_insert(None);
    }
    let rows = ids
        .into_iter()
        .map(|(id, dated)| {
            let hb = dated.map(|d| &d.beat);
            let member = lease.and_then(|l| l.members.iter().find(|m| m.node == id));
            // The newest incarnation declared offline, for a node known by
            // that record alone.
            let offline = lease.and_then(|l| l.offline.iter().filter(|m| m.node == id).map(|m| m.incarnation).max());
            let incarnation = hb.map(|h| h.incarnation).or(member.map(|m| m.incarnation)).or(offline);
            let alive = hb.is_some() && member.is_some_and(|m| Some(m.incarnation) == incarnation);
            let declared_offline =
                lease.is_some_and(|l| l.offline.iter().any(|m| m.node == id && Some(m.incarnation) == incarnation));
            NodeRow {
                monitor: hb.is_some() && lease.is_some_and(|l| l.holder == id && !l.released),
                alive,
                incarnation,
                beat: hb.map(|h| h.beat),
                last_beat_wall_ms: hb.map(|h| h.wall_ms),
                session_timeout_ms: hb.map(|h| h.session_timeout_ms),
                heartbeat_ms: hb.map(|h| h.heartbeat_ms),
                pid: hb.map(|h| h.pid),
                version: hb.map(|h| h.version.clone()),
                fenced_actions: hb.map(|h| h.fenced_actions).unwrap_or(0),
                event_cursor: hb.map(|h| h.event_cursor).unwrap_or(0),
                addr: hb.and_then(|h| h.addr.clone()),
                declared_offline,
                clock_skew_ms: dated.and_then(DatedHeartbeat::clock_skew_ms),
                draining: hb.is_some_and(|h| h.draining),
                layouts: hb
                    .map(|h| h.layouts.clone().unwrap_or_else(|| layouts::layout::LEGACY_READS.to_vec()))
                    .unwrap_or_default(),
                layout_in_force: in_force,
                id: id.to_string(),
            }
        })
        .collect();
    Ok(rows)
}

/// How much one view reads at most.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Newest tasks under `Scheduler/` shown (3 GETs each).
    pub tasks: usize,
    /// Job instances shown (running first).
    pub jobs: usize,
    /// Newest change events shown (1 GET each).
    pub events: usize,
    /// Archived tasks shown (from the newest archives only).
    pub history: usize,
    /// Tables of the policies shown (1 GET each).
    pub tables: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { tasks: 100, jobs: 30, events: 30, history: 30, tables: 100 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MonitorRow {
    pub holder: String,
    pub epoch: u64,
    pub renewal: u64,
    pub released: bool,
    pub wall_ms: u64,
}

/// One task on the overview.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    pub id: String,
    pub state: TaskState,
    pub table: String,
    pub manager: Option<String>,
    pub round: u32,
    /// Units of a round: partitions, or shards.
    pub units: u64,
    pub success: u64,
    pub failed: u64,
    pub stop_requested: bool,
    pub started_wall_ms: Option<u64>,
    pub finished_wall_ms: Option<u64>,
    pub error: Option<String>,
    /// Outstanding subtasks (node, state, attempt).
    pub subtasks: Vec<SubtaskStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub seq: u64,
    pub epoch: u64,
    pub by: String,
    pub wall_ms: u64,
    pub what: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct HistoryRow {
    pub id: String,
    pub state: TaskState,
    pub table: String,
    pub success: u64,
    pub failed: u64,
    pub archived_wall_ms: u64,
}

/// The whole cluster as one node reads it from the tree.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    pub served_by: String,
    pub generated_wall_ms: u64,
    pub monitor: Option<MonitorRow>,
    pub nodes: Vec<NodeRow>,
    /// Tasks under `Scheduler/` (all of them; `tasks` holds the newest).
    pub tasks_total: usize,
    pub tasks: Vec<TaskRow>,
    pub jobs: Vec<JobView>,
    pub events: Vec<EventRow>,
    pub history: Vec<HistoryRow>,
    /// The policies' tables as the planner last saw them (the first
    /// [`Limits::tables`] by name).
    pub tables: Vec<crate::policy::view::TableView>,
    /// What could not be read (path and why); skipped.
    pub problems: Vec<String>,
}

fn describe(kind: &EventKind) -> String {
    match kind {
        EventKind::NodeJoined { node, incarnation } => format!("{node} joined (incarnation {incarnation})"),
        EventKind::NodeOffline { node, incarnation } => {
            format!("{node} declared offline (incarnation {incarnation})")
        }
        EventKind::NodeLeft { node, incarnation } => format!("{node} left (incarnation {incarnation})"),
        EventKind::MonitorElected { node } => format!("{node} elected monitor"),
        EventKind::Unknown => "an event of a newer version".into(),
    }
}

/// Outstanding subtasks of every task, from one recursive listing of
/// `TaskAssigned/` (no per-subtask read: the page shows node, state, attempt).
async fn all_subtasks(store: &Store) -> store::Result<BTreeMap<TaskId, Vec<SubtaskStatus>>> {
    let mut out: BTreeMap<TaskId, Vec<SubtaskStatus>> = BTreeMap::new();
    for (task, s) in tasks::list_subtasks(store, None).await? {
        out.entry(task).or_default().push(s);
    }
    Ok(out)
}

/// At most `limit` job instances, read from one listing: the running ones
/// first, then ended ones (latest trigger keys first: keys are usually
/// dates); newest first by creation time.
async fn job_views(store: &Store, limit: usize) -> Result<Vec<JobView>, crate::jobs::JobError> {
    let mut all = crate::jobs::instance::list_instances(store).await?;
    all.sort_by(|a, b| (a.2, &b.1, &b.0).cmp(&(b.2, &a.1, &a.0)));
    let mut out = vec![];
    for (job, trigger, _) in all.into_iter().take(limit) {
        match crate::jobs::instance::view(store, &job, &trigger, false).await {
            Ok(v) => out.push(v),
            // Removed meanwhile, or unreadable (`check` reports it).
            Err(crate::jobs::JobError::NoInstance { .. } | crate::jobs::JobError::Malformed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by_key(|j| std::cmp::Reverse(j.created_wall_ms));
    Ok(out)
}

async fn task_row(store: &Store, id: TaskId, subtasks: Vec<SubtaskStatus>) -> Result<TaskRow, String> {
    let mut dir = tasks::read_dir(store, &id).await.map_err(|e| e.to_string())?;
    if !dir.has_info {
        return Err(format!("{}: no TaskInfo yet", v2::task_dir(&id)));
    }
    let info = tasks::read_info(store, &id).await.map_err(|e| e.to_string())?;
    let r = tasks::read_counts(store, &id, &mut dir, &info).await.map_err(|e| e.to_string())?;
    let manager = tasks::read_term(store, &id, dir.term()).await.ok().flatten().map(|t| t.node.to_string());
    // Partitions or shards; a task on a table without partitions runs one
    // unit (and the outstanding subtasks show what runs now).
    let planned = info.run.shards.map(u64::from).unwrap_or(info.run.partitions.len() as u64);
    let units = planned.max(r.success + r.failed + subtasks.len() as u64);
    Ok(TaskRow {
        id: id.to_string(),
        state: dir.state.unwrap_or(TaskState::Init),
        table: format!("{}.{}.{}", info.db_name, info.schema_name, info.table_name),
        manager,
        round: info.run.round,
        units,
        success: r.success,
        failed: r.failed,
        stop_requested: dir.stop,
        started_wall_ms: info.run.started_wall_ms,
        finished_wall_ms: info.run.finished_wall_ms,
        error: info.run.error.clone(),
        subtasks,
    })
}

/// Reads the cluster view; `served_by` names the node serving it.
pub async fn collect(store: &Store, served_by: &str, wall_ms: u64, limits: Limits) -> store::Result<ClusterView> {
    let mut problems = vec![];
    let lease = newest_lease(store).await?;
    let nodes = nodes_with(store, lease.as_ref(), &mut Vec::new()).await?;
    let monitor = lease.as_ref().map(|l| MonitorRow {
        holder: l.holder.to_string(),
        epoch: l.epoch,
        renewal: l.renewal,
        released: l.released,
        wall_ms: l.wall_ms,
    });
    // Task ids carry their creation time: newest first.
    let mut ids = tasks::list_ids(store).await?;
    let tasks_total = ids.len();
    ids.sort_by_key(|id| std::cmp::Reverse((id.unix_ms, id.seq)));
    ids.truncate(limits.tasks);
    let mut subs = all_subtasks(store).await?;
    let rows: Vec<Result<TaskRow, String>> = futures::stream::iter(ids.into_iter().map(|id| {
        let s = subs.remove(&id).unwrap_or_default();
        task_row(store, id, s)
    }))
    .buffered(8)
    .collect()
    .await;
    let mut task_rows = vec![];
    for r in rows {
        match r {
            Ok(t) => task_rows.push(t),
            Err(e) => problems.push(e),
        }
    }
    let jobs = match job_views(store, limits.jobs).await {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("job instances: {e}"));
            vec![]
        }
    };
    let seqs = crate::cluster::events::list_seqs(store).await?;
    let newest: Vec<u64> = seqs.iter().rev().take(limits.events).copied().collect();
    let mut events = vec![];
    for seq in newest {
        let path = v2::event(seq);
        // Gone meanwhile: purged.
        if let Some(b) = store.read_or_bad(&path).await? {
            match b.map_err(|e| e.to_string()).and_then(|b| formats::decode::<Event>(&b).map_err(|e| e.to_string())) {
                Ok(e) => events.push(EventRow {
                    seq: e.seq,
                    epoch: e.epoch,
                    by: e.by.to_string(),
                    wall_ms: e.wall_ms,
                    what: describe(&e.kind),
                }),
                Err(err) => problems.push(format!("{path}: {err}")),
            }
        }
    }
    let (mut archived, bad) = crate::monitor::tasks::read_history_newest(store, limits.history).await?;
    problems.extend(bad.iter().map(|a| a.to_string()));
    archived.sort_by_key(|a| std::cmp::Reverse(a.archived_wall_ms));
    let history = archived
        .into_iter()
        .take(limits.history)
        .map(|a| HistoryRow {
            id: a.info.id.to_string(),
            state: a.state,
            table: format!("{}.{}.{}", a.info.db_name, a.info.schema_name, a.info.table_name),
            success: a.info.result.success_count,
            failed: a.info.result.failed_count,
            archived_wall_ms: a.archived_wall_ms,
        })
        .collect();
    let mut bad = vec![];
    let tables = match crate::policy::view::tables(store, limits.tables, &mut bad, wall_ms).await {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("tables: {e}"));
            vec![]
        }
    };
    problems.extend(bad.iter().map(|e| e.to_string()));
    Ok(ClusterView {
        served_by: served_by.to_string(),
        generated_wall_ms: wall_ms,
        monitor,
        nodes,
        tasks_total,
        tasks: task_rows,
        jobs,
        events,
        history,
        tables,
        problems,
    })
}

// ---------------------------------------------------------------------------
// HTML
// ---------------------------------------------------------------------------

/// Parses `/jobs/<job>/<trigger>` segments.
pub fn job_names(job: &str, trigger: &str) -> Result<(Name, Name), String> {
    let j = Name::parse(job).map_err(|e| format!("job name {job:?}: {e}"))?;
    let t = Name::parse(trigger).map_err(|e| format!("trigger {trigger:?}: {e}"))?;
    Ok((j, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows show the layout `Registry/` puts in force even when the
    /// lease (an older monitor's) says nothing of it.
    #[tokio::test]
    async fn the_layout_in_force_is_read_from_the_markers_too() {
        let store = Store::memory().await;
        let id = |n: &str| NodeId::parse(n).unwrap();
        let lease = formats::Lease {
            epoch: 1,
            holder: id("n1"),
            holder_incarnation: 1,
            renewal: 0,
            lease_ms: 1000,
            wall_ms: 0,
            members: vec![formats::Member::bare(id("n1"), 1, 1000), formats::Member::bare(id("n2"), 1, 1000)],
            offline: vec![],
            last_event: 0,
            released: false,
            layout: None,
        };
        store.create(&layouts::v2::lease(1), formats::encode(&lease)).await.unwrap();
        let rows = nodes(&store).await.unwrap();
        assert!(rows.len() == 2 && rows.iter().all(|r| r.layout_in_force == 2), "{rows:?}");
        store.create(&layouts::v3::layout_marker(3), Vec::new()).await.unwrap();
        let rows = nodes(&store).await.unwrap();
        assert!(rows.len() == 2 && rows.iter().all(|r| r.layout_in_force == 3), "{rows:?}");
    }
}
