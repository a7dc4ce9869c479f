//! What `status` (and the status page) shows of a task: its subtasks in
//! either layout, its counts, and what its units recorded this round.

use std::collections::BTreeMap;

use layouts::formats::{self, TaskInfo};
use layouts::v3::{self, BatchInfo};
use layouts::{v2, Name, NodeId, SubtaskState, TaskId, TaskState};
use serde::Serialize;
use store::Store;

use super::folder::NodeFolder;
use super::outcomes::{read_dir_with_outcomes, result_counts, round_outcomes};
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
        if let Some(&before) = r.stats.get("version_before") {
            let mut s = r.stats.clone();
            let after = s.remove("version_after");
            s.remove("version_before");
            let abandoned = s.remove("abandoned").is_some_and(|n| n > 0);
            let partition = info.run.partitions.get(*unit as usize).map(|p| p.to_string());
            table_versions.push(UnitVersions {
                unit: *unit,
                partition,
                version_before: before,
                version_after: after,
                abandoned,
                stats: s,
            });
        }
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
