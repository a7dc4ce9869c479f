//! Daily windows in local time ("22:00-06:00"): when scheduled work may run.
//!
//! A window `HH:MM-HH:MM` is open from its start (included) to its end
//! (excluded) in the zone's local time; a start after the end wraps
//! midnight, and `24:00` ends a window at midnight. An empty list is always
//! open. Local time decides, so across daylight saving:
//! - a window is open whenever the local clock reads inside it: on the
//!   spring-forward day `02:30-04:00` in `Europe/Berlin` opens at the first
//!   instant after the gap (03:00 CEST), as a cron fire time would, and a
//!   window lying wholly inside the gap does not open that day;
//! - on the fall-back day the repeated hour is read twice, so a window
//!   within it opens in both passes.

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Timestamp, ToSpan};

use super::{second_floor, to_ms, zone, ScheduleError};

const DAY_MIN: u32 = 24 * 60;

/// One window as minutes of the local day, `start` included, `end`
/// excluded; `end` may be `DAY_MIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn contains(&self, minute: u32) -> bool {
        if self.start < self.end {
            self.start <= minute && minute < self.end
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// A possibly empty list of daily windows in one time zone.
#[derive(Clone)]
pub struct Windows {
    specs: Vec<String>,
    tz: String,
    spans: Vec<Span>,
    zone: TimeZone,
}

impl std::fmt::Debug for Windows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Windows").field("specs", &self.specs).field("tz", &self.tz).finish()
    }
}

impl PartialEq for Windows {
    fn eq(&self, other: &Self) -> bool {
        self.specs == other.specs && self.tz == other.tz
    }
}

fn parse_minute(text: &str, end: bool) -> Option<u32> {
    let (h, m) = text.trim().split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    match (h, m) {
        (24, 0) if end => Some(DAY_MIN),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

fn parse_span(spec: &str) -> Result<Span, ScheduleError> {
    let bad = |reason: &str| ScheduleError::Window { spec: spec.to_string(), reason: reason.to_string() };
    let (start, end) = spec.split_once('-').ok_or_else(|| bad("no '-' between start and end"))?;
    let start = parse_minute(start, false).ok_or_else(|| bad("the start is not a time 00:00-23:59"))?;
    let end = parse_minute(end, true).ok_or_else(|| bad("the end is not a time 00:00-24:00"))?;
    if start == end {
        return Err(bad("it is empty (start equals end); write 00:00-24:00 for a whole day"));
    }
    Ok(Span { start, end })
}

impl Windows {
    /// Parses `specs` (each `HH:MM-HH:MM`) in the IANA zone `tz`; the zone
    /// is checked even for an empty list, so a typo is found when written.
    pub fn parse(specs: &[String], tz: &str) -> Result<Windows, ScheduleError> {
        let zone = zone(tz)?;
        let spans = specs.iter().map(|s| parse_span(s)).collect::<Result<_, _>>()?;
        Ok(Windows { specs: specs.to_vec(), tz: tz.to_string(), spans, zone })
    }

    pub fn specs(&self) -> &[String] {
        &self.specs
    }

    pub fn tz(&self) -> &str {
        &self.tz
    }

    /// No window: always open.
    pub fn is_always(&self) -> bool {
        self.spans.is_empty()
    }

    fn contains_ts(&self, ts: Timestamp) -> bool {
        let local = ts.to_zoned(self.zone.clone());
        let minute = local.hour() as u32 * 60 + local.minute() as u32;
        self.spans.iter().any(|s| s.contains(minute))
    }

    /// Whether the local clock at `wall_ms` reads inside a window.
    pub fn contains(&self, wall_ms: u64) -> bool {
        if self.is_always() {
            return true;
        }
        second_floor(wall_ms).is_some_and(|ts| self.contains_ts(ts))
    }

    /// `wall_ms` itself when open, else the next instant a window opens.
    ///
    /// Openness changes only where the local clock crosses a window's start
    /// or jumps (a zone transition), so the answer is the first such instant
    /// that is open; every window recurs daily, so three local days ahead
    /// always hold one unless every window lies in a gap, which no zone has
    /// for three days.
    pub fn next_open(&self, wall_ms: u64) -> Option<u64> {
        if self.contains(wall_ms) {
            return Some(wall_ms);
        }
        let from = second_floor(wall_ms)?;
        let until = from.checked_add(72.hours()).ok()?;
        let today: Date = from.to_zoned(self.zone.clone()).date();
        let mut candidates: Vec<Timestamp> =
            self.zone.following(from).map(|t| t.timestamp()).take_while(|t| *t <= until).collect();
        for day in 0..4 {
            let Ok(date) = today.checked_add(day.days()) else {
                continue;
            };
            for span in &self.spans {
                let civil: DateTime = date.at((span.start / 60) as i8, (span.start % 60) as i8, 0, 0);
                let ambiguous = self.zone.to_ambiguous_timestamp(civil);
                match ambiguous.offset() {
                    // The transition itself is a candidate already.
                    AmbiguousOffset::Gap { .. } => {}
                    AmbiguousOffset::Unambiguous { .. } => candidates.extend(ambiguous.compatible().ok()),
                    AmbiguousOffset::Fold { .. } => {
                        candidates.extend(ambiguous.earlier().ok());
                        candidates.extend(ambiguous.later().ok());
                    }
                }
            }
        }
        candidates.sort();
        candidates.into_iter().filter(|t| *t > from && *t <= until).find(|t| self.contains_ts(*t)).and_then(to_ms)
    }
}
