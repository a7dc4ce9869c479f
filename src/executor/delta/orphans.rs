//! Orphans of the `delta` executor: data files an attempt wrote into a
//! table and never committed (killed before its commit, or a commit lost
//! to a conflict whose cleanup failed). No version of the table names them,
//! so no reader sees them; they only take space.
//!
//! Invariants:
//! - Only files compactd names (`compactd-<task>-r<round>-a<attempt>-<k>.parquet`)
//!   are ever orphans: other writers' uncommitted files are their own (and
//!   Delta's `VACUUM`'s) business.
//! - A file any retained log entry names (an `add` or a `remove` in a
//!   commit or checkpoint still in `_delta_log/`) is never an orphan: a
//!   reader may time-travel to it.
//! - [`vacuum`] deletes only orphans older than its `older_than` by the
//!   backend's own modification time, and reads the log again right before
//!   deleting, so a file committed meanwhile is kept. An attempt still
//!   writing is younger than any sensible `older_than` (it must exceed the
//!   executor timeout).

use std::collections::BTreeSet;

use futures::TryStreamExt;
use serde::Serialize;
use store::Store;

use super::log::{self, LOG_DIR};
use super::DeltaError;

/// A file no retained version names.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Orphan {
    pub path: String,
    pub bytes: u64,
    /// By the backend's clock, where the listing carries it.
    pub modified_ms: Option<i64>,
}

/// Every file path (as a store path) named by an `add` or `remove` in the
/// log files still present.
async fn referenced(store: &Store, table: &str) -> Result<BTreeSet<String>, DeltaError> {
    let mut out = BTreeSet::new();
    let log_dir = format!("{table}{LOG_DIR}");
    let entries: Vec<store::Entry> = store.list_stream(&log_dir, true).try_collect().await?;
    for e in entries {
        let name = e.name();
        // A file named where this reader cannot look (V2 checkpoints and
        // their sidecars) could be the only reference to a live file: no
        // file of such a table is ever called an orphan.
        let nested = e.path.strip_prefix(log_dir.as_str()).is_some_and(|n| n.contains('/'));
        if nested || (name.contains(".checkpoint.") && !log::is_checkpoint(name)) {
            return Err(DeltaError::Table {
                table: table.to_string(),
                problem: format!(
                    "{} is log content compactd does not read (a V2 checkpoint or sidecar?): orphans are not \
                     named in this table",
                    e.path
                ),
            });
        }
        let actions = if name.ends_with(".json") && name.len() == 25 {
            match log::read_commit_file(store, &e.path, e.len).await? {
                Some(a) => a,
                None => continue,
            }
        } else if log::is_checkpoint(name) {
            match log::read_checkpoint_file(store, &e.path, e.len).await? {
                Some(a) => a,
                None => continue,
            }
        } else {
            continue;
        };
        for a in actions {
            let p = a.add.map(|a| a.path).or(a.remove.map(|r| r.path));
            if let Some(p) = p {
                // A path that does not decode cannot name a file of ours.
                if let Ok(sp) = log::data_path(table, &p) {
                    out.insert(sp);
                }
            }
        }
    }
    Ok(out)
}

/// True for a name the `delta` executor gives its outputs.
pub fn is_compactd_output(name: &str) -> bool {
    name.starts_with("compactd-") && name.ends_with(".parquet")
}

/// The orphans of the table at `table` (`<db>/<schema>/<table>/`). A table
/// compactd would not write to (its protocol asks for what compactd does
/// not read, such as V2 checkpoints) is refused: its log may name files in
/// ways this reader does not see.
pub async fn find(store: &Store, table: &str) -> Result<Vec<Orphan>, DeltaError> {
    let snap = log::load(store, table).await?;
    snap.check_supported()
        .map_err(|why| DeltaError::Table { table: table.to_string(), problem: format!("orphans not named: {why}") })?;
    let refs = referenced(store, table).await?;
    let log_dir = format!("{table}{LOG_DIR}");
    let files: Vec<store::Entry> = store.list_stream(table, true).try_collect().await?;
    let mut out = vec![];
    for e in files {
        if e.is_dir || e.special.is_some() || e.path.starts_with(&log_dir) || !is_compactd_output(e.name()) {
            continue;
        }
        if !refs.contains(&e.path) {
            out.push(Orphan { bytes: e.len.unwrap_or(0), modified_ms: e.modified_ms, path: e.path });
        }
    }
    Ok(out)
}

/// The Delta tables among `<db>/<schema>/<table>/` folders of the data
/// root (a `_delta_log/` folder in them), or just `only` if given.
pub async fn tables(store: &Store, only: Option<&str>) -> Result<Vec<String>, DeltaError> {
    if let Some(t) = only {
        return Ok(vec![format!("{}/", t.trim_end_matches('/'))]);
    }
    let mut out = vec![];
    for db in store.list("").await?.into_iter().filter(|e| e.is_dir) {
        for schema in store.list(&db.path).await?.into_iter().filter(|e| e.is_dir) {
            for table in store.list(&schema.path).await?.into_iter().filter(|e| e.is_dir) {
                if store.list(&format!("{}{LOG_DIR}", table.path)).await?.iter().any(|e| !e.is_dir) {
                    out.push(table.path);
                }
            }
        }
    }
    Ok(out)
}

/// Deletes the orphans of `table` older than `older_than_ms` at `now_ms`
/// (by the backend's modification times); returns those deleted and those
/// kept (too young, or of unknown age).
pub async fn vacuum(
    store: &Store,
    table: &str,
    now_ms: i64,
    older_than_ms: i64,
    dry_run: bool,
) -> Result<(Vec<Orphan>, Vec<Orphan>), DeltaError> {
    let found = find(store, table).await?;
    let (old, young): (Vec<Orphan>, Vec<Orphan>) =
        found.into_iter().partition(|o| o.modified_ms.is_some_and(|m| now_ms - m > older_than_ms));
    if old.is_empty() || dry_run {
        return Ok((old, young));
    }
    // Again, right before deleting: a version committed since names its files.
    let refs = referenced(store, table).await?;
    let mut deleted = vec![];
    let mut kept = young;
    for o in old {
        if refs.contains(&o.path) {
            kept.push(o);
            continue;
        }
        store.delete(&o.path).await?;
        deleted.push(o);
    }
    Ok((deleted, kept))
}
