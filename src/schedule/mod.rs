//! Calendar time: cron schedules ([`Cron`]) and daily windows ([`Windows`]),
//! each in a named time zone. Repeat tasks, job triggers and policies take
//! them; this is their one home.
//!
//! Nothing here reads the time: every function takes the wall instant as
//! unix milliseconds, so the manager, the job drive and the tests decide
//! which clock that is (a [`crate::clock::ManualClock`] in tests).
//!
//! # Patterns and zones
//!
//! A schedule is a 5-field cron pattern (`minute hour day-of-month month
//! day-of-week`, e.g. `0 2 * * *`), parsed by the `croner` crate: lists,
//! ranges, steps (`*/15`, `1-5/2`), month and weekday names, `L`, `W`, `#`,
//! the `@daily`-style nicknames. Day-of-month and day-of-week are OR-ed as
//! in Vixie cron (a `+` before the weekday field makes it AND). The zone is
//! an IANA name (`Europe/Berlin`, `UTC`) looked up in the tz database that
//! `jiff` compiles into the binary, never the host's `/usr/share/zoneinfo`:
//! every node of a cluster must compute the same fire instants, whatever
//! its operating system ships.
//!
//! # Daylight saving
//!
//! Fire instants move in real time, never twice over the same instant:
//! - A fixed local time that does not exist (spring forward, e.g. `30 2 * * *`
//!   in `Europe/Berlin` on 2026-03-29, when 02:00 jumps to 03:00) fires once,
//!   at the first instant after the gap (03:00 CEST).
//! - A fixed local time that occurs twice (fall back, 2026-10-25, when 03:00
//!   goes back to 02:00) fires once, at its first occurrence (02:30 CEST).
//! - A pattern whose minute or hour is a wildcard or a step (`*/15 * * * *`,
//!   `0 * * * *`) follows real time: its matches inside a gap do not exist,
//!   and inside a repeated hour it fires in both passes, so an hourly job
//!   runs every real hour.
//!
//! These are croner's rules (those of Vixie cron); the tests below pin them.
//!
//! # Catch-up after downtime
//!
//! A schedule that missed fire instants (its node was down, the monitor
//! moved) **runs once**: [`Cron::due`] returns only the latest fire instant
//! since the last run, so a node down for three days fires a daily schedule
//! once, not three times. A schedule that never fired yet does not fire for
//! the past: only a fire instant within the last minute counts.
//!
//! Windows ([`Windows`]) follow the same daylight-saving rules in
//! [`window`].

pub mod window;

use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::Timestamp;

pub use window::Windows;

/// The zone of a schedule or window given without one.
pub const DEFAULT_ZONE: &str = "UTC";

/// How far back a schedule that never fired looks for a fire instant: one
/// minute, the pattern's resolution, so a schedule created (or a node that
/// looks) a few seconds after a fire instant still takes it.
pub const FRESH_MS: u64 = 60_000;

/// A pattern, zone or window that cannot be used; the message quotes it.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("cron expression {expr:?}: {reason}")]
    Cron { expr: String, reason: String },
    #[error("time zone {tz:?} is not an IANA time zone name (such as \"Europe/Berlin\" or \"UTC\")")]
    Zone { tz: String },
    #[error("window {spec:?}: {reason} (write \"HH:MM-HH:MM\" in local time, e.g. \"22:00-06:00\")")]
    Window { spec: String, reason: String },
}

/// Looks an IANA zone name up in the bundled database (see the module doc
/// for why not the host's).
pub(crate) fn zone(tz: &str) -> Result<TimeZone, ScheduleError> {
    let bad = || ScheduleError::Zone { tz: tz.to_string() };
    if tz.trim().is_empty() {
        return Err(bad());
    }
    TimeZoneDatabase::bundled().get(tz).map_err(|_| bad())
}

/// Checks an IANA zone name (a command-line flag is checked before the
/// tree is opened).
pub fn check_zone(tz: &str) -> Result<(), ScheduleError> {
    zone(tz).map(|_| ())
}

/// `wall_ms` as the local time in zone `tz` reads it, for people
/// (`2026-11-25 23:00 CET`); `None` for a zone this build does not know.
pub fn local_time(wall_ms: u64, tz: &str) -> Option<String> {
    let ts = Timestamp::from_millisecond(i64::try_from(wall_ms).ok()?).ok()?;
    Some(ts.to_zoned(zone(tz).ok()?).strftime("%Y-%m-%d %H:%M %Z").to_string())
}

/// The whole second at or before `wall_ms`: fire instants are whole
/// minutes, so searching from it loses nothing and keeps croner off the
/// sub-second part.
fn second_floor(wall_ms: u64) -> Option<Timestamp> {
    Timestamp::from_second(i64::try_from(wall_ms / 1000).ok()?).ok()
}

fn to_ms(ts: Timestamp) -> Option<u64> {
    u64::try_from(ts.as_millisecond()).ok()
}

/// A cron schedule in a time zone.
#[derive(Clone)]
pub struct Cron {
    expr: String,
    tz: String,
    pattern: croner::Cron,
    zone: TimeZone,
}

impl std::fmt::Debug for Cron {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cron").field("expr", &self.expr).field("tz", &self.tz).finish()
    }
}

/// Two schedules are equal when written alike: the parsed forms follow
/// from the text.
impl PartialEq for Cron {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz
    }
}

impl std::fmt::Display for Cron {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.expr, self.tz)
    }
}

impl Cron {
    /// Parses a 5-field pattern in the IANA zone `tz`. A pattern that can
    /// never fire (`0 0 30 2 *`) is refused here rather than found silent
    /// later.
    pub fn parse(expr: &str, tz: &str) -> Result<Cron, ScheduleError> {
        let bad = |reason: String| ScheduleError::Cron { expr: expr.to_string(), reason };
        let fields = expr.split_whitespace().count();
        if !expr.trim_start().starts_with('@') && fields != 5 {
            return Err(bad(format!(
                "has {fields} fields; a schedule has 5: minute hour day-of-month month day-of-week"
            )));
        }
        let pattern = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| bad(e.to_string()))?;
        let cron = Cron { expr: expr.to_string(), tz: tz.to_string(), pattern, zone: zone(tz)? };
        // From 2000 on every pattern that fires at all has fired within 28
        // years (the calendar's cycle), so none is a pattern that never does.
        let y2000_ms = 946_684_800_000;
        if cron.next_after(y2000_ms).is_none() {
            return Err(bad("never fires (no such date)".to_string()));
        }
        Ok(cron)
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn tz(&self) -> &str {
        &self.tz
    }

    /// The first fire instant strictly after `wall_ms` (unix ms).
    pub fn next_after(&self, wall_ms: u64) -> Option<u64> {
        let from = second_floor(wall_ms)?.to_zoned(self.zone.clone());
        let next = self.pattern.find_next_occurrence(&from, false).ok()?;
        to_ms(next.timestamp())
    }

    /// The latest fire instant at or before `wall_ms`.
    pub fn latest_at_or_before(&self, wall_ms: u64) -> Option<u64> {
        let from = second_floor(wall_ms)?.to_zoned(self.zone.clone());
        let prev = self.pattern.find_previous_occurrence(&from, true).ok()?;
        to_ms(prev.timestamp())
    }

    /// The catch-up rule "run once" (see the module doc): the latest fire
    /// instant in `(last_fired_ms, now_ms]`, or with no last run the one in
    /// `(now_ms - 60 s, now_ms]`; `None` when there is none, so nothing is
    /// due.
    pub fn due(&self, last_fired_ms: Option<u64>, now_ms: u64) -> Option<u64> {
        let latest = self.latest_at_or_before(now_ms)?;
        let after = last_fired_ms.unwrap_or_else(|| now_ms.saturating_sub(FRESH_MS));
        (latest > after).then_some(latest)
    }
}

#[cfg(test)]
mod tests;
