//! The `expire` executor: a table's retention as one unit of a task, with
//! the same fencing, retries and history as a compaction. It reads the
//! task's `expire.*` parameters, finds the table's format and runs that
//! format's retention: a Delta table's `VACUUM` and log cleanup
//! ([`super::delta::expire`]), an Iceberg file-system table's
//! `expire_snapshots` ([`super::iceberg::expire`]). Other tables are
//! refused by name: a folder table's `merge` already deletes what it
//! replaces.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use store::Store;

use super::delta::expire::{self as delta_expire, Retention};

/// Data files no version younger than this reads are deleted (default:
/// the table's own, Delta's `delta.deletedFileRetentionDuration`; for
/// Iceberg, snapshots older than this expire: the table's
/// `history.expire.max-snapshot-age-ms`).
pub const OLDER_THAN_PARAM: &str = "expire.older-than";
/// Log entries older than this are deleted (default: the table's own,
/// Delta's `delta.logRetentionDuration`).
pub const LOG_OLDER_THAN_PARAM: &str = "expire.log-older-than";
/// The newest N versions stay readable whatever their age (default 1;
/// Iceberg: the table's `history.expire.min-snapshots-to-keep`).
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
        None => None,
        Some(s) => Some(s.trim().parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| ParamError {
            param: RETAIN_LAST_PARAM,
            problem: format!("{s:?} is not a whole number of versions, at least 1"),
        })?),
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
    Iceberg(#[from] super::iceberg::IcebergError),
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
    /// Where an Iceberg table's current version is (the task's catalog).
    pub catalog: super::iceberg::catalog::Catalog,
}

/// Runs the retention; the outcome's line and its counters.
pub async fn run(data: &Store, job: &ExpireJob) -> Result<(String, BTreeMap<String, u64>), ExpireError> {
    let refused = |problem: &str| ExpireError::Refused { table: job.table.clone(), problem: problem.to_string() };
    // A listing that fails (a backend down) fails the unit, to be retried:
    // it says nothing of the table's format.
    let delta = !data.list(&format!("{}{}", job.table, super::delta::log::LOG_DIR)).await?.is_empty();
    let iceberg = !delta && super::iceberg::orphans::is_table(data, &job.table).await;
    if !delta && !iceberg {
        return Err(refused(
            "neither a Delta table (no _delta_log/) nor an Iceberg one (no metadata/*.metadata.json): expire runs on \
             table formats; a folder table's merge deletes what it replaces",
        ));
    }
    if let Some((sched, fence)) = &job.fence {
        if !super::merge::fence_holds(sched, fence).await? {
            return Err(ExpireError::Fenced { table: job.table.clone(), fence: fence.clone() });
        }
    }
    if iceberg {
        let out = super::iceberg::expire::run(data, &job.catalog, &job.table, &job.retention, job.now).await?;
        return Ok((out.to_string(), out.stats()));
    }
    let out = delta_expire::run(data, &job.table, &job.retention, job.now).await?;
    Ok((out.to_string(), out.stats()))
}
