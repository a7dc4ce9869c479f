//! Judging a table from listings of the data backend: the one place that
//! decides whether an executor may change a table, asked by `submit`, the
//! manager's discovery and each executor process ([`judge`]). The planner
//! judges from the listings it makes anyway (its recursive listing of the
//! table, its listings of the folders above while it matches patterns) with
//! the same [`Detector`] and [`Findings::refusal`].

use layouts::formats::ExecutorKind;
use store::{Entry, Store};

use super::{Detector, Findings};

/// Judges the folder `dir` (ending in `/`) from one listing of it and,
/// where a candidate needs it, one of `metadata/`, `snapshot/` and the
/// like. A missing folder holds no table.
pub async fn detect(store: &Store, dir: &str) -> store::Result<Findings> {
    let entries = store.list(dir).await?;
    detect_listed(store, dir, &entries).await
}

/// [`detect`] from a listing of `dir` the caller made already.
pub async fn detect_listed(store: &Store, dir: &str, entries: &[Entry]) -> store::Result<Findings> {
    settle(store, dir, Detector::new(), entries).await
}

/// Feeds `entries` of `dir` to `d`, then lists what a candidate needs.
async fn settle(store: &Store, dir: &str, mut d: Detector, entries: &[Entry]) -> store::Result<Findings> {
    for e in entries {
        d.observe_entry(dir, e);
    }
    for sub in d.to_look_into() {
        for e in store.list(&format!("{dir}{sub}")).await? {
            d.observe_entry(dir, &e);
        }
    }
    Ok(d.finish())
}

/// Judges the folders above the table folder `dir` up to the data root
/// (its database and schema folders, and the root itself), by their root
/// markers only: a Delta, Iceberg, Hudi or Lance table, or a Spark sink,
/// can hold what looks like a table folder (a Delta table partitioned by
/// `date` then `hour` makes each `date=…` folder look like a table; a
/// pyiceberg warehouse makes `data/` one). One listing each.
pub async fn detect_above(store: &Store, dir: &str) -> store::Result<Findings> {
    let mut findings = Findings::default();
    let mut ends = vec![0];
    ends.extend(dir.match_indices('/').map(|(i, _)| i + 1).filter(|i| *i < dir.len()));
    for end in ends {
        let above = &dir[..end];
        let entries = store.list(above).await?;
        findings.extend(settle(store, above, Detector::above(), &entries).await?);
    }
    Ok(findings)
}

/// Why the `kind` executor must not change the table at `table_dir` (a
/// folder ending in `/`), judged from the folders above it, the table
/// folder (`listed`: a listing of it the caller has, else one is made) and,
/// when given, one of its partition folders (formats mark partitions too;
/// for the text merge also the files' names: a Parquet file is no text).
/// `None`: it may. Never asked for `command` executors, the user's own.
pub async fn judge(
    store: &Store,
    table_dir: &str,
    listed: Option<&[Entry]>,
    partition_dir: Option<&str>,
    kind: ExecutorKind,
) -> store::Result<Option<String>> {
    if !kind.is_builtin_merge() {
        return Ok(None);
    }
    let mut findings = detect_above(store, table_dir).await?;
    let partition = match partition_dir {
        Some(p) => Some((p, store.list(p).await?)),
        None => None,
    };
    judge_in(store, table_dir, listed, partition.as_ref().map(|(p, e)| (*p, e.as_slice())), kind, None, &mut findings)
        .await
}

/// How an executor asks [`judge`] about the partition `dir` it works on,
/// from its own listing of it (`entries`), at wall time `now_ms`: a write
/// in progress in the table or the partition (a committer's `_temporary/`,
/// a staging folder, an in-progress file written to in the last
/// [`super::BUSY_WINDOW_MS`]) is a refusal too, as the planner waits for
/// one to end. `above`: the folders above the table are judged too (its
/// first look; its look right before a commit is at the table and the
/// partition, where a writer's first commit lands).
pub async fn judge_partition(
    store: &Store,
    table_dir: &str,
    dir: &str,
    entries: &[Entry],
    kind: ExecutorKind,
    now_ms: i64,
    above: bool,
) -> store::Result<Option<String>> {
    if !kind.is_builtin_merge() {
        return Ok(None);
    }
    let mut findings = if above { detect_above(store, table_dir).await? } else { Findings::default() };
    judge_in(store, table_dir, None, Some((dir, entries)), kind, Some(now_ms), &mut findings).await
}

async fn judge_in(
    store: &Store,
    table_dir: &str,
    listed: Option<&[Entry]>,
    partition: Option<(&str, &[Entry])>,
    kind: ExecutorKind,
    now_ms: Option<i64>,
    findings: &mut Findings,
) -> store::Result<Option<String>> {
    findings.extend(match listed {
        Some(entries) => detect_listed(store, table_dir, entries).await?,
        None => detect(store, table_dir).await?,
    });
    let mut text_refusal = None;
    if let Some((_, entries)) = partition {
        let mut d = Detector::new();
        for e in entries {
            d.observe_entry(table_dir, e);
        }
        findings.extend(d.finish());
        if kind == ExecutorKind::Merge {
            text_refusal = entries
                .iter()
                .filter(|e| !e.is_dir && e.special.is_none() && !e.name().starts_with(['_', '.']))
                .find_map(|e| crate::table::file::text_merge_refusal_by_name(&e.path));
        }
    }
    let mut busy = None;
    if let Some((now, at)) = now_ms.and_then(|now| findings.busy(now).map(|at| (now, at.to_string()))) {
        if writing_in(store, &at, now).await? {
            busy = Some(format!(
                "a write is in progress at {at}: its files are about to change, so the {} executor leaves the \
                 table to a later round",
                kind.label()
            ));
        }
    }
    Ok(findings.refusal(table_dir, kind).or(text_refusal).or(busy))
}

/// Whether a writer's folder (`_temporary/`, a staging folder) seen in a
/// listing that gave it no time holds a file written in the last
/// [`super::BUSY_WINDOW_MS`]: a job that failed long ago leaves one behind,
/// which must not keep a table from being compacted for ever. A file (or a
/// folder's file) of unknown age counts as current, as the planner counts it.
async fn writing_in(store: &Store, at: &str, now_ms: i64) -> store::Result<bool> {
    use futures::StreamExt;
    if !at.ends_with('/') {
        return Ok(true);
    }
    let mut newest = None;
    let mut files = store.list_stream(at, true);
    while let Some(e) = files.next().await {
        let e = e?;
        if e.is_dir {
            continue;
        }
        match e.modified_ms {
            Some(m) => newest = newest.max(Some(m)),
            None => return Ok(true),
        }
    }
    Ok(newest.is_some_and(|m| now_ms.saturating_sub(m) < super::BUSY_WINDOW_MS))
}
