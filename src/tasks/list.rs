//! Finding tasks: every id under `Scheduler/`, the pages of `compactd
//! list`, and the task a driver marked (job steps, planner decisions).

use layouts::{TaskId, TaskState};
use serde::Serialize;
use store::Store;

use super::*;

/// Every task id under `Scheduler/` (not the archived history).
pub async fn list_ids(store: &Store) -> store::Result<Vec<TaskId>> {
    Ok(store
        .list(v2::SCHEDULER)
        .await?
        .iter()
        .filter(|e| e.is_dir)
        .filter_map(|e| TaskId::parse(e.name()).ok())
        .collect())
}

/// One row of `compactd list`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskSummary {
    pub id: TaskId,
    pub state: Option<TaskState>,
    pub table: String,
    pub manager: Option<String>,
    pub round: u32,
    pub success: u64,
    pub failed: u64,
}

/// Which tasks `compactd list` shows.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    /// At most this many rows, newest first (`None`: all).
    pub limit: Option<usize>,
    /// Only tasks in one of these states (empty: any; a task without a status
    /// marker counts as `Init`).
    pub states: Vec<TaskState>,
}

/// A page of tasks, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    pub rows: Vec<TaskSummary>,
    /// Task folders under `Scheduler/`.
    pub total: usize,
    /// Of those, the ones in a wanted state (`total` without a state filter).
    pub matched: usize,
    /// Of those, the newest ones read for rows (at most the limit): rows
    /// plus the tasks skipped as unreadable.
    pub read: usize,
    /// Files that could not be read (the path and why): a task whose info
    /// is unreadable is skipped; one whose newest manager term is unreadable
    /// is shown without a manager.
    pub problems: Vec<String>,
}

/// Reads at most this many rows at once.
const LIST_CONCURRENCY: usize = 8;

/// The newest tasks of `query`. Requests: without a state filter, one
/// listing of `Scheduler/` plus a LIST and two GETs per shown row; with one,
/// one recursive listing of `Scheduler/` (states from the marker names: on
/// S3 one request per 1,000 files, not one per task) plus two GETs per shown
/// row. So the reads grow with `--limit`, the listing with the tasks kept
/// under `Scheduler/` (finished ones move to `Compress/` after
/// `--history-retention`).
pub async fn list_page(store: &Store, query: &TaskQuery) -> store::Result<TaskPage> {
    use futures::{StreamExt, TryStreamExt};
    let mut page = TaskPage::default();
    let mut found: Vec<(TaskId, Option<TaskDir>)> = if query.states.is_empty() {
        let ids = list_ids(store).await?;
        page.total = ids.len();
        page.matched = ids.len();
        ids.into_iter().map(|id| (id, None)).collect()
    } else {
        let mut dirs: BTreeMap<TaskId, TaskDir> = BTreeMap::new();
        let mut entries = store.list_stream(v2::SCHEDULER, true);
        while let Some(e) = entries.try_next().await? {
            let Some((task, name)) = e.path.get(v2::SCHEDULER.len()..).and_then(|r| r.split_once('/')) else {
                continue;
            };
            let Ok(id) = TaskId::parse(task) else { continue };
            let dir = dirs.entry(id).or_default();
            if !name.is_empty() && !name.contains('/') {
                dir.note(name);
            }
        }
        page.total = dirs.len();
        let wanted: Vec<(TaskId, Option<TaskDir>)> = dirs
            .into_iter()
            .filter(|(_, d)| query.states.contains(&d.state.unwrap_or(TaskState::Init)))
            .map(|(id, d)| (id, Some(d)))
            .collect();
        page.matched = wanted.len();
        wanted
    };
    // Task ids carry their creation time.
    found.sort_by_key(|(id, _)| std::cmp::Reverse((id.unix_ms, id.seq)));
    if let Some(limit) = query.limit {
        found.truncate(limit);
    }
    page.read = found.len();
    let rows: Vec<Result<(TaskSummary, Option<String>), String>> =
        futures::stream::iter(found.into_iter().map(|(id, dir)| summary(store, id, dir)))
            .buffered(LIST_CONCURRENCY)
            .collect()
            .await;
    for r in rows {
        match r {
            Ok((row, skipped)) => {
                page.rows.push(row);
                page.problems.extend(skipped);
            }
            Err(problem) => page.problems.push(problem),
        }
    }
    Ok(page)
}

/// A task's row, and the file it skipped (an unreadable manager term) if any.
async fn summary(store: &Store, id: TaskId, dir: Option<TaskDir>) -> Result<(TaskSummary, Option<String>), String> {
    let mut dir = match dir {
        Some(d) => d,
        None => read_dir(store, &id).await.map_err(|e| e.to_string())?,
    };
    if !dir.has_info {
        return Err(format!(
            "{}: no {} (being submitted, or left by a crashed submit)",
            v2::task_dir(&id),
            v2::TASK_INFO
        ));
    }
    let info = read_info(store, &id).await.map_err(|e| e.to_string())?;
    let (manager, skipped) = match read_term(store, &id, dir.term()).await {
        Ok(t) => (t.map(|t| t.node.to_string()), None),
        Err(e) => (None, Some(format!("{e} (the task is shown without its manager)"))),
    };
    let counts = read_counts(store, &id, &mut dir, &info).await.map_err(|e| e.to_string())?;
    let row = TaskSummary {
        id,
        state: dir.state,
        table: format!("{}.{}.{}", info.db_name, info.schema_name, info.table_name),
        manager,
        round: info.run.round,
        success: counts.success,
        failed: counts.failed,
    };
    Ok((row, skipped))
}

/// The task whose parameter `param` is `marker`, submitted at or after
/// `since_ms`, if a complete one (with a status marker) exists: how a
/// driver that claimed a submission and crashed before recording the task
/// id finds it (job steps, planner decisions).
pub async fn find_marked(store: &Store, param: &str, marker: &str, since_ms: u64) -> store::Result<Option<TaskId>> {
    let mut ids: Vec<TaskId> = list_ids(store).await?.into_iter().filter(|id| id.unix_ms >= since_ms).collect();
    ids.sort();
    for id in ids {
        let Ok(info) = read_info(store, &id).await else {
            continue;
        };
        if info.run.params.get(param).map(String::as_str) != Some(marker) {
            continue;
        }
        if read_dir(store, &id).await?.state.is_some() {
            return Ok(Some(id));
        }
    }
    Ok(None)
}
