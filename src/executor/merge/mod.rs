//! The built-in merge executors' shared protocol: compact one partition
//! folder on the data backend by rewriting its small files into larger ones,
//! crash-safely. Two formats stage outputs: [`Format::Lines`] (concatenates
//! newline-delimited files, [`lines`]) and [`Format::Parquet`] (re-encodes Parquet
//! files, [`parquet`]); everything after staging is common.
//!
//! Crash safety (a SIGKILL at any point, then a rerun, leaves the old files or
//! the merged ones, never both, never neither), and one change of a
//! partition at a time whoever runs it ([`commit`] says how):
//! 1. Outputs are staged under `<partition>/_compactd/staging/<attempt>/`,
//!    invisible to readers of the partition.
//! 2. The **commit** is one atomic create of the partition's next turn,
//!    `<partition>/_compactd/turn.<n>`, holding the plan (inputs, staged
//!    outputs, final names). Of the plans made from the same files exactly
//!    one commits; an attempt of the same round that loses rolls the
//!    winner's plan forward, one of another task plans again from what the
//!    winner left.
//! 3. Roll-forward is idempotent: promote each staged output to its final
//!    name if that is missing, then delete the inputs, then mark the commit
//!    done and remove the staging. A crash during roll-forward is finished
//!    by whichever run of the partition comes next.
//!
//! **Files in flight are no inputs.** A file is an input only if it is
//! older than the job's minimum age (`merge.min-age`; policies default to
//! 10 minutes), is no in-progress file of a writer (`*.pending`,
//! `*.inprogress.*`, hidden and `_` names), and no write shows in progress
//! in the table (`_temporary/`, staging folders: see
//! [`crate::table::format`]). Right before the commit the table's format is
//! judged again (a Delta or Iceberg writer puts data files down before its
//! log or metadata exists) and every input is listed again: one that grew,
//! shrank, was rewritten or vanished while it was read aborts the unit with
//! nothing changed. A writer that appends to an input after that last look
//! and before its delete still loses those bytes: files that are appended to
//! belong under the minimum age, not in a merge.
//!
//! For [`Format::Lines`] every line of every input is preserved: outputs are
//! the inputs' concatenation in name order, and an input without a final
//! newline gets one so that its last line does not run into the next file's
//! first.

mod commit;
pub mod lines;
pub mod parquet;

use std::collections::BTreeMap;

use layouts::formats::ExecutorKind;
use store::Store;

pub use commit::{Commit, Output};
use parquet::ParquetOptions;

pub const META_DIR: &str = "_compactd/";

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("partition {partition}: {problem}")]
    Broken { partition: String, problem: String },
    #[error(transparent)]
    Throttle(#[from] super::throttle::ThrottleError),
}

#[derive(Debug, Clone)]
pub struct MergeJob {
    /// `<db>/<schema>/<table>/<partition>/`
    pub dir: String,
    pub task: String,
    pub round: u32,
    pub attempt: u32,
    pub target_size: u64,
    /// Test knob: pause this long after staging, before the commit.
    pub delay_before_commit: std::time::Duration,
    /// The subtask's folder in the scheduler tree: right before committing,
    /// the merge checks that it still exists and is not cancelled, so an
    /// attempt whose subtask was given to another node does not commit.
    pub fence: Option<(Store, String)>,
    /// Wall time at the start of the run: judges the age of a torn commit
    /// left by an older compactd (see [`read_commit`]).
    pub now: std::time::SystemTime,
    /// What the partition's files are.
    pub format: Format,
    /// The node's I/O limit, asked before each data read and write
    /// (inputs and staged outputs; see [`super::throttle`]).
    pub io: super::throttle::Throttle,
    /// A file written more recently than this before `now` is no input: a
    /// writer may still be at it (see the module doc). Zero: any age.
    pub min_age: std::time::Duration,
}

/// What a partition's data files are, and so how outputs are staged.
#[derive(Debug, Clone)]
pub enum Format {
    /// Newline-delimited text: outputs concatenate inputs.
    Lines,
    /// Parquet: outputs re-encode the inputs' rows ([`parquet`]).
    Parquet(ParquetOptions),
}

/// The outputs an attempt staged, with its figures (`files_in`,
/// `files_out`, `bytes_in`, `bytes_out`, `rows_in`, `rows_out`).
#[derive(Debug, Default)]
pub struct Staged {
    pub outputs: Vec<Output>,
    pub stats: BTreeMap<String, u64>,
    /// Each output's bytes and rows, in the order of `outputs` (Parquet).
    pub written: Vec<(u64, u64)>,
    /// Each output's footer, in the order of `outputs` (Parquet): its
    /// column statistics become a Delta commit's per-file statistics.
    pub footers: Vec<std::sync::Arc<::parquet::file::metadata::ParquetMetaData>>,
}

/// The task parameter that sets [`MergeJob::min_age`] (a duration), and
/// the variable it reaches the executor in.
pub const MIN_AGE_PARAM: &str = "merge.min-age";
pub const MIN_AGE_ENV: &str = "COMPACTD_PARAM_MERGE_MIN_AGE";

/// Why a merge refused to commit.
pub const SUPERSEDED: &str = "superseded: the subtask was cancelled or given to another node";

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Fewer than two small files: nothing to merge.
    NothingToDo,
    /// This attempt's plan was committed and applied.
    Merged { inputs: usize, outputs: usize },
    /// Another attempt of this round had committed; its plan was applied.
    RolledForward { by_attempt: u32 },
}

impl MergeJob {
    pub(crate) fn staging_dir(&self, attempt: u32) -> String {
        format!("{}{META_DIR}staging/{}.r{}.a{attempt}/", self.dir, self.task, self.round)
    }

    pub(crate) fn broken(&self, problem: impl Into<String>) -> MergeError {
        MergeError::Broken { partition: self.dir.clone(), problem: problem.into() }
    }
}

/// `a/b/c/` of `a/b/c/d/`: the table folder of a partition folder.
pub(crate) fn parent_dir(dir: &str) -> &str {
    let trimmed = dir.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(i) => &dir[..=i],
        None => "",
    }
}

/// A data file as one listing of its partition showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub path: String,
    pub len: u64,
    /// The listing's version token and write time, where it has them:
    /// together with `len`, what tells a rewrite or an append.
    version: Option<String>,
    modified_ms: Option<i64>,
}

/// Data files of a partition: regular files directly in the folder, not
/// hidden. Symbolic links, FIFOs, sockets and devices (a data store over fs
/// lists them as [`store::Entry::special`]) are never inputs.
#[cfg(test)]
pub(crate) async fn data_files(store: &Store, dir: &str) -> store::Result<Vec<(String, u64)>> {
    let entries = store.list(dir).await?;
    Ok(listed(store, &entries).await?.into_iter().map(|f| (f.path, f.len)).collect())
}

/// The data files among a listing of a partition, sorted by path.
async fn listed(store: &Store, entries: &[store::Entry]) -> store::Result<Vec<Listed>> {
    let mut out = vec![];
    for e in entries {
        let name = e.name();
        if e.is_dir || e.special.is_some() || name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        // The listing's size where it has one (S3, fs): no request per file.
        let len = match e.len {
            Some(len) => len,
            None => store.stat(&e.path).await?.map(|m| m.len).unwrap_or(0),
        };
        out.push(Listed { path: e.path.clone(), len, version: e.version.clone(), modified_ms: e.modified_ms });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The partition's files that may be inputs now (see the module doc),
/// with how many were left out as too young or in progress: one listing,
/// which judges the table first when `judge` (a plan made again after
/// another task's commit; the first was judged as the run began).
async fn candidates(
    store: &Store,
    job: &MergeJob,
    kind: ExecutorKind,
    judge: bool,
) -> Result<(Vec<Listed>, u64), MergeError> {
    let entries = store.list(&job.dir).await?;
    if judge {
        refuse_if_not_ours(store, job, kind, &entries, false).await?;
    }
    let now_ms = wall_ms(job);
    let min_age_ms = job.min_age.as_millis() as i64;
    let all = listed(store, &entries).await?;
    let n = all.len();
    let kept: Vec<Listed> = all
        .into_iter()
        .filter(|f| !crate::table::format::is_in_progress_name(name_of(&f.path)))
        // A backend that tells no file's age (none of the real ones) cannot
        // hold a file back by it; no minimum takes files of any age, also
        // those whose time is ahead of this host's clock.
        .filter(|f| min_age_ms == 0 || f.modified_ms.is_none_or(|m| now_ms.saturating_sub(m) >= min_age_ms))
        .collect();
    let left_out = (n - kept.len()) as u64;
    Ok((kept, left_out))
}

fn wall_ms(job: &MergeJob) -> i64 {
    job.now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub(crate) fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Right before the commit, from one listing of the partition: the table
/// is still one this executor may change, no write shows in progress in
/// it, and every input is as it was listed when it was read.
async fn recheck(
    store: &Store,
    job: &MergeJob,
    kind: ExecutorKind,
    seen: &[Listed],
    outputs: &[Output],
) -> Result<(), MergeError> {
    let entries = store.list(&job.dir).await?;
    refuse_if_not_ours(store, job, kind, &entries, false).await?;
    let now = listed(store, &entries).await?;
    for input in outputs.iter().flat_map(|o| &o.inputs) {
        let before = seen.iter().find(|f| &f.path == input);
        let after = now.iter().find(|f| &f.path == input);
        match (before, after) {
            (Some(b), Some(a)) if b == a => {}
            (Some(b), Some(a)) => {
                return Err(job.broken(format!(
                    "input {input} changed while it was merged ({} bytes, now {}); nothing was merged",
                    b.len, a.len
                )))
            }
            _ => return Err(job.broken(format!("input {input} vanished while it was merged; nothing was merged"))),
        }
    }
    Ok(())
}

/// Refuses a table another format owns, or one a writer is writing now
/// (`entries`: a listing of the partition; `above`: the folders above the
/// table are judged too).
async fn refuse_if_not_ours(
    store: &Store,
    job: &MergeJob,
    kind: ExecutorKind,
    entries: &[store::Entry],
    above: bool,
) -> Result<(), MergeError> {
    let table = parent_dir(&job.dir);
    let now = wall_ms(job);
    let judged = crate::table::format::judge_partition(store, table, &job.dir, entries, kind, now, above).await?;
    if let Some(why) = judged {
        return Err(job.broken(format!("{why}; nothing was merged")));
    }
    Ok(())
}

/// Entries of a partition (and of its `_compactd/`) that are neither
/// regular files nor folders, with what they are. They are left alone and
/// reported.
pub async fn special_entries(store: &Store, dir: &str) -> store::Result<Vec<(String, &'static str)>> {
    let mut out = vec![];
    for d in [dir.to_string(), format!("{dir}{META_DIR}"), format!("{dir}{META_DIR}staging/")] {
        match store.list(&d).await {
            Ok(entries) => out.extend(entries.into_iter().filter_map(|e| e.special.map(|k| (e.path, k)))),
            // `_compactd/` itself may be the link: it is listed above.
            Err(_) if d != dir => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// `_compactd/` and `_compactd/staging/` are compactd's own folders: a
/// symbolic link planted at either name is removed (the link only, never
/// what it points to) so that nothing is staged or committed through it.
async fn unlink_planted_meta_links(store: &Store, job: &MergeJob) -> Result<(), MergeError> {
    for d in [format!("{}{META_DIR}", job.dir), format!("{}{META_DIR}staging/", job.dir)] {
        if store.remove_link(&d).await? {
            tracing::warn!(path = d, "removed a symbolic link planted where compactd's own folder belongs");
        }
    }
    Ok(())
}

/// Whether the attempt a `--fence-dir` names is still its manager's: a
/// subtask folder (layout 2) or a unit of a batch (layout 3) whose info is
/// there and that is not cancelled. One listing of the scheduler tree.
pub async fn fence_holds(sched: &Store, fence: &str) -> store::Result<bool> {
    let files = sched.list(&layouts::v3::fence_folder(fence)).await?;
    Ok(layouts::v3::fence_holds(fence, files.iter().map(|e| e.name())))
}

pub async fn run(store: &Store, job: &MergeJob) -> Result<Outcome, MergeError> {
    run_with_stats(store, job).await.map(|(o, _)| o)
}

/// How many times a run plans again after other tasks' commits took the
/// partition's next turn, before it gives up: each such commit changed the
/// partition while this run was reading it.
const MAX_CONFLICTS: u32 = 5;

/// [`run`], with the figures of the plan that was applied (empty if none).
pub async fn run_with_stats(store: &Store, job: &MergeJob) -> Result<(Outcome, BTreeMap<String, u64>), MergeError> {
    // First, before anything here is touched: a table whose files a log or
    // manifest names is never this executor's.
    let kind = match job.format {
        Format::Lines => ExecutorKind::Merge,
        Format::Parquet(_) => ExecutorKind::Parquet,
    };
    let entries = store.list(&job.dir).await?;
    refuse_if_not_ours(store, job, kind, &entries, true).await?;
    unlink_planted_meta_links(store, job).await?;
    // Temp files of writes killed mid-way by an earlier crash (fs only).
    for d in [job.dir.clone(), format!("{}{META_DIR}", job.dir), job.staging_dir(job.attempt)] {
        store.sweep_stale_temps(&d).await?;
    }
    let staging = job.staging_dir(job.attempt);
    let mut conflicts = 0;
    loop {
        let latest = commit::settle_latest(store, job, conflicts == 0).await?;
        if let Some(own) = latest.own {
            return Ok((reported(job, &own), own.stats));
        }
        let (seen, left_out) = candidates(store, job, kind, conflicts > 0).await?;
        if left_out > 0 {
            tracing::info!(partition = job.dir, left_out, "files too young or in progress are no inputs this round");
        }
        let files: Vec<(String, u64)> = seen.iter().map(|f| (f.path.clone(), f.len)).collect();
        let staged = match &job.format {
            Format::Lines => lines::stage(store, job, files, &staging).await,
            Format::Parquet(opts) => parquet::stage(store, job, opts, files, &staging).await,
        };
        let staged = match staged {
            Ok(s) => s,
            Err(e) => {
                // Nothing was committed: this attempt's partial outputs are garbage.
                drop_staging(store, &staging).await;
                return Err(e);
            }
        };
        if staged.outputs.is_empty() {
            return Ok((Outcome::NothingToDo, BTreeMap::new()));
        }
        let Staged { outputs, stats, .. } = staged;
        if !job.delay_before_commit.is_zero() {
            // A test knob (a kill must land before the commit): real time.
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(job.delay_before_commit).await;
        }
        if let Some((sched, fence)) = &job.fence {
            if !fence_holds(sched, fence).await? {
                store.delete_all(&staging).await?;
                return Err(job.broken(SUPERSEDED));
            }
        }
        if let Err(e) = recheck(store, job, kind, &seen, &outputs).await {
            drop_staging(store, &staging).await;
            // Inputs gone because another compaction committed meanwhile
            // are that compaction's: plan again from what it left.
            if commit::settle_latest(store, job, false).await?.n == latest.n {
                return Err(e);
            }
            conflict(job, &mut conflicts, latest.n + 1)?;
            continue;
        }
        let plan = Commit {
            task: job.task.clone(),
            round: job.round,
            attempt: job.attempt,
            outputs,
            done: false,
            stats,
            turn: None,
        };
        match commit::commit(store, job, latest.n + 1, plan).await? {
            commit::Decided::Applied(c) => return Ok((reported(job, &c), c.stats)),
            commit::Decided::Conflict => {
                store.delete_all(&staging).await?;
                conflict(job, &mut conflicts, latest.n + 1)?;
            }
        }
    }
}

/// Counts a plan made from files another compaction's commit changed; an
/// error once there were too many.
fn conflict(job: &MergeJob, conflicts: &mut u32, turn: u64) -> Result<(), MergeError> {
    *conflicts += 1;
    if *conflicts > MAX_CONFLICTS {
        return Err(job.broken(format!(
            "{conflicts} other compactions of the partition committed while this one read it; nothing was merged"
        )));
    }
    tracing::info!(partition = job.dir, turn, "another compaction of the partition committed first: planning again");
    Ok(())
}

/// What a run reports for a plan of its round that was applied.
fn reported(job: &MergeJob, c: &Commit) -> Outcome {
    if c.attempt == job.attempt {
        let inputs = c.outputs.iter().map(|o| o.inputs.len()).sum();
        Outcome::Merged { inputs, outputs: c.outputs.len() }
    } else {
        Outcome::RolledForward { by_attempt: c.attempt }
    }
}

async fn drop_staging(store: &Store, staging: &str) {
    if let Err(clean) = store.delete_all(staging).await {
        tracing::warn!(staging, error = %clean, "could not remove the staging of a merge that did not commit");
    }
}

/// The figures every merge reports.
pub(crate) fn stats(
    files_in: u64,
    files_out: u64,
    bytes_in: u64,
    bytes_out: u64,
    rows_in: u64,
    rows_out: u64,
) -> BTreeMap<String, u64> {
    [
        ("files_in", files_in),
        ("files_out", files_out),
        ("bytes_in", bytes_in),
        ("bytes_out", bytes_out),
        ("rows_in", rows_in),
        ("rows_out", rows_out),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests;
