//! The legacy v1 tree (`<root>/Compaction/…`) and its mapping to v2.
//!
//! ```text
//! Compaction/
//!   Scheduler/compct.<node>.<n>.<ms>[.<State>]     main task file (YAML lines)
//!   TaskAssigned/<worker>/compct.<node>.<n>.<ms>/  subtask folder
//!     Status.<SubtaskState>                         state marker
//!     TaskInfo                                      task info (YAML lines)
//! ```
//!
//! A main task's state is its file name's suffix: none = Init, `.Assigned`,
//! `.Cancel`, `.Done`. A subtask belongs to the main task with the same node
//! and millisecond timestamp (its `<n>` is the subtask's number, the main
//! task's is usually 0).
//!
//! Everything here is pure: parsing never panics and never trusts the input
//! (names go through [`Name`]/[`NodeId`], files are capped at
//! [`MAX_V1_FILE_BYTES`]). The mapping to v2 ([`v2_id`], [`v2_state`],
//! [`upgrade_task`]) is part of the contract and documented in
//! `layouts/UPGRADE.md`.

use std::fmt;

use crate::formats::{RepeatInfo, ResultInfo, RunInfo, TaskInfo, UpgradedTaskInfo};
use crate::id::{IdError, TaskId};
use crate::name::{Name, NodeId};
use crate::state::{SubtaskState, TaskState};

pub const ROOT: &str = "Compaction/";
pub const SCHEDULER: &str = "Compaction/Scheduler/";
pub const TASK_ASSIGNED: &str = "Compaction/TaskAssigned/";
/// The task-info file of a v1 subtask folder.
pub const TASK_INFO: &str = "TaskInfo";
/// First segment of every v1 task name.
pub const PREFIX: &str = "compct";
/// Largest v1 file the upgrader parses; larger files are reported.
pub const MAX_V1_FILE_BYTES: usize = 1024 * 1024;

/// Why a v1 name or file was rejected. Messages name the offending text
/// (escaped) but never the path: callers add the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum V1Error {
    #[error("bad v1 task name {name:?}: {reason}")]
    BadName { name: String, reason: String },
    #[error("file is {0} bytes, over the {MAX_V1_FILE_BYTES}-byte limit for v1 files")]
    TooLarge(usize),
    #[error("task info is not UTF-8 text")]
    NotUtf8,
    #[error("task info has no {0}")]
    Missing(&'static str),
    #[error("task info {key}: bad value {value:?}: {reason}")]
    BadValue { key: &'static str, value: String, reason: String },
    #[error("task info gives {0} twice with different values")]
    Duplicate(&'static str),
    #[error("task info says CompactTaskId {found:?} but the file is task {expected}")]
    IdMismatch { found: String, expected: String },
    #[error("no v2 id for this task: {0}")]
    Id(#[from] IdError),
}

fn bad_name(name: &str, reason: impl Into<String>) -> V1Error {
    V1Error::BadName {
        name: name.chars().take(120).collect::<String>().escape_debug().to_string(),
        reason: reason.into(),
    }
}

/// State of a v1 main task, from its file name's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum V1State {
    /// No suffix.
    Init,
    Assigned,
    Cancel,
    Done,
}

impl V1State {
    pub const ALL: &'static [V1State] = &[V1State::Init, V1State::Assigned, V1State::Cancel, V1State::Done];

    /// The file-name suffix without the dot; `None` for Init.
    pub fn suffix(&self) -> Option<&'static str> {
        match self {
            V1State::Init => None,
            V1State::Assigned => Some("Assigned"),
            V1State::Cancel => Some("Cancel"),
            V1State::Done => Some("Done"),
        }
    }

    pub fn as_str(&self) -> &'static str {
        self.suffix().unwrap_or("Init")
    }
}

impl fmt::Display for V1State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A v1 task's identity: `compct.<node>.<n>.<ms>` (no state suffix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct V1Name {
    pub node: NodeId,
    /// `<n>`: 0 for main tasks in the seed, the subtask's number otherwise.
    pub seq: u32,
    /// Unix milliseconds, 13 digits.
    pub unix_ms: u64,
}

impl V1Name {
    /// Parses `compct.<node>.<n>.<ms>`. Node ids may contain dots, so the
    /// name is split from the right.
    pub fn parse(s: &str) -> Result<V1Name, V1Error> {
        let rest = s
            .strip_prefix(PREFIX)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or_else(|| bad_name(s, format!("does not start with `{PREFIX}.`")))?;
        let (rest, ms) = rest.rsplit_once('.').ok_or_else(|| bad_name(s, "expected compct.<node>.<n>.<ms>"))?;
        let (node, seq) = rest.rsplit_once('.').ok_or_else(|| bad_name(s, "expected compct.<node>.<n>.<ms>"))?;
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !(ms.len() == 13 && digits(ms)) {
            return Err(bad_name(s, "timestamp must be 13 decimal digits (Unix ms)"));
        }
        if !digits(seq) || seq.len() > 9 || (seq.len() > 1 && seq.starts_with('0')) {
            return Err(bad_name(s, "task number must be a decimal number without leading zeros"));
        }
        let node = NodeId::parse(node).map_err(|e| bad_name(s, e.to_string()))?;
        let unix_ms = ms.parse().map_err(|_| bad_name(s, "timestamp out of range"))?;
        let seq = seq.parse().map_err(|_| bad_name(s, "task number out of range"))?;
        if unix_ms < 1_000_000_000_000 {
            return Err(bad_name(s, "timestamp must have 13 digits"));
        }
        Ok(V1Name { node, seq, unix_ms })
    }

    /// The key a subtask is matched to its main task by: node and timestamp.
    pub fn main_key(&self) -> (NodeId, u64) {
        (self.node.clone(), self.unix_ms)
    }
}

impl fmt::Display for V1Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}.{}.{}.{}", self.node, self.seq, self.unix_ms)
    }
}

/// A main task file name: `compct.<node>.<n>.<ms>[.<State>]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct V1TaskFile {
    pub name: V1Name,
    pub state: V1State,
}

impl V1TaskFile {
    pub fn parse(file_name: &str) -> Result<V1TaskFile, V1Error> {
        // Path-level checks first, so that `../x` or control characters are
        // reported as such rather than as a bad timestamp.
        Name::parse(file_name).map_err(|e| bad_name(file_name, e.to_string()))?;
        let (base, state) = match file_name.rsplit_once('.') {
            Some((base, last)) if !last.bytes().all(|b| b.is_ascii_digit()) => {
                let state = match last {
                    "Assigned" => V1State::Assigned,
                    "Cancel" => V1State::Cancel,
                    "Done" => V1State::Done,
                    _ => {
                        return Err(bad_name(
                            file_name,
                            format!(
                                "unknown state suffix {:?} (expected none, Assigned, Cancel or Done)",
                                last.escape_debug().to_string()
                            ),
                        ))
                    }
                };
                (base, state)
            }
            _ => (file_name, V1State::Init),
        };
        let name = V1Name::parse(base).map_err(|e| match e {
            V1Error::BadName { reason, .. } => bad_name(file_name, reason),
            other => other,
        })?;
        Ok(V1TaskFile { name, state })
    }

    pub fn file_name(&self) -> String {
        match self.state.suffix() {
            Some(s) => format!("{}.{s}", self.name),
            None => self.name.to_string(),
        }
    }
}

impl fmt::Display for V1TaskFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file_name())
    }
}

/// Parses a subtask folder name (`compct.<node>.<n>.<ms>`, no suffix).
pub fn parse_subtask_dir(name: &str) -> Result<V1Name, V1Error> {
    Name::parse(name).map_err(|e| bad_name(name, e.to_string()))?;
    V1Name::parse(name)
}

/// `Compaction/Scheduler/<file name>`
pub fn task_file(file: &V1TaskFile) -> String {
    format!("{SCHEDULER}{file}")
}

/// `Compaction/TaskAssigned/<worker>/`
pub fn worker_dir(worker: &NodeId) -> String {
    format!("{TASK_ASSIGNED}{worker}/")
}

/// `Compaction/TaskAssigned/<worker>/<subtask>/`
pub fn subtask_dir(worker: &NodeId, subtask: &V1Name) -> String {
    format!("{TASK_ASSIGNED}{worker}/{subtask}/")
}

/// `Compaction/TaskAssigned/<worker>/<subtask>/TaskInfo`
pub fn subtask_info(worker: &NodeId, subtask: &V1Name) -> String {
    format!("{TASK_ASSIGNED}{worker}/{subtask}/{TASK_INFO}")
}

/// A v1 task-info file, parsed leniently and validated strictly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1TaskInfo {
    /// `CompactTaskId`, as written (checked against the file name by
    /// [`upgrade_task`]).
    pub task_id: Option<String>,
    /// `CompactTaskState`, as written; informational (the file name's suffix
    /// is authoritative in v1).
    pub state: Option<String>,
    pub repeat_flag: bool,
    pub sub_task_flag: bool,
    pub repeat: RepeatInfo,
    pub result: ResultInfo,
    pub db_name: Name,
    pub schema_name: Name,
    pub table_name: Name,
    pub partition_name: Option<Name>,
}

/// The keys compactd understands. `ResultInfo` and the legacy `ResulttInfo`
/// (and `RepeatInfo`) are section headers: their children are recognised by
/// their own names wherever they appear.
const KEYS: &[&str] = &[
    "CompactTaskId",
    "CompactTaskState",
    "repeat_flag",
    "sub_task_flag",
    "repeatCount",
    "repeatInterval",
    "successCount",
    "failedCount",
    "db_name",
    "schema_name",
    "table_name",
    "partition_name",
];

/// Parses a v1 task-info file (the seed's fields as YAML lines).
///
/// Lenient: `key: value` lines at any indentation, `#` comments, `---`,
/// quotes, CRLF, a BOM, flow maps (`RepeatInfo: {repeatCount: 1}`), unknown
/// keys and lines without a colon are skipped; optional keys (flags, repeat
/// and result info, partition) default. Strict: `db_name`, `schema_name` and
/// `table_name` are required valid [`Name`]s, numbers and booleans must
/// parse, a key given twice with different values is an error. Never panics.
pub fn parse_task_info(bytes: &[u8]) -> Result<V1TaskInfo, V1Error> {
    if bytes.len() > MAX_V1_FILE_BYTES {
        return Err(V1Error::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| V1Error::NotUtf8)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut values: [Option<String>; KEYS.len()] = Default::default();
    let mut put = |key: &str, value: &str| -> Result<(), V1Error> {
        let Some(i) = KEYS.iter().position(|k| *k == key) else {
            return Ok(()); // unknown key or section header
        };
        // YAML nulls only when unquoted: `"~"` is the text `~`.
        let value = if matches!(value.trim(), "~" | "null" | "Null" | "NULL") { "" } else { unquote(value) };
        match &values[i] {
            Some(old) if old != value => Err(V1Error::Duplicate(KEYS[i])),
            _ => {
                values[i] = Some(value.to_string());
                Ok(())
            }
        }
    };
    for line in text.lines() {
        let line = strip_comment(line).trim();
        if line.is_empty() || line == "---" || line == "..." {
            continue;
        }
        let line = line.strip_prefix("- ").unwrap_or(line);
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = unquote(key.trim());
        let value = value.trim();
        if let Some(inner) = value.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
            for pair in inner.split(',') {
                if let Some((k, v)) = pair.split_once(':') {
                    put(unquote(k.trim()), v.trim())?;
                }
            }
        } else {
            put(key, value)?;
        }
    }
    let get = |key: &str| -> Option<&str> {
        let i = KEYS.iter().position(|k| *k == key)?;
        values[i].as_deref().filter(|v| !v.is_empty())
    };
    let name = |key: &'static str| -> Result<Option<Name>, V1Error> {
        get(key)
            .map(|v| {
                Name::parse(v).map_err(|e| V1Error::BadValue {
                    key,
                    value: v.chars().take(80).collect(),
                    reason: e.to_string(),
                })
            })
            .transpose()
    };
    let required = |key: &'static str| name(key)?.ok_or(V1Error::Missing(key));
    let boolean = |key: &'static str| -> Result<bool, V1Error> {
        match get(key) {
            None => Ok(false),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(true),
                "false" | "no" | "off" | "0" => Ok(false),
                _ => Err(V1Error::BadValue {
                    key,
                    value: v.chars().take(80).collect(),
                    reason: "expected true or false".into(),
                }),
            },
        }
    };
    fn number<T: std::str::FromStr + Default>(key: &'static str, v: Option<&str>) -> Result<T, V1Error> {
        match v {
            None => Ok(T::default()),
            Some(v) if v.bytes().all(|b| b.is_ascii_digit()) => v.parse().map_err(|_| V1Error::BadValue {
                key,
                value: v.chars().take(80).collect(),
                reason: "number out of range".into(),
            }),
            Some(v) => Err(V1Error::BadValue {
                key,
                value: v.chars().take(80).collect(),
                reason: "expected a non-negative decimal number".into(),
            }),
        }
    }
    let text_field = |key: &'static str| -> Result<Option<String>, V1Error> {
        match get(key) {
            None => Ok(None),
            Some(v) if v.chars().any(|c| c.is_control()) || v.len() > 255 => Err(V1Error::BadValue {
                key,
                value: v.chars().take(80).collect::<String>().escape_debug().to_string(),
                reason: "control characters or over 255 bytes".into(),
            }),
            Some(v) => Ok(Some(v.to_string())),
        }
    };
    Ok(V1TaskInfo {
        task_id: text_field("CompactTaskId")?,
        state: text_field("CompactTaskState")?,
        repeat_flag: boolean("repeat_flag")?,
        sub_task_flag: boolean("sub_task_flag")?,
        repeat: RepeatInfo {
            repeat_count: number("repeatCount", get("repeatCount"))?,
            repeat_interval: number("repeatInterval", get("repeatInterval"))?,
            ..RepeatInfo::default()
        },
        result: ResultInfo {
            success_count: number("successCount", get("successCount"))?,
            failed_count: number("failedCount", get("failedCount"))?,
        },
        db_name: required("db_name")?,
        schema_name: required("schema_name")?,
        table_name: required("table_name")?,
        partition_name: name("partition_name")?,
    })
}

fn strip_comment(line: &str) -> &str {
    // `#` starts a comment at the line start or after whitespace (YAML),
    // but not inside a quoted scalar.
    let b = line.as_bytes();
    let mut quote: Option<u8> = None;
    for i in 0..b.len() {
        match (quote, b[i]) {
            (None, q @ (b'"' | b'\'')) => quote = Some(q),
            (Some(q), c) if c == q => quote = None,
            (None, b'#') if i == 0 || b[i - 1] == b' ' || b[i - 1] == b'\t' => return &line[..i],
            _ => {}
        }
    }
    line
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

/// What the upgrade keeps of a task's v1 subtasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubtaskTally {
    /// Finished subtasks still in the tree (not yet collected by their
    /// manager): `Status.Success`.
    pub success: u64,
    /// `Status.Failed` and `Status.Cancel`.
    pub failed: u64,
    /// Partitions of open subtasks (`Init`, `Running`, or no marker); `None`
    /// for a subtask without a partition (the whole table).
    pub open: Vec<Option<Name>>,
}

impl SubtaskTally {
    pub fn add(&mut self, state: SubtaskState, partition: Option<Name>) {
        match state {
            SubtaskState::Success => self.success += 1,
            SubtaskState::Failed | SubtaskState::Cancel => self.failed += 1,
            SubtaskState::Init | SubtaskState::Running => self.open.push(partition),
        }
    }

    pub fn count(&self) -> u64 {
        self.success + self.failed + self.open.len() as u64
    }
}

/// True if a subtask in `state` is still open (v2 re-runs it).
pub fn subtask_is_open(state: SubtaskState) -> bool {
    matches!(state, SubtaskState::Init | SubtaskState::Running)
}

/// The v2 id of a v1 task: `<FNV-1a-32 of node, 8 hex>.<ms digits 1-8>.<ms
/// digits 9-13>000.<n>`. `compct.xcloud24_9876.0.1617693156000` becomes
/// `345ef1df.16176931.56000000.0` (the seed draws the hash as `aaaaffff`).
pub fn v2_id(name: &V1Name) -> Result<TaskId, IdError> {
    TaskId::new(name.node.code(), name.unix_ms, name.seq)
}

/// v1 state → v2 state, as the seed's final picture: none → Init, Assigned →
/// Init (v2 dispatches it again), Cancel → Cancel, Done → Done.
pub fn v2_state(state: V1State) -> TaskState {
    match state {
        V1State::Init | V1State::Assigned => TaskState::Init,
        V1State::Cancel => TaskState::Cancel,
        V1State::Done => TaskState::Done,
    }
}

/// The v2 task info of an upgraded v1 task (pure; deterministic).
///
/// - id and state from [`v2_id`] and [`v2_state`];
/// - `ResultInfo` = the v1 counts plus the finished subtasks still present;
/// - `partitions` = the open subtasks' partitions (sorted, deduplicated) when
///   the v2 state is Init; empty if any open subtask covers the whole table
///   (empty means "all", so nothing is skipped);
/// - `upgraded_from` = the v1 file name.
pub fn upgrade_task(
    file: &V1TaskFile,
    info: &V1TaskInfo,
    subtasks: &SubtaskTally,
) -> Result<UpgradedTaskInfo, V1Error> {
    if let Some(found) = &info.task_id {
        if *found != file.name.to_string() {
            return Err(V1Error::IdMismatch {
                found: found.escape_debug().to_string(),
                expected: file.name.to_string(),
            });
        }
    }
    let id = v2_id(&file.name)?;
    let state = v2_state(file.state);
    let mut partitions = Vec::new();
    if state == TaskState::Init && subtasks.open.iter().all(Option::is_some) {
        partitions = subtasks.open.iter().flatten().cloned().collect();
        partitions.sort();
        partitions.dedup();
    }
    let upgraded_from = Name::parse(&file.file_name()).map_err(|e| bad_name("", e.to_string()))?;
    Ok(UpgradedTaskInfo {
        info: TaskInfo {
            id,
            state: state.as_str().to_string(),
            repeat_flag: info.repeat_flag,
            sub_task_flag: info.sub_task_flag,
            repeat: info.repeat.clone(),
            result: ResultInfo {
                success_count: info.result.success_count.saturating_add(subtasks.success),
                failed_count: info.result.failed_count.saturating_add(subtasks.failed),
            },
            db_name: info.db_name.clone(),
            schema_name: info.schema_name.clone(),
            table_name: info.table_name.clone(),
            partition_name: info.partition_name.clone(),
            run: RunInfo { partitions, ..RunInfo::default() },
        },
        upgraded_from,
    })
}

/// True if `info` was made by the upgrade from the same v1 task as `file`
/// (same node, number and timestamp; the state suffix may differ because a
/// v1 node may have moved the task on between two runs).
pub fn same_origin(info: &UpgradedTaskInfo, file: &V1TaskFile) -> bool {
    V1TaskFile::parse(info.upgraded_from.as_str()).is_ok_and(|f| f.name == file.name)
}

#[cfg(test)]
mod tests;
