//! A task folder as its listing shows it, and what its rounds recorded:
//! per-unit outcome files (`Outcomes/Done.r<round>.u<unit>`,
//! `Failed.…`; from versions before `Outcomes/`, in the task folder
//! itself) and per-batch records (`Outcomes/Batch.r<round>.t<term>.b<batch>`, a
//! JSON file each, read when the outcomes are).
//!
//! Invariants: a unit's outcome is final once any of these files records
//! it; a unit recorded done in one and failed in another (a stale manager's
//! record beside the current one's) counts as done, once.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use layouts::formats::{self, TaskInfo, UnitOutcome};
use layouts::v3::{self, BatchNo, BatchRecord};
use layouts::{v2, TaskId, TaskState};
use store::Store;

use super::ResultStatus;

/// Batch records read at once.
const RECORD_READS: usize = 16;

/// What a listing of a task folder says.
#[derive(Debug, Clone, Default)]
pub struct TaskDir {
    pub state: Option<TaskState>,
    /// Every status marker present (two after an interrupted transition).
    pub markers: Vec<TaskState>,
    pub terms: Vec<u64>,
    pub stop: bool,
    pub has_info: bool,
    /// Reassign requests: (unit, target node if named).
    pub reassign: Vec<u32>,
    /// Recorded unit outcomes: (ok, round, unit). Those in `Outcomes/`
    /// only after [`read_outcomes`]; those an older version left in the
    /// task folder itself are in `legacy` too. Units of batch records are
    /// here once the records were read.
    pub outcomes: Vec<(bool, u32, u32)>,
    /// Outcomes found in the task folder itself (written before `Outcomes/`).
    pub legacy: BTreeSet<(bool, u32, u32)>,
    /// Per-unit outcome files in `Outcomes/`.
    pub unit_files: BTreeSet<(bool, u32, u32)>,
    /// Batch records in `Outcomes/`: (round, batch), with what each says.
    pub records: BTreeMap<(u32, BatchNo), BatchRecord>,
    /// Files read for the outcomes that could not be used (path: why).
    pub unreadable: Vec<String>,
    /// The listing showed an `Outcomes/` folder.
    pub has_outcomes_dir: bool,
    /// [`read_outcomes`] listed it.
    pub outcomes_read: bool,
}

impl TaskDir {
    /// The units recorded for `round`: `true` done, `false` failed for good
    /// (done wins where both are recorded).
    pub fn recorded(&self, round: u32) -> BTreeMap<u32, bool> {
        let mut out = BTreeMap::new();
        for (ok, _, u) in self.outcomes.iter().filter(|(_, r, _)| *r == round) {
            *out.entry(*u).or_insert(*ok) |= *ok;
        }
        out
    }

    /// Successes and failures recorded for `round`.
    pub fn counts(&self, round: u32) -> (u64, u64) {
        let rec = self.recorded(round);
        let ok = rec.values().filter(|ok| **ok).count() as u64;
        (ok, rec.len() as u64 - ok)
    }

    pub fn term(&self) -> u64 {
        self.terms.iter().copied().max().unwrap_or(0)
    }

    /// Where the outcome file of `(ok, round, unit)` is: in `Outcomes/`, or
    /// in the task folder if an older version wrote it there.
    pub fn outcome_path(&self, id: &TaskId, ok: bool, round: u32, unit: u32) -> String {
        if self.legacy.contains(&(ok, round, unit)) {
            v2::legacy_unit_outcome(id, round, unit, ok)
        } else {
            v2::unit_outcome(id, round, unit, ok)
        }
    }

    /// The batches `round` has records of.
    pub fn batch_records(&self, round: u32) -> impl Iterator<Item = BatchNo> + '_ {
        self.records.keys().filter(move |(r, _)| *r == round).map(|(_, b)| *b)
    }

    /// Every outcome file of `round` (per-unit files and batch records).
    pub fn round_files(&self, id: &TaskId, round: u32) -> Vec<String> {
        let legacy = self.legacy.iter().filter(|(_, r, _)| *r == round);
        let legacy = legacy.map(|(ok, r, u)| v2::legacy_unit_outcome(id, *r, *u, *ok));
        let files = self.unit_files.iter().filter(|(_, r, _)| *r == round);
        let files = files.map(|(ok, r, u)| v2::unit_outcome(id, *r, *u, *ok));
        let records = self.batch_records(round).map(|b| v3::batch_record(id, round, b));
        legacy.chain(files).chain(records).collect()
    }

    /// Notes one entry of the task folder (unknown names are ignored).
    pub(super) fn note(&mut self, name: &str) {
        if let Ok(s) = TaskState::from_file_name(name) {
            self.markers.push(s);
        } else if let Some(t) = v2::parse_manager_term(name) {
            self.terms.push(t);
        } else if name == v2::STOP {
            self.stop = true;
        } else if name == v2::TASK_INFO {
            self.has_info = true;
        } else if let Some(u) = v2::parse_reassign_request(name) {
            self.reassign.push(u);
        } else if let Some(o) = v2::parse_unit_outcome(name) {
            self.outcomes.push(o);
            self.legacy.insert(o);
        } else if name == v2::OUTCOMES_DIR {
            self.has_outcomes_dir = true;
        }
        self.state = self.markers.iter().copied().max_by_key(|s| s.rank());
    }
}

/// Reads a task folder with one LIST: its markers, terms and requests. The
/// outcome files are in `Outcomes/` ([`read_outcomes`]), so that this
/// listing, which a manager does every round, stays small however many
/// units the task has.
pub async fn read_dir(store: &Store, id: &TaskId) -> store::Result<TaskDir> {
    let mut d = TaskDir::default();
    for e in store.list(&v2::task_dir(id)).await? {
        d.note(e.name());
    }
    Ok(d)
}

/// Adds what `Outcomes/` records to `dir`: one more LIST, only when the
/// folder exists and was not read yet, and one read per batch record.
pub async fn read_outcomes(store: &Store, id: &TaskId, dir: &mut TaskDir) -> store::Result<()> {
    if dir.has_outcomes_dir && !dir.outcomes_read {
        let mut records = vec![];
        for e in store.list(&v2::outcomes_dir(id)).await? {
            if e.is_dir {
                continue;
            }
            if let Some(o) = v2::parse_unit_outcome(e.name()) {
                dir.unit_files.insert(o);
                if !dir.legacy.contains(&o) {
                    dir.outcomes.push(o);
                }
            } else if let Some(rb) = v3::parse_batch_record(e.name()) {
                records.push((rb, e.path));
            }
        }
        type Read = ((u32, BatchNo), String, Option<store::Result<bytes::Bytes>>);
        let read: Vec<Read> = futures::stream::iter(records)
            .map(|(rb, path)| async move { store.read_or_bad(&path).await.map(|r| (rb, path, r)) })
            .buffer_unordered(RECORD_READS)
            .try_collect()
            .await?;
        for ((round, batch), path, found) in read {
            let rec = match found {
                None => continue,
                Some(Err(bad)) => {
                    dir.unreadable.push(format!("{path}: {bad}"));
                    continue;
                }
                Some(Ok(b)) => match formats::decode::<BatchRecord>(&b) {
                    Ok(r) => r,
                    Err(e) => {
                        dir.unreadable.push(format!("{path}: {e}"));
                        continue;
                    }
                },
            };
            dir.outcomes.extend(rec.done.iter().map(|u| (true, round, u.unit)));
            dir.outcomes.extend(rec.failed.iter().map(|u| (false, round, u.unit)));
            dir.records.insert((round, batch), rec);
        }
    }
    dir.outcomes_read = true;
    Ok(())
}

/// [`read_dir`] and [`read_outcomes`].
pub async fn read_dir_with_outcomes(store: &Store, id: &TaskId) -> store::Result<TaskDir> {
    let mut d = read_dir(store, id).await?;
    read_outcomes(store, id, &mut d).await?;
    Ok(d)
}

/// What `round` recorded of one unit: done (with its counters) or failed
/// for good (with its error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    pub ok: bool,
    pub stats: BTreeMap<String, u64>,
    pub error: Option<String>,
}

/// Every unit `round` recorded, with its counters or error: batch records
/// (already read by [`read_outcomes`]) and per-unit files, whose content is
/// read here (empty files, the usual case, say nothing). Files that could
/// not be used are noted in `skipped`.
pub async fn round_outcomes(
    store: &Store,
    id: &TaskId,
    dir: &TaskDir,
    round: u32,
    skipped: &mut Vec<String>,
) -> store::Result<BTreeMap<u32, Recorded>> {
    let mut out: BTreeMap<u32, Recorded> = BTreeMap::new();
    let mut keep = |unit: u32, r: Recorded| {
        let e = out.entry(unit).or_insert_with(|| r.clone());
        if r.ok && !e.ok {
            *e = r;
        }
    };
    for ((r, _), rec) in &dir.records {
        if *r != round {
            continue;
        }
        for u in &rec.done {
            keep(u.unit, Recorded { ok: true, stats: u.stats.clone(), error: None });
        }
        for u in &rec.failed {
            keep(u.unit, Recorded { ok: false, stats: Default::default(), error: u.error.clone() });
        }
    }
    let files: BTreeSet<(bool, u32)> =
        dir.legacy.iter().chain(&dir.unit_files).filter(|(_, r, _)| *r == round).map(|(ok, _, u)| (*ok, *u)).collect();
    // Owned paths moved into each read: a closure over borrowed ones makes
    // the future not provably Send (the HTTP handlers need it to be).
    let paths: Vec<(bool, u32, String)> =
        files.into_iter().map(|(ok, u)| (ok, u, dir.outcome_path(id, ok, round, u))).collect();
    let read: Vec<(bool, u32, String, Option<store::Result<bytes::Bytes>>)> = futures::stream::iter(paths)
        .map(|(ok, u, p)| async move { store.read_or_bad(&p).await.map(|r| (ok, u, p, r)) })
        .buffer_unordered(RECORD_READS)
        .try_collect()
        .await?;
    for (ok, unit, path, found) in read {
        let b = match found {
            Some(Ok(b)) => b,
            Some(Err(bad)) => {
                skipped.push(format!("{path}: {bad}"));
                Default::default()
            }
            None => Default::default(),
        };
        // Empty: no counters, or written by an older version.
        let o = if b.is_empty() {
            UnitOutcome::default()
        } else {
            formats::decode::<UnitOutcome>(&b).unwrap_or_else(|e| {
                skipped.push(format!("{path}: {e}"));
                UnitOutcome::default()
            })
        };
        keep(unit, Recorded { ok, stats: o.stats, error: o.error });
    }
    skipped.extend(dir.unreadable.iter().cloned());
    Ok(out)
}

/// The task's result counts: the rounds already added into `ResultInfo`,
/// plus the outcome files of the current round.
pub fn result_counts(dir: &TaskDir, info: &TaskInfo) -> ResultStatus {
    let (mut success, mut failed) = (info.result.success_count, info.result.failed_count);
    if info.run.counted_round < info.run.round {
        let (ok, bad) = dir.counts(info.run.round);
        success += ok;
        failed += bad;
    }
    ResultStatus { success, failed }
}

/// [`result_counts`], listing `Outcomes/` only when the counts need it: a
/// finished task's are in its info, a running one's in its outcome files.
pub async fn read_counts(
    store: &Store,
    id: &TaskId,
    dir: &mut TaskDir,
    info: &TaskInfo,
) -> store::Result<ResultStatus> {
    if info.run.counted_round < info.run.round {
        read_outcomes(store, id, dir).await?;
    }
    Ok(result_counts(dir, info))
}
