//! Cron schedules on an in-process node under the [`ManualClock`]:
//! - repeat tasks: the first round waits for the first fire instant,
//!   rounds follow the schedule across Europe/Berlin's 2026 daylight-saving
//!   switches, and a node that missed three days of fire instants runs one
//!   round, not three;
//! - job schedules: the monitor triggers a scheduled job at its fire
//!   instant, not up to a sweep interval later.
//!
//! The wall clock is stepped alone ([`ManualClock::set_wall_ms`]) so that
//! days pass without ticking through them and without expiring a session.
//! The DST and catch-up rules of job schedules are unit-tested in
//! `src/jobs/cron_tests.rs`.

use std::time::Duration;

use compactd::clock::{Clock, SharedClock};
use compactd::jobs;
use compactd::node::{Node, NodeConfig};
use compactd::schedule::Cron;
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, Repeat, TaskSpec};
use layouts::formats::{ExecutorKind, ExecutorSpec, RunInfo};
use layouts::{Name, NodeId, TaskId, TaskState};
use store::Store;

fn at(rfc3339: &str) -> u64 {
    let ts: jiff::Timestamp = rfc3339.parse().expect("a test instant");
    ts.as_millisecond() as u64
}

struct One {
    cluster: sim::Cluster,
    store: Store,
}

impl One {
    async fn new(sweep: Duration) -> One {
        let mut cluster = sim::Cluster::new(Duration::from_millis(100));
        let store = Store::memory().await;
        let id = NodeId::parse("n1").unwrap();
        let mut cfg = NodeConfig::new(id);
        cfg.heartbeat = Duration::from_millis(200);
        cfg.session_timeout = Duration::from_millis(1500);
        cfg.lease = Duration::from_millis(1500);
        let work = WorkConfig { executor: ExecutorKind::Noop, sweep, ..WorkConfig::default() };
        let clock: SharedClock = cluster.shared_clock();
        let node = Node::new(cfg, store.clone(), clock).with_work(work, Store::memory().await);
        cluster.push(node, ());
        let mut one = One { cluster, store };
        for _ in 0..100 {
            one.cluster.round().await;
            if one.cluster.nodes().any(|n| n.is_monitor() && n.view().is_some_and(|v| !v.members.is_empty())) {
                return one;
            }
        }
        panic!("the node did not become monitor");
    }

    async fn run(&self, id: &TaskId) -> (TaskState, RunInfo) {
        let state = tasks::read_dir(&self.store, id).await.unwrap().state.expect("a state");
        (state, tasks::read_info(&self.store, id).await.unwrap().run)
    }

    /// Steps the wall clock to `wall`, then ticks until round `round` ended
    /// (the next one is scheduled), and a little longer to show that no
    /// further round starts.
    async fn round_ends_at(&mut self, id: &TaskId, wall: &str, round: u32) -> RunInfo {
        self.cluster.clock.set_wall_ms(at(wall));
        for _ in 0..200 {
            self.cluster.round().await;
            let (_, run) = self.run(id).await;
            if run.round == round && run.next_round_at_ms.is_some() {
                self.cluster.rounds(30).await;
                let (state, after) = self.run(id).await;
                assert_eq!((state, after.round), (TaskState::Running, round), "one round only at {wall}");
                return after;
            }
        }
        panic!("round {round} did not end after {wall}: {:?}", self.run(id).await);
    }
}

#[tokio::test]
async fn cron_rounds_follow_the_schedule_across_dst_and_catch_up_once() {
    let _turn = crate::common::turns::waits();
    let mut one = One::new(Duration::from_secs(1)).await;
    one.cluster.clock.set_wall_ms(at("2026-03-28T12:00:00Z"));
    let mut spec = TaskSpec::table(Name::parse("db").unwrap(), Name::parse("s").unwrap(), Name::parse("t").unwrap());
    spec.shards = Some(2);
    spec.executor =
        Some(ExecutorSpec { kind: ExecutorKind::Noop, command: None, command_name: None, timeout_ms: None });
    let cron = Cron::parse("30 2 * * *", "Europe/Berlin").unwrap();
    spec.repeat = Some(Repeat { rounds: 0, interval: Duration::ZERO, cron: Some(cron) });
    let id = tasks::submit(&one.store, spec, one.cluster.clock.wall_ms()).await.unwrap();
    let info = tasks::read_info(&one.store, &id).await.unwrap();
    assert_eq!(
        (info.repeat.cron.as_deref(), info.repeat.time_zone.as_deref()),
        (Some("30 2 * * *"), Some("Europe/Berlin"))
    );

    // Submitted at noon: the first round waits for the night, and 02:30
    // does not exist that night, so it is 03:00 CEST.
    let gap = at("2026-03-29T01:00:00Z");
    one.cluster.rounds(30).await;
    assert_eq!(one.run(&id).await.0, TaskState::Init);
    assert_eq!(one.run(&id).await.1.next_round_at_ms, Some(gap));
    let status = tasks::status(&one.store, &id).await.unwrap();
    assert_eq!((status.next_round_at_ms, status.repeat.cron.as_deref()), (Some(gap), Some("30 2 * * *")));
    one.cluster.clock.set_wall_ms(gap - 5_000);
    one.cluster.rounds(30).await; // 3 s: still before it
    assert_eq!(one.run(&id).await.0, TaskState::Init);

    let run = one.round_ends_at(&id, "2026-03-29T01:00:00Z", 1).await;
    assert_eq!(run.fired_ms, Some(gap));
    assert_eq!(run.next_round_at_ms, Some(at("2026-03-30T00:30:00Z")), "02:30 CEST");

    // Down (paused) from before the next fire instant for three days:
    // one round for the latest missed fire instant, then the schedule.
    let run = one.round_ends_at(&id, "2026-04-02T08:00:00Z", 2).await;
    assert_eq!(run.fired_ms, Some(at("2026-04-02T00:30:00Z")));
    assert_eq!(run.next_round_at_ms, Some(at("2026-04-03T00:30:00Z")));

    // Fall back: the first 02:30 (CEST) fires, the second (CET) does not.
    let run = one.round_ends_at(&id, "2026-10-25T00:30:00Z", 3).await;
    assert_eq!(run.fired_ms, Some(at("2026-10-25T00:30:00Z")));
    assert_eq!(run.next_round_at_ms, Some(at("2026-10-26T01:30:00Z")));
    one.cluster.clock.set_wall_ms(at("2026-10-25T01:30:00Z"));
    one.cluster.rounds(30).await;
    assert_eq!(one.run(&id).await.1.round, 3, "the repeated 02:30 does not fire again");

    tasks::stop(&one.store, &id, "test", one.cluster.clock.wall_ms()).await.unwrap();
    one.cluster.rounds(30).await;
    assert_eq!(one.run(&id).await.0, TaskState::Cancel);
}

#[tokio::test]
async fn the_monitor_triggers_a_scheduled_job_at_its_fire_instant() {
    let _turn = crate::common::turns::waits();
    // The default sweep (60 s): the node looks at the schedules again at
    // the next fire instant, not only a sweep later.
    let mut one = One::new(WorkConfig::default().sweep).await;
    let fire = at("2026-06-02T02:00:00Z");
    one.cluster.clock.set_wall_ms(fire - 70_000);
    let json = r#"{"jobName":"nightly","schedule":"0 4 * * *","timeZone":"Europe/Berlin",
                   "steps":[{"stepName":"a","kind":"command","commandName":"ok"}]}"#;
    let spec = jobs::spec::parse("nightly.json", json.as_bytes()).unwrap();
    let me = NodeId::parse("cli").unwrap();
    jobs::define::apply(&one.store, &spec, &me, "test", one.cluster.clock.wall_ms()).await.unwrap();
    let job = Name::parse("nightly").unwrap();
    let trigger = jobs::cron::trigger_name(fire);
    for _ in 0..one.cluster.rounds_for(Duration::from_secs(80)) {
        one.cluster.round().await;
        let created = jobs::instance::read_instance(&one.store, &job, &trigger).await.unwrap();
        if let Some(inst) = created {
            let late = inst.created_wall_ms - fire;
            assert!(inst.created_wall_ms >= fire && late <= 500, "created {late} ms after the fire instant");
            let all = jobs::instance::list_instances(&one.store).await.unwrap();
            assert_eq!(all.len(), 1, "{all:?}");
            return;
        }
    }
    panic!("no instance {trigger} after its fire instant");
}

#[tokio::test]
async fn a_bad_stored_cron_is_a_malformed_task_not_a_panic() {
    let _turn = crate::common::turns::waits();
    let mut one = One::new(Duration::from_secs(1)).await;
    let mut spec = TaskSpec::table(Name::parse("db").unwrap(), Name::parse("s").unwrap(), Name::parse("t").unwrap());
    spec.shards = Some(1);
    spec.executor =
        Some(ExecutorSpec { kind: ExecutorKind::Noop, command: None, command_name: None, timeout_ms: None });
    let cron = Cron::parse("0 2 * * *", "UTC").unwrap();
    spec.repeat = Some(Repeat { rounds: 0, interval: Duration::ZERO, cron: Some(cron) });
    let id = tasks::submit(&one.store, spec, one.cluster.clock.wall_ms()).await.unwrap();
    // Rewritten by a foreign writer: a zone that does not exist.
    let path = layouts::v2::task_info(&id);
    let text = String::from_utf8(one.store.read(&path).await.unwrap().unwrap().to_vec()).unwrap();
    assert!(text.contains("\"timeZone\": \"UTC\""), "{text}");
    one.store
        .put(&path, text.replace("\"timeZone\": \"UTC\"", "\"timeZone\": \"Mars/Olympus\"").into_bytes())
        .await
        .unwrap();
    one.cluster.clock.set_wall_ms(at("2030-01-01T02:00:00Z"));
    one.cluster.rounds(30).await;
    let (state, run) = one.run(&id).await;
    assert_eq!((state, run.round), (TaskState::Init, 0), "a task whose schedule does not parse does not run");
    let anomalies = compactd::check::check_tree(&one.store).await.unwrap();
    assert!(
        anomalies.iter().any(|a| a.path == path && a.problem.contains("\"Mars/Olympus\"")),
        "check names the file and the zone: {anomalies:?}"
    );
}
