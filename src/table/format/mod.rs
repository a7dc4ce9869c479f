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
//! - Above the table (its schema and database folders, the data root)
//!   only a table root's markers count ([`Detector::above`]): a Delta table
//!   partitioned by two columns makes each folder of the first look like a
//!   table.
//! - A symbolic link at a marker's name counts as the marker.
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

mod detect;
mod judge;

use std::collections::BTreeMap;

use layouts::formats::ExecutorKind;

pub use detect::{is_in_progress_name, Detector, BUSY_WINDOW_MS};
pub use judge::{detect, detect_above, detect_listed, judge, judge_partition};

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
    /// A write in progress, with the newest modification time seen of it.
    busy: Option<(String, Option<i64>)>,
}

impl Findings {
    /// A write in progress in the folder at `now_ms` (wall time), if one
    /// shows: a Hadoop committer's `_temporary/`, S3A's `__magic/` or
    /// `.pending` files, Spark's `.spark-staging-*`, Hive's `.hive-staging*`,
    /// Impala's staging folder, Flink's `.inprogress.` files, written to in
    /// the last [`BUSY_WINDOW_MS`] (older ones are what a failed job left;
    /// one of unknown age counts as current). The planner waits for it to
    /// end before it plans the table (its files are about to change).
    pub fn busy(&self, now_ms: i64) -> Option<&str> {
        match &self.busy {
            Some((at, seen)) if seen.is_none_or(|m| now_ms.saturating_sub(m) < BUSY_WINDOW_MS) => Some(at),
            _ => None,
        }
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

#[cfg(test)]
mod tests;
