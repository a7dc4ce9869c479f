//! What one task may ask for: the limits, in one place, that `submit`,
//! `define apply` and every manager check before anything is allocated.
//!
//! A task's units (shards or partitions) become one entry each in its
//! manager's memory and one subtask folder each on the backend; its params
//! and template become one process's environment and command line. Without
//! a bound, one careless `submit --shards 100000000` grew a manager to 15 GB
//! and starved every other task. `submit` refuses a task over a limit with
//! the limit in the message; a manager that reads a task info over a limit
//! (written by an older or foreign writer) fails the task with the same
//! message, before expanding it.

use std::collections::BTreeMap;

use crate::formats::RunInfo;
use crate::Name;

/// Units (shards, or partitions, given or discovered) of one task at most.
pub const MAX_UNITS: u32 = 100_000;

/// Parameters (`--param`, a job step's `params`, plus the four a job step
/// adds) of one task at most.
pub const MAX_PARAMS: usize = 100;

/// Bytes of one parameter's name at most.
pub const MAX_PARAM_NAME_BYTES: usize = 64;

/// Bytes of one parameter's value at most (it becomes an environment
/// variable and may be pasted into a command line).
pub const MAX_PARAM_VALUE_BYTES: usize = 4096;

/// Bytes of one command template (a task's inline `command`, a node's
/// `run --command NAME=TEMPLATE`) at most: well below the 128 KiB Linux
/// allows for one argument of `sh -c`.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// Prefix of the params compactd sets itself: the planner's decision
/// marker ([`crate::policies::MARKER_PARAM`]) and its target size, a job
/// step's marker. Tasks are found by their marker, so a submitter must not
/// set one: `submit`, `trigger` and `define apply` refuse them.
pub const RESERVED_PARAM_PREFIX: &str = "compactd_";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("{asked} {what} is over the limit of {limit} {per}")]
    Count { what: &'static str, asked: u64, limit: u64, per: &'static str },
    #[error("{what} is {bytes} bytes, over the limit of {limit} bytes")]
    Size { what: String, bytes: usize, limit: usize },
    #[error(
        "partition name {0:?} is reserved: names starting with '_' or '.' are compactd's own \
         (`<partition>/_compactd/`) or hidden, and partition discovery skips them"
    )]
    ReservedPartition(String),
    #[error(
        "param {0:?} is reserved: names starting with `{RESERVED_PARAM_PREFIX}` are set by compactd itself \
         (the policy planner's and the jobs' markers, a policy's target size)"
    )]
    ReservedParam(String),
}

/// Refuses params a submitter may not set ([`RESERVED_PARAM_PREFIX`]);
/// compactd's own planner and job driver set them after this check.
pub fn check_submitted_params<'a>(names: impl IntoIterator<Item = &'a String>) -> Result<(), LimitError> {
    match names.into_iter().find(|k| k.to_ascii_lowercase().starts_with(RESERVED_PARAM_PREFIX)) {
        Some(k) => Err(LimitError::ReservedParam(k.clone())),
        None => Ok(()),
    }
}

/// A partition name compactd never compacts: its own `_compactd/` and any
/// `_…` or `.…` name (staging and hidden folders of other tools).
pub fn reserved_partition(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('.')
}

/// Refuses a unit count over [`MAX_UNITS`]; `what` is `shards` or
/// `partitions`.
pub fn check_units(what: &'static str, n: u64) -> Result<(), LimitError> {
    if n > u64::from(MAX_UNITS) {
        return Err(LimitError::Count {
            what,
            asked: n,
            limit: MAX_UNITS.into(),
            per: "units (shards or partitions) per task",
        });
    }
    Ok(())
}

/// Refuses a template over [`MAX_TEMPLATE_BYTES`]; `what` names it.
pub fn check_template(what: &str, template: &str) -> Result<(), LimitError> {
    if template.len() > MAX_TEMPLATE_BYTES {
        return Err(LimitError::Size { what: what.to_string(), bytes: template.len(), limit: MAX_TEMPLATE_BYTES });
    }
    Ok(())
}

/// Refuses params over [`MAX_PARAMS`], [`MAX_PARAM_NAME_BYTES`] or
/// [`MAX_PARAM_VALUE_BYTES`].
pub fn check_params(params: &BTreeMap<String, String>) -> Result<(), LimitError> {
    if params.len() > MAX_PARAMS {
        return Err(LimitError::Count {
            what: "params",
            asked: params.len() as u64,
            limit: MAX_PARAMS as u64,
            per: "per task",
        });
    }
    for (k, v) in params {
        if k.len() > MAX_PARAM_NAME_BYTES {
            let what = format!("the name of param {:?}…", k.chars().take(16).collect::<String>());
            return Err(LimitError::Size { what, bytes: k.len(), limit: MAX_PARAM_NAME_BYTES });
        }
        if v.len() > MAX_PARAM_VALUE_BYTES {
            return Err(LimitError::Size {
                what: format!("param {k:?}"),
                bytes: v.len(),
                limit: MAX_PARAM_VALUE_BYTES,
            });
        }
    }
    Ok(())
}

/// Refuses reserved partition names and more than [`MAX_UNITS`] of them.
pub fn check_partitions(partitions: &[Name]) -> Result<(), LimitError> {
    check_units("partitions", partitions.len() as u64)?;
    match partitions.iter().find(|p| reserved_partition(p.as_str())) {
        Some(p) => Err(LimitError::ReservedPartition(p.to_string())),
        None => Ok(()),
    }
}

/// Every limit on what a task (its info's `run`) asks for.
pub fn check_run(run: &RunInfo) -> Result<(), LimitError> {
    if let Some(n) = run.shards {
        check_units("shards", n.into())?;
    }
    check_partitions(&run.partitions)?;
    check_params(&run.params)?;
    if let Some(t) = run.executor.as_ref().and_then(|e| e.command.as_deref()) {
        check_template("the command template", t)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_named_with_its_value() {
        let mut run = RunInfo { shards: Some(MAX_UNITS), ..RunInfo::default() };
        assert_eq!(check_run(&run), Ok(()));
        run.shards = Some(100_000_000);
        let e = check_run(&run).unwrap_err().to_string();
        assert!(e.contains("100000000 shards") && e.contains(&MAX_UNITS.to_string()), "{e}");
        run.shards = None;
        run.partitions = vec![Name::parse("p1").unwrap(), Name::parse("_compactd").unwrap()];
        let e = check_run(&run).unwrap_err().to_string();
        assert!(e.contains("\"_compactd\"") && e.contains("reserved"), "{e}");
        run.partitions = vec![Name::parse("p1").unwrap()];
        run.params = (0..=MAX_PARAMS).map(|i| (format!("k{i}"), String::new())).collect();
        let e = check_run(&run).unwrap_err().to_string();
        assert!(e.contains("101 params") && e.contains("100"), "{e}");
        run.params = [("k".to_string(), "v".repeat(MAX_PARAM_VALUE_BYTES + 1))].into();
        let e = check_run(&run).unwrap_err().to_string();
        assert!(e.contains("param \"k\"") && e.contains("4096"), "{e}");
        run.params = [("k".repeat(MAX_PARAM_NAME_BYTES + 1), "v".into())].into();
        assert!(check_run(&run).is_err());
        run.params.clear();
        run.executor = Some(crate::formats::ExecutorSpec {
            kind: crate::formats::ExecutorKind::Command,
            command: Some("x".repeat(MAX_TEMPLATE_BYTES + 1)),
            command_name: None,
            timeout_ms: None,
        });
        let e = check_run(&run).unwrap_err().to_string();
        assert!(e.contains("template") && e.contains(&MAX_TEMPLATE_BYTES.to_string()), "{e}");
    }
}
