//! Reading a Delta table's log (`<table>/_delta_log/`): the snapshot at its
//! newest version (the newest complete checkpoint, then every JSON commit
//! after it, in order) and single commits, for the conflict check.
//!
//! Invariants:
//! - Every read goes through the data [`Store`]; a log that is not a
//!   contiguous run of versions (from 0, or from a checkpoint) is an error
//!   naming the missing version, never a guess.
//! - A checkpoint is used only whole: candidates are kept per (version,
//!   number of parts), so a complete single-file checkpoint is used beside
//!   an incomplete multi-part one of the same version. Hidden files (`.`
//!   first: Hadoop's `.crc` checksums, temp files) are not log content.
//! - A commit larger than [`MAX_LOG_FILE`] is refused unread (one hostile
//!   file must not exhaust the executor's memory). The snapshot's replay
//!   reads a commit [`CHUNK`] bytes at a time and applies each line as it
//!   is parsed ([`for_each_line`]); a checkpoint is read a row group at a
//!   time ([`super::checkpoint::read::rows`]). A bulk load's commit of
//!   hundreds of megabytes is never whole in memory, parsed or not.
//! - The snapshot keeps only what compaction needs: the protocol, the
//!   metadata, and the active files with what their remove actions must
//!   repeat (not their statistics). Partition values are shared between
//!   the files of a partition (a table has few partitions and many files).
//!   Of the domain metadata only row tracking's high-water mark is kept;
//!   other actions (`txn`, `cdc`, …) are skipped: they do not change which
//!   files are active.
//! - [`Snapshot::check_supported`] refuses tables whose protocol asks a
//!   writer for something compactd does not do (a table feature it does
//!   not know): compacting them naively could corrupt them.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use store::Store;

use super::checkpoint::read::{rows as checkpoint_rows, Columns};
use super::DeltaError;

mod paths;
pub use paths::{data_path, partition_key, path_key, WHOLE_TABLE};

/// The log folder, relative to the table's folder.
pub const LOG_DIR: &str = "_delta_log/";

/// A commit file larger than this is refused unread.
pub const MAX_LOG_FILE: u64 = 512 << 20;

/// The replay's read size: a line longer than this is carried over into
/// the next read (and so may cost its own length once more).
pub const CHUNK: u64 = 8 << 20;

/// A file's partition values, shared by every file of its partition.
pub type PartitionValues = Arc<BTreeMap<String, Option<String>>>;

/// Writer features compactd's OPTIMIZE commit honours: each either does not
/// constrain a rewrite with `dataChange: false` (the rows are the ones
/// already committed) or only constrains appends.
const WRITER_FEATURES: &[&str] = &[
    "appendOnly",
    "invariants",
    "checkConstraints",
    "changeDataFeed",
    "generatedColumns",
    "identityColumns",
    "timestampNtz",
    // Applied while rewriting: the outputs hold no deleted row and carry
    // no vector; each `remove` names the vector it retires.
    "deletionVectors",
    // Files of a column's narrower and wider types compact together into
    // the wider; the schema (and its type changes) is left as it is.
    "typeWidening",
    "typeWidening-preview",
    // Outputs keep the inputs' physical column names and field ids; the
    // statistics and partition values are keyed by physical names.
    "columnMapping",
    // A commit of compactd's writes no domain metadata, and its checkpoint
    // writer makes no checkpoint of a log holding some.
    "domainMetadata",
    // Liquid clustering: compactd's outputs are unclustered files (no
    // `clusteringProvider` tag), which the protocol allows; Spark's
    // `OPTIMIZE` clusters them again.
    "clustering",
    // Outputs get fresh row ids above the high-water mark, which the
    // commit raises; where tracking is enabled, the rows keep their ids and
    // commit versions, materialized into the columns the table names
    // ([`super::tracking`]).
    "rowTracking",
];
/// Reader features whose files compactd copies faithfully (a rewrite keeps
/// the Parquet types as they are) or reads as the protocol says.
const READER_FEATURES: &[&str] =
    &["timestampNtz", "deletionVectors", "typeWidening", "typeWidening-preview", "columnMapping"];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: i32,
    pub min_writer_version: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_features: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_features: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default, deserialize_with = "null_default")]
    pub id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub partition_columns: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub configuration: BTreeMap<String, Option<String>>,
    /// The table's schema, as Delta serializes it (JSON).
    #[serde(default, deserialize_with = "null_default")]
    pub schema_string: String,
}

/// The field metadata key of a column's name in data files where the table
/// maps columns (PROTOCOL.md "Column Mapping").
pub const PHYSICAL_NAME: &str = "delta.columnMapping.physicalName";

impl Metadata {
    /// Whether data files name columns by their physical names
    /// (`delta.columnMapping.mode` `name` or `id`) rather than the schema's.
    pub fn maps_columns(&self) -> bool {
        let mode = self.configuration.get("delta.columnMapping.mode").cloned().flatten();
        mode.is_some_and(|m| m == "name" || m == "id")
    }

    /// The keys of an `add`'s partition values, one per partition column:
    /// the columns' physical names where the table maps columns, else
    /// their names. Also what a unit's name is made of.
    pub fn partition_keys(&self) -> Vec<String> {
        if !self.maps_columns() {
            return self.partition_columns.clone();
        }
        let schema: serde_json::Value = serde_json::from_str(&self.schema_string).unwrap_or_default();
        let fields = schema.get("fields").and_then(|f| f.as_array()).cloned().unwrap_or_default();
        self.partition_columns
            .iter()
            .map(|c| {
                let field = fields.iter().find(|f| f.get("name").and_then(|n| n.as_str()) == Some(c));
                let physical = field.and_then(|f| f.pointer(&format!("/metadata/{PHYSICAL_NAME}")));
                physical.and_then(|p| p.as_str()).unwrap_or(c).to_string()
            })
            .collect()
    }
}

/// A field that is absent or null (checkpoint rows carry explicit nulls)
/// is its default.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// An active data file, with what a `remove` of it repeats (not its
/// `stats`: a snapshot holds every active file, and only a checkpoint, which
/// reads the log itself, needs them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// As written in the log: a URI-encoded path relative to the table.
    pub path: String,
    #[serde(default, deserialize_with = "null_default")]
    pub partition_values: PartitionValues,
    pub size: i64,
    #[serde(default, deserialize_with = "null_default")]
    pub modification_time: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<serde_json::Value>,
    /// `numRecords` of its statistics, where they have it: how many of its
    /// rows a deletion vector deletes decides whether it is due.
    #[serde(default, rename = "stats", deserialize_with = "num_records", skip_serializing)]
    pub num_records: Option<i64>,
    /// Row tracking: the row id of its first row where no materialized one
    /// overrides it (each next row's is one more), and the version its rows
    /// were committed at where none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_row_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_row_commit_version: Option<i64>,
}

impl Add {
    /// The file's key in a snapshot's reconciliation: its path and the
    /// unique id of its deletion vector (a commit may remove a file with
    /// one vector and add it back with another).
    pub fn dv_id(&self) -> Option<String> {
        self.deletion_vector.as_ref().and_then(dv_unique_id)
    }
}

/// A deletion vector descriptor's unique id (PROTOCOL.md "Deletion
/// Vectors"): its storage type and path or inline bytes, then `@offset`
/// where it has one.
pub fn dv_unique_id(dv: &serde_json::Value) -> Option<String> {
    let kind = dv.get("storageType")?.as_str()?;
    let path = dv.get("pathOrInlineDv")?.as_str()?;
    Some(match dv.get("offset").and_then(serde_json::Value::as_i64) {
        Some(offset) => format!("{kind}{path}@{offset}"),
        None => format!("{kind}{path}"),
    })
}

/// `numRecords` of an `add`'s statistics (a JSON string). Writers put it
/// first, where it is read without parsing the rest; otherwise the string
/// is parsed.
fn num_records<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let Some(stats) = Option::<std::borrow::Cow<'de, str>>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(rest) = stats.strip_prefix("{\"numRecords\":") {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with([',', '}']) {
            return Ok(rest[..digits].parse().ok());
        }
    }
    #[derive(Deserialize)]
    struct Count {
        #[serde(rename = "numRecords")]
        n: Option<i64>,
    }
    Ok(serde_json::from_str::<Count>(&stats).ok().and_then(|c| c.n))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    pub path: String,
    #[serde(default)]
    pub deletion_vector: Option<serde_json::Value>,
    /// When the file stopped being active (ms since the epoch): retention
    /// counts from it.
    #[serde(default)]
    pub deletion_timestamp: Option<i64>,
}

/// A file a retained version may still read although the newest does not:
/// a `remove` not undone by a later `add` of the same file and vector.
#[derive(Debug, Clone)]
pub struct Tombstone {
    pub path: String,
    pub deletion_vector: Option<serde_json::Value>,
    pub deletion_timestamp: Option<i64>,
    /// The version whose commit removed it (for a checkpoint's tombstone,
    /// the checkpoint's version: no earlier than the real one).
    pub version: u64,
}

/// A `domainMetadata` action: a named domain's configuration (a JSON
/// string), or its removal.
#[derive(Debug, Clone, Deserialize)]
pub struct DomainMetadata {
    pub domain: String,
    #[serde(default, deserialize_with = "null_default")]
    pub configuration: String,
    #[serde(default, deserialize_with = "null_default")]
    pub removed: bool,
}

/// The domain where row tracking keeps its high-water mark.
pub const ROW_TRACKING_DOMAIN: &str = "delta.rowTracking";

impl DomainMetadata {
    /// The row-id high-water mark this action sets, if it is row
    /// tracking's.
    pub fn row_id_high_water(&self) -> Option<i64> {
        if self.domain != ROW_TRACKING_DOMAIN || self.removed {
            return None;
        }
        let config: serde_json::Value = serde_json::from_str(&self.configuration).ok()?;
        config.get("rowIdHighWaterMark")?.as_i64()
    }
}

/// One line of a commit (or one row of a checkpoint): at most one action.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    pub add: Option<Add>,
    pub remove: Option<Remove>,
    pub meta_data: Option<Metadata>,
    pub protocol: Option<Protocol>,
    pub commit_info: Option<serde_json::Value>,
    pub domain_metadata: Option<DomainMetadata>,
    /// A change data file (`_change_data/`): read by the change feed of
    /// its version only.
    pub cdc: Option<Cdc>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Cdc {
    pub path: String,
}

/// The table at one version.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub version: u64,
    pub protocol: Protocol,
    pub metadata: Metadata,
    /// Active files by [`path_key`] of their log path.
    pub files: BTreeMap<String, Add>,
    /// Backend requests the load made (listings and reads), for callers
    /// that budget them.
    pub reads: u64,
    /// `commitInfo.timestamp` of the commit of [`Snapshot::version`], when
    /// that version was read from a commit that has one.
    pub commit_timestamp: Option<i64>,
    /// Row tracking's high-water mark: the highest row id assigned so far
    /// (`None`: none assigned).
    pub row_id_high_water: Option<i64>,
    /// The tombstones by file and vector key, when the load was asked to
    /// keep them ([`load_with_tombstones`]).
    pub tombstones: Option<BTreeMap<(String, Option<String>), Tombstone>>,
    /// The distinct partition values met, each allocated once.
    partitions: HashSet<PartitionValues>,
}

/// `_delta_log/<version>.json`, zero-padded to 20 digits.
pub fn commit_path(table: &str, version: u64) -> String {
    format!("{table}{LOG_DIR}{version:020}.json")
}

/// A log file name, classified.
pub(super) enum LogFile {
    Commit(u64),
    /// A checkpoint of `version`: part `part` of `parts` (1 of 1 for a
    /// single-file checkpoint).
    Checkpoint {
        version: u64,
        part: u32,
        parts: u32,
    },
    Other,
}

pub(super) fn classify(name: &str) -> LogFile {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(v) = name.strip_suffix(".json").filter(|v| digits(v, 20)) {
        return v.parse().map(LogFile::Commit).unwrap_or(LogFile::Other);
    }
    let Some(rest) = name.strip_suffix(".parquet") else {
        return LogFile::Other;
    };
    let mut it = rest.split('.');
    match (it.next(), it.next(), it.next(), it.next(), it.next()) {
        (Some(v), Some("checkpoint"), None, None, None) if digits(v, 20) => {
            LogFile::Checkpoint { version: v.parse().unwrap_or(0), part: 1, parts: 1 }
        }
        (Some(v), Some("checkpoint"), Some(p), Some(n), None) if digits(v, 20) && digits(p, 10) && digits(n, 10) => {
            match (v.parse(), p.parse(), n.parse()) {
                (Ok(version), Ok(part), Ok(parts)) if (1..=parts).contains(&part) => {
                    LogFile::Checkpoint { version, part, parts }
                }
                _ => LogFile::Other,
            }
        }
        _ => LogFile::Other,
    }
}

/// Parses a commit's lines. A line that is not an action fails the read
/// with the path and line number: a commit is written once and whole.
pub fn parse_commit(path: &str, bytes: &[u8]) -> Result<Vec<Action>, DeltaError> {
    let mut out = vec![];
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if let Some(a) = parse_line(path, i + 1, line)? {
            out.push(a);
        }
    }
    Ok(out)
}

/// Parses line `number` of the log file at `path`: `None` for a blank line.
pub fn parse_line(path: &str, number: usize, line: &[u8]) -> Result<Option<Action>, DeltaError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(line).map(Some).map_err(|e| DeltaError::Table {
        table: path.to_string(),
        problem: format!("line {number}: not a Delta action: {e}"),
    })
}

/// Calls `each` with every line of the log file at `path` (`len`: its
/// size, if listed) and its number (from 1), reading [`CHUNK`] bytes at a
/// time; `false` if there is no such file. A file over [`MAX_LOG_FILE`]
/// is refused unread.
pub async fn for_each_line(
    store: &Store,
    path: &str,
    len: Option<u64>,
    mut each: impl FnMut(usize, &[u8]) -> Result<(), DeltaError>,
) -> Result<bool, DeltaError> {
    let len = match len {
        Some(l) => l,
        None => match store.stat(path).await? {
            Some(m) => m.len,
            None => return Ok(false),
        },
    };
    if len > MAX_LOG_FILE {
        return Err(DeltaError::Table {
            table: path.to_string(),
            problem: format!("{len} bytes, over the {MAX_LOG_FILE}-byte limit for a Delta log file; refused unread"),
        });
    }
    let (mut offset, mut carry, mut number) = (0u64, Vec::<u8>::new(), 0usize);
    while offset < len {
        let Some(chunk) = store.read_range(path, offset, CHUNK.min(len - offset)).await? else {
            return if offset == 0 { Ok(false) } else { Err(changed(path, "vanished while it was read")) };
        };
        if chunk.is_empty() {
            return Err(changed(path, "shorter than listed while it was read"));
        }
        offset += chunk.len() as u64;
        let mut rest: &[u8] = &chunk;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            number += 1;
            if carry.is_empty() {
                each(number, &rest[..nl])?;
            } else {
                carry.extend_from_slice(&rest[..nl]);
                each(number, &carry)?;
                carry = Vec::new();
            }
            rest = &rest[nl + 1..];
        }
        carry.extend_from_slice(rest);
    }
    if !carry.is_empty() {
        each(number + 1, &carry)?;
    }
    Ok(true)
}

fn changed(path: &str, what: &str) -> DeltaError {
    DeltaError::Table {
        table: path.to_string(),
        problem: format!("{what}: a log file is written once, so its table is not what the log says"),
    }
}

/// Reads the commit of `version`; `None` if there is none.
pub async fn read_commit(store: &Store, table: &str, version: u64) -> Result<Option<Vec<Action>>, DeltaError> {
    read_commit_file(store, &commit_path(table, version), None).await
}

/// Reads the commit at `path` (`len`: its size, if listed).
/// Its actions are parsed as read ([`for_each_line`]): without their
/// statistics, they are a fraction of the file's size.
pub async fn read_commit_file(store: &Store, path: &str, len: Option<u64>) -> Result<Option<Vec<Action>>, DeltaError> {
    let mut out = vec![];
    let found = for_each_line(store, path, len, |number, line| {
        out.extend(parse_line(path, number, line)?);
        Ok(())
    })
    .await?;
    Ok(found.then_some(out))
}

/// Reads the checkpoint (or checkpoint part) at `path`.
pub async fn read_checkpoint_file(
    store: &Store,
    path: &str,
    len: Option<u64>,
) -> Result<Option<Vec<Action>>, DeltaError> {
    let Some(rows) = checkpoint_rows(store, path, len, Columns::State).await? else {
        return Ok(None);
    };
    let batches: Vec<Vec<u8>> = rows.try_collect().await?;
    let mut out = vec![];
    for lines in batches {
        out.extend(parse_commit(path, &lines)?);
    }
    Ok(Some(out))
}

/// A snapshot of this many files or more gives its memory back to the
/// system when dropped.
const LARGE: usize = 10_000;

impl Drop for Snapshot {
    /// A large log's snapshot is many small allocations, which glibc keeps
    /// in its arenas once freed: a daemon that planned one big table would
    /// hold that memory for good. Trimming costs a walk of the heap, far
    /// less than the replay that filled it.
    fn drop(&mut self) {
        if self.files.len() >= LARGE {
            drop(std::mem::take(&mut self.files));
            self.partitions.clear();
            self.partitions.shrink_to_fit();
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: malloc_trim only returns free memory to the system.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

impl Snapshot {
    pub(super) fn apply(&mut self, actions: Vec<Action>) {
        for a in actions {
            self.apply_one(a);
        }
    }

    pub(super) fn apply_one(&mut self, a: Action) {
        if let Some(p) = a.protocol {
            self.protocol = p;
        }
        if let Some(m) = a.meta_data {
            self.metadata = m;
        }
        if let Some(d) = a.domain_metadata {
            if d.domain == ROW_TRACKING_DOMAIN {
                self.row_id_high_water = d.row_id_high_water();
            }
        }
        if let Some(r) = a.remove {
            // Only the file with the vector it names: a commit that puts a
            // new vector on a file removes it with its old one and adds it
            // back, in either order.
            let key = path_key(&r.path);
            let dv = r.deletion_vector.as_ref().and_then(dv_unique_id);
            if self.files.get(&key).is_some_and(|f| f.dv_id() == dv) {
                self.files.remove(&key);
            }
            if let Some(t) = &mut self.tombstones {
                let Remove { path, deletion_vector, deletion_timestamp } = r;
                let version = self.version;
                t.insert((key, dv), Tombstone { path, deletion_vector, deletion_timestamp, version });
            }
        }
        if let Some(mut add) = a.add {
            if let Some(t) = &mut self.tombstones {
                t.remove(&(path_key(&add.path), add.dv_id()));
            }
            match self.partitions.get(&add.partition_values) {
                Some(shared) => add.partition_values = shared.clone(),
                None => {
                    self.partitions.insert(add.partition_values.clone());
                }
            }
            self.files.insert(path_key(&add.path), add);
        }
    }

    /// Whether the table's columns' types may have widened: files may hold
    /// a column in a narrower type than the schema's.
    pub fn widens_types(&self) -> bool {
        let has = |f: &Option<Vec<String>>| f.iter().flatten().any(|f| f.starts_with("typeWidening"));
        has(&self.protocol.writer_features) || has(&self.protocol.reader_features)
    }

    /// Why compactd must not write to this table, if it must not.
    pub fn check_supported(&self) -> Result<(), String> {
        let p = &self.protocol;
        if p.min_reader_version > 3 || p.min_writer_version > 7 {
            return Err(format!(
                "its protocol (reader {}, writer {}) is newer than compactd knows",
                p.min_reader_version, p.min_writer_version
            ));
        }
        let unknown = |have: &Option<Vec<String>>, known: &[&str]| -> Vec<String> {
            have.iter().flatten().filter(|f| !known.contains(&f.as_str())).cloned().collect()
        };
        let r = unknown(&p.reader_features, READER_FEATURES);
        let w = unknown(&p.writer_features, WRITER_FEATURES);
        let mut features: BTreeSet<String> = r.into_iter().collect();
        features.extend(w);
        if !features.is_empty() {
            return Err(format!(
                "it uses table features compactd does not support as a writer: {}",
                features.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(())
    }
}

/// A listed log file: its path and size (where the listing carries it).
pub type Listed = (String, Option<u64>);

/// The listed parts of one checkpoint: part number -> path and size.
pub type Parts = BTreeMap<u32, Listed>;

/// What a listing of `_delta_log/` holds, classified.
#[derive(Debug, Default)]
pub struct LogListing {
    /// Commits: version -> path and size.
    pub commits: BTreeMap<u64, Listed>,
    /// Classic checkpoints, complete or not, by (version, number of parts):
    /// a version may have several (a single file and a multi-part set, or
    /// two multi-part sets of different sizes), and "readers must ignore
    /// multi-part checkpoints with missing parts", not the whole version.
    pub checkpoints: BTreeMap<(u64, u32), Parts>,
    /// Log content this reader does not read (folders inside the log, V2
    /// checkpoints and their sidecars): files it names are unknown to
    /// compactd.
    pub unread: Vec<String>,
    /// Listing requests made (an estimate: one per 1,000 entries).
    pub requests: u64,
}

impl LogListing {
    /// A complete checkpoint of `version` (its parts in order), preferring
    /// the one with fewest parts.
    pub fn complete_checkpoint(&self, version: u64) -> Option<Vec<Listed>> {
        self.checkpoints
            .range((version, 0)..=(version, u32::MAX))
            .find(|((_, parts), have)| have.len() as u32 == *parts && have.keys().copied().eq(1..=*parts))
            .map(|(_, have)| have.values().cloned().collect())
    }

    /// The newest version at or below `at_most` with a complete checkpoint.
    pub fn newest_complete_checkpoint(&self, at_most: u64) -> Option<(u64, Vec<Listed>)> {
        let versions: BTreeSet<u64> = self.checkpoints.keys().map(|(v, _)| *v).filter(|v| *v <= at_most).collect();
        versions.into_iter().rev().find_map(|v| self.complete_checkpoint(v).map(|parts| (v, parts)))
    }
}

/// True for a name Hadoop-style file systems hide (`.` first): checksums
/// (`.00000000000000000010.checkpoint.parquet.crc`, `.N.json.crc`), temp
/// files of a commit being written. No Delta reader reads them.
fn hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Lists and classifies `<table>/_delta_log/` (from just after `after`, a
/// path in it, where the backend lists from a key). Hidden files (and
/// hidden folders) are skipped.
pub async fn list_log(store: &Store, table: &str, after: Option<&str>) -> Result<LogListing, DeltaError> {
    let log = format!("{table}{LOG_DIR}");
    let entries: Vec<store::Entry> = store.list_stream_after(&log, after).try_collect().await?;
    let mut out = LogListing { requests: 1 + entries.len() as u64 / 1000, ..LogListing::default() };
    for e in &entries {
        let Some(rel) = e.path.strip_prefix(log.as_str()) else { continue };
        if e.is_dir || rel.split('/').any(hidden) {
            continue;
        }
        if rel.contains('/') {
            out.unread.push(e.path.clone());
            continue;
        }
        match classify(rel) {
            LogFile::Commit(v) => {
                out.commits.insert(v, (e.path.clone(), e.len));
            }
            LogFile::Checkpoint { version, part, parts } => {
                out.checkpoints.entry((version, parts)).or_default().insert(part, (e.path.clone(), e.len));
            }
            LogFile::Other if rel.contains(".checkpoint.") => out.unread.push(e.path.clone()),
            LogFile::Other => {}
        }
    }
    Ok(out)
}

/// What `_delta_log/_last_checkpoint` says.
#[derive(Debug, Deserialize)]
struct LastCheckpoint {
    version: u64,
}

/// The table at its newest version.
pub async fn load(store: &Store, table: &str) -> Result<Snapshot, DeltaError> {
    load_keeping(store, table, false).await
}

/// The table at its newest version, with its tombstones
/// ([`Snapshot::tombstones`]): what retention must not delete.
pub async fn load_with_tombstones(store: &Store, table: &str) -> Result<Snapshot, DeltaError> {
    load_keeping(store, table, true).await
}

async fn load_keeping(store: &Store, table: &str, tombstones: bool) -> Result<Snapshot, DeltaError> {
    let log = format!("{table}{LOG_DIR}");
    // A hint only: a missing or unreadable one means listing the whole log.
    let hint = match store.read(&format!("{log}_last_checkpoint")).await {
        Ok(Some(b)) => serde_json::from_slice::<LastCheckpoint>(&b).ok().map(|c| c.version),
        _ => None,
    };
    match load_from(store, table, hint, tombstones).await {
        // A hint naming a checkpoint that is not there whole (cleaned up,
        // or being written): the whole log decides, as Spark and delta-rs do.
        Err(LoadError::BadHint) => match load_from(store, table, None, tombstones).await {
            Ok(s) => Ok(s),
            Err(LoadError::Delta(e)) => Err(e),
            Err(LoadError::BadHint) => unreachable!("no hint given"),
        },
        Ok(s) => Ok(s),
        Err(LoadError::Delta(e)) => Err(e),
    }
}

enum LoadError {
    BadHint,
    Delta(DeltaError),
}

impl From<DeltaError> for LoadError {
    fn from(e: DeltaError) -> Self {
        LoadError::Delta(e)
    }
}

impl From<store::StoreError> for LoadError {
    fn from(e: store::StoreError) -> Self {
        LoadError::Delta(e.into())
    }
}

async fn load_from(store: &Store, table: &str, hint: Option<u64>, tombstones: bool) -> Result<Snapshot, LoadError> {
    let log = format!("{table}{LOG_DIR}");
    let bad = |problem: String| LoadError::Delta(DeltaError::Table { table: table.to_string(), problem });
    let after = hint.map(|v| format!("{log}{v:020}"));
    let listing = list_log(store, table, after.as_deref()).await?;
    let Some(&newest) = listing.commits.keys().next_back() else {
        if hint.is_some() {
            return Err(LoadError::BadHint);
        }
        return Err(bad("no _delta_log/ commits: not a Delta table (or the wrong --data)".into()));
    };
    let checkpoint = listing.newest_complete_checkpoint(newest);
    let mut snap = Snapshot::default();
    snap.tombstones = tombstones.then(BTreeMap::new);
    snap.reads = 1 + listing.requests;
    let first = match &checkpoint {
        Some((v, parts)) => {
            // Set first: a tombstone records the version that removed it.
            snap.version = *v;
            for (path, len) in parts {
                // A row group at a time: a checkpoint can be larger than memory.
                let rows = checkpoint_rows(store, path, *len, Columns::State).await?;
                let mut rows = rows.ok_or_else(|| bad(format!("{path} vanished")))?;
                while let Some(lines) = rows.try_next().await? {
                    snap.apply(parse_commit(path, &lines)?);
                }
                snap.reads += 1;
            }
            snap.version = *v;
            v + 1
        }
        None if hint.is_some() => return Err(LoadError::BadHint),
        None => 0,
    };
    for v in first..=newest {
        let Some((path, len)) = listing.commits.get(&v) else {
            return Err(bad(format!("the log has no commit {v} (it goes up to {newest}): the log is not contiguous")));
        };
        let mut timestamp = None;
        snap.version = v;
        let found = for_each_line(store, path, *len, |number, line| {
            if let Some(a) = parse_line(path, number, line)? {
                if let Some(t) = a.commit_info.as_ref().and_then(|c| c.get("timestamp")?.as_i64()) {
                    timestamp.get_or_insert(t);
                }
                snap.apply_one(a);
            }
            Ok(())
        })
        .await?;
        if !found {
            return Err(bad(format!("{path} vanished")));
        }
        snap.commit_timestamp = timestamp;
        snap.version = v;
        snap.reads += 1;
    }
    if snap.protocol.min_reader_version == 0 {
        return Err(bad(format!("no protocol action up to version {newest}")));
    }
    Ok(snap)
}

/// `commitInfo.timestamp` of a commit's actions, if it has one.
pub fn commit_timestamp(actions: &[Action]) -> Option<i64> {
    actions.iter().filter_map(|a| a.commit_info.as_ref()).find_map(|c| c.get("timestamp")?.as_i64())
}

#[cfg(test)]
mod tests;
