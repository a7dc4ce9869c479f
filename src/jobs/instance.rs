//! Job instances: `trigger` (seed 002's JobRequest → Job) and the views of
//! `compactd jobs` / `compactd job`.
//!
//! Exactly once: the instance of `(jobName, trigger)` is one file,
//! `Instances/<job>/<trigger>/Job`, written with one atomic create. Of any
//! number of concurrent requests, on any nodes, exactly one creates it; the
//! others get `Exists`, read the winner's file and report it. Nothing else is
//! written by a trigger, so there is no half-created instance to repair.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use layouts::formats::{decode, encode};
use layouts::jobs::{
    self as paths, InstanceStep, JobEnd, JobInstance, JobState, StepClaim, StepEnd, StepFile, StepState, StepTask,
};
use layouts::{Name, TaskId};
use serde::{Deserialize, Serialize};
use store::{Created, Store};

use super::define::{self, read_json};
use super::spec::valid_param_name;
use super::{JobError, MARKER_PARAM};

/// Outcome of [`trigger`].
#[derive(Debug, Clone, Serialize)]
pub struct Triggered {
    /// This request created the instance (false: it existed, reported as is).
    pub created: bool,
    pub instance: JobInstance,
}

/// Parses `k=v` request parameters.
pub fn parse_params(pairs: &[String]) -> Result<BTreeMap<String, String>, JobError> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            return Err(JobError::BadParam(format!("{p:?}: expected NAME=VALUE")));
        };
        if !valid_param_name(k) {
            return Err(JobError::BadParam(format!("{p:?}: the name must be ASCII letters, digits and `_`")));
        }
        if v.contains('\0') {
            return Err(JobError::BadParam(format!("{p:?}: the value contains NUL")));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Reads a file written by atomic create. Creates are complete-or-absent, so
/// a file that does not parse is garbage or a legacy crash, never a write in
/// progress of this version: it is an error naming the path.
async fn read_created<T: for<'de> Deserialize<'de>>(store: &Store, path: &str) -> Result<Option<T>, JobError> {
    match store.read_or_bad(path).await? {
        None => Ok(None),
        Some(Err(bad)) => Err(JobError::Malformed { path: path.to_string(), problem: bad.to_string() }),
        Some(Ok(b)) => {
            decode(&b).map(Some).map_err(|e| JobError::Malformed { path: path.to_string(), problem: e.to_string() })
        }
    }
}

/// Reads an instance (`None` if there is none).
pub async fn read_instance(store: &Store, job: &Name, trigger: &Name) -> Result<Option<JobInstance>, JobError> {
    read_created(store, &paths::instance(job, trigger)).await
}

/// `compactd trigger JOB --trigger KEY`: creates the instance of
/// `(job, trigger)` from the job's current definition, exactly once.
pub async fn trigger(
    store: &Store,
    job: &Name,
    trigger: &Name,
    params: BTreeMap<String, String>,
    by: &str,
    wall_ms: u64,
) -> Result<Triggered, JobError> {
    if let Some(k) = params.keys().find(|k| !valid_param_name(k)) {
        return Err(JobError::BadParam(format!("{k:?}: the name must be ASCII letters, digits and `_`")));
    }
    layouts::limits::check_submitted_params(params.keys())
        .map_err(|e| JobError::Invalid { job: job.to_string(), problem: e.to_string() })?;
    // An existing instance is reported even if its definition is gone since.
    match read_instance(store, job, trigger).await {
        Ok(Some(instance)) => return Ok(Triggered { created: false, instance }),
        // A torn instance file is dealt with after the create below loses.
        Ok(None) | Err(JobError::Malformed { .. }) => {}
        Err(e) => return Err(e),
    }
    // One read of the main copy: a consistent snapshot of the definition.
    let def = define::current_or_err(store, job).await?;
    let rel = define::relations_version(store, job, def.relations_version).await?;
    let deps = define::dependencies(&rel);
    let instance = JobInstance {
        job: job.clone(),
        trigger: trigger.clone(),
        job_code: def.code,
        job_version: def.version,
        relations_version: def.relations_version,
        steps: def
            .steps
            .iter()
            .map(|r| InstanceStep {
                name: r.name.clone(),
                code: r.code,
                version: r.version,
                dependent_steps: deps.get(&r.name).cloned().unwrap_or_default(),
            })
            .collect(),
        params,
        created_wall_ms: wall_ms,
        by: by.to_string(),
    };
    let path = paths::instance(job, trigger);
    let bytes = encode(&instance);
    let mut repaired = false;
    loop {
        if store.create(&path, bytes.clone()).await? == Created::Created {
            return Ok(Triggered { created: true, instance });
        }
        match read_created::<JobInstance>(store, &path).await {
            Ok(Some(instance)) => return Ok(Triggered { created: false, instance }),
            Ok(None) => {
                return Err(JobError::Malformed { path, problem: "created by another request, then removed".into() })
            }
            Err(JobError::Malformed { problem, .. }) if !repaired => {
                // A torn instance file (an older compactd on fs crashed
                // between its create and its write) would make this trigger
                // never-once: no job has run from it (the monitor cannot read
                // it), so once its writer is surely gone it is moved away and
                // created again.
                let now = std::time::UNIX_EPOCH + Duration::from_millis(wall_ms);
                match store.quarantine_torn(&path, is_torn_instance, store::fs::TORN_GRACE, now).await? {
                    store::fs::Quarantine::TooYoung { age } => {
                        return Err(JobError::Malformed {
                            path,
                            problem: format!(
                                "{problem}; it is {}s old: if it was left by a crashed older compactd, `trigger` \
                                 re-creates it once it is {}s old",
                                age.as_secs(),
                                store::fs::TORN_GRACE.as_secs()
                            ),
                        })
                    }
                    store::fs::Quarantine::Removed => {
                        tracing::warn!(path, "moved a torn job instance file away (left by a crashed older compactd)");
                    }
                    store::fs::Quarantine::NotTorn => {}
                }
                repaired = true;
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_torn_instance(b: &[u8]) -> bool {
    decode::<JobInstance>(b).is_err()
}

/// A per-step instance file: absent, present but not (yet) readable, or read.
#[derive(Debug, Clone, Default)]
pub(crate) enum Seen<T> {
    #[default]
    Absent,
    Unreadable,
    Read(T),
}

impl<T> Seen<T> {
    pub(crate) fn present(&self) -> bool {
        !matches!(self, Seen::Absent)
    }

    pub(crate) fn get(&self) -> Option<&T> {
        match self {
            Seen::Read(t) => Some(t),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct StepFiles {
    pub claim: Seen<StepClaim>,
    pub task: Seen<StepTask>,
    pub end: Seen<StepEnd>,
}

impl StepFiles {
    pub(crate) fn state(&self) -> StepState {
        match (&self.end, &self.task, &self.claim) {
            (Seen::Read(e), _, _) => e.state,
            (Seen::Unreadable, _, _) | (_, Seen::Read(_) | Seen::Unreadable, _) => StepState::Running,
            (_, _, Seen::Read(_) | Seen::Unreadable) => StepState::Submitting,
            _ => StepState::Waiting,
        }
    }
}

async fn read_seen<T: for<'de> Deserialize<'de>>(store: &Store, path: &str) -> Result<Seen<T>, JobError> {
    Ok(match store.read_or_bad(path).await? {
        None => Seen::Absent,
        Some(Err(_)) => Seen::Unreadable,
        Some(Ok(b)) => match decode(&b) {
            Ok(v) => Seen::Read(v),
            Err(_) => Seen::Unreadable,
        },
    })
}

/// The per-step files of an instance (one LIST, then reads). With `all`
/// false, files that a later one supersedes are not read (the drive).
pub(crate) async fn read_steps(
    store: &Store,
    inst: &JobInstance,
    all: bool,
) -> Result<BTreeMap<Name, StepFiles>, JobError> {
    let mut present: BTreeMap<Name, Vec<StepFile>> = BTreeMap::new();
    for e in store.list(&paths::instance_steps_dir(&inst.job, &inst.trigger)).await? {
        if let Some((step, f)) = paths::parse_step_file(e.name()) {
            present.entry(step).or_default().push(f);
        }
    }
    let mut out = BTreeMap::new();
    for s in &inst.steps {
        let mut files = StepFiles::default();
        let have = present.get(&s.name).cloned().unwrap_or_default();
        let path = |f| paths::step_file(&inst.job, &inst.trigger, &s.name, f);
        if have.contains(&StepFile::End) {
            files.end = read_seen(store, &path(StepFile::End)).await?;
        }
        if have.contains(&StepFile::Task) && (all || !files.end.present()) {
            files.task = read_seen(store, &path(StepFile::Task)).await?;
        }
        if have.contains(&StepFile::Claim) && (all || (!files.end.present() && !files.task.present())) {
            files.claim = read_seen(store, &path(StepFile::Claim)).await?;
        }
        out.insert(s.name.clone(), files);
    }
    Ok(out)
}

/// Every instance in the tree: (job, trigger, has its `End` file).
pub async fn list_instances(store: &Store) -> Result<Vec<(Name, Name, bool)>, JobError> {
    let mut found: BTreeMap<(String, String), (bool, bool)> = BTreeMap::new();
    let mut entries = store.list_stream(paths::INSTANCES, true);
    while let Some(e) = entries.try_next().await? {
        let rel = &e.path[paths::INSTANCES.len().min(e.path.len())..];
        let mut parts = rel.split('/');
        let (Some(job), Some(trigger), Some(file), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let f = found.entry((job.to_string(), trigger.to_string())).or_default();
        match file {
            paths::JOB_FILE => f.0 = true,
            paths::END => f.1 = true,
            _ => {}
        }
    }
    Ok(found
        .into_iter()
        .filter(|(_, (job, _))| *job)
        .filter_map(|((j, t), (_, end))| Some((Name::parse(&j).ok()?, Name::parse(&t).ok()?, end)))
        .collect())
}

/// One step of `compactd job` (seed 002's Step).
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    #[serde(rename = "stepName")]
    pub name: Name,
    pub state: StepState,
    pub kind: Option<String>,
    pub version: u64,
    pub code: u64,
    #[serde(rename = "dependentSteps")]
    pub dependent_steps: Vec<Name>,
    pub task: Option<TaskId>,
    pub started_wall_ms: Option<u64>,
    pub finished_wall_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The parameters its task gets (definition, then request).
    pub params: BTreeMap<String, String>,
    /// Outstanding subtasks' states by shard index or partition (finished
    /// subtasks are counted in `result`).
    #[serde(rename = "taskStates", skip_serializing_if = "Option::is_none")]
    pub task_states: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<crate::tasks::ResultStatus>,
    /// Seed 002's Task records of its outstanding subtasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskView>>,
}

/// Seed 002's Task: one subtask of a step.
#[derive(Debug, Clone, Serialize)]
pub struct TaskView {
    #[serde(rename = "jobName")]
    pub job: Name,
    pub trigger: Name,
    #[serde(rename = "stepName")]
    pub step: Name,
    pub id: String,
    pub state: String,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharding: Option<layouts::formats::Shard>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub params: BTreeMap<String, String>,
}

/// What `compactd jobs` / `job` show of a job's schedule
/// ([`super::cron::view`]).
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleView {
    #[serde(rename = "jobName")]
    pub job: Name,
    pub schedule: String,
    #[serde(rename = "timeZone")]
    pub time_zone: String,
    /// The next fire instant after now (unix ms); `None` if the stored
    /// schedule does not parse (`problem` says why).
    #[serde(rename = "nextFireMs")]
    pub next_fire_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// `compactd job JOB KEY` (seed 002's Job).
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    #[serde(rename = "jobName")]
    pub job: Name,
    pub trigger: Name,
    pub state: JobState,
    #[serde(rename = "jobVersion")]
    pub job_version: u64,
    pub params: BTreeMap<String, String>,
    pub created_wall_ms: u64,
    pub finished_wall_ms: Option<u64>,
    pub steps: Vec<StepView>,
    /// The job's schedule and next fire instant, if its current definition
    /// has one (filled in by the views that show it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleView>,
}

/// The view of one instance; with `tasks`, each step's task status too.
pub async fn view(store: &Store, job: &Name, trigger: &Name, tasks: bool) -> Result<JobView, JobError> {
    let inst = read_instance(store, job, trigger)
        .await?
        .ok_or_else(|| JobError::NoInstance { job: job.to_string(), trigger: trigger.to_string() })?;
    view_of(store, &inst, tasks).await
}

pub(crate) async fn view_of(store: &Store, inst: &JobInstance, with_tasks: bool) -> Result<JobView, JobError> {
    // The job's end first, then its steps: the driver writes every step's
    // end before the job's, so a view never shows an ended job with a step
    // still running (read in the other order, a step could be seen before
    // its end and the job after its own).
    let end: Option<JobEnd> = match read_json(store, &paths::instance_end(&inst.job, &inst.trigger)).await {
        Ok(e) => e,
        Err(JobError::Malformed { .. }) => None,
        Err(e) => return Err(e),
    };
    let files = read_steps(store, inst, true).await?;
    let mut steps = vec![];
    for s in &inst.steps {
        let f = files.get(&s.name).cloned().unwrap_or_default();
        let def = define::step_version(store, &inst.job, &s.name, s.version).await.ok();
        let params = def.as_ref().map(|d| task_params(inst, d)).unwrap_or_default();
        let task = f.task.get().map(|t| t.task).or(f.end.get().and_then(|e| e.task));
        let mut v = StepView {
            name: s.name.clone(),
            state: f.state(),
            kind: def.as_ref().map(|d| d.body.kind.as_str().to_string()),
            version: s.version,
            code: s.code,
            dependent_steps: s.dependent_steps.clone(),
            task,
            started_wall_ms: f.task.get().map(|t| t.started_wall_ms),
            finished_wall_ms: f.end.get().map(|e| e.finished_wall_ms),
            reason: f.end.get().and_then(|e| e.reason.clone()),
            params: params.clone(),
            task_states: None,
            result: None,
            tasks: None,
        };
        if let (true, Some(id)) = (with_tasks, task) {
            if let Ok(st) = crate::tasks::status(store, &id).await {
                let mut states = BTreeMap::new();
                let mut list = vec![];
                for sub in &st.subtasks {
                    let key =
                        sub.shard.map(|i| i.to_string()).or(sub.partition.clone()).unwrap_or_else(|| sub.id.clone());
                    states.insert(key, sub.state.as_str().to_string());
                    let total = def.as_ref().and_then(|d| d.body.sharding).unwrap_or(1);
                    list.push(TaskView {
                        job: inst.job.clone(),
                        trigger: inst.trigger.clone(),
                        step: s.name.clone(),
                        id: sub.id.clone(),
                        state: sub.state.as_str().to_string(),
                        node: sub.node.clone(),
                        sharding: sub.shard.map(|index| layouts::formats::Shard { index, total }),
                        partition: sub.partition.clone(),
                        params: params.clone(),
                    });
                }
                v.task_states = Some(states);
                v.result = Some(st.result);
                v.tasks = Some(list);
            }
        }
        steps.push(v);
    }
    Ok(JobView {
        job: inst.job.clone(),
        trigger: inst.trigger.clone(),
        state: end.as_ref().map_or(JobState::Running, |e| e.state),
        job_version: inst.job_version,
        params: inst.params.clone(),
        created_wall_ms: inst.created_wall_ms,
        finished_wall_ms: end.map(|e| e.finished_wall_ms),
        steps,
        schedule: None,
    })
}

/// Every instance's view (without task details), optionally of one job.
pub async fn views(store: &Store, job: Option<&Name>) -> Result<Vec<JobView>, JobError> {
    let mut out = vec![];
    for (j, t, _) in list_instances(store).await? {
        if job.is_some_and(|want| *want != j) {
            continue;
        }
        match read_json::<JobInstance>(store, &paths::instance(&j, &t)).await {
            Ok(Some(inst)) => out.push(view_of(store, &inst, false).await?),
            Ok(None) | Err(JobError::Malformed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| (a.created_wall_ms, &a.job, &a.trigger).cmp(&(b.created_wall_ms, &b.job, &b.trigger)));
    Ok(out)
}

/// The parameters of a step's task: the step definition's, overridden by the
/// request's; `job`, `trigger`, `step` unless set; and the marker.
pub fn task_params(inst: &JobInstance, def: &layouts::jobs::StepDefinition) -> BTreeMap<String, String> {
    let mut p = def.body.params.clone();
    p.extend(inst.params.clone());
    p.entry("job".into()).or_insert_with(|| inst.job.to_string());
    p.entry("trigger".into()).or_insert_with(|| inst.trigger.to_string());
    p.entry("step".into()).or_insert_with(|| def.name.to_string());
    p.insert(MARKER_PARAM.into(), format!("{}/{}/{}", inst.job, inst.trigger, def.name));
    p
}
