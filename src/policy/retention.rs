//! A table's retention under its policy (`expire-every`): an `expire` task
//! of the whole table, due that long after the last one was decided (or at
//! the fires of a cron schedule), with
//! the policy's `expire-older-than` and `expire-retain-last` or else the
//! table's own settings.
//!
//! The retention is decided as the table's partitions are, exactly once and
//! recovered the same way, under the reserved name
//! [`paths::EXPIRE_DECISION`] (its decision is followed by
//! `super::decide`); its row leads the summary's detail, so the fair share
//! queues it beside the due partitions (under the policy's windows,
//! schedule and pause) but never in one task with them. What the retention
//! tasks freed is summed into the summary as the planner sees each end
//! ([`TableSummary::expired_files`]), read once per task from its status.

use layouts::formats::{ExecutorKind, ExecutorSpec};
use layouts::policies::{self as paths, PartitionSummary, PolicyDefinition, TableSummary};
use layouts::{TaskId, TaskState};
use store::Store;

use super::Owned;
use crate::executor::expire::{OLDER_THAN_PARAM, RETAIN_LAST_PARAM};
use crate::schedule::Cron;
use crate::tasks::{self, TaskSpec};

/// Whether a summary row is the table's retention rather than a partition.
pub fn is_retention(d: &PartitionSummary) -> bool {
    d.partition == paths::EXPIRE_DECISION
}

/// The table's retention in words (`tables`, the status page): what it
/// freed, when it was last decided and what it waits for; `None` when its
/// policy runs none and none ever ended.
pub fn describe(s: &TableSummary) -> Option<String> {
    let row = s.detail.iter().find(|d| is_retention(d));
    if row.is_none() && s.expire_counted.is_none() {
        return None;
    }
    let bytes = if s.expired_bytes >= 1 << 20 {
        format!("{:.1} MiB", s.expired_bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{} bytes", s.expired_bytes)
    };
    let mut parts = vec![format!("freed {} files, {bytes}", s.expired_files)];
    if let Some(d) = row {
        if let Some(t) = d.last_compaction_wall_ms {
            parts.push(format!("last decided {}", super::at(t)));
        }
        parts.push(d.why.clone());
    }
    Some(parts.join("; "))
}

/// What a row in flight is doing, for its `why`.
pub(super) fn running(d: &PartitionSummary, task: Option<TaskId>) -> String {
    let task = task.map(|t| t.to_string()).unwrap_or_default();
    if is_retention(d) {
        format!("retention running as task {task}")
    } else {
        format!("being compacted by task {task}")
    }
}

/// The task a retention decision submits: the whole table, `expire`.
pub(super) fn task_spec(o: &Owned) -> TaskSpec {
    let p = &o.policy;
    let mut spec = TaskSpec::table(o.db.clone(), o.schema.clone(), o.table.clone());
    spec.executor = Some(ExecutorSpec::builtin(ExecutorKind::Expire));
    if let Some(ms) = p.expire_older_than_ms {
        spec.params.insert(OLDER_THAN_PARAM.into(), format!("{ms}ms"));
    }
    if let Some(n) = p.expire_retain_last {
        spec.params.insert(RETAIN_LAST_PARAM.into(), n.to_string());
    }
    if p.sole_writer {
        spec.params.insert(crate::executor::iceberg::catalog::SOLE_WRITER_PARAM.into(), "true".into());
    }
    spec
}

/// Sets whether the retention is due, and why: `expire-every` after it
/// was last decided, or at the newest fire of its schedule since (one run
/// for any number of missed fires; a retention that never ran waits for
/// the schedule's next fire, as a scheduled policy does).
pub(super) fn judge(p: &PolicyDefinition, d: &mut PartitionSummary, wall_ms: u64) {
    if d.in_flight {
        return;
    }
    let last = d.last_compaction_wall_ms;
    let (rule, next) = match (&p.expire_schedule, p.expire_every_ms) {
        (Some(expr), _) => {
            let cron = match Cron::parse(expr, &p.time_zone) {
                Ok(c) => c,
                Err(e) => {
                    d.why = format!("the retention's schedule: {e}");
                    return;
                }
            };
            let next = match cron.due(last, wall_ms) {
                Some(_) => None,
                None => Some(cron.next_after(wall_ms).unwrap_or(u64::MAX)),
            };
            (format!("on schedule {cron}"), next)
        }
        (None, Some(every)) => {
            let next = last.map(|l| l.saturating_add(every)).filter(|n| wall_ms < *n);
            (format!("every {}", humantime::format_duration(std::time::Duration::from_millis(every))), next)
        }
        (None, None) => {
            d.why = "the policy runs no retention".into();
            return;
        }
    };
    if let Some(next) = next {
        d.due_at_wall_ms = Some(next);
        d.why = format!("retention {rule}: next at {}", super::at(next));
        return;
    }
    d.due = true;
    d.why = format!("retention due ({rule})");
}

/// Adds what the ended retention task `task` deleted to `summary`
/// (nothing if it failed); left for the next visit if its status cannot be
/// read. Returns the requests it made.
pub(super) async fn count_freed(store: &Store, task: TaskId, summary: &mut TableSummary) -> u64 {
    let status = match tasks::view::status(store, &task).await {
        Ok(s) => s,
        Err(tasks::TaskError::NotFound(_)) => {
            // Archived or removed before the planner saw it end.
            summary.expire_counted = Some(task);
            return 4;
        }
        Err(e) => {
            tracing::warn!(%task, "planner: reading a retention task's figures: {e}");
            return 4;
        }
    };
    if status.state == TaskState::Done {
        summary.expired_files += status.stats.get("files_deleted").copied().unwrap_or(0);
        summary.expired_bytes += status.stats.get("bytes_freed").copied().unwrap_or(0);
    }
    summary.expire_counted = Some(task);
    4
}
