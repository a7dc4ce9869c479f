//! A node's session guard (`src/node/session.rs`) and the monitor's side of
//! it (`src/monitor/mod.rs`), on in-process nodes and a `ManualClock`.

use super::*;
use compactd::node::{Node, NodeConfig};

const SESSION: Duration = Duration::from_secs(4);

fn cfg(id: &str) -> NodeConfig {
    let mut c = NodeConfig::new(n(id));
    c.heartbeat = Duration::from_millis(500);
    c.session_timeout = SESSION;
    c.lease = SESSION;
    c
}

/// n1 through the lab's faulty store, with one unit of a task in its
/// folder (dispatched by a manager whose view lists n1 alone).
async fn node_with_a_unit(lab: &Lab) -> (Node, TaskId) {
    let id = lab.submit(1, 30).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &[("n1", 1)], &[]).await;
    assert_eq!(lab.only_attempt(&id, 0).await.0, "n1");
    let node =
        Node::new(cfg("n1"), lab.faulty.clone(), lab.shared_clock()).with_work(lab.work.clone(), lab.data.clone());
    (node, id)
}

async fn tick(lab: &Lab, node: &mut Node) {
    node.tick().await;
    lab.clock.advance(Duration::from_millis(100));
}

/// Ticks (real time passes too: executors start) until `done`.
async fn tick_until(lab: &Lab, node: &mut Node, mut done: impl FnMut(&Node) -> bool) {
    for _ in 0..200 {
        if done(node) {
            return;
        }
        tick(lab, node).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out");
}

/// Before its first counted heartbeat an incarnation has no guard, so it
/// may not run anything (the monitor may never see it, and could then
/// never declare it): its worker claims nothing until a beat counts.
#[tokio::test]
async fn nothing_is_claimed_before_a_heartbeat_counts() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (mut node, id) = node_with_a_unit(&lab).await;
    let hb = v2::heartbeat(&n("n1"));
    fail_only(&lab.faults, move |p: &str| p == hb, 0.0);
    for _ in 0..20 {
        tick(&lab, &mut node).await;
    }
    assert!(node.guard_deadline().is_none());
    let files = lab.attempts(&id, 0).await;
    assert!(files.values().flatten().all(|f| f == v2::TASK_INFO), "claimed without a guard: {files:?}");
    assert!(lab.started().is_empty());
    heal(&lab.faults);
    tick_until(&lab, &mut node, |_| lab.started().len() == 1).await;
    assert!(node.guard_deadline().is_some());
}

/// A heartbeat whose write landed but whose reply came after the guard's
/// deadline may have landed after the monitor declared the incarnation: it
/// must not revive it. The node kills its executors and rejoins, and marks
/// the old incarnation ended once its executors are dead.
#[tokio::test]
async fn a_heartbeat_reply_after_the_deadline_ends_the_incarnation() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (mut node, _) = node_with_a_unit(&lab).await;
    tick_until(&lab, &mut node, |n| n.running_subtasks() == 1 && !lab.started().is_empty()).await;
    let (old, at) = (node.stats().incarnation, node.guard_deadline().unwrap());
    let clock = lab.clock.clone();
    let hb = v2::heartbeat(&n("n1"));
    lab.faults.set_on_op(Some(Arc::new(move |kind, p: &str| {
        if kind == store::layers::OpKind::Put && p == hb {
            clock.advance((at + Duration::from_millis(10)).saturating_sub(clock.mono()));
        }
    })));
    tick_until(&lab, &mut node, |n| n.stats().incarnation != old).await;
    heal(&lab.faults);
    assert_eq!(node.running_subtasks(), 0);
    assert!(node.guard_deadline().is_none(), "the new incarnation has no guard before its first beat");
    let groups = node.executor_groups().unwrap();
    assert!(!groups.may_start(old, lab.clock.mono()), "the old incarnation may still start executors");
    tick(&lab, &mut node).await;
    let ended = lab.store.read(&v2::ended_marker(&n("n1"), old)).await.unwrap();
    assert!(ended.is_some(), "the old incarnation was not marked ended");
    // Its executor is dead: nothing left in its groups.
    for _ in 0..100 {
        if groups.kill_all() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("an executor of the old incarnation is still alive");
}

/// The reverse: a heartbeat that landed but was counted as failed (its
/// reply lost, or past its timeout). The node keeps its deadline (that
/// beat may count for the monitor, which only delays a declaration) and
/// ends the incarnation there.
#[tokio::test]
async fn a_heartbeat_counted_as_failed_does_not_move_the_deadline() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (mut node, _) = node_with_a_unit(&lab).await;
    tick_until(&lab, &mut node, |n| n.running_subtasks() == 1).await;
    let (old, at) = (node.stats().incarnation, node.guard_deadline().unwrap());
    let hb = v2::heartbeat(&n("n1"));
    let beat = |b: Option<bytes::Bytes>| formats::decode::<formats::Heartbeat>(&b.unwrap()).unwrap().beat;
    let before = beat(lab.store.read(&hb).await.unwrap());
    let h = hb.clone();
    fail_only(&lab.faults, move |p: &str| p == h, 1.0);
    while lab.clock.mono() < at {
        assert_eq!(node.guard_deadline(), Some(at), "a beat counted as failed moved the deadline");
        tick(&lab, &mut node).await;
    }
    assert!(beat(lab.store.read(&hb).await.unwrap()) > before, "no beat landed meanwhile");
    tick(&lab, &mut node).await;
    assert_ne!(node.stats().incarnation, old, "not ended at its deadline");
    assert_eq!(node.running_subtasks(), 0);
}

/// The monitor stamps a beat's change when the listing that shows it
/// returned, not at the start of its tick: a beat that landed while the
/// monitor's own heartbeat took a second counts from its landing, and the
/// node is declared offline a whole session after it, not earlier.
#[tokio::test]
async fn the_monitor_stamps_a_beat_when_its_listing_returned() {
    let _turn = crate::common::turns::waits();
    let store = Store::memory().await;
    let layer = FaultLayer::new(FaultConfig::default());
    let faults = layer.handle();
    let mut sim: sim::Cluster<()> = sim::Cluster::new(Duration::from_millis(100));
    let monitor_store = store.layered(move |op| op.layer(layer.clone()));
    sim.push(Node::new(cfg("n1"), monitor_store, sim.shared_clock()), ());
    sim.push(Node::new(cfg("n2"), store.clone(), sim.shared_clock()), ());
    for _ in 0..100 {
        sim.round().await;
        let view = sim.nodes().find(|n| n.is_monitor()).and_then(|n| n.view()).map(|v| v.members.len());
        if sim.monitors() == [n("n1")] && view == Some(2) {
            break;
        }
    }
    assert_eq!(sim.monitors(), [n("n1")]);
    sim.slot("n2").paused = true;
    // n1's next heartbeat write takes a second; n2's beat lands meanwhile.
    let landed = Arc::new(std::sync::Mutex::new(None));
    let (clock, l, s, hb1, hb2) =
        (sim.clock.clone(), landed.clone(), store.clone(), v2::heartbeat(&n("n1")), v2::heartbeat(&n("n2")));
    faults.set_on_op(Some(Arc::new(move |kind, p: &str| {
        let mut l = l.lock().unwrap();
        if kind != store::layers::OpKind::Put || p != hb1 || l.is_some() {
            return;
        }
        clock.advance(Duration::from_millis(990));
        let bytes = futures::executor::block_on(s.read(&hb2)).unwrap().unwrap();
        let mut beat: formats::Heartbeat = formats::decode(&bytes).unwrap();
        beat.beat += 1;
        futures::executor::block_on(s.put(&hb2, formats::encode(&beat))).unwrap();
        *l = Some(clock.mono());
    })));
    let declared_at = loop {
        let before = sim.clock.mono();
        sim.round().await;
        if !store.list(v2::OFFLINE).await.unwrap().is_empty() {
            break before;
        }
        assert!(sim.clock.mono() < Duration::from_secs(60), "n2 never declared");
    };
    let landed = landed.lock().unwrap().expect("n2's beat landed");
    eprintln!("n2's last beat landed at {landed:?}, declared offline at {declared_at:?} (session {SESSION:?})");
    assert!(declared_at >= landed + SESSION, "declared {:?} after its last beat landed", declared_at - landed);
}

/// A node that leaves at once (a second SIGTERM, the drain timeout) first
/// reports what finished since its last tick: that work is done, and a
/// dropped report would have it run again elsewhere.
#[tokio::test]
async fn a_node_leaving_reports_the_units_that_finished_since_its_last_tick() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let id = lab.submit(1, 0).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &[("n1", 1)], &[]).await;
    let mut node =
        Node::new(cfg("n1"), lab.store.clone(), lab.shared_clock()).with_work(lab.work.clone(), lab.data.clone());
    tick_until(&lab, &mut node, |n| n.running_subtasks() == 1).await;
    wait_for(|| lab.started().len() == 1).await;
    // `touch` ran and the executor exits right after it; no tick may see
    // it end, `leave` must. Its `sleep 0` can take a while to start on a
    // loaded machine: a fixed wait from here could leave it running, and
    // `leave` would kill it instead of reporting it.
    let records = lab.records.path().display().to_string();
    wait_for(|| !names_a_live_process(&records)).await;
    // Reaping it and draining its output are this runtime's to do: turns
    // of it, no process to wait for.
    tokio::time::sleep(Duration::from_secs(1)).await;
    node.leave().await;
    let files = lab.attempts(&id, 0).await;
    assert!(files.values().flatten().any(|f| f == "Status.Success"), "the finished unit was not reported: {files:?}");
}

/// Whether the command line of a live process (a zombie has none) holds
/// `text`.
fn names_a_live_process(text: &str) -> bool {
    crate::common::chaos_support::procs().iter().filter(|p| p.state != 'Z').any(|p| {
        std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| String::from_utf8_lossy(&c).contains(text))
    })
}
