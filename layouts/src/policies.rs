//! The policies tree: table policies (what to keep compact, and how) and
//! the planner's per-table state. See README.md beside this crate
//! ("Policies and the planner").
//!
//! ```text
//! Compaction_V2/Policies/<policy>/Policy                main copy (JSON, PolicyDefinition)
//! Compaction_V2/Policies/<policy>/Log/<version, 20 digits>   logged versions (immutable)
//! Compaction_V2/Policies/<policy>/Paused                present while paused (JSON, PolicyPause)
//! Compaction_V2/Policies/<policy>/LastPass              the schedule's last fire planned (JSON, LastPass)
//! Compaction_V2/Tables/<db>/<schema>/<table>/Summary    the planner's view of the table (JSON, TableSummary)
//! Compaction_V2/Tables/<db>/<schema>/<table>/Decisions/<partition>.<seq, 10 digits>.Claim   created once
//! Compaction_V2/Tables/<db>/<schema>/<table>/Decisions/<partition>.<seq, 10 digits>.Task    created once
//! ```
//!
//! A decision to compact a partition is the atomic create of its next
//! `.Claim` (sequence numbers per partition, from 1); the task submitted
//! for it carries the claim's marker as a parameter, and `.Task` records
//! its id. A decision for several partitions of a table (one task for
//! them all) is a claim for each, all carrying the first's marker and
//! the group. A new decision for a partition is only taken once the newest
//! one's task has ended, so a partition is never compacted by two planner
//! tasks at once, and two planners (a fenced monitor and its successor)
//! cannot both take the same decision: the create picks one.

use serde::{Deserialize, Serialize};

use crate::id::TaskId;
use crate::name::Name;

pub const POLICIES: &str = "Compaction_V2/Policies/";
pub const TABLES: &str = "Compaction_V2/Tables/";
pub const POLICY_FILE: &str = "Policy";
pub const POLICY_LOG: &str = "Log";
pub const PAUSED: &str = "Paused";
pub const LAST_PASS: &str = "LastPass";
pub const SUMMARY: &str = "Summary";
pub const DECISIONS: &str = "Decisions";
pub const CLAIM_SUFFIX: &str = "Claim";
pub const TASK_SUFFIX: &str = "Task";
/// Parameter every planner task carries: `<db>/<schema>/<table>/<partition>#<seq>`.
pub const MARKER_PARAM: &str = "compactd_policy_decision";
/// Longest partition name the planner takes decisions for: the decision
/// file names add a sequence number and a suffix to it, and a file name
/// is at most 255 bytes.
pub const MAX_PLANNED_PARTITION_BYTES: usize = 230;

pub fn policy_dir(policy: &Name) -> String {
    format!("{POLICIES}{policy}/")
}

pub fn policy_main(policy: &Name) -> String {
    format!("{POLICIES}{policy}/{POLICY_FILE}")
}

pub fn policy_log_dir(policy: &Name) -> String {
    format!("{POLICIES}{policy}/{POLICY_LOG}/")
}

pub fn policy_log(policy: &Name, version: u64) -> String {
    format!("{POLICIES}{policy}/{POLICY_LOG}/{version:020}")
}

pub fn parse_version(file_name: &str) -> Option<u64> {
    (file_name.len() == 20 && file_name.bytes().all(|b| b.is_ascii_digit())).then(|| file_name.parse().ok())?
}

pub fn policy_paused(policy: &Name) -> String {
    format!("{POLICIES}{policy}/{PAUSED}")
}

pub fn policy_last_pass(policy: &Name) -> String {
    format!("{POLICIES}{policy}/{LAST_PASS}")
}

pub fn table_dir(db: &Name, schema: &Name, table: &Name) -> String {
    format!("{TABLES}{db}/{schema}/{table}/")
}

pub fn table_summary(db: &Name, schema: &Name, table: &Name) -> String {
    format!("{TABLES}{db}/{schema}/{table}/{SUMMARY}")
}

pub fn decisions_dir(db: &Name, schema: &Name, table: &Name) -> String {
    format!("{TABLES}{db}/{schema}/{table}/{DECISIONS}/")
}

/// Which file of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DecisionFile {
    Claim,
    Task,
}

impl DecisionFile {
    fn suffix(self) -> &'static str {
        match self {
            DecisionFile::Claim => CLAIM_SUFFIX,
            DecisionFile::Task => TASK_SUFFIX,
        }
    }
}

pub fn decision(db: &Name, schema: &Name, table: &Name, partition: &Name, seq: u64, file: DecisionFile) -> String {
    format!("{}{partition}.{seq:010}.{}", decisions_dir(db, schema, table), file.suffix())
}

/// `<partition>.<seq>.<Claim|Task>` → its parts (the partition may hold dots).
pub fn parse_decision(file_name: &str) -> Option<(Name, u64, DecisionFile)> {
    let (rest, suffix) = file_name.rsplit_once('.')?;
    let file = match suffix {
        CLAIM_SUFFIX => DecisionFile::Claim,
        TASK_SUFFIX => DecisionFile::Task,
        _ => return None,
    };
    let (partition, seq) = rest.rsplit_once('.')?;
    if seq.len() != 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((Name::parse(partition).ok()?, seq.parse().ok()?, file))
}

/// The marker of a decision's task.
pub fn marker(db: &Name, schema: &Name, table: &Name, partition: &Name, seq: u64) -> String {
    format!("{db}/{schema}/{table}/{partition}#{seq}")
}

/// `Policies/<policy>/Policy` and its logged versions: a policy as applied
/// (the TOML file's keys, checked and with defaults filled in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PolicyDefinition {
    pub name: Name,
    pub version: u64,
    /// `<db>/<schema>/<table>` patterns (`*` and `?` within one segment).
    pub tables: Vec<String>,
    /// `merge`, `parquet`, `delta`, `iceberg`, or the name of a command
    /// nodes define (`run --command NAME=…`).
    pub executor: String,
    /// `iceberg` only: the operator states compactd is the sole writer of
    /// the policy's file-system tables on fs or S3, where another writer's
    /// commit could overwrite compactd's (its tasks carry
    /// `iceberg.sole-writer=true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sole_writer: bool,
    pub target_size: u64,
    /// Files under this size count as small.
    pub small_file_size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_small_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_small_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_small_age_ms: Option<u64>,
    /// A cron expression: the policy's partitions are planned once per
    /// fire, not continuously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    pub time_zone: String,
    /// Daily windows (`HH:MM-HH:MM`, local time) in which work may start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<String>,
    pub min_interval_ms: u64,
    pub weight: u32,
    /// Partitions of one table in flight at most; absent: no cap (the
    /// table shares the cluster's slots with the other tables that have
    /// due partitions, by weight). Definitions applied before the cap
    /// became optional carry 2, the default then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_units_per_table: Option<u32>,
    /// `merge` and `parquet`: files written more recently than this are
    /// neither counted as small nor merged (a writer may still be at them);
    /// absent: [`DEFAULT_MIN_FILE_AGE_MS`], also for definitions applied
    /// before the key existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_file_age_ms: Option<u64>,
    /// `iceberg` only: a partition whose files to rewrite weigh more is
    /// split into file groups of about this size (its tasks carry
    /// `iceberg.max-file-group-size-bytes`); absent: the executor's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_group_size: Option<u64>,
    /// `iceberg` only: a data file to which this many delete files apply is
    /// due whatever its size (its tasks carry
    /// `iceberg.delete-file-threshold`); absent: only the share of rows
    /// position deletes remove makes a file due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_file_threshold: Option<u64>,
    /// `delta` and `iceberg`: the table's retention (an `expire` task of
    /// the whole table) is due this long after it was last decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_every_ms: Option<u64>,
    /// Or at each fire of this cron expression, in `time_zone`; with
    /// neither, the policy runs no retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_schedule: Option<String>,
    /// The retention's `expire.older-than`; absent: the table's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_older_than_ms: Option<u64>,
    /// The retention's `expire.retain-last`; absent: the table's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_retain_last: Option<u64>,
    pub wall_ms: u64,
    pub by: String,
}

/// The name a table's retention is decided under in `Decisions/` and shown
/// under in a [`TableSummary`]'s detail: reserved (a partition folder whose
/// name starts with a dot is never planned), so no partition has it.
pub const EXPIRE_DECISION: &str = ".expire";

/// A policy's minimum file age when it names none: 10 minutes, longer than
/// a writer takes between putting a file down and committing it (a Delta
/// first write, an Iceberg staged create, a Hadoop job's task commits).
pub const DEFAULT_MIN_FILE_AGE_MS: u64 = 10 * 60 * 1000;

impl PolicyDefinition {
    /// Whether the policy runs a retention (`expire-every`).
    pub fn runs_retention(&self) -> bool {
        self.expire_every_ms.is_some() || self.expire_schedule.is_some()
    }

    /// [`PolicyDefinition::min_file_age_ms`] with its default applied.
    pub fn min_file_age_ms(&self) -> u64 {
        self.min_file_age_ms.unwrap_or(DEFAULT_MIN_FILE_AGE_MS)
    }
}

/// `Policies/<policy>/Paused`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPause {
    pub by: String,
    pub wall_ms: u64,
}

/// `Policies/<policy>/LastPass`: the newest schedule fire the planner has
/// planned (a new monitor does not plan it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastPass {
    pub fire_ms: u64,
    pub by: String,
}

/// `Decisions/<partition>.<seq>.Claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionClaim {
    pub policy: Name,
    pub policy_version: u64,
    pub by: String,
    pub wall_ms: u64,
    /// The value of the [`MARKER_PARAM`] parameter of the submitted task.
    pub marker: String,
    /// Why the partition was due.
    pub why: String,
    /// A decision taken for several partitions of the table at once (an
    /// `iceberg` policy: one task, one commit): all of them, each with a
    /// claim carrying the same marker (the first claim's). Empty: this
    /// partition alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<String>,
}

/// `Decisions/<partition>.<seq>.Task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionTask {
    pub task: TaskId,
    pub by: String,
    pub wall_ms: u64,
}

/// `Tables/<db>/<schema>/<table>/Summary`: what the planner saw at its last
/// visit, rewritten only when something in it changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableSummary {
    pub db: String,
    pub schema: String,
    pub table: String,
    pub policy: String,
    pub policy_version: u64,
    /// When the listing this summary was made from was taken.
    pub checked_wall_ms: u64,
    pub partitions: u64,
    pub files: u64,
    pub bytes: u64,
    pub small_files: u64,
    pub small_bytes: u64,
    /// Planner tasks not ended yet.
    pub in_flight: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_compaction_wall_ms: Option<u64>,
    /// The task of the newest decision (of any partition): what `tables`
    /// shows of the table's last compaction is read from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task: Option<TaskId>,
    /// Why the table's partitions are or are not being submitted (paused,
    /// outside its windows, waiting for the schedule, at its cap…).
    pub state: String,
    /// Why nothing of the table is submitted whatever is due (`refused:
    /// …` a format its executor must not change, `waiting: a write is in
    /// progress …`, `cannot submit: …`); absent when nothing holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// Due partitions waiting for a free slot of the cluster.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued: u64,
    /// The table's policy caps its partitions in flight
    /// (`max-units-per-table`) and it is at the cap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capped: bool,
    /// The partitions with small files, most small files first (at most
    /// [`MAX_SUMMARY_PARTITIONS`]); before them the table's retention
    /// ([`EXPIRE_DECISION`]) when its policy runs one or one is in flight.
    #[serde(default)]
    pub detail: Vec<PartitionSummary>,
    /// Files and bytes the policy's retention tasks deleted, summed over
    /// those the planner saw end, up to and including [`Self::expire_counted`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expired_files: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expired_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_counted: Option<TaskId>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// At most this many partitions are detailed in a [`TableSummary`].
pub const MAX_SUMMARY_PARTITIONS: usize = 2000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSummary {
    pub partition: String,
    pub files: u64,
    pub small_files: u64,
    pub small_bytes: u64,
    /// When the planner first saw a small file here that is still there
    /// (its own clock: writers' clocks and file times are not trusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_since_wall_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_compaction_wall_ms: Option<u64>,
    /// The newest decision's sequence number (0: none yet).
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    pub in_flight: bool,
    pub due: bool,
    pub why: String,
    /// Held by the policy's `min-interval` (its thresholds are met): due
    /// from this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_wall_ms: Option<u64>,
    /// When the planner first saw the newest decision's task stopped
    /// (`Cancel`): the partition stays in flight for a while after, until
    /// the stopped units' executors have surely ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_seen_wall_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_names_round_trip_with_dots_in_the_partition() {
        let n = |s: &str| Name::parse(s).unwrap();
        let p = decision(&n("db"), &n("s"), &n("t"), &n("dt=2026.11.25"), 7, DecisionFile::Task);
        assert_eq!(p, "Compaction_V2/Tables/db/s/t/Decisions/dt=2026.11.25.0000000007.Task");
        let name = p.rsplit('/').next().unwrap();
        assert_eq!(parse_decision(name), Some((n("dt=2026.11.25"), 7, DecisionFile::Task)));
        assert_eq!(parse_decision("p.7.Task"), None);
        assert_eq!(parse_decision("p.0000000007.End"), None);
        assert_eq!(parse_version("00000000000000000003"), Some(3));
        assert_eq!(parse_version("3"), None);
    }
}
