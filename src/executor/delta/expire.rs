//! Retention of a Delta table: what Delta's `VACUUM` and its log cleanup
//! do, as one unit of an `expire` task, so that a compacted table's
//! replaced files leave the backend (on HDFS, the NameNode's heap).
//!
//! Which data files go (as `VACUUM`, PROTOCOL.md "Tombstones"): every file
//! of the table's folder, outside `_delta_log/` and hidden folders (a name
//! starting with `_` or `.`, except `_change_data` and partition folders),
//! that no retained version reads and that is older than the data
//! retention. A retained version is one younger than the retention, or one
//! of the newest `retain_last`. So kept are the newest version's files,
//! the tombstones (`remove` actions the log still holds) removed within the
//! retention or by one of those versions, and the deletion vector files of
//! all of them. A file no version names and that compactd wrote
//! (`compactd-…parquet`) is left to `vacuum-orphans`, which knows whether
//! its task may still commit it: so even a forced zero retention deletes no
//! file of an unfinished compactd task.
//!
//! Which log files go (as Delta's metadata cleanup): commits and
//! checkpoints of versions before the newest checkpoint that a retained
//! version does not need, older than the log retention, from the oldest up
//! (a crash leaves the log contiguous from some version on). Where no such
//! checkpoint exists, one is written first at the oldest version kept.
//!
//! The order is crash-safe, and a rerun finishes what a killed run began:
//! the data files, then the checkpoint (written whole under its name, then
//! `_last_checkpoint`), then the log files, oldest first. Every step is computed again
//! from the listing. Right before deleting, the commits made since the
//! table was read are read: a file one of them names (a writer's `RESTORE`
//! brings tombstoned files back) is kept.
//!
//! A retention shorter than the table's own (`delta.deletedFileRetentionDuration`,
//! default 7 days; `delta.logRetentionDuration`, default 30 days) is
//! refused unless forced, as Spark refuses `VACUUM RETAIN 0 HOURS` without
//! `retentionDurationCheck`: a writer's files are on the backend before its
//! commit names them, and a reader may still be reading an older version.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use serde::Serialize;
use store::Store;

use super::checkpoint::{self, parse_interval};
use super::log::{self, Snapshot, LOG_DIR};
use super::orphans::is_compactd_output;
use super::vectors;
use super::DeltaError;

/// The data retention when the table does not set one (Delta's default).
pub const DEFAULT_FILE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The log retention when the table does not set one (Delta's default).
pub const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// What to keep, as the task's parameters say (`None`: the table's own).
#[derive(Debug, Clone, Default)]
pub struct Retention {
    /// Data files no version younger than this reads are deleted.
    pub older_than: Option<Duration>,
    /// Log entries older than this are deleted (behind a checkpoint).
    pub log_older_than: Option<Duration>,
    /// The newest this many versions stay readable whatever their age
    /// (at least 1: the newest; `None`: the table's own, Delta's 1).
    pub retain_last: Option<u64>,
    /// Retentions shorter than the table's own are allowed.
    pub force: bool,
    /// Name what would be deleted; delete nothing.
    pub dry_run: bool,
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Expired {
    /// The table's version when read.
    pub version: u64,
    /// The oldest version still readable after the run.
    pub oldest_readable: u64,
    pub data_files_deleted: u64,
    pub data_bytes_freed: u64,
    pub log_files_deleted: u64,
    pub log_bytes_freed: u64,
    /// The checkpoint written so that the log behind it could go.
    pub checkpoint_written: Option<u64>,
    /// Files a retained version reads, and files too young to go.
    pub files_kept: u64,
    /// Files no version names that a compactd task wrote: `vacuum-orphans`'s.
    pub compactd_unnamed_kept: u64,
    /// Paths deleted (or, dry, to delete), data then log, at most 1,000.
    #[serde(skip)]
    pub deleted: Vec<String>,
}

/// The table's setting `key` as a duration; `default` when unset.
fn table_retention(snap: &Snapshot, table: &str, key: &str, default: Duration) -> Result<Duration, DeltaError> {
    match snap.metadata.configuration.get(key).cloned().flatten() {
        None => Ok(default),
        Some(s) => parse_interval(&s).ok_or_else(|| DeltaError::Table {
            table: table.to_string(),
            problem: format!("{key} {s:?} is not an interval compactd reads: nothing expired"),
        }),
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ => format!("{s}s"),
    }
}

/// The retention to apply: `asked`, else the table's; shorter than the
/// table's only when forced.
fn effective(
    table: &str,
    asked: Option<Duration>,
    own: Duration,
    key: &str,
    force: bool,
) -> Result<Duration, DeltaError> {
    let d = asked.unwrap_or(own);
    if d < own && !force {
        return Err(DeltaError::Table {
            table: table.to_string(),
            problem: format!(
                "a retention of {} is shorter than the table's {key} ({}): a reader of an older version, or a \
                 writer whose files are not committed yet, could lose files; refused (expire.force=true deletes \
                 anyway, as Spark's retentionDurationCheck does)",
                human(d),
                human(own)
            ),
        });
    }
    Ok(d)
}

/// True for a path below the table that `VACUUM` never looks into: a
/// folder or file named with a leading `_` or `.`, except the change data
/// folder and partition folders (`col=value`, which may start with `_`).
fn hidden(rel: &str, partition_columns: &[String]) -> bool {
    rel.split('/').any(|part| {
        (part.starts_with('_') || part.starts_with('.'))
            && !part.starts_with("_change_data")
            && !part.starts_with("_delta_index")
            && !partition_columns.iter().any(|c| part.starts_with(&format!("{c}=")))
    })
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The retentions `r` asks of the table `snap` is a version of, or why it
/// must not run there.
struct Retentions {
    data: Duration,
    log: Duration,
    /// The table's own data retention: all a checkpoint's tombstones cover.
    own_data: Duration,
}

fn retentions(table: &str, snap: &Snapshot, r: &Retention) -> Result<Retentions, DeltaError> {
    snap.check_supported()
        .map_err(|why| DeltaError::Table { table: table.to_string(), problem: format!("nothing expired: {why}") })?;
    let own_data = table_retention(snap, table, "delta.deletedFileRetentionDuration", DEFAULT_FILE_RETENTION)?;
    let data = effective(table, r.older_than, own_data, "delta.deletedFileRetentionDuration", r.force)?;
    let own_log = table_retention(snap, table, "delta.logRetentionDuration", DEFAULT_LOG_RETENTION)?;
    let log = effective(table, r.log_older_than, own_log, "delta.logRetentionDuration", r.force)?;
    Ok(Retentions { data, log, own_data })
}

/// Why the retention `r` must not run on the table at `table`, asked
/// before a task runs (by `submit --data` and by the task's manager) so
/// that a refused one fails at once, with its reason.
pub async fn refusal(store: &Store, table: &str, r: &Retention) -> Result<Option<String>, DeltaError> {
    let snap = log::load(store, table).await?;
    Ok(retentions(table, &snap, r).err().map(|e| e.to_string()))
}

/// Runs the retention of the table at `table` (`<db>/<schema>/<table>/`) at
/// wall time `now`.
pub async fn run(store: &Store, table: &str, r: &Retention, now: SystemTime) -> Result<Expired, DeltaError> {
    let snap = log::load_with_tombstones(store, table).await?;
    let Retentions { data: data_retention, log: log_retention, own_data } = retentions(table, &snap, r)?;
    let now_ms = ms(now);
    let keep_from = (snap.version + 1).saturating_sub(r.retain_last.unwrap_or(1).max(1));
    let mut out = Expired { version: snap.version, ..Expired::default() };

    let data_cutoff = now_ms - data_retention.as_millis() as i64;
    let log_entries: Vec<store::Entry> = store.list_stream(&format!("{table}{LOG_DIR}"), false).try_collect().await?;
    let log_times: BTreeMap<&str, Option<i64>> = log_entries.iter().map(|e| (e.path.as_str(), e.modified_ms)).collect();
    // A checkpoint keeps the tombstones of the table's own retention only:
    // a longer one asked for must read them from the commits.
    let reach = Reach { data_cutoff, keep_from, longer: data_retention > own_data };
    let Needed { paths: needed, removed_at } = needed(store, table, &snap, &reach, &log_times).await?;
    let columns = snap.metadata.partition_keys();
    let files: Vec<store::Entry> = store.list_stream(table, true).try_collect().await?;
    let present: BTreeSet<&str> = files.iter().map(|e| e.path.as_str()).collect();
    let log_dir = format!("{table}{LOG_DIR}");
    let mut doomed = vec![];
    for e in files.iter().filter(|e| !e.is_dir && e.special.is_none() && !e.path.starts_with(&log_dir)) {
        let rel = &e.path[table.len()..];
        if hidden(rel, &columns) {
            continue;
        }
        if needed.contains(&e.path) || e.modified_ms.is_none_or(|m| m > data_cutoff) {
            out.files_kept += 1;
            continue;
        }
        if is_compactd_output(e.name()) && !removed_at.contains_key(&e.path) {
            out.compactd_unnamed_kept += 1;
            continue;
        }
        doomed.push(e);
    }
    // A commit since the read may name a file again (a RESTORE): kept.
    let since = named_since(store, table, snap.version).await?;
    doomed.retain(|e| {
        let named = since.contains(&e.path);
        out.files_kept += u64::from(named);
        !named
    });
    if !r.dry_run {
        // In batches where the backend has them (S3): data files go in any
        // order. Hadoop's checksums first (see `delete_checksum`).
        let sums: Vec<String> =
            doomed.iter().map(|e| checksum_of(&e.path)).filter(|c| present.contains(c.as_str())).collect();
        store.delete_many(&sums).await?;
        store.delete_many(&doomed.iter().map(|e| e.path.clone()).collect::<Vec<_>>()).await?;
    }
    for e in doomed {
        out.oldest_readable = out.oldest_readable.max(removed_at.get(&e.path).copied().unwrap_or(0));
        out.data_files_deleted += 1;
        out.data_bytes_freed += e.len.unwrap_or(0);
        if out.deleted.len() < 1000 {
            out.deleted.push(e.path.clone());
        }
    }

    let cleanup = !snap
        .metadata
        .configuration
        .get("delta.enableExpiredLogCleanup")
        .cloned()
        .flatten()
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"));
    if cleanup {
        let cutoff = now_ms - log_retention.as_millis() as i64;
        clean_log(store, table, &snap, (now, cutoff), keep_from, r, &log_entries, &mut out).await?;
    }
    Ok(out)
}

/// How far back retained versions reach.
struct Reach {
    /// Files removed after this (ms) are kept.
    data_cutoff: i64,
    /// Files removed by a version after this one are kept.
    keep_from: u64,
    /// The data retention is longer than the table's own, which is all a
    /// checkpoint's tombstones cover.
    longer: bool,
}

/// What retained versions read, and when each removed file went.
struct Needed {
    /// Store paths: data files, deletion vector files, change data files.
    paths: BTreeSet<String>,
    /// Removed files by store path, with the newest version that removed
    /// them: deleting one makes the versions before it unreadable.
    removed_at: BTreeMap<String, u64>,
}

impl Needed {
    fn keep(&mut self, table: &str, path: &str, dv: Option<&serde_json::Value>) -> Result<(), DeltaError> {
        // A file named outside the table's folder (an absolute path) is
        // refused: its store path, and so whether it is kept, is unknown.
        self.paths.insert(log::data_path(table, path)?);
        if let Some(f) = dv.and_then(|dv| vectors::file_of(table, dv)) {
            self.paths.insert(f);
        }
        Ok(())
    }

    fn removed(&mut self, table: &str, path: &str, version: u64) -> Result<(), DeltaError> {
        let v = self.removed_at.entry(log::data_path(table, path)?).or_default();
        *v = (*v).max(version);
        Ok(())
    }
}

/// The files retained versions read: the newest version's files and
/// vectors; the tombstones removed after the cutoff or by a version after
/// `keep_from`; and, read from the commits, the change data files of those
/// versions and the tombstones a checkpoint no longer holds (removed longer
/// ago than the table's own retention, or before the checkpoint the
/// snapshot started from). `log_times`: the log's files and their ages.
async fn needed(
    store: &Store,
    table: &str,
    snap: &Snapshot,
    reach: &Reach,
    log_times: &BTreeMap<&str, Option<i64>>,
) -> Result<Needed, DeltaError> {
    let mut out = Needed { paths: BTreeSet::new(), removed_at: BTreeMap::new() };
    let kept = |ts: Option<i64>, version: u64| {
        // Delta reads a tombstone without a time as removed at 0.
        ts.unwrap_or(0) > reach.data_cutoff || version > reach.keep_from
    };
    for f in snap.files.values() {
        out.keep(table, &f.path, f.deletion_vector.as_ref())?;
    }
    for t in snap.tombstones.iter().flat_map(|t| t.values()) {
        out.removed(table, &t.path, t.version)?;
        if kept(t.deletion_timestamp, t.version) {
            out.keep(table, &t.path, t.deletion_vector.as_ref())?;
        }
    }
    for v in 0..=snap.version {
        let path = log::commit_path(table, v);
        let Some(&modified) = log_times.get(path.as_str()) else { continue };
        let young = modified.is_none_or(|m| m > reach.data_cutoff);
        if !(v > reach.keep_from || (reach.longer && young)) {
            continue;
        }
        let Some(actions) = log::read_commit_file(store, &path, None).await? else { continue };
        for a in actions {
            if let Some(r) = a.remove {
                out.removed(table, &r.path, v)?;
                if kept(r.deletion_timestamp, v) {
                    out.keep(table, &r.path, r.deletion_vector.as_ref())?;
                }
            }
            if let Some(c) = a.cdc.filter(|_| v > reach.keep_from) {
                out.keep(table, &c.path, None)?;
            }
        }
    }
    Ok(out)
}

/// Store paths named by commits after `version`: the files they add or
/// remove, and those files' deletion vectors.
async fn named_since(store: &Store, table: &str, version: u64) -> Result<BTreeSet<String>, DeltaError> {
    let after = log::commit_path(table, version);
    let listing = log::list_log(store, table, Some(&after)).await?;
    let mut out = Needed { paths: BTreeSet::new(), removed_at: BTreeMap::new() };
    for (v, (path, len)) in &listing.commits {
        if *v <= version {
            continue;
        }
        for a in log::read_commit_file(store, path, *len).await?.unwrap_or_default() {
            if let Some(add) = &a.add {
                out.keep(table, &add.path, add.deletion_vector.as_ref())?;
            }
            if let Some(r) = &a.remove {
                out.keep(table, &r.path, r.deletion_vector.as_ref())?;
            }
        }
    }
    Ok(out.paths)
}

/// The Hadoop checksum beside `path` (`.<name>.crc`).
pub(crate) fn checksum_of(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/.{name}.crc"),
        None => format!(".{path}.crc"),
    }
}

/// Deletes the Hadoop checksum beside `path` (`.<name>.crc`), which a
/// local file system's Hadoop writer leaves and deletes with its file.
/// Called before the file's own delete: a run killed between the two
/// leaves the file, which the rerun deletes, not a checksum nothing names.
async fn delete_checksum(store: &Store, path: &str, present: &BTreeSet<&str>) -> Result<(), store::StoreError> {
    let crc = checksum_of(path);
    if present.contains(crc.as_str()) {
        store.delete(&crc).await?;
    }
    Ok(())
}

/// The version a `_delta_log/` file belongs to: its 20 leading digits.
fn log_version(name: &str) -> Option<u64> {
    let digits = name.get(..20)?;
    (digits.bytes().all(|b| b.is_ascii_digit()) && name[20..].starts_with('.')).then(|| digits.parse().ok())?
}

/// Deletes the log behind the newest checkpoint at or before `keep_from`
/// whose versions are older than `cutoff` (writing that checkpoint first
/// where the log has none), oldest first.
#[allow(clippy::too_many_arguments)]
async fn clean_log(
    store: &Store,
    table: &str,
    snap: &Snapshot,
    (now, cutoff): (SystemTime, i64),
    keep_from: u64,
    r: &Retention,
    entries: &[store::Entry],
    out: &mut Expired,
) -> Result<(), DeltaError> {
    let listing = log::list_log(store, table, None).await?;
    let times: BTreeMap<&str, Option<i64>> = entries.iter().map(|e| (e.path.as_str(), e.modified_ms)).collect();
    // The commits old enough to go, from the oldest up to the first that is not.
    let first = listing.commits.keys().next().copied().unwrap_or(0);
    let mut expirable = first;
    for (v, (path, _)) in &listing.commits {
        let old = times.get(path.as_str()).copied().flatten().is_some_and(|m| m <= cutoff);
        if *v != expirable || !old || *v >= keep_from {
            break;
        }
        expirable = v + 1;
    }
    if expirable == first {
        return Ok(());
    }
    // The log then starts at a checkpoint of the first version kept,
    // written first where there is none.
    let mut base = listing.newest_complete_checkpoint(expirable).map(|(v, _)| v);
    if base != Some(expirable) {
        if !r.dry_run {
            // The settings in force now decide the checkpoint's tombstones.
            match checkpoint::write_at(store, table, expirable, &snap.metadata, now).await {
                Ok(_) => out.checkpoint_written = Some(expirable),
                Err(e) => {
                    tracing::warn!(table, version = expirable, error = %e, "no checkpoint written");
                    println!("no checkpoint of version {expirable} written ({e}): the log behind it stays");
                }
            }
        }
        if r.dry_run || out.checkpoint_written.is_some() {
            base = Some(expirable);
        }
    }
    let Some(base) = base.filter(|b| *b > 0) else { return Ok(()) };
    // A hint naming a checkpoint about to go (a run killed between its
    // checkpoint and the hint's update) goes first: the hint is optional,
    // and without it readers list the log, while one naming a missing
    // checkpoint misleads those that open it directly.
    let hint = format!("{table}{LOG_DIR}_last_checkpoint");
    let hinted = match store.read(&hint).await? {
        Some(b) => serde_json::from_slice::<serde_json::Value>(&b).ok().and_then(|v| v.get("version")?.as_u64()),
        None => None,
    };
    if hinted.is_some_and(|v| v < base) && !r.dry_run {
        store.delete(&hint).await?;
    }
    let mut doomed: Vec<&store::Entry> =
        entries.iter().filter(|e| !e.is_dir && log_version(e.name()).is_some_and(|v| v < base)).collect();
    doomed.sort_by_key(|e| (log_version(e.name()), e.name().ends_with(".json")));
    let present: BTreeSet<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    for e in doomed {
        if !r.dry_run {
            delete_checksum(store, &e.path, &present).await?;
            store.delete(&e.path).await?;
        }
        out.log_files_deleted += 1;
        out.log_bytes_freed += e.len.unwrap_or(0);
        if out.deleted.len() < 1000 {
            out.deleted.push(e.path.clone());
        }
    }
    out.oldest_readable = out.oldest_readable.max(base);
    Ok(())
}

impl Expired {
    /// The counters a unit reports (the task's statistics).
    pub fn stats(&self) -> BTreeMap<String, u64> {
        let mut s = BTreeMap::new();
        s.insert("version".into(), self.version);
        s.insert("oldest_readable_version".into(), self.oldest_readable);
        s.insert("data_files_deleted".into(), self.data_files_deleted);
        s.insert("data_bytes_freed".into(), self.data_bytes_freed);
        s.insert("log_files_deleted".into(), self.log_files_deleted);
        s.insert("log_bytes_freed".into(), self.log_bytes_freed);
        s.insert("files_kept".into(), self.files_kept);
        s.insert("compactd_unnamed_kept".into(), self.compactd_unnamed_kept);
        // The same two names as an Iceberg retention's: what a policy's
        // `tables` view sums.
        s.insert("files_deleted".into(), self.data_files_deleted + self.log_files_deleted);
        s.insert("bytes_freed".into(), self.data_bytes_freed + self.log_bytes_freed);
        if let Some(v) = self.checkpoint_written {
            s.insert("checkpoint_written".into(), v);
        }
        s
    }
}

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "expired at version {}: {} data files ({} bytes) and {} log files deleted, versions from {} readable, \
             {} files kept",
            self.version,
            self.data_files_deleted,
            self.data_bytes_freed,
            self.log_files_deleted,
            self.oldest_readable,
            self.files_kept
        )?;
        if self.compactd_unnamed_kept > 0 {
            write!(f, ", {} unnamed compactd outputs left to vacuum-orphans", self.compactd_unnamed_kept)?;
        }
        if let Some(v) = self.checkpoint_written {
            write!(f, ", checkpoint {v} written")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
