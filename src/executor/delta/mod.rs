//! The built-in `delta` executor: compacts one partition of a Delta Lake
//! table (`<db>/<schema>/<table>/` holding `_delta_log/`) as one table
//! commit, the way Delta's `OPTIMIZE` does. Readers see the old files or the
//! compacted ones, never both; a concurrent writer's append commits before
//! or after the compaction and is never lost.
//!
//! A unit:
//! 1. reads the table's newest snapshot ([`log::load`]) and refuses a
//!    protocol it cannot honour ([`log::Snapshot::check_supported`]);
//! 2. takes the partition's active files under 3/4 of the target size, and
//!    those whose deletion vector deletes over 5 % of their rows
//!    ([`vectors`]), sorted by path, and rewrites them with the `parquet`
//!    executor's rewrite, each input's vector applied, into new files of
//!    the partition's folder, named
//!    `compactd-<task>-r<round>-u<unit hash>-a<attempt>-<k>.parquet`. Until
//!    committed they are invisible to every Delta reader (no version names
//!    them);
//! 3. checks its fence (the subtask still is its node's) and that each of
//!    its outputs still exists (an operator's `vacuum-orphans` may have
//!    removed it: the unit then fails naming it, nothing committed), reads
//!    its clock for the commit's timestamps, then commits
//!    version `v + 1` by creating `_delta_log/<v+1>.json` once (a
//!    conditional put on S3, a rename that refuses an existing target on
//!    fs and HDFS): a `commitInfo` with `operation: OPTIMIZE`, a `remove`
//!    per input and an `add` per output (with statistics read from its
//!    footer, [`stats`]; no vector), all with `dataChange: false` (a
//!    `remove` names its file's vector: files are keyed by path and
//!    vector); a commit landing
//!    on the table's checkpoint interval is followed by a checkpoint
//!    ([`checkpoint`]);
//! 4. if that version is taken, reads the winner: if it removed one of the
//!    unit's inputs (put a new deletion vector on it, too), or changed the
//!    table's metadata or protocol, the unit
//!    is abandoned (its files deleted, the conflict reported); if it is
//!    another attempt's commit of the same round and unit, the round's
//!    compaction happened (reported as such, this attempt's files deleted);
//!    otherwise (a blind append, a compaction of other files) it tries the
//!    next version, as Delta's optimistic concurrency allows.
//!
//! `commitInfo.timestamp` never goes below the timestamp of the commit the
//! unit read, nor of any commit it stepped over (its clock may lag other
//! writers'): Delta's history and timestamp-based time travel assume
//! non-decreasing commit times.
//!
//! A unit killed anywhere leaves the table at its last committed version:
//! before the create nothing references its files (orphans, named by
//! `compactd check --data` and removed only by `compactd vacuum-orphans`,
//! [`orphans`]); after it, the commit is whole. A rerun of a unit whose
//! attempt committed but died before reporting finds its outputs active in
//! the snapshot and reports that commit instead of compacting again.

pub mod audit;
pub mod checkpoint;
pub mod expire;
pub mod log;
pub mod orphans;
pub mod rows;
pub mod stats;
pub mod tracking;
pub mod vectors;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use store::{Created, Store};

use super::merge::parquet;
use super::merge::{Format, MergeJob, SUPERSEDED};
use log::Add;

#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("Delta table {table}: {problem}")]
    Table { table: String, problem: String },
    #[error(transparent)]
    Merge(#[from] super::merge::MergeError),
}

/// How many taken versions a unit steps over before it gives up (each one
/// a concurrent writer's commit that did not conflict).
pub const MAX_COMMIT_TRIES: u32 = 1000;

/// One unit: a partition of a table.
#[derive(Debug, Clone)]
pub struct DeltaJob {
    /// The shared job fields (task, round, attempt, target size, fence, I/O
    /// limit, clock, the outputs' Parquet options) are [`MergeJob`]'s, with
    /// `dir` the table's folder, `<db>/<schema>/<table>/`.
    pub merge: MergeJob,
    /// The unit: a [`log::partition_key`].
    pub partition: String,
    /// Wall time for the commit's timestamps (`commitInfo.timestamp`,
    /// `remove.deletionTimestamp`, `add.modificationTime`), read when the
    /// commit is built, not when the unit started.
    pub clock: crate::clock::SharedClock,
}

/// What a unit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Fewer than two small files in the partition.
    NothingToDo { version: u64 },
    /// Committed `version_after` (read `version_before`).
    Committed { version_before: u64, version_after: u64, retries: u32 },
    /// An earlier attempt of this round had committed `version`.
    AlreadyCommitted { version: u64 },
    /// A concurrent commit removed inputs or changed the table: nothing
    /// committed, the unit's files deleted.
    Abandoned { version_before: u64, conflict_version: u64, why: String },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::NothingToDo { version } => write!(f, "nothing to compact at table version {version}"),
            Outcome::Committed { version_before, version_after, retries } => write!(
                f,
                "committed table version {version_after} (read version {version_before}, {retries} versions taken \
                 by concurrent writers)"
            ),
            Outcome::AlreadyCommitted { version } => {
                write!(f, "an earlier attempt of this round committed table version {version}")
            }
            Outcome::Abandoned { version_before, conflict_version, why } => write!(
                f,
                "abandoned: read version {version_before}, but version {conflict_version} {why}; nothing committed"
            ),
        }
    }
}

impl DeltaJob {
    fn table(&self) -> &str {
        &self.merge.dir
    }

    fn broken(&self, problem: impl Into<String>) -> DeltaError {
        DeltaError::Table { table: self.table().to_string(), problem: problem.into() }
    }

    /// The file-name stem of this unit's outputs in this round (all
    /// attempts). The unit's hash keeps two units' files apart where their
    /// partitions share a folder (tables without partition folders, Spark's
    /// random file prefixes).
    fn round_stem(&self) -> String {
        format!("compactd-{}-r{}-u{:016x}-a", self.merge.task, self.merge.round, fnv64(&self.partition))
    }

    /// Marks this unit's commits, so that a rerun recognises its own
    /// (task, round, attempt and unit).
    fn marker(&self) -> serde_json::Value {
        json!({
            "task": self.merge.task,
            "round": self.merge.round,
            "attempt": self.merge.attempt,
            "unit": self.partition,
        })
    }

    /// The marker with the unit's figures ([`committed_figures`] reads them).
    fn marker_with(&self, stats: &BTreeMap<String, u64>) -> serde_json::Value {
        let mut m = self.marker();
        let figures: serde_json::Map<String, serde_json::Value> =
            COMMITTED_FIGURES.iter().filter_map(|k| stats.get(*k).map(|v| (k.to_string(), json!(v)))).collect();
        m["stats"] = serde_json::Value::Object(figures);
        m
    }
}

/// FNV-1a, 64 bits: a stable hash of a unit name for file names.
fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// What row tracking asks of a unit of the table at `snap`, or why
/// compactd must not write to it: a protocol it cannot honour, or row ids
/// it could not keep.
pub fn writable(snap: &log::Snapshot) -> Result<tracking::Tracking, String> {
    snap.check_supported()?;
    tracking::Tracking::of(snap)
}

/// The active files of each partition that has two or more files under
/// the small threshold of `target_size`: the units of a task, from the
/// table's own log.
pub async fn partitions_to_compact(store: &Store, table: &str, target_size: u64) -> Result<Vec<String>, DeltaError> {
    let snap = log::load(store, table).await?;
    writable(&snap).map_err(|why| DeltaError::Table { table: table.into(), problem: why })?;
    let threshold = parquet::small_threshold(target_size) as i64;
    // Per partition: its small files, and whether one of its files is due
    // for its deletion vector (then it is due alone).
    let mut due: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    let keys = snap.metadata.partition_keys();
    for f in snap.files.values() {
        let (small, vector) = (f.size < threshold, vectors::due(f));
        if small || vector {
            let unit = due.entry(log::partition_key(&keys, &f.partition_values));
            let (n, any) = unit.or_default();
            *n += usize::from(small);
            *any |= vector;
        }
    }
    Ok(due.into_iter().filter(|(_, (n, vector))| *n >= 2 || *vector).map(|(k, _)| k).collect())
}

/// Runs one unit; the outcome and the figures to report (`files_in`,
/// `files_out`, `bytes_in`, `bytes_out`, `rows_in`, `rows_out`,
/// `version_before`, `version_after`, `commit_retries`, `abandoned`).
pub async fn run(store: &Store, job: &DeltaJob) -> Result<(Outcome, BTreeMap<String, u64>), DeltaError> {
    let table = job.table().to_string();
    // Before anything here is touched: a table that also holds another
    // format's metadata (Apache XTable, UniForm) is not this executor's.
    let kind = layouts::formats::ExecutorKind::Delta;
    if let Some(why) = crate::table::format::judge(store, &table, None, None, kind).await? {
        return Err(job.broken(why));
    }
    // Temp files of a create killed mid-way (fs only): a commit linked but
    // not yet unlinked from its temp has two names until then.
    store.sweep_stale_temps(&format!("{table}{}", log::LOG_DIR)).await?;
    let snap = log::load(store, &table).await?;
    let tracking = writable(&snap).map_err(|why| job.broken(why))?;
    let cols = snap.metadata.partition_keys();
    let mine: Vec<&Add> =
        snap.files.values().filter(|f| log::partition_key(&cols, &f.partition_values) == job.partition).collect();
    let mut stats = BTreeMap::from([("version_before".to_string(), snap.version)]);
    // An earlier attempt of this round that committed and died before
    // reporting: its outputs are active now.
    let stem = job.round_stem();
    if mine.iter().any(|f| f.path.rsplit('/').next().is_some_and(|n| n.starts_with(&stem))) {
        let (version, figures) = find_own_commit(store, job, snap.version).await?;
        // The attempt may have died before its checkpoint.
        checkpoint::after_commit(store, &table, version, &snap.metadata, job.merge.now).await;
        stats.extend(figures);
        stats.insert("version_after".into(), version);
        return Ok((Outcome::AlreadyCommitted { version }, stats));
    }
    let threshold = parquet::small_threshold(job.merge.target_size) as i64;
    // The small files, and the files due for their deletion vectors.
    let mut small: Vec<&Add> = mine.into_iter().filter(|f| f.size < threshold || vectors::due(f)).collect();
    small.sort_by(|a, b| a.path.cmp(&b.path));
    // The output's partition values: one per partition column, as the
    // inputs hold them (absent and "" are null). All inputs must agree.
    let values = |f: &Add| -> BTreeMap<String, Option<String>> {
        cols.iter()
            .map(|c| (c.clone(), f.partition_values.get(c).cloned().flatten().filter(|v| !v.is_empty())))
            .collect()
    };
    if let Some(first) = small.first() {
        if let Some(other) = small.iter().find(|f| values(f) != values(first)) {
            return Err(job.broken(format!(
                "{} and {} are in unit {} but their partition values differ; nothing was written",
                first.path, other.path, job.partition
            )));
        }
    }
    if small.len() < 2 && !small.iter().any(|f| vectors::due(f)) {
        stats.insert("version_after".into(), snap.version);
        return Ok((Outcome::NothingToDo { version: snap.version }, stats));
    }
    let mut by_store_path: BTreeMap<String, &Add> = BTreeMap::new();
    let mut inputs = vec![];
    for f in &small {
        let p = log::data_path(&table, &f.path)?;
        inputs.push((p.clone(), f.size.max(0) as u64));
        by_store_path.insert(p, f);
    }
    // Every input's vector is applied, whether or not it made the file due.
    let with_vectors: Vec<(String, &Add)> =
        by_store_path.iter().filter(|(_, f)| f.deletion_vector.is_some()).map(|(p, f)| (p.clone(), *f)).collect();
    let vectors =
        vectors::Vectors::load(store, &table, &with_vectors, &job.merge.io).await.map_err(|e| job.broken(e))?;
    let widening = snap.widens_types();
    let all: Vec<(String, &Add)> = by_store_path.iter().map(|(p, f)| (p.clone(), *f)).collect();
    let materialize = tracking::Materialize::new(&tracking, &all).map_err(|e| job.broken(e))?;
    let fit: Option<std::sync::Arc<dyn parquet::Projection>> =
        (!vectors.is_empty() || widening || materialize.is_some())
            .then(|| std::sync::Arc::new(rows::TableRows { vectors, widening, tracking: materialize }) as _);
    // Outputs go beside the first input, in its folder as the log writes
    // it (already URI-encoded), so that the partition keeps one folder.
    let log_dir = small[0].path.rfind('/').map(|i| small[0].path[..=i].to_string()).unwrap_or_default();
    let store_dir = log::data_path(&table, &log_dir)?;
    store.sweep_stale_temps(&store_dir).await?;
    let name = |k: usize| {
        let file = format!("{}{}-{k}.parquet", job.round_stem(), job.merge.attempt);
        let p = format!("{store_dir}{file}");
        (p.clone(), p)
    };
    let Format::Parquet(options) = &job.merge.format else {
        return Err(job.broken("the delta executor writes Parquet: its job's format must be Parquet"));
    };
    let staged = parquet::rewrite(store, &job.merge, options, inputs, name, fit).await;
    let staged = match staged {
        Ok(s) => s,
        Err(e) => {
            remove_attempt_files(store, job, &store_dir).await;
            return Err(e.into());
        }
    };
    if staged.outputs.is_empty() {
        stats.insert("version_after".into(), snap.version);
        return Ok((Outcome::NothingToDo { version: snap.version }, stats));
    }
    stats.extend(staged.stats.clone());
    if !job.merge.delay_before_commit.is_zero() {
        // A test knob (a kill must land before the commit): real time.
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(job.merge.delay_before_commit).await;
    }
    if let Some((sched, folder)) = &job.merge.fence {
        if !crate::executor::merge::fence_holds(sched, folder).await? {
            remove_attempt_files(store, job, &store_dir).await;
            return Err(job.broken(SUPERSEDED));
        }
    }
    // Right before the commit: an output removed meanwhile (by an operator's
    // `vacuum-orphans`) must not be named by a version.
    for o in &staged.outputs {
        if !store.exists(&o.final_path).await? {
            remove_attempt_files(store, job, &store_dir).await;
            return Err(job.broken(format!(
                "output {} vanished before the commit (removed by `vacuum-orphans`?); nothing committed",
                o.final_path
            )));
        }
    }
    // Not below the read version's own time: this clock may lag its writer's.
    let now_ms = (job.clock.wall_ms() as i64).max(snap.commit_timestamp.unwrap_or(0));
    let removed: BTreeSet<String> =
        staged.outputs.iter().flat_map(|o| o.inputs.iter()).map(|p| log::path_key(&by_store_path[p].path)).collect();
    // Flat string values under Spark's keys: readers of the history
    // (Databricks, Delta Sharing) refuse nested ones.
    let metrics = json!({
        "numRemovedFiles": removed.len().to_string(),
        "numAddedFiles": staged.outputs.len().to_string(),
        "numRemovedBytes": stats.get("bytes_in").copied().unwrap_or(0).to_string(),
        "numAddedBytes": stats.get("bytes_out").copied().unwrap_or(0).to_string(),
    });
    let predicate = if cols.is_empty() { "[]".to_string() } else { format!("[\"{}\"]", job.partition) };
    // One body for every version tried: it names the version read, not the
    // one it lands at.
    let info = json!({"commitInfo": {
            "timestamp": now_ms,
            "operation": "OPTIMIZE",
            "operationParameters": {"predicate": predicate, "targetSize": job.merge.target_size.to_string()},
            "readVersion": snap.version,
            "isolationLevel": "SnapshotIsolation",
            "isBlindAppend": false,
            "operationMetrics": metrics,
            "engineInfo": format!("compactd/{}", env!("CARGO_PKG_VERSION")),
            "compactd": job.marker_with(&stats),
    }});
    let mut lines: Vec<String> = vec![];
    for path in &removed {
        let f = snap.files.get(path).expect("an input is an active file");
        let mut remove = json!({
            "path": f.path,
            "deletionTimestamp": now_ms,
            "dataChange": false,
            "extendedFileMetadata": true,
            "partitionValues": f.partition_values,
            "size": f.size,
            "tags": f.tags,
        });
        // The file's key is its path and its vector: the remove names both.
        if let Some(dv) = &f.deletion_vector {
            remove["deletionVector"] = dv.clone();
        }
        // As its add has them (row tracking).
        if let Some(id) = f.base_row_id {
            remove["baseRowId"] = json!(id);
        }
        if let Some(v) = f.default_row_commit_version {
            remove["defaultRowCommitVersion"] = json!(v);
        }
        lines.push(json!({ "remove": remove }).to_string());
    }
    let first_part_values = values(small[0]);
    let collector = stats::Collector::new(&snap.metadata);
    let mut adds = vec![];
    for ((o, (bytes, rows)), footer) in staged.outputs.iter().zip(&staged.written).zip(&staged.footers) {
        let file = o.final_path.rsplit('/').next().unwrap_or_default();
        let add = json!({
            "path": format!("{log_dir}{file}"),
            "partitionValues": &first_part_values,
            "size": bytes,
            "modificationTime": now_ms,
            "dataChange": false,
            "stats": collector.file_stats(footer),
        });
        adds.push((add, *rows));
    }
    let fresh = tracking.assigns().then(|| tracking::Fresh::after(&snap));
    let body = Body { info, removes: lines, adds, fresh };
    match commit(store, job, snap.version, &removed, body).await {
        Ok(Landed::Committed { version, retries }) => {
            checkpoint::after_commit(store, &table, version, &snap.metadata, job.merge.now).await;
            stats.insert("version_after".into(), version);
            stats.insert("commit_retries".into(), retries as u64);
            Ok((Outcome::Committed { version_before: snap.version, version_after: version, retries }, stats))
        }
        Ok(Landed::OtherAttempt { version }) => {
            remove_attempt_files(store, job, &store_dir).await;
            // As a rerun that finds the round's commit reports it: this
            // attempt's figures are not the commit's.
            stats.retain(|k, _| k == "version_before");
            if let Some(commit) = log::read_commit(store, job.table(), version).await? {
                stats.extend(commit.iter().filter_map(|a| a.commit_info.as_ref()).flat_map(committed_figures));
            }
            stats.insert("version_after".into(), version);
            Ok((Outcome::AlreadyCommitted { version }, stats))
        }
        Ok(Landed::Conflict { version, why }) => {
            remove_attempt_files(store, job, &store_dir).await;
            stats.insert("abandoned".into(), 1);
            stats.insert("version_after".into(), version);
            for k in ["files_out", "bytes_out", "rows_out"] {
                stats.remove(k);
            }
            Ok((Outcome::Abandoned { version_before: snap.version, conflict_version: version, why }, stats))
        }
        Err(e) => {
            // Not committed (or unknown: then the rerun finds the commit by
            // its outputs, which must stay): only a refusal cleans up.
            if matches!(e, DeltaError::Table { .. }) {
                remove_attempt_files(store, job, &store_dir).await;
            }
            Err(e)
        }
    }
}

/// How a unit's commit ended.
#[derive(Debug, PartialEq, Eq)]
enum Landed {
    /// Created `version` after `retries` versions taken by other writers.
    Committed { version: u64, retries: u32 },
    /// `version` was taken by a commit that conflicts with the unit.
    Conflict { version: u64, why: String },
    /// Another attempt of the unit's round committed `version`.
    OtherAttempt { version: u64 },
}

/// A commit's content: its `commitInfo` (first, as the protocol asks of
/// in-commit timestamps and as readers of the history expect), the
/// `remove`s (one per line), and the `add`s with the rows each holds,
/// which get fresh row ids for the version tried where the table tracks
/// rows.
struct Body {
    info: serde_json::Value,
    removes: Vec<String>,
    adds: Vec<(serde_json::Value, u64)>,
    fresh: Option<tracking::Fresh>,
}

impl Body {
    /// The commit file's bytes at `version`.
    fn bytes(&mut self, version: u64) -> bytes::Bytes {
        let mut lines = vec![self.info.to_string()];
        lines.extend(self.removes.iter().cloned());
        if let Some(fresh) = &self.fresh {
            lines.push(fresh.assign(&mut self.adds, version).to_string());
        }
        lines.extend(self.adds.iter().map(|(a, _)| json!({ "add": a }).to_string()));
        lines.join("\n").into()
    }

    /// Takes what a commit that won a version before this one changed:
    /// its timestamp (the body's is not below it) and row tracking's mark.
    fn step_over(&mut self, winner: &[log::Action]) {
        self.not_before(log::commit_timestamp(winner));
        if let Some(fresh) = &mut self.fresh {
            fresh.step_over(winner);
        }
    }

    /// Raises `commitInfo.timestamp` to `at_least` if it is below.
    fn not_before(&mut self, at_least: Option<i64>) {
        let ts = &mut self.info["commitInfo"]["timestamp"];
        if let Some(t) = at_least.filter(|t| ts.as_i64().is_some_and(|ours| ours < *t)) {
            *ts = t.into();
        }
    }
}

/// Creates the first free version after `read_version` holding `body`,
/// stepping over versions other writers took as long as they do not
/// [`conflict`] with the unit (and keeping its timestamp at or above
/// theirs).
async fn commit(
    store: &Store,
    job: &DeltaJob,
    read_version: u64,
    removed: &BTreeSet<String>,
    mut body: Body,
) -> Result<Landed, DeltaError> {
    let table = job.table();
    let mut version = read_version + 1;
    let mut retries = 0u32;
    loop {
        match store.create(&log::commit_path(table, version), body.bytes(version)).await? {
            Created::Created => return Ok(Landed::Committed { version, retries }),
            Created::Exists => {
                let Some(winner) = log::read_commit(store, table, version).await? else {
                    return Err(job.broken(format!("version {version} was taken, then vanished")));
                };
                match whose(&winner, job) {
                    // Our own create whose reply was lost and was retried.
                    Some(Whose::ThisAttempt) => return Ok(Landed::Committed { version, retries }),
                    Some(Whose::OtherAttempt) => return Ok(Landed::OtherAttempt { version }),
                    None => {}
                }
                if let Some(why) = conflict(&winner, removed) {
                    return Ok(Landed::Conflict { version, why });
                }
                body.step_over(&winner);
                retries += 1;
                if retries > MAX_COMMIT_TRIES {
                    return Err(job.broken(format!(
                        "{MAX_COMMIT_TRIES} versions after {read_version} were taken by other writers; nothing \
                         committed"
                    )));
                }
                version += 1;
            }
        }
    }
}

/// Why a commit that won the version a unit wanted conflicts with it, if
/// it does: it removed one of the unit's inputs (a delete, an overwrite,
/// another compaction), or changed the metadata or protocol (the schema or
/// partitioning the rewrite assumed). Appends do not conflict.
fn conflict(winner: &[log::Action], inputs: &BTreeSet<String>) -> Option<String> {
    let added: BTreeSet<String> =
        winner.iter().filter_map(|a| a.add.as_ref()).map(|a| log::path_key(&a.path)).collect();
    for a in winner {
        if let Some(r) = &a.remove {
            let key = log::path_key(&r.path);
            if inputs.contains(&key) && added.contains(&key) {
                // Spark's DELETE, UPDATE and MERGE with deletion vectors:
                // the rewrite would bring those rows back.
                return Some(format!("deleted rows of input {} (a new deletion vector)", r.path));
            }
            if inputs.contains(&key) {
                return Some(format!("removed input {}", r.path));
            }
        }
        if a.meta_data.is_some() {
            return Some("changed the table's metadata".into());
        }
        if a.protocol.is_some() {
            return Some("changed the table's protocol".into());
        }
    }
    None
}

/// A commit of this unit's round, by this attempt or another one.
#[derive(Debug, PartialEq, Eq)]
enum Whose {
    ThisAttempt,
    OtherAttempt,
}

fn whose(commit: &[log::Action], job: &DeltaJob) -> Option<Whose> {
    let mine = job.marker();
    let same_round = |m: &serde_json::Value| ["task", "round", "unit"].iter().all(|k| m.get(k) == mine.get(k));
    let marker = commit.iter().filter_map(|a| a.commit_info.as_ref()).find_map(|c| c.get("compactd"))?;
    match (marker == &mine, same_round(marker)) {
        (true, _) => Some(Whose::ThisAttempt),
        (false, true) => Some(Whose::OtherAttempt),
        (false, false) => None,
    }
}

/// The version an earlier attempt of this unit's round committed: the
/// newest commit, from `newest` down, whose marker names this task, round
/// and unit.
async fn find_own_commit(
    store: &Store,
    job: &DeltaJob,
    newest: u64,
) -> Result<(u64, BTreeMap<String, u64>), DeltaError> {
    let want = (job.merge.task.as_str(), job.merge.round as u64, job.partition.as_str());
    for v in (0..=newest).rev() {
        let Some(commit) = log::read_commit(store, job.table(), v).await? else { break };
        for info in commit.iter().filter_map(|a| a.commit_info.as_ref()) {
            let Some(c) = info.get("compactd") else { continue };
            let got = (
                c.get("task").and_then(|t| t.as_str()).unwrap_or(""),
                c.get("round").and_then(|t| t.as_u64()).unwrap_or(0),
                c.get("unit").and_then(|t| t.as_str()).unwrap_or(""),
            );
            if got == want {
                return Ok((v, committed_figures(info).collect()));
            }
        }
    }
    Err(job.broken("this round's outputs are active but no commit of it was found in the log"))
}

/// What a commit of compactd's says of itself: the version its attempt read
/// (`version_before`) and that attempt's figures, kept in the commit so that
/// a rerun whose predecessor committed and died before reporting reports
/// what the commit did (versions before the figures were kept: the read
/// version alone).
fn committed_figures(info: &serde_json::Value) -> impl Iterator<Item = (String, u64)> + '_ {
    let read = info.get("readVersion").and_then(|v| v.as_u64()).map(|v| ("version_before".to_string(), v));
    let figures = info.pointer("/compactd/stats").and_then(|s| s.as_object()).into_iter().flatten();
    let figures = figures
        .filter(|(k, _)| COMMITTED_FIGURES.contains(&k.as_str()))
        .filter_map(|(k, v)| v.as_u64().map(|v| (k.clone(), v)));
    read.into_iter().chain(figures)
}

/// The figures of a unit kept in its commit ([`committed_figures`]).
const COMMITTED_FIGURES: [&str; 6] = ["files_in", "files_out", "bytes_in", "bytes_out", "rows_in", "rows_out"];

/// Deletes the files this attempt wrote (never committed, so no version
/// names them). Best effort: what is left is an orphan for `vacuum-orphans`.
async fn remove_attempt_files(store: &Store, job: &DeltaJob, dir: &str) {
    let prefix = format!("{}{}-", job.round_stem(), job.merge.attempt);
    match store.list(dir).await {
        Ok(entries) => {
            for e in entries.iter().filter(|e| !e.is_dir && e.name().starts_with(&prefix)) {
                if let Err(err) = store.delete(&e.path).await {
                    tracing::warn!(path = e.path, error = %err, "could not remove a file of an uncommitted attempt");
                }
            }
        }
        Err(err) => tracing::warn!(dir, error = %err, "could not list the partition to clean an uncommitted attempt"),
    }
}

#[cfg(test)]
mod tests;
