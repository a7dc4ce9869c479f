//! The built-in `iceberg` executor: compacts an Apache Iceberg table
//! (`<db>/<schema>/<table>/` holding `metadata/`) as one `replace`
//! snapshot per task, the way Spark's `rewrite_data_files` does. Readers see
//! the old files or the compacted ones, never both; a writer that commits
//! meanwhile is never lost.
//!
//! A task has one unit per partition (a spec id and partition tuple, named
//! by [`manifest::unit_key`]) holding two or more small data files (or a
//! file most of whose rows deletes remove, [`DELETE_RATIO`]), or one per
//! file group of a partition larger than the group size ([`group`]), and
//! one last unit, the commit (named [`layouts::v2::COMMIT_UNIT`]):
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
pub mod defaults;
pub mod deletes;
pub mod expire;
pub mod group;
pub mod manifest;
pub mod metrics;
pub mod orphans;
pub mod rest;
pub mod rows;
pub mod schema;
pub mod table;
pub mod unit;
pub mod upgraded;

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
    /// The task's sizes (from its parameters), as its planner had them.
    pub sizing: Sizing,
}

impl IcebergJob {
    pub fn new(merge: MergeJob, unit: String, clock: crate::clock::SharedClock) -> IcebergJob {
        let sizing = Sizing {
            task_target: None,
            node_target: merge.target_size,
            group_bytes: group::DEFAULT_GROUP_BYTES,
            delete_files: None,
        };
        IcebergJob { merge, unit, clock, catalog: catalog::Catalog::default(), sizing }
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
    pub(crate) fn unit_index(&self) -> Result<u32, IcebergError> {
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
    /// Position delete files the unit applied that also name files of
    /// other groups of its partition (their paths): spent once the
    /// commit rewrites those too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shared_deletes: BTreeMap<String, Vec<String>>,
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
        manifest::check_list_version(&table, &list)?;
        let mut manifests = vec![];
        for m in &list.manifests {
            manifests.push(manifest::read_manifest(store, &table, m).await?);
        }
        Ok(Head { table, snapshot: Some(snapshot), list: Some(list), manifests })
    }

    /// The live data files (as manifests name them) whose position deletes
    /// and deletion vectors may remove [`DELETE_RATIO`] of their rows or
    /// more, or to which `delete_files` delete files or more apply
    /// (equality deletes included; Spark's `delete-file-threshold`).
    pub fn delete_heavy(&self, delete_files: Option<usize>) -> std::collections::HashSet<String> {
        let mut by_part: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
        // Equality deletes of an unpartitioned spec may apply anywhere.
        let mut global: Vec<&Entry> = vec![];
        for d in self.live().map(|(_, e)| e).filter(|e| e.content != 0) {
            if d.content == 2 && self.table.unpartitioned(d.spec_id) {
                global.push(d);
            } else {
                by_part.entry(manifest::unit_key(d.spec_id, &d.partition)).or_default().push(d);
            }
        }
        let mut out = std::collections::HashSet::new();
        if by_part.is_empty() && global.is_empty() {
            return out;
        }
        for e in self.live().map(|(_, e)| e).filter(|e| e.content == 0 && e.record_count > 0) {
            let key = manifest::unit_key(e.spec_id, &e.partition);
            let local = by_part.get(&key).map(Vec::as_slice).unwrap_or_default();
            let applying: Vec<&&Entry> = local.iter().chain(&global).filter(|d| deletes::applies(self, d, e)).collect();
            let positions: i64 = applying.iter().filter(|d| d.content == 1).map(|d| d.record_count).sum();
            if positions as f64 >= DELETE_RATIO * e.record_count as f64
                || delete_files.is_some_and(|n| applying.len() >= n)
            {
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

/// A live data file of the table's current snapshot as the planner counts
/// it.
pub struct LiveFile {
    /// Its partition's [`manifest::unit_key`].
    pub key: String,
    /// As the manifests name it.
    pub path: String,
    pub size: u64,
    /// Deletes may remove [`DELETE_RATIO`] of its rows: rewritten whatever
    /// its size.
    pub heavy: bool,
}

/// The live data files of the table's current snapshot. A table compactd
/// refuses is an error naming why, as for [`partitions_to_compact`].
pub async fn live_data_files(
    store: &Store,
    cat: &catalog::Catalog,
    dir: &str,
    sizing: &Sizing,
) -> Result<Vec<LiveFile>, IcebergError> {
    let head = Head::load(store, cat, dir).await?;
    live_files(&head, dir, sizing)
}

fn live_files(head: &Head, dir: &str, sizing: &Sizing) -> Result<Vec<LiveFile>, IcebergError> {
    let heavy = head.delete_heavy(sizing.delete_files);
    let mut files = vec![];
    for (_, e) in head.live().filter(|(_, e)| e.content == 0) {
        if !e.file_format.eq_ignore_ascii_case("parquet") {
            return Err(IcebergError::Table {
                table: dir.to_string(),
                problem: format!("{} is {} data: compactd rewrites Parquet only", e.file_path, e.file_format),
            });
        }
        files.push(LiveFile {
            key: manifest::unit_key(e.spec_id, &e.partition),
            path: e.file_path.clone(),
            size: e.file_size.max(0) as u64,
            heavy: heavy.contains(&e.file_path),
        });
    }
    Ok(files)
}

/// The sizes a task plans with: its own target (a policy's
/// `compactd_target_size`), else the table's `write.target-file-size-bytes`,
/// else the node's; its file group size ([`group`]); and how many delete
/// files make a data file due whatever its size
/// ([`DELETE_FILES_PARAM`]; none: only [`DELETE_RATIO`] does).
#[derive(Debug, Clone, Copy)]
pub struct Sizing {
    pub task_target: Option<u64>,
    pub node_target: u64,
    pub group_bytes: u64,
    pub delete_files: Option<usize>,
}

/// The task parameter that makes a data file due once this many delete
/// files apply to it (Spark's `delete-file-threshold`): what compacts a
/// table of large files under a stream of equality deletes (Flink's
/// upserts), whose deleted share compactd cannot know without reading.
pub const DELETE_FILES_PARAM: &str = "iceberg.delete-file-threshold";

impl Sizing {
    /// From the task's parameters (`param`), the node's target size aside.
    pub fn from_params(param: impl Fn(&str) -> Option<String>, node_target: u64) -> Result<Sizing, String> {
        let task_target =
            param(layouts::formats::TARGET_SIZE_PARAM).and_then(|v| layouts::units::parse_target_size(&v).ok());
        let group_bytes = match param(group::GROUP_BYTES_PARAM) {
            Some(v) => layouts::units::parse_size(&v)
                .ok()
                .ok_or_else(|| format!("--param {}={v}: not a size in bytes", group::GROUP_BYTES_PARAM))?,
            None => group::DEFAULT_GROUP_BYTES,
        };
        let delete_files = match param(DELETE_FILES_PARAM) {
            Some(v) => Some(
                v.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--param {DELETE_FILES_PARAM}={v}: not a positive number"))?,
            ),
            None => None,
        };
        Ok(Sizing { task_target, node_target, group_bytes, delete_files })
    }

    /// As a policy's tasks will have them.
    pub fn of_policy(p: &layouts::policies::PolicyDefinition) -> Sizing {
        Sizing {
            task_target: Some(p.target_size),
            node_target: p.target_size,
            group_bytes: p.file_group_size.unwrap_or(group::DEFAULT_GROUP_BYTES),
            delete_files: p.delete_file_threshold.map(|n| n as usize),
        }
    }

    /// The target size of the outputs of `table`.
    pub fn target(&self, table: &Table) -> u64 {
        let own = table
            .properties()
            .get("write.target-file-size-bytes")
            .and_then(|v| layouts::units::parse_target_size(v).ok());
        self.task_target.or(own).unwrap_or(self.node_target)
    }
}

/// The units of a task: per partition of the table's current snapshot
/// with two or more data files under the small threshold of its target
/// size or with deletes of many of their rows (or one such file with
/// deletes), one unit, or one per file group when the files weigh more
/// than the group size ([`group::plan`]). Delete files that apply to them
/// are applied as they are rewritten. A table compactd refuses (see
/// [`table::Table::check_supported`]), or one with data files that are
/// not Parquet, is an error naming why.
pub async fn partitions_to_compact(
    store: &Store,
    cat: &catalog::Catalog,
    dir: &str,
    sizing: &Sizing,
) -> Result<Vec<String>, IcebergError> {
    let head = Head::load(store, cat, dir).await?;
    let files = live_files(&head, dir, sizing)?;
    Ok(due_units(&head, &files, sizing).into_values().flatten().collect())
}

/// Per due partition key, its units ([`group::plan`]).
fn due_units(head: &Head, files: &[LiveFile], sizing: &Sizing) -> BTreeMap<String, Vec<String>> {
    let threshold = super::merge::parquet::small_threshold(sizing.target(&head.table));
    let mut due: BTreeMap<&str, Vec<group::Candidate>> = BTreeMap::new();
    for f in files {
        if f.size < threshold || f.heavy {
            due.entry(&f.key).or_default().push(group::Candidate { path: &f.path, size: f.size, heavy: f.heavy });
        }
    }
    let mut units = BTreeMap::new();
    for (key, candidates) in due {
        if candidates.len() >= 2 || candidates.iter().any(|c| c.heavy) {
            units.insert(key.to_string(), group::plan(key, &candidates, sizing.group_bytes));
        }
    }
    units
}

/// The units of a task that names its partitions (a policy's, or
/// `submit --partition`): each partition split into file groups as
/// [`partitions_to_compact`] would, a name that is a group already (a
/// task planned before) or a partition not due now kept as it is.
pub async fn split_named(
    store: &Store,
    cat: &catalog::Catalog,
    dir: &str,
    sizing: &Sizing,
    named: &[String],
) -> Result<Vec<String>, IcebergError> {
    if named.iter().all(|n| group::parse(n).1.is_some()) {
        return Ok(named.to_vec());
    }
    let head = Head::load(store, cat, dir).await?;
    let files = live_files(&head, dir, sizing)?;
    let due = due_units(&head, &files, sizing);
    let mut out: Vec<String> = vec![];
    for n in named {
        if out.contains(n) {
            continue;
        }
        match due.get(n.as_str()) {
            Some(units) if group::parse(n).1.is_none() && !units.is_empty() => out.extend(units.iter().cloned()),
            _ => out.push(n.clone()),
        }
    }
    Ok(out)
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
