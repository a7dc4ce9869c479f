//! The `expire` executor: a table's retention as one unit of a task, with
//! the same fencing, retries and history as a compaction. It reads the
//! task's `expire.*` parameters, finds the table's format and runs that
//! format's retention: a Delta table's `VACUUM` and log cleanup
//! ([`super::delta::expire`]). Other tables are refused by name: an
//! Iceberg table's `expire_snapshots` is not built yet, and a folder
//! table's `merge` already deletes what it replaces.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use store::Store;

use super::delta::expire::{self as delta_expire, Retention};

/// Data files no version younger than this reads are deleted (default:
/// the table's own, Delta's `delta.deletedFileRetentionDuration`).
pub const OLDER_THAN_PARAM: &str = "expire.older-than";
/// Log entries older than this are deleted (default: the table's own,
/// Delta's `delta.logRetentionDuration`).
pub const LOG_OLDER_THAN_PARAM: &str = "expire.log-older-than";
/// The newest N versions stay readable whatever their age (default 1).
pub const RETAIN_LAST_PARAM: &str = "expire.retain-last";
/// `true`: retentions shorter than the table's own are allowed.
pub const FORCE_PARAM: &str = "expire.force";

/// Why the parameters cannot be used, naming the parameter.
#[derive(Debug, thiserror::Error)]
#[error("{param}: {problem}")]
pub struct ParamError {
    pub param: &'static str,
    pub problem: String,
}

/// The retention the parameters ask for; `param` reads one (`None`: unset).
pub fn retention(param: impl Fn(&str) -> Option<String>) -> Result<Retention, ParamError> {
    let duration = |name: &'static str| -> Result<Option<Duration>, ParamError> {
        param(name)
            .map(|s| layouts::units::parse_duration_or_zero(&s).map_err(|e| ParamError { param: name, problem: e }))
            .transpose()
    };
    let retain_last = match param(RETAIN_LAST_PARAM) {
        None => 1,
        Some(s) => s.trim().parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| ParamError {
            param: RETAIN_LAST_PARAM,
            problem: format!("{s:?} is not a whole number of versions, at least 1"),
        })?,
    };
    let force = match param(FORCE_PARAM).as_deref().map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ParamError { param: FORCE_PARAM, problem: format!("{other:?} is neither true nor false") })
        }
    };
    Ok(Retention {
        older_than: duration(OLDER_THAN_PARAM)?,
        log_older_than: duration(LOG_OLDER_THAN_PARAM)?,
        retain_last,
        force,
        dry_run: false,
    })
}

/// Checks the `expire.*` parameters a task is submitted with.
pub fn check_params(params: &BTreeMap<String, String>) -> Result<(), ParamError> {
    retention(|k| params.get(k).cloned()).map(|_| ())
}

#[derive(Debug, thiserror::Error)]
pub enum ExpireError {
    #[error(transparent)]
    Delta(#[from] super::delta::DeltaError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{table}: {problem}")]
    Refused { table: String, problem: String },
    #[error("{table}: the unit no longer holds its subtask (its fence {fence} is gone): nothing deleted")]
    Fenced { table: String, fence: String },
}

/// One unit: the retention of the table at `table` (`<db>/<schema>/<table>/`).
pub struct ExpireJob {
    pub table: String,
    pub retention: Retention,
    /// The scheduler tree and the subtask's folder that must still exist
    /// when the run starts (a unit whose subtask was taken from it deletes
    /// nothing; one that loses it while deleting deletes what its
    /// successor would: the same files, by the same rules).
    pub fence: Option<(Store, String)>,
    pub now: SystemTime,
}

/// Runs the retention; the outcome's line and its counters.
pub async fn run(data: &Store, job: &ExpireJob) -> Result<(String, BTreeMap<String, u64>), ExpireError> {
    let refused = |problem: &str| ExpireError::Refused { table: job.table.clone(), problem: problem.to_string() };
    // A listing that fails (a backend down) fails the unit, to be retried:
    // it says nothing of the table's format.
    let delta = !data.list(&format!("{}{}", job.table, super::delta::log::LOG_DIR)).await?.is_empty();
    if !delta {
        if super::iceberg::orphans::is_table(data, &job.table).await {
            return Err(refused(
                "an Iceberg table: its retention (expire_snapshots) is not built into compactd yet; run Spark's \
                 expire_snapshots",
            ));
        }
        return Err(refused(
            "not a Delta table (no _delta_log/): expire runs on Delta tables; a folder table's merge deletes what it \
             replaces",
        ));
    }
    if let Some((sched, fence)) = &job.fence {
        if !super::merge::fence_holds(sched, fence).await? {
            return Err(ExpireError::Fenced { table: job.table.clone(), fence: fence.clone() });
        }
    }
    let out = delta_expire::run(data, &job.table, &job.retention, job.now).await?;
    Ok((out.to_string(), out.stats()))
}
