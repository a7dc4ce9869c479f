//! `compactd check --data`'s audit of one Delta table, from one listing of
//! its files and one read of each retained log file: its orphans
//! ([`super::orphans`]) and the versions whose active files are missing.
//!
//! Invariants:
//! - Every version the retained log can rebuild is replayed, from the
//!   oldest (commit 0, or the oldest whole checkpoint) to the newest; the
//!   versions it cannot (a commit missing with no checkpoint after it) are
//!   named as such, never guessed.
//! - A file counts as present when the table's one recursive listing shows
//!   it: no request per file, whatever the number of versions.
//! - Nothing is written; a table this reader cannot fully read (content it
//!   does not read, a protocol compactd does not support, a file named
//!   outside the table) is an error naming why.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use futures::TryStreamExt;
use store::Store;

use super::log::{self, Snapshot, LOG_DIR};
use super::orphans::{self, Orphan};
use super::DeltaError;

/// Example paths of missing files kept for the report.
const EXAMPLES: usize = 3;

/// What the audit of a table found.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// The versions the retained log can rebuild: the oldest and the newest.
    pub oldest: u64,
    pub newest: u64,
    pub orphans: Vec<Orphan>,
    /// Versions whose active files include one that does not exist.
    pub damaged: Vec<RangeInclusive<u64>>,
    /// Versions that cannot be read because a retention deleted their
    /// files as the table's own retention allows: each file they miss was
    /// removed since, longer ago than `delta.deletedFileRetentionDuration`
    /// (Delta's log outlives its files: 30 days against 7 by default).
    pub expired: Vec<RangeInclusive<u64>>,
    /// Versions within `oldest..=newest` the log cannot rebuild.
    pub unrebuildable: Vec<RangeInclusive<u64>>,
    /// Distinct files named active by some version and absent, and a few
    /// of them (store paths).
    pub missing_files: usize,
    pub examples: Vec<String>,
}

/// Appends `v` to a list of ranges of increasing versions.
fn push(ranges: &mut Vec<RangeInclusive<u64>>, v: u64) {
    match ranges.last_mut() {
        Some(r) if *r.end() + 1 == v => *r = *r.start()..=v,
        _ => ranges.push(v..=v),
    }
}

/// `3-7, 9, 12-20`.
pub fn show(ranges: &[RangeInclusive<u64>]) -> String {
    let one = |r: &RangeInclusive<u64>| {
        if r.start() == r.end() {
            r.start().to_string()
        } else {
            format!("{}-{}", r.start(), r.end())
        }
    };
    ranges.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The replayed table and which of its active files are missing.
struct Replay<'a> {
    table: &'a str,
    present: &'a BTreeSet<String>,
    snap: Snapshot,
    /// Active files (by path key) that are absent -> their store paths.
    missing: BTreeMap<String, String>,
}

impl Replay<'_> {
    fn store_path(&self, path: &str) -> Result<String, DeltaError> {
        log::data_path(self.table, path)
    }

    /// Applies one version's actions (a commit, or a checkpoint on a fresh
    /// snapshot), noting each file that becomes active and is absent in
    /// `ever` (and the first few in `examples`).
    fn apply(
        &mut self,
        actions: Vec<log::Action>,
        ever: &mut BTreeSet<String>,
        examples: &mut Vec<String>,
    ) -> Result<(), DeltaError> {
        for a in &actions {
            if let Some(r) = &a.remove {
                self.missing.remove(&log::path_key(&r.path));
            }
            if let Some(add) = &a.add {
                let p = self.store_path(&add.path)?;
                if self.present.contains(&p) {
                    self.missing.remove(&log::path_key(&add.path));
                } else {
                    if ever.insert(p.clone()) && examples.len() < EXAMPLES {
                        examples.push(p.clone());
                    }
                    self.missing.insert(log::path_key(&add.path), p);
                }
            }
        }
        self.snap.apply(actions);
        Ok(())
    }
}

async fn read_actions(
    store: &Store,
    path: &str,
    len: Option<u64>,
    is_commit: bool,
) -> Result<Option<Vec<log::Action>>, DeltaError> {
    if is_commit {
        log::read_commit_file(store, path, len).await
    } else {
        log::read_checkpoint_file(store, path, len).await
    }
}

/// The files a missing one of which is damage, not a retention's work:
/// the newest version's, and those removed within the table's retention
/// (by path key), as of wall time `now_ms`.
async fn still_needed(store: &Store, table: &str, now_ms: i64) -> Result<BTreeSet<String>, DeltaError> {
    let state = log::load_with_tombstones(store, table).await?;
    let retention = match state.metadata.configuration.get("delta.deletedFileRetentionDuration").cloned().flatten() {
        Some(s) => super::checkpoint::parse_interval(&s).unwrap_or(super::expire::DEFAULT_FILE_RETENTION),
        None => super::expire::DEFAULT_FILE_RETENTION,
    };
    let cutoff = now_ms - retention.as_millis() as i64;
    let mut out: BTreeSet<String> = state.files.keys().cloned().collect();
    for ((key, _), t) in state.tombstones.iter().flatten() {
        // Delta reads a tombstone without a time as removed at 0.
        if t.deletion_timestamp.unwrap_or(0) > cutoff {
            out.insert(key.clone());
        }
    }
    Ok(out)
}

/// Audits the table at `table` (`<db>/<schema>/<table>/`) at wall time
/// `now_ms` (which tombstones the table's retention has expired).
pub async fn audit(store: &Store, table: &str, now_ms: i64) -> Result<Audit, DeltaError> {
    let bad = |problem: String| DeltaError::Table { table: table.to_string(), problem };
    let needed = still_needed(store, table, now_ms).await?;
    let listing = log::list_log(store, table, None).await?;
    orphans::refuse_unread(table, &listing)?;
    let Some(&newest) = listing.commits.keys().next_back() else {
        return Err(bad("no _delta_log/ commits: not a Delta table (or the wrong --data)".into()));
    };
    let log_dir = format!("{table}{LOG_DIR}");
    let files: Vec<store::Entry> = store.list_stream(table, true).try_collect().await?;
    let present: BTreeSet<String> =
        files.iter().filter(|e| !e.is_dir && !e.path.starts_with(&log_dir)).map(|e| e.path.clone()).collect();
    let starts = listing.commits.contains_key(&0).then_some(0).into_iter();
    let oldest = starts
        .chain(listing.checkpoints.keys().map(|(v, _)| *v).filter(|v| listing.complete_checkpoint(*v).is_some()))
        .min()
        .ok_or_else(|| bad("commit 0 is gone and no checkpoint is whole: no version can be rebuilt".into()))?;
    let mut out = Audit { oldest, newest, ..Audit::default() };
    let mut refs = BTreeSet::new();
    let mut read: BTreeSet<String> = BTreeSet::new();
    let mut ever_missing: BTreeSet<String> = BTreeSet::new();
    let mut replay: Option<Replay> = None;
    for v in oldest..=newest {
        let commit = listing.commits.get(&v);
        // From the previous version, or afresh: from a whole checkpoint of
        // this version, or from nothing at commit 0.
        let (mut r, files): (Replay, Vec<(String, Option<u64>, bool)>) = match (replay.take(), commit) {
            (Some(r), Some((path, len))) => (r, vec![(path.clone(), *len, true)]),
            _ => {
                let fresh = Replay { table, present: &present, snap: Snapshot::default(), missing: BTreeMap::new() };
                let checkpoint = listing.complete_checkpoint(v);
                match (checkpoint, commit) {
                    (Some(parts), _) => (fresh, parts.into_iter().map(|(p, l)| (p, l, false)).collect()),
                    (None, Some((path, len))) if v == 0 => (fresh, vec![(path.clone(), *len, true)]),
                    (None, _) => {
                        push(&mut out.unrebuildable, v);
                        continue;
                    }
                }
            }
        };
        for (path, len, is_commit) in files {
            let actions =
                read_actions(store, &path, len, is_commit).await?.ok_or_else(|| bad(format!("{path} vanished")))?;
            read.insert(path);
            orphans::note_refs(table, &actions, &mut refs);
            r.apply(actions, &mut ever_missing, &mut out.examples)?;
        }
        if r.missing.keys().any(|k| needed.contains(k)) {
            push(&mut out.damaged, v);
        } else if !r.missing.is_empty() {
            push(&mut out.expired, v);
        }
        replay = Some(r);
    }
    out.missing_files = ever_missing.len();
    let last = replay.ok_or_else(|| bad(format!("version {newest} cannot be rebuilt from the retained log")))?;
    last.snap.check_supported().map_err(|why| bad(format!("not checked: {why}")))?;
    // Every retained log file names references, as for `orphans::find`:
    // also the commits before the oldest rebuildable version and the
    // checkpoints the replay did not need (incomplete ones included).
    let rest = listing.commits.values().map(|(p, l)| (p, *l, true));
    let rest = rest.chain(listing.checkpoints.values().flat_map(|parts| parts.values()).map(|(p, l)| (p, *l, false)));
    for (path, len, is_commit) in rest {
        if !read.contains(path) {
            if let Some(a) = read_actions(store, path, len, is_commit).await? {
                orphans::note_refs(table, &a, &mut refs);
            }
        }
    }
    out.orphans = orphans::find_in(table, &files, &refs);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "db/s/t/";
    /// Day 100 (ms since the epoch).
    const NOW: i64 = 100 * 86_400_000;

    async fn commit(store: &Store, v: u64, actions: &[serde_json::Value]) {
        let body: Vec<String> = actions.iter().map(|a| a.to_string()).collect();
        store.put(&log::commit_path(T, v), body.join("\n").into_bytes()).await.unwrap();
    }

    fn add(p: &str) -> serde_json::Value {
        json!({"add": {"path": p, "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": true}})
    }

    #[tokio::test]
    async fn every_version_whose_active_files_are_missing_is_named_as_ranges() {
        let store = Store::memory().await;
        let v0 = [
            json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
            json!({"metaData": {"id": "x", "partitionColumns": [], "configuration": {}}}),
        ];
        commit(&store, 0, &v0).await;
        commit(&store, 1, &[add("a.parquet")]).await;
        commit(&store, 2, &[add("b%20c.parquet")]).await;
        // Removed on day 99, within the week the table keeps its files.
        let removed_day_99 =
            |p: &str| json!({"remove": {"path": p, "dataChange": true, "deletionTimestamp": NOW - 86_400_000}});
        commit(&store, 3, &[removed_day_99("a.parquet")]).await;
        commit(&store, 4, &[add("d.parquet")]).await;
        commit(&store, 5, &[removed_day_99("d.parquet")]).await;
        store.put(&format!("{T}b c.parquet"), b"x".to_vec()).await.unwrap();
        store.put(&format!("{T}compactd-x-r1-u0123456789abcdef-a1-0.parquet"), b"x".to_vec()).await.unwrap();
        let a = audit(&store, T, NOW).await.unwrap();
        assert_eq!((a.oldest, a.newest), (0, 5));
        assert_eq!(show(&a.damaged), "1-2, 4");
        assert!(a.expired.is_empty());
        assert_eq!(a.missing_files, 2);
        assert_eq!(a.examples, vec![format!("{T}a.parquet"), format!("{T}d.parquet")]);
        assert!(a.unrebuildable.is_empty());
        assert_eq!(a.orphans.len(), 1, "{:?}", a.orphans);
        // Ten days later the table's retention has passed: a VACUUM may
        // have deleted a and d, so versions 1-2 and 4 are expired, not
        // damaged; b, still active, is what damage would be.
        let later = audit(&store, T, NOW + 10 * 86_400_000).await.unwrap();
        assert_eq!((show(&later.damaged), show(&later.expired)), (String::new(), "1-2, 4".to_string()));
        store.delete(&format!("{T}b c.parquet")).await.unwrap();
        let later = audit(&store, T, NOW + 10 * 86_400_000).await.unwrap();
        assert_eq!(show(&later.damaged), "2-5");
        store.put(&format!("{T}b c.parquet"), b"x".to_vec()).await.unwrap();
        // A gap the log cannot bridge up to the newest version fails the audit, naming it.
        store.delete(&log::commit_path(T, 4)).await.unwrap();
        let err = audit(&store, T, NOW).await.unwrap_err().to_string();
        assert!(err.contains("no commit 4") && err.contains("not contiguous"), "{err}");
    }
}
