//! Layout 3 of `TaskAssigned/<node>/`: dispatch batches whose per-unit
//! files are empty markers, state and incarnation in their names; and the
//! cluster-wide switch that puts a layout in force.
//!
//! ```text
//! Compaction_V2/
//!   TaskAssigned/<NodeId>/<TaskId>.r<round>.t<term>.b<batch>/   a dispatch batch
//!     (`<TaskId>.r<round>.b<batch>/` from writers before the term was named)
//!     Info                                      what its units need (JSON, BatchInfo), created once
//!     Released                                  (empty) no unit of the batch not yet claimed starts
//!     u<unit>.a<attempt>.Running.<incarnation>  (empty) claimed by that incarnation of the node
//!     u<unit>.a<attempt>.Released               (empty) this attempt never starts
//!     u<unit>.a<attempt>.Cancel                 (empty) its manager takes it back: kill, then Failed
//!     u<unit>.a<attempt>.Success                empty, or {"stats": {…}}
//!     u<unit>.a<attempt>.Failed                 empty, or {"error", "exit_code"}
//!     u<unit>.a<attempt>.Output                 the executor's output tail, when there is one to keep
//!   Scheduler/<TaskId>/Outcomes/Batch.r<round>.t<term>.b<batch>   a batch's outcomes (JSON, BatchRecord), created once
//!     (`Batch.r<round>.b<batch>` from writers before the term was named)
//!   Registry/Layout.<n>                         layout n is in force (the highest that holds): a LayoutSwitch, or empty (Layout.3)
//! ```
//!
//! Invariants:
//! - Every file a unit's lifecycle writes is an empty create (a marker), but
//!   a `Success` with counters, a `Failed` with its reason and an `Output`
//!   with something to say: one listing of a node's folder tells every
//!   unit's state, and on HDFS a marker is 2 NameNode RPCs and no block.
//! - A unit attempt starts only if its worker's claim (`Running.<inc>`) was
//!   created *before* a listing of the batch that shows no `Released`
//!   (batch or unit) and no `Cancel`; whoever releases an attempt creates
//!   its `Released` and lists the batch after it. Of a claim and a release,
//!   at least one of the two listings shows the other (PROTOCOL.md).
//! - Attempt numbers are unique per task and round (a manager term numbers
//!   them from `(term-1)·1000 + 1`); a batch is named by its manager's term
//!   and a number that term counts up ([`BatchNo`]), so no batch or record
//!   name is used twice, even by two terms that act at once (an old manager
//!   that has not yet seen its successor). Names without a term, from
//!   earlier writers, are read as [`BatchNo`] with `term: None`.

use serde::{Deserialize, Serialize};

use crate::formats::{Shard, TaskInfo};
use crate::id::TaskId;
use crate::name::{Name, NodeId};
use crate::v2::{OUTCOMES_DIR, SCHEDULER, TASK_ASSIGNED};

pub use crate::layout::{LAYOUT_2, LAYOUT_3, LAYOUT_4, LEGACY_READS, NEWEST, READS};

pub const INFO: &str = "Info";
pub const RELEASED: &str = "Released";
pub const BATCH_RECORD_PREFIX: &str = "Batch.";
pub const LAYOUT_PREFIX: &str = "Layout.";

/// `Registry/Layout.<n>`: created once by the monitor when every live
/// member had advertised layout `n` for a whole session, holding a
/// [`LayoutSwitch`]; the highest that puts its layout in force
/// ([`switch_holds`]) is the layout in force.
pub fn layout_marker(n: u32) -> String {
    format!("{}{LAYOUT_PREFIX}{n}", crate::v2::REGISTRY)
}

pub fn parse_layout_marker(file_name: &str) -> Option<u32> {
    num(file_name.strip_prefix(LAYOUT_PREFIX)?)
}

/// Why a node of this version that advertises the layouts up to
/// `max_layout` (`run --max-layout`) can take no part in a cluster whose
/// layout in force is `in_force`, or `None` if it can. Managers give work
/// only to members that advertise the layout in force, and a layout in
/// force is never lowered, so such a node would idle for good: `run`
/// refuses to start, and a running node says so in its log.
pub fn cannot_take_part(in_force: u32, max_layout: u32) -> Option<String> {
    let marker = layout_marker(in_force);
    if in_force > crate::layout::NEWEST {
        return Some(format!(
            "layout {in_force} is in force in this tree ({marker}), and this release of compactd reads layouts \
             {} to {}: it would be given no work and could not read what is dispatched in layout \
             {in_force}. A layout in force is never lowered: run a release that reads layout {in_force} on this node",
            crate::layout::LAYOUT_2,
            crate::layout::NEWEST
        ));
    }
    if in_force > max_layout {
        return Some(format!(
            "layout {in_force} is in force in this tree ({marker}), above this node's --max-layout {max_layout}: \
             managers give no work to a node that does not advertise the layout in force. --max-layout holds a \
             switch back while older releases may still join; it cannot undo one (a layout in force is never \
             lowered): start this node without --max-layout (or with --max-layout {in_force})"
        ));
    }
    None
}

/// What a monitor writes in `Registry/Layout.<n>`: that it put layout `n`
/// in force, in which epoch, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutSwitch {
    pub layout: u32,
    pub epoch: u64,
    pub monitor: NodeId,
    pub wall_ms: u64,
}

/// Whether the content of `Registry/Layout.<n>` puts layout `n` in force:
/// a [`LayoutSwitch`] naming `n`, or an empty `Layout.3` (what versions
/// before layout 4 wrote: a stray empty `Layout.3` is indistinguishable
/// from it). Anything else (a file made by hand, cut short, naming another
/// layout) switches nothing: `Err` says why.
pub fn switch_holds(n: u32, content: &[u8]) -> Result<(), String> {
    if content.is_empty() {
        return match n {
            LAYOUT_3 => Ok(()),
            _ => Err(format!("an empty Layout.{n}: a monitor writes what put it in force")),
        };
    }
    match crate::formats::decode::<LayoutSwitch>(content) {
        Ok(s) if s.layout == n => Ok(()),
        Ok(s) => Err(format!("it names layout {}", s.layout)),
        Err(e) => Err(format!("not a layout switch: {e}")),
    }
}

/// A batch's identity within its task's round: the manager term that
/// dispatched it and the number that term gave it. `term` is `None` in the
/// names of writers before the term was named (`….b<batch>`), whose
/// numbers only a per-term range kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchNo {
    pub term: Option<u64>,
    pub n: u32,
}

impl BatchNo {
    pub fn new(term: u64, n: u32) -> BatchNo {
        BatchNo { term: Some(term), n }
    }

    /// Whether a batch's `Info` is the one this name promises.
    pub fn matches(self, info: &BatchInfo) -> bool {
        info.batch == self.n && self.term.is_none_or(|t| t == info.term)
    }
}

impl std::fmt::Display for BatchNo {
    /// `t<term>.b<n>`, or `b<n>` without a term.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.term {
            Some(t) => write!(f, "t{t}.b{}", self.n),
            None => write!(f, "b{}", self.n),
        }
    }
}

/// Parses `t<term>.b<n>` or `b<n>` at the end of `name`: the batch and
/// what precedes it (without its dot).
fn split_batch_no(name: &str) -> Option<(&str, BatchNo)> {
    let (rest, b) = name.rsplit_once('.')?;
    let n = num(b.strip_prefix('b')?)?;
    match rest.rsplit_once('.') {
        Some((before, t)) if t.starts_with('t') => Some((before, BatchNo { term: Some(big(&t[1..])?), n })),
        _ => Some((rest, BatchNo { term: None, n })),
    }
}

/// `<TaskId>.r<round>.t<term>.b<batch>`: a batch folder's name.
pub fn batch_name(task: &TaskId, round: u32, batch: BatchNo) -> Name {
    Name::parse(&format!("{task}.r{round}.{batch}")).expect("batch names are valid")
}

/// Parses a batch folder's name, with or without its term, into (task,
/// round, batch).
pub fn parse_batch_name(name: &str) -> Option<(TaskId, u32, BatchNo)> {
    let (rest, b) = split_batch_no(name)?;
    let (task, r) = rest.rsplit_once('.')?;
    Some((TaskId::parse(task).ok()?, num(r.strip_prefix('r')?)?, b))
}

pub fn batch_dir(node: &NodeId, batch: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{batch}/")
}

pub fn batch_info(node: &NodeId, batch: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{batch}/{INFO}")
}

/// The batch's own `Released`: no unit of it that is not claimed yet ever
/// starts (a draining worker's release, a manager fencing a batch whose
/// create may still land).
pub fn batch_released(node: &NodeId, batch: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{batch}/{RELEASED}")
}

/// What a marker of one unit attempt says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mark {
    /// Claimed by this incarnation of the node.
    Running(u64),
    Released,
    Cancel,
    Success,
    Failed,
    Output,
}

impl Mark {
    fn suffix(self) -> String {
        match self {
            Mark::Running(inc) => format!("Running.{inc}"),
            Mark::Released => "Released".into(),
            Mark::Cancel => "Cancel".into(),
            Mark::Success => "Success".into(),
            Mark::Failed => "Failed".into(),
            Mark::Output => "Output".into(),
        }
    }

    /// Whether the file is empty by design (all but a `Success` with
    /// counters, a `Failed` with a reason, and an `Output`).
    pub fn always_empty(self) -> bool {
        matches!(self, Mark::Running(_) | Mark::Released | Mark::Cancel)
    }
}

/// `u<unit>.a<attempt>.<mark>`: a unit marker's file name.
pub fn mark_name(unit: u32, attempt: u32, mark: Mark) -> String {
    format!("u{unit}.a{attempt}.{}", mark.suffix())
}

/// Parses a unit marker's file name into (unit, attempt, mark).
pub fn parse_mark(file_name: &str) -> Option<(u32, u32, Mark)> {
    let rest = file_name.strip_prefix('u')?;
    let (unit, rest) = rest.split_once(".a")?;
    let (attempt, kind) = rest.split_once('.')?;
    let mark = match kind {
        "Released" => Mark::Released,
        "Cancel" => Mark::Cancel,
        "Success" => Mark::Success,
        "Failed" => Mark::Failed,
        "Output" => Mark::Output,
        _ => Mark::Running(big(kind.strip_prefix("Running.")?)?),
    };
    Some((num(unit)?, num(attempt)?, mark))
}

pub fn unit_mark(node: &NodeId, batch: &Name, unit: u32, attempt: u32, mark: Mark) -> String {
    format!("{TASK_ASSIGNED}{node}/{batch}/{}", mark_name(unit, attempt, mark))
}

/// `Scheduler/<task>/Outcomes/Batch.r<round>.t<term>.b<batch>`: what a
/// batch's units came to, written once by its manager when every one of
/// them ended, before the batch's folder is deleted.
pub fn batch_record(task: &TaskId, round: u32, batch: BatchNo) -> String {
    format!("{SCHEDULER}{task}/{OUTCOMES_DIR}/{BATCH_RECORD_PREFIX}r{round}.{batch}")
}

/// Parses a batch record's file name, with or without its term, into
/// (round, batch).
pub fn parse_batch_record(file_name: &str) -> Option<(u32, BatchNo)> {
    let (rest, b) = split_batch_no(file_name.strip_prefix(BATCH_RECORD_PREFIX)?)?;
    Some((num(rest.strip_prefix('r')?)?, b))
}

/// The logical name of a unit attempt, the same in every layout:
/// `<task>.r<round>.u<unit>.a<attempt>` (the executors' `{subtask}`, what
/// `status` shows and `reassign` takes).
pub fn unit_id(task: &TaskId, round: u32, unit: u32, attempt: u32) -> Name {
    crate::v2::subtask_name(task, round, unit, attempt)
}

/// The fence a merge executor checks right before its commit
/// (`--fence-dir`): a layout 2 subtask folder
/// (`TaskAssigned/<node>/<subtask>/`), or a layout 3 unit attempt
/// (`TaskAssigned/<node>/<batch>/u<unit>.a<attempt>`).
pub fn fence_of_unit(node: &NodeId, batch: &Name, unit: u32, attempt: u32) -> String {
    format!("{TASK_ASSIGNED}{node}/{batch}/u{unit}.a{attempt}")
}

/// A fence's unit attempt: (unit, attempt), from either form.
pub fn fence_unit(fence: &str) -> Option<(u32, u32)> {
    let last = fence.trim_end_matches('/').rsplit('/').next()?;
    if let Some((_, _, unit, attempt)) = crate::v2::parse_subtask_name(last) {
        return Some((unit, attempt));
    }
    let (u, a) = last.strip_prefix('u')?.split_once(".a")?;
    Some((num(u)?, num(a)?))
}

/// The folder a fence check lists: the subtask folder, or the batch folder.
pub fn fence_folder(fence: &str) -> String {
    if fence.ends_with('/') {
        return fence.to_string();
    }
    match fence.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/"),
        None => String::new(),
    }
}

/// Whether the attempt a fence names is still its manager's: its folder's
/// info is there and it is not cancelled, given the names the listing of
/// [`fence_folder`] shows.
pub fn fence_holds<'a>(fence: &str, names: impl IntoIterator<Item = &'a str>) -> bool {
    let names: Vec<&str> = names.into_iter().collect();
    if fence.ends_with('/') {
        let cancel = crate::state::SubtaskState::Cancel.file_name();
        return names.contains(&crate::v2::TASK_INFO) && !names.contains(&cancel.as_str());
    }
    let Some((unit, attempt)) = fence_unit(fence) else { return false };
    names.contains(&INFO) && !names.contains(&mark_name(unit, attempt, Mark::Cancel).as_str())
}

/// `Info` of a batch: the task's fields its units need, written once per
/// batch instead of once per subtask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// The main task's info, without its unit lists and counts.
    pub task: TaskInfo,
    pub round: u32,
    pub batch: u32,
    /// The manager term that dispatched it.
    pub term: u64,
    /// The node it is for.
    pub node: NodeId,
    /// The node that dispatched it (its workers poke it when a unit ends).
    pub manager: NodeId,
    pub units: Vec<BatchUnit>,
}

/// One unit attempt of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchUnit {
    /// Position of the unit in the task, from 0.
    pub unit: u32,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// `Outcomes/Batch.r<round>.t<term>.b<batch>`: what each unit of a batch came to.
/// `released` units ran elsewhere (or run again): informational.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub node: Option<NodeId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<RecordedUnit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<RecordedUnit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<RecordedUnit>,
}

/// One unit of a [`BatchRecord`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedUnit {
    pub unit: u32,
    pub attempt: u32,
    /// Counters its executor reported (a `done` unit).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stats: std::collections::BTreeMap<String, u64>,
    /// Why it failed for good, or why it was released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A decimal of at most 9 digits (unit, attempt, round and batch numbers).
fn num(s: &str) -> Option<u32> {
    (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

/// A decimal u64 (an incarnation).
fn big(s: &str) -> Option<u64> {
    (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_takes_part_only_where_it_reads_and_advertises_the_layout_in_force() {
        for (in_force, max) in [(2, 2), (2, 4), (3, 3), (4, 4), (3, 4)] {
            assert_eq!(cannot_take_part(in_force, max), None, "{in_force} {max}");
        }
        let newer = cannot_take_part(5, crate::layout::NEWEST).unwrap();
        for part in ["layout 5 is in force", "Registry/Layout.5", "reads layouts 2 to 4", "reads layout 5"] {
            assert!(newer.contains(part), "{part:?} in {newer}");
        }
        let pinned = cannot_take_part(4, 3).unwrap();
        for part in ["Registry/Layout.4", "--max-layout 3", "without --max-layout"] {
            assert!(pinned.contains(part), "{part:?} in {pinned}");
        }
        assert!(cannot_take_part(5, 3).unwrap().contains("a release that reads layout 5"), "the release first");
    }

    #[test]
    fn names_round_trip_and_match_the_documented_tree() {
        let t = TaskId::parse("aaaaffff.16176931.56000000.0").unwrap();
        let b = batch_name(&t, 2, BatchNo::new(2, 1003));
        assert_eq!(b.as_str(), "aaaaffff.16176931.56000000.0.r2.t2.b1003");
        assert_eq!(parse_batch_name(b.as_str()), Some((t, 2, BatchNo::new(2, 1003))));
        // The form before the term was named is read as it was.
        let legacy = BatchNo { term: None, n: 1003 };
        assert_eq!(parse_batch_name("aaaaffff.16176931.56000000.0.r2.b1003"), Some((t, 2, legacy)));
        assert_eq!(batch_name(&t, 2, legacy).as_str(), "aaaaffff.16176931.56000000.0.r2.b1003");
        assert_ne!(batch_name(&t, 2, BatchNo::new(1, 1003)), batch_name(&t, 2, BatchNo::new(2, 1003)));
        for bad in [
            "aaaaffff.16176931.56000000.0.r2.u5.a3",
            "aaaaffff.16176931.56000000.0.r2.t.b3",
            "aaaaffff.16176931.56000000.0.r2.tx.b3",
            "aaaaffff.16176931.56000000.0.t2.b3",
            "aaaaffff.16176931.56000000.0.r2.t2",
        ] {
            assert_eq!(parse_batch_name(bad), None, "{bad}");
        }
        let n = NodeId::parse("xcloud25_9876").unwrap();
        assert_eq!(
            unit_mark(&n, &b, 7, 1001, Mark::Running(1795297318122)),
            "Compaction_V2/TaskAssigned/xcloud25_9876/aaaaffff.16176931.56000000.0.r2.t2.b1003/u7.a1001.Running.1795297318122"
        );
        for m in [Mark::Running(17), Mark::Released, Mark::Cancel, Mark::Success, Mark::Failed, Mark::Output] {
            assert_eq!(parse_mark(&mark_name(3, 9, m)), Some((3, 9, m)));
        }
        for bad in ["u1.a2", "u1.a2.Running", "u1.a2.Running.", "u.a2.Success", "u1.a2.Bogus", "x1.a2.Success", "Info"]
        {
            assert_eq!(parse_mark(bad), None, "{bad}");
        }
        assert_eq!(
            batch_record(&t, 2, BatchNo::new(4, 3)),
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Outcomes/Batch.r2.t4.b3"
        );
        assert_eq!(parse_batch_record("Batch.r2.t4.b3"), Some((2, BatchNo::new(4, 3))));
        assert_eq!(parse_batch_record("Batch.r2.b3"), Some((2, BatchNo { term: None, n: 3 })));
        assert_eq!(parse_batch_record("Batch.r2.tx.b3"), None);
        assert_eq!(parse_batch_record("Done.r2.u3"), None);
        assert_eq!(layout_marker(3), "Compaction_V2/Registry/Layout.3");
        let rec = |layout| {
            let s = LayoutSwitch { layout, epoch: 2, monitor: NodeId::parse("n1").unwrap(), wall_ms: 5 };
            crate::formats::encode(&s)
        };
        assert_eq!(switch_holds(4, &rec(4)), Ok(()));
        assert_eq!(switch_holds(3, &rec(3)), Ok(()));
        assert_eq!(switch_holds(3, b""), Ok(()), "the form before layout 4");
        assert!(switch_holds(4, b"").is_err(), "empty: made by hand, or cut short");
        assert!(switch_holds(4, &rec(3)).is_err(), "another layout's");
        assert!(switch_holds(4, &rec(4)[..10]).is_err(), "cut short");
        assert!(switch_holds(3, b"garbage").is_err());
        assert_eq!(parse_layout_marker("Layout.3"), Some(3));
        assert_eq!(parse_layout_marker("Layout.x"), None);
    }

    #[test]
    fn a_fence_names_a_subtask_folder_or_a_unit_of_a_batch() {
        let t = TaskId::parse("aaaaffff.16176931.56000000.0").unwrap();
        let n = NodeId::parse("n1").unwrap();
        let v2 = crate::v2::subtask_dir(&n, &crate::v2::subtask_name(&t, 1, 4, 2));
        assert_eq!(fence_unit(&v2), Some((4, 2)));
        assert_eq!(fence_folder(&v2), v2);
        assert!(fence_holds(&v2, ["TaskInfo.pc.db", "Status.Running"]));
        assert!(!fence_holds(&v2, ["TaskInfo.pc.db", "Status.Cancel"]));
        assert!(!fence_holds(&v2, ["Status.Running"]));
        let b = batch_name(&t, 1, BatchNo::new(1, 1));
        let v3 = fence_of_unit(&n, &b, 4, 2);
        assert_eq!(fence_unit(&v3), Some((4, 2)));
        assert_eq!(fence_folder(&v3), batch_dir(&n, &b));
        assert!(fence_holds(&v3, ["Info", "u4.a2.Running.7", "u5.a1.Cancel"]));
        assert!(!fence_holds(&v3, ["Info", "u4.a2.Running.7", "u4.a2.Cancel"]));
        assert!(!fence_holds(&v3, ["u4.a2.Running.7"]), "the batch was removed");
    }
}
