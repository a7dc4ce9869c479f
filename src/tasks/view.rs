//! What `status` (and the status page) shows of a task: its subtasks in
//! either layout, its counts, and what its units recorded this round.

use std::collections::BTreeMap;

use layouts::formats::{self, TaskInfo};
use layouts::v3::{self, BatchInfo};
use layouts::{v2, Name, NodeId, SubtaskState, TaskId, TaskState};
use serde::Serialize;
use store::Store;

use super::folder::NodeFolder;
use super::outcomes::{read_dir_with_outcomes, result_counts, round_outcomes, Recorded};
use super::{read_info, read_term, TaskError};

/// One subtask as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskStatus {
    /// `<task>.r<round>.u<unit>.a<attempt>` in every layout.
    pub id: String,
    pub partition: Option<String>,
    pub shard: Option<u32>,
    pub node: String,
    pub state: SubtaskState,
    pub round: u32,
    pub attempt: u32,
    /// Its layout 3 batch folder (absent: a layout 2 subtask folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
}

/// `compactd status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    pub id: TaskId,
    pub state: TaskState,
    pub manager: Option<String>,
    pub manager_term: u64,
    pub db: String,
    pub schema: String,
    pub table: String,
    pub round: u32,
    pub result: ResultStatus,
    pub stop_requested: bool,
    pub started_wall_ms: Option<u64>,
    pub finished_wall_ms: Option<u64>,
    /// Outstanding subtasks (finished ones are removed by the manager and
    /// counted in `result`).
    pub subtasks: Vec<SubtaskStatus>,
    /// Counters the executors reported for this round's finished units,
    /// summed (e.g. `skipped_special`: non-regular entries left alone).
    pub stats: BTreeMap<String, u64>,
    /// A `delta` task's finished units this round, an `iceberg` task's
    /// commit unit: the table (metadata) version each read and the one it
    /// committed, an `iceberg` commit's snapshots in its `stats`
    /// (`snapshot_before`, `snapshot_after`) with the files, bytes and rows
    /// it committed (`committed_*`); absent for other executors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub table_versions: Vec<UnitVersions>,
    /// This round's units that failed for good, with their last error.
    pub failures: Vec<UnitFailure>,
    /// Why the task failed as a whole, if it did (e.g. no partitions found).
    pub error: Option<String>,
    /// A repeat task between rounds (or a cron task before its first): when
    /// the next round is due.
    pub next_round_at_ms: Option<u64>,
    /// A cron repeat task's schedule and zone.
    pub repeat: formats::RepeatInfo,
    /// Files read for this view that could not be used (the path and why):
    /// a subtask's info (its partition and shard are then unknown), a unit
    /// outcome (its error or counters are then missing). Absent when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// What a `delta` unit reported: the table version it read, and the one it
/// committed (equal if it had nothing to do; the conflicting version if it
/// was abandoned).
#[derive(Debug, Clone, Serialize)]
pub struct UnitVersions {
    pub unit: u32,
    pub partition: Option<String>,
    pub version_before: u64,
    pub version_after: Option<u64>,
    pub abandoned: bool,
    /// The unit's other figures (files, bytes and rows in and out).
    pub stats: BTreeMap<String, u64>,
}

impl UnitVersions {
    /// What a unit that succeeded recorded of the table's versions, if it
    /// is a `delta` unit or an `iceberg` commit.
    fn of(unit: u32, r: &Recorded, info: &TaskInfo) -> Option<UnitVersions> {
        let before = *r.stats.get("version_before")?;
        let mut s = r.stats.clone();
        let after = s.remove("version_after");
        s.remove("version_before");
        let abandoned = s.remove("abandoned").is_some_and(|n| n > 0);
        let partition = info.run.partitions.get(unit as usize).map(|p| p.to_string());
        Some(UnitVersions { unit, partition, version_before: before, version_after: after, abandoned, stats: s })
    }

    /// A figure of what the unit committed: a `delta` unit's own, an
    /// `iceberg` commit unit's `committed_*` (its units' figures are their
    /// own outcomes).
    pub fn figure(&self, k: &str) -> u64 {
        self.stats.get(k).or_else(|| self.stats.get(&format!("committed_{k}"))).copied().unwrap_or(0)
    }

    /// An `iceberg` commit's snapshots: the one it read, the one it
    /// committed (or found committed).
    pub fn snapshots(&self) -> Option<(u64, Option<u64>)> {
        Some((*self.stats.get("snapshot_before")?, self.stats.get("snapshot_after").copied()))
    }
}

/// What a task changed in its table, over its units this round: what
/// `tables` shows of a table's last compaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableChange {
    pub task: String,
    pub state: String,
    /// The table (metadata) version its units read, the oldest; and the
    /// newest they committed (absent: none committed yet, or nothing).
    pub version_read: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_committed: Option<u64>,
    /// An `iceberg` task's snapshot read and committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_read: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_committed: Option<u64>,
    pub files_in: u64,
    pub files_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows_in: u64,
    pub rows_out: u64,
}

impl TableChange {
    /// From a task's [`TaskStatus::table_versions`]; `None` when no unit
    /// recorded a version (another executor, or nothing ended yet).
    pub fn of(task: &TaskId, state: TaskState, versions: &[UnitVersions]) -> Option<TableChange> {
        let mut c = TableChange {
            task: task.to_string(),
            state: state.as_str().to_string(),
            version_read: versions.iter().map(|v| v.version_before).min()?,
            ..TableChange::default()
        };
        for v in versions.iter().filter(|v| !v.abandoned) {
            if v.version_after != Some(v.version_before) {
                c.version_committed = c.version_committed.max(v.version_after);
            }
            if let Some((read, after)) = v.snapshots() {
                c.snapshot_read = Some(read);
                c.snapshot_committed = after;
            }
            for (k, n) in [
                ("files_in", &mut c.files_in),
                ("files_out", &mut c.files_out),
                ("bytes_in", &mut c.bytes_in),
                ("bytes_out", &mut c.bytes_out),
                ("rows_in", &mut c.rows_in),
                ("rows_out", &mut c.rows_out),
            ] {
                *n += v.figure(k);
            }
        }
        Some(c)
    }

    /// In words, as `tables` and the status page show it.
    pub fn describe(&self) -> String {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        let versions = format!("version {} -> {}", self.version_read, opt(self.version_committed));
        let read = match self.snapshot_read {
            Some(r) => format!("snapshot {r} -> {} ({versions})", opt(self.snapshot_committed)),
            None => versions,
        };
        format!(
            "task {} {}: {read}: {} files into {}, {} bytes into {}, {} rows into {}",
            self.task,
            self.state,
            self.files_in,
            self.files_out,
            self.bytes_in,
            self.bytes_out,
            self.rows_in,
            self.rows_out
        )
    }
}

/// What task `id` changed in its table (see [`TableChange`]): the
/// figures `status` shows, read the same way, without its subtasks.
pub async fn table_change(store: &Store, id: &TaskId) -> Result<Option<TableChange>, TaskError> {
    let dir = read_dir_with_outcomes(store, id).await?;
    if !dir.has_info {
        return Err(TaskError::NotFound(*id));
    }
    let info = read_info(store, id).await?;
    let recorded = round_outcomes(store, id, &dir, info.run.round, &mut vec![]).await?;
    let versions: Vec<UnitVersions> =
        recorded.iter().filter(|(_, r)| r.ok).filter_map(|(unit, r)| UnitVersions::of(*unit, r, &info)).collect();
    Ok(TableChange::of(id, dir.state.unwrap_or(TaskState::Init), &versions))
}

#[derive(Debug, Clone, Serialize)]
pub struct UnitFailure {
    pub unit: u32,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ResultStatus {
    pub success: u64,
    pub failed: u64,
}

/// Every unit attempt in `TaskAssigned/` (of `task` only, if given), with
/// its task and its state from its markers, from one recursive LIST: a
/// layout 2 subtask folder, or a layout 3 unit that has a marker (a unit no
/// worker claimed yet is only in its batch's `Info`: [`find_subtasks`]
/// reads it). `partition` and `shard` are left empty (they need a read).
pub async fn list_subtasks(store: &Store, task: Option<&TaskId>) -> store::Result<Vec<(TaskId, SubtaskStatus)>> {
    use futures::TryStreamExt;
    let prefix = task.map(|t| t.to_string()).unwrap_or_default();
    let mut nodes: BTreeMap<String, NodeFolder> = BTreeMap::new();
    let mut entries = store.list_stream(v2::TASK_ASSIGNED, true);
    while let Some(e) = entries.try_next().await? {
        let rel = &e.path[v2::TASK_ASSIGNED.len()..];
        let Some((node, rest)) = rel.split_once('/') else { continue };
        if rest.split_once('/').is_some_and(|(sub, _)| sub.starts_with(&prefix)) {
            nodes.entry(node.to_string()).or_default().note(rest);
        }
    }
    let mut out = vec![];
    for (node, folder) in nodes {
        for (sub, f) in folder.subtasks {
            let Some((of, round, _unit, attempt)) = v2::parse_subtask_name(&sub) else { continue };
            if task.is_none_or(|t| *t == of) {
                let s = SubtaskStatus {
                    id: sub,
                    partition: None,
                    shard: None,
                    node: node.clone(),
                    state: f.state(),
                    round,
                    attempt,
                    batch: None,
                };
                out.push((of, s));
            }
        }
        for (b, f) in folder.batches {
            let Some((of, round, _)) = v3::parse_batch_name(&b) else { continue };
            if task.is_some_and(|t| *t != of) {
                continue;
            }
            for ((unit, attempt), m) in f.units {
                let id = v3::unit_id(&of, round, unit, attempt).to_string();
                let s = SubtaskStatus {
                    id,
                    partition: None,
                    shard: None,
                    node: node.clone(),
                    state: m.state(),
                    round,
                    attempt,
                    batch: Some(b.clone()),
                };
                out.push((of, s));
            }
        }
    }
    Ok(out)
}

/// Every unit attempt of `id` on any node, with its state, partition and
/// shard: one recursive LIST of `TaskAssigned/`, one read per subtask
/// folder and per batch (whose `Info` also names the units not claimed yet).
pub async fn find_subtasks(store: &Store, id: &TaskId) -> store::Result<Vec<SubtaskStatus>> {
    find_subtasks_noting(store, id, &mut Vec::new()).await
}

/// [`find_subtasks`], noting in `skipped` each info that is not one.
async fn find_subtasks_noting(
    store: &Store,
    id: &TaskId,
    skipped: &mut Vec<String>,
) -> store::Result<Vec<SubtaskStatus>> {
    let mut out = vec![];
    let mut batches: BTreeMap<(String, String), Vec<SubtaskStatus>> = BTreeMap::new();
    for (_, mut s) in list_subtasks(store, Some(id)).await? {
        if let Some(b) = s.batch.clone() {
            batches.entry((s.node.clone(), b)).or_default().push(s);
            continue;
        }
        if let (Ok(n), Ok(name)) = (NodeId::parse(&s.node), Name::parse(&s.id)) {
            let path = v2::subtask_info(&n, &name);
            match store.read_or_bad(&path).await? {
                Some(Ok(b)) => match formats::decode::<TaskInfo>(&b) {
                    Ok(info) => {
                        s.partition = info.partition_name.map(|p| p.to_string());
                        s.shard = info.run.subtask.and_then(|m| m.shard).map(|s| s.index);
                    }
                    Err(e) => skipped.push(format!("{path}: {e}")),
                },
                Some(Err(bad)) => skipped.push(format!("{path}: {bad}")),
                None => {}
            }
        }
        out.push(s);
    }
    // Batches whose units have no marker yet list none: every batch folder
    // of the task is read, marked or not.
    for (node, b) in batch_folders(store, id).await? {
        batches.entry((node, b)).or_default();
    }
    for ((node, b), mut marked) in batches {
        let (Ok(n), Ok(name)) = (NodeId::parse(&node), Name::parse(&b)) else { continue };
        let path = v3::batch_info(&n, &name);
        let info = match store.read_or_bad(&path).await? {
            Some(Ok(bytes)) => match formats::decode::<BatchInfo>(&bytes) {
                Ok(i) => Some(i),
                Err(e) => {
                    skipped.push(format!("{path}: {e}"));
                    None
                }
            },
            Some(Err(bad)) => {
                skipped.push(format!("{path}: {bad}"));
                None
            }
            None => None,
        };
        for u in info.iter().flat_map(|i| &i.units) {
            let unit_id = v3::unit_id(id, info.as_ref().map(|i| i.round).unwrap_or(0), u.unit, u.attempt).to_string();
            match marked.iter_mut().find(|s| s.id == unit_id) {
                Some(s) => {
                    s.partition = u.partition.as_ref().map(|p| p.to_string());
                    s.shard = u.shard.map(|s| s.index);
                }
                None => marked.push(SubtaskStatus {
                    id: unit_id,
                    partition: u.partition.as_ref().map(|p| p.to_string()),
                    shard: u.shard.map(|s| s.index),
                    node: node.clone(),
                    state: SubtaskState::Init,
                    round: info.as_ref().map(|i| i.round).unwrap_or(0),
                    attempt: u.attempt,
                    batch: Some(b.clone()),
                }),
            }
        }
        out.extend(marked);
    }
    Ok(out)
}

/// The batch folders of `id` (node, name): one LIST per node folder.
async fn batch_folders(store: &Store, id: &TaskId) -> store::Result<Vec<(String, String)>> {
    let mut out = vec![];
    for node in store.list(v2::TASK_ASSIGNED).await? {
        if !node.is_dir {
            continue;
        }
        for e in store.list(&node.path).await? {
            if e.is_dir && v3::parse_batch_name(e.name()).is_some_and(|(t, ..)| t == *id) {
                out.push((node.name().to_string(), e.name().to_string()));
            }
        }
    }
    Ok(out)
}

pub async fn status(store: &Store, id: &TaskId) -> Result<TaskStatus, TaskError> {
    let dir = read_dir_with_outcomes(store, id).await?;
    if !dir.has_info {
        return Err(TaskError::NotFound(*id));
    }
    let info = read_info(store, id).await?;
    let term = dir.term();
    let manager = read_term(store, id, term).await?.map(|t| t.node.to_string());
    let mut skipped = vec![];
    let subtasks = find_subtasks_noting(store, id, &mut skipped).await?;
    let recorded = round_outcomes(store, id, &dir, info.run.round, &mut skipped).await?;
    let mut stats = BTreeMap::new();
    let mut table_versions = vec![];
    let mut failures = vec![];
    for (unit, r) in &recorded {
        if !r.ok {
            failures.push(UnitFailure { unit: *unit, error: r.error.clone() });
            continue;
        }
        table_versions.extend(UnitVersions::of(*unit, r, &info));
        for (k, v) in &r.stats {
            // Versions and snapshot ids are not counters: a sum means
            // nothing.
            if !k.starts_with("version_") && !k.starts_with("snapshot_") {
                *stats.entry(k.clone()).or_insert(0u64) += v;
            }
        }
    }
    Ok(TaskStatus {
        id: *id,
        state: dir.state.unwrap_or(TaskState::Init),
        manager,
        manager_term: term,
        db: info.db_name.to_string(),
        schema: info.schema_name.to_string(),
        table: info.table_name.to_string(),
        round: info.run.round,
        result: result_counts(&dir, &info),
        stop_requested: dir.stop,
        started_wall_ms: info.run.started_wall_ms,
        finished_wall_ms: info.run.finished_wall_ms,
        subtasks,
        stats,
        table_versions,
        failures,
        error: info.run.error.clone(),
        next_round_at_ms: info.run.next_round_at_ms,
        repeat: info.repeat.clone(),
        skipped,
    })
}
