//! The merge commit: what decides that a partition's small files are
//! replaced, and what carries that decision out.
//!
//! A partition's changes form one sequence of **turns**,
//! `<partition>/_compactd/turn.<n>` (`n` = 1, 2, …), each created once
//! (atomic create) holding its plan: inputs, staged outputs, final names.
//! The create of `turn.<n>` is the commit. A run plans on the partition as
//! the latest turn left it (that turn rolled forward first, whoever's it
//! is) and commits as the next one, so of two plans made from the same
//! files only one commits: the other finds its turn taken by a plan it did
//! not make, drops its staging and plans again from what the winner left.
//! Two tasks on one partition (a `submit` beside a policy, a script that
//! retried, a planner's recovery beside a stalled planner) therefore merge
//! each row once, with no lock to expire: a run that dies holds nothing.
//!
//! Why the plan is made only once the latest turn is rolled forward: turn
//! `k` is created only by a run that saw turn `k − 1` done, so every turn
//! before the latest is done, and a plan never lists inputs that a
//! committed plan is about to delete.
//!
//! `_compactd/commit.<task>.r<round>` is the round's record, written (not
//! created) by the roll-forward, done, before the turn is marked done: a
//! later attempt of the round finds there that its round committed even
//! when other tasks' turns followed (those were planned only once this turn
//! was done, so after the record). It is where older versions kept the
//! commit itself (those are still rolled forward, by their own round).
//!
//! Roll-forward is idempotent and anyone's: promote each staged output to
//! its final name if missing (fs, HDFS: a rename; S3: a server-side copy),
//! delete the inputs, mark the round's record done, then the turn, then
//! remove the round's staging.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use store::Store;

use super::{MergeError, MergeJob, META_DIR};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    pub staged: String,
    #[serde(rename = "final")]
    pub final_path: String,
    pub inputs: Vec<String>,
}

/// A plan: the body of `_compactd/turn.<n>` and of
/// `_compactd/commit.<task>.r<round>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub task: String,
    pub round: u32,
    pub attempt: u32,
    pub outputs: Vec<Output>,
    #[serde(default)]
    pub done: bool,
    /// The plan's figures, so that an attempt that rolls it forward reports
    /// them too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stats: BTreeMap<String, u64>,
    /// The partition's turn this plan committed as; absent in commits of
    /// versions before turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
}

impl Commit {
    fn is_of(&self, job: &MergeJob) -> bool {
        self.task == job.task && self.round == job.round
    }
}

fn turn_path(dir: &str, n: u64) -> String {
    format!("{dir}{META_DIR}turn.{n}")
}

fn record_path(dir: &str, task: &str, round: u32) -> String {
    format!("{dir}{META_DIR}commit.{task}.r{round}")
}

/// The number of a `turn.<n>` name.
fn turn_number(name: &str) -> Option<u64> {
    let n = name.strip_prefix("turn.")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0')).then(|| n.parse().ok())?
}

/// Where a partition's sequence of turns stands, once its latest is done.
pub(super) struct Latest {
    /// The latest turn's number; 0 if none was ever taken.
    pub n: u64,
    /// The latest turn's plan, if it is the job's own round's.
    pub own: Option<Commit>,
}

/// Lists the partition's turns and rolls the latest forward if it is not
/// done (one listing and one read; nothing more when it is done). With
/// `record`, the job's own round's record first, if the listing shows it
/// (read only then: a first run of a round costs no request for it): a
/// round that committed before, as a turn or as a commit of a version
/// before turns, is rolled forward and returned as the job's own.
pub(super) async fn settle_latest(store: &Store, job: &MergeJob, record: bool) -> Result<Latest, MergeError> {
    let names = store.list(&format!("{}{META_DIR}", job.dir)).await?;
    let own_record = record_path(&job.dir, &job.task, job.round);
    if record && names.iter().any(|e| !e.is_dir && e.path == own_record) {
        if let Some(c) = read_record(store, job).await? {
            roll_forward(store, job, &c).await?;
            if let (true, Some(n)) = (c.done, c.turn) {
                // A roll-forward cut short between the record and its turn
                // leaves the turn to be marked done (a rerun of a round
                // only; a read costs less than a write on S3).
                let path = turn_path(&job.dir, n);
                if read_turn(store, job, &path).await?.is_some_and(|t| !t.done) {
                    store.put(&path, serde_json::to_vec_pretty(&c).expect("commit serializes")).await?;
                }
            }
            return Ok(Latest { n: c.turn.unwrap_or(0), own: Some(c) });
        }
    }
    let n = names.iter().filter(|e| !e.is_dir).filter_map(|e| turn_number(e.name())).max().unwrap_or(0);
    if n == 0 {
        return Ok(Latest { n, own: None });
    }
    let path = turn_path(&job.dir, n);
    let turn = read_turn(store, job, &path).await?.ok_or_else(|| job.broken(format!("{path} vanished")))?;
    if !turn.done {
        roll_forward(store, job, &turn).await?;
    }
    Ok(Latest { n, own: turn.is_of(job).then_some(turn) })
}

/// What the create of the next turn decided.
pub(super) enum Decided {
    /// A plan of this round (this attempt's, or another attempt's that took
    /// the turn first) is the partition's next change, rolled forward.
    Applied(Commit),
    /// Another round took the turn: this plan was made from files that may
    /// be gone; nothing of it was applied.
    Conflict,
}

/// Commits `plan` as turn `n` and rolls it forward.
pub(super) async fn commit(store: &Store, job: &MergeJob, n: u64, plan: Commit) -> Result<Decided, MergeError> {
    let plan = Commit { turn: Some(n), ..plan };
    let path = turn_path(&job.dir, n);
    let bytes = serde_json::to_vec_pretty(&plan).expect("commit serializes");
    let winner = match store.create(&path, bytes).await? {
        store::Created::Created => plan,
        store::Created::Exists => {
            let winner = read_turn(store, job, &path).await?.ok_or_else(|| job.broken("commit vanished"))?;
            if !winner.is_of(job) {
                return Ok(Decided::Conflict);
            }
            winner
        }
    };
    // Our own create whose reply was lost (an NFS retransmission answered
    // EEXIST) is ours too: our staging is the plan's. Another attempt's
    // roll-forward removes ours with the round's staging.
    roll_forward(store, job, &winner).await?;
    Ok(Decided::Applied(winner))
}

/// Reads the round's record, `_compactd/commit.<task>.r<round>`. Creates are
/// complete-or-absent, so a record that does not parse was never acted upon
/// by this version. An older compactd on fs could leave one torn (killed
/// between creating the name and writing it), and it never started a
/// roll-forward from it (that starts only after the create returned): such
/// a commit is moved away once its writer is surely gone, and the round is
/// decided anew. Anything else that does not parse fails the attempt with
/// the path; nothing is touched.
pub(super) async fn read_record(store: &Store, job: &MergeJob) -> Result<Option<Commit>, MergeError> {
    let path = record_path(&job.dir, &job.task, job.round);
    let Some(b) = store.read(&path).await? else {
        return Ok(None);
    };
    let e = match serde_json::from_slice::<Commit>(&b) {
        Ok(c) => return validate(job, &path, c, true).map(Some),
        Err(e) => e,
    };
    use store::fs::{Quarantine, TORN_GRACE};
    match store.quarantine_torn(&path, is_torn_commit, TORN_GRACE, job.now).await? {
        Quarantine::Removed => {
            tracing::warn!(path, "moved a torn merge commit away (left by a crashed older compactd)");
            Ok(None)
        }
        Quarantine::TooYoung { age } => Err(job.broken(format!(
            "{path} does not parse ({e}); it is {}s old: if a crashed older compactd left it, the next attempt \
             after {}s replaces it",
            age.as_secs(),
            TORN_GRACE.as_secs()
        ))),
        Quarantine::NotTorn => match store.read(&path).await? {
            Some(b) => match serde_json::from_slice::<Commit>(&b) {
                Ok(c) => validate(job, &path, c, true).map(Some),
                Err(e) => Err(job.broken(format!("{path} does not parse: {e}"))),
            },
            None => Ok(None),
        },
    }
}

/// Reads a turn: any round's plan, checked as [`validate`] checks it.
async fn read_turn(store: &Store, job: &MergeJob, path: &str) -> Result<Option<Commit>, MergeError> {
    let Some(b) = store.read(path).await? else {
        return Ok(None);
    };
    let c = serde_json::from_slice::<Commit>(&b).map_err(|e| job.broken(format!("{path} does not parse: {e}")))?;
    validate(job, path, c, false).map(Some)
}

/// A plan is acted on only if it is one a merge of this partition could
/// have written: its task is a task id (`own_round`: the job's own task and
/// round), every input and final name is a direct, non-hidden child of the
/// partition, and every staged output lies in a staging folder of the
/// plan's round. Anyone who can write a partition could plant a plan;
/// without this check its roll-forward would copy or delete files elsewhere
/// in the data root.
fn validate(job: &MergeJob, path: &str, c: Commit, own_round: bool) -> Result<Commit, MergeError> {
    let bad = |why: String| Err(job.broken(format!("{path} refused: {why}")));
    if own_round && !c.is_of(job) {
        return bad(format!("it names task {} round {}", c.task, c.round));
    }
    let task_id = !c.task.is_empty()
        && !c.task.starts_with('.')
        && c.task.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !task_id {
        return bad(format!("{:?} is not a task id", c.task));
    }
    let child = |p: &str| {
        p.strip_prefix(job.dir.as_str())
            .is_some_and(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.') && !n.starts_with('_'))
    };
    let staging = format!("{}{META_DIR}staging/{}.r{}.a", job.dir, c.task, c.round);
    for o in &c.outputs {
        if !child(&o.final_path) {
            return bad(format!("output {} is not a file of the partition", o.final_path));
        }
        let in_staging = o.staged.strip_prefix(&staging).and_then(|rest| rest.split_once('/')).is_some_and(|(a, f)| {
            !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) && !f.is_empty() && !f.contains('/')
        });
        if !in_staging {
            return bad(format!("staged output {} is not in this round's staging", o.staged));
        }
        if let Some(i) = o.inputs.iter().find(|i| !child(i)) {
            return bad(format!("input {i} is not a file of the partition"));
        }
    }
    Ok(c)
}

fn is_torn_commit(b: &[u8]) -> bool {
    serde_json::from_slice::<Commit>(b).is_err()
}

/// Carries a committed plan out (see the module doc); safe to repeat and
/// to run beside another roll-forward of the same plan.
pub(super) async fn roll_forward(store: &Store, job: &MergeJob, commit: &Commit) -> Result<(), MergeError> {
    if !commit.done {
        for o in &commit.outputs {
            // Idempotent: an output promoted before a crash is found at its
            // final name by `promote` itself (no stat first on the common path).
            store.promote(&o.staged, &o.final_path).await.map_err(|e| {
                job.broken(format!(
                    "{} is committed but could not be made visible from {}: {e}",
                    o.final_path, o.staged
                ))
            })?;
        }
        for o in &commit.outputs {
            for input in &o.inputs {
                store.delete(input).await?;
            }
        }
        let done = serde_json::to_vec_pretty(&Commit { done: true, ..commit.clone() }).expect("commit serializes");
        // The record first: a turn marked done lets the next plan be made,
        // and by then the round's record must say so too.
        store.put(&record_path(&job.dir, &commit.task, commit.round), done.clone()).await?;
        if let Some(n) = commit.turn {
            store.put(&turn_path(&job.dir, n), done).await?;
        }
    }
    // Staging of every attempt of the plan's round is garbage now.
    let prefix = format!("{}.r{}.a", commit.task, commit.round);
    for e in store.list(&format!("{}{META_DIR}staging/", job.dir)).await? {
        if e.is_dir && e.name().starts_with(&prefix) {
            store.delete_all(&e.path).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_numbers_are_turns() {
        assert_eq!(turn_number("turn.1"), Some(1));
        assert_eq!(turn_number("turn.120"), Some(120));
        for name in ["turn.", "turn.01", "turn.1a", "turn.-1", "commit.t.r1", "turn.99999999999999999999999"] {
            assert_eq!(turn_number(name), None, "{name}");
        }
    }
}
