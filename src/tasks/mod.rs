//! Main tasks as seen from outside a node: submit, status, list, stop,
//! reassign. These are what the CLI (and the jobs layer) call; the work
//! itself is done by the task's manager ([`crate::tasks::manager`]) and the
//! workers ([`crate::tasks::worker`]).
//!
//! A submitted task is written in an order that keeps a half-written task
//! invisible: `TaskInfo.pc.db`, then `Manager.<1>` and the manager's
//! `Manage.<task>` pointer, and last `Status.Init`. Readers ignore a task
//! folder without a status marker (`check` reports it), and every file is an
//! atomic create, so a crashed submit can simply be retried.

mod collect;
pub mod discover;
pub mod list;
pub mod manager;
pub mod placement;
pub mod repeat;
pub mod worker;

pub use list::{find_marked, list_ids, list_page, TaskPage, TaskQuery, TaskSummary};

use std::collections::BTreeMap;

use layouts::formats::{
    self, ExecutorKind, ExecutorSpec, ManagePointer, ManagerTerm, ResultInfo, RunInfo, StopRequest, TaskInfo,
};
use layouts::{v2, IdGenerator, Name, NodeId, SubtaskState, TaskId, TaskState};
use serde::Serialize;
use store::{Created, Store};

use crate::tasks::placement::Ring;
pub use crate::tasks::repeat::Repeat;
pub use discover::{missing_partitions, table_dir};

/// Requests a manager has in flight at once when it writes many
/// independent files (subtask infos, outcomes): the order rules that matter
/// are per unit, which each future keeps. On a disk each unit's recording
/// is a synced create and a folder removal, several milliseconds that are
/// spent waiting for the device: 64 at once collect a 2,000-subtask task
/// about 10 % faster than 16 did (bench/dispatch.py, alternating runs);
/// on tmpfs and object stores it makes no measurable difference.
pub const WRITE_CONCURRENCY: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("task {0} not found")]
    NotFound(TaskId),
    #[error("task {task}: {problem}")]
    Malformed { task: TaskId, problem: String },
    #[error("no live node to manage the task (is any `compactd run` up on this root?)")]
    NoLiveNode,
    #[error("node {0} is not a live member")]
    NotMember(NodeId),
    #[error("task {task} is already {state}")]
    Finished { task: TaskId, state: TaskState },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("refused: {0}")]
    Limit(#[from] layouts::limits::LimitError),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub db: Name,
    pub schema: Name,
    pub table: Name,
    /// Partitions to compact; empty (and no shards): discover them.
    pub partitions: Vec<Name>,
    /// A sharded task: this many subtasks with `{index, total}`.
    pub shards: Option<u32>,
    /// Overrides the nodes' default executor.
    pub executor: Option<ExecutorSpec>,
    pub params: BTreeMap<String, String>,
    pub repeat: Option<Repeat>,
    /// The manager; default: the live node the ring picks for the task.
    pub manager: Option<NodeId>,
}

impl TaskSpec {
    pub fn table(db: Name, schema: Name, table: Name) -> TaskSpec {
        TaskSpec {
            db,
            schema,
            table,
            partitions: vec![],
            shards: None,
            executor: None,
            params: BTreeMap::new(),
            repeat: None,
            manager: None,
        }
    }
}

/// Live members according to the newest readable lease.
pub async fn live_members(store: &Store) -> store::Result<Vec<NodeId>> {
    Ok(crate::cluster::election::newest_lease(store)
        .await?
        .map(|l| l.members.into_iter().map(|m| m.node).collect())
        .unwrap_or_default())
}

/// A member's incarnation in a view (0 if not listed).
fn incarnation_of(view: Option<&formats::Lease>, node: &NodeId) -> u64 {
    view.and_then(|l| l.members.iter().find(|m| &m.node == node)).map(|m| m.incarnation).unwrap_or(0)
}

/// Writes a new task; returns its id.
pub async fn submit(store: &Store, spec: TaskSpec, wall_ms: u64) -> Result<TaskId, TaskError> {
    Ok(submit_placed(store, spec, wall_ms).await?.id)
}

/// A task just written, with whom to wake.
pub struct Placed {
    pub id: TaskId,
    pub manager: NodeId,
    /// The view the manager was chosen from (its address is there).
    pub view: Option<formats::Lease>,
}

/// Writes a new task; returns its id, its manager and the view read.
pub async fn submit_placed(store: &Store, spec: TaskSpec, wall_ms: u64) -> Result<Placed, TaskError> {
    if spec.shards == Some(0) {
        return Err(TaskError::Invalid("shards must be at least 1".into()));
    }
    if spec.shards.is_some() && !spec.partitions.is_empty() {
        return Err(TaskError::Invalid("a task has partitions or shards, not both".into()));
    }
    check_spec(&spec)?;
    let mut spec = spec;
    let lease = crate::cluster::election::newest_lease(store).await?;
    if spec.executor.is_none() {
        // The executor is the task's, fixed here: the nodes' common default.
        spec.executor = default_executor(lease.as_ref())?.map(formats::ExecutorSpec::builtin);
    }
    let members: Vec<NodeId> = lease.iter().flat_map(|l| l.members.iter().map(|m| m.node.clone())).collect();
    let manager = match spec.manager.clone() {
        Some(m) if members.contains(&m) => m,
        Some(m) => return Err(TaskError::NotMember(m)),
        None => Ring::new(&members)
            .node_for(&format!("{}/{}/{}/{wall_ms}", spec.db, spec.schema, spec.table))
            .ok_or(TaskError::NoLiveNode)?,
    };
    let mut ids = IdGenerator::new(&manager);
    let repeat = spec.repeat.as_ref().map(Repeat::info).unwrap_or_default();
    let first_round_at = spec.repeat.as_ref().and_then(|r| r.first_round_at(wall_ms));
    let mut info = TaskInfo {
        id: ids.next(wall_ms),
        state: TaskState::Init.as_str().into(),
        repeat_flag: spec.repeat.is_some(),
        sub_task_flag: false,
        repeat,
        result: ResultInfo::default(),
        db_name: spec.db,
        schema_name: spec.schema,
        table_name: spec.table,
        partition_name: None,
        run: RunInfo {
            partitions: spec.partitions,
            shards: spec.shards,
            executor: spec.executor,
            params: spec.params,
            next_round_at_ms: first_round_at,
            ..RunInfo::default()
        },
    };
    // Readers refuse a file over the cap unread: a task info over it would
    // be a task nobody can run.
    let size = formats::encode(&info).len();
    if size > formats::MAX_FILE_BYTES {
        return Err(TaskError::Invalid(format!(
            "the task info would be {size} bytes, over the {}-byte file limit (name fewer partitions)",
            formats::MAX_FILE_BYTES
        )));
    }
    // Another submit in the same millisecond for the same manager: take the
    // next id instead of overwriting.
    loop {
        if store.create(&v2::task_info(&info.id), formats::encode(&info)).await? == Created::Created {
            break;
        }
        info.id = ids.next(wall_ms);
    }
    let id = info.id;
    let incarnation = incarnation_of(lease.as_ref(), &manager);
    let term = ManagerTerm { task: id, term: 1, node: manager.clone(), by: "submit".into(), wall_ms, incarnation };
    store.create(&v2::manager_term(&id, 1), formats::encode(&term)).await?;
    store.create(&v2::manage_pointer(&manager, &id), formats::encode(&ManagePointer { task: id, term: 1 })).await?;
    store.create(&v2::task_status(&id, TaskState::Init), Vec::new()).await?;
    stamp_manager(store, "submit", &manager, wall_ms).await;
    Ok(Placed { id, manager, view: lease })
}

/// The executor the live nodes give a task that names none (`run
/// --executor`, advertised in their heartbeats): recorded in the task at
/// submit, so that every unit runs the same one whichever node runs it.
/// `None` when no member advertises one (older nodes): the task's manager
/// records its own then. Nodes that disagree are an error naming them.
pub fn default_executor(view: Option<&formats::Lease>) -> Result<Option<ExecutorKind>, TaskError> {
    let advertised: BTreeMap<&str, Vec<&str>> =
        view.iter().flat_map(|l| &l.members).fold(BTreeMap::new(), |mut m, member| {
            if let Some(e) = member.executor.as_deref() {
                m.entry(e).or_insert_with(Vec::new).push(member.node.as_str());
            }
            m
        });
    match advertised.len() {
        0 => Ok(None),
        1 => {
            let label = *advertised.keys().next().expect("one");
            ExecutorKind::from_label(label).map(Some).ok_or_else(|| {
                TaskError::Invalid(format!(
                    "the nodes' default executor is {label:?}, which this compactd does not know: name one with \
                     --executor, or upgrade this client"
                ))
            })
        }
        _ => Err(TaskError::Invalid(format!(
            "the live nodes give tasks different default executors ({}): name the task's with --executor",
            advertised.iter().map(|(e, nodes)| format!("{e} on {}", nodes.join(", "))).collect::<Vec<_>>().join("; ")
        ))),
    }
}

/// The limits of [`layouts::limits`] on what a task asks for.
pub fn check_spec(spec: &TaskSpec) -> Result<(), layouts::limits::LimitError> {
    use layouts::limits;
    if let Some(n) = spec.shards {
        limits::check_units("shards", n.into())?;
    }
    limits::check_partitions(&spec.partitions)?;
    limits::check_params(&spec.params)?;
    if let Some(t) = spec.executor.as_ref().and_then(|e| e.command.as_deref()) {
        limits::check_template("the command template", t)?;
    }
    Ok(())
}

/// One subtask as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskStatus {
    pub id: String,
    pub partition: Option<String>,
    pub shard: Option<u32>,
    pub node: String,
    pub state: SubtaskState,
    pub round: u32,
    pub attempt: u32,
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

/// What a listing of a task folder says.
#[derive(Debug, Clone, Default)]
pub struct TaskDir {
    pub state: Option<TaskState>,
    /// Every status marker present (two after an interrupted transition).
    pub markers: Vec<TaskState>,
    pub terms: Vec<u64>,
    pub stop: bool,
    pub has_info: bool,
    /// Reassign requests: (unit, target node if named).
    pub reassign: Vec<u32>,
    /// Unit outcome files: (ok, round, unit). Those in `Outcomes/` only
    /// after [`read_outcomes`]; those an older version left in the task
    /// folder itself are in `legacy` too.
    pub outcomes: Vec<(bool, u32, u32)>,
    /// Outcomes found in the task folder itself (written before `Outcomes/`).
    pub legacy: std::collections::BTreeSet<(bool, u32, u32)>,
    /// The listing showed an `Outcomes/` folder.
    pub has_outcomes_dir: bool,
    /// [`read_outcomes`] listed it.
    pub outcomes_read: bool,
}

impl TaskDir {
    /// Successes and failures recorded for `round`.
    pub fn counts(&self, round: u32) -> (u64, u64) {
        let ok = self.outcomes.iter().filter(|(ok, r, _)| *ok && *r == round).count() as u64;
        let bad = self.outcomes.iter().filter(|(ok, r, _)| !*ok && *r == round).count() as u64;
        (ok, bad)
    }
}

impl TaskDir {
    pub fn term(&self) -> u64 {
        self.terms.iter().copied().max().unwrap_or(0)
    }

    /// Where the outcome file of `(ok, round, unit)` is: in `Outcomes/`, or
    /// in the task folder if an older version wrote it there.
    pub fn outcome_path(&self, id: &TaskId, ok: bool, round: u32, unit: u32) -> String {
        if self.legacy.contains(&(ok, round, unit)) {
            v2::legacy_unit_outcome(id, round, unit, ok)
        } else {
            v2::unit_outcome(id, round, unit, ok)
        }
    }
}

impl TaskDir {
    /// Notes one entry of the task folder (unknown names are ignored).
    fn note(&mut self, name: &str) {
        if let Ok(s) = TaskState::from_file_name(name) {
            self.markers.push(s);
        } else if let Some(t) = v2::parse_manager_term(name) {
            self.terms.push(t);
        } else if name == v2::STOP {
            self.stop = true;
        } else if name == v2::TASK_INFO {
            self.has_info = true;
        } else if let Some(u) = v2::parse_reassign_request(name) {
            self.reassign.push(u);
        } else if let Some(o) = v2::parse_unit_outcome(name) {
            self.outcomes.push(o);
            self.legacy.insert(o);
        } else if name == v2::OUTCOMES_DIR {
            self.has_outcomes_dir = true;
        }
        self.state = self.markers.iter().copied().max_by_key(|s| s.rank());
    }
}

/// Reads a task folder with one LIST: its markers, terms and requests. The
/// outcome files are in `Outcomes/` ([`read_outcomes`]), so that this
/// listing, which a manager does every round, stays small however many
/// units the task has.
pub async fn read_dir(store: &Store, id: &TaskId) -> store::Result<TaskDir> {
    let mut d = TaskDir::default();
    for e in store.list(&v2::task_dir(id)).await? {
        d.note(e.name());
    }
    Ok(d)
}

/// Adds the outcome files of `Outcomes/` to `dir`: one more LIST, only when
/// the folder exists and was not read yet.
pub async fn read_outcomes(store: &Store, id: &TaskId, dir: &mut TaskDir) -> store::Result<()> {
    if dir.has_outcomes_dir && !dir.outcomes_read {
        for e in store.list(&v2::outcomes_dir(id)).await? {
            if let Some(o) = v2::parse_unit_outcome(e.name()).filter(|_| !e.is_dir) {
                if !dir.legacy.contains(&o) {
                    dir.outcomes.push(o);
                }
            }
        }
    }
    dir.outcomes_read = true;
    Ok(())
}

/// [`read_dir`] and [`read_outcomes`].
pub async fn read_dir_with_outcomes(store: &Store, id: &TaskId) -> store::Result<TaskDir> {
    let mut d = read_dir(store, id).await?;
    read_outcomes(store, id, &mut d).await?;
    Ok(d)
}

/// Reads and decodes one state file of task `id`: `None` if absent;
/// [`TaskError::Malformed`] naming the file if it does not parse or cannot
/// be a state file at all (a folder, a FIFO, oversize: `store`'s bad file).
async fn read_task_file<T: serde::de::DeserializeOwned>(
    store: &Store,
    id: &TaskId,
    path: &str,
) -> Result<Option<T>, TaskError> {
    let malformed = |problem: String| TaskError::Malformed { task: *id, problem: format!("{path}: {problem}") };
    match store.read_or_bad(path).await? {
        None => Ok(None),
        Some(Err(bad)) => Err(malformed(bad.to_string())),
        Some(Ok(b)) => formats::decode(&b).map(Some).map_err(|e| malformed(e.to_string())),
    }
}

pub async fn read_info(store: &Store, id: &TaskId) -> Result<TaskInfo, TaskError> {
    read_task_file(store, id, &v2::task_info(id)).await?.ok_or(TaskError::NotFound(*id))
}

pub async fn read_term(store: &Store, id: &TaskId, term: u64) -> Result<Option<ManagerTerm>, TaskError> {
    read_task_file(store, id, &v2::manager_term(id, term)).await
}

/// Every subtask folder under `TaskAssigned/` (of `task` only, if given),
/// with its task and its state from the markers, from one recursive LIST;
/// `partition` and `shard` are left empty (they need a read per subtask).
pub async fn list_subtasks(store: &Store, task: Option<&TaskId>) -> store::Result<Vec<(TaskId, SubtaskStatus)>> {
    use futures::TryStreamExt;
    let prefix = task.map(|t| t.to_string()).unwrap_or_default();
    let mut found: BTreeMap<(String, String), Vec<SubtaskState>> = BTreeMap::new();
    let mut entries = store.list_stream(v2::TASK_ASSIGNED, true);
    while let Some(e) = entries.try_next().await? {
        let rel = &e.path[v2::TASK_ASSIGNED.len()..];
        let mut parts = rel.split('/');
        let (Some(node), Some(sub), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if !sub.starts_with(&prefix) {
            continue;
        }
        let states = found.entry((node.to_string(), sub.to_string())).or_default();
        if let Ok(s) = SubtaskState::from_file_name(file) {
            states.push(s);
        }
    }
    let mut out = vec![];
    for ((node, sub), states) in found {
        let Some((of, round, _unit, attempt)) = v2::parse_subtask_name(&sub) else {
            continue;
        };
        if task.is_some_and(|t| *t != of) {
            continue;
        }
        let state = states.into_iter().max_by_key(|s| s.rank()).unwrap_or(SubtaskState::Init);
        out.push((of, SubtaskStatus { id: sub, partition: None, shard: None, node, state, round, attempt }));
    }
    Ok(out)
}

/// Every subtask folder of `id` on any node, with its markers, partition
/// and shard (one recursive LIST of `TaskAssigned/`, one read each).
pub async fn find_subtasks(store: &Store, id: &TaskId) -> store::Result<Vec<SubtaskStatus>> {
    find_subtasks_noting(store, id, &mut Vec::new()).await
}

/// [`find_subtasks`], noting in `skipped` each subtask info that is not one.
async fn find_subtasks_noting(
    store: &Store,
    id: &TaskId,
    skipped: &mut Vec<String>,
) -> store::Result<Vec<SubtaskStatus>> {
    let mut out = vec![];
    for (_, mut s) in list_subtasks(store, Some(id)).await? {
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
    Ok(out)
}

/// The task's result counts: the rounds already added into `ResultInfo`,
/// plus the outcome files of the current round.
pub fn result_counts(dir: &TaskDir, info: &TaskInfo) -> ResultStatus {
    let (mut success, mut failed) = (info.result.success_count, info.result.failed_count);
    if info.run.counted_round < info.run.round {
        let (ok, bad) = dir.counts(info.run.round);
        success += ok;
        failed += bad;
    }
    ResultStatus { success, failed }
}

/// [`result_counts`], listing `Outcomes/` only when the counts need it: a
/// finished task's are in its info, a running one's in its outcome files.
pub async fn read_counts(
    store: &Store,
    id: &TaskId,
    dir: &mut TaskDir,
    info: &TaskInfo,
) -> store::Result<ResultStatus> {
    if info.run.counted_round < info.run.round {
        read_outcomes(store, id, dir).await?;
    }
    Ok(result_counts(dir, info))
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
    let (stats, mut table_versions) = round_stats(store, id, &dir, info.run.round, &mut skipped).await?;
    for v in &mut table_versions {
        v.partition = info.run.partitions.get(v.unit as usize).map(|p| p.to_string());
    }
    let failures = round_failures(store, id, &dir, info.run.round, &mut skipped).await?;
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

/// This round's `Failed.*` outcome files with the error they hold.
async fn round_failures(
    store: &Store,
    id: &TaskId,
    dir: &TaskDir,
    round: u32,
    skipped: &mut Vec<String>,
) -> store::Result<Vec<UnitFailure>> {
    let mut out = vec![];
    for (_, r, u) in dir.outcomes.iter().filter(|(ok, r, _)| !*ok && *r == round) {
        let path = dir.outcome_path(id, false, *r, *u);
        let b = match store.read_or_bad(&path).await? {
            Some(Ok(b)) => b,
            Some(Err(bad)) => {
                skipped.push(format!("{path}: {bad}"));
                Default::default()
            }
            None => Default::default(),
        };
        // Empty: written by an older version, no error recorded.
        let error = match formats::decode::<formats::UnitOutcome>(&b) {
            Ok(o) => o.error,
            Err(e) => {
                if !b.is_empty() {
                    skipped.push(format!("{path}: {e}"));
                }
                None
            }
        };
        out.push(UnitFailure { unit: *u, error });
    }
    Ok(out)
}

/// Sums the counters in this round's unit outcome files (empty files, the
/// usual case, count nothing); and the table versions `delta` units
/// reported, by unit.
async fn round_stats(
    store: &Store,
    id: &TaskId,
    dir: &TaskDir,
    round: u32,
    skipped: &mut Vec<String>,
) -> store::Result<(BTreeMap<String, u64>, Vec<UnitVersions>)> {
    use futures::{StreamExt, TryStreamExt};
    let paths: Vec<(u32, String)> = dir
        .outcomes
        .iter()
        .filter(|(ok, r, _)| *ok && *r == round)
        .map(|(ok, r, u)| (*u, dir.outcome_path(id, *ok, *r, *u)))
        .collect();
    // Owned paths moved into each read: a closure over borrowed ones makes
    // the future not provably Send (the HTTP handlers need it to be).
    let files: Vec<(u32, String, Option<store::Result<bytes::Bytes>>)> = futures::stream::iter(paths)
        .map(|(u, p)| async move { store.read_or_bad(&p).await.map(|r| (u, p, r)) })
        .buffer_unordered(16)
        .try_collect()
        .await?;
    let mut sum = BTreeMap::new();
    let mut versions = vec![];
    for (unit, path, found) in files {
        let b = match found {
            Some(Ok(b)) if !b.is_empty() => b,
            Some(Err(bad)) => {
                skipped.push(format!("{path}: {bad}"));
                continue;
            }
            _ => continue,
        };
        match formats::decode::<formats::UnitOutcome>(&b) {
            Ok(o) => {
                if let Some(&before) = o.stats.get("version_before") {
                    let mut stats = o.stats.clone();
                    let after = stats.remove("version_after");
                    stats.remove("version_before");
                    let abandoned = stats.remove("abandoned").is_some_and(|n| n > 0);
                    versions.push(UnitVersions {
                        unit,
                        partition: None,
                        version_before: before,
                        version_after: after,
                        abandoned,
                        stats,
                    });
                }
                for (k, v) in o.stats {
                    // Versions and snapshot ids are not counters: a sum
                    // means nothing.
                    if !k.starts_with("version_") && !k.starts_with("snapshot_") {
                        *sum.entry(k).or_insert(0u64) += v;
                    }
                }
            }
            Err(e) => skipped.push(format!("{path}: {e}")),
        }
    }
    versions.sort_by_key(|v| v.unit);
    Ok((sum, versions))
}

/// The node of the task's newest manager term, if readable.
pub async fn manager_of(store: &Store, id: &TaskId) -> Option<NodeId> {
    let dir = read_dir(store, id).await.ok()?;
    read_term(store, id, dir.term()).await.ok().flatten().map(|t| t.node)
}

/// Asks the task's manager to stop it (the manager cancels its running
/// subtasks and marks the task `Cancel`).
pub async fn stop(store: &Store, id: &TaskId, by: &str, wall_ms: u64) -> Result<(), TaskError> {
    let dir = read_dir(store, id).await?;
    if !dir.has_info {
        return Err(TaskError::NotFound(*id));
    }
    if let Some(s) = dir.state.filter(|s| s.is_terminal()) {
        return Err(TaskError::Finished { task: *id, state: s });
    }
    let req = StopRequest { wall_ms, by: by.into() };
    store.create(&v2::stop_request(id), formats::encode(&req)).await?;
    Ok(())
}

/// Gives a task's manager role to `to` (a live member): a new term, then the
/// new pointer, then the old pointer removed. The old manager sees the
/// higher term and stops acting for the task. Returns the new term.
pub async fn reassign_manager(
    store: &Store,
    id: &TaskId,
    to: &NodeId,
    by: &str,
    wall_ms: u64,
) -> Result<u64, TaskError> {
    let dir = read_dir(store, id).await?;
    if !dir.has_info {
        return Err(TaskError::NotFound(*id));
    }
    if let Some(s) = dir.state.filter(|s| s.is_terminal()) {
        return Err(TaskError::Finished { task: *id, state: s });
    }
    // A newest term that does not parse (torn by a crashed older compactd)
    // must not block the reassign that repairs it: its node is then unknown,
    // and its stale pointer is left to the fencing by the higher term.
    let old = match read_term(store, id, dir.term()).await {
        Ok(t) => t,
        Err(TaskError::Malformed { problem, .. }) => {
            tracing::warn!(task = %id, term = dir.term(), "newest manager term does not parse: {problem}");
            None
        }
        Err(e) => return Err(e),
    };
    let incarnation = incarnation_of(crate::cluster::election::newest_lease(store).await?.as_ref(), to);
    let mut term = dir.term() + 1;
    loop {
        let t = ManagerTerm { task: *id, term, node: to.clone(), by: by.into(), wall_ms, incarnation };
        if store.create(&v2::manager_term(id, term), formats::encode(&t)).await? == Created::Created {
            break;
        }
        term += 1;
    }
    store.put(&v2::manage_pointer(to, id), formats::encode(&ManagePointer { task: *id, term })).await?;
    stamp_manager(store, by, to, wall_ms).await;
    if let Some(old) = old.filter(|o| &o.node != to) {
        store.delete(&v2::manage_pointer(&old.node, id)).await?;
    }
    Ok(term)
}

/// Every write of a manage pointer stamps its node's inbox
/// ([`crate::serve::wake::stamp`]), so an idle node finds the task at its next poll
/// even if no wake-up reaches it. A failed stamp is only logged: the task is
/// found at the node's next full listing.
pub async fn stamp_manager(store: &Store, by: &str, node: &NodeId, wall_ms: u64) {
    if let Err(e) = crate::serve::wake::stamp_at(store, by, node, wall_ms).await {
        tracing::warn!(%node, "writing the inbox stamp failed: {e}");
    }
}

/// Command names (`run --command NAME=TEMPLATE`, `submit --command-name`):
/// 1–64 ASCII letters, digits, `_`, `-`, `.`, starting with a letter.
pub fn valid_command_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
