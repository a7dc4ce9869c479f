//! What a table folder is: a plain Hive-style folder of files that compactd's
//! `merge` and `parquet` executors may rewrite, or a table whose files a log
//! or manifest names (Delta Lake, Apache Iceberg, Apache Hudi, Hive ACID,
//! Apache Paimon, Lance, a Spark streaming sink, Databricks transactional
//! writes), where moving, merging or deleting a file outside that format's
//! own commit protocol breaks the table.
//!
//! Invariants:
//! - Judged from listings only: the table folder (one listing, plus one of
//!   `metadata/`, `snapshot/` or `_versions/` when such a folder needs a
//!   closer look) and the partition folder an executor works in; or, in
//!   the planner, the table's recursive listing it makes anyway. Never from
//!   file contents, and never a request per file.
//! - A marker anywhere decides: a table that holds the metadata of two
//!   formats (Apache XTable writes Delta, Iceberg and Hudi metadata side by
//!   side) is refused by every executor, since compactd cannot tell which
//!   one is the source of truth.
//! - [`Findings::refusal`] is the one rule of who may change what: an
//!   executor changes only the format it owns (`merge` and `parquet`: plain
//!   folders; `delta`: Delta Lake tables; `iceberg`: Apache Iceberg
//!   tables); `command` executors are the
//!   user's own programs and are never refused.
//!
//! The markers, from each format's specification or reference writer:
//! - Delta Lake: the folder `_delta_log/` (also below the table folder: a
//!   folder of Delta tables is not a plain table).
//! - Apache Iceberg: `metadata/` holding `*.metadata.json` (also gzipped:
//!   `*.gz.metadata.json`, `*.metadata.json.gz`), `version-hint.text` or a
//!   manifest list `snap-*.avro`.
//! - Apache Hudi: `.hoodie/` at the table's root, `.hoodie_partition_metadata`
//!   (with any suffix) in each partition.
//! - Hive ACID (full and insert-only): folders `base_N[_vM]`,
//!   `delta_N_M[_S][_vK]`, `delete_delta_N_M[_S][_vK]`, files
//!   `_orc_acid_version` and `_metadata_acid`.
//! - Apache Paimon: `snapshot/` holding `LATEST`, `EARLIEST` or `snapshot-N`
//!   beside `schema/`.
//! - Lance: `_versions/*.manifest` or `_latest.manifest`.
//! - A Spark Structured Streaming file sink: `_spark_metadata/` (readers of
//!   the folder read only the files its log names).
//! - Databricks transactional writes (DBIO): `_started_<txn>` and
//!   `_committed_<txn>` files (readers take a file as committed by what these
//!   markers list).

use std::collections::BTreeMap;

use layouts::formats::ExecutorKind;
use store::Store;

/// A table format whose files a log or manifest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TableFormat {
    Delta,
    Iceberg,
    Hudi,
    HiveAcid,
    Paimon,
    Lance,
    SparkStreamingSink,
    DatabricksTransactional,
    CarbonData,
    DuckLake,
    ParquetSummary,
    KafkaConnect,
    UnityCatalog,
}

impl TableFormat {
    /// "a Delta Lake table", for messages.
    pub fn describe(self) -> &'static str {
        match self {
            TableFormat::Delta => "a Delta Lake table",
            TableFormat::Iceberg => "an Apache Iceberg table",
            TableFormat::Hudi => "an Apache Hudi table",
            TableFormat::HiveAcid => "a Hive ACID (transactional) table",
            TableFormat::Paimon => "an Apache Paimon table",
            TableFormat::Lance => "a Lance dataset",
            TableFormat::SparkStreamingSink => "the output of a Spark Structured Streaming file sink",
            TableFormat::DatabricksTransactional => "a table written with Databricks transactional writes",
            TableFormat::CarbonData => "an Apache CarbonData table",
            TableFormat::DuckLake => "a DuckLake table (its catalog database names these files)",
            TableFormat::ParquetSummary => "a Parquet dataset whose `_metadata` summary file names its files",
            TableFormat::KafkaConnect => {
                "the output of a Kafka Connect HDFS sink (it recovers its offsets from the file names)"
            }
            TableFormat::UnityCatalog => "Unity Catalog managed storage",
        }
    }

    /// Its short name, as `tables --json` and metrics give it.
    pub fn key(self) -> &'static str {
        match self {
            TableFormat::Delta => "delta",
            TableFormat::Iceberg => "iceberg",
            TableFormat::Hudi => "hudi",
            TableFormat::HiveAcid => "hive-acid",
            TableFormat::Paimon => "paimon",
            TableFormat::Lance => "lance",
            TableFormat::SparkStreamingSink => "spark-streaming-sink",
            TableFormat::DatabricksTransactional => "databricks-transactional",
            TableFormat::CarbonData => "carbondata",
            TableFormat::DuckLake => "ducklake",
            TableFormat::ParquetSummary => "parquet-summary",
            TableFormat::KafkaConnect => "kafka-connect",
            TableFormat::UnityCatalog => "unity-catalog",
        }
    }

    /// The built-in executor that compacts tables of this format through
    /// the format's own commit protocol, if compactd has one.
    pub fn owner(self) -> Option<ExecutorKind> {
        match self {
            TableFormat::Delta => Some(ExecutorKind::Delta),
            TableFormat::Iceberg => Some(ExecutorKind::Iceberg),
            _ => None,
        }
    }

    /// What compacts such a table when compactd does not.
    fn elsewhere(self) -> &'static str {
        match self {
            TableFormat::Delta => "Delta's OPTIMIZE",
            TableFormat::Iceberg => "Iceberg's rewrite_data_files",
            TableFormat::Hudi => "Hudi's own clustering and compaction",
            TableFormat::HiveAcid => "Hive's own compactor (ALTER TABLE … COMPACT)",
            TableFormat::Paimon => "Paimon's own compaction",
            TableFormat::Lance => "Lance's compact_files",
            TableFormat::SparkStreamingSink => "a batch job that rewrites the sink's output elsewhere",
            TableFormat::DatabricksTransactional => "Databricks' own OPTIMIZE",
            TableFormat::CarbonData => "CarbonData's own compaction",
            TableFormat::DuckLake => "DuckLake's merge_adjacent_files",
            TableFormat::ParquetSummary => "a rewrite that regenerates `_metadata`",
            TableFormat::KafkaConnect => "a batch job that reads the sink's output",
            TableFormat::UnityCatalog => "the engine that owns the storage",
        }
    }
}

/// The formats found in a folder, each with the first marker seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    found: BTreeMap<TableFormat, String>,
    busy: Option<String>,
}

impl Findings {
    /// A write in progress in the folder, if one shows: a Hadoop committer's
    /// `_temporary/`, S3A's `__magic/` or `.pending` files, Spark's
    /// `.spark-staging-*`, Hive's `.hive-staging*`, Impala's staging folder,
    /// Flink's `.inprogress.` files. The planner waits for it to end before
    /// it submits the partition (its files are about to change).
    pub fn busy(&self) -> Option<&str> {
        self.busy.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub fn formats(&self) -> impl Iterator<Item = TableFormat> + '_ {
        self.found.keys().copied()
    }

    pub fn contains(&self, f: TableFormat) -> bool {
        self.found.contains_key(&f)
    }

    /// Adds what another folder's findings hold (an ancestor's, a
    /// partition's).
    pub fn extend(&mut self, other: Findings) {
        for (f, at) in other.found {
            self.found.entry(f).or_insert(at);
        }
        if self.busy.is_none() {
            self.busy = other.busy;
        }
    }

    /// Why the `kind` executor must not change the table at `dir`; `None`
    /// if it may. See the module doc for the rule.
    pub fn refusal(&self, dir: &str, kind: ExecutorKind) -> Option<String> {
        if matches!(kind, ExecutorKind::Command | ExecutorKind::Noop) || self.found.is_empty() {
            return None;
        }
        let label = kind.label();
        if self.found.len() > 1 {
            let list: Vec<String> = self.found.iter().map(|(f, at)| format!("{} ({at})", f.key())).collect();
            return Some(format!(
                "{dir} holds the metadata of several table formats: {} (Apache XTable writes such tables); compactd \
                 cannot tell which one is the source of truth, so the {label} executor never changes it",
                list.join(", ")
            ));
        }
        let (format, at) = self.found.iter().next().expect("one finding");
        if format.owner() == Some(kind) {
            return None;
        }
        let instead = match format.owner() {
            Some(owner) => {
                let o = owner.label();
                format!("the {o} executor compacts it through its commit protocol (`--executor {o}`, or `executor = \"{o}\"` in a policy)")
            }
            None => format!("compactd has no executor for it ({} does that)", format.elsewhere()),
        };
        Some(format!("{dir} is {} ({at}): the {label} executor never changes it; {instead}", format.describe()))
    }
}

/// Collects markers from the entries of one folder (a listing of it, or a
/// recursive listing below it), by their paths relative to that folder.
#[derive(Debug, Default)]
pub struct Detector {
    found: BTreeMap<TableFormat, String>,
    /// Folders named like a format's metadata folder whose contents were
    /// not seen yet, by their path relative to the judged folder:
    /// `metadata/`, `snapshot/` (beside `schema/`), `Metadata/`, and
    /// `base/metadata/`, `change/metadata/` (Amoro's mixed tables).
    candidates: BTreeMap<&'static str, String>,
    paimon_schema: bool,
    /// A Paimon snapshot file: Paimon's only beside its `schema/`.
    paimon_snapshot: Option<String>,
    /// A write in progress (see [`Findings::busy`]).
    busy: Option<String>,
}

impl Detector {
    pub fn new() -> Detector {
        Detector::default()
    }

    fn mark(&mut self, f: TableFormat, at: &str) {
        self.found.entry(f).or_insert_with(|| at.to_string());
    }

    fn candidate(&mut self, rel: &'static str, at: String) {
        self.candidates.entry(rel).or_insert(at);
    }

    /// One entry: `rel` its path below the judged folder (a folder ends in
    /// `/`), `full` its path as messages give it.
    pub fn observe(&mut self, rel: &str, full: &str) {
        if full.split('/').any(|s| s == "__unitystorage") {
            self.mark(TableFormat::UnityCatalog, full);
        }
        let is_dir = rel.ends_with('/');
        let segs: Vec<&str> = rel.trim_end_matches('/').split('/').filter(|s| !s.is_empty()).collect();
        let Some((last, parents)) = segs.split_last() else { return };
        let dirs: &[&str] = if is_dir { &segs } else { parents };
        let base = full.strip_suffix(rel).unwrap_or("");
        for (i, d) in dirs.iter().enumerate() {
            let at = || format!("{base}{}/", segs[..=i].join("/"));
            match *d {
                "_delta_log" => self.mark(TableFormat::Delta, &at()),
                "_temporary" | "__magic" | "_impala_insert_staging" => self.busy(&at()),
                d if d.starts_with("__magic_job-") || d.starts_with(".spark-staging-") => self.busy(&at()),
                d if d.starts_with(".hive-staging") => self.busy(&at()),
                d if is_acid_dir(d) => self.mark(TableFormat::HiveAcid, &at()),
                d if numbered(d, "bucket-") || d == "bucket-postpone" => self.mark(TableFormat::Paimon, &at()),
                _ => {}
            }
            if i == 0 {
                match *d {
                    ".hoodie" => self.mark(TableFormat::Hudi, &at()),
                    "_spark_metadata" => self.mark(TableFormat::SparkStreamingSink, &at()),
                    "_versions" | "_transactions" => self.mark(TableFormat::Lance, &at()),
                    "Fact" => self.mark(TableFormat::CarbonData, &at()),
                    "metadata" => self.candidate("metadata/", at()),
                    "Metadata" => self.candidate("Metadata/", at()),
                    "snapshot" => self.candidate("snapshot/", at()),
                    "schema" => self.paimon_schema = true,
                    "base" => self.candidate("base/metadata/", at()),
                    "change" => self.candidate("change/metadata/", at()),
                    _ => {}
                }
            }
        }
        if is_dir {
            return;
        }
        let name = *last;
        if name.starts_with(".hoodie_partition_metadata") {
            self.mark(TableFormat::Hudi, full);
        } else if name == "_orc_acid_version" || name == "_metadata_acid" || name.ends_with("_flush_length") {
            self.mark(TableFormat::HiveAcid, full);
        } else if is_dbio_marker(name) {
            self.mark(TableFormat::DatabricksTransactional, full);
        } else if is_ducklake_file(name) {
            self.mark(TableFormat::DuckLake, full);
        } else if is_kafka_connect_file(name) {
            self.mark(TableFormat::KafkaConnect, full);
        } else if [".carbondata", ".carbonindex", ".carbonindexmerge"].iter().any(|x| name.ends_with(x)) {
            self.mark(TableFormat::CarbonData, full);
        } else if name.ends_with(".pending") || name.ends_with(".pendingset") || name.contains(".inprogress.") {
            self.busy(full);
        }
        match parents {
            [] if name == "_latest.manifest" => self.mark(TableFormat::Lance, full),
            [] if name == "_metadata" => self.mark(TableFormat::ParquetSummary, full),
            ["metadata"] | ["base" | "change", "metadata"] if is_iceberg_metadata_file(name) => {
                self.mark(TableFormat::Iceberg, full)
            }
            ["Metadata"] if name == "tablestatus" || name == "schema" => self.mark(TableFormat::CarbonData, full),
            ["snapshot"] if name == "LATEST" || name == "EARLIEST" || numbered(name, "snapshot-") => {
                self.paimon_snapshot.get_or_insert_with(|| full.to_string());
            }
            ["schema"] if numbered(name, "schema-") => self.paimon_schema = true,
            _ => {}
        }
    }

    fn busy(&mut self, at: &str) {
        self.busy.get_or_insert_with(|| at.to_string());
    }

    /// Folders (relative to the judged one) whose listing would settle a
    /// candidate format.
    pub fn to_look_into(&self) -> Vec<&'static str> {
        let settled = |f: TableFormat| self.found.contains_key(&f);
        let mut out = vec![];
        for rel in self.candidates.keys() {
            let needed = match *rel {
                "metadata/" | "base/metadata/" | "change/metadata/" => !settled(TableFormat::Iceberg),
                "Metadata/" => !settled(TableFormat::CarbonData),
                "snapshot/" => self.paimon_schema && self.paimon_snapshot.is_none() && !settled(TableFormat::Paimon),
                _ => false,
            };
            if needed {
                out.push(*rel);
            }
        }
        out
    }

    pub fn finish(mut self) -> Findings {
        // Paimon's snapshots count only beside its schemas; its bucket
        // folders count alone.
        if let Some(at) = self.paimon_snapshot.take().filter(|_| self.paimon_schema) {
            self.mark(TableFormat::Paimon, &at);
        }
        Findings { found: self.found, busy: self.busy }
    }
}

/// `base_N`, `base_N_vM`, `delta_N_M`, `delta_N_M_S`, `delta_N_M_vK`,
/// `delete_delta_N_M…`: Hive ACID's transaction folders.
fn is_acid_dir(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let visibility = |s: &str| s.strip_prefix('v').is_some_and(digits);
    let (rest, need) = if let Some(r) = name.strip_prefix("delete_delta_") {
        (r, 2)
    } else if let Some(r) = name.strip_prefix("delta_") {
        (r, 2)
    } else if let Some(r) = name.strip_prefix("base_") {
        (r, 1)
    } else {
        return false;
    };
    let parts: Vec<&str> = rest.split('_').collect();
    if parts.len() < need || !parts[..need].iter().all(|p| digits(p)) {
        return false;
    }
    match &parts[need..] {
        [] => true,
        [x] => digits(x) || visibility(x),
        [s, v] => digits(s) && visibility(v),
        _ => false,
    }
}

fn is_dbio_marker(name: &str) -> bool {
    ["_started_", "_committed_"]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())))
}

fn is_iceberg_metadata_file(name: &str) -> bool {
    name.ends_with(".metadata.json")
        || name.ends_with(".metadata.json.gz")
        || name == "version-hint.text"
        || (name.starts_with("snap-") && name.ends_with(".avro"))
}

/// `ducklake-<uuid>.parquet`, `ducklake-<uuid>-delete.parquet|puffin`.
fn is_ducklake_file(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("ducklake-") else { return false };
    let stem = rest.split('.').next().unwrap_or("");
    let uuid = stem.strip_suffix("-delete").unwrap_or(stem);
    uuid.len() == 36 && uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// `<topic>+<kafka partition>+<start offset>+<end offset>.<ext>`: the
/// Kafka Connect HDFS sink's names, from which it recovers its offsets.
fn is_kafka_connect_file(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or("");
    let parts: Vec<&str> = stem.rsplitn(4, '+').collect();
    parts.len() == 4
        && !parts[3].is_empty()
        && parts[..3].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Judges the folder `dir` (ending in `/`) from one listing of it and,
/// where a candidate needs it, one of `metadata/`, `snapshot/` or
/// `_versions/`. A missing folder holds no table.
pub async fn detect(store: &Store, dir: &str) -> store::Result<Findings> {
    let entries = store.list(dir).await?;
    detect_listed(store, dir, &entries).await
}

/// Judges the folders above `dir` up to the data root (`db/`, then
/// `db/schema/` for a table folder): a Delta or Iceberg table, a Spark
/// sink or a Lance dataset can hold what looks like a table folder below
/// it (a schema folder that is one Delta table partitioned by a column
/// whose folders look like tables). One listing each; asked once per
/// `submit`, where a listing of a schema folder is cheap next to a
/// compaction.
pub async fn detect_above(store: &Store, dir: &str) -> store::Result<Findings> {
    let mut findings = Findings::default();
    let mut end = 0;
    while let Some(i) = dir[end..].find('/').map(|i| end + i + 1) {
        if i == dir.len() {
            break;
        }
        let above = detect(store, &dir[..i]).await?;
        findings.extend(above);
        end = i;
    }
    Ok(findings)
}

/// [`detect`] from a listing of `dir` the caller made already.
pub async fn detect_listed(store: &Store, dir: &str, entries: &[store::Entry]) -> store::Result<Findings> {
    let mut d = Detector::new();
    for e in entries {
        observe_entry(&mut d, dir, e);
    }
    for sub in d.to_look_into() {
        for e in store.list(&format!("{dir}{sub}")).await? {
            observe_entry(&mut d, dir, &e);
        }
    }
    Ok(d.finish())
}

/// Judges the table a unit of `kind` works in: the table folder and, when
/// the unit is one of its partition folders, that folder too (its markers:
/// Hudi's partition metadata, Hive ACID's transaction folders). `Err(why)`
/// when the unit must not change it.
pub async fn check_unit(
    store: &Store,
    table_dir: &str,
    partition_dir: Option<&str>,
    kind: ExecutorKind,
) -> store::Result<Result<(), String>> {
    let mut findings = detect(store, table_dir).await?;
    if let Some(p) = partition_dir {
        findings.extend(detect_partition(store, table_dir, p).await?);
    }
    Ok(match findings.refusal(table_dir, kind) {
        Some(why) => Err(why),
        None => Ok(()),
    })
}

/// Judges one partition folder `partition_dir` of the table at
/// `table_dir` (one listing): the markers formats leave in partitions
/// (Hudi's partition metadata, Hive ACID's transaction folders, DuckLake's
/// and Kafka Connect's file names).
pub async fn detect_partition(store: &Store, table_dir: &str, partition_dir: &str) -> store::Result<Findings> {
    Ok(partition_findings(table_dir, &store.list(partition_dir).await?))
}

/// [`detect_partition`] from a listing of the partition folder.
pub fn partition_findings(table_dir: &str, entries: &[store::Entry]) -> Findings {
    let mut d = Detector::new();
    for e in entries {
        observe_entry(&mut d, table_dir, e);
    }
    d.finish()
}

fn observe_entry(d: &mut Detector, dir: &str, e: &store::Entry) {
    if let Some(rel) = e.path.strip_prefix(dir) {
        d.observe(rel, &e.path);
    }
}

#[cfg(test)]
mod tests;
