//! The monitor's task duties: move the manager role of tasks whose manager
//! went offline, archive finished task history into `Scheduler/Compress/`,
//! and remove subtask folders and pointers whose task is gone or finished.
//!
//! The caller (the monitor) runs its fence check before each call. Every
//! step is idempotent: a crash leaves work that the next sweep redoes.
//!
//! Invariant: the monitor never ends a task for want of a manager. When no
//! member may manage it (every live one drains, or does not read the layout
//! in force: a whole cluster stopping, a roll half done), the task is left
//! as it is, its manager pointer too, and a later sweep hands it to the
//! first member that may, or the manager's node rebuilds it on restart.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::time::Duration;

use layouts::formats::{self, TaskInfo};
use layouts::{v2, NodeId, TaskId, TaskState};
use serde::{Deserialize, Serialize};
use store::{Created, Store};

use crate::tasks::placement::Ring;
use crate::tasks::worker::{list_node, WorkConfig};
use crate::tasks::{self, TaskError};

/// One finished task in an archive (a line of a `Compress/` file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedTask {
    pub state: TaskState,
    pub manager: Option<NodeId>,
    pub archived_wall_ms: u64,
    pub info: TaskInfo,
}

#[derive(Debug, Default)]
pub struct SweepReport {
    pub reassigned: Vec<(TaskId, NodeId)>,
    /// Tasks whose manager is over that no member may manage now: left.
    pub waiting: Vec<TaskId>,
    pub archived: usize,
    /// Archives deleted past the archive retention.
    pub archives_removed: usize,
    pub garbage_removed: usize,
    /// Tasks under `Scheduler/` by state (as read by this sweep).
    pub by_state: BTreeMap<String, usize>,
}

/// The tasks `node` managed (its `Manage.*` pointers), to hand over one by
/// one with [`take_over`].
pub async fn managed_by(store: &Store, node: &NodeId) -> store::Result<Vec<TaskId>> {
    Ok(list_node(store, node).await?.manages)
}

/// Gives `task`, managed by `node`, to the live node the ring picks among
/// `members` (the members that may manage), once `node`'s incarnation
/// `declared` is declared offline. The caller passes only node ids with no
/// live incarnation (a node that came back under a new incarnation keeps
/// its tasks: its new self rebuilds them). With no candidate the task and
/// its pointer stay for the sweep. A term of an incarnation newer than the
/// one declared stays (that manager may be alive). A pointer whose task is
/// now managed by another node is stale and only removed. The pointer goes
/// last: a crash before leaves it for the next monitor's sweep.
pub async fn take_over(
    store: &Store,
    node: &NodeId,
    declared: u64,
    task: &TaskId,
    members: &[NodeId],
    wall_ms: u64,
    report: &mut SweepReport,
) -> Result<(), TaskError> {
    let dir = tasks::read_dir(store, task).await?;
    let current = tasks::read_term(store, task, dir.term()).await?;
    if let Some(t) = current.filter(|t| &t.node == node) {
        if t.incarnation > declared {
            return Ok(());
        }
        if !move_manager(store, task, members.iter().filter(|m| *m != node), wall_ms, report).await? {
            return Ok(());
        }
    }
    store.delete(&v2::manage_pointer(node, task)).await?;
    Ok(())
}

/// Whether the manager of a term, not a member, is over: its incarnation
/// declared offline (`declared`, the monitor's view) or ended (its node's
/// `Ended` marker), or its node's heartbeat names another incarnation now.
/// A manager absent from a view may be alive (a view is published late):
/// its task is handed over only once it provably acts no more.
async fn manager_over(
    store: &Store,
    t: &layouts::formats::ManagerTerm,
    declared: &BTreeSet<(NodeId, u64)>,
) -> store::Result<bool> {
    if declared.contains(&(t.node.clone(), t.incarnation))
        || store.exists(&v2::ended_marker(&t.node, t.incarnation)).await?
    {
        return Ok(true);
    }
    if store.exists(&v2::offline_marker(&t.node, t.incarnation)).await? {
        return Ok(true);
    }
    let hb = store.read_or_bad(&v2::heartbeat(&t.node)).await?.and_then(Result::ok);
    Ok(hb
        .and_then(|b| formats::decode::<layouts::formats::Heartbeat>(&b).ok())
        .is_some_and(|hb| hb.incarnation != t.incarnation))
}

/// Hands `task` to the node the ring picks among `candidates`. `false`:
/// the task was not handed over (finished, not fully written, or no
/// candidate). A task nobody may manage now is left whole, never ended:
/// its candidates are only away (draining, restarting, not yet upgraded),
/// and cancelling it would lose a run that resumes once one is back.
async fn move_manager<'a>(
    store: &Store,
    task: &TaskId,
    candidates: impl Iterator<Item = &'a NodeId>,
    wall_ms: u64,
    report: &mut SweepReport,
) -> Result<bool, TaskError> {
    let dir = tasks::read_dir(store, task).await?;
    if !dir.has_info || dir.state.is_some_and(|s| s.is_terminal()) {
        return Ok(false);
    }
    let ring = Ring::new(candidates);
    let Some(to) = ring.node_for(&task.to_string()) else {
        tracing::info!(%task, "manager offline and no member may manage the task now (draining, or not reading the layout in force): left for the next sweep");
        report.waiting.push(*task);
        return Ok(false);
    };
    let term = tasks::reassign_manager(store, task, &to, "monitor", wall_ms).await?;
    tracing::warn!(%task, %to, term, "manager offline: task handed to another node");
    report.reassigned.push((*task, to));
    Ok(true)
}

/// Finished tasks written into one archive at most (a pass over many
/// finished tasks writes several).
const ARCHIVE_BATCH: usize = 1000;

/// One sweep over `Scheduler/`, worked through across monitor ticks: the
/// task ids of one listing, oldest first, and what the tasks read so far
/// showed. Each tick works on it until its deadline, so a tick's requests
/// are bounded by the deadline, not by the number of tasks; a pass over
/// 100,000 tasks spans ticks (the monitor heartbeats and renews between
/// them). Every step re-reads what it acts on, so a pass that ends early
/// (the node loses the monitor role) is simply dropped.
#[derive(Debug, Default)]
pub struct SweepPass {
    listed: bool,
    pending: std::collections::VecDeque<TaskId>,
    /// Folders of tasks written into an archive, to delete.
    deleting: std::collections::VecDeque<TaskId>,
    active: BTreeSet<TaskId>,
    to_archive: Vec<ArchivedTask>,
    by_state: BTreeMap<String, usize>,
}

/// Works on `pass` until `deadline`. `Ok((report, true))` when the pass is
/// over (the report's `by_state` then covers every task), `Ok((report,
/// false))` when it continues at the next call. Per task: a LIST of its
/// folder and one or two GETs (plus the hand-over of a task whose manager is
/// not live); at the end one recursive listing of `TaskAssigned/` and the
/// removal of what belongs to no active task, also under the deadline.
#[allow(clippy::too_many_arguments)]
pub async fn sweep(
    store: &Store,
    pass: &mut SweepPass,
    members: &[NodeId],
    declared: &BTreeSet<(NodeId, u64)>,
    cfg: &WorkConfig,
    wall_ms: u64,
    epoch: u64,
    deadline: &crate::clock::Deadline,
) -> Result<(SweepReport, bool), TaskError> {
    let mut report = SweepReport::default();
    let live: BTreeSet<&NodeId> = members.iter().collect();
    let horizon = wall_ms.saturating_sub(cfg.history_retention.as_millis() as u64);
    if !pass.listed {
        let mut ids = tasks::list_ids(store).await?;
        ids.sort();
        pass.pending = ids.into();
        pass.listed = true;
    }
    while !deadline.passed() {
        // Popped first: an error drops the whole pass (the next one starts
        // over from a new listing).
        if let Some(id) = pass.deleting.pop_front() {
            store.delete_all(&v2::task_dir(&id)).await?;
            continue;
        }
        if pass.to_archive.len() >= ARCHIVE_BATCH || (pass.pending.is_empty() && !pass.to_archive.is_empty()) {
            let batch = std::mem::take(&mut pass.to_archive);
            write_archive(store, &batch, wall_ms, epoch).await?;
            if report.archived == 0 {
                report.archives_removed += prune_archives(store, cfg.archive_retention, wall_ms).await?;
            }
            report.archived += batch.len();
            pass.deleting.extend(batch.iter().map(|t| t.info.id));
            continue;
        }
        let Some(id) = pass.pending.pop_front() else { break };
        match sweep_task(store, pass, &id, &live, members, declared, horizon, wall_ms, &mut report).await {
            // A bad file of one task costs that task's sweep, not the pass:
            // the other tasks are handed over and archived as ever, and
            // `compactd check` names the file.
            Err(TaskError::Malformed { task, problem }) => {
                tracing::warn!(%task, "task skipped by the sweep: {problem}");
            }
            other => other?,
        }
    }
    if !(pass.pending.is_empty() && pass.deleting.is_empty() && pass.to_archive.is_empty()) {
        return Ok((report, false));
    }
    report.garbage_removed = remove_garbage(store, &pass.active, deadline).await?;
    report.by_state = std::mem::take(&mut pass.by_state);
    Ok((report, true))
}

#[allow(clippy::too_many_arguments)]
async fn sweep_task(
    store: &Store,
    pass: &mut SweepPass,
    id: &TaskId,
    live: &BTreeSet<&NodeId>,
    members: &[NodeId],
    declared: &BTreeSet<(NodeId, u64)>,
    horizon: u64,
    wall_ms: u64,
    report: &mut SweepReport,
) -> Result<(), TaskError> {
    let dir = tasks::read_dir(store, id).await?;
    let Some(state) = dir.state.filter(|_| dir.has_info) else {
        return Ok(());
    };
    *pass.by_state.entry(state.as_str().to_string()).or_default() += 1;
    if state.is_terminal() {
        let Ok(info) = tasks::read_info(store, id).await else {
            return Ok(());
        };
        if info.run.finished_wall_ms.unwrap_or(0) <= horizon {
            let manager = tasks::read_term(store, id, dir.term()).await.ok().flatten().map(|t| t.node);
            pass.to_archive.push(ArchivedTask { state, manager, archived_wall_ms: wall_ms, info });
        }
        return Ok(());
    }
    pass.active.insert(*id);
    match tasks::read_term(store, id, dir.term()).await? {
        Some(t) if live.contains(&t.node) => {
            // Repair an interrupted hand-over: the pointer must exist.
            if !store.exists(&v2::manage_pointer(&t.node, id)).await? {
                let p = formats::ManagePointer { task: *id, term: t.term };
                store.put(&v2::manage_pointer(&t.node, id), formats::encode(&p)).await?;
                tasks::stamp_manager(store, "monitor", &t.node, wall_ms).await;
            }
        }
        Some(t) if !manager_over(store, &t, declared).await? => {
            tracing::debug!(task = %id, node = %t.node, incarnation = t.incarnation, "manager not in the view, not known over: left");
        }
        // No manager term, or its manager is over: hand the task over.
        _ => {
            move_manager(store, id, members.iter(), wall_ms, report).await?;
        }
    }
    Ok(())
}

/// Removes subtask and batch folders and manage pointers of tasks that are
/// gone or finished. A task the pass did not see active is read again
/// before anything of it is removed: it may have been submitted after the
/// pass listed `Scheduler/` (its pointer is written before its status
/// marker, so a folder without a marker is a task being submitted, and is
/// kept). One recursive listing of `TaskAssigned/` (its pages follow the
/// files there, not the number of nodes; folders included, for the empty
/// ones a crash leaves on fs), then a check per task found and the
/// deletes, until `deadline`: what is left waits for the next pass.
async fn remove_garbage(
    store: &Store,
    active: &BTreeSet<TaskId>,
    deadline: &crate::clock::Deadline,
) -> Result<usize, TaskError> {
    use futures::TryStreamExt;
    let mut candidates: Vec<(TaskId, String)> = vec![];
    let mut seen_dirs: BTreeSet<String> = BTreeSet::new();
    // Folders too: a node killed between creating a subtask folder and
    // writing its first file leaves an empty one on fs.
    let mut files = store.list_tree(v2::TASK_ASSIGNED);
    while let Some(e) = files.try_next().await? {
        let rel = e.path[v2::TASK_ASSIGNED.len()..].trim_end_matches('/');
        let mut parts = rel.splitn(3, '/');
        let (Some(node), Some(name)) = (parts.next(), parts.next()) else { continue };
        let (task, path) = if parts.next().is_some() || e.is_dir {
            // `<node>/<subtask>/…` or the folder itself: the folder, once.
            let dir = format!("{}{node}/{name}/", v2::TASK_ASSIGNED);
            if !seen_dirs.insert(dir.clone()) {
                continue;
            }
            let task = v2::parse_subtask_name(name)
                .map(|(t, ..)| t)
                .or_else(|| layouts::v3::parse_batch_name(name).map(|(t, ..)| t));
            (task, dir)
        } else {
            (v2::parse_manage_pointer(name), e.path.clone())
        };
        if let Some(t) = task.filter(|t| !active.contains(t)) {
            candidates.push((t, path));
        }
    }
    drop(files);
    let mut verdict: BTreeMap<TaskId, bool> = BTreeMap::new();
    let mut removed = 0;
    for (task, path) in candidates {
        if deadline.passed() {
            break;
        }
        let garbage = match verdict.get(&task) {
            Some(g) => *g,
            None => {
                let dir = tasks::read_dir(store, &task).await?;
                let gone = !dir.has_info && dir.markers.is_empty() && dir.terms.is_empty();
                let g = gone || dir.state.is_some_and(|s| s.is_terminal());
                verdict.insert(task, g);
                g
            }
        };
        if !garbage {
            continue;
        }
        if path.ends_with('/') {
            tasks::remove::remove_folder(store, &path).await?;
        } else {
            store.delete(&path).await?;
        }
        removed += 1;
    }
    Ok(removed)
}

/// Writes one gzip'd JSON-lines archive; the caller deletes the archived
/// task folders after it. A crash in between archives those tasks again in
/// a later archive; `compactd history` shows each task id once.
async fn write_archive(store: &Store, tasks: &[ArchivedTask], wall_ms: u64, epoch: u64) -> Result<(), TaskError> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for t in tasks {
        let line = serde_json::to_vec(t).expect("archived tasks serialize");
        gz.write_all(&line).and_then(|_| gz.write_all(b"\n")).expect("writing to memory");
    }
    let bytes = gz.finish().expect("writing to memory");
    let mut seq = 0;
    loop {
        let path = format!("{}{wall_ms:013}-e{epoch}-{seq}.jsonl.gz", v2::COMPRESS);
        if store.create(&path, bytes.clone()).await? == Created::Created {
            break;
        }
        seq += 1;
    }
    tracing::info!(tasks = tasks.len(), "archived finished tasks into Compress/");
    Ok(())
}

/// Deletes the archives older than `retention` (by the wall time their name
/// starts with). Called when a pass writes its first archive: the history
/// grows only then, so one listing of `Compress/` per archiving pass bounds
/// it, and an idle cluster spends nothing on it.
async fn prune_archives(store: &Store, retention: Duration, wall_ms: u64) -> Result<usize, TaskError> {
    if retention.is_zero() {
        return Ok(0);
    }
    let horizon = wall_ms.saturating_sub(retention.as_millis() as u64);
    let mut removed = 0;
    for e in store.list(v2::COMPRESS).await? {
        let written = e.name().split('-').next().and_then(|t| t.parse::<u64>().ok());
        if e.is_dir || written.is_none_or(|t| t >= horizon) {
            continue;
        }
        store.delete(&e.path).await?;
        removed += 1;
    }
    if removed > 0 {
        tracing::info!(removed, ?retention, "removed archives older than the archive retention from Compress/");
    }
    Ok(removed)
}

/// Reads every archive; each task id once (the newest archive wins).
pub async fn read_history(store: &Store) -> store::Result<(Vec<ArchivedTask>, Vec<layouts::Anomaly>)> {
    read_history_newest(store, usize::MAX).await
}

/// The newest archives (by name: they start with their wall time), read
/// until at least `at_least` tasks are found: what a page showing the last
/// few needs, whatever the length of the history.
pub async fn read_history_newest(
    store: &Store,
    at_least: usize,
) -> store::Result<(Vec<ArchivedTask>, Vec<layouts::Anomaly>)> {
    let mut by_id: BTreeMap<TaskId, ArchivedTask> = BTreeMap::new();
    let mut bad = vec![];
    let mut files: Vec<store::Entry> = store.list(v2::COMPRESS).await?.into_iter().filter(|e| !e.is_dir).collect();
    files.sort_by(|a, b| b.path.cmp(&a.path));
    for e in files {
        if by_id.len() >= at_least {
            break;
        }
        let bytes = match store.read_or_bad(&e.path).await? {
            None => continue,
            Some(Ok(bytes)) => bytes,
            Some(Err(err)) => {
                bad.push(layouts::Anomaly::new(&e.path, err.to_string()));
                continue;
            }
        };
        let mut text = String::new();
        let limit = 256 * 1024 * 1024;
        if let Err(err) = flate2::read::GzDecoder::new(&bytes[..]).take(limit).read_to_string(&mut text) {
            bad.push(layouts::Anomaly::new(&e.path, format!("not a gzip'd JSON-lines archive: {err}")));
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            match serde_json::from_str::<ArchivedTask>(line) {
                Ok(t) => {
                    // Newest archive first: a task archived twice keeps its newest record.
                    by_id.entry(t.info.id).or_insert(t);
                }
                Err(err) => bad.push(layouts::Anomaly::new(&e.path, format!("line {}: {err}", n + 1))),
            }
        }
    }
    Ok((by_id.into_values().collect(), bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600 * 1000;

    #[tokio::test]
    async fn archives_past_the_archive_retention_are_removed_and_the_rest_kept() {
        let store = Store::memory().await;
        let now = 100 * DAY;
        for (age_days, epoch) in [(40, 1), (31, 2), (29, 3), (1, 4)] {
            write_archive(&store, &[], now - age_days * DAY, epoch).await.unwrap();
        }
        store.put(&format!("{}not-an-archive", v2::COMPRESS), b"x".to_vec()).await.unwrap();
        let kept = Duration::from_millis(30 * DAY);
        assert_eq!(prune_archives(&store, Duration::ZERO, now).await.unwrap(), 0, "zero keeps everything");
        assert_eq!(prune_archives(&store, kept, now).await.unwrap(), 2);
        let mut left: Vec<String> =
            store.list(v2::COMPRESS).await.unwrap().iter().map(|e| e.name().to_string()).collect();
        left.sort();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.iter().any(|n| n.contains("-e3-")) && left.iter().any(|n| n.contains("-e4-")), "{left:?}");
        assert!(left.contains(&"not-an-archive".to_string()), "a name without a time is never removed");
    }
}
