//! The markers: which names in a folder's listing tell which table format
//! (see the parent module's doc for the list and its sources), collected by
//! a [`Detector`] fed one entry at a time, from a folder listing or from a
//! recursive one.

use std::collections::BTreeMap;

use super::{Findings, TableFormat};

/// A write in progress older than this is taken for the leftover of a job
/// that failed (Hadoop and Flink leave theirs behind), not a write: it no
/// longer holds a table back.
pub const BUSY_WINDOW_MS: i64 = 3600 * 1000;

/// Collects markers from the entries of one folder (a listing of it, or a
/// recursive listing below it), by their paths relative to that folder.
#[derive(Debug, Default)]
pub struct Detector {
    /// Only the markers of a table's root: the folder is above the table
    /// judged (a schema folder, a database folder), where a sibling table
    /// named like a partition-level marker (`bucket-1`, `Fact`) means
    /// nothing.
    root_only: bool,
    found: BTreeMap<TableFormat, String>,
    /// Folders named like a format's metadata folder whose contents were
    /// not seen yet, by their path relative to the judged folder:
    /// `metadata/`, `snapshot/` (beside `schema/`), `Metadata/`, and
    /// `base/metadata/`, `change/metadata/` (Amoro's mixed tables).
    candidates: BTreeMap<&'static str, String>,
    paimon_schema: bool,
    /// A Paimon snapshot file: Paimon's only beside its `schema/`.
    paimon_snapshot: Option<String>,
    /// A write in progress: its marker and the newest modification time
    /// seen of it, where the listing carries one.
    busy: Option<(String, Option<i64>)>,
}

impl Detector {
    pub fn new() -> Detector {
        Detector::default()
    }

    /// A detector of the folders above a table (see `root_only`).
    pub fn above() -> Detector {
        Detector { root_only: true, ..Detector::default() }
    }

    fn mark(&mut self, f: TableFormat, at: &str) {
        self.found.entry(f).or_insert_with(|| at.to_string());
    }

    fn candidate(&mut self, rel: &'static str, at: String) {
        self.candidates.entry(rel).or_insert(at);
    }

    /// One listed entry of the folder `dir`. A symbolic link or other
    /// special entry (a data store over fs lists them as such) counts as a
    /// folder: a `_delta_log` link still makes a Delta table.
    pub fn observe_entry(&mut self, dir: &str, e: &store::Entry) {
        let Some(rel) = e.path.strip_prefix(dir) else { return };
        if e.special.is_some() && !rel.ends_with('/') {
            self.observe_at(&format!("{rel}/"), &e.path, e.modified_ms);
        } else {
            self.observe_at(rel, &e.path, e.modified_ms);
        }
    }

    /// One entry: `rel` its path below the judged folder (a folder ends in
    /// `/`), `full` its path as messages give it.
    pub fn observe(&mut self, rel: &str, full: &str) {
        self.observe_at(rel, full, None);
    }

    fn observe_at(&mut self, rel: &str, full: &str, modified_ms: Option<i64>) {
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
            if i == 0 {
                self.root_marker(d, at);
            }
            if self.root_only {
                continue;
            }
            match *d {
                "_delta_log" => self.mark(TableFormat::Delta, &at()),
                "_temporary" | "__magic" | "_impala_insert_staging" => self.busy(&at(), modified_ms),
                d if d.starts_with("__magic_job-") || d.starts_with(".spark-staging-") => self.busy(&at(), modified_ms),
                d if d.starts_with(".hive-staging") => self.busy(&at(), modified_ms),
                d if is_acid_dir(d) => self.mark(TableFormat::HiveAcid, &at()),
                d if numbered(d, "bucket-") || d == "bucket-postpone" => self.mark(TableFormat::Paimon, &at()),
                _ => {}
            }
        }
        if is_dir {
            return;
        }
        let name = *last;
        self.root_files(parents, name, full);
        if self.root_only {
            return;
        }
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
        } else if is_in_progress_name(name) {
            self.busy(full, modified_ms);
        }
    }

    /// A folder directly in the judged one that makes it a table's root.
    fn root_marker(&mut self, d: &str, at: impl Fn() -> String) {
        match d {
            "_delta_log" => self.mark(TableFormat::Delta, &at()),
            ".hoodie" => self.mark(TableFormat::Hudi, &at()),
            "_spark_metadata" => self.mark(TableFormat::SparkStreamingSink, &at()),
            "_versions" | "_transactions" => self.mark(TableFormat::Lance, &at()),
            "metadata" => self.candidate("metadata/", at()),
            "snapshot" => self.candidate("snapshot/", at()),
            "schema" => self.paimon_schema = true,
            _ if self.root_only => {}
            "Fact" => self.mark(TableFormat::CarbonData, &at()),
            "Metadata" => self.candidate("Metadata/", at()),
            "base" => self.candidate("base/metadata/", at()),
            "change" => self.candidate("change/metadata/", at()),
            _ => {}
        }
    }

    /// Files that settle a root's candidate folders, or mark a root.
    fn root_files(&mut self, parents: &[&str], name: &str, full: &str) {
        match parents {
            [] if name == "_latest.manifest" => self.mark(TableFormat::Lance, full),
            [] if name == "_metadata" && !self.root_only => self.mark(TableFormat::ParquetSummary, full),
            ["metadata"] if is_iceberg_metadata_file(name) => self.mark(TableFormat::Iceberg, full),
            ["base" | "change", "metadata"] if !self.root_only && is_iceberg_metadata_file(name) => {
                self.mark(TableFormat::Iceberg, full)
            }
            ["Metadata"] if !self.root_only && (name == "tablestatus" || name == "schema") => {
                self.mark(TableFormat::CarbonData, full)
            }
            ["snapshot"] if name == "LATEST" || name == "EARLIEST" || numbered(name, "snapshot-") => {
                self.paimon_snapshot.get_or_insert_with(|| full.to_string());
            }
            ["schema"] if numbered(name, "schema-") => self.paimon_schema = true,
            _ => {}
        }
    }

    fn busy(&mut self, at: &str, modified_ms: Option<i64>) {
        match &mut self.busy {
            None => self.busy = Some((at.to_string(), modified_ms)),
            Some((_, seen)) => {
                if let Some(m) = modified_ms {
                    *seen = Some(seen.map_or(m, |s| s.max(m)));
                }
            }
        }
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
/// Parsed from the right: a topic may hold dots (`prod.events`).
fn is_kafka_connect_file(name: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.rsplitn(4, '+').collect();
    let [end, start, partition, topic] = parts[..] else { return false };
    let end = end.split('.').next().unwrap_or("");
    !topic.is_empty() && digits(partition) && digits(start) && digits(end)
}

fn numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A file name a writer gives a file it is still writing: S3A's
/// `.pending`/`.pendingset`, Flink's `.inprogress.` part files (hidden
/// names, `.` and `_`, are no data files at all).
pub fn is_in_progress_name(name: &str) -> bool {
    name.ends_with(".pending") || name.ends_with(".pendingset") || name.contains(".inprogress.")
}
