//! Job definitions, split as DolphinScheduler splits its workflow JSON: the
//! job, each step and the relations between steps are separate files, each
//! with a main copy and an immutable version log.
//!
//! Write order (see `layouts/JOBS.md`): every log entry is an atomic create
//! of a new version number (a concurrent writer that took the number first
//! makes us take the next one, nothing logged is ever overwritten); the
//! job's log entry names the step and relation versions it is made of and is
//! written after them; then the main copies of steps and relations are
//! replaced, and the job's main copy last. The job's main copy is the commit
//! point: readers take the definition from it and from the logs at the
//! versions it names, so a crash anywhere leaves either the previous
//! definition or the new one, complete.

use std::collections::{BTreeMap, BTreeSet};

use layouts::formats::{decode, encode};
use layouts::jobs::{self as paths, JobDefinition, Relation, Relations, StepDefinition, StepRef};
use layouts::{IdGenerator, Name, NodeId};
use serde::{Deserialize, Serialize};
use store::{Created, Store};

use super::spec::{self, JobSpec, StepSpec};
use super::JobError;

/// Outcome of [`apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    #[serde(rename = "jobName")]
    pub job: Name,
    pub code: u64,
    pub version: u64,
    /// False when the definition equals the current one: nothing was logged.
    pub changed: bool,
    /// Steps that got a new logged version.
    #[serde(rename = "changedSteps")]
    pub changed_steps: Vec<Name>,
    #[serde(rename = "relationsVersion")]
    pub relations_version: u64,
}

/// One line of `define versions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRow {
    pub version: u64,
    /// The main copy is this version.
    pub current: bool,
    pub wall_ms: u64,
    pub by: String,
    pub steps: Vec<StepRef>,
    #[serde(rename = "relationsVersion")]
    pub relations_version: u64,
}

pub(crate) async fn read_json<T: for<'de> Deserialize<'de>>(store: &Store, path: &str) -> Result<Option<T>, JobError> {
    match store.read_or_bad(path).await? {
        None => Ok(None),
        Some(Err(bad)) => Err(JobError::Malformed { path: path.to_string(), problem: bad.to_string() }),
        Some(Ok(b)) => {
            decode(&b).map(Some).map_err(|e| JobError::Malformed { path: path.to_string(), problem: e.to_string() })
        }
    }
}

async fn must_read<T: for<'de> Deserialize<'de>>(store: &Store, path: &str) -> Result<T, JobError> {
    read_json(store, path).await?.ok_or_else(|| JobError::Malformed {
        path: path.to_string(),
        problem: "missing (a logged version it depends on is gone)".into(),
    })
}

/// The current definition (main copy), `None` if never applied or deleted.
pub async fn current(store: &Store, job: &Name) -> Result<Option<JobDefinition>, JobError> {
    read_json(store, &paths::job_main(job)).await
}

/// Logged job versions, ascending.
pub async fn logged_versions(store: &Store, job: &Name) -> Result<Vec<u64>, JobError> {
    let mut v: Vec<u64> =
        store.list(&paths::job_log_dir(job)).await?.iter().filter_map(|e| paths::parse_version(e.name())).collect();
    v.sort_unstable();
    Ok(v)
}

pub async fn logged(store: &Store, job: &Name, version: u64) -> Result<JobDefinition, JobError> {
    read_json(store, &paths::job_log(job, version))
        .await?
        .ok_or_else(|| JobError::VersionNotFound { job: job.to_string(), version })
}

pub async fn step_version(store: &Store, job: &Name, step: &Name, version: u64) -> Result<StepDefinition, JobError> {
    must_read(store, &paths::step_log(job, step, version)).await
}

pub async fn relations_version(store: &Store, job: &Name, version: u64) -> Result<Relations, JobError> {
    must_read(store, &paths::relation_log(job, version)).await
}

/// Dependencies per post step, from relation records.
pub fn dependencies(rel: &Relations) -> BTreeMap<Name, Vec<Name>> {
    let mut m: BTreeMap<Name, Vec<Name>> = BTreeMap::new();
    for r in &rel.relations {
        let e = m.entry(r.post_step.clone()).or_default();
        if let Some(p) = &r.pre_step {
            e.push(p.clone());
        }
    }
    m
}

/// Reassembles a job version into one definition (the shape `apply` reads).
pub async fn assemble(store: &Store, def: &JobDefinition) -> Result<JobSpec, JobError> {
    let rel = relations_version(store, &def.name, def.relations_version).await?;
    let deps = dependencies(&rel);
    let mut steps = vec![];
    for r in &def.steps {
        let s = step_version(store, &def.name, &r.name, r.version).await?;
        let mut spec = StepSpec::from_body(s.name.clone(), s.body, deps.get(&s.name).cloned().unwrap_or_default());
        spec.code = Some(s.code);
        spec.version = Some(s.version);
        steps.push(spec);
    }
    Ok(JobSpec {
        job_name: def.name.clone(),
        steps,
        schedule: def.schedule.clone(),
        time_zone: def.time_zone.clone(),
        code: Some(def.code),
        version: Some(def.version),
    })
}

/// `define show JOB [--version N]`.
pub async fn show(store: &Store, job: &Name, version: Option<u64>) -> Result<JobSpec, JobError> {
    let def = match version {
        Some(v) => logged(store, job, v).await?,
        None => current_or_err(store, job).await?,
    };
    assemble(store, &def).await
}

pub(crate) async fn current_or_err(store: &Store, job: &Name) -> Result<JobDefinition, JobError> {
    match current(store, job).await? {
        Some(d) => Ok(d),
        None => {
            let versions = logged_versions(store, job).await?;
            if versions.is_empty() {
                Err(JobError::NotFound { job: job.to_string() })
            } else {
                Err(JobError::Deleted { job: job.to_string(), versions })
            }
        }
    }
}

/// `define versions JOB`: every logged version, the current one marked.
pub async fn versions(store: &Store, job: &Name) -> Result<Vec<VersionRow>, JobError> {
    let cur = current(store, job).await?.map(|d| d.version);
    let mut out = vec![];
    for v in logged_versions(store, job).await? {
        let d = logged(store, job, v).await?;
        out.push(VersionRow {
            version: v,
            current: cur == Some(v),
            wall_ms: d.wall_ms,
            by: d.by,
            steps: d.steps,
            relations_version: d.relations_version,
        });
    }
    if out.is_empty() {
        return Err(JobError::NotFound { job: job.to_string() });
    }
    Ok(out)
}

/// Creates `path_of(v)` for the first free `v >= first`; returns `v`.
async fn create_next(
    store: &Store,
    first: u64,
    path_of: impl Fn(u64) -> String,
    bytes_of: impl Fn(u64) -> Vec<u8>,
) -> Result<u64, JobError> {
    let mut v = first.max(1);
    loop {
        if store.create(&path_of(v), bytes_of(v)).await? == Created::Created {
            return Ok(v);
        }
        v += 1;
    }
}

/// Step name → logged versions, ascending.
async fn step_log_index(store: &Store, job: &Name) -> Result<BTreeMap<Name, Vec<u64>>, JobError> {
    let mut m: BTreeMap<Name, Vec<u64>> = BTreeMap::new();
    for e in store.list(&paths::step_log_dir(job)).await? {
        if let Some((s, v)) = paths::parse_step_log_name(e.name()) {
            m.entry(s).or_default().push(v);
        }
    }
    for v in m.values_mut() {
        v.sort_unstable();
    }
    Ok(m)
}

/// `define apply`: validates, then logs new versions of what changed and
/// replaces the main copies. Nothing is written when validation fails.
/// What `define apply` reports about a definition without refusing it: steps
/// with inline command templates (run only by nodes started with
/// `--allow-inline-commands`) and steps naming a command that no live node
/// defines (as the monitor's member view shows the nodes' heartbeats).
pub async fn warnings(store: &Store, spec: &JobSpec) -> Result<Vec<String>, JobError> {
    let mut out = vec![];
    let view = crate::cluster::election::newest_lease(store).await?;
    let defined: std::collections::BTreeSet<&str> = view
        .as_ref()
        .map(|l| l.members.iter().flat_map(|m| m.commands.iter().map(String::as_str)).collect())
        .unwrap_or_default();
    for s in &spec.steps {
        if s.command.is_some() {
            out.push(format!(
                "step {} carries an inline command template: nodes run it only when started with \
                 --allow-inline-commands; prefer a named command (`commandName`)",
                s.step_name
            ));
        }
        if let Some(n) = &s.command_name {
            if !defined.contains(n.as_str()) {
                out.push(format!(
                    "step {} names command {n:?}, which no live node defines (run --command {n}=TEMPLATE); \
                     its tasks fail until one does",
                    s.step_name
                ));
            }
        }
    }
    Ok(out)
}

pub async fn apply(store: &Store, spec: &JobSpec, who: &NodeId, by: &str, wall_ms: u64) -> Result<Applied, JobError> {
    spec::validate(spec)?;
    refuse_unreadable(spec, by)?;
    let job = &spec.job_name;
    let cur = current(store, job).await?;
    let job_versions = logged_versions(store, job).await?;
    let latest = match job_versions.last() {
        Some(v) => Some(logged(store, job, *v).await?),
        None => None,
    };
    let mut ids = IdGenerator::new(who);
    let job_code = match cur.as_ref().or(latest.as_ref()) {
        Some(d) => d.code,
        None => ids.next(wall_ms).snowflake(),
    };

    // What the current version is made of.
    let mut cur_steps: BTreeMap<Name, StepDefinition> = BTreeMap::new();
    let mut cur_rel: Option<Relations> = None;
    if let Some(d) = &cur {
        for r in &d.steps {
            let s = step_version(store, job, &r.name, r.version).await?;
            cur_steps.insert(r.name.clone(), s);
        }
        cur_rel = Some(relations_version(store, job, d.relations_version).await?);
    }
    let index = step_log_index(store, job).await?;

    // Steps: reuse an unchanged version, log a new one otherwise.
    let mut refs = vec![];
    let mut changed_steps = vec![];
    let mut new_defs = vec![];
    for s in &spec.steps {
        let body = s.body();
        if let Some(old) = cur_steps.get(&s.step_name).filter(|o| o.body == body) {
            refs.push(StepRef { name: s.step_name.clone(), code: old.code, version: old.version });
            new_defs.push(old.clone());
            continue;
        }
        let logged_before = index.get(&s.step_name);
        let code = match (cur_steps.get(&s.step_name), logged_before.and_then(|v| v.last())) {
            (Some(old), _) => old.code,
            (None, Some(v)) => step_version(store, job, &s.step_name, *v).await?.code,
            (None, None) => ids.next(wall_ms).snowflake(),
        };
        let first = logged_before.and_then(|v| v.last()).map_or(1, |v| v + 1);
        let mut def = StepDefinition { name: s.step_name.clone(), code, version: 0, body, wall_ms };
        let version = create_next(
            store,
            first,
            |v| paths::step_log(job, &s.step_name, v),
            |v| {
                let mut d = def.clone();
                d.version = v;
                encode(&d)
            },
        )
        .await?;
        def.version = version;
        refs.push(StepRef { name: s.step_name.clone(), code, version });
        changed_steps.push(s.step_name.clone());
        new_defs.push(def);
    }

    // Relations: the seed's rows, a root step with pre code 0.
    let code_of: BTreeMap<&Name, u64> = refs.iter().map(|r| (&r.name, r.code)).collect();
    let mut rows = vec![];
    for s in &spec.steps {
        let post_code = code_of[&s.step_name];
        if s.dependent_steps.is_empty() {
            rows.push(Relation { pre_step: None, pre_code: 0, post_step: s.step_name.clone(), post_code });
        }
        for d in &s.dependent_steps {
            rows.push(Relation {
                pre_step: Some(d.clone()),
                pre_code: code_of[d],
                post_step: s.step_name.clone(),
                post_code,
            });
        }
    }
    let rel = match cur_rel.filter(|r| r.relations == rows && r.job_code == job_code) {
        Some(r) => r,
        None => {
            let first = store
                .list(&paths::relation_log_dir(job))
                .await?
                .iter()
                .filter_map(|e| paths::parse_version(e.name()))
                .max()
                .map_or(1, |v| v + 1);
            let mut rel = Relations { job_code, version: 0, relations: rows, wall_ms };
            rel.version = create_next(
                store,
                first,
                |v| paths::relation_log(job, v),
                |v| {
                    let mut r = rel.clone();
                    r.version = v;
                    encode(&r)
                },
            )
            .await?;
            rel
        }
    };

    let same = |d: &&JobDefinition| {
        d.steps == refs
            && d.relations_version == rel.version
            && (&d.schedule, &d.time_zone) == (&spec.schedule, &spec.time_zone)
    };
    if let Some(d) = cur.as_ref().filter(same) {
        remove_stale_step_mains(store, job, &refs).await?;
        return Ok(Applied {
            job: job.clone(),
            code: job_code,
            version: d.version,
            changed: false,
            changed_steps: vec![],
            relations_version: rel.version,
        });
    }

    let mut def = JobDefinition {
        name: job.clone(),
        code: job_code,
        version: 0,
        steps: refs.clone(),
        relations_version: rel.version,
        wall_ms,
        by: by.to_string(),
        schedule: spec.schedule.clone(),
        time_zone: spec.time_zone.clone(),
    };
    let first = job_versions.last().map_or(1, |v| v + 1);
    def.version = create_next(
        store,
        first,
        |v| paths::job_log(job, v),
        |v| {
            let mut d = def.clone();
            d.version = v;
            encode(&d)
        },
    )
    .await?;
    install(store, &def, &new_defs, &rel).await?;
    Ok(Applied {
        job: job.clone(),
        code: job_code,
        version: def.version,
        changed: true,
        changed_steps,
        relations_version: rel.version,
    })
}

/// Refuses a definition whose files in the tree would be over the size
/// every reader refuses ([`layouts::formats::MAX_FILE_BYTES`]), before
/// anything is written: a step, the relations or the job's main copy (each
/// encoded with the widest numbers it may get).
fn refuse_unreadable(spec: &JobSpec, by: &str) -> Result<(), JobError> {
    let max = layouts::formats::MAX_FILE_BYTES;
    let too_large = |what: String, bytes: usize| JobError::Invalid {
        job: spec.job_name.to_string(),
        problem: format!(
            "{what} would be {bytes} bytes in the tree, over the {max}-byte limit of a state file that every \
             reader refuses (nothing was written)"
        ),
    };
    let wide = u64::MAX;
    for s in &spec.steps {
        let d = StepDefinition { name: s.step_name.clone(), code: wide, version: wide, body: s.body(), wall_ms: wide };
        let n = encode(&d).len();
        if n > max {
            return Err(too_large(format!("step {:?}", s.step_name.as_str()), n));
        }
    }
    let rows: Vec<Relation> = spec
        .steps
        .iter()
        .flat_map(|s| {
            let pre: Vec<Option<Name>> = if s.dependent_steps.is_empty() {
                vec![None]
            } else {
                s.dependent_steps.iter().cloned().map(Some).collect()
            };
            pre.into_iter().map(|p| Relation {
                pre_step: p,
                pre_code: wide,
                post_step: s.step_name.clone(),
                post_code: wide,
            })
        })
        .collect();
    let n = encode(&Relations { job_code: wide, version: wide, relations: rows, wall_ms: wide }).len();
    if n > max {
        return Err(too_large("its relations".into(), n));
    }
    let def = JobDefinition {
        name: spec.job_name.clone(),
        code: wide,
        version: wide,
        steps: spec.steps.iter().map(|s| StepRef { name: s.step_name.clone(), code: wide, version: wide }).collect(),
        relations_version: wide,
        wall_ms: wide,
        by: by.to_string(),
        schedule: spec.schedule.clone(),
        time_zone: spec.time_zone.clone(),
    };
    let n = encode(&def).len();
    if n > max {
        return Err(too_large("its main copy".into(), n));
    }
    Ok(())
}

/// Replaces the main copies with a logged version: steps and relations
/// first, the job's main copy last (the commit point), then removes the
/// main copies of steps that are not part of it.
async fn install(
    store: &Store,
    def: &JobDefinition,
    steps: &[StepDefinition],
    rel: &Relations,
) -> Result<(), JobError> {
    let job = &def.name;
    for s in steps {
        store.put(&paths::step_main(job, &s.name), encode(s)).await?;
    }
    store.put(&paths::relations_main(job), encode(rel)).await?;
    store.put(&paths::job_main(job), encode(def)).await?;
    remove_stale_step_mains(store, job, &def.steps).await
}

async fn remove_stale_step_mains(store: &Store, job: &Name, keep: &[StepRef]) -> Result<(), JobError> {
    let keep: BTreeSet<&str> = keep.iter().map(|r| r.name.as_str()).collect();
    for e in store.list(&paths::steps_main_dir(job)).await? {
        if !e.is_dir && !keep.contains(e.name()) {
            store.delete(&e.path).await?;
        }
    }
    Ok(())
}

/// `define switch JOB VERSION`: the logged version copied over the main
/// copies (no new version is logged; a later `apply` takes the next free
/// number). Works after `delete` too: it restores the definition.
pub async fn switch(store: &Store, job: &Name, version: u64) -> Result<JobDefinition, JobError> {
    let def = logged(store, job, version).await?;
    let mut steps = vec![];
    for r in &def.steps {
        steps.push(step_version(store, job, &r.name, r.version).await?);
    }
    let rel = relations_version(store, job, def.relations_version).await?;
    install(store, &def, &steps, &rel).await?;
    Ok(def)
}

/// `define delete JOB`: removes the main copies (job first, so the
/// definition disappears at once), keeps every log. Running instances are
/// not affected: they run from the logged versions they pinned.
pub async fn delete(store: &Store, job: &Name) -> Result<u64, JobError> {
    let def = current_or_err(store, job).await?;
    store.delete(&paths::job_main(job)).await?;
    store.delete(&paths::relations_main(job)).await?;
    store.delete_all(&paths::steps_main_dir(job)).await?;
    Ok(def.version)
}

/// Every job that has a definition folder, with its current version (`None`:
/// deleted, only the log is left).
pub async fn list(store: &Store) -> Result<Vec<(Name, Option<u64>)>, JobError> {
    let mut out = vec![];
    for e in store.list(paths::DEFINITIONS).await? {
        if !e.is_dir {
            continue;
        }
        let Ok(job) = Name::parse(e.name()) else {
            continue;
        };
        let v = current(store, &job).await.ok().flatten().map(|d| d.version);
        out.push((job, v));
    }
    Ok(out)
}
