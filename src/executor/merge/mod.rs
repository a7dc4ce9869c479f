//! The built-in merge executors' shared protocol: compact one partition
//! folder on the data backend by rewriting its small files into larger ones,
//! crash-safely. Two formats stage outputs: [`Format::Lines`] (concatenates
//! newline-delimited files, [`lines`]) and [`Format::Parquet`] (re-encodes Parquet
//! files, [`parquet`]); everything after staging is common.
//!
//! Crash safety (a SIGKILL at any point, then a rerun, leaves the old files or
//! the merged ones, never both, never neither):
//! 1. Outputs are staged under `<partition>/_compactd/staging/<attempt>/`,
//!    invisible to readers of the partition.
//! 2. The **commit** is one atomic create of
//!    `<partition>/_compactd/commit.<task>.r<round>` holding the plan (inputs,
//!    staged outputs, final names). Exactly one attempt of a round commits;
//!    an attempt that loses the create rolls the winner's plan forward
//!    instead of its own, so a merge is never committed twice.
//! 3. Roll-forward is idempotent: promote each staged output to its final
//!    name if that is missing (fs: a rename; S3: a server-side copy), then
//!    delete the inputs, then mark the commit done and remove the staging. A
//!    crash during roll-forward is finished by the next attempt of the round,
//!    which finds the commit first thing.
//!
//! For [`Format::Lines`] every line of every input is preserved: outputs are
//! the inputs' concatenation in name order, and an input without a final
//! newline gets one so that its last line does not run into the next file's
//! first.

pub mod lines;
pub mod parquet;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use store::{Created, Store};

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

/// Why a merge refused to commit.
pub const SUPERSEDED: &str = "superseded: the subtask was cancelled or given to another node";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    pub staged: String,
    #[serde(rename = "final")]
    pub final_path: String,
    pub inputs: Vec<String>,
}

/// `<partition>/_compactd/commit.<task>.r<round>`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub task: String,
    pub round: u32,
    pub attempt: u32,
    pub outputs: Vec<Output>,
    #[serde(default)]
    pub done: bool,
    /// The plan's figures, so that an attempt that rolls it forward reports
    /// them too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stats: BTreeMap<String, u64>,
}

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
    fn commit_path(&self) -> String {
        format!("{}{META_DIR}commit.{}.r{}", self.dir, self.task, self.round)
    }

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

/// Data files of a partition: regular files directly in the folder, not
/// hidden. Symbolic links, FIFOs, sockets and devices (a data store over fs
/// lists them as [`store::Entry::special`]) are never inputs.
pub(crate) async fn data_files(store: &Store, dir: &str) -> store::Result<Vec<(String, u64)>> {
    let mut out = vec![];
    for e in store.list(dir).await? {
        let name = e.name();
        if e.is_dir || e.special.is_some() || name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        // The listing's size where it has one (S3, fs): no request per file.
        let len = match e.len {
            Some(len) => len,
            None => store.stat(&e.path).await?.map(|m| m.len).unwrap_or(0),
        };
        out.push((e.path, len));
    }
    out.sort();
    Ok(out)
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

/// [`run`], with the figures of the plan that was applied (empty if none).
pub async fn run_with_stats(store: &Store, job: &MergeJob) -> Result<(Outcome, BTreeMap<String, u64>), MergeError> {
    // First, before anything here is touched: a table whose files a log or
    // manifest names is never this executor's.
    let kind = match job.format {
        Format::Lines => layouts::formats::ExecutorKind::Merge,
        Format::Parquet(_) => layouts::formats::ExecutorKind::Parquet,
    };
    let table = parent_dir(&job.dir);
    if let Some(why) = crate::table::format::judge(store, table, None, Some(&job.dir), kind).await? {
        return Err(job.broken(why));
    }
    unlink_planted_meta_links(store, job).await?;
    // Temp files of writes killed mid-way by an earlier crash (fs only).
    for d in [job.dir.clone(), format!("{}{META_DIR}", job.dir), job.staging_dir(job.attempt)] {
        store.sweep_stale_temps(&d).await?;
    }
    if let Some(commit) = read_commit(store, job).await? {
        roll_forward(store, job, &commit).await?;
        return Ok((Outcome::RolledForward { by_attempt: commit.attempt }, commit.stats));
    }
    let staging = job.staging_dir(job.attempt);
    let staged = match &job.format {
        Format::Lines => lines::stage(store, job, &staging).await,
        Format::Parquet(opts) => parquet::stage(store, job, opts, &staging).await,
    };
    let staged = match staged {
        Ok(s) => s,
        Err(e) => {
            // Nothing was committed: this attempt's partial outputs are garbage.
            if let Err(clean) = store.delete_all(&staging).await {
                tracing::warn!(staging, error = %clean, "could not remove the staging of a failed merge");
            }
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
    let commit = Commit { task: job.task.clone(), round: job.round, attempt: job.attempt, outputs, done: false, stats };
    let bytes = serde_json::to_vec_pretty(&commit).expect("commit serializes");
    match store.create(&job.commit_path(), bytes).await? {
        Created::Created => {
            let inputs = commit.outputs.iter().map(|o| o.inputs.len()).sum();
            let n = commit.outputs.len();
            roll_forward(store, job, &commit).await?;
            Ok((Outcome::Merged { inputs, outputs: n }, commit.stats))
        }
        Created::Exists => {
            let winner = read_commit(store, job).await?.ok_or_else(|| job.broken("commit vanished"))?;
            if winner.attempt == job.attempt {
                // Our own create whose reply was lost (an NFS retransmission
                // answered EEXIST): our staging is the plan's, keep it.
                roll_forward(store, job, &winner).await?;
                let inputs = winner.outputs.iter().map(|o| o.inputs.len()).sum();
                return Ok((Outcome::Merged { inputs, outputs: winner.outputs.len() }, winner.stats));
            }
            // Another attempt of this round committed first: apply its plan,
            // drop ours.
            store.delete_all(&staging).await?;
            roll_forward(store, job, &winner).await?;
            Ok((Outcome::RolledForward { by_attempt: winner.attempt }, winner.stats))
        }
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

/// Reads the round's commit. Creates are complete-or-absent, so a commit
/// that does not parse was never acted upon by this version. An older
/// compactd on fs could leave one torn (killed between creating the name and
/// writing it), and it never started a roll-forward from it (that starts only
/// after the create returned): such a commit is moved away once its writer is
/// surely gone, and the round is decided anew. Anything else that does not
/// parse fails the attempt with the path; nothing is touched.
async fn read_commit(store: &Store, job: &MergeJob) -> Result<Option<Commit>, MergeError> {
    let path = job.commit_path();
    let Some(b) = store.read(&path).await? else {
        return Ok(None);
    };
    let e = match serde_json::from_slice::<Commit>(&b) {
        Ok(c) => return validate(job, c).map(Some),
        Err(e) => e,
    };
    use store::fs::{Quarantine, TORN_GRACE};
    match store.quarantine_torn(&path, is_torn_commit, TORN_GRACE, job.now).await? {
        Quarantine::Removed => {
            tracing::warn!(path, "moved a torn merge commit away (left by a crashed older compactd)");
            Ok(None)
        }
        Quarantine::TooYoung { age } => Err(job.broken(format!(
            "{path} does not parse ({e}); it is {}s old: if a crashed older compactd left it, the next attempt \
             after {}s replaces it",
            age.as_secs(),
            TORN_GRACE.as_secs()
        ))),
        Quarantine::NotTorn => match store.read(&path).await? {
            Some(b) => match serde_json::from_slice::<Commit>(&b) {
                Ok(c) => validate(job, c).map(Some),
                Err(e) => Err(job.broken(format!("{path} does not parse: {e}"))),
            },
            None => Ok(None),
        },
    }
}

/// A commit is acted on only if it is one this round could have written:
/// its task and round are the job's, every input and final name is a
/// direct, non-hidden child of the partition, and every staged output lies
/// in a staging folder of this round. Anyone who can write a partition could
/// plant a commit; without this check its roll-forward would copy or delete
/// files elsewhere in the data root.
fn validate(job: &MergeJob, c: Commit) -> Result<Commit, MergeError> {
    let bad = |why: String| Err(job.broken(format!("{} refused: {why}", job.commit_path())));
    if c.task != job.task || c.round != job.round {
        return bad(format!("it names task {} round {}", c.task, c.round));
    }
    let child = |p: &str| {
        p.strip_prefix(job.dir.as_str())
            .is_some_and(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.') && !n.starts_with('_'))
    };
    let staging = format!("{}{META_DIR}staging/{}.r{}.a", job.dir, job.task, job.round);
    for o in &c.outputs {
        if !child(&o.final_path) {
            return bad(format!("output {} is not a file of the partition", o.final_path));
        }
        let in_staging = o.staged.strip_prefix(&staging).and_then(|rest| rest.split_once('/')).is_some_and(|(a, f)| {
            !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) && !f.is_empty() && !f.contains('/')
        });
        if !in_staging {
            return bad(format!("staged output {} is not in this round's staging", o.staged));
        }
        if let Some(i) = o.inputs.iter().find(|i| !child(i)) {
            return bad(format!("input {i} is not a file of the partition"));
        }
    }
    Ok(c)
}

fn is_torn_commit(b: &[u8]) -> bool {
    serde_json::from_slice::<Commit>(b).is_err()
}

async fn roll_forward(store: &Store, job: &MergeJob, commit: &Commit) -> Result<(), MergeError> {
    if !commit.done {
        for o in &commit.outputs {
            // Idempotent: an output promoted before a crash is found at its
            // final name by `promote` itself (no stat first on the common path).
            store.promote(&o.staged, &o.final_path).await.map_err(|e| {
                job.broken(format!(
                    "{} is committed but could not be made visible from {}: {e}",
                    o.final_path, o.staged
                ))
            })?;
        }
        for o in &commit.outputs {
            for input in &o.inputs {
                store.delete(input).await?;
            }
        }
        let done = Commit { done: true, ..commit.clone() };
        store.put(&job.commit_path(), serde_json::to_vec_pretty(&done).expect("commit serializes")).await?;
    }
    // Staging of every attempt of this round is garbage now.
    let prefix = format!("{}.r{}.a", job.task, job.round);
    for e in store.list(&format!("{}{META_DIR}staging/", job.dir)).await? {
        if e.is_dir && e.name().starts_with(&prefix) {
            store.delete_all(&e.path).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(attempt: u32) -> MergeJob {
        MergeJob {
            dir: "db/s/t/p1/".into(),
            task: "aaaaffff.16176931.56000000.0".into(),
            round: 1,
            attempt,
            target_size: 1000,
            delay_before_commit: std::time::Duration::ZERO,
            fence: None,
            now: std::time::UNIX_EPOCH,
            format: Format::Lines,
            io: Default::default(),
        }
    }

    async fn lines(store: &Store, dir: &str) -> Vec<String> {
        let mut all = vec![];
        for (p, _) in data_files(store, dir).await.unwrap() {
            let b = store.read(&p).await.unwrap().unwrap();
            all.extend(String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_string));
        }
        all.sort();
        all
    }

    async fn seed(store: &Store) -> Vec<String> {
        let mut want = vec![];
        for f in 0..10 {
            let mut text = String::new();
            for l in 0..5 {
                let line = format!("file{f}-line{l}");
                text += &line;
                want.push(line);
                if !(f == 3 && l == 4) {
                    text.push('\n'); // file 3 has no final newline
                }
            }
            store.put(&format!("db/s/t/p1/part-{f:03}"), text.into_bytes()).await.unwrap();
        }
        store.put("db/s/t/p1/big", vec![b'x'; 2000]).await.unwrap();
        want.push("x".repeat(2000));
        want.sort();
        want
    }

    #[tokio::test]
    async fn a_torn_commit_of_an_older_version_is_replaced_once_its_writer_is_surely_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
        let want = seed(&store).await;
        let j = job(2);
        // An older compactd created the commit and was killed before writing it.
        let commit = dir.path().join(j.commit_path());
        std::fs::create_dir_all(commit.parent().unwrap()).unwrap();
        std::fs::write(&commit, b"").unwrap();
        let written = std::fs::metadata(&commit).unwrap().modified().unwrap();
        let before = data_files(&store, "db/s/t/p1/").await.unwrap();
        let young = MergeJob { now: written + std::time::Duration::from_secs(5), ..j.clone() };
        let err = run(&store, &young).await.unwrap_err().to_string();
        assert!(err.contains("does not parse") && err.contains(&j.commit_path()), "{err}");
        assert_eq!(data_files(&store, "db/s/t/p1/").await.unwrap(), before, "inputs untouched");
        let old = MergeJob { now: written + std::time::Duration::from_secs(61), ..j.clone() };
        assert!(matches!(run(&store, &old).await.unwrap(), Outcome::Merged { inputs: 10, .. }));
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
        let c: Commit = serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
        assert!(c.done && c.attempt == 2);
    }

    #[tokio::test]
    async fn a_planted_commit_naming_files_outside_the_partition_is_refused() {
        let store = Store::memory().await;
        seed(&store).await;
        store.put("db/s/other/p9/secret", b"other table".to_vec()).await.unwrap();
        let j = job(1);
        let staged = format!("{}{META_DIR}staging/{}.r1.a9/0", j.dir, j.task);
        for (final_path, staged, input) in [
            (format!("{}x", j.dir), staged.clone(), "db/s/other/p9/secret".to_string()),
            ("db/s/other/p9/secret".to_string(), staged.clone(), format!("{}part-000", j.dir)),
            (format!("{}x", j.dir), "db/s/other/p9/secret".to_string(), format!("{}part-000", j.dir)),
        ] {
            let c = Commit {
                task: j.task.clone(),
                round: 1,
                attempt: 9,
                outputs: vec![Output { staged, final_path, inputs: vec![input] }],
                done: false,
                stats: BTreeMap::new(),
            };
            store.put(&j.commit_path(), serde_json::to_vec(&c).unwrap()).await.unwrap();
            let err = run(&store, &j).await.unwrap_err().to_string();
            assert!(err.contains("refused"), "{err}");
            assert_eq!(&store.read("db/s/other/p9/secret").await.unwrap().unwrap()[..], b"other table");
            assert!(store.exists(&format!("{}part-000", j.dir)).await.unwrap(), "an input was deleted");
        }
    }

    #[tokio::test]
    async fn merges_small_files_and_keeps_every_line() {
        let store = Store::memory().await;
        let want = seed(&store).await;
        let out = run(&store, &job(1)).await.unwrap();
        assert!(matches!(out, Outcome::Merged { inputs: 10, .. }), "{out:?}");
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
        let files = data_files(&store, "db/s/t/p1/").await.unwrap();
        assert!(files.len() < 11, "{files:?}");
        assert!(files.iter().any(|f| f.0.ends_with("/big")));
        // a rerun of the round changes nothing
        assert!(matches!(run(&store, &job(2)).await.unwrap(), Outcome::RolledForward { by_attempt: 1 }));
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
        assert!(store.list("db/s/t/p1/_compactd/staging/").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_late_attempt_rolls_the_committed_plan_forward_instead_of_merging_again() {
        let store = Store::memory().await;
        let want = seed(&store).await;
        // attempt 1 committed but crashed before rolling forward
        let j1 = job(1);
        let staging = j1.staging_dir(1);
        let mut buf = vec![];
        let mut inputs = vec![];
        for (p, len) in data_files(&store, "db/s/t/p1/").await.unwrap() {
            if len < 1000 {
                let b = store.read(&p).await.unwrap().unwrap();
                buf.extend_from_slice(&b);
                if !b.ends_with(b"\n") {
                    buf.push(b'\n');
                }
                inputs.push(p);
            }
        }
        store.put(&format!("{staging}0"), buf).await.unwrap();
        let c = Commit {
            task: j1.task.clone(),
            round: 1,
            attempt: 1,
            outputs: vec![Output { staged: format!("{staging}0"), final_path: "db/s/t/p1/compacted-x".into(), inputs }],
            done: false,
            stats: BTreeMap::new(),
        };
        store.create(&j1.commit_path(), serde_json::to_vec(&c).unwrap()).await.unwrap();
        assert_eq!(run(&store, &job(2)).await.unwrap(), Outcome::RolledForward { by_attempt: 1 });
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
        assert_eq!(data_files(&store, "db/s/t/p1/").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn an_attempt_whose_subtask_folder_is_gone_does_not_commit() {
        let store = Store::memory().await;
        let want = seed(&store).await;
        let sched = Store::memory().await;
        let folder = "Compaction_V2/TaskAssigned/n1/x.r1.u0.a1/".to_string();
        let mut j = job(1);
        j.fence = Some((sched.clone(), folder.clone()));
        // folder gone: the manager gave the subtask away
        let err = run(&store, &j).await.unwrap_err().to_string();
        assert!(err.contains("superseded"), "{err}");
        assert!(!store.exists(&j.commit_path()).await.unwrap());
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
        assert!(store.list("db/s/t/p1/_compactd/staging/").await.unwrap().iter().all(|e| !e.name().contains(".a1")));
        // folder present: commits
        sched.put(&format!("{folder}TaskInfo.pc.db"), b"{}".to_vec()).await.unwrap();
        assert!(matches!(run(&store, &j).await.unwrap(), Outcome::Merged { .. }));
        assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    }

    #[tokio::test]
    async fn one_small_file_is_left_alone() {
        let store = Store::memory().await;
        store.put("db/s/t/p1/a", b"1\n".to_vec()).await.unwrap();
        assert_eq!(run(&store, &job(1)).await.unwrap(), Outcome::NothingToDo);
        assert_eq!(run(&Store::memory().await, &job(1)).await.unwrap(), Outcome::NothingToDo);
    }
}
