//! The jobs tree (`Compaction_V2/Jobs/…`): job definitions split into job,
//! step and relation records with a main copy and an immutable version log
//! each (DolphinScheduler's split of the big workflow JSON), and job
//! instances created by trigger requests. See `JOBS.md` beside this crate.
//!
//! ```text
//! Compaction_V2/Jobs/
//!   Definitions/<job>/Job                        main copy (JSON, JobDefinition)
//!   Definitions/<job>/JobLog/<version, 20 digits>     logged versions (immutable)
//!   Definitions/<job>/Steps/<step>               main copy (JSON, StepDefinition)
//!   Definitions/<job>/StepLog/<step>.<version, 20 digits>
//!   Definitions/<job>/Relations                  main copy (JSON, Relations)
//!   Definitions/<job>/RelationLog/<version, 20 digits>
//!   Instances/<job>/<trigger>/Job                the instance (JSON, JobInstance), created once
//!   Instances/<job>/<trigger>/End                job finished (JSON, JobEnd), created once
//!   Instances/<job>/<trigger>/Steps/<step>.Claim "submitting" (JSON, StepClaim), created once
//!   Instances/<job>/<trigger>/Steps/<step>.Task  the step's main task (JSON, StepTask), created once
//!   Instances/<job>/<trigger>/Steps/<step>.End   step finished (JSON, StepEnd), created once
//! ```
//!
//! Every instance file is written with atomic create and never rewritten, so
//! a state only moves forward and a listing of `Steps/` shows the progress of
//! every step: `.End` > `.Task` > `.Claim` > nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::id::TaskId;
use crate::name::Name;

pub const JOBS: &str = "Compaction_V2/Jobs/";
pub const DEFINITIONS: &str = "Compaction_V2/Jobs/Definitions/";
pub const INSTANCES: &str = "Compaction_V2/Jobs/Instances/";

pub const JOB_FILE: &str = "Job";
pub const JOB_LOG: &str = "JobLog";
pub const STEPS: &str = "Steps";
pub const STEP_LOG: &str = "StepLog";
pub const RELATIONS: &str = "Relations";
pub const RELATION_LOG: &str = "RelationLog";
pub const END: &str = "End";

/// Suffixes of the per-step instance files.
pub const CLAIM_SUFFIX: &str = "Claim";
pub const TASK_SUFFIX: &str = "Task";
pub const END_SUFFIX: &str = "End";

pub fn definition_dir(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/")
}

pub fn job_main(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{JOB_FILE}")
}

pub fn job_log_dir(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{JOB_LOG}/")
}

pub fn job_log(job: &Name, version: u64) -> String {
    format!("{DEFINITIONS}{job}/{JOB_LOG}/{version:020}")
}

pub fn steps_main_dir(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{STEPS}/")
}

pub fn step_main(job: &Name, step: &Name) -> String {
    format!("{DEFINITIONS}{job}/{STEPS}/{step}")
}

pub fn step_log_dir(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{STEP_LOG}/")
}

pub fn step_log(job: &Name, step: &Name, version: u64) -> String {
    format!("{DEFINITIONS}{job}/{STEP_LOG}/{step}.{version:020}")
}

/// `<step>.<version>` → (step, version).
pub fn parse_step_log_name(file_name: &str) -> Option<(Name, u64)> {
    let (step, v) = file_name.rsplit_once('.')?;
    Some((Name::parse(step).ok()?, parse_version(v)?))
}

pub fn relations_main(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{RELATIONS}")
}

pub fn relation_log_dir(job: &Name) -> String {
    format!("{DEFINITIONS}{job}/{RELATION_LOG}/")
}

pub fn relation_log(job: &Name, version: u64) -> String {
    format!("{DEFINITIONS}{job}/{RELATION_LOG}/{version:020}")
}

/// A 20-digit version file name.
pub fn parse_version(file_name: &str) -> Option<u64> {
    (file_name.len() == 20 && file_name.bytes().all(|b| b.is_ascii_digit())).then(|| file_name.parse().ok())?
}

pub fn instances_of(job: &Name) -> String {
    format!("{INSTANCES}{job}/")
}

pub fn instance_dir(job: &Name, trigger: &Name) -> String {
    format!("{INSTANCES}{job}/{trigger}/")
}

pub fn instance(job: &Name, trigger: &Name) -> String {
    format!("{INSTANCES}{job}/{trigger}/{JOB_FILE}")
}

pub fn instance_end(job: &Name, trigger: &Name) -> String {
    format!("{INSTANCES}{job}/{trigger}/{END}")
}

pub fn instance_steps_dir(job: &Name, trigger: &Name) -> String {
    format!("{INSTANCES}{job}/{trigger}/{STEPS}/")
}

/// Which per-step instance file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepFile {
    Claim,
    Task,
    End,
}

impl StepFile {
    pub fn suffix(self) -> &'static str {
        match self {
            StepFile::Claim => CLAIM_SUFFIX,
            StepFile::Task => TASK_SUFFIX,
            StepFile::End => END_SUFFIX,
        }
    }
}

pub fn step_file(job: &Name, trigger: &Name, step: &Name, file: StepFile) -> String {
    format!("{INSTANCES}{job}/{trigger}/{STEPS}/{step}.{}", file.suffix())
}

/// `<step>.Claim|Task|End` → (step, file).
pub fn parse_step_file(file_name: &str) -> Option<(Name, StepFile)> {
    let (step, suffix) = file_name.rsplit_once('.')?;
    let file = match suffix {
        CLAIM_SUFFIX => StepFile::Claim,
        TASK_SUFFIX => StepFile::Task,
        END_SUFFIX => StepFile::End,
        _ => return None,
    };
    Some((Name::parse(step).ok()?, file))
}

/// What a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// Compacts the partitions of one table (the nodes' default executor).
    Compact,
    /// Runs a command template (`sh -c`) once per shard.
    Command,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Compact => "compact",
            StepKind::Command => "command",
        }
    }
}

/// A step as registered (`StepLog/<step>.<version>` and the `Steps/<step>`
/// main copy). Its dependencies are not here: they are relations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDefinition {
    #[serde(rename = "stepName")]
    pub name: Name,
    /// Snowflake id of the step, kept across its versions.
    pub code: u64,
    pub version: u64,
    #[serde(flatten)]
    pub body: StepBody,
    /// When this version was logged (writer's wall clock).
    pub wall_ms: u64,
}

/// The versioned content of a step: what `define apply` compares to decide
/// whether a step changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepBody {
    pub kind: StepKind,
    /// `command`: an inline template (run only by nodes started with
    /// `--allow-inline-commands`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `command`: the name of a template the nodes define
    /// (`run --command NAME=TEMPLATE`).
    #[serde(rename = "commandName", default, skip_serializing_if = "Option::is_none")]
    pub command_name: Option<String>,
    /// `command`: executor timeout per subtask.
    #[serde(rename = "timeoutMs", default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `compact`: the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Name>,
    /// `compact`: partitions; empty: all partitions of the table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Name>,
    /// `command`: number of shards (subtasks with `{index, total}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

/// One edge of the step DAG, as the seed's `process_task_relation`: the
/// post step runs after the pre step; a root step has one relation with
/// `preStepCode: 0` and no pre step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relation {
    #[serde(rename = "preStep", default, skip_serializing_if = "Option::is_none")]
    pub pre_step: Option<Name>,
    #[serde(rename = "preStepCode")]
    pub pre_code: u64,
    #[serde(rename = "postStep")]
    pub post_step: Name,
    #[serde(rename = "postStepCode")]
    pub post_code: u64,
}

/// `Relations` main copy and `RelationLog/<version>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relations {
    #[serde(rename = "jobCode")]
    pub job_code: u64,
    pub version: u64,
    pub relations: Vec<Relation>,
    pub wall_ms: u64,
}

/// A step of a job version: which logged step version it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRef {
    #[serde(rename = "stepName")]
    pub name: Name,
    pub code: u64,
    pub version: u64,
}

/// `Job` main copy and `JobLog/<version>`. A job version names the step
/// versions and the relations version it is made of, so that one read of the
/// job's main copy is a consistent snapshot of the whole definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDefinition {
    #[serde(rename = "jobName")]
    pub name: Name,
    pub code: u64,
    pub version: u64,
    /// In definition order.
    pub steps: Vec<StepRef>,
    #[serde(rename = "relationsVersion")]
    pub relations_version: u64,
    pub wall_ms: u64,
    /// Who logged it (host and pid), for humans.
    #[serde(default)]
    pub by: String,
    /// A 5-field cron pattern: the monitor triggers an instance (trigger
    /// `cron-<fire instant, unix ms>`) at each fire instant. Absent in
    /// files of older versions, which older readers ignore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The IANA time zone of `schedule`; absent: UTC.
    #[serde(rename = "timeZone", default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// One step of an instance: the pinned step version and its dependencies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStep {
    #[serde(rename = "stepName")]
    pub name: Name,
    pub code: u64,
    pub version: u64,
    #[serde(rename = "dependentSteps", default)]
    pub dependent_steps: Vec<Name>,
}

/// `Instances/<job>/<trigger>/Job`: a job instance, created once by the
/// winning trigger request and never rewritten. It pins the definition
/// versions the instance runs with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInstance {
    #[serde(rename = "jobName")]
    pub job: Name,
    pub trigger: Name,
    #[serde(rename = "jobCode")]
    pub job_code: u64,
    #[serde(rename = "jobVersion")]
    pub job_version: u64,
    #[serde(rename = "relationsVersion")]
    pub relations_version: u64,
    pub steps: Vec<InstanceStep>,
    /// Request parameters, passed to every step.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub created_wall_ms: u64,
    #[serde(default)]
    pub by: String,
}

/// State of a job instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "Running",
            JobState::Succeeded => "Succeeded",
            JobState::Failed => "Failed",
        }
    }
}

/// State of a step of a job instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepState {
    /// Its dependencies have not all succeeded yet.
    Waiting,
    /// Claimed for submission; the task id is not recorded yet.
    Submitting,
    /// Its main task is submitted.
    Running,
    Succeeded,
    Failed,
    /// Not run because a dependency failed or was skipped.
    Skipped,
}

impl StepState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Waiting => "Waiting",
            StepState::Submitting => "Submitting",
            StepState::Running => "Running",
            StepState::Succeeded => "Succeeded",
            StepState::Failed => "Failed",
            StepState::Skipped => "Skipped",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, StepState::Succeeded | StepState::Failed | StepState::Skipped)
    }
}

/// `Instances/<job>/<trigger>/End`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnd {
    pub state: JobState,
    pub finished_wall_ms: u64,
    #[serde(rename = "failedSteps", default, skip_serializing_if = "Vec::is_empty")]
    pub failed_steps: Vec<Name>,
}

/// `Steps/<step>.Claim`: the driver that is submitting the step's task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepClaim {
    pub by: String,
    pub wall_ms: u64,
    /// The value of the `compactd_job_step` parameter of the submitted task:
    /// a driver that finds a claim without a `.Task` file looks for a task
    /// carrying it before submitting again.
    pub marker: String,
}

/// `Steps/<step>.Task`: the step's main task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTask {
    pub task: TaskId,
    /// When the task was submitted (driver's wall clock).
    pub started_wall_ms: u64,
    pub by: String,
}

/// `Steps/<step>.End`: the step's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepEnd {
    pub state: StepState,
    /// When the outcome was seen (driver's wall clock).
    pub finished_wall_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_the_documented_tree() {
        let j = Name::parse("report").unwrap();
        let s = Name::parse("stats.v2").unwrap();
        let t = Name::parse("20240101").unwrap();
        assert_eq!(job_main(&j), "Compaction_V2/Jobs/Definitions/report/Job");
        assert_eq!(job_log(&j, 3), "Compaction_V2/Jobs/Definitions/report/JobLog/00000000000000000003");
        assert_eq!(step_log(&j, &s, 2), "Compaction_V2/Jobs/Definitions/report/StepLog/stats.v2.00000000000000000002");
        assert_eq!(parse_step_log_name("stats.v2.00000000000000000002"), Some((s.clone(), 2)));
        assert_eq!(parse_step_log_name("stats.2"), None);
        assert_eq!(instance(&j, &t), "Compaction_V2/Jobs/Instances/report/20240101/Job");
        assert_eq!(
            step_file(&j, &t, &s, StepFile::Claim),
            "Compaction_V2/Jobs/Instances/report/20240101/Steps/stats.v2.Claim"
        );
        assert_eq!(parse_step_file("stats.v2.End"), Some((s.clone(), StepFile::End)));
        assert_eq!(parse_step_file("stats.v2.Other"), None);
        assert_eq!(parse_step_file("..End"), None);
    }
}
