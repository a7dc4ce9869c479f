//! Job schedules on the memory store under the [`ManualClock`], whose wall
//! clock is set to fixed instants around Europe/Berlin's 2026 switches
//! (spring forward 2026-03-29 01:00Z, fall back 2026-10-25 01:00Z).

use std::sync::Arc;

use clock::{Clock, ManualClock};
use layouts::jobs as paths;
use store::Store;

use super::cron::{self, fire_of, trigger_name};
use super::tests::{me, n, parse, with_member};
use super::*;

const NIGHTLY: &str = include_str!("../../fixtures/jobs/nightly.json");

fn at(rfc3339: &str) -> u64 {
    let ts: jiff::Timestamp = rfc3339.parse().expect("a test instant");
    ts.as_millisecond() as u64
}

fn daily_utc(job: &str) -> String {
    format!(
        r#"{{"jobName":"{job}","schedule":"0 2 * * *",
            "steps":[{{"stepName":"a","kind":"command","commandName":"ok"}}]}}"#
    )
}

async fn setup(json: &str, applied: &str) -> (Store, Arc<ManualClock>) {
    let store = Store::memory().await;
    with_member(&store).await;
    let clock = ManualClock::new();
    clock.set_wall_ms(at(applied));
    define::apply(&store, &parse(json), &me(), "test", clock.wall_ms()).await.unwrap();
    (store, clock)
}

/// One drive round that looks at the schedules, at `wall`; returns the
/// triggers it created.
async fn fire(store: &Store, clock: &ManualClock, wall: &str) -> Vec<String> {
    clock.set_wall_ms(at(wall));
    let r = drive_round(store, &me(), clock.wall_ms(), true).await.unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    r.triggered
}

/// The fire instants of the instances of `job`, ascending.
async fn fired(store: &Store, job: &str) -> Vec<u64> {
    let mut v: Vec<u64> = instance::list_instances(store)
        .await
        .unwrap()
        .into_iter()
        .filter(|(j, _, _)| j.as_str() == job)
        .filter_map(|(_, t, _)| fire_of(&t))
        .collect();
    v.sort();
    v
}

#[test]
fn trigger_names_carry_the_fire_instant() {
    let t = trigger_name(1_774_746_000_000);
    assert_eq!(t.as_str(), "cron-1774746000000");
    assert_eq!(fire_of(&t), Some(1_774_746_000_000));
    for other in ["2024-01-01", "cron-", "cron-+1", "cron-1x"] {
        assert_eq!(fire_of(&n(other)), None, "{other}");
    }
}

#[tokio::test]
async fn schedules_are_validated_versioned_and_shown() {
    let store = Store::memory().await;
    for (bad, want) in [
        (r#""schedule":"0 2 * *""#, r#""schedule": cron expression "0 2 * *""#),
        (r#""schedule":"0 2 * * *","timeZone":"Europe/Nowhere""#, r#""Europe/Nowhere""#),
        (r#""timeZone":"UTC""#, r#""timeZone" "UTC" without a "schedule""#),
    ] {
        let json = format!(r#"{{"jobName":"x",{bad},"steps":[{{"stepName":"a","kind":"command","command":"true"}}]}}"#);
        let msg = define::apply(&store, &parse(&json), &me(), "t", 1).await.unwrap_err().to_string();
        assert!(msg.contains(want) && msg.contains("job \"x\""), "{msg}");
    }
    assert!(store.list(paths::JOBS).await.unwrap().is_empty(), "a refused definition wrote nothing");

    let a = define::apply(&store, &parse(NIGHTLY), &me(), "t", 1).await.unwrap();
    let shown = define::show(&store, &n("nightly"), None).await.unwrap();
    assert_eq!((shown.schedule.as_deref(), shown.time_zone.as_deref()), (Some("30 2 * * *"), Some("Europe/Berlin")));
    // The schedule is part of the version: changing it alone logs one.
    let again = define::apply(&store, &parse(NIGHTLY), &me(), "t", 2).await.unwrap();
    assert!(!again.changed);
    let moved = NIGHTLY.replace("30 2 * * *", "0 3 * * *");
    let b = define::apply(&store, &parse(&moved), &me(), "t", 3).await.unwrap();
    assert!(b.changed && b.version == a.version + 1 && b.changed_steps.is_empty(), "{b:?}");

    let views = cron::views(&store, at("2026-03-28T12:00:00Z")).await.unwrap();
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].schedule.as_str(), views[0].time_zone.as_str()), ("0 3 * * *", "Europe/Berlin"));
    // 03:00 does not exist on 2026-03-29 either: the first instant after the gap.
    assert_eq!(views[0].next_fire_ms, Some(at("2026-03-29T01:00:00Z")));
}

#[tokio::test]
async fn each_fire_instant_triggers_once_across_both_switches() {
    let (store, clock) = setup(NIGHTLY, "2026-03-28T12:00:00Z").await;
    let gap = at("2026-03-29T01:00:00Z"); // 02:30 does not exist: 03:00 CEST
    assert!(fire(&store, &clock, "2026-03-29T00:59:59Z").await.is_empty());
    let r = drive_round(&store, &me(), clock.wall_ms(), true).await.unwrap();
    assert_eq!(r.next_fire_ms, Some(gap), "the node is told when to look again");

    assert_eq!(fire(&store, &clock, "2026-03-29T01:00:00Z").await, [format!("nightly/cron-{gap}")]);
    // The instance is driven in the same round: its first step is submitted.
    let v = instance::view(&store, &n("nightly"), &trigger_name(gap), false).await.unwrap();
    assert_eq!(v.steps[0].state, layouts::jobs::StepState::Running);
    assert!(fire(&store, &clock, "2026-03-29T01:00:40Z").await.is_empty());

    // A fenced old monitor and the new one, at once: one instance.
    clock.set_wall_ms(at("2026-03-30T00:30:00Z"));
    let (one, other) = (me(), layouts::NodeId::parse("n2").unwrap());
    let (a, b) = tokio::join!(
        drive_round(&store, &one, clock.wall_ms(), true),
        drive_round(&store, &other, clock.wall_ms(), true)
    );
    assert_eq!(a.unwrap().triggered.len() + b.unwrap().triggered.len(), 1);
    assert_eq!(fired(&store, "nightly").await, [gap, at("2026-03-30T00:30:00Z")]);

    // Fall back: 02:30 CEST fires (the latest missed instant since March,
    // once), 02:30 CET an hour later does not.
    assert_eq!(fire(&store, &clock, "2026-10-25T00:30:00Z").await.len(), 1);
    assert!(fire(&store, &clock, "2026-10-25T01:30:00Z").await.is_empty());
    assert!(fire(&store, &clock, "2026-10-25T23:00:00Z").await.is_empty());
    assert_eq!(fire(&store, &clock, "2026-10-26T01:30:00Z").await.len(), 1);
    let want = [gap, at("2026-03-30T00:30:00Z"), at("2026-10-25T00:30:00Z"), at("2026-10-26T01:30:00Z")];
    assert_eq!(fired(&store, "nightly").await, want);
}

#[tokio::test]
async fn a_monitor_down_for_three_days_triggers_once() {
    let (store, clock) = setup(&daily_utc("d"), "2026-06-01T12:00:00Z").await;
    // Applied after today's 02:00: a new schedule does not fire for the past.
    assert!(fire(&store, &clock, "2026-06-01T12:00:30Z").await.is_empty());
    assert_eq!(fire(&store, &clock, "2026-06-02T02:00:10Z").await.len(), 1);
    // Down from then until the fourth morning after: one instance, for the
    // latest fire instant.
    assert_eq!(fire(&store, &clock, "2026-06-05T07:00:00Z").await, [format!("d/cron-{}", at("2026-06-05T02:00:00Z"))]);
    assert!(fire(&store, &clock, "2026-06-05T07:01:00Z").await.is_empty());
    assert_eq!(fired(&store, "d").await, [at("2026-06-02T02:00:00Z"), at("2026-06-05T02:00:00Z")]);
}

#[tokio::test]
async fn only_a_round_that_looks_at_schedules_fires_and_a_bad_stored_one_is_reported() {
    let (store, clock) = setup(&daily_utc("d"), "2026-06-01T12:00:00Z").await;
    clock.set_wall_ms(at("2026-06-02T02:00:00Z"));
    let r = drive_round(&store, &me(), clock.wall_ms(), false).await.unwrap();
    assert!(r.triggered.is_empty() && r.next_fire_ms.is_none());

    // A main copy rewritten by hand with a pattern that does not parse.
    let path = paths::job_main(&n("d"));
    let text = String::from_utf8(store.read(&path).await.unwrap().unwrap().to_vec()).unwrap();
    store.put(&path, text.replace("0 2 * * *", "0 2 * *").into_bytes()).await.unwrap();
    let r = drive_round(&store, &me(), clock.wall_ms(), true).await.unwrap();
    assert!(r.triggered.is_empty());
    assert!(r.errors.iter().any(|e| e.contains(&path) && e.contains("\"0 2 * *\"")), "{:?}", r.errors);
    let anomalies = crate::check::check_tree(&store).await.unwrap();
    assert!(anomalies.iter().any(|a| a.path == path && a.problem.contains("\"0 2 * *\"")), "{anomalies:?}");
}
