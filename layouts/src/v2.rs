//! The v2 tree (`<root>/Compaction_V2/…`) as typed paths.
//!
//! ```text
//! Compaction_V2/
//!   Scheduler/<TaskId>/Status.<TaskState>        state marker (empty)
//!   Scheduler/<TaskId>/TaskInfo.pc.db            task info (JSON, TaskInfo)
//!   Scheduler/<TaskId>/Manager.<term, 20 digits> manager of one term (JSON)
//!   Scheduler/<TaskId>/Stop                      stop request (JSON)
//!   Scheduler/Compress/<archive>                 compressed history
//!   TaskAssigned/<NodeId>/<SubtaskId>/Status.<SubtaskState>
//!   TaskAssigned/<NodeId>/<SubtaskId>/TaskInfo.pc.db
//!   TaskAssigned/<NodeId>/<SubtaskId>/Output     executor output tail
//!   TaskAssigned/<NodeId>/Manage.<TaskId>        "this node manages that task"
//!   TaskUpgradeLock/<v1 task file name>.lock     upgrade marks (see migrate)
//!   Registry/Nodes/<NodeId>                      heartbeat (JSON, Heartbeat)
//!   Registry/Offline/<NodeId>.<incarnation>      offline declaration (JSON)
//!   Registry/Events/<seq, 20 digits>             change event (JSON, Event)
//!   Election/Lease.<epoch, 20 digits>            monitor lease (JSON, Lease)
//! ```
//!
//! All functions return paths relative to the store root, with `/` separators
//! and a trailing `/` for folders (the convention of the store layer).

use crate::id::TaskId;
use crate::name::{Name, NodeId};
use crate::state::{SubtaskState, TaskState};

pub const ROOT: &str = "Compaction_V2/";
pub const SCHEDULER: &str = "Compaction_V2/Scheduler/";
pub const COMPRESS: &str = "Compaction_V2/Scheduler/Compress/";
pub const TASK_ASSIGNED: &str = "Compaction_V2/TaskAssigned/";
pub const UPGRADE_LOCKS: &str = "Compaction_V2/TaskUpgradeLock/";
pub const REGISTRY: &str = "Compaction_V2/Registry/";
pub const NODES: &str = "Compaction_V2/Registry/Nodes/";
pub const OFFLINE: &str = "Compaction_V2/Registry/Offline/";
pub const EVENTS: &str = "Compaction_V2/Registry/Events/";
/// One stamp per node, rewritten by whoever wrote into that node's folder
/// and could not poke it ([`inbox`]).
pub const INBOX: &str = "Compaction_V2/Registry/Inbox/";
/// One empty marker per incarnation a node started, until the monitor has
/// read that incarnation's heartbeat ([`join_marker`]).
pub const JOINS: &str = "Compaction_V2/Registry/Joins/";
/// Who runs under each node id: `<node>.<generation>` claims, created once
/// ([`owner_claim`]).
pub const OWNERS: &str = "Compaction_V2/Registry/Owners/";
pub const ELECTION: &str = "Compaction_V2/Election/";

pub const TASK_INFO: &str = "TaskInfo.pc.db";
pub const LEASE_PREFIX: &str = "Lease.";
pub const COMPRESS_DIR: &str = "Compress";
pub const MANAGER_PREFIX: &str = "Manager.";
pub const MANAGE_PREFIX: &str = "Manage.";
pub const ENDED_PREFIX: &str = "Ended.";
pub const STOP: &str = "Stop";
pub const REASSIGN_PREFIX: &str = "Reassign.";
pub const DONE_PREFIX: &str = "Done.";
pub const FAILED_PREFIX: &str = "Failed.";
pub const OUTPUT: &str = "Output";
pub const OUTCOMES_DIR: &str = "Outcomes";
pub const STAGED_DIR: &str = "Staged";
/// The `partition_name` of an `iceberg` task's commit unit (reserved: a
/// leading `_` is never a partition unit's).
pub const COMMIT_UNIT: &str = "_commit";

/// Every top-level folder of the v2 tree; anything else below `Compaction_V2/`
/// is reported by `compactd check`.
pub const TOP_LEVEL: &[&str] =
    &["Scheduler/", "TaskAssigned/", "TaskUpgradeLock/", "Registry/", "Election/", "Jobs/", "Policies/", "Tables/"];

pub fn task_dir(task: &TaskId) -> String {
    format!("{SCHEDULER}{task}/")
}

pub fn task_info(task: &TaskId) -> String {
    format!("{SCHEDULER}{task}/{TASK_INFO}")
}

pub fn task_status(task: &TaskId, state: TaskState) -> String {
    format!("{SCHEDULER}{task}/{}", state.file_name())
}

pub fn node_assigned_dir(node: &NodeId) -> String {
    format!("{TASK_ASSIGNED}{node}/")
}

pub fn subtask_dir(node: &NodeId, subtask: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{subtask}/")
}

pub fn subtask_info(node: &NodeId, subtask: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{subtask}/{TASK_INFO}")
}

pub fn subtask_status(node: &NodeId, subtask: &Name, state: SubtaskState) -> String {
    format!("{TASK_ASSIGNED}{node}/{subtask}/{}", state.file_name())
}

/// `Scheduler/<task>/Manager.<term>`: the manager of one term (atomic create).
pub fn manager_term(task: &TaskId, term: u64) -> String {
    format!("{SCHEDULER}{task}/{MANAGER_PREFIX}{term:020}")
}

pub fn parse_manager_term(file_name: &str) -> Option<u64> {
    parse_event_name(file_name.strip_prefix(MANAGER_PREFIX)?)
}

/// `Scheduler/<task>/Stop`: a stop request (atomic create).
pub fn stop_request(task: &TaskId) -> String {
    format!("{SCHEDULER}{task}/{STOP}")
}

/// `Scheduler/<task>/Outcomes/Done.r<round>.u<unit>` (or `Failed.…`): a
/// unit's outcome, created once by its manager (a stale manager cannot undo
/// it). In a folder of their own so that the task folder, which a manager
/// lists every round, does not grow with the task's units.
pub fn unit_outcome(task: &TaskId, round: u32, unit: u32, ok: bool) -> String {
    let kind = if ok { DONE_PREFIX } else { FAILED_PREFIX };
    format!("{SCHEDULER}{task}/{OUTCOMES_DIR}/{kind}r{round}.u{unit}")
}

/// Where versions before `Outcomes/` wrote an outcome: in the task folder
/// itself. Still read (and deleted with its round) where a tree has them.
pub fn legacy_unit_outcome(task: &TaskId, round: u32, unit: u32, ok: bool) -> String {
    let kind = if ok { DONE_PREFIX } else { FAILED_PREFIX };
    format!("{SCHEDULER}{task}/{kind}r{round}.u{unit}")
}

/// `Scheduler/<task>/Outcomes/`.
pub fn outcomes_dir(task: &TaskId) -> String {
    format!("{SCHEDULER}{task}/{OUTCOMES_DIR}/")
}

/// Parses an outcome file name into (ok, round, unit).
pub fn parse_unit_outcome(file_name: &str) -> Option<(bool, u32, u32)> {
    let (ok, rest) = match file_name.strip_prefix(DONE_PREFIX) {
        Some(r) => (true, r),
        None => (false, file_name.strip_prefix(FAILED_PREFIX)?),
    };
    let (r, u) = rest.strip_prefix('r')?.split_once(".u")?;
    let num =
        |s: &str| (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?;
    Some((ok, num(r)?, num(u)?))
}

/// `Scheduler/<task>/Staged/`: what the units of an `iceberg` task staged
/// for its commit unit.
pub fn staged_dir(task: &TaskId) -> String {
    format!("{SCHEDULER}{task}/{STAGED_DIR}/")
}

/// `Scheduler/<task>/Staged/r<round>.u<unit>.a<attempt>`: one attempt's
/// staged outputs (created once by that attempt).
pub fn staged_unit(task: &TaskId, round: u32, unit: u32, attempt: u32) -> String {
    format!("{SCHEDULER}{task}/{STAGED_DIR}/r{round}.u{unit}.a{attempt}")
}

/// Parses a staged-unit file name into (round, unit, attempt).
pub fn parse_staged_unit(file_name: &str) -> Option<(u32, u32, u32)> {
    let (r, rest) = file_name.strip_prefix('r')?.split_once(".u")?;
    let (u, a) = rest.split_once(".a")?;
    let num =
        |s: &str| (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?;
    Some((num(r)?, num(u)?, num(a)?))
}

/// `Scheduler/<task>/Reassign.u<unit>`: a request to move a subtask.
pub fn reassign_request(task: &TaskId, unit: u32) -> String {
    format!("{SCHEDULER}{task}/{REASSIGN_PREFIX}u{unit}")
}

pub fn parse_reassign_request(file_name: &str) -> Option<u32> {
    let n = file_name.strip_prefix(REASSIGN_PREFIX)?.strip_prefix('u')?;
    (!n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok())?
}

/// `TaskAssigned/<node>/Manage.<task>`: tells `node` it manages `task`.
pub fn manage_pointer(node: &NodeId, task: &TaskId) -> String {
    format!("{TASK_ASSIGNED}{node}/{MANAGE_PREFIX}{task}")
}

pub fn parse_manage_pointer(file_name: &str) -> Option<TaskId> {
    TaskId::parse(file_name.strip_prefix(MANAGE_PREFIX)?).ok()
}

/// `TaskAssigned/<node>/Ended.<incarnation>`: written by the node itself
/// once an incarnation of it ended on its own account (it rejoined under a
/// new one, or left) and that incarnation's executors are dead: it starts
/// nothing any more. Managers list the node's folder anyway; a subtask that
/// incarnation claimed may go to another node at once, as after an offline
/// declaration ([`crate::formats::EndedMark`]).
pub fn ended_marker(node: &NodeId, incarnation: u64) -> String {
    format!("{TASK_ASSIGNED}{node}/{ENDED_PREFIX}{incarnation}")
}

pub fn parse_ended_marker(file_name: &str) -> Option<u64> {
    let inc = file_name.strip_prefix(ENDED_PREFIX)?;
    if inc.is_empty() || !inc.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inc.parse().ok()
}

/// Attempt numbers reserved per manager term: the attempts dispatched in
/// term `t` are numbered from `(t-1)·1000 + 1`, so a new manager, which
/// cannot see the deleted folders of earlier attempts, never reuses the
/// number (and so the folder name) of an earlier manager's attempt.
pub const ATTEMPTS_PER_TERM: u32 = 1000;

/// The attempt number to dispatch next in manager term `term`, after
/// `previous` (0 if none).
pub fn next_attempt(previous: u32, term: u64) -> u32 {
    let floor = term.saturating_sub(1).saturating_mul(ATTEMPTS_PER_TERM as u64).min(u32::MAX as u64 - 1) as u32;
    previous.max(floor) + 1
}

/// Name of a subtask folder: `<task>.r<round>.u<unit>.a<attempt>`.
pub fn subtask_name(task: &TaskId, round: u32, unit: u32, attempt: u32) -> Name {
    Name::parse(&format!("{task}.r{round}.u{unit}.a{attempt}")).expect("subtask names are valid")
}

/// Parses a subtask folder name into (task, round, unit, attempt).
pub fn parse_subtask_name(name: &str) -> Option<(TaskId, u32, u32, u32)> {
    let mut it = name.rsplitn(4, '.');
    let a = it.next()?.strip_prefix('a')?;
    let u = it.next()?.strip_prefix('u')?;
    let r = it.next()?.strip_prefix('r')?;
    let task = TaskId::parse(it.next()?).ok()?;
    let num =
        |s: &str| (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?;
    Some((task, num(r)?, num(u)?, num(a)?))
}

/// `Output` beside a subtask's status: the tail of the executor's output.
pub fn subtask_output(node: &NodeId, subtask: &Name) -> String {
    format!("{TASK_ASSIGNED}{node}/{subtask}/{OUTPUT}")
}

pub fn upgrade_lock(v1_file_name: &Name) -> String {
    format!("{UPGRADE_LOCKS}{v1_file_name}.lock")
}

pub fn heartbeat(node: &NodeId) -> String {
    format!("{NODES}{node}")
}

/// `Registry/Inbox/<node>`: rewritten after a write into
/// `TaskAssigned/<node>/` whose wake-up could not be delivered; an idle node
/// reads this one small file per poll instead of listing its folder, and
/// lists when it changed ([`crate::formats::InboxStamp`]).
pub fn inbox(node: &NodeId) -> String {
    format!("{INBOX}{node}")
}

pub fn offline_marker(node: &NodeId, incarnation: u64) -> String {
    format!("{OFFLINE}{node}.{incarnation}")
}

/// `Registry/Joins/<node>.<incarnation>`: created (empty) by a node right
/// before the first heartbeat of a new incarnation. The monitor judges beats
/// from the heartbeat listing without reading content, and a restart under
/// the same id looks like a beat there: this marker says "read my heartbeat".
/// The monitor deletes it once it has read that incarnation (or a newer one,
/// or the heartbeat is gone). Named like offline markers.
pub fn join_marker(node: &NodeId, incarnation: u64) -> String {
    format!("{JOINS}{node}.{incarnation}")
}

/// Parses an offline marker's file name back into node and incarnation
/// (join markers are named the same way).
pub fn parse_offline_marker(file_name: &str) -> Option<(NodeId, u64)> {
    let (node, inc) = file_name.rsplit_once('.')?;
    if inc.is_empty() || !inc.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((NodeId::parse(node).ok()?, inc.parse().ok()?))
}

/// `Registry/Owners/<node>.<generation: 20 digits>`: created once by the
/// process that starts under `node` ([`crate::formats::OwnerClaim`]). Of two
/// processes starting under one id, the one whose create of the next
/// generation wins runs; the other exits naming the winner. The winner
/// deletes older generations of its id.
pub fn owner_claim(node: &NodeId, generation: u64) -> String {
    format!("{OWNERS}{node}.{generation:020}")
}

/// Parses an owner claim's file name into node and generation.
pub fn parse_owner_claim(file_name: &str) -> Option<(NodeId, u64)> {
    let (node, generation) = file_name.rsplit_once('.')?;
    Some((NodeId::parse(node).ok()?, parse_event_name(generation)?))
}

pub fn event(seq: u64) -> String {
    format!("{EVENTS}{seq:020}")
}

pub fn parse_event_name(file_name: &str) -> Option<u64> {
    (file_name.len() == 20 && file_name.bytes().all(|b| b.is_ascii_digit())).then(|| file_name.parse().ok())?
}

pub fn lease(epoch: u64) -> String {
    format!("{ELECTION}{LEASE_PREFIX}{epoch:020}")
}

pub fn parse_lease_name(file_name: &str) -> Option<u64> {
    parse_event_name(file_name.strip_prefix(LEASE_PREFIX)?)
}

/// The last segment of a store path (`a/b/` → `b`, `a/b` → `b`).
pub fn file_name(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

/// The upgrade's state marker (JSON, `formats::UpgradeState`). It lives
/// beside the locks so that `--finalize` removes it with them, last.
pub const UPGRADE_STATE: &str = "Compaction_V2/TaskUpgradeLock/UpgradeState.json";
pub const UPGRADE_LOCK_SUFFIX: &str = ".lock";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_of_a_term_start_above_every_earlier_terms() {
        assert_eq!(next_attempt(0, 1), 1);
        assert_eq!(next_attempt(1, 1), 2);
        assert_eq!(next_attempt(3, 2), 1001, "a new manager starts above term 1's range");
        assert_eq!(next_attempt(1004, 2), 1005);
        assert_eq!(next_attempt(0, u64::MAX), u32::MAX, "saturates instead of wrapping");
    }

    #[test]
    fn paths_match_the_documented_tree() {
        let t = TaskId::parse("aaaaffff.16176931.56000000.0").unwrap();
        assert_eq!(
            task_status(&t, TaskState::Init),
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Status.Init"
        );
        assert_eq!(task_info(&t), "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/TaskInfo.pc.db");
        let n = NodeId::parse("xcloud24_9876").unwrap();
        assert_eq!(heartbeat(&n), "Compaction_V2/Registry/Nodes/xcloud24_9876");
        assert_eq!(lease(7), "Compaction_V2/Election/Lease.00000000000000000007");
        assert_eq!(parse_lease_name("Lease.00000000000000000007"), Some(7));
        assert_eq!(parse_lease_name("Lease.7"), None);
        assert_eq!(parse_event_name("00000000000000000042"), Some(42));
        assert_eq!(parse_offline_marker("xcloud24_9876.17"), Some((n.clone(), 17)));
        assert_eq!(parse_offline_marker("../x.17"), None);
        assert_eq!(file_name("a/b/"), "b");
        let sub = subtask_name(&t, 2, 5, 3);
        assert_eq!(sub.as_str(), "aaaaffff.16176931.56000000.0.r2.u5.a3");
        assert_eq!(parse_subtask_name(sub.as_str()), Some((t, 2, 5, 3)));
        assert_eq!(parse_subtask_name("aaaaffff.16176931.56000000.0.r2.u5"), None);
        assert_eq!(parse_subtask_name("x.r1.u1.a1"), None);
        assert_eq!(
            manager_term(&t, 3),
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Manager.00000000000000000003"
        );
        assert_eq!(parse_manager_term("Manager.00000000000000000003"), Some(3));
        assert_eq!(
            unit_outcome(&t, 2, 7, true),
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Outcomes/Done.r2.u7"
        );
        assert_eq!(
            legacy_unit_outcome(&t, 2, 7, false),
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Failed.r2.u7"
        );
        assert_eq!(outcomes_dir(&t), "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Outcomes/");
        assert_eq!(parse_unit_outcome("Done.r2.u7"), Some((true, 2, 7)));
        assert_eq!(parse_unit_outcome("Failed.r1.u0"), Some((false, 1, 0)));
        assert_eq!(parse_unit_outcome("Done.r1"), None);
        assert_eq!(parse_manage_pointer("Manage.aaaaffff.16176931.56000000.0"), Some(t));
        let lock = upgrade_lock(&Name::parse("compct.xcloud24_9876.0.1617693156000").unwrap());
        assert_eq!(lock, "Compaction_V2/TaskUpgradeLock/compct.xcloud24_9876.0.1617693156000.lock");
    }
}
