//! A manager gives a unit to another node only once the unit's attempt can
//! no longer run (`src/tasks/collect.rs`). Each test drives one
//! `TaskManager` (on n1) with the member view and offline list a node would
//! hand it, and plays the workers by writing what they write.

use super::*;

const ALL: [(&str, u64); 3] = [("n1", 1), ("n2", 1), ("n3", 1)];

fn without(node: &str) -> Vec<(&'static str, u64)> {
    ALL.iter().filter(|(m, _)| *m != node).copied().collect()
}

/// The nemesis's overlap: a unit running on a live node was dispatched
/// again because the manager's view did not list that node (a stale or
/// incomplete view after a rejoin), or listed another incarnation of it
/// than the one running the unit. Neither is a declaration: the unit waits,
/// and ends where it runs.
#[tokio::test]
async fn a_view_without_the_live_runner_does_not_move_its_unit() {
    let _turn = crate::common::turns::waits();
    for layout in LAYOUTS {
        a_view_without_the_live_runner_does_not_move_its_unit_in(layout).await;
    }
}

async fn a_view_without_the_live_runner_does_not_move_its_unit_in(layout: u32) {
    let lab = Lab::new_in(layout).await;
    let id = lab.submit(3, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.claim(&id, 0, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    for view in [without(&node), ALL.iter().map(|(m, i)| (*m, if *m == node { 2 } else { *i })).collect()] {
        for _ in 0..5 {
            lab.manage(&mut m, &view, &[]).await;
            lab.clock.advance(Duration::from_millis(500));
        }
        let attempts = lab.attempts(&id, 0).await;
        assert_eq!(
            attempts.keys().collect::<Vec<_>>(),
            [&(node.clone(), attempt)],
            "layout {layout}, view {view:?}: {attempts:?}"
        );
    }
    // The run ends where it ran: recorded once (in layout 3 once its batch
    // is recorded: the other units of the batch end too).
    lab.report(&id, 0, &node, attempt, SubtaskState::Success, 1).await;
    for u in 1..3 {
        let (nu, au) = lab.claim(&id, u, 1).await;
        lab.report(&id, u, &nu, au, SubtaskState::Success, 1).await;
    }
    lab.manage(&mut m, &without(&node), &[]).await;
    assert!(lab.attempts(&id, 0).await.is_empty(), "layout {layout}");
    let dir = tasks::read_dir_with_outcomes(&lab.store, &id).await.unwrap();
    assert!(dir.outcomes.contains(&(true, 1, 0)), "layout {layout}: {:?}", dir.outcomes);
    assert_eq!(dir.recorded(1).len(), 3, "layout {layout}: {:?}", dir.outcomes);
}

/// What does end a claimed attempt: its runner declared offline (in the
/// view, or only by its marker), its runner's own `Ended` marker, or a
/// newer incarnation in its node's heartbeat. Then the unit goes to another
/// node at once.
#[tokio::test]
async fn a_runner_declared_offline_ended_or_outrun_frees_its_unit() {
    let _turn = crate::common::turns::waits();
    for (layout, case) in LAYOUTS.iter().flat_map(|l| ["view", "marker", "ended", "heartbeat"].map(|c| (*l, c))) {
        let lab = Lab::new_in(layout).await;
        let id = lab.submit(1, 1).await;
        let mut m = TaskManager::new(id);
        lab.manage(&mut m, &ALL, &[]).await;
        let (node, attempt) = lab.claim(&id, 0, 1).await;
        lab.manage(&mut m, &without(&node), &[]).await;
        assert_eq!(lab.attempts(&id, 0).await.len(), 1, "{layout} {case}: moved before anything ended the runner");
        let nid = n(&node);
        let mut offline = vec![];
        match case {
            "view" => offline.push((node.as_str(), 1)),
            "marker" => {
                let rec = formats::OfflineRecord {
                    node: nid.clone(),
                    incarnation: 1,
                    epoch: 1,
                    declared_by: n("n1"),
                    wall_ms: 0,
                    cleaned: true,
                    event_seq: None,
                };
                lab.store.create(&v2::offline_marker(&nid, 1), formats::encode(&rec)).await.unwrap();
            }
            "ended" => {
                let mark = formats::EndedMark { node: nid.clone(), incarnation: 1, wall_ms: 0, why: String::new() };
                lab.store.create(&v2::ended_marker(&nid, 1), formats::encode(&mark)).await.unwrap();
            }
            _ => {
                let hb = serde_json::json!({"node": node, "incarnation": 2, "beat": 1, "session_timeout_ms": 4000,
                    "heartbeat_ms": 500, "wall_ms": 0, "pid": 1, "version": "test"});
                lab.store.put(&v2::heartbeat(&nid), serde_json::to_vec(&hb).unwrap()).await.unwrap();
            }
        }
        let offline: Vec<(&str, u64)> = offline;
        lab.manage(&mut m, &without(&node), &offline).await;
        // Layout 3: the ended attempt stays in its batch (released) until
        // the batch is recorded; the unit's newest attempt is elsewhere.
        let attempts = lab.attempts(&id, 0).await;
        let live: Vec<_> = attempts.iter().filter(|(k, _)| *k != &(node.clone(), attempt)).collect();
        assert_eq!(live.len(), 1, "{layout} {case}: {attempts:?}");
        let (to, next) = live[0].0.clone();
        assert!(to != node && next > attempt, "{layout} {case}: the unit went to {to} attempt {next}");
        assert!(attempts.len() == 1 || layout >= 3, "{layout} {case}: {attempts:?}");
    }
}

/// An attempt nobody claimed yet, on a node the view does not list: the
/// manager takes it back by creating its claim itself (one create wins), so
/// that the node can never start it, and only then dispatches again. If the
/// node's worker claims first, the manager waits for that runner.
#[tokio::test]
async fn an_unstarted_attempt_is_taken_back_by_its_claim_before_it_moves() {
    let _turn = crate::common::turns::waits();
    for layout in LAYOUTS {
        an_unstarted_attempt_is_taken_back_in(layout).await;
    }
}

/// Layout 2 takes an attempt back by creating its claim (one name: one
/// winner); layout 3 by its `Released` and a listing after it (the worker
/// lists after its claim): the worker's claim made at the same moment wins
/// either way, and the manager then waits for that runner.
async fn an_unstarted_attempt_is_taken_back_in(layout: u32) {
    let lab = Lab::new_in(layout).await;
    let id = lab.submit(2, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.only_attempt(&id, 0).await;
    // Unit 1 is on the same node when the ring put it there; else skip it.
    let (node1, attempt1) = lab.only_attempt(&id, 1).await;
    // The node's worker claims unit 1 at the very moment the manager takes
    // it back (right before the manager's create of its take-back).
    let claim1 = lab.claim_path(&id, &node1, 1, attempt1, 1).await;
    let take_back1 = if layout == 2 {
        claim1.clone()
    } else {
        let b = lab.batch_of(&id, &node1, 1, attempt1).await;
        v3::unit_mark(&n(&node1), &b, 1, attempt1, v3::Mark::Released)
    };
    let (store, path, body) = (lab.store.clone(), claim1.clone(), lab.claim_body(1));
    let raced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = raced.clone();
    lab.faults.set_on_op(Some(Arc::new(move |kind, p: &str| {
        if kind == store::layers::OpKind::Create
            && p == take_back1
            && !r.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            futures::executor::block_on(store.create(&path, body.clone())).unwrap();
        }
    })));
    let gone = without(&node);
    let gone: Vec<(&str, u64)> = if node1 == node { gone } else { without(&node1) };
    lab.manage(&mut m, &gone, &[]).await;
    heal(&lab.faults);
    // Unit 0 (if its node is the one gone): taken back, then dispatched
    // elsewhere (layout 3: its old attempt stays released in its batch).
    if node1 == node {
        let a0 = lab.attempts(&id, 0).await;
        let (to, next) = lab.only_attempt(&id, 0).await;
        assert!(to != node && next > attempt, "layout {layout}: unit 0 went to {to} attempt {next}: {a0:?}");
        match layout {
            2 => assert_eq!(a0.len(), 1, "{a0:?}"),
            _ => assert!(a0[&(node.clone(), attempt)].contains(&v3::RELEASED.to_string()), "{a0:?}"),
        }
    }
    // Unit 1: the worker's claim won; the manager waits for that runner.
    assert!(raced.load(std::sync::atomic::Ordering::SeqCst), "layout {layout}: the manager never took unit 1 back");
    for _ in 0..3 {
        lab.manage(&mut m, &gone, &[]).await;
    }
    let a1 = lab.attempts(&id, 1).await;
    assert_eq!(a1.keys().collect::<Vec<_>>(), [&(node1.clone(), attempt1)], "layout {layout}: {a1:?}");
    let mark = lab.store.read(&claim1).await.unwrap().expect("the worker's claim stands");
    if layout == 2 {
        assert_eq!(formats::decode::<StatusMark>(&mark).unwrap().incarnation, 1, "the worker's claim stands");
    }
}

/// The create of an attempt landed, but its reply was lost (or came after
/// the request's timeout): the attempt may run. The manager must not number
/// another attempt of the unit while that one may exist: it finds it and
/// adopts it. A create that did not land is made again under the same name.
#[tokio::test]
async fn a_dispatch_whose_reply_was_lost_is_adopted_not_numbered_again() {
    let _turn = crate::common::turns::waits();
    for (layout, lost) in LAYOUTS.iter().flat_map(|l| [1.0, 0.0].map(|x| (*l, x))) {
        let lab = Lab::new_in(layout).await;
        let id = lab.submit(4, 1).await;
        let mut m = TaskManager::new(id);
        fail_only(&lab.faults, Lab::is_dispatch, lost);
        lab.manage(&mut m, &ALL, &[]).await;
        let landed: usize =
            futures::future::join_all((0..4).map(|u| lab.attempts(&id, u))).await.iter().map(|a| a.len()).sum();
        assert_eq!(landed, if lost > 0.0 { 4 } else { 0 }, "layout {layout}, lost {lost}");
        assert!(lab.faults.injected() >= if layout == 2 { 4 } else { 1 });
        heal(&lab.faults);
        for _ in 0..3 {
            lab.manage(&mut m, &ALL, &[]).await;
        }
        for u in 0..4 {
            let a = lab.attempts(&id, u).await;
            let attempts: Vec<u32> = a.keys().map(|(_, a)| *a).collect();
            assert_eq!(attempts, [1], "layout {layout}, lost {lost}, unit {u}: {a:?}");
        }
    }
}

/// A create that failed while its node then left the view: the manager
/// claims the name itself (a create still in flight can then never run) and
/// keeps that claim; the unit goes elsewhere.
#[tokio::test]
async fn an_unsure_attempt_on_a_node_gone_from_the_view_is_fenced_by_a_kept_claim() {
    let _turn = crate::common::turns::waits();
    for layout in LAYOUTS {
        an_unsure_attempt_is_fenced_in(layout).await;
    }
}

/// Layout 2 keeps the manager's claim on the subtask's name; layout 3
/// releases the whole batch (`Released`): an `Info` that lands late starts
/// nothing.
async fn an_unsure_attempt_is_fenced_in(layout: u32) {
    let lab = Lab::new_in(layout).await;
    let id = lab.submit(1, 1).await;
    let mut m = TaskManager::new(id);
    fail_only(&lab.faults, Lab::is_dispatch, 0.0);
    lab.manage(&mut m, &ALL, &[]).await;
    heal(&lab.faults);
    assert!(lab.attempts(&id, 0).await.is_empty());
    // Where it was meant to go: the ring's pick for the unit.
    let ring = compactd::tasks::placement::Ring::new(["n1", "n2", "n3"].map(n).iter());
    let meant = ring.node_for(&format!("{id}/0")).unwrap();
    lab.manage(&mut m, &without(meant.as_str()), &[]).await;
    lab.manage(&mut m, &without(meant.as_str()), &[]).await;
    let a = lab.attempts(&id, 0).await;
    assert!(
        a.keys().any(|(to, next)| *to != meant.as_str() && *next > 1),
        "layout {layout}: not dispatched elsewhere: {a:?}"
    );
    if layout == 2 {
        let kept = a.get(&(meant.to_string(), 1)).expect("the claim on the name is kept");
        assert_eq!(kept, &[SubtaskState::Running.file_name()], "{a:?}");
        // The create lands late: its worker cannot claim it.
        let name = v2::subtask_name(&id, 1, 0, 1);
        let claim = v2::subtask_status(&meant, &name, SubtaskState::Running);
        let mark = formats::encode(&StatusMark { incarnation: 1, ..Default::default() });
        assert_eq!(lab.store.create(&claim, mark).await.unwrap(), store::Created::Exists);
        return;
    }
    let term = (layout >= v3::LAYOUT_4).then_some(1);
    let batch = v3::batch_name(&id, 1, v3::BatchNo { term, n: 1 });
    let left: Vec<String> =
        lab.store.list(&v3::batch_dir(&meant, &batch)).await.unwrap().iter().map(|e| e.name().to_string()).collect();
    assert_eq!(left, [v3::RELEASED], "the batch is released and kept: {a:?}");
    // The create lands late: its worker starts nothing from it.
    let info = v3::BatchInfo {
        task: tasks::read_info(&lab.store, &id).await.unwrap(),
        round: 1,
        batch: 1,
        term: 1,
        node: meant.clone(),
        manager: n("n1"),
        units: vec![v3::BatchUnit { unit: 0, attempt: 1, partition: None, shard: None }],
    };
    lab.store.create(&v3::batch_info(&meant, &batch), formats::encode(&info)).await.unwrap();
    let mut w = compactd::tasks::worker::Worker::new(meant.clone());
    let now = lab.clock.mono();
    w.groups().open(1, now + Duration::from_secs(60), now);
    let listed = compactd::tasks::worker::list_node(&lab.store, &meant).await.unwrap();
    let deadline = Deadline::new(lab.shared_clock(), now + Duration::from_secs(60));
    w.round(&lab.store, &lab.work, 1, &listed, lab.clock.wall_ms(), &deadline).await.unwrap();
    assert_eq!(w.running(), 0, "a late create of a released batch started");
    assert!(lab.started().is_empty());
}

/// `compactd reassign` moves a unit whose run is live: the attempt gets a
/// `Cancel` mark, and the unit goes to the named node only once the worker
/// acknowledged that the run ended (its `Failed` mark).
#[tokio::test]
async fn a_reassigned_unit_moves_only_after_its_worker_acknowledges() {
    let _turn = crate::common::turns::waits();
    for layout in LAYOUTS {
        a_reassigned_unit_moves_in(layout).await;
    }
}

async fn a_reassigned_unit_moves_in(layout: u32) {
    let lab = Lab::new_in(layout).await;
    let id = lab.submit(1, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.claim(&id, 0, 1).await;
    let to = ALL.iter().map(|(m, _)| *m).find(|m| *m != node).unwrap();
    let req = formats::ReassignRequest { to: Some(n(to)), wall_ms: 0 };
    lab.store.create(&v2::reassign_request(&id, 0), formats::encode(&req)).await.unwrap();
    for _ in 0..3 {
        lab.manage(&mut m, &ALL, &[]).await;
    }
    let a = lab.attempts(&id, 0).await;
    assert_eq!(a.len(), 1, "layout {layout}: moved before the run ended: {a:?}");
    assert!(a[&(node.clone(), attempt)].contains(&SubtaskState::Cancel.file_name()), "layout {layout}: {a:?}");
    lab.report(&id, 0, &node, attempt, SubtaskState::Failed, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    let a = lab.attempts(&id, 0).await;
    assert_eq!(a.keys().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), [to], "layout {layout}: {a:?}");
}

/// An attempt's folder that vanished (deleted by hand, or by a stale
/// manager) took its claim with it: whoever runs it is unknown. The
/// manager marks the name `Cancel` (a worker running it kills it and
/// acknowledges) and waits for that, or for the declaration of the node's
/// incarnation.
#[tokio::test]
async fn a_vanished_folder_waits_for_an_acknowledgement() {
    let _turn = crate::common::turns::waits();
    for layout in LAYOUTS {
        a_vanished_folder_waits_in(layout).await;
    }
}

async fn a_vanished_folder_waits_in(layout: u32) {
    let lab = Lab::new_in(layout).await;
    let id = lab.submit(1, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.claim(&id, 0, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    lab.remove_folder(&id, &node, 0, attempt).await;
    for _ in 0..3 {
        lab.manage(&mut m, &ALL, &[]).await;
    }
    let a = lab.attempts(&id, 0).await;
    assert_eq!(
        a.get(&(node.clone(), attempt)),
        Some(&vec![SubtaskState::Cancel.file_name()]),
        "layout {layout}: {a:?}"
    );
    assert_eq!(a.len(), 1, "layout {layout}: moved while its run may be alive: {a:?}");
    lab.report(&id, 0, &node, attempt, SubtaskState::Failed, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    let a = lab.attempts(&id, 0).await;
    assert!(a.len() == 1 && a.keys().all(|(_, next)| *next > attempt), "layout {layout}: {a:?}");
}

/// Two manager terms acting at once (the old one has not yet seen the new
/// one's term) may give a batch the same number: a term's numbers start
/// above `(term-1)·1000`, and a term 1 past 1000 batches in layout 3 named
/// one `….r1.b1001`, the first number term 2 gives. Its
/// create landed after term 2's rebuild listed the tree, with its record.
/// Term 2's own batch 1001 is its own (the term is in its name): created,
/// claimed, kept by a third term's rebuild beside term 1's record of the
/// same number, and recorded under its own name.
#[tokio::test]
async fn batches_of_two_terms_numbered_alike_stay_apart() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new_in(4).await;
    let id = lab.submit(1, 1).await;
    // Term 2 (n1 restarted) loads the task while no member takes work.
    let mut m2 = TaskManager::new(id);
    lab.manage(&mut m2, &[], &[]).await;
    lab.manage(&mut m2, &[], &[]).await;
    let legacy = v3::BatchNo { term: None, n: 1001 };
    let old = v3::batch_name(&id, 1, legacy);
    for node in ["n1", "n2", "n3"] {
        let info = v3::BatchInfo {
            task: tasks::read_info(&lab.store, &id).await.unwrap(),
            round: 1,
            batch: 1001,
            term: 1,
            node: n(node),
            manager: n("n1"),
            units: vec![v3::BatchUnit { unit: 0, attempt: 7, partition: None, shard: None }],
        };
        lab.store.create(&v3::batch_info(&n(node), &old), formats::encode(&info)).await.unwrap();
    }
    let old_record = v3::BatchRecord {
        node: Some(n("n2")),
        released: vec![v3::RecordedUnit { unit: 0, attempt: 7, error: Some("term 1".into()), ..Default::default() }],
        ..Default::default()
    };
    let old_record = formats::encode(&old_record);
    lab.store.create(&v3::batch_record(&id, 1, legacy), old_record.clone()).await.unwrap();
    lab.manage(&mut m2, &ALL, &[]).await;
    // Term 2's dispatch of unit 0 (its attempt 1001) is in a batch of its own.
    let mut held = vec![];
    for node in ["n1", "n2", "n3"] {
        for e in lab.store.list(&v2::node_assigned_dir(&n(node))).await.unwrap() {
            let Some(b) = lab.store.read(&format!("{}{}", e.path, v3::INFO)).await.unwrap() else { continue };
            let info: v3::BatchInfo = formats::decode(&b).unwrap();
            if info.units.iter().any(|u| (u.unit, u.attempt) == (0, 1001)) {
                held.push((node, Name::parse(e.name()).unwrap()));
            }
        }
    }
    assert_eq!(held.len(), 1, "term 2's dispatch of unit 0: {held:?}");
    let (node, mine) = held.pop().unwrap();
    assert_eq!(v3::parse_batch_name(mine.as_str()), Some((id, 1, v3::BatchNo::new(2, 1001))));
    let claim = v3::unit_mark(&n(node), &mine, 0, 1001, v3::Mark::Running(1));
    lab.store.create(&claim, vec![]).await.unwrap();
    lab.manage(&mut m2, &ALL, &[]).await;
    // A third term rebuilds beside term 1's record of batch 1001.
    tasks::reassign_manager(&lab.store, &id, &n("n1"), "test", 0).await.unwrap();
    let mut m3 = TaskManager::new(id);
    lab.manage(&mut m3, &ALL, &[]).await;
    assert!(lab.store.exists(&claim).await.unwrap(), "a third term removed term 2's running batch 1001");
    let success = v3::unit_mark(&n(node), &mine, 0, 1001, v3::Mark::Success);
    lab.store.create(&success, vec![]).await.unwrap();
    let mut flow = Flow::Continue;
    for _ in 0..5 {
        flow = lab.manage(&mut m3, &ALL, &[]).await;
        if matches!(flow, Flow::Finished(_)) {
            break;
        }
    }
    assert!(matches!(flow, Flow::Finished(layouts::TaskState::Done)), "{flow:?}");
    let mine_record = lab.store.read(&v3::batch_record(&id, 1, v3::BatchNo::new(2, 1001))).await.unwrap();
    let mine_record: v3::BatchRecord = formats::decode(&mine_record.expect("term 2's batch is recorded")).unwrap();
    assert_eq!(mine_record.done.iter().map(|u| (u.unit, u.attempt)).collect::<Vec<_>>(), [(0, 1001)]);
    let theirs = lab.store.read(&v3::batch_record(&id, 1, legacy)).await.unwrap();
    assert_eq!(theirs.as_deref(), Some(&old_record[..]), "term 1's record was changed");
    assert_eq!(tasks::read_info(&lab.store, &id).await.unwrap().result.success_count, 1);
}

/// A new manager's rebuild meets a batch without `Info` that holds a unit's
/// markers: its folder vanished while the unit ran (the old manager marked
/// the attempt `Cancel` in the folder that makes again), or only its `Info`
/// went. The run may go on there until its worker acknowledges: the unit
/// stays until that `Failed` (or the runner's end), and only then goes
/// elsewhere; deleting the folder would let the unit start elsewhere
/// before the worker's next poll kills the run.
#[tokio::test]
async fn a_rebuild_keeps_a_batch_without_info_until_its_run_is_acknowledged() {
    let _turn = crate::common::turns::waits();
    for case in ["vanished", "info removed"] {
        let lab = Lab::new_in(4).await;
        let id = lab.submit(1, 1).await;
        let mut m1 = TaskManager::new(id);
        lab.manage(&mut m1, &ALL, &[]).await;
        let (node, attempt) = lab.claim(&id, 0, 1).await;
        lab.manage(&mut m1, &ALL, &[]).await;
        let batch = lab.batch_of(&id, &node, 0, attempt).await;
        if case == "vanished" {
            lab.remove_folder(&id, &node, 0, attempt).await;
            lab.manage(&mut m1, &ALL, &[]).await;
        } else {
            lab.store.delete(&v3::batch_info(&n(&node), &batch)).await.unwrap();
        }
        // A new term rebuilds from what is left.
        tasks::reassign_manager(&lab.store, &id, &n("n1"), "test", 0).await.unwrap();
        let mut m2 = TaskManager::new(id);
        for _ in 0..4 {
            lab.manage(&mut m2, &ALL, &[]).await;
            lab.clock.advance(Duration::from_millis(500));
        }
        let attempts = lab.attempts(&id, 0).await;
        assert_eq!(attempts.keys().collect::<Vec<_>>(), [&(node.clone(), attempt)], "{case}: {attempts:?}");
        let files = &attempts[&(node.clone(), attempt)];
        assert!(files.contains(&SubtaskState::Cancel.file_name()), "{case}: the run is not asked to end: {files:?}");
        // The worker acknowledges: the unit goes on elsewhere.
        lab.report(&id, 0, &node, attempt, SubtaskState::Failed, 1).await;
        lab.manage(&mut m2, &ALL, &[]).await;
        let (_, next) = lab.only_attempt(&id, 0).await;
        assert!(next > attempt, "{case}: the unit did not go on after the acknowledgement");
    }
}
