//! Worker duties: run the subtasks found in this node's own
//! `TaskAssigned/<node>/` folder and write their states there.
//!
//! A worker reads nothing but its own folder (one recursive LIST per poll)
//! and the info file of a subtask it starts. Invariants:
//! - A subtask is **claimed** before it runs: its `Status.Running` mark is
//!   created once (atomic create) naming this incarnation, and only while
//!   the node's session guard lets this incarnation start executors. Of a
//!   worker and a manager taking an unstarted attempt back (it creates the
//!   same name), exactly one wins; the info is read after the claim, so an
//!   attempt whose folder was removed meanwhile never starts.
//! - It never resumes a subtask claimed by another incarnation: that one's
//!   manager waits until the incarnation is declared offline or ended.
//! - A subtask whose folder carries a `Cancel` mark (its manager takes it
//!   back) is killed, and its end is reported as `Failed` once the executor
//!   is dead, or at once if it does not run here: the manager gives the
//!   unit to another node only after that acknowledgement (or a
//!   declaration). A subtask whose folder disappears is killed at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use layouts::formats::{self, ExecutorKind, ExecutorSpec, StatusMark, TaskInfo};
use layouts::{v2, Name, NodeId, SubtaskState, TaskId};
use store::{Created, Store};

use crate::clock::Deadline;
use crate::executor::{self, ExecRequest, Running};
use crate::serve::wake::{Pokes, Scope, Wakeup};
use crate::tasks::WRITE_CONCURRENCY;

/// Settings of the task layer, from `compactd run`.
#[derive(Debug, Clone)]
pub struct WorkConfig {
    /// Data backend URI (`--data`), for discovery and the merge executor.
    pub data_uri: String,
    /// The scheduler root URI (`--root`), for the merge executor's fence.
    pub root_uri: String,
    pub executor: ExecutorKind,
    /// The node's default command template (`--command TEMPLATE`), for
    /// tasks that use the command executor without naming a command.
    pub command: Option<String>,
    /// Named command templates (`--command NAME=TEMPLATE`): the only ones a
    /// task or job step can ask for by name.
    pub commands: BTreeMap<String, String>,
    /// Run a template carried by a task or step itself (`--allow-inline-commands`).
    pub allow_inline: bool,
    /// Run command executors as this user (`--run-as`); resolved at start.
    pub run_as: Option<executor::RunAs>,
    pub target_size: u64,
    /// Codec of the Parquet executor's outputs (`run --parquet-compression`).
    pub parquet_compression: String,
    /// Subtasks run at once on this node.
    pub max_running: usize,
    pub command_timeout: Duration,
    /// Re-dispatches of a failed subtask before it fails for good.
    pub retries: u32,
    /// Finished tasks older than this are archived into `Compress/`.
    pub history_retention: Duration,
    /// Archives older than this are deleted from `Compress/` (zero: kept
    /// forever), so the tree does not grow without bound.
    pub archive_retention: Duration,
    /// How often the monitor sweeps the task tree.
    pub sweep: Duration,
    /// The policy planner's pass interval and per-round request budget.
    pub planner: crate::policy::PlannerConfig,
    /// Bytes per second the built-in executors may read plus write, all
    /// together (`run --io-limit`); none: unlimited.
    pub io_limit: Option<u64>,
}

impl Default for WorkConfig {
    fn default() -> Self {
        WorkConfig {
            data_uri: "./data".into(),
            root_uri: "./cluster.compact".into(),
            executor: ExecutorKind::Merge,
            command: None,
            commands: BTreeMap::new(),
            allow_inline: false,
            run_as: None,
            target_size: 128 * 1024 * 1024,
            parquet_compression: "zstd".into(),
            max_running: 2,
            command_timeout: Duration::from_secs(3600),
            retries: 3,
            history_retention: Duration::from_secs(24 * 3600),
            archive_retention: Duration::from_secs(30 * 24 * 3600),
            sweep: Duration::from_secs(60),
            planner: crate::policy::PlannerConfig::default(),
            io_limit: None,
        }
    }
}

/// One subtask folder as a listing shows it.
#[derive(Debug, Clone, Default)]
pub struct SubFolder {
    pub markers: Vec<SubtaskState>,
    pub has_info: bool,
    /// Every file name in the folder.
    pub files: Vec<String>,
}

impl SubFolder {
    /// The marker furthest along (two exist after an interrupted change).
    pub fn state(&self) -> SubtaskState {
        self.markers.iter().copied().max_by_key(|s| s.rank()).unwrap_or(SubtaskState::Init)
    }
}

/// A node's folder: its manager pointers, its subtasks, and the
/// incarnations of the node that ended on its own account.
#[derive(Debug, Clone, Default)]
pub struct NodeFolder {
    pub manages: Vec<TaskId>,
    pub subtasks: BTreeMap<String, SubFolder>,
    pub ended: std::collections::BTreeSet<u64>,
}

/// Reads `TaskAssigned/<node>/` with one recursive listing.
pub async fn list_node(store: &Store, node: &NodeId) -> store::Result<NodeFolder> {
    let dir = v2::node_assigned_dir(node);
    let mut out = NodeFolder::default();
    let mut entries = store.list_stream(&dir, true);
    while let Some(e) = entries.try_next().await? {
        let rel = &e.path[dir.len()..];
        match rel.split_once('/') {
            None => {
                if let Some(t) = v2::parse_manage_pointer(rel) {
                    out.manages.push(t);
                } else if let Some(inc) = v2::parse_ended_marker(rel) {
                    out.ended.insert(inc);
                }
            }
            Some((sub, file)) => {
                let f = out.subtasks.entry(sub.to_string()).or_default();
                f.files.push(file.to_string());
                if file == v2::TASK_INFO {
                    f.has_info = true;
                } else if let Ok(s) = SubtaskState::from_file_name(file) {
                    f.markers.push(s);
                }
            }
        }
    }
    Ok(out)
}

struct RunningSub {
    /// `None` for the in-process `noop` executor, done at the next poll.
    exec: Option<Running>,
    kind: ExecutorKind,
    /// Who dispatched it: poked when its result is written.
    manager: Option<NodeId>,
    /// Monotonic start, for the executor duration metric.
    started: Duration,
    /// Its folder has a `Cancel` mark: killed, its end still to report.
    cancelled: bool,
}

/// The subtasks this node is running.
pub struct Worker {
    me: NodeId,
    running: BTreeMap<String, RunningSub>,
    /// Results not yet written to the tree, with the manager to poke.
    reports: BTreeMap<String, (ExecutorKind, executor::Finished, Option<NodeId>)>,
    /// Subtasks this incarnation saw marked by an earlier one (never run).
    reported: std::collections::BTreeSet<String>,
    /// Woken when an executor ends, so that its result is reported at
    /// once instead of at the next poll.
    wake: Option<Arc<Wakeup>>,
    /// Managers to wake: a result of theirs was written.
    pokes: Pokes,
    metrics: Option<Arc<crate::serve::metrics::Metrics>>,
    /// Its live executors' process groups, under the node's session guard.
    groups: executor::Groups,
    /// The node's I/O limit of its built-in executors, if one is set.
    io: Option<executor::throttle::IoLimit>,
    /// Rounds so far: which task's subtasks start first ([`fair_order`]).
    rotation: usize,
}

impl Worker {
    pub fn new(me: NodeId) -> Worker {
        Worker {
            me,
            running: BTreeMap::new(),
            reports: BTreeMap::new(),
            reported: Default::default(),
            wake: None,
            pokes: Pokes::default(),
            metrics: None,
            groups: executor::Groups::guarded(),
            io: None,
            rotation: 0,
        }
    }

    /// Limits the I/O of the built-in executors it starts from now on.
    pub fn set_io_limit(&mut self, mut io: executor::throttle::IoLimit) {
        if let Some(m) = &self.metrics {
            io.count_into(m.io_stats());
        }
        self.io = Some(io);
    }

    /// The process groups of its live executors.
    pub fn groups(&self) -> executor::Groups {
        self.groups.clone()
    }

    /// Records executor starts, ends and durations into `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<crate::serve::metrics::Metrics>) {
        if let Some(io) = self.io.as_mut() {
            io.count_into(metrics.io_stats());
        }
        self.metrics = Some(metrics);
    }

    /// The managers to wake since the last call.
    pub fn take_pokes(&mut self) -> Pokes {
        self.pokes.take()
    }

    /// Wakes `wake` whenever an executor ends.
    pub fn set_wakeup(&mut self, wake: Arc<Wakeup>) {
        self.wake = Some(wake);
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Kills every executor: the node rejoined under a new incarnation, so
    /// this work is no longer its own (managers re-dispatch it).
    pub fn drop_all(&mut self) {
        self.reports.clear();
        for (name, mut r) in std::mem::take(&mut self.running) {
            tracing::warn!(subtask = %name, "dropping the work of the old incarnation");
            if let Some(e) = r.exec.as_mut() {
                e.kill();
            }
        }
    }

    /// One poll over this node's folder.
    pub async fn round(
        &mut self,
        store: &Store,
        cfg: &WorkConfig,
        incarnation: u64,
        folder: &NodeFolder,
        wall_ms: u64,
        deadline: &Deadline,
    ) -> store::Result<()> {
        // Moved away (its folder or info is gone): kill, and forget any
        // unsent report. Taken back (a `Cancel` mark): kill, and report its
        // end once it is dead (the manager waits for that).
        let cancelled = |f: &SubFolder| {
            f.markers.contains(&SubtaskState::Cancel)
                && !f.markers.iter().any(|m| matches!(m, SubtaskState::Success | SubtaskState::Failed))
        };
        let gone: Vec<String> = self
            .running
            .keys()
            .chain(self.reports.keys())
            .filter(|n| folder.subtasks.get(*n).is_none_or(|f| !f.has_info && !cancelled(f)))
            .cloned()
            .collect();
        for name in gone {
            self.reports.remove(&name);
            if let Some(mut r) = self.running.remove(&name) {
                tracing::info!(subtask = %name, "subtask moved away: killing its executor");
                if let Some(e) = r.exec.as_mut() {
                    e.kill();
                }
            }
        }
        let mut acks = vec![];
        for (name, _) in folder.subtasks.iter().filter(|(_, f)| cancelled(f)) {
            match self.running.get_mut(name) {
                Some(r) if !r.cancelled => {
                    tracing::info!(subtask = %name, "subtask cancelled by its manager: killing its executor");
                    r.cancelled = true;
                    if let Some(e) = r.exec.as_mut() {
                        e.kill();
                    }
                }
                None if !self.reports.contains_key(name) => acks.push(name.clone()),
                _ => {}
            }
        }
        for name in acks {
            // Not running here (never started, or by an earlier incarnation
            // of this process, whose executors were killed at its rejoin).
            let f = executor::Finished {
                success: false,
                exit_code: None,
                error: Some("cancelled by its manager; not running on this node".into()),
                tail: String::new(),
            };
            self.reports.insert(name, (ExecutorKind::Noop, f, None));
        }
        // Finished: keep the result until its report is written (a failed
        // write is retried next poll instead of losing the result).
        let finished: Vec<String> = self
            .running
            .iter_mut()
            .filter_map(|(name, r)| {
                let done = match r.exec.as_mut() {
                    Some(e) => e.try_finish(deadline.now()),
                    None => {
                        Some(executor::Finished { success: true, exit_code: Some(0), error: None, tail: String::new() })
                    }
                };
                done.map(|f| {
                    if let Some(m) = &self.metrics {
                        m.subtask_finished(r.kind.label(), f.success, deadline.now().saturating_sub(r.started));
                    }
                    self.reports.insert(name.clone(), (r.kind, f, r.manager.clone()));
                    name.clone()
                })
            })
            .collect();
        for name in &finished {
            self.running.remove(name);
        }
        // Finished here and reported now or still to report: the listing
        // (taken before this poll) may still show them Running.
        let finished_here: std::collections::BTreeSet<String> = self.reports.keys().cloned().collect();
        let me = self.me.clone();
        // Reports go out [`WRITE_CONCURRENCY`] at a time (on fs each is a
        // synced write, and concurrent syncs share the journal's commits);
        // each one's order (output, then status, then the poke) is kept
        // inside its own future. Unwritten reports are kept for the next poll.
        let pending: Vec<_> = self.reports.iter().map(|(n, r)| (n.clone(), r.clone())).collect();
        let mut first_err = None;
        {
            let mut writes = futures::stream::iter(pending)
                .take_while(|_| std::future::ready(!deadline.passed()))
                .map(|(name, (kind, f, manager))| {
                    let me = &me;
                    async move {
                        let r = write_report(store, me, incarnation, wall_ms, &name, kind, &f).await;
                        (name, manager, r)
                    }
                })
                .buffer_unordered(WRITE_CONCURRENCY);
            while let Some((name, manager, r)) = writes.next().await {
                match r {
                    Ok(state) => {
                        self.reports.remove(&name);
                        if let Some(m) = &manager {
                            self.pokes.hint(m);
                        }
                        tracing::info!(subtask = %name, %state, "subtask finished");
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if deadline.passed() {
            return Ok(());
        }
        // New: start, as many as there is room for. The claims and reads go
        // out concurrently; each subtask's executor starts once its own
        // claim is made and its info read.
        if !self.groups.may_start(incarnation, deadline.now()) {
            // The session guard is closed (no heartbeat counted yet, or past
            // its deadline): claim nothing that could not start.
            return first_err.map_or(Ok(()), Err);
        }
        let room = cfg.max_running.saturating_sub(self.running.len());
        let candidates: Vec<(Name, bool)> = folder
            .subtasks
            .iter()
            .filter(|(name, f)| !self.running.contains_key(*name) && f.has_info && !finished_here.contains(*name))
            .filter(|(name, f)| {
                // Running but not run here: by an earlier incarnation (its
                // manager re-dispatches it), or by this one, which lost track
                // (the marker's write landed but its reply was lost): then
                // start it again. [`prepare`] reads the mark to tell.
                f.markers.is_empty() || (f.state() == SubtaskState::Running && !self.reported.contains(*name))
            })
            .filter_map(|(name, f)| Name::parse(name).ok().map(|n| (n, !f.markers.is_empty())))
            .collect();
        self.rotation = self.rotation.wrapping_add(1);
        let candidates: Vec<(Name, bool)> = fair_order(candidates, self.rotation).into_iter().take(room).collect();
        let mut starts = futures::stream::iter(candidates)
            .take_while(|_| std::future::ready(!deadline.passed()))
            .map(|(sub, marked)| {
                let me = &me;
                async move {
                    let r = prepare(store, cfg, me, incarnation, &sub, marked, wall_ms).await;
                    (sub, r)
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY);
        while let Some((sub, r)) = starts.next().await {
            match r {
                Ok(Prepared::Start { req, manager }) => self.launch(&sub, &req, manager, incarnation, deadline.now()),
                Ok(Prepared::Earlier) => {
                    self.reported.insert(sub.to_string());
                    tracing::info!(subtask = %sub, "claimed by another incarnation of this node (or taken back by its manager): leaving it");
                }
                Ok(Prepared::Nothing) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Starts the executor of `sub`, whose `Running` mark is written.
    fn launch(&mut self, sub: &Name, req: &ExecRequest, manager: Option<NodeId>, incarnation: u64, now: Duration) {
        let kind = req.kind;
        if kind == ExecutorKind::Noop {
            self.running
                .insert(sub.to_string(), RunningSub { exec: None, kind, manager, started: now, cancelled: false });
            if let Some(m) = &self.metrics {
                m.subtask_started(kind.label());
            }
            // Done already: report on the next tick, not the next poll.
            if let Some(w) = &self.wake {
                w.poke(Scope::Work);
            }
            return;
        }
        let on_exit = self.wake.clone().map(|w| Box::new(move || w.poke(Scope::Work)) as executor::OnExit);
        match executor::spawn(req, now, &self.groups, incarnation, self.io.as_ref(), on_exit) {
            Ok(exec) => {
                tracing::info!(subtask = %sub, pid = exec.pid(), ?kind, "subtask started");
                let r = RunningSub { exec: Some(exec), kind, manager, started: now, cancelled: false };
                self.running.insert(sub.to_string(), r);
                if let Some(m) = &self.metrics {
                    m.subtask_started(kind.label());
                }
            }
            Err(e) => {
                // Reported like an executor that failed at once: the
                // manager retries the unit (on another attempt).
                tracing::warn!(subtask = %sub, "could not start the executor: {e}");
                let error = Some(format!("could not start the executor: {e}"));
                let f = executor::Finished { success: false, exit_code: None, error, tail: String::new() };
                self.reports.insert(sub.to_string(), (kind, f, manager));
                if let Some(w) = &self.wake {
                    w.poke(Scope::Work);
                }
            }
        }
    }
}

/// The order in which subtasks start: one of each task in turn (the task
/// first in line changing every round), not in name order, so that no
/// task, however many units it has in this folder or however fast they
/// fail, keeps another task's units from starting within a round.
fn fair_order<T>(candidates: Vec<(Name, T)>, rotation: usize) -> Vec<(Name, T)> {
    let mut by_task: BTreeMap<String, std::collections::VecDeque<(Name, T)>> = BTreeMap::new();
    for c in candidates {
        let task = v2::parse_subtask_name(c.0.as_str()).map(|(t, ..)| t.to_string()).unwrap_or_default();
        by_task.entry(task).or_default().push_back(c);
    }
    let mut queues: Vec<_> = by_task.into_values().collect();
    let n = queues.len().max(1);
    queues.rotate_left(rotation % n);
    let mut out = Vec::new();
    while queues.iter().any(|q| !q.is_empty()) {
        out.extend(queues.iter_mut().filter_map(|q| q.pop_front()));
    }
    out
}

/// Writes one finished subtask's result: its output (when there is one to
/// keep), then its status mark.
async fn write_report(
    store: &Store,
    me: &NodeId,
    incarnation: u64,
    wall_ms: u64,
    name: &str,
    kind: ExecutorKind,
    f: &executor::Finished,
) -> store::Result<SubtaskState> {
    let sub = Name::parse(name).expect("listed subtask names are valid");
    // Counters reported by the executor travel in the status mark; an
    // `Output` beside a success tells the manager to read them.
    let stats = crate::executor::parse_stats(&f.tail);
    if let Some(n) = stats.get("skipped_special").filter(|n| **n > 0) {
        tracing::warn!(subtask = %name, skipped = n, "entries that are not regular files were left alone (listed in its Output)");
    }
    if !f.tail.is_empty() && (kind == ExecutorKind::Command || !f.success || !stats.is_empty()) {
        store.put(&v2::subtask_output(me, &sub), f.tail.clone().into_bytes()).await?;
    }
    let state = if f.success { SubtaskState::Success } else { SubtaskState::Failed };
    let mark = StatusMark { incarnation, wall_ms, exit_code: f.exit_code, error: f.error.clone(), stats };
    store.put(&v2::subtask_status(me, &sub, state), formats::encode(&mark)).await?;
    Ok(state)
}

/// What [`prepare`] found for a subtask to start.
enum Prepared {
    /// Claimed by this incarnation: start this.
    Start { req: Box<ExecRequest>, manager: Option<NodeId> },
    /// Claimed by another incarnation of this node, or taken back by its
    /// manager before anyone claimed it.
    Earlier,
    /// Gone, or failed before anything ran (its `Failed` mark is written).
    Nothing,
}

/// Claims a subtask (creates its `Status.Running` mark naming
/// `incarnation`, see the module docs), then reads its info; writes its
/// `Failed` mark when it cannot run here. `marked`: the listing showed it
/// claimed already, so the mark is read to tell whose it is (this
/// incarnation's own claim whose reply was lost is taken up again).
async fn prepare(
    store: &Store,
    cfg: &WorkConfig,
    me: &NodeId,
    incarnation: u64,
    sub: &Name,
    marked: bool,
    wall_ms: u64,
) -> store::Result<Prepared> {
    let path = v2::subtask_status(me, sub, SubtaskState::Running);
    let claim = StatusMark { incarnation, wall_ms, ..Default::default() };
    let ours = if marked { false } else { store.create(&path, formats::encode(&claim)).await? == Created::Created };
    if !ours {
        let mark =
            store.read_or_bad(&path).await?.and_then(Result::ok).and_then(|b| formats::decode::<StatusMark>(&b).ok());
        if mark.is_none_or(|m| m.incarnation != incarnation) {
            return Ok(Prepared::Earlier);
        }
    }
    let failed = |why: String| async move {
        let mark = StatusMark { incarnation, wall_ms, exit_code: None, error: Some(why), ..Default::default() };
        store.put(&v2::subtask_status(me, sub, SubtaskState::Failed), formats::encode(&mark)).await?;
        Ok(Prepared::Nothing)
    };
    let info = match store.read_or_bad(&v2::subtask_info(me, sub)).await? {
        Some(Ok(b)) => formats::decode::<TaskInfo>(&b).map_err(|e| e.to_string()),
        Some(Err(bad)) => Err(bad.to_string()),
        None => {
            // Removed since the listing (its manager moved or ended it):
            // never started; our claim would only be litter.
            store.delete(&path).await?;
            return Ok(Prepared::Nothing);
        }
    };
    let info = match info {
        Ok(i) if i.run.subtask.as_ref().is_some_and(|m| m.node == *me) => i,
        Ok(_) => return failed("subtask info does not name this node".into()).await,
        Err(e) => {
            // Creates are complete-or-absent, so this is not a write in
            // progress: garbage, or a file torn by a crashed older
            // compactd. Failing the attempt lets the manager retry the
            // unit on another attempt instead of waiting forever.
            tracing::warn!(subtask = %sub, "subtask info does not parse, failing the attempt: {e}");
            return failed(format!("subtask info does not parse: {e}")).await;
        }
    };
    let meta = info.run.subtask.clone().expect("checked above");
    let manager = meta.manager.clone();
    let executor = info.run.executor.clone();
    let kind = executor.as_ref().map(|e| e.kind).unwrap_or(cfg.executor);
    let mut vars = BTreeMap::new();
    vars.insert("db", info.db_name.to_string());
    vars.insert("schema", info.schema_name.to_string());
    vars.insert("table", info.table_name.to_string());
    vars.insert("partition", info.partition_name.as_ref().map(|p| p.to_string()).unwrap_or_default());
    vars.insert("task", meta.parent.to_string());
    vars.insert("subtask", sub.to_string());
    vars.insert("round", meta.round.to_string());
    vars.insert("attempt", meta.attempt.to_string());
    if let Some(s) = meta.shard {
        vars.insert("shard_index", s.index.to_string());
        vars.insert("shard_total", s.total.to_string());
    }
    let command = match kind {
        ExecutorKind::Command => match command_for(cfg, me, executor.as_ref()) {
            Ok(c) => Some(c),
            Err(why) => {
                // Nothing is executed; the manager retries the unit on
                // another node (which may define the command).
                tracing::warn!(subtask = %sub, "{why}");
                return failed(why).await;
            }
        },
        _ => None,
    };
    if kind.is_builtin_merge() && info.partition_name.is_none() {
        return failed(format!("the {} executor needs a partition", kind.label())).await;
    }
    let req = ExecRequest {
        kind,
        command,
        timeout: executor.as_ref().and_then(|e| e.timeout_ms).map(Duration::from_millis).unwrap_or(cfg.command_timeout),
        vars,
        params: info.run.params.clone(),
        data_uri: cfg.data_uri.clone(),
        target_size: crate::tasks::discover::target_size(&info, cfg.target_size),
        compression: cfg.parquet_compression.clone(),
        fence: Some((cfg.root_uri.clone(), v2::subtask_dir(me, sub))),
        run_as: cfg.run_as.clone(),
    };
    Ok(Prepared::Start { req: Box::new(req), manager })
}

/// The template a command subtask runs on this node: the named command if
/// the task names one (only names this node defines), else the task's own
/// inline template if this node allows inline templates, else the node's
/// default `--command`. `Err` says why nothing may run, naming the node.
pub fn command_for(cfg: &WorkConfig, me: &NodeId, spec: Option<&ExecutorSpec>) -> Result<String, String> {
    if let Some(name) = spec.and_then(|s| s.command_name.as_deref()) {
        return cfg.commands.get(name).cloned().ok_or_else(|| {
            let defined: Vec<&str> = cfg.commands.keys().map(String::as_str).collect();
            format!(
                "command {name:?} is not defined on node {me} (it defines: {}); define it with --command {name}=TEMPLATE",
                if defined.is_empty() { "none".to_string() } else { defined.join(", ") }
            )
        });
    }
    if let Some(inline) = spec.and_then(|s| s.command.as_deref()) {
        if !cfg.allow_inline {
            return Err(format!(
                "node {me} does not run command templates carried by a task (start it with --allow-inline-commands, \
                 or name a command the node defines with --command-name); nothing was executed"
            ));
        }
        return Ok(inline.to_string());
    }
    cfg.command
        .clone()
        .ok_or_else(|| format!("node {me} has no default command (--command TEMPLATE) and the task names none"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task with 300 units in the folder (failing ones are taken again
    /// and again) and a task with one: with one free slot a round, the
    /// small one starts within two rounds, with two at once.
    #[test]
    fn a_large_task_does_not_keep_a_small_one_from_starting() {
        let big = TaskId::parse("aaaaaaaa.17000000.00000000.0").unwrap();
        let small = TaskId::parse("ffffffff.17000000.00000000.0").unwrap();
        let mut names: Vec<(Name, ())> = (0..300).map(|u| (v2::subtask_name(&big, 0, u, 0), ())).collect();
        names.push((v2::subtask_name(&small, 0, 0, 0), ()));
        let is_small = |n: &Name| n.as_str().starts_with("ffffffff");
        let first = fair_order(names.clone(), 1);
        assert!(first.iter().take(2).any(|(n, _)| is_small(n)), "{:?}", &first[..2]);
        let picked: Vec<bool> =
            (0..2).map(|r| fair_order(names.clone(), r).first().is_some_and(|(n, _)| is_small(n))).collect();
        assert!(picked.contains(&true), "one slot a round: the small task waits at most one round");
        assert_eq!(first.len(), 301, "every candidate stays in line");
    }
}
