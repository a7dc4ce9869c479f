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

mod batches;
mod claim;
mod collect;
mod config;
pub mod discover;
mod dispatch;
pub mod folder;
pub mod list;
pub mod manager;
pub mod outcomes;
pub mod placement;
mod rebuild;
mod record;
pub mod remove;
pub mod repeat;
mod report;
pub mod view;
pub mod worker;

pub use list::{find_marked, list_ids, list_page, TaskPage, TaskQuery, TaskSummary};
pub use outcomes::{read_counts, read_dir, read_dir_with_outcomes, read_outcomes, result_counts, TaskDir};
pub use view::{
    find_subtasks, list_subtasks, status, ResultStatus, SubtaskStatus, TaskStatus, UnitFailure, UnitVersions,
};

use std::collections::BTreeMap;

use layouts::formats::{
    self, ExecutorKind, ExecutorSpec, ManagePointer, ManagerTerm, ResultInfo, RunInfo, StopRequest, TaskInfo,
};
use layouts::{v2, IdGenerator, Name, NodeId, TaskId, TaskState};
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
    #[error("node {node} may not manage tasks: {why}")]
    CannotManage { node: NodeId, why: String },
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
    let lease = current_view(store).await?;
    if spec.executor.is_none() {
        // The executor is the task's, fixed here: the nodes' common default.
        spec.executor = default_executor(lease.as_ref())?.map(formats::ExecutorSpec::builtin);
    }
    let manager = match spec.manager.clone() {
        Some(m) => match why_not_manager(lease.as_ref(), &m) {
            Some(refused) => return Err(refused),
            None => m,
        },
        None => Ring::new(&may_manage(lease.as_ref()))
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

/// The highest `Registry/Layout.<n>` present that puts its layout in force
/// (layout 2 when none; [`layouts::v3::switch_holds`]): one LIST of
/// `Registry/`, and a read of each marker above the highest one that holds.
/// A marker that does not hold (made by hand, cut short) switches nothing;
/// `check` reports it.
pub async fn listed_layout(store: &Store) -> store::Result<u32> {
    let mut markers: Vec<(u32, String)> = store
        .list(v2::REGISTRY)
        .await?
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| Some((layouts::v3::parse_layout_marker(e.name())?, e.path)))
        .collect();
    markers.sort();
    for (m, path) in markers.into_iter().rev() {
        match store.read_or_bad(&path).await? {
            Some(Ok(b)) if layouts::v3::switch_holds(m, &b).is_ok() => return Ok(m),
            _ => tracing::debug!(%path, "a layout marker that puts nothing in force"),
        }
    }
    Ok(layouts::v3::LAYOUT_2)
}

/// The newest lease, its layout in force raised to the markers present (a
/// lease written by an older monitor omits it).
pub async fn current_view(store: &Store) -> store::Result<Option<formats::Lease>> {
    let mut lease = crate::cluster::election::newest_lease(store).await?;
    if let Some(l) = lease.as_mut() {
        l.keep_layout_at_least(listed_layout(store).await?);
    }
    Ok(lease)
}

/// Why `node` may not be given a task to manage in `view`, if it may not
/// (see [`may_manage`]).
pub fn why_not_manager(view: Option<&formats::Lease>, node: &NodeId) -> Option<TaskError> {
    let Some(m) = view.and_then(|v| v.members.iter().find(|m| &m.node == node)) else {
        return Some(TaskError::NotMember(node.clone()));
    };
    let layout = view.map(formats::Lease::layout).unwrap_or(layouts::v3::LAYOUT_2);
    let why = if m.draining {
        "it is draining (it starts nothing new and hands its tasks over before it leaves)".to_string()
    } else if !m.reads(layout) {
        format!(
            "layout {layout} is in force and it does not read it (an older version, or run --max-layout): upgrade it"
        )
    } else {
        return None;
    };
    Some(TaskError::CannotManage { node: node.clone(), why })
}

/// The members a task may be given to: not draining, and reading the
/// layout in force (a manager rebuilds its task from the tree, so it must
/// read every form its predecessor may have written).
pub fn may_manage(view: Option<&formats::Lease>) -> Vec<NodeId> {
    let Some(v) = view else { return vec![] };
    v.members.iter().filter(|m| !m.draining && m.reads(v.layout())).map(|m| m.node.clone()).collect()
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
/// ([`crate::cluster::wake::stamp`]), so an idle node finds the task at its next poll
/// even if no wake-up reaches it. A failed stamp is only logged: the task is
/// found at the node's next full listing.
pub async fn stamp_manager(store: &Store, by: &str, node: &NodeId, wall_ms: u64) {
    if let Err(e) = crate::cluster::wake::stamp_at(store, by, node, wall_ms).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: &str) -> NodeId {
        NodeId::parse(n).unwrap()
    }

    /// A node that may not manage is refused as `--manager`, naming why:
    /// one draining, one that does not read the layout in force, which
    /// `Registry/Layout.3` says is 3 though the lease (an older monitor's)
    /// says nothing of it.
    #[tokio::test]
    async fn submit_refuses_a_manager_that_may_not_manage_naming_why() {
        let store = Store::memory().await;
        let mut draining = formats::Member::bare(id("n1"), 1, 1000);
        draining.layouts = Some(vec![2, 3]);
        draining.draining = true;
        let mut old = formats::Member::bare(id("n2"), 1, 1000);
        old.layouts = Some(vec![2]);
        let mut new = formats::Member::bare(id("n3"), 1, 1000);
        new.layouts = Some(vec![2, 3]);
        let lease = formats::Lease {
            epoch: 1,
            holder: id("n2"),
            holder_incarnation: 1,
            renewal: 0,
            lease_ms: 1000,
            wall_ms: 0,
            members: vec![draining, old, new],
            offline: vec![],
            last_event: 0,
            released: false,
            layout: None,
        };
        store.create(&v2::lease(1), formats::encode(&lease)).await.unwrap();
        store.create(&layouts::v3::layout_marker(3), Vec::new()).await.unwrap();
        let spec = |m: &str| {
            let n = |s: &str| Name::parse(s).unwrap();
            TaskSpec { shards: Some(1), manager: Some(id(m)), ..TaskSpec::table(n("d"), n("s"), n("t")) }
        };
        let err = submit(&store, spec("n1"), 1).await.unwrap_err().to_string();
        assert!(err.contains("n1") && err.contains("draining"), "{err}");
        let err = submit(&store, spec("n2"), 1).await.unwrap_err().to_string();
        assert!(err.contains("n2") && err.contains("layout 3 is in force"), "{err}");
        let err = submit(&store, spec("n4"), 1).await.unwrap_err().to_string();
        assert!(err.contains("not a live member"), "{err}");
        assert_eq!(list_ids(&store).await.unwrap().len(), 0, "nothing written for a refused manager");
        submit(&store, spec("n3"), 1).await.unwrap();
        let placed = submit_placed(&store, TaskSpec { manager: None, ..spec("n3") }, 2).await.unwrap();
        assert_eq!(placed.manager, id("n3"), "the ring places on the only member that may manage");
    }
}
