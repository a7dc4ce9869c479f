//! Orphans of the `iceberg` executor: files a unit or a commit wrote into
//! a table and no snapshot names (a unit killed before staging, a commit
//! killed before its metadata version, outputs of an attempt the commit
//! did not take). No reader sees them; they only take space.
//!
//! Invariants:
//! - Only files compactd names are ever orphans: data files
//!   `compactd-<task>-r<round>-u<unit hash>-a<attempt>-<k>.parquet`,
//!   manifests `metadata/compactd-<task>-r<round>-a<attempt>-t<try>-…avro`
//!   and manifest lists `metadata/snap-<id>-1-compactd-<task>-…avro`. Other
//!   writers' unreferenced files are their own (and Iceberg's
//!   `remove_orphan_files`') business.
//! - A file any snapshot of any metadata version still in `metadata/`
//!   (`vN.metadata.json`, or a REST catalog's `NNNNN-<uuid>.metadata.json`),
//!   or of the current version its catalog loads, names (data files in
//!   every entry, deleted ones too, manifests and lists) is never an
//!   orphan: a reader may time-travel to it.
//! - [`vacuum`] deletes only the orphans its caller chose and reads the
//!   table again right before, so a file committed meanwhile is kept.

use std::collections::{BTreeSet, HashSet};

use futures::TryStreamExt;
use store::Store;

use super::catalog::{Catalog, METADATA_DIR};
use super::manifest;
use super::table::Table;
use super::IcebergError;
pub use crate::executor::delta::orphans::Orphan;

/// The task that wrote a compactd-named file of an Iceberg table.
pub fn task_of(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    if let Some(n) = crate::executor::delta::orphans::output_name(name) {
        return Some(n.task);
    }
    // `snap-<id>-1-compactd-…` or `compactd-…`, then
    // `<task>-r<round>-a<attempt>-t<try>[-<m or r><k>].avro`.
    let rest = match name.strip_prefix("snap-") {
        Some(r) => r.split_once("-1-compactd-")?.1,
        None => name.strip_prefix("compactd-")?,
    };
    let rest = rest.strip_suffix(".avro")?;
    let (task, _) = rest.rsplit_once("-t").and_then(|(head, _)| head.rsplit_once("-a"))?;
    let (task, round) = task.rsplit_once("-r")?;
    (!task.is_empty() && round.bytes().all(|b| b.is_ascii_digit())).then_some(task)
}

fn is_compactd_file(name: &str) -> bool {
    (name.starts_with("compactd-") && (name.ends_with(".parquet") || name.ends_with(".avro")))
        || (name.starts_with("snap-") && name.contains("-1-compactd-") && name.ends_with(".avro"))
}

/// `vN.metadata.json` (a file-system table's) or
/// `NNNNN-<uuid>.metadata.json` (a catalog's: a REST table's versions).
fn is_metadata_version(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".metadata.json") else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match (stem.strip_prefix('v'), stem.split_once('-')) {
        (Some(n), _) if digits(n) => true,
        (_, Some((n, uuid))) => digits(n) && uuid.len() >= 32,
        _ => false,
    }
}

/// Every file (store path) a snapshot of a retained metadata version names:
/// the current version `cat` loads, and every version in `metadata/`.
async fn referenced(store: &Store, cat: &Catalog, dir: &str) -> Result<BTreeSet<String>, IcebergError> {
    let head = cat.load(store, dir).await?;
    let mut out = BTreeSet::new();
    let mut lists_seen = HashSet::new();
    let mut manifests_seen = HashSet::new();
    let mut versions = vec![head.clone()];
    for e in store.list(&format!("{dir}{METADATA_DIR}")).await? {
        if !is_metadata_version(e.name()) {
            continue;
        }
        let Some(bytes) = store.read(&e.path).await? else { continue };
        let Ok(meta) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            return Err(IcebergError::Table { table: dir.into(), problem: format!("{} does not parse", e.path) });
        };
        versions.push(Table { dir: dir.to_string(), version: 0, meta });
    }
    for t in &versions {
        for s in t.snapshots() {
            let Some(list) = s["manifest-list"].as_str() else { continue };
            if !lists_seen.insert(list.to_string()) {
                continue;
            }
            let Ok(sp) = t.store_path(list) else { continue };
            out.insert(sp.clone());
            if !store.exists(&sp).await? {
                continue;
            }
            let l = manifest::read_list(store, &head, list).await?;
            for m in &l.manifests {
                if let Ok(sp) = t.store_path(&m.path) {
                    out.insert(sp);
                }
                if !manifests_seen.insert(m.path.clone()) {
                    continue;
                }
                match manifest::read_manifest(store, &head, m).await {
                    Ok(read) => {
                        for e in read.entries {
                            if let Ok(sp) = t.store_path(&e.file_path) {
                                out.insert(sp);
                            }
                        }
                    }
                    // Removed by the table's own expiry: its files are not
                    // compactd's to judge.
                    Err(IcebergError::Table { problem, .. }) if problem.contains("is missing") => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(out)
}

/// What `check --data` finds in one Iceberg table.
#[derive(Debug, Default)]
pub struct Audit {
    /// compactd's files no snapshot names.
    pub orphans: Vec<Orphan>,
    /// The current snapshot, if the table has one.
    pub snapshot: Option<i64>,
    /// Its live files (data and delete files) that do not exist: readers
    /// of the snapshot fail.
    pub missing: Vec<String>,
}

/// The orphans of the table at `dir` and the live files of its current
/// snapshot that are missing; `cat` says where its current version is.
pub async fn audit(store: &Store, cat: &Catalog, dir: &str) -> Result<Audit, IcebergError> {
    let refs = referenced(store, cat, dir).await?;
    let head = cat.load(store, dir).await?;
    let files: Vec<store::Entry> = store.list_stream(dir, true).try_collect().await?;
    let listed: HashSet<&str> = files.iter().map(|e| e.path.as_str()).collect();
    let orphans = files
        .iter()
        .filter(|e| !e.is_dir && e.special.is_none() && is_compactd_file(e.name()) && !refs.contains(&e.path))
        .map(|e| Orphan { bytes: e.len.unwrap_or(0), modified_ms: e.modified_ms, path: e.path.clone() })
        .collect();
    let mut missing = vec![];
    let snapshot = head.current_snapshot();
    if let Some(s) = &snapshot {
        let list = manifest::read_list(store, &head, &s.manifest_list).await?;
        for m in &list.manifests {
            for e in manifest::read_manifest(store, &head, m).await?.entries.iter().filter(|e| e.is_live()) {
                // A file outside the data root is not this check's to see.
                let Ok(sp) = head.store_path(&e.file_path) else { continue };
                if !listed.contains(sp.as_str()) && !store.exists(&sp).await? {
                    missing.push(e.file_path.clone());
                }
            }
        }
    }
    Ok(Audit { orphans, snapshot: snapshot.map(|s| s.id), missing })
}

/// The orphans of the table at `dir`.
pub async fn find(store: &Store, cat: &Catalog, dir: &str) -> Result<Vec<Orphan>, IcebergError> {
    Ok(audit(store, cat, dir).await?.orphans)
}

/// Whether the folder `dir` holds Iceberg metadata (`metadata/*.metadata.json`).
pub async fn is_table(store: &Store, dir: &str) -> bool {
    match store.list(&format!("{dir}{METADATA_DIR}")).await {
        Ok(entries) => entries.iter().any(|e| e.name().ends_with(".metadata.json")),
        Err(_) => false,
    }
}

/// The Iceberg file-system tables among `<db>/<schema>/<table>/` folders
/// (a `metadata/` folder holding a `vN.metadata.json`), or just `only` if
/// it is one.
pub async fn tables(store: &Store, only: Option<&str>) -> Result<Vec<String>, IcebergError> {
    if let Some(t) = only {
        let dir = format!("{}/", t.trim_end_matches('/'));
        return Ok(if is_table(store, &dir).await { vec![dir] } else { vec![] });
    }
    let mut out = vec![];
    for db in store.list("").await?.into_iter().filter(|e| e.is_dir) {
        for schema in store.list(&db.path).await?.into_iter().filter(|e| e.is_dir) {
            for table in store.list(&schema.path).await?.into_iter().filter(|e| e.is_dir) {
                if is_table(store, &table.path).await {
                    out.push(table.path);
                }
            }
        }
    }
    Ok(out)
}

/// Deletes `chosen` unless the table, read again now, names them; returns
/// those deleted and those kept because a snapshot committed since names
/// them.
pub async fn vacuum(
    store: &Store,
    cat: &Catalog,
    dir: &str,
    chosen: Vec<Orphan>,
    dry_run: bool,
) -> Result<(Vec<Orphan>, Vec<Orphan>), IcebergError> {
    crate::executor::delta::orphans::delete_unnamed(store, chosen, dry_run, referenced(store, cat, dir)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_is_read_from_every_name_compactd_gives() {
        let t = "aaaaffff.16176931.56000000.0";
        for name in [
            format!("compactd-{t}-r3-u00ff00ff00ff00ff-a1002-7.parquet"),
            format!("compactd-{t}-r3-a1-t0-m0.avro"),
            format!("compactd-{t}-r3-a1-t2-r11.avro"),
            format!("snap-123-1-compactd-{t}-r3-a1-t0.avro"),
        ] {
            assert_eq!(task_of(&format!("db/s/t/x/{name}")), Some(t), "{name}");
            assert!(is_compactd_file(&name));
        }
        assert_eq!(task_of("db/s/t/metadata/snap-1-1-1b2c.avro"), None);
        for (name, version) in [
            ("v12.metadata.json", true),
            ("00003-8d62fd16-6ef8-4e4f-a9d7-16cbb1ae478f.metadata.json", true),
            ("v.metadata.json", false),
            ("00003-short.metadata.json", false),
            ("v3.gz.metadata.json", false),
            ("version-hint.text", false),
        ] {
            assert_eq!(is_metadata_version(name), version, "{name}");
        }
        assert!(!is_compactd_file("snap-1-1-1b2c.avro"));
    }
}
