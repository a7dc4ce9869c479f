//! The v1 → v2 upgrader behind `compactd upgrade` (see `layouts/UPGRADE.md`).
//!
//! One pass ([`run`]) streams `Compaction/Scheduler/` and, for each v1 task
//! file not yet upgraded, reads it (one read), then atomically creates its v2
//! `TaskInfo.pc.db`, its `Status.<State>` and finally its lock
//! `TaskUpgradeLock/<v1 file name>.lock` (three creates). Every step is an
//! atomic create of content derived only from the v1 tree, so a pass killed
//! anywhere is completed by the next one and can never make a second v2 task
//! (the v2 id is a pure function of the v1 name). [`verify`] checks the
//! result, [`finalize`] removes the v1 tree and the locks, and
//! [`upgrade_in_progress`] is the daemon's start-up gate, which
//! [`tripwire`] turns against the releases that cannot take part in a tree.
//!
//! Memory is bounded: main tasks are streamed with at most `concurrency` in
//! flight; only the subtask index (proportional to subtasks still present,
//! see [`index`]) and capped issue lists are held.

mod finalize;
pub mod fixture;
pub mod index;
pub mod tripwire;

pub use finalize::finalize;

use futures::StreamExt;
use layouts::formats::{self, UpgradePhase, UpgradeState, UpgradedTaskInfo};
use layouts::v1::{self, SubtaskTally, V1TaskFile};
use layouts::{v2, TaskId, TaskState};
use serde::Serialize;
use store::{Created, Store};

/// At most this many issues of each kind are kept in a [`Report`] (counts
/// stay exact), so a tree full of bad files cannot exhaust memory.
pub const MAX_LISTED: usize = 1000;
pub const DEFAULT_CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{path}: {reason}")]
    Marker { path: String, reason: String },
}

/// Why one v1 task could not be migrated or verified (reported as the
/// task's `failed` outcome; the pass goes on with the others).
#[derive(Debug, thiserror::Error)]
pub enum TaskFailure {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    V1(#[from] v1::V1Error),
    #[error("vanished during the upgrade (renamed by a running v1 node?); rerun")]
    Vanished,
    #[error("{count} subtask(s) unreadable, first {first}")]
    BrokenSubtasks { count: usize, first: String },
    #[error("open subtask unreadable: {0}")]
    OpenSubtask(Issue),
    #[error("v2 id collision: {path} was made from {from}")]
    Collision { path: String, from: String },
    #[error("v2 id collision: {path} exists and was not made by the upgrade")]
    Foreign { path: String },
    #[error("cannot write the upgrade state marker: {0}")]
    Marker(String),
}

/// A path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    pub path: String,
    pub reason: String,
}

impl Issue {
    pub fn new(path: &str, reason: impl Into<String>) -> Issue {
        Issue { path: path.to_string(), reason: reason.into() }
    }
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Apply,
    DryRun,
    Verify,
    Finalize,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Time for the state marker's `wall_ms` and the report's `elapsed_ms`.
    pub clock: clock::SharedClock,
    /// Backend operations in flight at once (at least 1).
    pub concurrency: usize,
    /// `--finalize --force`: also remove orphan subtasks and v1 files that
    /// cannot be migrated. Never removes a valid v1 task without its v2 task.
    pub force: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Apply,
            clock: clock::SystemClock::shared(),
            concurrency: DEFAULT_CONCURRENCY,
            force: false,
        }
    }
}

/// What happened to one v1 task file in a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "reason")]
pub enum Outcome {
    /// This pass created at least one of its v2 files or its lock.
    Migrated,
    /// Its lock existed (or every step found its file already made).
    AlreadyDone,
    /// Dry run: it would be migrated.
    WouldMigrate,
    /// Verify: its v2 task and lock are in place.
    Verified,
    /// Verify: a valid v1 task without its complete v2 task or lock.
    Unmigrated(String),
    /// It cannot be migrated (bad name, bad content, collision, I/O error).
    Failed(String),
}

/// One v1 task file's result, passed to the progress callback.
#[derive(Debug, Clone, Serialize)]
pub struct TaskEvent {
    pub path: String,
    pub v2_id: Option<String>,
    pub v2_state: Option<TaskState>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// The summary of a pass (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: Mode,
    /// v1 main task entries seen in `Compaction/Scheduler/`.
    pub v1_tasks: u64,
    pub migrated: u64,
    pub already_done: u64,
    pub would_migrate: u64,
    pub verified: u64,
    /// Verify: valid v1 tasks not (completely) upgraded.
    pub unmigrated: u64,
    /// Task files that cannot be migrated (path and reason in `failures`).
    pub failed: u64,
    pub failures: Vec<Issue>,
    /// v1 subtask folders seen, open ones (carried for re-run) and finished
    /// ones (counted into their task's ResultInfo).
    pub subtasks: u64,
    pub subtasks_open: u64,
    pub subtasks_finished: u64,
    /// Subtask folders whose main task is missing (never dropped silently).
    pub orphans: u64,
    pub orphan_list: Vec<Issue>,
    /// Entries below `Compaction/TaskAssigned/` that are not subtasks.
    pub problems: u64,
    pub problem_list: Vec<Issue>,
    /// True if any list above was capped at [`MAX_LISTED`].
    pub truncated: bool,
    /// The upgrade state marker after the pass (`None`: no marker).
    pub state: Option<UpgradePhase>,
    /// Finalize: what was removed.
    pub removed: Vec<String>,
    /// Finalize: why it refused to remove anything.
    pub refused: Option<String>,
    pub elapsed_ms: u64,
}

impl Report {
    fn new(mode: Mode) -> Report {
        Report {
            mode,
            v1_tasks: 0,
            migrated: 0,
            already_done: 0,
            would_migrate: 0,
            verified: 0,
            unmigrated: 0,
            failed: 0,
            failures: Vec::new(),
            subtasks: 0,
            subtasks_open: 0,
            subtasks_finished: 0,
            orphans: 0,
            orphan_list: Vec::new(),
            problems: 0,
            problem_list: Vec::new(),
            truncated: false,
            state: None,
            removed: Vec::new(),
            refused: None,
            elapsed_ms: 0,
        }
    }

    fn list(list: &mut Vec<Issue>, truncated: &mut bool, issue: Issue) {
        if list.len() < MAX_LISTED {
            list.push(issue);
        } else {
            *truncated = true;
        }
    }

    /// True if the pass found nothing that needs an operator: exit code 0.
    pub fn is_clean(&self) -> bool {
        self.failed == 0 && self.unmigrated == 0 && self.orphans == 0 && self.problems == 0 && self.refused.is_none()
    }

    fn record(&mut self, ev: &TaskEvent) {
        self.v1_tasks += 1;
        match &ev.outcome {
            Outcome::Migrated => self.migrated += 1,
            Outcome::AlreadyDone => self.already_done += 1,
            Outcome::WouldMigrate => self.would_migrate += 1,
            Outcome::Verified => self.verified += 1,
            Outcome::Unmigrated(r) => {
                self.unmigrated += 1;
                Self::list(&mut self.failures, &mut self.truncated, Issue::new(&ev.path, r.clone()));
            }
            Outcome::Failed(r) => {
                self.failed += 1;
                Self::list(&mut self.failures, &mut self.truncated, Issue::new(&ev.path, r.clone()));
            }
        }
    }

    fn absorb_index(&mut self, index: index::SubtaskIndex) {
        self.subtasks = index.subtasks;
        self.subtasks_open = index.open;
        self.subtasks_finished = index.finished;
        self.problems += index.problem_count;
        self.truncated |= index.problem_count > index.problems.len() as u64;
        for p in index.problems.iter().cloned() {
            Self::list(&mut self.problem_list, &mut self.truncated, p);
        }
        for g in index.into_orphans() {
            self.orphans += g.folders;
            let reason =
                format!("orphan: no main task of this node and timestamp ({} subtask folder(s) of it)", g.folders);
            Self::list(&mut self.orphan_list, &mut self.truncated, Issue::new(&g.first_path, reason));
        }
    }
}

/// Progress callback: called once per v1 task file, from the pass's task.
pub type OnTask<'a> = &'a (dyn Fn(&TaskEvent) + Send + Sync);

fn whoami() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("compactd upgrade on {host} pid {}", std::process::id())
}

/// Reads the upgrade state marker. `Err` if it exists but does not parse
/// (a torn write on fs, or a foreign file): callers treat that as unsafe.
pub async fn read_state(store: &Store) -> Result<Option<UpgradeState>, MigrateError> {
    let unreadable = |why: String| MigrateError::Marker {
        path: v2::UPGRADE_STATE.into(),
        reason: format!("unreadable upgrade state: {why}"),
    };
    match store.read_or_bad(v2::UPGRADE_STATE).await? {
        None => Ok(None),
        Some(Err(bad)) => Err(unreadable(bad.to_string())),
        Some(Ok(b)) => formats::decode(&b).map(Some).map_err(|e| unreadable(e.to_string())),
    }
}

async fn write_state(store: &Store, opts: &Options, state: UpgradePhase, v1_tasks: u64) -> Result<(), MigrateError> {
    let s = UpgradeState { state, wall_ms: opts.clock.wall_ms(), by: whoami(), v1_tasks, tripwire: None };
    store.put(v2::UPGRADE_STATE, formats::encode(&s)).await?;
    Ok(())
}

/// The daemon's start-up gate: `Some(reason)` if `compactd run` must not
/// start on this root (an upgrade is half done, or a v1 tree was never
/// upgraded); `None` if it may. Costs one read, plus one list page when
/// there is no marker.
pub async fn upgrade_in_progress(store: &Store) -> Result<Option<String>, MigrateError> {
    match read_state(store).await {
        Ok(Some(s)) => match s.phase() {
            UpgradePhase::Complete | UpgradePhase::Finalizing => Ok(None),
            UpgradePhase::Running => Ok(Some(format!(
                "the v1 → v2 upgrade of this root is half done ({} says running, written by {}); \
                 run `compactd upgrade` until it exits 0 (or `compactd upgrade --verify`)",
                v2::UPGRADE_STATE,
                s.by
            ))),
        },
        Ok(None) => Ok(first_v1_task(store)
            .await?
            .map(|p| format!("this root holds a v1 tree ({p} …) that was never upgraded; run `compactd upgrade`"))),
        // Unreadable: whether an upgrade is half done cannot be told from
        // it. With no v1 task left there is nothing an upgrade could still
        // do, so the file costs its own meaning only (`check` names it);
        // with v1 tasks the daemon waits for `compactd upgrade --verify`.
        Err(MigrateError::Marker { reason, .. }) => match first_v1_task(store).await? {
            Some(_) => Ok(Some(format!("{}: {reason}; run `compactd upgrade --verify`", v2::UPGRADE_STATE))),
            None => {
                tracing::warn!("{}: {reason}; no v1 task is left, so the daemon starts", v2::UPGRADE_STATE);
                Ok(None)
            }
        },
        Err(e) => Err(e),
    }
}

/// The first entry of the v1 scheduler folder, if any (one list page).
async fn first_v1_task(store: &Store) -> Result<Option<String>, MigrateError> {
    let mut l = std::pin::pin!(store.list_stream(v1::SCHEDULER, false));
    match l.next().await {
        Some(Ok(e)) => Ok(Some(e.path)),
        Some(Err(e)) => Err(e.into()),
        None => Ok(None),
    }
}

/// True if at least one upgrade lock exists (one list page).
async fn any_lock(store: &Store) -> Result<bool, MigrateError> {
    let l = store.list_stream(v2::UPGRADE_LOCKS, false);
    futures::pin_mut!(l);
    while let Some(e) = l.next().await {
        if e?.name().ends_with(v2::UPGRADE_LOCK_SUFFIX) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lock_path(file_name: &str) -> String {
    format!("{}{file_name}{}", v2::UPGRADE_LOCKS, v2::UPGRADE_LOCK_SUFFIX)
}

/// Runs one pass in `opts.mode` (Apply, DryRun or Verify; Finalize goes
/// through [`finalize`]). `Err` only for failures that stop the pass
/// (a listing or the state marker); per-task problems are in the report.
pub async fn run(store: &Store, opts: &Options, on_task: OnTask<'_>) -> Result<Report, MigrateError> {
    match opts.mode {
        Mode::Finalize => finalize(store, opts, on_task).await,
        _ => pass(store, opts, on_task).await,
    }
}

struct Ctx<'a> {
    store: &'a Store,
    opts: &'a Options,
    mode: Mode,
    index: &'a index::SubtaskIndex,
    check_locks: bool,
    /// Set the marker to Running before the first v2 write of the pass.
    running: tokio::sync::OnceCell<Result<(), String>>,
    marker: Option<UpgradePhase>,
}

impl Ctx<'_> {
    async fn mark_running(&self) -> Result<(), String> {
        self.running
            .get_or_init(|| async {
                if self.marker == Some(UpgradePhase::Running) {
                    return Ok(());
                }
                write_state(self.store, self.opts, UpgradePhase::Running, 0)
                    .await
                    .map_err(|e| format!("cannot write the upgrade state marker: {e}"))
            })
            .await
            .clone()
    }
}

async fn pass(store: &Store, opts: &Options, on_task: OnTask<'_>) -> Result<Report, MigrateError> {
    let started = opts.clock.mono();
    let mut report = Report::new(opts.mode);
    let marker = match read_state(store).await {
        Ok(s) => s.map(|s| s.phase()),
        // A torn marker: the pass rewrites it.
        Err(MigrateError::Marker { .. }) => Some(UpgradePhase::Running),
        Err(e) => return Err(e),
    };
    let concurrency = opts.concurrency.max(1);
    let index = index::SubtaskIndex::build(store, concurrency, opts.mode != Mode::Verify).await?;
    let ctx = Ctx {
        store,
        opts,
        mode: opts.mode,
        index: &index,
        check_locks: any_lock(store).await?,
        running: tokio::sync::OnceCell::new(),
        marker,
    };
    {
        let results = store
            .list_stream(v1::SCHEDULER, false)
            .map(|entry| {
                let ctx = &ctx;
                async move {
                    let entry = entry?;
                    Ok::<_, MigrateError>(one_task(ctx, &entry.path, entry.is_dir).await)
                }
            })
            .buffer_unordered(concurrency);
        futures::pin_mut!(results);
        while let Some(ev) = results.next().await {
            let ev = ev?;
            report.record(&ev);
            on_task(&ev);
        }
    }
    let wrote = ctx.running.get().is_some();
    report.absorb_index(index);
    report.state = if wrote { Some(UpgradePhase::Running) } else { marker };
    let all_there = report.failed == 0 && report.unmigrated == 0;
    let next = match opts.mode {
        // Apply: complete when every v1 task file is migrated, running while
        // any cannot be (a root with an unmigrated task is half upgraded).
        Mode::Apply if all_there && (wrote || marker.is_some()) => Some(UpgradePhase::Complete),
        Mode::Apply if !all_there => Some(UpgradePhase::Running),
        // Verify completes the marker only when there is nothing to report,
        // and only on a root that is being upgraded; it never downgrades.
        Mode::Verify if report.is_clean() && marker == Some(UpgradePhase::Running) => Some(UpgradePhase::Complete),
        _ => None,
    };
    if let Some(next) = next.filter(|n| report.state != Some(*n)) {
        if next == UpgradePhase::Complete {
            sweep_crashed_writes(store).await?;
        }
        write_state(store, opts, next, report.v1_tasks).await?;
        report.state = Some(next);
    }
    report.elapsed_ms = (opts.clock.mono() - started).as_millis() as u64;
    Ok(report)
}

/// On fs, a killed upgrader can leave the hidden temp file of a create or
/// put beside its target (`store::fs`): never listed, but a file an
/// operator finds with `ls -a` and a backup copies. A listing removes the
/// temps of dead processes of this host, so the pass walks the folders it
/// writes once, before it marks the upgrade complete: a completed tree holds
/// only what it shows. A crash during the marker's own write leaves it
/// `Running`, and the rerun walks again. Elsewhere a PUT is atomic and
/// leaves nothing, and the walk is skipped.
async fn sweep_crashed_writes(store: &Store) -> Result<(), MigrateError> {
    if !matches!(store.uri(), store::RootUri::Fs { .. }) {
        return Ok(());
    }
    for dir in [v2::SCHEDULER, v2::UPGRADE_LOCKS] {
        let mut walk = store.list_tree(dir);
        while let Some(entry) = walk.next().await {
            entry?;
        }
    }
    Ok(())
}

fn fail(path: &str, v2: Option<TaskId>, state: Option<TaskState>, reason: impl Into<String>) -> TaskEvent {
    TaskEvent {
        path: path.to_string(),
        v2_id: v2.map(|i| i.to_string()),
        v2_state: state,
        outcome: Outcome::Failed(reason.into()),
    }
}

async fn one_task(ctx: &Ctx<'_>, path: &str, is_dir: bool) -> TaskEvent {
    let name = v2::file_name(path);
    if is_dir {
        return fail(path, None, None, "a folder where a v1 task file is expected");
    }
    let file = match V1TaskFile::parse(name) {
        Ok(f) => f,
        Err(e) => return fail(path, None, None, e.to_string()),
    };
    let state = v1::v2_state(file.state);
    let id = match v1::v2_id(&file.name) {
        Ok(id) => id,
        Err(e) => return fail(path, None, Some(state), e.to_string()),
    };
    let event =
        |outcome| TaskEvent { path: path.to_string(), v2_id: Some(id.to_string()), v2_state: Some(state), outcome };
    let lock = lock_path(name);
    let result = match ctx.mode {
        Mode::Verify => verify_task(ctx, path, &file, id, &lock).await,
        _ => migrate_task(ctx, path, &file, id, &lock).await,
    };
    match result {
        Ok(o) => event(o),
        Err(reason) => event(Outcome::Failed(reason.to_string())),
    }
}

/// Reads and maps a v1 task file: the content of its v2 TaskInfo.
async fn read_v1(
    ctx: &Ctx<'_>,
    path: &str,
    file: &V1TaskFile,
    group: Option<index::Group>,
) -> Result<UpgradedTaskInfo, TaskFailure> {
    let bytes = ctx.store.read(path).await?.ok_or(TaskFailure::Vanished)?;
    let info = v1::parse_task_info(&bytes)?;
    let tally = match &group {
        Some(g) if !g.broken.is_empty() => {
            return Err(TaskFailure::BrokenSubtasks { count: g.broken.len(), first: g.broken[0].to_string() })
        }
        Some(g) => {
            let mut tally = g.tally.clone();
            for path in &g.open_infos {
                let partition = index::read_partition(ctx.store, path).await.map_err(TaskFailure::OpenSubtask)?;
                tally.open.push(partition);
            }
            tally
        }
        None => SubtaskTally::default(),
    };
    Ok(v1::upgrade_task(file, &info, &tally)?)
}

async fn migrate_task(
    ctx: &Ctx<'_>,
    path: &str,
    file: &V1TaskFile,
    id: TaskId,
    lock: &str,
) -> Result<Outcome, TaskFailure> {
    let store = ctx.store;
    if ctx.check_locks && store.exists(lock).await? {
        // Still claim the subtasks, so that they are not reported as orphans.
        ctx.index.claim(&file.name);
        return Ok(Outcome::AlreadyDone);
    }
    let group = ctx.index.claim(&file.name);
    let info = read_v1(ctx, path, file, group).await?;
    if ctx.mode == Mode::DryRun {
        return Ok(Outcome::WouldMigrate);
    }
    ctx.mark_running().await.map_err(TaskFailure::Marker)?;
    let bytes = formats::encode(&info);
    let info_path = v2::task_info(&id);
    let mut made = false;
    match store.create(&info_path, bytes.clone()).await? {
        Created::Created => made = true,
        Created::Exists => {
            let existing = store.read(&info_path).await?.unwrap_or_default();
            if serde_json::from_slice::<serde_json::Value>(&existing).is_err() {
                // Torn by a killed upgrader (fs creates write in place):
                // the content is a function of the v1 tree, so write it whole.
                tracing::debug!(path = %info_path, "repairing a torn TaskInfo");
                store.put(&info_path, bytes).await?;
                made = true;
            } else {
                match formats::decode::<UpgradedTaskInfo>(&existing) {
                    Ok(other) if v1::same_origin(&other, file) => {}
                    Ok(other) => {
                        return Err(TaskFailure::Collision { path: info_path, from: other.upgraded_from.to_string() })
                    }
                    Err(_) => return Err(TaskFailure::Foreign { path: info_path }),
                }
            }
        }
    }
    let status = v2::task_status(&id, v1::v2_state(file.state));
    made |= store.create(&status, Vec::new()).await? == Created::Created;
    made |= store.create(lock, Vec::new()).await? == Created::Created;
    Ok(if made { Outcome::Migrated } else { Outcome::AlreadyDone })
}

async fn verify_task(
    ctx: &Ctx<'_>,
    path: &str,
    file: &V1TaskFile,
    id: TaskId,
    lock: &str,
) -> Result<Outcome, TaskFailure> {
    let store = ctx.store;
    ctx.index.claim(&file.name);
    let mut missing = Vec::new();
    match store.read(&v2::task_info(&id)).await? {
        None => missing.push(format!("no {}", v2::task_info(&id))),
        Some(b) => match formats::decode::<UpgradedTaskInfo>(&b) {
            Ok(u) if v1::same_origin(&u, file) => {}
            Ok(u) => return Err(TaskFailure::Collision { path: id.to_string(), from: u.upgraded_from.to_string() }),
            Err(_) if serde_json::from_slice::<serde_json::Value>(&b).is_ok() => {
                return Err(TaskFailure::Foreign { path: v2::task_info(&id) })
            }
            Err(e) => missing.push(format!("{} unreadable: {e}", v2::task_info(&id))),
        },
    }
    if !store.exists(&v2::task_status(&id, v1::v2_state(file.state))).await? {
        // v2 may have moved the task on since: any valid marker will do.
        let any = store.list(&v2::task_dir(&id)).await?.iter().any(|e| TaskState::from_file_name(e.name()).is_ok());
        if !any {
            missing.push(format!("no Status.<State> in {}", v2::task_dir(&id)));
        }
    }
    if !store.exists(lock).await? {
        missing.push(format!("no {lock}"));
    }
    if missing.is_empty() {
        return Ok(Outcome::Verified);
    }
    // Unmigrated, or impossible to migrate? Only the v1 file can tell.
    let bytes = store.read(path).await?.unwrap_or_default();
    v1::parse_task_info(&bytes).and_then(|i| v1::upgrade_task(file, &i, &SubtaskTally::default()))?;
    Ok(Outcome::Unmigrated(missing.join("; ")))
}

/// The v2 id of a v1 task file name, if it is one (for tests and tools).
pub fn v2_id_of(file_name: &str) -> Option<TaskId> {
    V1TaskFile::parse(file_name).ok().and_then(|f| v1::v2_id(&f.name).ok())
}
