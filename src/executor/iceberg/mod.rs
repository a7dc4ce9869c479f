//! The built-in `iceberg` executor: compacts an Apache Iceberg table
//! (`<db>/<schema>/<table>/` holding `metadata/`) as one `replace`
//! snapshot per task, the way Spark's `rewrite_data_files` does. Readers see
//! the old files or the compacted ones, never both; a writer that commits
//! meanwhile is never lost.
//!
//! A task has one unit per partition (a spec id and partition tuple, named
//! by [`manifest::unit_key`]) holding two or more small data files (or a
//! file most of whose rows deletes remove, [`DELETE_RATIO`]), and one last
//! unit, the commit (named [`layouts::v2::COMMIT_UNIT`]):
//! 1. a partition unit ([`unit`]) reads the current snapshot, refuses what
//!    compactd does not handle ([`table::Table::check_supported`], data
//!    or delete files that are not Parquet), rewrites the partition's small
//!    files with the `parquet` executor's rewrite into files beside them,
//!    in the table's current schema read by field id ([`schema`]) and
//!    without the rows its delete files remove ([`deletes`], [`rows`]; v3
//!    row lineage kept), named
//!    `compactd-<task>-r<round>-u<unit hash>-a<attempt>-<k>.parquet`
//!    (invisible to readers until a snapshot names them), measures their
//!    metrics from their footers ([`metrics`]) and stages them: a record
//!    in the task's folder of the scheduler tree,
//!    `Scheduler/<task>/Staged/r<round>.u<unit>.a<attempt>`, created once;
//! 2. once every partition unit has ended, the commit unit ([`commit`])
//!    takes the staged record of each unit that succeeded, validates each
//!    against the table's current snapshot as Java's `RewriteFiles` does
//!    (every input still live, no position delete committed in its
//!    partition since the unit read, the same table and format version),
//!    abandons the units that fail it, and writes one snapshot: the
//!    manifests holding inputs or spent delete files rewritten with them
//!    `DELETED`, one manifest of the outputs `ADDED` per spec (with
//!    the data sequence number of the snapshot their unit read), a manifest
//!    list, and the metadata's next version, created once
//!    ([`catalog::commit`]). A lost race reloads the table and starts the
//!    snapshot again from validation.
//!
//! The snapshot's summary carries `compactd.task`, `compactd.round` and
//! `compactd.attempt`: a rerun of the commit unit finds its round's
//! snapshot and reports it instead of committing twice. Nothing is ever
//! deleted from the table but compactd's own uncommitted files: replaced
//! inputs stay until the table's own `expire_snapshots`.
//!
//! A kill anywhere leaves the table at its last version: outputs and
//! manifests of an uncommitted attempt are orphans (named by `compactd
//! check --data`, removed by `compactd vacuum-orphans`); after the create
//! the snapshot is whole.

pub mod avro;
pub mod catalog;
pub mod commit;
pub mod deletes;
pub mod manifest;
pub mod metrics;
pub mod orphans;
pub mod rest;
pub mod rows;
pub mod schema;
pub mod table;
pub mod unit;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use store::Store;

use super::merge::MergeJob;
use manifest::{Entry, Manifest, ManifestList};
use table::Table;

#[derive(Debug, thiserror::Error)]
pub enum IcebergError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("Iceberg table {table}: {problem}")]
    Table { table: String, problem: String },
    #[error(transparent)]
    Merge(#[from] super::merge::MergeError),
}

/// How a commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swap {
    /// This metadata is the table's new version.
    Won,
    /// Another writer took the version first, as the catalog says: the
    /// caller reloads before deleting anything, as a request sent twice is
    /// refused after the first was applied.
    Lost,
    /// The catalog's answer did not say (why): the commit may have been
    /// applied. Nothing it names may be deleted.
    Unknown(String),
}

/// The share of a data file's rows its position deletes and deletion
/// vectors may remove at which it is rewritten whatever its size, its
/// deletes retired (Spark's `delete-ratio-threshold` default). A position
/// delete file that names no single data file counts against each of its
/// partition's files it may apply to: an estimate from above.
pub const DELETE_RATIO: f64 = 0.3;

/// How many versions other writers may take while a commit retries.
pub const MAX_COMMIT_TRIES: u32 = 100;

/// One unit of an `iceberg` task.
#[derive(Debug, Clone)]
pub struct IcebergJob {
    /// The shared job fields, with `dir` the table's folder.
    pub merge: MergeJob,
    /// The unit: a [`manifest::unit_key`], or the commit's
    /// ([`layouts::v2::COMMIT_UNIT`]).
    pub unit: String,
    /// Wall time for the snapshot's timestamp.
    pub clock: crate::clock::SharedClock,
    /// The table's catalog (from the task's parameters).
    pub catalog: catalog::Catalog,
}

impl IcebergJob {
    pub fn new(merge: MergeJob, unit: String, clock: crate::clock::SharedClock) -> IcebergJob {
        IcebergJob { merge, unit, clock, catalog: catalog::Catalog::default() }
    }

    fn table(&self) -> &str {
        &self.merge.dir
    }

    fn broken(&self, problem: impl Into<String>) -> IcebergError {
        IcebergError::Table { table: self.table().to_string(), problem: problem.into() }
    }

    /// The scheduler tree and the task's id, for staging: the fence's
    /// store, the task from `--task`.
    fn tree(&self) -> Result<(&Store, layouts::TaskId), IcebergError> {
        let (tree, _) = self.merge.fence.as_ref().ok_or_else(|| {
            self.broken("an iceberg unit stages its outputs in the scheduler tree: it needs --fence-root/--fence-dir")
        })?;
        let id = layouts::TaskId::parse(&self.merge.task)
            .map_err(|e| self.broken(format!("--task {}: {e}", self.merge.task)))?;
        Ok((tree, id))
    }

    /// The index of this unit in its task, from its fence (a subtask
    /// folder, or a unit of a batch).
    fn unit_index(&self) -> Result<u32, IcebergError> {
        let dir = self.merge.fence.as_ref().map(|(_, d)| d.as_str()).unwrap_or("");
        layouts::v3::fence_unit(dir)
            .map(|(unit, _)| unit)
            .ok_or_else(|| self.broken(format!("--fence-dir {dir} does not name a subtask")))
    }
}

/// What a unit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Fewer than two small files in the partition; or no unit staged
    /// anything to commit.
    NothingToDo,
    /// A partition unit staged `outputs` files for `inputs`.
    Staged { inputs: usize, outputs: usize },
    /// The commit unit committed `snapshot` as metadata version `version`
    /// (`abandoned` units failed validation).
    Committed { version: u64, snapshot: i64, units: usize, abandoned: usize, retries: u32 },
    /// An earlier attempt of this round's commit had committed `snapshot`.
    AlreadyCommitted { snapshot: i64 },
    /// Every staged unit failed validation: nothing committed.
    Abandoned { why: String },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::NothingToDo => write!(f, "nothing to compact"),
            Outcome::Staged { inputs, outputs } => write!(f, "staged {outputs} files replacing {inputs}"),
            Outcome::Committed { version, snapshot, units, abandoned, retries } => write!(
                f,
                "committed snapshot {snapshot} as metadata version {version} ({units} units, {abandoned} abandoned, \
                 {retries} versions taken by concurrent writers)"
            ),
            Outcome::AlreadyCommitted { snapshot } => {
                write!(f, "an earlier attempt of this round committed snapshot {snapshot}")
            }
            Outcome::Abandoned { why } => write!(f, "abandoned: {why}; nothing committed"),
        }
    }
}

/// What a partition unit staged for the commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedUnit {
    pub unit: String,
    pub spec_id: i32,
    pub table_uuid: String,
    pub format_version: u64,
    /// The snapshot the unit read, and its sequence number (the outputs'
    /// data sequence number).
    pub snapshot_read: i64,
    pub sequence_number: i64,
    /// The inputs, as the manifests name them.
    pub inputs: Vec<String>,
    pub outputs: Vec<StagedOutput>,
    pub stats: BTreeMap<String, u64>,
    /// Position delete files the unit applied whose every row names one of
    /// its inputs (or a file gone since): removed with them. Absent in
    /// records of releases that applied no deletes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spent_deletes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedOutput {
    /// As the manifest will name it.
    pub uri: String,
    pub store_path: String,
    pub size: u64,
    pub metrics: metrics::FileMetrics,
}

/// The current snapshot of a table with its manifests read.
pub struct Head {
    pub table: Table,
    pub snapshot: Option<table::Snapshot>,
    pub list: Option<ManifestList>,
    pub manifests: Vec<Manifest>,
}

impl Head {
    pub async fn load(store: &Store, cat: &catalog::Catalog, dir: &str) -> Result<Head, IcebergError> {
        let table = cat.load(store, dir).await?;
        table.check_supported().map_err(|problem| IcebergError::Table { table: dir.to_string(), problem })?;
        let Some(snapshot) = table.current_snapshot() else {
            return Ok(Head { table, snapshot: None, list: None, manifests: vec![] });
        };
        let list = manifest::read_list(store, &table, &snapshot.manifest_list).await?;
        let mut manifests = vec![];
        for m in &list.manifests {
            manifests.push(manifest::read_manifest(store, &table, m).await?);
        }
        Ok(Head { table, snapshot: Some(snapshot), list: Some(list), manifests })
    }

    /// The live data files (as manifests name them) whose position deletes
    /// and deletion vectors may remove [`DELETE_RATIO`] of their rows or
    /// more.
    pub fn delete_heavy(&self) -> std::collections::HashSet<String> {
        let mut by_part: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
        for d in self.live().map(|(_, e)| e).filter(|e| e.content == 1) {
            by_part.entry(manifest::unit_key(d.spec_id, &d.partition)).or_default().push(d);
        }
        let mut out = std::collections::HashSet::new();
        if by_part.is_empty() {
            return out;
        }
        for e in self.live().map(|(_, e)| e).filter(|e| e.content == 0 && e.record_count > 0) {
            let Some(ds) = by_part.get(&manifest::unit_key(e.spec_id, &e.partition)) else { continue };
            let n: i64 = ds.iter().filter(|d| deletes::applies(self, d, e)).map(|d| d.record_count).sum();
            if n as f64 >= DELETE_RATIO * e.record_count as f64 {
                out.insert(e.file_path.clone());
            }
        }
        out
    }

    /// Every live entry, with the index of its manifest.
    pub fn live(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.manifests
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.entries.iter().filter(|e| e.is_live()).map(move |e| (i, e)))
    }
}

/// The live data files of the table's current snapshot as the planner
/// counts them: each one's unit key, size, and whether deletes may remove
/// [`DELETE_RATIO`] of its rows (rewritten whatever its size). A table
/// compactd refuses is an error naming why, as for
/// [`partitions_to_compact`].
pub async fn live_data_files(
    store: &Store,
    cat: &catalog::Catalog,
    dir: &str,
) -> Result<Vec<(String, u64, bool)>, IcebergError> {
    let head = Head::load(store, cat, dir).await?;
    let heavy = head.delete_heavy();
    let mut files = vec![];
    for (_, e) in head.live().filter(|(_, e)| e.content == 0) {
        if !e.file_format.eq_ignore_ascii_case("parquet") {
            return Err(IcebergError::Table {
                table: dir.to_string(),
                problem: format!("{} is {} data: compactd rewrites Parquet only", e.file_path, e.file_format),
            });
        }
        let key = manifest::unit_key(e.spec_id, &e.partition);
        files.push((key, e.file_size.max(0) as u64, heavy.contains(&e.file_path)));
    }
    Ok(files)
}

/// The partitions of the table's current snapshot with two or more data
/// files under the small threshold of `target_size` or deletes of many of
/// their rows, or one such file with deletes: the units of a task (delete
/// files that apply to them are applied as they are rewritten). A
/// table compactd refuses (see [`table::Table::check_supported`]), or one
/// with data files that are not Parquet, is an error naming why.
pub async fn partitions_to_compact(
    store: &Store,
    cat: &catalog::Catalog,
    dir: &str,
    target_size: u64,
) -> Result<Vec<String>, IcebergError> {
    let files = live_data_files(store, cat, dir).await?;
    let threshold = super::merge::parquet::small_threshold(target_size);
    // Per partition: files to rewrite, and whether one has many deletes.
    let mut due: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    for (key, size, heavy) in files {
        if size < threshold || heavy {
            let d = due.entry(key).or_default();
            d.0 += 1;
            d.1 |= heavy;
        }
    }
    Ok(due.into_iter().filter(|(_, (n, heavy))| *n >= 2 || *heavy).map(|(key, _)| key).collect())
}

/// Runs one unit: a partition's rewrite, or the task's commit; the
/// outcome and the figures to report.
pub async fn run(store: &Store, job: &IcebergJob) -> Result<(Outcome, BTreeMap<String, u64>), IcebergError> {
    // Before anything here is touched: a table that also holds another
    // format's metadata is not this executor's.
    let table = job.table().to_string();
    let kind = layouts::formats::ExecutorKind::Iceberg;
    if let Some(why) = crate::table::format::judge(store, &table, None, None, kind).await? {
        return Err(job.broken(why));
    }
    if job.unit == layouts::v2::COMMIT_UNIT {
        commit::run(store, job).await
    } else {
        unit::run(store, job).await
    }
}
