//! Task-layer regressions at scale: a slow backend charged on the injected
//! clock, thousands of subtasks and tasks, and what a tick may cost then.

use super::*;

/// Charges every request of `node` 2 ms on the injected clock and counts
/// them: a slow backend, without real sleeps.
fn charge_2ms(sim: &mut Sim, node: &str) -> Arc<std::sync::atomic::AtomicU64> {
    let clock = sim.cluster.clock.clone();
    let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = ops.clone();
    sim.slot(node).extra.set_on_op(Some(Arc::new(move |_, _| {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        clock.advance(Duration::from_millis(2))
    })));
    ops
}

/// Ticks `node` alone (its requests are the only charged ones), then a
/// round of everyone: returns how long its tick took on the injected clock
/// and how many requests it made.
async fn timed_tick(sim: &mut Sim, node: &NodeId, ops: &std::sync::atomic::AtomicU64) -> (Duration, u64) {
    let (before, ops_before) = (sim.cluster.clock.mono(), ops.load(std::sync::atomic::Ordering::Relaxed));
    let i = sim.cluster.slots.iter().position(|s| &s.id == node).unwrap();
    sim.cluster.tick(i).await;
    let took = (sim.cluster.clock.mono() - before, ops.load(std::sync::atomic::Ordering::Relaxed) - ops_before);
    sim.round().await;
    took
}

/// The monitor's sweep over 10,000 finished task folders on a slow
/// backend (every request of the monitor costs 2 ms on the injected clock).
/// Before, one sweep read every folder in one tick (30,000 requests: 60 s
/// of a 15 s session): the monitor's heartbeat and lease stalled. Now a
/// sweep pass spans ticks, each bounded by half the tick's budget: no node
/// is declared offline, every monitor tick stays under its budget, every
/// finished task is archived, and a task submitted during the pass (after
/// its listing) keeps its pointer and subtasks and finishes.
#[tokio::test]
async fn a_sweep_over_ten_thousand_tasks_spans_ticks_under_the_deadline() {
    let _turn = crate::common::turns::waits();
    // `COMPACTD_SWEEP_TASKS=100000` for the full size.
    let n: u64 = std::env::var("COMPACTD_SWEEP_TASKS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let work = WorkConfig { sweep: Duration::from_secs(3600), ..noop_work() };
    let mut sim = Sim::with(2, slow, work, OpKind::ALL.to_vec(), true).await;
    sim.settle().await;
    let monitor = sim.monitor().cloned().expect("a monitor");
    let other = if monitor.as_str() == "n1" { "n2" } else { "n1" };
    // The template: one real task, finished; then N copies of its folder.
    let template = sim.submit(1, other).await;
    sim.finish(&[template], 300).await;
    let mut info = tasks::read_info(&sim.store, &template).await.unwrap();
    // Finished long ago: past the history retention.
    info.run.finished_wall_ms = Some(info.run.finished_wall_ms.unwrap() - 7_200_000);
    for i in 0..n {
        let id = TaskId { unix_ms: template.unix_ms - 10_000_000 + i, ..template };
        info.id = id;
        sim.store.create(&v2::task_info(&id), layouts::formats::encode(&info)).await.unwrap();
        sim.store.create(&v2::task_status(&id, TaskState::Done), Vec::new()).await.unwrap();
    }
    let incarnations: Vec<u64> = sim.cluster.nodes().map(|n| n.stats().incarnation).collect();
    // The monitor's own requests become slow; its next sweep is due now.
    let ops = charge_2ms(&mut sim, monitor.as_str());
    let mut most_ops = 0;
    sim.slot(monitor.as_str()).node.as_mut().unwrap().sweep_now();
    let budget = SLOW_BUDGET;
    let mut longest = Duration::ZERO;
    let mut late = None;
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(
            rounds < 2000,
            "the sweep did not end: {} task folders left",
            sim.store.list(v2::SCHEDULER).await.unwrap().len()
        );
        // The monitor's tick alone (its requests are the only slow ones).
        let (took, n_ops) = timed_tick(&mut sim, &monitor, &ops).await;
        longest = longest.max(took);
        most_ops = most_ops.max(n_ops);
        if rounds == 5 {
            // Submitted while the pass works through the old folders.
            late = Some(sim.submit(3, other).await);
        }
        let left =
            sim.store.list(v2::SCHEDULER).await.unwrap().iter().filter(|e| e.is_dir && e.name() != "Compress").count();
        if late.is_some() && left <= 2 {
            break;
        }
    }
    let late = late.unwrap();
    sim.finish(&[late], 300).await;
    sim.assert_done_once(&late, 3).await;
    eprintln!(
        "sweep of {n} tasks: {rounds} rounds, longest monitor tick {longest:?} (budget {budget:?}), \
         at most {most_ops} requests in one monitor tick, {} in all",
        ops.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "RESULT {}",
        serde_json::json!({
            "part": "sweep_sim", "tasks": n, "rounds": rounds, "longest_tick_s": longest.as_secs_f64(),
            "budget_s": budget.as_secs_f64(), "max_requests_per_tick": most_ops,
            "requests": ops.load(std::sync::atomic::Ordering::Relaxed), "per_request_ms": 2,
        })
    );
    assert!(rounds > 10, "the pass spanned ticks ({rounds} rounds)");
    // The budget, plus the one request that was under way when it passed
    // and the scan before the sweep.
    assert!(longest <= budget + Duration::from_millis(500), "a monitor tick took {longest:?}");
    let offline = sim.store.list(v2::OFFLINE).await.unwrap();
    assert!(offline.is_empty(), "declared offline: {:?}", offline.iter().map(|e| e.name()).collect::<Vec<_>>());
    let now: Vec<u64> = sim.cluster.nodes().map(|n| n.stats().incarnation).collect();
    assert_eq!(now, incarnations, "a node rejoined");
    let (history, bad) = compactd::monitor::tasks::read_history(&sim.store).await.unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(history.len() as u64 >= n, "archived {} of {n}", history.len());
}

/// A node that becomes the manager of many running tasks at once
/// (here a restart: its new incarnation takes a new term for each) rebuilds
/// them from one recursive listing of `TaskAssigned/` per tick, not one per
/// task (30 tasks: 30 listings before, each of the whole cluster's subtask
/// folders).
#[tokio::test]
async fn a_restarted_manager_of_many_tasks_rebuilds_them_from_one_listing() {
    let _turn = crate::common::turns::waits();
    const TASKS: usize = 30;
    // One subtask at a time per node, each a long `sleep`: every task stays
    // Running with queued subtask folders.
    let work = WorkConfig { executor: ExecutorKind::Command, allow_inline: true, max_running: 1, ..noop_work() };
    let mut sim = Sim::with(2, fast, work, OpKind::ALL.to_vec(), true).await;
    sim.settle().await;
    assert_eq!(sim.monitor().map(|n| n.as_str()), Some("n1"));
    let mut ids = vec![];
    for i in 0..TASKS {
        let mut spec = spec_for(&format!("t{i}"));
        spec.shards = Some(2);
        spec.executor = Some(ExecutorSpec {
            kind: ExecutorKind::Command,
            command: Some("sleep 30".into()),
            command_name: None,
            timeout_ms: None,
        });
        spec.manager = Some(NodeId::parse("n2").unwrap());
        ids.push(tasks::submit(&sim.store, spec, sim.cluster.clock.wall_ms()).await.unwrap());
    }
    for _ in 0..100 {
        sim.round().await;
        let mut all = true;
        for id in &ids {
            all &= sim.state(id).await == Some(TaskState::Running);
        }
        if all {
            break;
        }
    }
    for id in &ids {
        assert_eq!(sim.state(id).await, Some(TaskState::Running), "task {id}");
    }
    sim.crash("n2");
    sim.restart("n2").await;
    let listings = Arc::new(std::sync::Mutex::new(0usize));
    let l = listings.clone();
    sim.slot("n2").extra.set_on_op(Some(Arc::new(move |kind, path| {
        if kind == OpKind::List && path == v2::TASK_ASSIGNED {
            *l.lock().unwrap() += 1;
        }
    })));
    // Until the new incarnation manages every task (term 2 for each).
    let mut rounds = 0;
    loop {
        sim.round().await;
        rounds += 1;
        let mut all = true;
        for id in &ids {
            all &= tasks::status(&sim.store, id).await.unwrap().manager_term == 2;
        }
        if all {
            break;
        }
        assert!(rounds < 200, "the restarted n2 did not take its tasks back");
    }
    // The rebuilds happen once the monitor lists the new incarnation as a
    // member: in-process nodes send no pokes, so within a session (the
    // monitor reads a member's heartbeat content once per session).
    for _ in 0..100 {
        if *listings.lock().unwrap() > 0 {
            break;
        }
        sim.round().await;
    }
    sim.rounds(10).await;
    let n = *listings.lock().unwrap();
    eprintln!("{TASKS} tasks rebuilt with {n} listings of TaskAssigned/ in {rounds} rounds");
    assert!((1..=3).contains(&n), "{n} recursive listings of TaskAssigned/ for {TASKS} rebuilds");
}

/// The tasks of an offline manager are handed over across ticks.
/// 500 tasks managed by a node that dies; every request of the monitor costs
/// 2 ms on the injected clock. Before, one monitor tick handed over all of
/// them (several requests each: seconds past the tick's budget); now the
/// hand-overs stop at half the budget and go on in the next ticks: every
/// task gets a live manager, no monitor tick overruns its budget, and no
/// node but the dead one is declared offline.
#[tokio::test]
async fn the_tasks_of_an_offline_manager_are_handed_over_across_ticks() {
    let _turn = crate::common::turns::waits();
    const TASKS: usize = 500;
    let work = WorkConfig { sweep: Duration::from_secs(3600), ..noop_work() };
    let mut sim = Sim::with(3, slow, work, OpKind::ALL.to_vec(), true).await;
    sim.settle().await;
    let monitor = sim.monitor().cloned().expect("a monitor");
    let victim = ["n1", "n2", "n3"].into_iter().find(|n| *n != monitor.as_str()).unwrap();
    let mut ids = vec![];
    for i in 0..TASKS {
        let mut spec = spec_for(&format!("t{i}"));
        spec.shards = Some(1);
        spec.manager = Some(NodeId::parse(victim).unwrap());
        ids.push(tasks::submit(&sim.store, spec, sim.cluster.clock.wall_ms()).await.unwrap());
    }
    sim.crash(victim);
    let ops = charge_2ms(&mut sim, monitor.as_str());
    let budget = SLOW_BUDGET;
    let (mut longest, mut most_ops, mut rounds) = (Duration::ZERO, 0, 0);
    loop {
        rounds += 1;
        assert!(rounds < 2000, "the tasks were not handed over");
        let (took, n_ops) = timed_tick(&mut sim, &monitor, &ops).await;
        longest = longest.max(took);
        most_ops = most_ops.max(n_ops);
        let pointers = sim.store.list(&v2::node_assigned_dir(&NodeId::parse(victim).unwrap())).await.unwrap();
        if rounds % 10 == 0 && pointers.is_empty() {
            break;
        }
    }
    let mut managers = BTreeMap::<String, usize>::new();
    for id in &ids {
        let st = tasks::status(&sim.store, id).await.unwrap();
        assert_eq!(st.manager_term, 2, "task {id}");
        *managers.entry(st.manager.clone().unwrap_or_default()).or_default() += 1;
    }
    eprintln!(
        "{TASKS} hand-overs: {rounds} rounds, longest monitor tick {longest:?} (budget {budget:?}), \
         at most {most_ops} requests in one monitor tick; managers now {managers:?}"
    );
    assert!(!managers.contains_key(victim), "{managers:?}");
    assert!(longest <= budget + Duration::from_millis(500), "a monitor tick took {longest:?}");
    let offline: Vec<String> =
        sim.store.list(v2::OFFLINE).await.unwrap().iter().map(|e| e.name().to_string()).collect();
    assert!(offline.iter().all(|o| o.starts_with(&format!("{victim}."))), "declared offline: {offline:?}");
}

/// An idle node GETs its inbox stamp instead of listing its folder
/// at every poll (on S3 a LIST costs twelve GETs), and still finds work a
/// manager writes for it at its next poll: in-process nodes have no
/// listeners, so every dispatch to another node is announced by a stamp.
#[tokio::test]
async fn an_idle_node_reads_its_inbox_instead_of_listing_and_finds_new_work_at_its_next_poll() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::with(2, fast, noop_work(), OpKind::ALL.to_vec(), true).await;
    sim.settle().await;
    sim.rounds(5).await;
    let listings = Arc::new(std::sync::Mutex::new(0usize));
    let l = listings.clone();
    let folder = format!("{}n2/", v2::TASK_ASSIGNED);
    sim.slot("n2").extra.set_on_op(Some(Arc::new(move |kind, path| {
        if kind == OpKind::List && path == folder {
            *l.lock().unwrap() += 1;
        }
    })));
    sim.rounds(40).await;
    let idle = *listings.lock().unwrap();
    assert!(idle <= 1, "an idle node listed its folder {idle} times in 40 polls");
    let id = sim.submit(8, "n1").await;
    let mut rounds = 0;
    while !sim.state(&id).await.is_some_and(|s| s.is_terminal()) {
        sim.round().await;
        rounds += 1;
        assert!(rounds <= 12, "8 noop units on 2 nodes not done after {rounds} polls");
    }
    sim.assert_done_once(&id, 8).await;
    assert!(*listings.lock().unwrap() > idle, "n2 never listed its folder: it got no unit of 8");
    eprintln!("idle: {idle} listings in 40 polls; the task took {rounds} polls");
}
