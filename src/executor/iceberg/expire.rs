//! Retention of an Iceberg table: what Java's `ExpireSnapshots` does, as
//! one unit of an `expire` task, so that a compacted table's replaced
//! files leave the backend (on HDFS, the NameNode's heap).
//!
//! Which snapshots stay (Java's `RemoveSnapshots`, whose rules these are):
//! - every branch keeps its head and its ancestors younger than the
//!   snapshot age (`history.expire.max-snapshot-age-ms`, default 5 days,
//!   or the branch's own `max-snapshot-age-ms`), and at least its newest
//!   `min-snapshots-to-keep` (default 1) whatever their age;
//! - a tag keeps its snapshot;
//! - a branch or tag other than `main` older than its `max-ref-age-ms`
//!   (default: for ever) is removed, and then keeps nothing;
//! - a snapshot no branch or tag reaches stays while younger than the age.
//!
//! The expired snapshots leave the metadata in one commit (the next
//! `vN.metadata.json`, as every commit; the snapshot log loses their
//! entries and the history before them, statistics files their entries).
//! Then the files only they reached are deleted: the files a snapshot of
//! any metadata version still in `metadata/` names (live or deleted
//! entries, manifests, manifest lists, statistics) that no snapshot of the
//! current version reads. Last go the metadata versions older than the
//! current one that its `metadata-log` no longer names (Java keeps
//! `write.metadata.previous-versions-max` of them, 100 by default); a
//! reader can reach an older one only by its file name, as after Java's own
//! commits.
//!
//! Crash-safe by order, and a rerun finishes what a killed run began: the
//! commit comes first, then data and delete files, then manifests, then
//! manifest lists and statistics, then metadata versions, so every file
//! still to delete stays reachable from a metadata version still there.
//! Everything is computed again from the folder on each run. Right before
//! deleting, the table is read again: a file a commit made since reads is
//! kept.
//!
//! A file no metadata version names (a writer's files before its commit,
//! an unfinished compactd task's outputs) is never deleted here, whatever
//! the retention: such files are Iceberg's `remove_orphan_files`' and
//! compactd's `vacuum-orphans`'.
//!
//! Refused by name: a snapshot age shorter than the table's own, or fewer
//! snapshots than its `min-snapshots-to-keep`, unless forced; a table whose
//! `gc.enabled` is false (Java refuses too: its files may be another
//! table's); tables of a REST catalog (the catalog's own maintenance
//! applies); what [`Table::check_supported`] refuses.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use serde::Serialize;
use serde_json::{json, Value as Json};
use store::Store;

use super::catalog::{self, Catalog, METADATA_DIR};
use super::manifest;
use super::table::Table;
use super::{IcebergError, Swap};
use crate::executor::delta::expire::Retention;

/// The snapshot age when the table does not set one (Java's default).
pub const DEFAULT_MAX_SNAPSHOT_AGE: Duration = Duration::from_secs(5 * 24 * 3600);
const MAX_SNAPSHOT_AGE: &str = "history.expire.max-snapshot-age-ms";
const MIN_SNAPSHOTS: &str = "history.expire.min-snapshots-to-keep";
const MAX_REF_AGE: &str = "history.expire.max-ref-age-ms";
/// Commits lost to other writers before the unit gives up (to be retried).
const COMMIT_TRIES: u32 = 20;

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Expired {
    /// The metadata version read.
    pub version: u64,
    /// The version the expiry committed, if it removed snapshots.
    pub committed: Option<u64>,
    pub snapshots_expired: u64,
    pub snapshots_kept: u64,
    /// Branches and tags removed for their age.
    pub refs_removed: Vec<String>,
    pub data_files_deleted: u64,
    pub delete_files_deleted: u64,
    pub manifests_deleted: u64,
    /// Manifest lists and statistics files.
    pub lists_deleted: u64,
    pub metadata_files_deleted: u64,
    pub bytes_freed: u64,
    /// Files a retained snapshot reads.
    pub files_kept: u64,
    /// Paths deleted (or, dry, to delete), in order, at most 1,000.
    #[serde(skip)]
    pub deleted: Vec<String>,
}

impl Expired {
    /// The figures a task's status shows.
    pub fn stats(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (k, v) in [
            ("snapshots_expired", self.snapshots_expired),
            ("snapshots_kept", self.snapshots_kept),
            ("refs_removed", self.refs_removed.len() as u64),
            ("data_files_deleted", self.data_files_deleted),
            ("delete_files_deleted", self.delete_files_deleted),
            ("manifests_deleted", self.manifests_deleted),
            ("lists_deleted", self.lists_deleted),
            ("metadata_files_deleted", self.metadata_files_deleted),
            ("bytes_freed", self.bytes_freed),
            ("files_kept", self.files_kept),
            // The same name as a Delta retention's: what a policy's
            // `tables` view sums.
            (
                "files_deleted",
                self.data_files_deleted
                    + self.delete_files_deleted
                    + self.manifests_deleted
                    + self.lists_deleted
                    + self.metadata_files_deleted,
            ),
        ] {
            m.insert(k.to_string(), v);
        }
        m
    }
}

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expired {} snapshots ({} kept)", self.snapshots_expired, self.snapshots_kept)?;
        match self.committed {
            Some(v) => write!(f, " in metadata version {v}")?,
            None => write!(f, " at metadata version {}", self.version)?,
        }
        if !self.refs_removed.is_empty() {
            write!(f, ", refs removed: {}", self.refs_removed.join(", "))?;
        }
        write!(
            f,
            ": {} data, {} delete, {} manifest, {} list or statistics and {} metadata files deleted ({} bytes), {} \
             files kept",
            self.data_files_deleted,
            self.delete_files_deleted,
            self.manifests_deleted,
            self.lists_deleted,
            self.metadata_files_deleted,
            self.bytes_freed,
            self.files_kept
        )
    }
}

/// The rules of one run, the table's settings and the task's applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Snapshots older than this (wall ms) may go.
    pub expire_before_ms: i64,
    pub min_snapshots: u64,
    /// A branch or tag's default `max-ref-age-ms`.
    pub max_ref_age_ms: i64,
    pub now_ms: i64,
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn human(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        _ if s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ if s % 3600 == 0 => format!("{}h", s / 3600),
        _ => format!("{s}s"),
    }
}

/// The rules `r` asks of the table `t` at wall time `now`, or why the
/// retention must not run there.
pub fn settings(t: &Table, r: &Retention, now: SystemTime) -> Result<Settings, String> {
    let (age, min_snapshots, max_ref_age_ms) = rules(t, r)?;
    let now_ms = ms(now);
    Ok(Settings { expire_before_ms: now_ms.saturating_sub(age), min_snapshots, max_ref_age_ms, now_ms })
}

/// The snapshot age (ms), the snapshots to keep per branch and the refs'
/// default age (ms) `r` asks of `t`, or why it must not run there.
fn rules(t: &Table, r: &Retention) -> Result<(i64, u64, i64), String> {
    t.check_supported().map_err(|why| format!("nothing expired: {why}"))?;
    let props = t.properties();
    if props.get("gc.enabled").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
        return Err("gc.enabled is false: the table's owner turned off deleting its files (they may be another \
                    table's too); nothing expired"
            .into());
    }
    if r.log_older_than.is_some() {
        return Err("expire.log-older-than is a Delta table's setting: an Iceberg table keeps \
                    write.metadata.previous-versions-max metadata files; nothing expired"
            .into());
    }
    let number = |key: &str, default: i64| -> Result<i64, String> {
        match props.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| format!("the table's {key} {v:?} is not a number compactd reads; nothing expired")),
        }
    };
    let own_age = number(MAX_SNAPSHOT_AGE, DEFAULT_MAX_SNAPSHOT_AGE.as_millis() as i64)?;
    let own_min = number(MIN_SNAPSHOTS, 1)?.max(1) as u64;
    let max_ref_age_ms = number(MAX_REF_AGE, i64::MAX)?;
    let age = r.older_than.map_or(own_age, |d| d.as_millis().min(i64::MAX as u128) as i64);
    let min_snapshots = r.retain_last.unwrap_or(own_min).max(1);
    if !r.force {
        let refuse = |what: String| {
            Err(format!(
                "{what}: a reader of an older snapshot, or a writer that started from one, could lose files; refused \
                 (expire.force=true expires anyway)"
            ))
        };
        if age < own_age {
            return refuse(format!(
                "a snapshot age of {} is shorter than the table's {MAX_SNAPSHOT_AGE} ({})",
                human(age),
                human(own_age)
            ));
        }
        if min_snapshots < own_min {
            return refuse(format!(
                "keeping {min_snapshots} snapshots is fewer than the table's {MIN_SNAPSHOTS} ({own_min})"
            ));
        }
    }
    Ok((age, min_snapshots, max_ref_age_ms))
}

/// Which snapshots and refs stay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub kept: BTreeSet<i64>,
    pub expired: BTreeSet<i64>,
    /// The refs that stay, as the metadata writes them.
    pub refs: serde_json::Map<String, Json>,
    pub refs_removed: Vec<String>,
}

/// The snapshots and refs that stay under `s` (Java's rules, module doc).
pub fn plan(t: &Table, s: &Settings) -> Plan {
    let snapshots: BTreeMap<i64, &Json> =
        t.snapshots().iter().filter_map(|j| Some((j["snapshot-id"].as_i64()?, j))).collect();
    let ts = |id: i64| snapshots.get(&id).and_then(|j| j["timestamp-ms"].as_i64()).unwrap_or(0);
    let ancestors = |head: i64| {
        let mut out = vec![];
        let mut at = Some(head);
        while let Some(id) = at.filter(|id| snapshots.contains_key(id) && !out.contains(id)) {
            out.push(id);
            at = snapshots[&id]["parent-snapshot-id"].as_i64();
        }
        out
    };
    let mut refs: serde_json::Map<String, Json> = t.meta["refs"].as_object().cloned().unwrap_or_default();
    // A table written before refs: its current snapshot is `main`.
    if let (None, Some(current)) = (refs.get("main"), t.current_snapshot_id()) {
        if refs.is_empty() {
            refs.insert("main".into(), json!({"type": "branch", "snapshot-id": current}));
        }
    }
    let mut plan = Plan::default();
    for (name, r) in refs {
        let Some(id) = r["snapshot-id"].as_i64().filter(|id| snapshots.contains_key(id)) else {
            plan.refs_removed.push(name);
            continue;
        };
        let max_age = r["max-ref-age-ms"].as_i64().unwrap_or(s.max_ref_age_ms);
        if name != "main" && s.now_ms.saturating_sub(ts(id)) > max_age {
            plan.refs_removed.push(name);
            continue;
        }
        plan.refs.insert(name, r);
    }
    let mut reached = BTreeSet::new();
    for r in plan.refs.values() {
        let id = r["snapshot-id"].as_i64().expect("kept refs name a snapshot");
        if r["type"].as_str() == Some("tag") {
            plan.kept.insert(id);
            reached.insert(id);
            continue;
        }
        let before = r["max-snapshot-age-ms"].as_i64().map_or(s.expire_before_ms, |a| s.now_ms.saturating_sub(a));
        let min = r["min-snapshots-to-keep"].as_u64().unwrap_or(s.min_snapshots).max(1);
        let line = ancestors(id);
        reached.extend(line.iter().copied());
        let mut n = 0;
        for a in line {
            if n < min || ts(a) >= before {
                plan.kept.insert(a);
                n += 1;
            } else {
                break;
            }
        }
    }
    for (&id, _) in snapshots.iter() {
        if !reached.contains(&id) && ts(id) >= s.expire_before_ms {
            plan.kept.insert(id);
        }
    }
    // The current snapshot is `main`'s head, and stays however it is named.
    if let Some(c) = t.current_snapshot_id() {
        plan.kept.insert(c);
    }
    plan.expired = snapshots.keys().copied().filter(|id| !plan.kept.contains(id)).collect();
    plan
}

/// The metadata `t` becomes under `plan`, written at wall ms `now_ms`.
pub fn expired_metadata(t: &Table, plan: &Plan, now_ms: i64) -> Json {
    let mut m = t.meta.clone();
    let keep = |j: &Json| j["snapshot-id"].as_i64().is_some_and(|id| plan.kept.contains(&id));
    if let Some(a) = m["snapshots"].as_array_mut() {
        a.retain(keep);
    }
    m["refs"] = Json::Object(plan.refs.clone());
    // As Java: an entry of a snapshot no longer listed clears the history
    // before it, which would claim that snapshot's successor was current.
    if let Some(log) = m["snapshot-log"].as_array() {
        let mut kept = vec![];
        for e in log {
            if keep(e) {
                kept.push(e.clone());
            } else {
                kept.clear();
            }
        }
        m["snapshot-log"] = Json::Array(kept);
    }
    for key in ["statistics", "partition-statistics"] {
        if let Some(a) = m[key].as_array_mut() {
            a.retain(keep);
        }
    }
    let last_updated = m["last-updated-ms"].as_i64().unwrap_or(0);
    super::commit::log_previous(&mut m, t, last_updated);
    m["last-updated-ms"] = json!(now_ms.max(last_updated));
    m
}

/// The files the snapshots of one metadata version reach, by kind (store
/// paths inside the table's location).
#[derive(Debug, Default)]
struct Reached {
    data: BTreeSet<String>,
    deletes: BTreeSet<String>,
    manifests: BTreeSet<String>,
    lists: BTreeSet<String>,
}

impl Reached {
    fn contains(&self, p: &str) -> bool {
        self.data.contains(p) || self.deletes.contains(p) || self.manifests.contains(p) || self.lists.contains(p)
    }

    fn len(&self) -> usize {
        self.data.len() + self.deletes.len() + self.manifests.len() + self.lists.len()
    }
}

/// Adds what the snapshots of `t` reach to `out`. `live_only`: only the
/// files a reader of those snapshots reads (live entries), and a manifest
/// or list that cannot be read is an error (what it names must not be
/// deleted); otherwise every entry, and what is missing is skipped (an
/// earlier run or another writer's expiry deleted it).
async fn reach(
    store: &Store,
    t: &Table,
    live_only: bool,
    seen: &mut HashSet<String>,
    out: &mut Reached,
) -> Result<(), IcebergError> {
    let add = |set: &mut BTreeSet<String>, uri: &str| {
        if let Ok(p) = t.store_path(uri) {
            set.insert(p);
        }
    };
    for key in ["statistics", "partition-statistics"] {
        for s in t.meta[key].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(p) = s["statistics-path"].as_str() {
                add(&mut out.lists, p);
            }
        }
    }
    for s in t.snapshots() {
        let Some(list) = s["manifest-list"].as_str() else {
            if live_only {
                return Err(IcebergError::Table {
                    table: t.dir.clone(),
                    problem: format!("snapshot {} has no manifest list: nothing expired", s["snapshot-id"]),
                });
            }
            continue;
        };
        add(&mut out.lists, list);
        if !seen.insert(format!("{live_only} {list}")) {
            continue;
        }
        let l = match manifest::read_list(store, t, list).await {
            Ok(l) => l,
            Err(IcebergError::Table { problem, .. }) if !live_only && problem.contains("is missing") => continue,
            Err(e) => return Err(e),
        };
        for m in &l.manifests {
            add(&mut out.manifests, &m.path);
            if !seen.insert(format!("{live_only} {}", m.path)) {
                continue;
            }
            let read = match manifest::read_manifest(store, t, m).await {
                Ok(r) => r,
                Err(IcebergError::Table { problem, .. }) if !live_only && problem.contains("is missing") => continue,
                Err(e) => return Err(e),
            };
            for e in read.entries.iter().filter(|e| !live_only || e.is_live()) {
                add(if e.content == 0 { &mut out.data } else { &mut out.deletes }, &e.file_path);
            }
        }
    }
    Ok(())
}

/// The metadata versions in `metadata/` (fs tables: `vN.metadata.json`)
/// older than `below`, parsed.
async fn older_versions(store: &Store, dir: &str, below: u64) -> Result<Vec<Table>, IcebergError> {
    let mut out = vec![];
    for e in store.list(&format!("{dir}{METADATA_DIR}")).await? {
        let Some(n) = catalog::version_of(e.name()).filter(|n| *n < below) else { continue };
        let Some(bytes) = store.read(&e.path).await? else { continue };
        let meta = serde_json::from_slice::<Json>(&bytes).map_err(|err| IcebergError::Table {
            table: dir.to_string(),
            problem: format!("{} does not parse ({err}): nothing expired", e.path),
        })?;
        out.push(Table { dir: dir.to_string(), version: n, meta });
    }
    Ok(out)
}

/// Why the retention `r` must not run on the Iceberg table at `dir`, asked
/// before a task runs (by `submit --data` and by the task's manager).
pub async fn refusal(store: &Store, cat: &Catalog, dir: &str, r: &Retention) -> Result<Option<String>, IcebergError> {
    if let Catalog::Rest(_) = cat {
        return Ok(Some(rest_refusal(dir)));
    }
    let t = cat.load(store, dir).await?;
    if let Err(e) = cat.check_writers(store, dir) {
        return Ok(Some(e.to_string()));
    }
    Ok(rules(&t, r).err().map(|why| format!("{dir}: {why}")))
}

fn rest_refusal(dir: &str) -> String {
    format!(
        "{dir}: a REST catalog's table: its snapshots are expired through the catalog (its own maintenance, or \
         Spark's expire_snapshots); compactd expires file-system tables"
    )
}

/// Runs the retention of the table at `dir` at wall time `now`.
pub async fn run(
    store: &Store,
    cat: &Catalog,
    dir: &str,
    r: &Retention,
    now: SystemTime,
) -> Result<Expired, IcebergError> {
    let refused = |problem: String| IcebergError::Table { table: dir.to_string(), problem };
    if let Catalog::Rest(_) = cat {
        return Err(refused(rest_refusal(dir)));
    }
    cat.check_writers(store, dir)?;
    let mut out = Expired::default();
    // The version the expiry committed (or, dry, would), or the one read.
    let after = 'commit: {
        for _ in 0..COMMIT_TRIES {
            let head = cat.load(store, dir).await?;
            let s = settings(&head, r, now).map_err(refused)?;
            let p = plan(&head, &s);
            out.version = head.version;
            out.snapshots_expired = p.expired.len() as u64;
            out.snapshots_kept = p.kept.len() as u64;
            out.refs_removed = p.refs_removed.clone();
            if p.expired.is_empty() && p.refs_removed.is_empty() {
                break 'commit head;
            }
            let meta = expired_metadata(&head, &p, s.now_ms);
            let next = Table { dir: dir.to_string(), version: head.version + 1, meta };
            if r.dry_run {
                break 'commit next;
            }
            match cat.commit(store, &head, &next.meta).await? {
                Swap::Won => {
                    out.committed = Some(next.version);
                    super::commit::remove_dropped_metadata(store, &head, &next.meta).await;
                    break 'commit next;
                }
                // Another writer committed first: read again, plan again.
                Swap::Lost => continue,
                Swap::Unknown(why) => return Err(refused(format!("the commit's outcome is unknown ({why})"))),
            }
        }
        return Err(refused(format!("{COMMIT_TRIES} commits in a row lost to other writers: nothing expired")));
    };
    if !r.dry_run {
        // A run killed between its commit and the hint brings it up here.
        cat.committed(store, dir, after.version).await;
    }
    // Every version before the one now current, whose files are candidates.
    let versions = older_versions(store, dir, after.version).await?;
    let mut seen = HashSet::new();
    let mut all = Reached::default();
    for v in &versions {
        reach(store, v, false, &mut seen, &mut all).await?;
    }
    let mut kept = Reached::default();
    reach(store, &after, true, &mut seen, &mut kept).await?;
    // Metadata versions its log no longer names.
    let logged: BTreeSet<String> = after.meta["metadata-log"]
        .as_array()
        .map(|l| {
            l.iter().filter_map(|e| e["metadata-file"].as_str()).filter_map(|u| after.store_path(u).ok()).collect()
        })
        .unwrap_or_default();
    let stale: Vec<String> =
        versions.iter().map(|v| catalog::version_path(dir, v.version)).filter(|p| !logged.contains(p)).collect();

    let files: Vec<store::Entry> = store.list_stream(dir, true).try_collect().await?;
    let sizes: BTreeMap<&str, u64> =
        files.iter().filter(|e| !e.is_dir).map(|e| (e.path.as_str(), e.len.unwrap_or(0))).collect();
    if !r.dry_run {
        // A commit made since (a writer's, or a RESTORE-like rollback) may
        // read files the plan would delete.
        let now_head = cat.load(store, dir).await?;
        if now_head.version != after.version {
            reach(store, &now_head, true, &mut seen, &mut kept).await?;
        }
    }
    out.files_kept = kept.len() as u64;
    let doomed = |set: &BTreeSet<String>| -> Vec<String> {
        set.iter().filter(|p| !kept.contains(p) && sizes.contains_key(p.as_str())).cloned().collect()
    };
    let steps = [
        (doomed(&all.data), 0),
        (doomed(&all.deletes), 1),
        (doomed(&all.manifests), 2),
        (doomed(&all.lists), 3),
        (stale.into_iter().filter(|p| sizes.contains_key(p.as_str())).collect(), 4),
    ];
    for (paths, kind) in steps {
        if !r.dry_run {
            // Hadoop's checksums first: a run killed between the two leaves
            // files the rerun finds, not checksums nothing names.
            let sums: Vec<String> = paths
                .iter()
                .map(|p| crate::executor::delta::expire::checksum_of(p))
                .filter(|c| sizes.contains_key(c.as_str()))
                .collect();
            store.delete_many(&sums).await?;
            store.delete_many(&paths).await?;
        }
        for p in paths {
            out.bytes_freed += sizes.get(p.as_str()).copied().unwrap_or(0);
            *match kind {
                0 => &mut out.data_files_deleted,
                1 => &mut out.delete_files_deleted,
                2 => &mut out.manifests_deleted,
                3 => &mut out.lists_deleted,
                _ => &mut out.metadata_files_deleted,
            } += 1;
            if out.deleted.len() < 1000 {
                out.deleted.push(p);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
