//! The job definition file (`define apply FILE.json`) and its validation.
//!
//! ```json
//! {
//!   "jobName": "diamond",
//!   "steps": [
//!     { "stepName": "A", "kind": "command", "command": "echo {param.trigger}" },
//!     { "stepName": "B", "kind": "command", "command": "…", "sharding": 4, "dependentSteps": ["A"] },
//!     { "stepName": "C", "kind": "compact", "db": "db", "schema": "public", "table": "events",
//!       "dependentSteps": ["A"] }
//!   ]
//! }
//! ```
//!
//! A job may carry a schedule: `"schedule": "0 2 * * *"` (5-field cron) and
//! `"timeZone": "Europe/Berlin"` (IANA; default UTC) make the monitor
//! trigger it at each fire instant ([`crate::jobs::cron`]).
//!
//! Validation refuses, naming the steps: duplicate step names, a dependency on
//! an unknown step, a cycle (a step depending on itself included), a
//! `compact` step without `db`/`schema`/`table` or with `sharding`/`command`,
//! a `command` step without a command, `sharding: 0`, and parameter names
//! that are not `[A-Za-z0-9_]+` (they become environment variable names).

use std::collections::{BTreeMap, BTreeSet};

use layouts::jobs::{StepBody, StepKind};
use layouts::Name;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};

use super::JobError;
use crate::schedule::{Cron, DEFAULT_ZONE};

/// A job definition as written by ops (and printed by `define show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    #[serde(rename = "jobName")]
    pub job_name: Name,
    pub steps: Vec<StepSpec>,
    /// A 5-field cron pattern: the monitor triggers an instance at each
    /// fire instant (see [`crate::jobs::cron`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The IANA time zone of `schedule` (default UTC).
    #[serde(rename = "timeZone", default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Printed by `define show`; ignored by `apply`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u64>,
    /// Printed by `define show`; ignored by `apply`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// One step of a [`JobSpec`]. Its fields repeat [`StepBody`]'s instead of
/// flattening it: serde's `deny_unknown_fields` does not work with
/// `flatten`, and a misspelt key in a definition file must be an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    #[serde(rename = "stepName")]
    pub step_name: Name,
    pub kind: StepKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(rename = "commandName", default, skip_serializing_if = "Option::is_none")]
    pub command_name: Option<String>,
    #[serde(rename = "timeoutMs", default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Name>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    #[serde(rename = "dependentSteps", default)]
    pub dependent_steps: Vec<Name>,
    /// Printed by `define show`; ignored by `apply`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u64>,
    /// Printed by `define show`; ignored by `apply`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

impl StepSpec {
    pub fn body(&self) -> StepBody {
        StepBody {
            kind: self.kind,
            command: self.command.clone(),
            command_name: self.command_name.clone(),
            timeout_ms: self.timeout_ms,
            db: self.db.clone(),
            schema: self.schema.clone(),
            table: self.table.clone(),
            partitions: self.partitions.clone(),
            sharding: self.sharding,
            params: self.params.clone(),
        }
    }

    pub fn from_body(name: Name, body: StepBody, deps: Vec<Name>) -> StepSpec {
        StepSpec {
            step_name: name,
            kind: body.kind,
            command: body.command,
            command_name: body.command_name,
            timeout_ms: body.timeout_ms,
            db: body.db,
            schema: body.schema,
            table: body.table,
            partitions: body.partitions,
            sharding: body.sharding,
            params: body.params,
            dependent_steps: deps,
            code: None,
            version: None,
        }
    }
}

/// Parses a definition file's bytes; `path` names the file in errors.
pub fn parse(path: &str, bytes: &[u8]) -> Result<JobSpec, JobError> {
    if bytes.len() > layouts::formats::MAX_FILE_BYTES {
        return Err(JobError::Parse {
            path: path.into(),
            problem: format!("file is {} bytes, over the {}-byte limit", bytes.len(), layouts::formats::MAX_FILE_BYTES),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| JobError::Parse { path: path.into(), problem: e.to_string() })
}

/// A parameter name: it becomes `{param.NAME}` and `COMPACTD_PARAM_<NAME>`.
pub fn valid_param_name(k: &str) -> bool {
    !k.is_empty() && k.len() <= 128 && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks a definition; returns its steps in a topological order (ties in
/// definition order).
pub fn validate(spec: &JobSpec) -> Result<Vec<Name>, JobError> {
    let job = spec.job_name.to_string();
    if spec.steps.is_empty() {
        return Err(JobError::Invalid { job, problem: "a job needs at least one step".into() });
    }
    if let Err(problem) = check_schedule(spec.schedule.as_deref(), spec.time_zone.as_deref()) {
        return Err(JobError::Invalid { job, problem });
    }
    let mut seen = BTreeSet::new();
    let mut dups = BTreeSet::new();
    for s in &spec.steps {
        if !seen.insert(&s.step_name) {
            dups.insert(s.step_name.to_string());
        }
    }
    if !dups.is_empty() {
        return Err(JobError::DuplicateSteps { job, steps: dups.into_iter().collect() });
    }
    let mut unknown = vec![];
    for s in &spec.steps {
        for d in &s.dependent_steps {
            if !seen.contains(d) {
                unknown.push((s.step_name.to_string(), d.to_string()));
            }
        }
    }
    if !unknown.is_empty() {
        return Err(JobError::UnknownDependencies { job, missing: unknown });
    }
    for s in &spec.steps {
        let problem = step_problem(s);
        if let Some(problem) = problem {
            return Err(JobError::InvalidStep { job, step: s.step_name.to_string(), problem });
        }
    }
    order(&job, spec.steps.iter().map(|s| (&s.step_name, &s.dependent_steps)))
}

/// A definition's schedule keys; the problem names the key.
fn check_schedule(schedule: Option<&str>, tz: Option<&str>) -> Result<(), String> {
    match (schedule, tz) {
        (None, None) => Ok(()),
        (None, Some(z)) => Err(format!("\"timeZone\" {z:?} without a \"schedule\"")),
        (Some(s), z) => Cron::parse(s, z.unwrap_or(DEFAULT_ZONE)).map(|_| ()).map_err(|e| format!("\"schedule\": {e}")),
    }
}

fn step_problem(s: &StepSpec) -> Option<String> {
    if let Some(k) = s.params.keys().find(|k| !valid_param_name(k)) {
        return Some(format!("parameter name {k:?} must be ASCII letters, digits and `_`"));
    }
    if s.sharding == Some(0) {
        return Some("sharding must be at least 1".into());
    }
    if let Some(ms) = s.timeout_ms {
        if let Err(e) = layouts::units::check_duration(std::time::Duration::from_millis(ms)) {
            return Some(format!("\"timeoutMs\": {e}"));
        }
    }
    let limits = [
        s.sharding.map(|n| layouts::limits::check_units("shards", n.into())),
        Some(layouts::limits::check_partitions(&s.partitions)),
        Some(layouts::limits::check_params(&s.params)),
        Some(layouts::limits::check_submitted_params(s.params.keys())),
        s.command.as_deref().map(|t| layouts::limits::check_template("the `command` template", t)),
    ];
    if let Some(Err(e)) = limits.into_iter().flatten().find(Result::is_err) {
        return Some(e.to_string());
    }
    let mut deps = BTreeSet::new();
    if let Some(d) = s.dependent_steps.iter().find(|d| !deps.insert(*d)) {
        return Some(format!("lists dependent step \"{d}\" twice"));
    }
    match s.kind {
        StepKind::Compact => {
            if s.db.is_none() || s.schema.is_none() || s.table.is_none() {
                return Some("a `compact` step needs `db`, `schema` and `table`".into());
            }
            if s.sharding.is_some() {
                return Some("a `compact` step runs one subtask per partition and takes no `sharding`".into());
            }
            if s.command.is_some() || s.command_name.is_some() {
                return Some("a `compact` step takes no `command` or `commandName`".into());
            }
        }
        StepKind::Command => {
            match (&s.command, &s.command_name) {
                (Some(_), Some(_)) => {
                    return Some("a `command` step takes `commandName` or `command`, not both".into())
                }
                (None, None) => {
                    return Some("a `command` step needs a `commandName` (or an inline `command` template)".into())
                }
                (Some(c), None) if c.trim().is_empty() => {
                    return Some("a `command` step's `command` template is empty".into())
                }
                (None, Some(n)) if !crate::tasks::valid_command_name(n) => {
                    return Some(format!("`commandName` {n:?} is not a command name"))
                }
                _ => {}
            }
            if s.db.is_some() || s.schema.is_some() || s.table.is_some() || !s.partitions.is_empty() {
                return Some("a `command` step takes no `db`/`schema`/`table`/`partitions` (use `params`)".into());
            }
        }
    }
    None
}

/// Topological order of steps given as (name, dependencies); a cycle is an
/// error naming its steps in order (`A -> B -> A`).
pub fn order<'a>(job: &str, steps: impl Iterator<Item = (&'a Name, &'a Vec<Name>)>) -> Result<Vec<Name>, JobError> {
    let steps: Vec<(&Name, &Vec<Name>)> = steps.collect();
    let mut g: DiGraph<usize, ()> = DiGraph::new();
    let idx: BTreeMap<&Name, NodeIndex> = steps.iter().enumerate().map(|(i, (n, _))| (*n, g.add_node(i))).collect();
    for (n, deps) in &steps {
        for d in deps.iter() {
            if let Some(&from) = idx.get(d) {
                g.add_edge(from, idx[n], ());
            }
        }
    }
    // Cycles: every strongly connected component with more than one step, or
    // a step depending on itself.
    for scc in petgraph::algo::tarjan_scc(&g) {
        let is_cycle = scc.len() > 1 || g.contains_edge(scc[0], scc[0]);
        if is_cycle {
            let members: BTreeSet<NodeIndex> = scc.iter().copied().collect();
            let path = cycle_path(&g, &members);
            let names: Vec<String> = path.iter().map(|i| steps[g[*i]].0.to_string()).collect();
            return Err(JobError::Cycle { job: job.to_string(), steps: names });
        }
    }
    // Kahn's algorithm, always taking the earliest-defined ready step, so
    // the order is stable and readable.
    let mut indegree: Vec<usize> =
        g.node_indices().map(|i| g.neighbors_directed(i, petgraph::Direction::Incoming).count()).collect();
    let mut ready: BTreeSet<usize> = (0..steps.len()).filter(|i| indegree[*i] == 0).collect();
    let mut out = vec![];
    while let Some(i) = ready.pop_first() {
        out.push(steps[i].0.clone());
        for n in g.neighbors(NodeIndex::new(i)) {
            indegree[n.index()] -= 1;
            if indegree[n.index()] == 0 {
                ready.insert(n.index());
            }
        }
    }
    Ok(out)
}

/// A closed path through a strongly connected component, starting at its
/// earliest-defined step and returning to it.
fn cycle_path(g: &DiGraph<usize, ()>, members: &BTreeSet<NodeIndex>) -> Vec<NodeIndex> {
    let start = *members.iter().min_by_key(|i| g[**i]).expect("non-empty");
    // BFS inside the component from the start's successors back to start.
    let mut prev: BTreeMap<NodeIndex, NodeIndex> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut seen = BTreeSet::new();
    while let Some(n) = queue.pop_front() {
        let mut succ: Vec<NodeIndex> = g.neighbors(n).filter(|s| members.contains(s)).collect();
        succ.sort_by_key(|s| g[*s]);
        for s in succ {
            if s == start {
                let mut back = vec![];
                let mut c = n;
                while c != start {
                    back.push(c);
                    c = prev[&c];
                }
                back.reverse();
                let mut fwd = vec![start];
                fwd.extend(back);
                fwd.push(start);
                return fwd;
            }
            if seen.insert(s) {
                prev.insert(s, n);
                queue.push_back(s);
            }
        }
    }
    members.iter().copied().collect()
}
