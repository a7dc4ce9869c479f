//! The job driver: one round over every running job instance.
//!
//! For each instance, in the topological order of its pinned DAG:
//! - a step whose `.End` exists is done;
//! - a step with a `.Task` is running: its main task's state is read
//!   (`Done` without failed subtasks → `Succeeded`; `Done` with failed
//!   subtasks, `Failed` or `Cancel` → `Failed`) and recorded in `.End`;
//! - a step with only a `.Claim` is being submitted: see "idempotent
//!   submission" below;
//! - a step with nothing yet: if a dependency failed or was skipped it is
//!   `Skipped`; if every dependency succeeded it is started (claim, submit,
//!   record the task id); otherwise it waits.
//!
//! When every step has its `.End`, the job's `End` is created: `Succeeded`
//! if every step succeeded, else `Failed` naming the failed steps. Steps
//! that do not depend on a failed step still run to the end first.
//!
//! Every file is written with atomic create and never rewritten, so states
//! only move forward and two drivers (a monitor and a fenced predecessor that
//! has not noticed yet) cannot undo each other: whoever creates an `.End`
//! first decides it, the other reads it.
//!
//! **Idempotent submission.** A task id only exists once `submit` returns,
//! so the driver first creates `<step>.Claim` (atomic create: one claimant),
//! then submits a task whose parameters carry the marker
//! `compactd_job_step=<job>/<trigger>/<step>`, then creates `<step>.Task`
//! with the id. A driver that finds a claim without a `.Task` (the claimant
//! crashed, or lost its leadership mid-way) looks for a submitted task with
//! that marker among the tasks whose id is not older than the claim (ids
//! are time-ordered and made from the submit's wall time, which is the
//! claim's), and records it if it is complete (has a status marker). Only if
//! there is none does it submit again, and only when the claim is its own
//! (a previous round or incarnation of the same node: the monitor drives
//! sequentially) or older than [`CLAIM_GRACE_MS`] on the claim's clock, so
//! that a live claimant mid-submit is not doubled. If two submissions still
//! happen (a claimant paused for longer than the grace in the middle of
//! `submit`), the `.Task` create picks one and the loser stops its own task:
//! a duplicate can start but is cancelled; it never decides the step.

use std::collections::BTreeMap;

use layouts::formats::{ExecutorKind, ExecutorSpec};
use layouts::jobs::{
    self as paths, JobEnd, JobInstance, JobState, StepClaim, StepDefinition, StepEnd, StepFile, StepKind, StepState,
    StepTask,
};
use layouts::{Name, NodeId, TaskId, TaskState};
use serde::Serialize;
use store::{Created, Store};

use super::define;
use super::instance::{list_instances, read_steps, task_params, Seen, StepFiles};
use super::{JobError, MARKER_PARAM};
use crate::tasks::{self, TaskError, TaskSpec};

/// A claim without a recorded task, made by another node, is taken over
/// after this long (by the claim's and the driver's wall clocks).
pub const CLAIM_GRACE_MS: u64 = 30_000;

/// Schema of the tasks of `command` steps (db: the job, table: the step).
pub const COMMAND_SCHEMA: &str = "jobs";

/// What one round did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DriveReport {
    /// Running instances looked at.
    pub instances: usize,
    /// `job/trigger/step task-id`
    pub submitted: Vec<String>,
    /// `job/trigger/step State`
    pub steps_finished: Vec<String>,
    /// `job/trigger State`
    pub jobs_finished: Vec<String>,
    /// Problems with single instances (the round goes on with the others).
    pub errors: Vec<String>,
    /// `job/trigger` of the instances the job schedules triggered.
    pub triggered: Vec<String>,
    /// The next fire instant of any schedule (when schedules were looked at).
    #[serde(skip)]
    pub next_fire_ms: Option<u64>,
    /// Managers of the tasks submitted (to wake).
    #[serde(skip)]
    pub managers: Vec<layouts::NodeId>,
}

/// Advances every running job instance by one round. Idempotent and
/// crash-safe: it can be stopped at any point and run again, by this node or
/// another. Called by the monitor once per round; `me` is the driving node.
pub async fn drive(store: &Store, me: &NodeId, wall_ms: u64) -> Result<DriveReport, JobError> {
    drive_round(store, me, wall_ms, false).await
}

/// [`drive`], and with `schedules` first the due fire instants of the job
/// schedules ([`super::cron::fire_due`]), from the same listing of
/// instances; the instances they create are driven in this round.
pub async fn drive_round(store: &Store, me: &NodeId, wall_ms: u64, schedules: bool) -> Result<DriveReport, JobError> {
    let mut report = DriveReport::default();
    let mut instances = list_instances(store).await?;
    if schedules {
        let fired = super::cron::fire_due(store, me, wall_ms, &instances).await?;
        report.errors = fired.errors;
        report.next_fire_ms = fired.next_fire_ms;
        for (job, trigger) in fired.created {
            report.triggered.push(format!("{job}/{trigger}"));
            instances.push((job, trigger, false));
        }
    }
    for (job, trigger, ended) in instances {
        if ended {
            continue;
        }
        report.instances += 1;
        if let Err(e) = drive_instance(store, me, wall_ms, &job, &trigger, &mut report).await {
            tracing::warn!(%job, %trigger, "job drive: {e}");
            report.errors.push(format!("{job}/{trigger}: {e}"));
        }
    }
    Ok(report)
}

async fn drive_instance(
    store: &Store,
    me: &NodeId,
    wall_ms: u64,
    job: &Name,
    trigger: &Name,
    report: &mut DriveReport,
) -> Result<(), JobError> {
    // An instance file that does not parse (garbage, or torn by a crashed
    // older compactd) cannot be driven: `check` reports it and `trigger` of
    // the same key repairs a torn one.
    let Ok(Some(inst)) = define::read_json::<JobInstance>(store, &paths::instance(job, trigger)).await else {
        return Ok(());
    };
    let order = super::spec::order(job.as_str(), inst.steps.iter().map(|s| (&s.name, &s.dependent_steps)))?;
    let deps: BTreeMap<&Name, &Vec<Name>> = inst.steps.iter().map(|s| (&s.name, &s.dependent_steps)).collect();
    let files = read_steps(store, &inst, false).await?;
    let mut states: BTreeMap<Name, StepState> = BTreeMap::new();
    let d = Driver { store, me, wall_ms, inst: &inst };
    for step in &order {
        let f = files.get(step).cloned().unwrap_or_default();
        let state = d.advance(step, &f, deps[step], &states, report).await?;
        states.insert(step.clone(), state);
    }
    if states.values().all(|s| s.is_terminal()) {
        let failed: Vec<Name> = order.iter().filter(|s| states[*s] == StepState::Failed).cloned().collect();
        let end = JobEnd {
            state: if failed.is_empty() && states.values().all(|s| *s == StepState::Succeeded) {
                JobState::Succeeded
            } else {
                JobState::Failed
            },
            finished_wall_ms: wall_ms,
            failed_steps: failed,
        };
        if store.create(&paths::instance_end(job, trigger), layouts::formats::encode(&end)).await? == Created::Created {
            tracing::info!(%job, %trigger, state = end.state.as_str(), "job finished");
            report.jobs_finished.push(format!("{job}/{trigger} {}", end.state.as_str()));
        }
    }
    Ok(())
}

struct Driver<'a> {
    store: &'a Store,
    me: &'a NodeId,
    wall_ms: u64,
    inst: &'a JobInstance,
}

impl Driver<'_> {
    fn marker(&self, step: &Name) -> String {
        format!("{}/{}/{step}", self.inst.job, self.inst.trigger)
    }

    fn path(&self, step: &Name, f: StepFile) -> String {
        paths::step_file(&self.inst.job, &self.inst.trigger, step, f)
    }

    /// One step's round; returns its state afterwards.
    async fn advance(
        &self,
        step: &Name,
        f: &StepFiles,
        deps: &[Name],
        states: &BTreeMap<Name, StepState>,
        report: &mut DriveReport,
    ) -> Result<StepState, JobError> {
        match (&f.end, &f.task, &f.claim) {
            (Seen::Read(e), _, _) => Ok(e.state),
            (Seen::Unreadable, _, _) | (_, Seen::Unreadable, _) => Ok(f.state()),
            (_, Seen::Read(t), _) => self.check_task(step, t, report).await,
            (_, _, Seen::Unreadable) => Ok(StepState::Submitting),
            (_, _, Seen::Read(c)) => self.recover(step, c, report).await,
            _ => {
                let dep_states: Vec<(&Name, StepState)> =
                    deps.iter().map(|d| (d, states.get(d).copied().unwrap_or(StepState::Waiting))).collect();
                if let Some((d, s)) =
                    dep_states.iter().find(|(_, s)| matches!(s, StepState::Failed | StepState::Skipped))
                {
                    let reason = format!("dependent step \"{d}\" {}", s.as_str().to_lowercase());
                    return self.finish(step, StepState::Skipped, None, Some(reason), report).await;
                }
                if dep_states.iter().all(|(_, s)| *s == StepState::Succeeded) {
                    return self.start(step, report).await;
                }
                Ok(StepState::Waiting)
            }
        }
    }

    /// Creates `.End` (first writer decides); returns the recorded state.
    async fn finish(
        &self,
        step: &Name,
        state: StepState,
        task: Option<TaskId>,
        reason: Option<String>,
        report: &mut DriveReport,
    ) -> Result<StepState, JobError> {
        let end = StepEnd { state, finished_wall_ms: self.wall_ms, task, reason };
        let path = self.path(step, StepFile::End);
        match self.store.create(&path, layouts::formats::encode(&end)).await? {
            Created::Created => {
                tracing::info!(job = %self.inst.job, trigger = %self.inst.trigger, %step, state = state.as_str(), "step finished");
                report.steps_finished.push(format!("{} {}", self.marker(step), state.as_str()));
                Ok(state)
            }
            Created::Exists => Ok(match define::read_json::<StepEnd>(self.store, &path).await {
                Ok(Some(e)) => e.state,
                _ => StepState::Running,
            }),
        }
    }

    async fn check_task(&self, step: &Name, t: &StepTask, report: &mut DriveReport) -> Result<StepState, JobError> {
        let dir = tasks::read_dir(self.store, &t.task).await?;
        let (state, reason) = match dir.state {
            Some(TaskState::Done) => match tasks::read_info(self.store, &t.task).await {
                Ok(info) if info.result.failed_count > 0 => (
                    StepState::Failed,
                    Some(format!(
                        "task {}: {} subtask(s) failed, {} succeeded",
                        t.task, info.result.failed_count, info.result.success_count
                    )),
                ),
                _ => (StepState::Succeeded, None),
            },
            Some(s @ (TaskState::Failed | TaskState::Cancel)) => {
                (StepState::Failed, Some(format!("task {} {}", t.task, s)))
            }
            Some(_) => return Ok(StepState::Running),
            None if !dir.has_info && dir.terms.is_empty() => {
                (StepState::Failed, Some(format!("task {} is gone from the tree before its outcome was seen", t.task)))
            }
            None => return Ok(StepState::Running),
        };
        self.finish(step, state, Some(t.task), reason, report).await
    }

    /// No files yet and every dependency succeeded: claim, submit, record.
    async fn start(&self, step: &Name, report: &mut DriveReport) -> Result<StepState, JobError> {
        let claim = StepClaim { by: self.me.to_string(), wall_ms: self.wall_ms, marker: self.marker(step) };
        match self.store.create(&self.path(step, StepFile::Claim), layouts::formats::encode(&claim)).await? {
            Created::Created => self.submit(step, report).await,
            // Another driver claimed it: it submits; we look next round.
            Created::Exists => Ok(StepState::Submitting),
        }
    }

    /// A claim without a recorded task.
    async fn recover(&self, step: &Name, claim: &StepClaim, report: &mut DriveReport) -> Result<StepState, JobError> {
        if let Some(id) = tasks::find_marked(self.store, MARKER_PARAM, &claim.marker, claim.wall_ms).await? {
            return self.record(step, id, id.unix_ms, report).await;
        }
        let mine = claim.by == self.me.as_str();
        if mine || self.wall_ms >= claim.wall_ms.saturating_add(CLAIM_GRACE_MS) {
            return self.submit(step, report).await;
        }
        Ok(StepState::Submitting)
    }

    async fn submit(&self, step: &Name, report: &mut DriveReport) -> Result<StepState, JobError> {
        let Some(pinned) = self.inst.steps.iter().find(|s| &s.name == step) else {
            return Ok(StepState::Waiting);
        };
        let def = match define::step_version(self.store, &self.inst.job, step, pinned.version).await {
            Ok(d) => d,
            Err(JobError::Store(e)) => return Err(e.into()),
            Err(e) => return self.finish(step, StepState::Failed, None, Some(e.to_string()), report).await,
        };
        let spec = task_spec(self.inst, &def);
        match tasks::submit_placed(self.store, spec, self.wall_ms).await {
            Ok(placed) => {
                report.managers.push(placed.manager);
                self.record(step, placed.id, self.wall_ms, report).await
            }
            Err(TaskError::Invalid(problem)) => self.finish(step, StepState::Failed, None, Some(problem), report).await,
            Err(e @ TaskError::Limit(_)) => {
                self.finish(step, StepState::Failed, None, Some(e.to_string()), report).await
            }
            // No live node, a store error: the claim is ours, the next round
            // (or the next monitor, after the grace) submits again.
            Err(source) => Err(JobError::Task {
                job: self.inst.job.to_string(),
                trigger: self.inst.trigger.to_string(),
                step: step.to_string(),
                source: Box::new(source),
            }),
        }
    }

    /// Records the step's task (first writer decides; a losing duplicate
    /// task of ours is stopped).
    async fn record(
        &self,
        step: &Name,
        id: TaskId,
        started_wall_ms: u64,
        report: &mut DriveReport,
    ) -> Result<StepState, JobError> {
        let t = StepTask { task: id, started_wall_ms, by: self.me.to_string() };
        let path = self.path(step, StepFile::Task);
        match self.store.create(&path, layouts::formats::encode(&t)).await? {
            Created::Created => {
                tracing::info!(job = %self.inst.job, trigger = %self.inst.trigger, %step, task = %id, "step started");
                report.submitted.push(format!("{} {id}", self.marker(step)));
            }
            Created::Exists => {
                if let Ok(Some(other)) = define::read_json::<StepTask>(self.store, &path).await {
                    if other.task != id {
                        tracing::warn!(job = %self.inst.job, trigger = %self.inst.trigger, %step, duplicate = %id, kept = %other.task, "stopping a duplicate step task");
                        let _ = tasks::stop(self.store, &id, "jobs: duplicate", self.wall_ms).await;
                    }
                }
            }
        }
        Ok(StepState::Running)
    }
}

/// The main task of a step.
pub fn task_spec(inst: &JobInstance, def: &StepDefinition) -> TaskSpec {
    let params = task_params(inst, def);
    let b = &def.body;
    let mut spec = match (b.kind, &b.db, &b.schema, &b.table) {
        (StepKind::Compact, Some(db), Some(schema), Some(table)) => {
            let mut s = TaskSpec::table(db.clone(), schema.clone(), table.clone());
            s.partitions = b.partitions.clone();
            s
        }
        _ => {
            let mut s =
                TaskSpec::table(inst.job.clone(), Name::parse(COMMAND_SCHEMA).expect("valid"), def.name.clone());
            s.shards = Some(b.sharding.unwrap_or(1));
            s.executor = Some(ExecutorSpec {
                kind: ExecutorKind::Command,
                command: b.command.clone(),
                command_name: b.command_name.clone(),
                timeout_ms: b.timeout_ms,
            });
            s
        }
    };
    spec.params = params;
    spec
}
