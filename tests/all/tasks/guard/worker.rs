//! A worker claims a subtask (creates its `Status.Running` once) only under
//! an open session guard of its incarnation, reads the subtask after the
//! claim, and starts an executor only before the guard's deadline
//! (`src/tasks/worker.rs`, `src/executor/groups.rs`).

use super::*;
use compactd::tasks::worker::{list_node, Worker};

/// A task of one unit dispatched by n1's manager; the worker of the node
/// it went to, its guard open for incarnation 1 until `guard` from now.
async fn dispatched(lab: &Lab, guard: Duration) -> (TaskId, NodeId, Name, Worker) {
    let id = lab.submit(1, 30).await;
    let mut m = TaskManager::new(id);
    lab.manage(&mut m, &[("n1", 1), ("n2", 1), ("n3", 1)], &[]).await;
    let (node, attempt) = lab.only_attempt(&id, 0).await;
    let worker = Worker::new(n(&node));
    let now = lab.clock.mono();
    worker.groups().open(1, now + guard, now);
    (id, n(&node), v2::subtask_name(&id, 1, 0, attempt), worker)
}

async fn round(lab: &Lab, w: &mut Worker, store: &Store, folder: &compactd::tasks::worker::NodeFolder) {
    let deadline = Deadline::new(lab.shared_clock(), lab.clock.mono() + Duration::from_secs(60));
    if let Err(e) = w.round(store, &lab.work, 1, folder, lab.clock.wall_ms(), &deadline).await {
        eprintln!("worker round failed: {e}");
    }
}

/// The worker listed its folder, then the manager moved the attempt away
/// (deleted its folder), then the worker claimed it: the claim lands (it
/// makes the folder again), the info is gone, nothing starts and the claim
/// is removed.
#[tokio::test]
async fn a_claim_after_the_folder_was_removed_starts_nothing() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (_, node, name, mut w) = dispatched(&lab, Duration::from_secs(10)).await;
    let listed = list_node(&lab.store, &node).await.unwrap();
    lab.store.delete_all(&v2::subtask_dir(&node, &name)).await.unwrap();
    round(&lab, &mut w, &lab.store, &listed).await;
    assert_eq!(w.running(), 0);
    assert!(lab.started().is_empty(), "{:?}", lab.started());
    assert!(lab.store.list(&v2::subtask_dir(&node, &name)).await.unwrap().is_empty(), "the claim was left behind");
}

/// The manager took the unstarted attempt back (created its claim) between
/// the worker's listing and its claim: the worker's create loses, it reads
/// the claim, and starts nothing.
#[tokio::test]
async fn a_claim_taken_by_the_manager_first_starts_nothing() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (_, node, name, mut w) = dispatched(&lab, Duration::from_secs(10)).await;
    let listed = list_node(&lab.store, &node).await.unwrap();
    let mark = StatusMark { incarnation: 0, error: Some("taken back".into()), ..Default::default() };
    let claim = v2::subtask_status(&node, &name, SubtaskState::Running);
    lab.store.create(&claim, formats::encode(&mark)).await.unwrap();
    round(&lab, &mut w, &lab.store, &listed).await;
    assert_eq!(w.running(), 0);
    assert!(lab.started().is_empty());
    let left = formats::decode::<StatusMark>(&lab.store.read(&claim).await.unwrap().unwrap()).unwrap();
    assert_eq!(left.incarnation, 0, "the manager's claim was overwritten");
}

/// The claim's create was in flight when the guard's deadline passed (a
/// slow backend, a cut): its reply comes after the deadline. The worker
/// starts nothing (the guard refuses the start), and says so in the
/// attempt's `Failed` mark.
#[tokio::test]
async fn a_claim_whose_reply_comes_after_the_guard_deadline_starts_nothing() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (_, node, name, mut w) = dispatched(&lab, Duration::from_millis(800)).await;
    let listed = list_node(&lab.store, &node).await.unwrap();
    let clock = lab.clock.clone();
    lab.faults.set_on_op(Some(Arc::new(move |kind, p: &str| {
        if kind == store::layers::OpKind::Create && p.ends_with("Status.Running") {
            clock.advance(Duration::from_secs(1));
        }
    })));
    round(&lab, &mut w, &lab.faulty, &listed).await;
    heal(&lab.faults);
    assert_eq!(w.running(), 0);
    assert!(lab.started().is_empty(), "started past the guard: {:?}", lab.started());
    // The refusal is reported at the next round (as an executor that could
    // not start): the attempt is not left claimed by a live-looking runner.
    let listed = list_node(&lab.store, &node).await.unwrap();
    round(&lab, &mut w, &lab.store, &listed).await;
    let failed = lab.store.read(&v2::subtask_status(&node, &name, SubtaskState::Failed)).await.unwrap();
    let failed = formats::decode::<StatusMark>(&failed.expect("a Failed mark")).unwrap();
    assert!(failed.error.as_deref().is_some_and(|e| e.contains("session guard")), "{failed:?}");
}

/// A run started just before the deadline is killed at the deadline: the
/// guard's trip kills every executor it let start.
#[tokio::test]
async fn a_run_started_in_the_last_tick_before_the_deadline_dies_at_it() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (_, node, _, mut w) = dispatched(&lab, Duration::from_millis(500)).await;
    let listed = list_node(&lab.store, &node).await.unwrap();
    round(&lab, &mut w, &lab.store, &listed).await;
    assert_eq!(w.running(), 1);
    wait_for(|| lab.started().len() == 1).await;
    lab.clock.advance(Duration::from_millis(499));
    assert!(w.groups().trip(lab.clock.mono()).is_none(), "tripped before the deadline");
    lab.clock.advance(Duration::from_millis(1));
    let t = w.groups().trip(lab.clock.mono()).expect("tripped at the deadline");
    assert_eq!((t.killed, t.late), (1, Duration::ZERO));
    // Dead: the worker's next round sees its end (and reports it).
    let listed = list_node(&lab.store, &node).await.unwrap();
    for _ in 0..100 {
        round(&lab, &mut w, &lab.store, &listed).await;
        if w.running() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(w.running(), 0, "the run outlived the guard");
    // And nothing starts again under this incarnation.
    assert!(!w.groups().may_start(1, lab.clock.mono()));
}

/// The manager takes a live run back (`Cancel` mark): the worker kills it
/// and, once it is dead, writes its end (`Failed`): the acknowledgement the
/// manager waits for before the unit goes elsewhere.
#[tokio::test]
async fn a_cancelled_run_is_killed_and_acknowledged_once_dead() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new().await;
    let (_, node, name, mut w) = dispatched(&lab, Duration::from_secs(60)).await;
    let listed = list_node(&lab.store, &node).await.unwrap();
    round(&lab, &mut w, &lab.store, &listed).await;
    assert_eq!(w.running(), 1);
    wait_for(|| lab.started().len() == 1).await;
    lab.store.put(&v2::subtask_status(&node, &name, SubtaskState::Cancel), b"{}".to_vec()).await.unwrap();
    let failed = v2::subtask_status(&node, &name, SubtaskState::Failed);
    for _ in 0..100 {
        let listed = list_node(&lab.store, &node).await.unwrap();
        round(&lab, &mut w, &lab.store, &listed).await;
        if lab.store.read(&failed).await.unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lab.store.read(&failed).await.unwrap().is_some(), "no acknowledgement");
    assert_eq!(w.running(), 0);
}

/// Layout 3: the worker's claim landed but its reply was lost, and the
/// batch was released before the worker listed it again (a drain, or its
/// manager taking it back): the worker starts nothing and reports the unit
/// ended (`Failed`, released before it started), so that its manager moves
/// it on at once instead of waiting for the incarnation's end.
#[tokio::test]
async fn an_own_claim_whose_reply_was_lost_then_released_is_reported_not_left() {
    let _turn = crate::common::turns::waits();
    let lab = Lab::new_in(3).await;
    let id = lab.submit(1, 30).await;
    let mut m = TaskManager::new(id);
    let members = [("n1", 1), ("n2", 1), ("n3", 1)];
    lab.manage(&mut m, &members, &[]).await;
    let (node, attempt) = lab.claim(&id, 0, 1).await;
    let batch = lab.batch_of(&id, &node, 0, attempt).await;
    lab.store.create(&v3::batch_released(&n(&node), &batch), Vec::new()).await.unwrap();
    let mut w = Worker::new(n(&node));
    let now = lab.clock.mono();
    w.groups().open(1, now + Duration::from_secs(60), now);
    let failed = v3::unit_mark(&n(&node), &batch, 0, attempt, v3::Mark::Failed);
    for _ in 0..3 {
        let listed = list_node(&lab.store, &n(&node)).await.unwrap();
        round(&lab, &mut w, &lab.store, &listed).await;
    }
    assert_eq!(w.running(), 0);
    assert!(lab.started().is_empty(), "{:?}", lab.started());
    let mark = lab.store.read(&failed).await.unwrap().expect("the released unit was never reported");
    let mark = formats::decode::<StatusMark>(&mark).unwrap();
    assert!(mark.error.as_deref().is_some_and(|e| e.contains("released")), "{mark:?}");
    // Its manager moves it on now (a released attempt's end is no failure).
    lab.manage(&mut m, &members, &[]).await;
    lab.manage(&mut m, &members, &[]).await;
    let attempts = lab.attempts(&id, 0).await;
    assert!(attempts.keys().any(|(_, a)| *a > attempt), "not dispatched again: {attempts:?}");
}
