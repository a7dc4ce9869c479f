//! Jobs: definitions of multi-step work above single tasks (seed 000's split
//! definitions, seed 002's JobDefine / JobRequest / Job / Step / Task).
//!
//! - [`define`]: job definitions split into job, step and relation records,
//!   each with a main copy and an immutable version log; apply, versions,
//!   switch, show, delete.
//! - [`instance`]: `trigger` creates the job instance of `(jobName,
//!   trigger)` exactly once (one atomic create); views for `jobs` / `job`.
//! - [`drive`]: advances every running instance one round: submits the
//!   main tasks of ready steps, records their outcomes, skips the
//!   dependents of failures, finishes jobs. Called by the monitor.
//! - [`cron`]: job schedules: the drive triggers an instance per fire
//!   instant of a job's cron schedule, exactly once, running missed ones
//!   once.
//!
//! Versions in flight: an instance pins the definition versions it started
//! with (job version, each step's version, the relations); the drive reads
//! steps from the immutable logs at those versions, never from the main
//! copies, so changing, switching or deleting a definition never changes a
//! running job (seed 000's rule for online processes). The tree and the
//! write orders are in `layouts/JOBS.md`.

pub mod cron;
pub mod define;
pub mod drive;
pub mod instance;
pub mod spec;

#[cfg(test)]
mod cron_tests;
#[cfg(test)]
mod tests;

pub use define::{apply, Applied, VersionRow};
pub use drive::{drive, drive_round, DriveReport};
pub use instance::{trigger, JobView, StepView, Triggered};
pub use spec::{JobSpec, StepSpec};

/// Parameter every step task carries: `<job>/<trigger>/<step>`. It lets a
/// driver find a task whose submission was not recorded (see [`drive`]).
pub use layouts::formats::JOB_STEP_PARAM as MARKER_PARAM;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{path}: not a valid job definition: {problem}")]
    Parse { path: String, problem: String },
    #[error("job {job:?}: {problem}")]
    Invalid { job: String, problem: String },
    #[error("job {job:?}: duplicate step name(s): {}", quoted(steps))]
    DuplicateSteps { job: String, steps: Vec<String> },
    #[error("job {job:?}: {}", missing.iter().map(|(s, d)| format!("step {s:?} depends on unknown step {d:?}")).collect::<Vec<_>>().join("; "))]
    UnknownDependencies {
        job: String,
        /// (step, unknown dependency)
        missing: Vec<(String, String)>,
    },
    #[error("job {job:?}: steps form a cycle: {}", steps.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" -> "))]
    Cycle { job: String, steps: Vec<String> },
    #[error("job {job:?}, step {step:?}: {problem}")]
    InvalidStep { job: String, step: String, problem: String },
    #[error("job {job:?} is not defined")]
    NotFound { job: String },
    #[error("job {job:?} is deleted (logged versions: {}; `define switch` restores one)", versions.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))]
    Deleted { job: String, versions: Vec<u64> },
    #[error("job {job:?} has no logged version {version}")]
    VersionNotFound { job: String, version: u64 },
    #[error("{path}: {problem}")]
    Malformed { path: String, problem: String },
    #[error("job {job:?} has no instance with trigger {trigger:?}")]
    NoInstance { job: String, trigger: String },
    #[error("invalid parameter {0}")]
    BadParam(String),
    #[error("job {job:?} trigger {trigger:?} step {step:?}: {source}")]
    Task { job: String, trigger: String, step: String, source: Box<crate::tasks::TaskError> },
}

fn quoted(v: &[String]) -> String {
    v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
}
