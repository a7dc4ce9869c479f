//! Orphans of the `delta` executor: data files an attempt wrote into a
//! table and never committed (killed before its commit, or a commit lost
//! to a conflict whose cleanup failed). No version of the table names them,
//! so no reader sees them; they only take space.
//!
//! Invariants:
//! - Only files compactd names
//!   (`compactd-<task>-r<round>-u<unit hash>-a<attempt>-<k>.parquet`) are
//!   ever orphans: other writers' uncommitted files are their own (and
//!   Delta's `VACUUM`'s) business.
//! - A file any retained log entry names (an `add` or a `remove` in a
//!   commit or checkpoint still in `_delta_log/`) is never an orphan: a
//!   reader may time-travel to it. A table whose log holds content this
//!   reader does not read (V2 checkpoints, sidecars, folders) is refused:
//!   that content could be the only reference to a live file.
//! - [`vacuum`] deletes only the orphans its caller chose (the CLI keeps
//!   those of tasks that are not finished, and young ones), and reads the
//!   log again right before deleting, so a file committed meanwhile is
//!   kept. The unit itself checks that its outputs exist right before its
//!   commit, so a deletion racing it makes it abandon, never commit a
//!   version naming a missing file.

use std::collections::BTreeSet;

use futures::TryStreamExt;
use serde::Serialize;
use store::Store;

use super::log::{self, LogListing, LOG_DIR};
use super::DeltaError;

/// A file no retained version names.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Orphan {
    pub path: String,
    pub bytes: u64,
    /// By the backend's clock, where the listing carries it.
    pub modified_ms: Option<i64>,
}

impl Orphan {
    /// The task whose unit wrote it, from its name.
    pub fn task(&self) -> Option<&str> {
        output_name(self.path.rsplit('/').next().unwrap_or_default()).map(|n| n.task)
    }
}

/// The parts of an output's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputName<'a> {
    pub task: &'a str,
    pub round: u32,
    pub attempt: u32,
}

/// Parses `compactd-<task>-r<round>-u<16 hex digits>-a<attempt>-<k>.parquet`
/// (from the right: a hand-run `__merge --task` may hold a `-`).
pub fn output_name(name: &str) -> Option<OutputName<'_>> {
    let rest = name.strip_prefix("compactd-")?.strip_suffix(".parquet")?;
    let (rest, k) = rest.rsplit_once('-')?;
    let (rest, attempt) = rest.rsplit_once("-a")?;
    let (rest, hash) = rest.rsplit_once("-u")?;
    let (task, round) = rest.rsplit_once("-r")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if task.is_empty() || !digits(k) || hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(OutputName { task, round: round.parse().ok()?, attempt: attempt.parse().ok()? })
}

/// Why orphans are not named in a table whose log holds what this reader
/// does not read, if it does.
pub fn refuse_unread(table: &str, listing: &LogListing) -> Result<(), DeltaError> {
    match listing.unread.first() {
        None => Ok(()),
        Some(path) => Err(DeltaError::Table {
            table: table.to_string(),
            problem: format!(
                "{path} is log content compactd does not read (a V2 checkpoint or sidecar?): orphans are not named in \
                 this table"
            ),
        }),
    }
}

/// Adds the store paths `actions` name (by `add` or `remove`) to `refs`.
pub fn note_refs(table: &str, actions: &[log::Action], refs: &mut BTreeSet<String>) {
    for a in actions {
        if let Some(p) = a.add.as_ref().map(|a| &a.path).or(a.remove.as_ref().map(|r| &r.path)) {
            // A path that does not decode cannot name a file of ours.
            if let Ok(sp) = log::data_path(table, p) {
                refs.insert(sp);
            }
        }
    }
}

/// Every file path (as a store path) named by an `add` or `remove` in the
/// log files still present.
async fn referenced(store: &Store, table: &str) -> Result<BTreeSet<String>, DeltaError> {
    let listing = log::list_log(store, table, None).await?;
    refuse_unread(table, &listing)?;
    let mut out = BTreeSet::new();
    for (path, len) in listing.commits.values() {
        // Vanished since the listing: a cleanup removes commits only once a
        // checkpoint (read here too) covers them.
        if let Some(a) = log::read_commit_file(store, path, *len).await? {
            note_refs(table, &a, &mut out);
        }
    }
    for (path, len) in listing.checkpoints.values().flat_map(|parts| parts.values()) {
        if let Some(a) = log::read_checkpoint_file(store, path, *len).await? {
            note_refs(table, &a, &mut out);
        }
    }
    Ok(out)
}

/// True for a name the `delta` executor gives its outputs.
pub fn is_compactd_output(name: &str) -> bool {
    name.starts_with("compactd-") && name.ends_with(".parquet")
}

/// The orphans among `files` (a recursive listing of `table`) given the
/// paths the log names.
pub fn find_in(table: &str, files: &[store::Entry], refs: &BTreeSet<String>) -> Vec<Orphan> {
    let log_dir = format!("{table}{LOG_DIR}");
    files
        .iter()
        .filter(|e| !e.is_dir && e.special.is_none() && !e.path.starts_with(&log_dir) && is_compactd_output(e.name()))
        .filter(|e| !refs.contains(&e.path))
        .map(|e| Orphan { bytes: e.len.unwrap_or(0), modified_ms: e.modified_ms, path: e.path.clone() })
        .collect()
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
    let files: Vec<store::Entry> = store.list_stream(table, true).try_collect().await?;
    Ok(find_in(table, &files, &refs))
}

/// The Delta tables among `<db>/<schema>/<table>/` folders of the data
/// root (a `_delta_log/` folder in them), or just `only` if given. A
/// `_delta_log` that cannot be listed (a symbolic link on fs, a file) makes
/// its folder a table too, for the caller to report.
pub async fn tables(store: &Store, only: Option<&str>) -> Result<Vec<String>, DeltaError> {
    if let Some(t) = only {
        return Ok(vec![format!("{}/", t.trim_end_matches('/'))]);
    }
    let mut out = vec![];
    for db in store.list("").await?.into_iter().filter(|e| e.is_dir) {
        for schema in store.list(&db.path).await?.into_iter().filter(|e| e.is_dir) {
            for table in store.list(&schema.path).await?.into_iter().filter(|e| e.is_dir) {
                let delta = match store.list(&format!("{}{LOG_DIR}", table.path)).await {
                    Ok(entries) => entries.iter().any(|e| !e.is_dir),
                    Err(_) => true,
                };
                if delta {
                    out.push(table.path);
                }
            }
        }
    }
    Ok(out)
}

/// Deletes `chosen` (orphans of `table` its caller decided may go) unless
/// the log, read again now, names them; returns those deleted and those
/// kept because a version committed since names them.
pub async fn vacuum(
    store: &Store,
    table: &str,
    chosen: Vec<Orphan>,
    dry_run: bool,
) -> Result<(Vec<Orphan>, Vec<Orphan>), DeltaError> {
    delete_unnamed(store, chosen, dry_run, referenced(store, table)).await
}

/// The step every table format's vacuum ends with: reads what the table
/// names now (`refs`, awaited only when something is to be deleted), then
/// deletes the chosen orphans it does not name; returns those deleted and
/// those a commit since names. A dry run deletes nothing and reads nothing.
pub async fn delete_unnamed<E: From<store::StoreError>>(
    store: &Store,
    chosen: Vec<Orphan>,
    dry_run: bool,
    refs: impl std::future::Future<Output = Result<BTreeSet<String>, E>>,
) -> Result<(Vec<Orphan>, Vec<Orphan>), E> {
    if chosen.is_empty() || dry_run {
        return Ok((chosen, vec![]));
    }
    let refs = refs.await?;
    let (named, free): (Vec<Orphan>, Vec<Orphan>) = chosen.into_iter().partition(|o| refs.contains(&o.path));
    for o in &free {
        store.delete(&o.path).await?;
    }
    Ok((free, named))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_are_parsed_from_the_right() {
        let n = output_name("compactd-aaaaffff.16176931.56000000.0-r3-u00ff00ff00ff00ff-a1002-7.parquet").unwrap();
        assert_eq!(n, OutputName { task: "aaaaffff.16176931.56000000.0", round: 3, attempt: 1002 });
        let n = output_name("compactd-by-hand-r1-u0123456789abcdef-a1-0.parquet").unwrap();
        assert_eq!(n.task, "by-hand");
        for bad in [
            "compactd-x-r1-a1-0.parquet",
            "compactd-x-r1-u0123-a1-0.parquet",
            "compactd--r1-u0123456789abcdef-a1-0.parquet",
            "compactd-x-r1-u0123456789abcdef-a1-.parquet",
            "part-0.parquet",
        ] {
            assert_eq!(output_name(bad), None, "{bad}");
        }
    }
}
