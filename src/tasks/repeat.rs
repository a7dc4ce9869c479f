//! When the rounds of a repeat task start: `interval` after the previous
//! round ends, or at the fire instants of a cron schedule
//! ([`crate::schedule::Cron`], whose daylight-saving and catch-up rules
//! apply: rounds missed while the manager was down, or while a round ran
//! longer than the period, run once).
//!
//! A cron task waits in `Init` for its first fire instant after submission
//! (`next_round_at_ms`); each round records the fire instant it stands for
//! (`fired_ms`, the latest one when it started), and the next round is due at
//! the latest fire instant after it that has passed, else the next one.

use std::time::Duration;

use layouts::formats::{RepeatInfo, TaskInfo};
use layouts::v2;

use super::TaskError;
use crate::schedule::{Cron, DEFAULT_ZONE};

/// Repeat settings: `rounds` rounds (0: until stopped), started `interval`
/// after the end of the previous round, or at the fire instants of `cron`.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    pub rounds: u32,
    pub interval: Duration,
    pub cron: Option<Cron>,
}

impl Repeat {
    /// The task info's record of these settings.
    pub fn info(&self) -> RepeatInfo {
        RepeatInfo {
            repeat_count: self.rounds,
            repeat_interval: self.interval.as_millis() as u64,
            cron: self.cron.as_ref().map(|c| c.expr().to_string()),
            time_zone: self.cron.as_ref().map(|c| c.tz().to_string()),
        }
    }

    /// When the first round is due, for a task submitted at `wall_ms`:
    /// at once (`None`), or a cron task's first fire instant after it.
    pub fn first_round_at(&self, wall_ms: u64) -> Option<u64> {
        self.cron.as_ref().and_then(|c| c.next_after(wall_ms))
    }
}

/// The cron schedule a task info stores, checked: a pattern or zone that
/// does not parse (a hand edit, a foreign writer) makes the task malformed,
/// naming the file and the value.
pub fn stored_cron(info: &TaskInfo) -> Result<Option<Cron>, TaskError> {
    let Some(expr) = info.repeat.cron.as_deref().filter(|_| info.repeat_flag) else {
        return Ok(None);
    };
    let tz = info.repeat.time_zone.as_deref().unwrap_or(DEFAULT_ZONE);
    Cron::parse(expr, tz).map(Some).map_err(|e| TaskError::Malformed {
        task: info.id,
        problem: format!("{}: RepeatInfo: {e}", v2::task_info(&info.id)),
    })
}

/// The fire instant a round starting at `wall_ms` stands for (cron tasks):
/// every fire instant up to it is covered by this round.
pub fn round_fire(info: &TaskInfo, wall_ms: u64) -> Result<Option<u64>, TaskError> {
    Ok(stored_cron(info)?.and_then(|c| c.latest_at_or_before(wall_ms)))
}

/// When the round after the one that ended at `wall_ms` is due; `None`: a
/// schedule that never fires again (past croner's last year), so the task
/// ends.
pub fn next_round_at(info: &TaskInfo, wall_ms: u64) -> Result<Option<u64>, TaskError> {
    Ok(match stored_cron(info)? {
        None => Some(wall_ms + info.repeat.repeat_interval),
        Some(cron) => cron.due(info.run.fired_ms, wall_ms).or_else(|| cron.next_after(wall_ms)),
    })
}
