//! File formats of the v2 tree. All are JSON objects with stable field names.
//!
//! Readers ignore unknown fields (forward compatibility) and reject files that
//! do not parse: a file written in place by a backend without atomic replace
//! can be seen half-written, and a truncated JSON object never parses, so a
//! reader never acts on a partial file (it retries on its next poll).

use serde::{Deserialize, Serialize};

use crate::id::TaskId;
use crate::name::{Name, NodeId};

/// Largest file compactd reads from the tree; anything larger is reported as
/// malformed instead of being loaded into memory.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("file is {0} bytes, over the {MAX_FILE_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("malformed JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Parses a tree file of a known format.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, FormatError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(FormatError::TooLarge(bytes.len()));
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// Serializes a tree file. Pretty-printed: ops read these with `cat`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(value).expect("tree formats always serialize");
    v.push(b'\n');
    v
}

/// `RepeatInfo` of the seed's task info.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepeatInfo {
    #[serde(rename = "repeatCount", default)]
    pub repeat_count: u32,
    /// Interval between rounds, in milliseconds.
    #[serde(rename = "repeatInterval", default)]
    pub repeat_interval: u64,
    /// A cron repeat task: rounds start at this 5-field pattern's fire
    /// instants (instead of `repeatInterval` after the previous round).
    /// Absent in the seed's format and in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone of `cron`; absent: UTC.
    #[serde(rename = "timeZone", default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// `ResultInfo` of the seed's task info.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultInfo {
    #[serde(rename = "successCount", default)]
    pub success_count: u64,
    #[serde(rename = "failedCount", default)]
    pub failed_count: u64,
}

/// `TaskInfo.pc.db`: the seed's task info fields, as JSON with the seed's
/// names. The state is duplicated from the `Status.<State>` marker for
/// readers that only fetch this file; the marker is authoritative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    #[serde(rename = "CompactTaskId")]
    pub id: TaskId,
    #[serde(rename = "CompactTaskState")]
    pub state: String,
    pub repeat_flag: bool,
    pub sub_task_flag: bool,
    #[serde(rename = "RepeatInfo", default)]
    pub repeat: RepeatInfo,
    #[serde(rename = "ResultInfo", default)]
    pub result: ResultInfo,
    pub db_name: Name,
    pub schema_name: Name,
    pub table_name: Name,
    /// Empty for a main task that covers a whole table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_name: Option<Name>,
    /// compactd's execution fields (absent in the seed's format).
    #[serde(flatten)]
    pub run: RunInfo,
}

/// Which executor runs a task's subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// Built in: merges the small newline-delimited files of one partition folder.
    Merge,
    /// Built in: rewrites the small Parquet files of one partition folder
    /// into files of about the target size.
    Parquet,
    /// Built in: compacts one partition of a Delta Lake table (the folder
    /// holding `_delta_log/`) as one `OPTIMIZE` commit of the table.
    Delta,
    /// Built in: compacts an Apache Iceberg table: each unit rewrites one
    /// partition (spec and partition tuple) and stages its outputs, then one
    /// last unit commits them all as one `replace` snapshot.
    Iceberg,
    /// Built in: a table's retention (a Delta table's `VACUUM` and log
    /// cleanup), one unit per table.
    Expire,
    /// A command template run by `sh -c`.
    Command,
    /// Succeeds at once, in process: measures the scheduler alone
    /// (benchmarks, simulations).
    Noop,
}

impl ExecutorKind {
    /// Its name as the command line and the tree give it: `merge`, `command`.
    pub fn label(self) -> &'static str {
        match self {
            ExecutorKind::Merge => "merge",
            ExecutorKind::Parquet => "parquet",
            ExecutorKind::Delta => "delta",
            ExecutorKind::Iceberg => "iceberg",
            ExecutorKind::Expire => "expire",
            ExecutorKind::Command => "command",
            ExecutorKind::Noop => "noop",
        }
    }

    /// Every kind this version knows (and runs).
    pub const ALL: [ExecutorKind; 7] = [
        ExecutorKind::Merge,
        ExecutorKind::Parquet,
        ExecutorKind::Delta,
        ExecutorKind::Iceberg,
        ExecutorKind::Expire,
        ExecutorKind::Command,
        ExecutorKind::Noop,
    ];

    /// The kind a [`ExecutorKind::label`] names.
    pub fn from_label(s: &str) -> Option<ExecutorKind> {
        ExecutorKind::ALL.into_iter().find(|k| k.label() == s)
    }

    /// `merge`, `parquet`, `delta` or `iceberg`: built in, one partition
    /// per unit, run as `compactd __merge`.
    pub fn is_builtin_merge(self) -> bool {
        matches!(self, ExecutorKind::Merge | ExecutorKind::Parquet | ExecutorKind::Delta | ExecutorKind::Iceberg)
    }

    /// The executors a node that does not advertise its own list runs
    /// (versions before [`Heartbeat::executors`]): a task of another kind
    /// is never placed on it, since it could not even read the task.
    pub const LEGACY: [ExecutorKind; 4] =
        [ExecutorKind::Merge, ExecutorKind::Parquet, ExecutorKind::Delta, ExecutorKind::Command];

    /// Whether a member advertising `executors` (`None`: an older node that
    /// advertises none, see [`ExecutorKind::LEGACY`]) runs this kind.
    pub fn run_by(self, executors: Option<&[String]>) -> bool {
        match executors {
            Some(list) => list.iter().any(|e| e == self.label()),
            None => ExecutorKind::LEGACY.contains(&self),
        }
    }
}

/// A task's executor, overriding the nodes' default (`run --executor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorSpec {
    pub kind: ExecutorKind,
    /// For `command`: the template (`{db} {schema} {table} {partition} {task}
    /// {subtask} {shard_index} {shard_total} {param.NAME}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// For `command`: the name of a command template each node defines in
    /// its own configuration (`run --command NAME=TEMPLATE`); a node runs
    /// only the names it defines. Preferred over an inline `command`, which
    /// nodes run only when started with `--allow-inline-commands`.
    #[serde(rename = "commandName", default, skip_serializing_if = "Option::is_none")]
    pub command_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl ExecutorSpec {
    /// A built-in executor (or a node's default command) with no template
    /// of its own and the nodes' timeout.
    pub fn builtin(kind: ExecutorKind) -> ExecutorSpec {
        ExecutorSpec { kind, command: None, command_name: None, timeout_ms: None }
    }
}

/// One shard of a sharded task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub total: u32,
}

/// Where a subtask stands among its task's subtasks and attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskMeta {
    /// The main task.
    pub parent: TaskId,
    /// Position of its unit (partition or shard) in the task, from 0.
    pub index: u32,
    /// Round of a repeat task, from 1.
    pub round: u32,
    /// Dispatch attempt of this unit in this round, from 1. Only the newest
    /// attempt's result is accepted.
    pub attempt: u32,
    /// Manager term that dispatched it.
    pub term: u64,
    pub node: NodeId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The node that dispatched it (the manager of `term`): the worker pokes
    /// it when the subtask ends. Absent in files of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<NodeId>,
}

/// Parameter carrying a planner task's target size to the built-in
/// executors (set by the policy planner, read by discovery and executors).
pub const TARGET_SIZE_PARAM: &str = "compactd_target_size";

/// Parameter every job step's task carries: `<job>/<trigger>/<step>`. It
/// lets a job's driver find a task whose submission was not recorded, and
/// the task layer tell a step's task from others.
pub const JOB_STEP_PARAM: &str = "compactd_job_step";

/// compactd's execution fields of a task info file. All optional, so the
/// seed's plain task info (and an upgraded v1 task) reads as a default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Partitions to compact; empty: discover them on the data backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Name>,
    /// A sharded task: this many subtasks, each told `{index, total}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorSpec>,
    /// Parameters passed to the executor (placeholders and environment).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub params: std::collections::BTreeMap<String, String>,
    /// Current round (main task), 0 before the first dispatch.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub round: u32,
    /// Wall time at which the next round of a repeat task is due (for a
    /// cron task still in `Init`: its first round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_round_at_ms: Option<u64>,
    /// A cron repeat task: the fire instant the current round stands for
    /// (the latest one when it started); the next round is due after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_wall_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_wall_ms: Option<u64>,
    /// Why the task failed as a whole (not one of its units), e.g. a merge
    /// task whose table has no partition folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set on subtask info files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtask: Option<SubtaskMeta>,
    /// Units of the last finished round that succeeded / failed for good: a
    /// summary written when the round ends. The record of each unit, written
    /// as it finishes, is its `Done.r<round>.u<unit>` / `Failed.…` file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done_units: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_units: Vec<u32>,
    /// The last round whose outcomes are added into `ResultInfo`; counts of
    /// a later round are its outcome files.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub counted_round: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `Registry/Inbox/<node>`: "look at your folder". Its content only needs
/// to differ from the previous stamp (so that the object's version and bytes
/// change); the fields say who wrote it, for ops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxStamp {
    /// The writer: a node id, or `cli` for a command.
    pub from: String,
    pub wall_ms: u64,
    /// Distinguishes two stamps of one writer within a millisecond.
    pub seq: u64,
    pub pid: u32,
}

/// `Registry/Owners/<node>.<generation>`: the process that runs under a node
/// id, created once when it starts (see `v2::owner_claim`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerClaim {
    pub node: NodeId,
    pub host: String,
    pub pid: u32,
    /// The claimant's wall clock, for humans only.
    pub wall_ms: u64,
    pub version: String,
}

/// `Registry/Nodes/<node>`: a node's heartbeat, rewritten every interval.
///
/// Liveness is judged by observers on their own monotonic clock from changes
/// of `beat`; `wall_ms` is informational only (clocks are never compared
/// across nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub node: NodeId,
    /// Changes every time the node (re)joins; offline declarations name it.
    pub incarnation: u64,
    /// Incremented by every heartbeat write of this incarnation.
    pub beat: u64,
    pub session_timeout_ms: u64,
    pub heartbeat_ms: u64,
    /// The writer's wall clock, for humans only.
    pub wall_ms: u64,
    pub pid: u32,
    pub version: String,
    /// The monitor epoch this node holds, if it is the monitor.
    #[serde(default)]
    pub monitor_epoch: Option<u64>,
    /// Monitor actions this node refused to take because it found itself
    /// fenced (its lease lapsed or a higher epoch existed).
    #[serde(default)]
    pub fenced_actions: u64,
    /// Last change event this node has consumed (its cursor in the log).
    #[serde(default)]
    pub event_cursor: u64,
    /// Names of the command templates this node defines (never the
    /// templates themselves), so that managers place `commandName` work on
    /// nodes that have it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// `HOST:PORT` where this node takes wake-up pokes (`run --advertise`);
    /// absent when its listener is off. A hint only: see PROTOCOL.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The executor this node gives a task submitted without one (`run
    /// --executor`), so that `submit` can record it in the task. A string,
    /// not an [`ExecutorKind`]: a node must read the heartbeat of a newer
    /// node whose executor it does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// The executors this node runs ([`ExecutorKind::label`]s), so that a
    /// manager places a unit only on nodes that run its executor. Absent
    /// in heartbeats of older nodes (see [`ExecutorKind::LEGACY`]). Strings,
    /// as for `executor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executors: Option<Vec<String>>,
    /// Subtasks this node runs at once (`run --max-running`), so that the
    /// policy planner knows the cluster's capacity. Absent in heartbeats
    /// of older nodes (then counted as the default, 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// The tree layouts this node reads and writes (`crate::layout::READS`,
    /// fewer under `run --max-layout`). Absent in heartbeats of older
    /// nodes: layout 2 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layouts: Option<Vec<u32>>,
    /// The node is draining (a first SIGTERM): it starts nothing new and
    /// leaves once its running units reported. Managers place nothing on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// Whether a node advertising `layouts` (`None`: an older node) reads
/// layout `n`.
pub fn reads_layout(layouts: Option<&[u32]>, n: u32) -> bool {
    layouts.unwrap_or(&crate::layout::LEGACY_READS).contains(&n)
}

/// One member as the monitor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub node: NodeId,
    pub incarnation: u64,
    pub session_timeout_ms: u64,
    /// The command names its heartbeat advertises.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// The wake-up address its heartbeat advertises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The default executor its heartbeat advertises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// The executors its heartbeat advertises (absent: an older node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executors: Option<Vec<String>>,
    /// The executor slots its heartbeat advertises (absent: an older node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// The layouts its heartbeat advertises (absent: an older node, layout
    /// 2 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layouts: Option<Vec<u32>>,
    /// Its heartbeat says it is draining.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

impl Member {
    /// A member known by its incarnation alone (an offline record, an
    /// expired session): no commands, address or executor.
    pub fn bare(node: NodeId, incarnation: u64, session_timeout_ms: u64) -> Member {
        Member {
            node,
            incarnation,
            session_timeout_ms,
            commands: vec![],
            addr: None,
            executor: None,
            executors: None,
            slots: None,
            layouts: None,
            draining: false,
        }
    }

    /// Whether it reads layout `n`.
    pub fn reads(&self, n: u32) -> bool {
        reads_layout(self.layouts.as_deref(), n)
    }
}

/// `Election/Lease.<epoch>`: the monitor's lease for one epoch.
///
/// Created once with atomic create (that is the election), then rewritten by
/// its holder every renewal. It also carries the monitor's membership view, so
/// a follower learns both "is the monitor alive" and "who is alive" from one
/// read per poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub epoch: u64,
    pub holder: NodeId,
    pub holder_incarnation: u64,
    /// Incremented by every renewal; followers watch it change.
    pub renewal: u64,
    pub lease_ms: u64,
    /// The writer's wall clock, for humans only.
    pub wall_ms: u64,
    /// Nodes the monitor considers alive, sorted by node id.
    #[serde(default)]
    pub members: Vec<Member>,
    /// Incarnations declared offline and not yet purged.
    #[serde(default)]
    pub offline: Vec<Member>,
    /// Sequence number of the newest change event.
    #[serde(default)]
    pub last_event: u64,
    /// Set by a monitor that leaves cleanly: followers take over at once
    /// instead of waiting for the lease to run out.
    #[serde(default)]
    pub released: bool,
    /// The layout in force (`Registry/Layout.<n>`, the highest present), as
    /// the monitor last listed it; absent: layout 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<u32>,
}

impl Lease {
    /// The layout in force as this view says (2 when it says nothing).
    pub fn layout(&self) -> u32 {
        self.layout.unwrap_or(crate::layout::LAYOUT_2)
    }

    /// Raises the layout this view says is in force to at least `floor`,
    /// a layout its reader saw in force before: markers are never removed,
    /// and a lease written by an older monitor says nothing of them, which
    /// must not read as layout 2. Returns the layout now in force.
    pub fn keep_layout_at_least(&mut self, floor: u32) -> u32 {
        let n = self.layout().max(floor);
        self.layout = (n > crate::layout::LAYOUT_2).then_some(n);
        n
    }
}

/// `Registry/Offline/<node>.<incarnation>`: the monitor's declaration that an
/// incarnation is offline. Created once with atomic create (so a node is
/// declared offline exactly once, even across monitor failover), then
/// rewritten when the follow-up steps are done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfflineRecord {
    pub node: NodeId,
    pub incarnation: u64,
    /// The epoch of the monitor that declared it.
    pub epoch: u64,
    pub declared_by: NodeId,
    pub wall_ms: u64,
    /// Set once the event is logged and the node's ephemeral state removed.
    #[serde(default)]
    pub cleaned: bool,
    #[serde(default)]
    pub event_seq: Option<u64>,
}

/// `TaskAssigned/<node>/Ended.<incarnation>`: an incarnation that ended on
/// its node's own account, its executors dead ([`crate::v2::ended_marker`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedMark {
    pub node: NodeId,
    pub incarnation: u64,
    pub wall_ms: u64,
    /// Why it ended (a rejoin's reason, a clean leave).
    #[serde(default)]
    pub why: String,
}

/// What a change event reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum EventKind {
    NodeJoined {
        node: NodeId,
        incarnation: u64,
    },
    NodeOffline {
        node: NodeId,
        incarnation: u64,
    },
    NodeLeft {
        node: NodeId,
        incarnation: u64,
    },
    /// The event's own `epoch` is the epoch won.
    MonitorElected {
        node: NodeId,
    },
    /// An event kind written by a newer version; readers skip it.
    #[serde(other)]
    Unknown,
}

/// `Registry/Events/<seq>`: one entry of the append-only change log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    /// The monitor epoch that wrote it.
    pub epoch: u64,
    /// The node that wrote it (the holder of `epoch`).
    pub by: NodeId,
    pub wall_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_info_uses_the_seed_field_names() {
        let info = TaskInfo {
            id: TaskId::parse("aaaaffff.16176931.56000000.0").unwrap(),
            state: "Init".into(),
            repeat_flag: false,
            sub_task_flag: false,
            repeat: RepeatInfo::default(),
            result: ResultInfo { success_count: 3, failed_count: 1 },
            db_name: Name::parse("db").unwrap(),
            schema_name: Name::parse("s").unwrap(),
            table_name: Name::parse("t").unwrap(),
            partition_name: None,
            run: RunInfo::default(),
        };
        let text = String::from_utf8(encode(&info)).unwrap();
        for key in [
            "CompactTaskId",
            "CompactTaskState",
            "repeat_flag",
            "sub_task_flag",
            "RepeatInfo",
            "ResultInfo",
            "successCount",
            "db_name",
        ] {
            assert!(text.contains(key), "{key} missing in {text}");
        }
        assert_eq!(decode::<TaskInfo>(text.as_bytes()).unwrap(), info);
    }

    #[test]
    fn truncated_and_hostile_files_are_rejected() {
        let hb = br#"{"node":"n1","incarnation":1,"beat":2,"session_timeout_ms":1,"heartbeat_ms":1,"wall_ms":1,"pid":1,"version":"x"}"#;
        assert!(decode::<Heartbeat>(hb).is_ok());
        for cut in 0..hb.len() {
            assert!(decode::<Heartbeat>(&hb[..cut]).is_err(), "prefix {cut} parsed");
        }
        let evil = br#"{"node":"../etc","incarnation":1,"beat":2,"session_timeout_ms":1,"heartbeat_ms":1,"wall_ms":1,"pid":1,"version":"x"}"#;
        assert!(decode::<Heartbeat>(evil).is_err());
        assert!(matches!(decode::<Heartbeat>(&vec![b' '; MAX_FILE_BYTES + 1]), Err(FormatError::TooLarge(_))));
    }

    #[test]
    fn unknown_event_kinds_are_skipped_not_fatal() {
        let e: Event = decode(br#"{"seq":1,"epoch":1,"by":"n1","wall_ms":0,"kind":"FromTheFuture","x":1}"#).unwrap();
        assert_eq!(e.kind, EventKind::Unknown);
    }
}

/// `Scheduler/<TaskId>/TaskInfo.pc.db` of a task made by `compactd upgrade`
/// from a v1 task: the [`TaskInfo`] fields plus the upgrade's own. Readers
/// that decode a plain [`TaskInfo`] ignore the extra fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradedTaskInfo {
    /// The task info; `info.run.partitions` holds the partitions of the v1
    /// subtasks that were still open (the v2 manager re-runs these; empty
    /// means the whole table, or `partition_name`).
    #[serde(flatten)]
    pub info: TaskInfo,
    /// The v1 task file (`compct.<node>.<n>.<ms>[.<State>]`) it was made from.
    pub upgraded_from: Name,
}

/// Phase of the v1 → v2 upgrade, in `TaskUpgradeLock/UpgradeState.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpgradePhase {
    /// An upgrade wrote v2 tasks and has not yet completed a clean pass:
    /// `compactd run` refuses to start.
    Running,
    /// Every v1 task had its v2 task and lock at the end of a pass or verify.
    Complete,
    /// `--finalize` is removing the v1 tree and the locks.
    Finalizing,
}

/// `TaskUpgradeLock/UpgradeState.json`: the upgrade's state marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeState {
    pub state: UpgradePhase,
    /// The writer's wall clock, for humans only.
    pub wall_ms: u64,
    /// Host and pid of the writer, for humans only.
    #[serde(default)]
    pub by: String,
    /// v1 tasks seen by the pass that wrote this marker.
    #[serde(default)]
    pub v1_tasks: u64,
    /// Set when a monitor wrote this file as a tripwire, not an upgrade
    /// (layouts/README.md, "The tripwire"): `state` is then `running`, the
    /// one value on which the releases from before the merge turns refuse
    /// to start (their only start-up check of a file they did not write),
    /// and this field tells the releases since that no upgrade is half done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripwire: Option<Tripwire>,
}

/// What a tripwire guards: the layout in force when its monitor armed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tripwire {
    pub layout: u32,
}

impl UpgradeState {
    /// The phase of the upgrade this file records. A tripwire stands where
    /// no upgrade is under way: it reads as a finished one (`run` starts, a
    /// pass with nothing to do writes nothing).
    pub fn phase(&self) -> UpgradePhase {
        match self.tripwire {
            Some(_) => UpgradePhase::Complete,
            None => self.state,
        }
    }
}

/// `Scheduler/<task>/Manager.<term>`: who manages a task in a term. Created
/// with atomic create; the highest term is the current manager, and a
/// manager that sees a higher term stops acting for the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerTerm {
    pub task: TaskId,
    pub term: u64,
    pub node: NodeId,
    /// Who appointed it: `submit`, `monitor` (failover), `reassign`, or
    /// `restart` (the node came back under a new incarnation).
    pub by: String,
    pub wall_ms: u64,
    /// The incarnation of `node` it was given to (0: unknown). A manager
    /// whose node has a newer incarnation takes a new term before acting.
    #[serde(default)]
    pub incarnation: u64,
}

/// `TaskAssigned/<node>/Manage.<task>`: the pointer a node finds in its own
/// folder to learn that it manages a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagePointer {
    pub task: TaskId,
    pub term: u64,
}

/// `Scheduler/<task>/Stop`: a request to stop a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub wall_ms: u64,
    pub by: String,
}

/// Content of a subtask's `Status.Running` (and terminal) marker: which
/// incarnation of the worker ran it. Empty markers (older writers, or the
/// seed's) read as "unknown".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusMark {
    #[serde(default)]
    pub incarnation: u64,
    #[serde(default)]
    pub wall_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Counters an executor reported (a `compactd-stats: {…}` line in its
    /// output), e.g. `skipped_special`: entries of a partition that are not
    /// regular files and were left alone.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stats: std::collections::BTreeMap<String, u64>,
}

/// Content of `Scheduler/<task>/Done.r<round>.u<unit>` when the unit's
/// executor reported counters, and of `Failed.r<round>.u<unit>`: why its
/// last attempt failed. Older writers left both empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitOutcome {
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stats: std::collections::BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `Scheduler/<task>/Reassign.u<unit>`: move a subtask to another node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReassignRequest {
    /// The target; absent: the next live node on the ring.
    #[serde(default)]
    pub to: Option<NodeId>,
    pub wall_ms: u64,
}
