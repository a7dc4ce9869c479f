//! Fixed instants across Europe/Berlin's 2026 switches: spring forward on
//! 2026-03-29 at 01:00Z (02:00 CET becomes 03:00 CEST), fall back on
//! 2026-10-25 at 01:00Z (03:00 CEST becomes 02:00 CET).

use super::*;

fn at(rfc3339: &str) -> u64 {
    let ts: Timestamp = rfc3339.parse().expect("a test instant");
    u64::try_from(ts.as_millisecond()).expect("after 1970")
}

fn berlin(expr: &str) -> Cron {
    Cron::parse(expr, "Europe/Berlin").expect("a valid schedule")
}

/// The fire instants after `from`, `n` of them.
fn fires(cron: &Cron, from: &str, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = at(from);
    for _ in 0..n {
        t = cron.next_after(t).expect("a next fire");
        out.push(t);
    }
    out
}

#[test]
fn parse_errors_quote_the_bad_part() {
    let err = Cron::parse("0 2 * *", "UTC").unwrap_err().to_string();
    assert!(err.contains("\"0 2 * *\"") && err.contains("4 fields"), "{err}");
    let err = Cron::parse("61 2 * * *", "UTC").unwrap_err().to_string();
    assert!(err.contains("\"61 2 * * *\""), "{err}");
    let err = Cron::parse("0 0 30 2 *", "UTC").unwrap_err().to_string();
    assert!(err.contains("never fires"), "{err}");
    let err = Cron::parse("0 2 * * *", "Europe/Berlinn").unwrap_err().to_string();
    assert!(err.contains("\"Europe/Berlinn\""), "{err}");
    assert!(Cron::parse("0 2 * * *", "").is_err());
    // Seconds are not a schedule's resolution.
    assert!(Cron::parse("0 0 2 * * *", "UTC").is_err());
    let cron = Cron::parse("0 2 * * MON-FRI", "UTC").unwrap();
    assert_eq!((cron.expr(), cron.tz()), ("0 2 * * MON-FRI", "UTC"));
    assert_eq!(cron, cron.clone());
    assert!(Cron::parse("@daily", "UTC").is_ok());
}

#[test]
fn next_after_is_strict() {
    let cron = Cron::parse("0 2 * * *", "UTC").unwrap();
    let two = at("2026-01-01T02:00:00Z");
    assert_eq!(cron.next_after(two - 1), Some(two));
    assert_eq!(cron.next_after(two), Some(at("2026-01-02T02:00:00Z")));
    assert_eq!(cron.next_after(two + 500), Some(at("2026-01-02T02:00:00Z")));
}

#[test]
fn spring_forward_fires_once_after_the_gap() {
    let got = fires(&berlin("30 2 * * *"), "2026-03-27T12:00:00Z", 3);
    let want = [
        at("2026-03-28T01:30:00Z"), // 02:30 CET
        at("2026-03-29T01:00:00Z"), // 02:30 does not exist: 03:00 CEST
        at("2026-03-30T00:30:00Z"), // 02:30 CEST
    ];
    assert_eq!(got, want);
}

#[test]
fn fall_back_fires_once_at_the_first_occurrence() {
    let got = fires(&berlin("30 2 * * *"), "2026-10-24T12:00:00Z", 2);
    let want = [
        at("2026-10-25T00:30:00Z"), // 02:30 CEST; 02:30 CET (01:30Z) is skipped
        at("2026-10-26T01:30:00Z"), // 02:30 CET
    ];
    assert_eq!(got, want);
}

#[test]
fn hourly_patterns_follow_real_time_across_both_switches() {
    let hourly = berlin("0 * * * *");
    let spring = fires(&hourly, "2026-03-28T23:30:00Z", 3);
    // 01:00 CET, then 03:00 CEST: 02:00 does not exist.
    assert_eq!(spring, [at("2026-03-29T00:00:00Z"), at("2026-03-29T01:00:00Z"), at("2026-03-29T02:00:00Z")]);
    let autumn = fires(&hourly, "2026-10-24T23:30:00Z", 3);
    // 02:00 CEST, 02:00 CET (the repeated hour, both passes), 03:00 CET.
    assert_eq!(autumn, [at("2026-10-25T00:00:00Z"), at("2026-10-25T01:00:00Z"), at("2026-10-25T02:00:00Z")]);
}

#[test]
fn due_across_the_switches_runs_each_day_once() {
    let cron = berlin("30 2 * * *");
    let gap_fire = at("2026-03-29T01:00:00Z");
    let last = Some(at("2026-03-28T01:30:00Z"));
    assert_eq!(cron.due(last, gap_fire - 1), None);
    assert_eq!(cron.due(last, gap_fire), Some(gap_fire));
    assert_eq!(cron.due(Some(gap_fire), gap_fire + 3_600_000), None);

    let first = at("2026-10-25T00:30:00Z");
    assert_eq!(cron.due(last, first), Some(first));
    // The second 02:30 (CET) is not a fire instant.
    assert_eq!(cron.due(Some(first), at("2026-10-25T01:45:00Z")), None);
    assert_eq!(cron.due(Some(first), at("2026-10-26T01:30:00Z")), Some(at("2026-10-26T01:30:00Z")));
}

#[test]
fn a_node_down_for_three_days_fires_once() {
    let cron = berlin("0 2 * * *");
    let last = at("2026-06-01T00:00:00Z"); // 02:00 CEST
    let now = at("2026-06-04T08:00:00Z");
    let due = cron.due(Some(last), now);
    assert_eq!(due, Some(at("2026-06-04T00:00:00Z")), "only the latest missed run");
    assert_eq!(cron.due(due, now), None, "and only once");
    assert_eq!(cron.next_after(now), Some(at("2026-06-05T00:00:00Z")));
}

#[test]
fn a_new_schedule_does_not_fire_for_the_past() {
    let cron = Cron::parse("0 2 * * *", "UTC").unwrap();
    let fire = at("2026-01-01T02:00:00Z");
    assert_eq!(cron.due(None, fire), Some(fire));
    assert_eq!(cron.due(None, fire + 59_999), Some(fire));
    assert_eq!(cron.due(None, fire + 60_000), None);
    assert_eq!(cron.due(None, fire - 1), None);
}

fn windows(specs: &[&str], tz: &str) -> Result<Windows, ScheduleError> {
    let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    Windows::parse(&specs, tz)
}

#[test]
fn window_parse_errors_quote_the_window() {
    for bad in ["22:00", "25:00-06:00", "22:00-06:60", "2:00-06:00", "06:00-06:00", "24:00-06:00"] {
        let err = windows(&[bad], "UTC").unwrap_err().to_string();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
    }
    assert!(matches!(windows(&[], "Mars/Olympus"), Err(ScheduleError::Zone { .. })));
    assert!(windows(&["00:00-24:00"], "UTC").is_ok());
}

#[test]
fn windows_wrap_midnight_and_empty_is_always_open() {
    let always = windows(&[], "UTC").unwrap();
    assert!(always.contains(at("2026-01-01T12:00:00Z")));
    assert_eq!(always.next_open(7), Some(7));

    let night = windows(&["22:00-06:00"], "UTC").unwrap();
    assert!(night.contains(at("2026-01-01T23:00:00Z")));
    assert!(night.contains(at("2026-01-02T05:59:59Z")));
    assert!(!night.contains(at("2026-01-02T06:00:00Z")));
    let noon = at("2026-01-02T12:00:00Z");
    assert_eq!(night.next_open(noon), Some(at("2026-01-02T22:00:00Z")));
    let late = at("2026-01-02T23:10:00Z");
    assert_eq!(night.next_open(late), Some(late));

    let two = windows(&["01:00-02:00", "13:00-14:00"], "UTC").unwrap();
    assert_eq!(two.next_open(at("2026-01-02T02:00:00Z")), Some(at("2026-01-02T13:00:00Z")));
    assert_eq!(two.next_open(at("2026-01-02T14:00:00Z")), Some(at("2026-01-03T01:00:00Z")));
}

#[test]
fn windows_follow_the_local_clock_across_both_switches() {
    let w = windows(&["02:30-04:00"], "Europe/Berlin").unwrap();
    // Spring: the clock jumps from 02:00 into the window, at 03:00 CEST.
    assert_eq!(w.next_open(at("2026-03-28T12:00:00Z")), Some(at("2026-03-29T01:00:00Z")));
    assert!(w.contains(at("2026-03-29T01:00:00Z")));
    assert!(!w.contains(at("2026-03-29T02:00:00Z"))); // 04:00 CEST

    // A window wholly inside the gap does not open that day.
    let gap = windows(&["02:10-02:50"], "Europe/Berlin").unwrap();
    assert_eq!(gap.next_open(at("2026-03-28T12:00:00Z")), Some(at("2026-03-30T00:10:00Z")));

    // Autumn: the repeated hour is read twice, so the window opens twice.
    let fold = windows(&["02:00-02:30"], "Europe/Berlin").unwrap();
    let first = at("2026-10-25T00:00:00Z"); // 02:00 CEST
    assert_eq!(fold.next_open(at("2026-10-24T12:00:00Z")), Some(first));
    assert!(!fold.contains(at("2026-10-25T00:30:00Z")));
    assert_eq!(fold.next_open(at("2026-10-25T00:30:00Z")), Some(at("2026-10-25T01:00:00Z")));
}
