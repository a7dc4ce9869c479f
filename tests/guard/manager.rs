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
    let lab = Lab::new().await;
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
        assert_eq!(attempts.keys().collect::<Vec<_>>(), [&(node.clone(), attempt)], "view {view:?}: {attempts:?}");
    }
    // The run ends where it ran: recorded once.
    lab.report(&id, 0, &node, attempt, SubtaskState::Success, 1).await;
    lab.manage(&mut m, &without(&node), &[]).await;
    assert!(lab.attempts(&id, 0).await.is_empty());
    let dir = tasks::read_dir_with_outcomes(&lab.store, &id).await.unwrap();
    assert!(dir.outcomes.contains(&(true, 1, 0)), "{:?}", dir.outcomes);
}

/// What does end a claimed attempt: its runner declared offline (in the
/// view, or only by its marker), its runner's own `Ended` marker, or a
/// newer incarnation in its node's heartbeat. Then the unit goes to another
/// node at once.
#[tokio::test]
async fn a_runner_declared_offline_ended_or_outrun_frees_its_unit() {
    for case in ["view", "marker", "ended", "heartbeat"] {
        let lab = Lab::new().await;
        let id = lab.submit(1, 1).await;
        let mut m = TaskManager::new(id);
        lab.manage(&mut m, &ALL, &[]).await;
        let (node, attempt) = lab.claim(&id, 0, 1).await;
        lab.manage(&mut m, &without(&node), &[]).await;
        assert_eq!(lab.attempts(&id, 0).await.len(), 1, "{case}: moved before anything ended the runner");
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
        let attempts = lab.attempts(&id, 0).await;
        assert_eq!(attempts.len(), 1, "{case}: {attempts:?}");
        let (to, next) = attempts.into_keys().next().unwrap();
        assert!(to != node && next > attempt, "{case}: the unit went to {to} attempt {next}");
    }
}

/// An attempt nobody claimed yet, on a node the view does not list: the
/// manager takes it back by creating its claim itself (one create wins), so
/// that the node can never start it, and only then dispatches again. If the
/// node's worker claims first, the manager waits for that runner.
#[tokio::test]
async fn an_unstarted_attempt_is_taken_back_by_its_claim_before_it_moves() {
    let lab = Lab::new().await;
    let id = lab.submit(2, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.only_attempt(&id, 0).await;
    let name = v2::subtask_name(&id, 1, 0, attempt);
    // Unit 1 is on the same node when the ring put it there; else skip it.
    let (node1, attempt1) = lab.only_attempt(&id, 1).await;
    // The node's worker claims unit 1 at the very moment the manager takes
    // it back (its create is the manager's next one on that path).
    let claim1 = v2::subtask_status(&n(&node1), &v2::subtask_name(&id, 1, 1, attempt1), SubtaskState::Running);
    let (store, path) = (lab.store.clone(), claim1.clone());
    let raced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = raced.clone();
    lab.faults.set_on_op(Some(Arc::new(move |kind, p: &str| {
        if kind == store::layers::OpKind::Create && p == path && !r.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mark = formats::encode(&StatusMark { incarnation: 1, ..Default::default() });
            futures::executor::block_on(store.create(&path, mark)).unwrap();
        }
    })));
    let gone = without(&node);
    let gone: Vec<(&str, u64)> = if node1 == node { gone } else { without(&node1) };
    lab.manage(&mut m, &gone, &[]).await;
    heal(&lab.faults);
    // Unit 0 (if its node is the one gone): taken back by its claim, then
    // dispatched elsewhere.
    if node1 == node {
        let a0 = lab.attempts(&id, 0).await;
        assert_eq!(a0.len(), 1, "{a0:?}");
        let ((to, next), _) = a0.into_iter().next().unwrap();
        assert!(to != node && next > attempt, "unit 0 went to {to} attempt {next}");
        assert!(lab.store.read(&v2::subtask_info(&n(&node), &name)).await.unwrap().is_none());
    }
    // Unit 1: the worker's claim won; the manager waits for that runner.
    assert!(raced.load(std::sync::atomic::Ordering::SeqCst), "the manager never tried to take unit 1 back");
    for _ in 0..3 {
        lab.manage(&mut m, &gone, &[]).await;
    }
    let a1 = lab.attempts(&id, 1).await;
    assert_eq!(a1.keys().collect::<Vec<_>>(), [&(node1.clone(), attempt1)], "{a1:?}");
    let mark = lab.store.read(&claim1).await.unwrap().unwrap();
    assert_eq!(formats::decode::<StatusMark>(&mark).unwrap().incarnation, 1, "the worker's claim stands");
}

/// The create of an attempt landed, but its reply was lost (or came after
/// the request's timeout): the attempt may run. The manager must not number
/// another attempt of the unit while that one may exist: it finds it and
/// adopts it. A create that did not land is made again under the same name.
#[tokio::test]
async fn a_dispatch_whose_reply_was_lost_is_adopted_not_numbered_again() {
    for lost in [1.0, 0.0] {
        let lab = Lab::new().await;
        let id = lab.submit(4, 1).await;
        let mut m = TaskManager::new(id);
        let dispatch = |p: &str| p.starts_with(v2::TASK_ASSIGNED) && p.ends_with(v2::TASK_INFO);
        fail_only(&lab.faults, dispatch, lost);
        lab.manage(&mut m, &ALL, &[]).await;
        let landed: usize =
            futures::future::join_all((0..4).map(|u| lab.attempts(&id, u))).await.iter().map(|a| a.len()).sum();
        assert_eq!(landed, if lost > 0.0 { 4 } else { 0 }, "lost {lost}");
        assert!(lab.faults.injected() >= 4);
        heal(&lab.faults);
        for _ in 0..3 {
            lab.manage(&mut m, &ALL, &[]).await;
        }
        for u in 0..4 {
            let a = lab.attempts(&id, u).await;
            let attempts: Vec<u32> = a.keys().map(|(_, a)| *a).collect();
            assert_eq!(attempts, [1], "lost {lost}, unit {u}: {a:?}");
        }
    }
}

/// A create that failed while its node then left the view: the manager
/// claims the name itself (a create still in flight can then never run) and
/// keeps that claim; the unit goes elsewhere.
#[tokio::test]
async fn an_unsure_attempt_on_a_node_gone_from_the_view_is_fenced_by_a_kept_claim() {
    let lab = Lab::new().await;
    let id = lab.submit(1, 1).await;
    let mut m = TaskManager::new(id);
    fail_only(&lab.faults, |p: &str| p.starts_with(v2::TASK_ASSIGNED) && p.ends_with(v2::TASK_INFO), 0.0);
    lab.manage(&mut m, &ALL, &[]).await;
    heal(&lab.faults);
    assert!(lab.attempts(&id, 0).await.is_empty());
    // Where it was meant to go: the ring's pick for the unit.
    let ring = compactd::tasks::placement::Ring::new(["n1", "n2", "n3"].map(n).iter());
    let meant = ring.node_for(&format!("{id}/0")).unwrap();
    lab.manage(&mut m, &without(meant.as_str()), &[]).await;
    lab.manage(&mut m, &without(meant.as_str()), &[]).await;
    let a = lab.attempts(&id, 0).await;
    let kept = a.get(&(meant.to_string(), 1)).expect("the claim on the name is kept");
    assert_eq!(kept, &[SubtaskState::Running.file_name()], "{a:?}");
    assert!(a.keys().any(|(to, next)| *to != meant.as_str() && *next > 1), "not dispatched elsewhere: {a:?}");
    // The create lands late: its worker cannot claim it.
    let name = v2::subtask_name(&id, 1, 0, 1);
    let claim = v2::subtask_status(&meant, &name, SubtaskState::Running);
    assert_eq!(
        lab.store.create(&claim, formats::encode(&StatusMark { incarnation: 1, ..Default::default() })).await.unwrap(),
        store::Created::Exists
    );
}

/// `compactd reassign` moves a unit whose run is live: the attempt gets a
/// `Cancel` mark, and the unit goes to the named node only once the worker
/// acknowledged that the run ended (its `Failed` mark).
#[tokio::test]
async fn a_reassigned_unit_moves_only_after_its_worker_acknowledges() {
    let lab = Lab::new().await;
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
    assert_eq!(a.len(), 1, "moved before the run ended: {a:?}");
    assert!(a[&(node.clone(), attempt)].contains(&SubtaskState::Cancel.file_name()), "{a:?}");
    lab.report(&id, 0, &node, attempt, SubtaskState::Failed, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    let a = lab.attempts(&id, 0).await;
    assert_eq!(a.keys().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), [to], "{a:?}");
}

/// An attempt's folder that vanished (deleted by hand, or by a stale
/// manager) took its claim with it: whoever runs it is unknown. The
/// manager marks the name `Cancel` (a worker running it kills it and
/// acknowledges) and waits for that, or for the declaration of the node's
/// incarnation.
#[tokio::test]
async fn a_vanished_folder_waits_for_an_acknowledgement() {
    let lab = Lab::new().await;
    let id = lab.submit(1, 1).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &ALL, &[]).await;
    let (node, attempt) = lab.claim(&id, 0, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    let name = v2::subtask_name(&id, 1, 0, attempt);
    lab.store.delete_all(&v2::subtask_dir(&n(&node), &name)).await.unwrap();
    for _ in 0..3 {
        lab.manage(&mut m, &ALL, &[]).await;
    }
    let a = lab.attempts(&id, 0).await;
    assert_eq!(a.get(&(node.clone(), attempt)), Some(&vec![SubtaskState::Cancel.file_name()]), "{a:?}");
    assert_eq!(a.len(), 1, "moved while its run may be alive: {a:?}");
    lab.report(&id, 0, &node, attempt, SubtaskState::Failed, 1).await;
    lab.manage(&mut m, &ALL, &[]).await;
    let a = lab.attempts(&id, 0).await;
    assert!(a.len() == 1 && a.keys().all(|(_, next)| *next > attempt), "{a:?}");
}
