//! The planner on memory stores: decisions exactly once (two planners, a
//! crash between the steps of a decision), pause, fair share, windows and
//! schedules. Task execution is simulated by writing `Status.Done`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use layouts::formats::{self, Lease, Member};
use layouts::policies::{self as paths, DecisionFile};
use layouts::{v2, Name, NodeId, TaskId, TaskState};
use store::Store;

use super::*;
use crate::tasks;

/// 2026-11-25T01:00:00Z.
pub(super) const T0: u64 = 1_795_568_400_000;
pub(super) const HOUR: u64 = 3_600_000;

pub(super) fn n(s: &str) -> Name {
    Name::parse(s).unwrap()
}

fn node(s: &str) -> NodeId {
    NodeId::parse(s).unwrap()
}

/// Executor slots of the test cluster's one member: the planner keeps
/// twice that in flight at most.
const SLOTS: u32 = 8;

fn lease(slots: u32) -> Lease {
    Lease {
        epoch: 1,
        holder: node("n1"),
        holder_incarnation: 1,
        renewal: 1,
        lease_ms: 1500,
        wall_ms: T0,
        members: vec![Member {
            node: node("n1"),
            incarnation: 1,
            session_timeout_ms: 1500,
            commands: vec!["stats".into()],
            addr: None,
            executor: None,
            executors: None,
            slots: Some(slots),
            layouts: None,
            draining: false,
        }],
        offline: vec![],
        last_event: 0,
        released: false,
        layout: None,
    }
}

fn cap(slots: u32) -> Capacity {
    Capacity::of(Some(&lease(slots)))
}

async fn with_member(store: &Store) {
    store.create(&v2::lease(1), formats::encode(&lease(SLOTS))).await.unwrap();
}

pub(super) async fn stores() -> (Store, Store) {
    let (tree, data) = (Store::memory().await, Store::memory().await);
    with_member(&tree).await;
    (tree, data)
}

/// `files` small files in `<db>/public/<table>/<partition>/`.
pub(super) async fn write(data: &Store, table: &str, partition: &str, files: usize) {
    for i in 0..files {
        let path = format!("db/public/{table}/{partition}/f{i:04}.txt");
        data.put(&path, format!("row {i}\n")).await.unwrap();
    }
}

pub(super) async fn apply(store: &Store, extra: &str) {
    let text = format!(
        "name = \"warehouse\"\ntables = [\"db/public/*\"]\nmin-small-files = 4\nmin-interval = \"0s\"\n{extra}"
    );
    let def = spec::parse("w.toml", &text).unwrap();
    define::apply(store, def, "test", T0).await.unwrap();
}

pub(super) fn planner(id: &str) -> Planner {
    Planner::new(PlannerConfig { interval: Duration::ZERO, budget: 10_000, ..Default::default() }, node(id))
}

/// Runs rounds until a pass ends.
pub(super) async fn pass(p: &mut Planner, tree: &Store, data: &Store, wall_ms: u64) -> PlanReport {
    pass_with(p, tree, data, &cap(SLOTS), wall_ms).await
}

async fn pass_with(p: &mut Planner, tree: &Store, data: &Store, cap: &Capacity, wall_ms: u64) -> PlanReport {
    let mut all = PlanReport::default();
    for i in 0..100u64 {
        let r = p.round(tree, data, cap, Duration::from_secs(i), wall_ms).await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        all.submitted.extend(r.submitted);
        if r.pass_ended {
            return all;
        }
    }
    panic!("the pass did not end");
}

pub(super) async fn task_ids(tree: &Store) -> Vec<TaskId> {
    let mut v = tasks::list_ids(tree).await.unwrap();
    v.sort();
    v
}

pub(super) async fn finish(tree: &Store, id: &TaskId) {
    tree.create(&v2::task_status(id, TaskState::Done), Vec::new()).await.unwrap();
}

#[tokio::test]
async fn a_due_partition_is_submitted_once_and_again_only_after_its_task_ended() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 5).await;
    write(&data, "t1", "p2", 3).await;
    let mut p = planner("n1");
    let r = pass(&mut p, &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    assert!(r.submitted[0].starts_with("db/public/t1/p1 "), "{:?}", r.submitted);
    let ids = task_ids(&tree).await;
    let info = tasks::read_info(&tree, &ids[0]).await.unwrap();
    assert_eq!(info.run.partitions, vec![n("p1")]);
    assert_eq!(info.run.params.get(paths::MARKER_PARAM).map(String::as_str), Some("db/public/t1/p1#1"));
    // Still running: never submitted again, whatever the small files.
    write(&data, "t1", "p1", 9).await;
    assert!(pass(&mut p, &tree, &data, T0 + 1000).await.submitted.is_empty());
    finish(&tree, &ids[0]).await;
    let r = pass(&mut p, &tree, &data, T0 + 2000).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    assert_eq!(task_ids(&tree).await.len(), 2);
    // The first decision's files are removed at the visit after the second.
    assert!(pass(&mut p, &tree, &data, T0 + 3000).await.submitted.is_empty());
    let decisions: Vec<String> = tree
        .list(&paths::decisions_dir(&n("db"), &n("public"), &n("t1")))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name().to_string())
        .collect();
    assert!(decisions.iter().all(|d| d.contains(".0000000002.")), "{decisions:?}");
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].summary.small_files, views[0].summary.in_flight), (12, 1));
}

#[tokio::test]
async fn two_planners_at_once_take_each_decision_once() {
    let (tree, data) = stores().await;
    apply(&tree, "max-units-per-table = 8").await;
    for part in ["p1", "p2", "p3", "p4"] {
        write(&data, "t1", part, 4).await;
    }
    let (mut a, mut b) = (planner("n1"), planner("n2"));
    let (ra, rb) = futures::join!(pass(&mut a, &tree, &data, T0), pass(&mut b, &tree, &data, T0));
    assert_eq!(ra.submitted.len() + rb.submitted.len(), 4, "{:?} {:?}", ra.submitted, rb.submitted);
    assert_eq!(task_ids(&tree).await.len(), 4);
}

#[tokio::test]
async fn a_decision_whose_author_died_after_submitting_is_recorded_not_doubled() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    pass(&mut planner("n1"), &tree, &data, T0).await;
    // As if n1 died between the submit and the `.Task` record.
    let task = paths::decision(&n("db"), &n("public"), &n("t1"), &n("p1"), 1, DecisionFile::Task);
    tree.delete(&task).await.unwrap();
    tree.delete(&paths::table_summary(&n("db"), &n("public"), &n("t1"))).await.unwrap();
    let r = pass(&mut planner("n2"), &tree, &data, T0 + 1000).await;
    assert!(r.submitted.is_empty(), "{:?}", r.submitted);
    assert_eq!(task_ids(&tree).await.len(), 1);
    assert!(tree.exists(&task).await.unwrap(), "the found task is recorded");
}

/// Creates the claim of partition `p` of `db/public/t1` (decision 1) as
/// planner `by` left it, with the group `partitions`.
async fn claim(tree: &Store, p: &str, by: &str, marker: &str, partitions: &[&str]) {
    let claim = paths::DecisionClaim {
        policy: n("warehouse"),
        policy_version: 1,
        by: by.into(),
        wall_ms: T0,
        marker: marker.into(),
        why: "test".into(),
        partitions: partitions.iter().map(|p| p.to_string()).collect(),
    };
    let path = paths::decision(&n("db"), &n("public"), &n("t1"), &n(p), 1, DecisionFile::Claim);
    tree.create(&path, formats::encode(&claim)).await.unwrap();
}

#[tokio::test]
async fn a_decision_whose_author_died_before_submitting_is_submitted_once_after_the_grace() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    claim(&tree, "p1", "n1", "db/public/t1/p1#1", &[]).await;
    // Within the grace, n1 may still be submitting: n2 waits.
    assert!(pass(&mut planner("n2"), &tree, &data, T0 + 1000).await.submitted.is_empty());
    assert!(task_ids(&tree).await.is_empty());
    let later = T0 + crate::jobs::drive::CLAIM_GRACE_MS + 1;
    assert_eq!(pass(&mut planner("n2"), &tree, &data, later).await.submitted.len(), 1);
    assert!(pass(&mut planner("n3"), &tree, &data, later + 1).await.submitted.is_empty());
    assert_eq!(task_ids(&tree).await.len(), 1);
}

#[tokio::test]
async fn a_group_decision_whose_author_died_before_submitting_is_submitted_once_as_one_task_for_the_group() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let group = ["p1", "p2", "p3"];
    for p in group {
        write(&data, "t1", p, 4).await;
        claim(&tree, p, "n1", "db/public/t1/p1#1", &group).await;
    }
    assert!(pass(&mut planner("n2"), &tree, &data, T0 + 1000).await.submitted.is_empty(), "within the grace");
    let later = T0 + crate::jobs::drive::CLAIM_GRACE_MS + 1;
    let r = pass(&mut planner("n2"), &tree, &data, later).await;
    assert_eq!(r.submitted.len(), 1, "one task for the group: {:?}", r.submitted);
    assert!(pass(&mut planner("n3"), &tree, &data, later + 1).await.submitted.is_empty());
    let ids = task_ids(&tree).await;
    assert_eq!(ids.len(), 1);
    let info = tasks::read_info(&tree, &ids[0]).await.unwrap();
    assert_eq!(info.run.partitions, group.map(n).to_vec());
    assert_eq!(info.run.params[paths::MARKER_PARAM], "db/public/t1/p1#1");
    for p in group {
        let path = paths::decision(&n("db"), &n("public"), &n("t1"), &n(p), 1, DecisionFile::Task);
        let recorded: paths::DecisionTask = serde_json::from_slice(&tree.read(&path).await.unwrap().unwrap()).unwrap();
        assert_eq!(recorded.task, ids[0], "{p} records the group's task");
    }
}

#[tokio::test]
async fn a_recovered_group_submits_only_the_claims_its_author_won() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let group = ["p1", "p2", "p3"];
    // n1 tried the three as one group but lost p2 to n9 (its create came
    // back Exists), whose own group attempt won only p2; both died before
    // submitting.
    for p in group {
        write(&data, "t1", p, 4).await;
        let (by, marker) = if p == "p2" { ("n9", "db/public/t1/p2#1") } else { ("n1", "db/public/t1/p1#1") };
        claim(&tree, p, by, marker, &group).await;
    }
    let later = T0 + crate::jobs::drive::CLAIM_GRACE_MS + 1;
    pass(&mut planner("n2"), &tree, &data, later).await;
    pass(&mut planner("n3"), &tree, &data, later + 1).await;
    let mut got = vec![];
    for id in task_ids(&tree).await {
        let info = tasks::read_info(&tree, &id).await.unwrap();
        got.push((info.run.params[paths::MARKER_PARAM].clone(), info.run.partitions));
    }
    got.sort();
    assert_eq!(
        got,
        vec![("db/public/t1/p1#1".into(), vec![n("p1"), n("p3")]), ("db/public/t1/p2#1".into(), vec![n("p2")])],
        "each partition in the task of the claim that holds it, once"
    );
}

#[tokio::test]
async fn a_paused_policy_submits_nothing_until_resumed() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    define::pause(&tree, &n("warehouse"), "test", T0).await.unwrap();
    let mut p = planner("n1");
    assert!(pass(&mut p, &tree, &data, T0).await.submitted.is_empty());
    define::resume(&tree, &n("warehouse")).await.unwrap();
    assert_eq!(pass(&mut p, &tree, &data, T0).await.submitted.len(), 1);
}

/// Submitted per table in `r`.
fn per(r: &PlanReport, t: &str) -> usize {
    r.submitted.iter().filter(|s| s.starts_with(&format!("db/public/{t}/"))).count()
}

#[tokio::test]
async fn a_table_alone_with_a_backlog_takes_every_free_slot_and_small_tables_go_first() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    for i in 0..100 {
        write(&data, "big", &format!("p{i:03}"), 4).await;
    }
    // Alone: every slot and one unit waiting behind each.
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(per(&r, "big"), 2 * SLOTS as usize, "{:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let s = &views[0].summary;
    assert_eq!((s.in_flight, s.queued), (16, 84), "{}", s.state);
    assert!(s.state.contains("84 due partition(s) waiting for a free slot"), "{}", s.state);

    // Beside five small tables: one each first, the rest to the big one.
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    for i in 0..100 {
        write(&data, "big", &format!("p{i:03}"), 4).await;
    }
    for t in ["a", "b", "c", "d", "e"] {
        write(&data, t, "p1", 4).await;
    }
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(per(&r, "big"), 2 * SLOTS as usize - 5, "{:?}", r.submitted);
    for t in ["a", "b", "c", "d", "e"] {
        assert_eq!(per(&r, t), 1, "{t}: {:?}", r.submitted);
    }
}

#[tokio::test]
async fn tables_with_backlogs_share_the_slots_by_weight_and_a_cap_holds() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let heavy =
        "name = \"heavy\"\ntables = [\"db/public/h*\"]\nmin-small-files = 4\nmin-interval = \"0s\"\nweight = 3\n";
    define::apply(&tree, spec::parse("h.toml", heavy).unwrap(), "test", T0).await.unwrap();
    for i in 0..40 {
        write(&data, "light", &format!("p{i:03}"), 4).await;
        write(&data, "heavy", &format!("p{i:03}"), 4).await;
    }
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!((per(&r, "light"), per(&r, "heavy")), (4, 12), "{:?}", r.submitted);

    let (tree, data) = stores().await;
    apply(&tree, "max-units-per-table = 3").await;
    for i in 0..40 {
        write(&data, "t1", &format!("p{i:03}"), 4).await;
    }
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(per(&r, "t1"), 3, "{:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert!(
        views[0].summary.capped && views[0].summary.state.contains("at its cap of 3"),
        "{:?}",
        views[0].summary.state
    );
}

/// Planning on change: as tasks end, a change round submits into the
/// slots that freed without listing any table (it is given an empty data
/// store here). Told how many ended, it looks at the oldest tasks in
/// flight until it found them and the next is still running: a listing
/// each here (they end in the order they were submitted), plus its
/// policy's listing and the summary's write, besides the decisions' own
/// requests. Told fewer than ended (one poke for a manager's tick that
/// ended two), it still finds them all.
#[tokio::test]
async fn a_change_round_fills_the_freed_slots_without_listing_tables() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    for i in 0..40 {
        write(&data, "big", &format!("p{i:03}"), 4).await;
    }
    // One unit waiting per slot whatever the round trips.
    let cfg = PlannerConfig { interval: Duration::ZERO, budget: 10_000, max_waiting_per_slot: 1, ..Default::default() };
    let mut p = Planner::new(cfg, node("n1"));
    let first = pass(&mut p, &tree, &data, T0).await;
    assert_eq!(first.submitted.len(), 16);
    let nothing = Store::memory().await;
    let (mut rounds, mut extra, mut ended) = (0, 0, 0);
    while task_ids(&tree).await.len() < 40 {
        // Two units end, then a change round.
        let mut open = vec![];
        for id in task_ids(&tree).await {
            if !tree.exists(&v2::task_status(&id, TaskState::Done)).await.unwrap() {
                open.push(id);
            }
        }
        for id in open.iter().take(2) {
            finish(&tree, id).await;
        }
        let told = if rounds % 2 == 0 { 2 } else { 1 };
        let r = p.changed(&tree, &nothing, &cap(SLOTS), T0 + 1000, told).await;
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!((r.ended, r.submitted.len()), (2, 2), "round {rounds}");
        // The decisions' own requests: a claim, the submit, the record.
        extra += r.requests - 8 * r.submitted.len() as u64;
        ended += r.ended;
        rounds += 1;
        assert!(rounds < 20);
    }
    eprintln!(
        "planning on change: {:.1} requests per finished unit besides the decisions' own",
        extra as f64 / ended as f64
    );
    // Per round: two ended and the first still running listed, the
    // policy's listing, the summary's write.
    assert!(extra <= 5 * rounds, "{extra} extra requests for {ended} units in {rounds} rounds");
    // Paused: the next change round submits nothing more.
    write(&data, "big", "p999", 4).await;
    pass(&mut p, &tree, &data, T0 + 2000).await;
    define::pause(&tree, &n("warehouse"), "test", T0).await.unwrap();
    for id in task_ids(&tree).await {
        let _ = tree.create(&v2::task_status(&id, TaskState::Done), Vec::new()).await;
    }
    let r = p.changed(&tree, &nothing, &cap(SLOTS), T0 + 3000, 100).await;
    assert!(r.submitted.is_empty(), "{:?}", r.submitted);
}

/// Tasks that round trip (decision to seen ended) in a fraction of the
/// heartbeat let up to three units wait behind each slot, so that slots
/// do not idle through the round trips of short units; round trips
/// longer than the heartbeat bring it back to one.
#[tokio::test]
async fn short_round_trips_let_three_units_wait_behind_each_slot_and_long_ones_one() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    for i in 0..200 {
        write(&data, "big", &format!("p{i:03}"), 4).await;
    }
    let mut p = planner("n1");
    assert_eq!(pass(&mut p, &tree, &data, T0).await.submitted.len(), 2 * SLOTS as usize);
    assert_eq!(p.waiting_per_slot(), 1, "no round trip seen yet");
    let end_all = |tree: Store| async move {
        let mut n = 0;
        for id in task_ids(&tree).await {
            n += u64::from(tree.create(&v2::task_status(&id, TaskState::Done), Vec::new()).await.is_ok());
        }
        n
    };
    // Half a second from decision to end, the heartbeat 10 s: three wait.
    let n = end_all(tree.clone()).await;
    let r = p.changed(&tree, &data, &cap(SLOTS), T0 + 500, n).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((p.waiting_per_slot(), r.submitted.len()), (3, 4 * SLOTS as usize));
    // Twenty seconds, over the heartbeat: one waits again.
    let n = end_all(tree.clone()).await;
    let r = p.changed(&tree, &data, &cap(SLOTS), T0 + 20_500, n).await;
    assert_eq!((p.waiting_per_slot(), r.submitted.len()), (1, 2 * SLOTS as usize));
}

#[tokio::test]
async fn a_policy_naming_a_command_no_live_node_defines_is_held_with_the_reason() {
    let (tree, data) = stores().await;
    apply(&tree, "executor = \"compact_orc\"").await;
    write(&data, "t1", "p1", 4).await;
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert!(r.submitted.is_empty(), "{:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let s = &views[0].summary;
    assert!(
        s.state.contains("no live node defines command \"compact_orc\"") && s.state.contains("stats"),
        "{}",
        s.state
    );
    assert!(task_ids(&tree).await.is_empty());
}

#[tokio::test]
async fn the_most_specific_pattern_owns_a_table_even_while_paused() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let text = "name = \"orders\"\ntables = [\"db/public/orders\"]\nmin-small-files = 2\nmin-interval = \"0s\"\n";
    define::apply(&tree, spec::parse("o.toml", text).unwrap(), "test", T0).await.unwrap();
    define::pause(&tree, &n("orders"), "test", T0).await.unwrap();
    write(&data, "orders", "p1", 4).await;
    write(&data, "events", "p1", 4).await;
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    assert!(r.submitted[0].starts_with("db/public/events/"), "{:?}", r.submitted);
}

#[tokio::test]
async fn windows_and_schedules_gate_the_planner() {
    let (tree, data) = stores().await;
    // 02:00-03:00 UTC only, and once per day at 02:00.
    apply(&tree, "windows = [\"02:00-03:00\"]\nschedule = \"0 2 * * *\"\n").await;
    write(&data, "t1", "p1", 4).await;
    let mut p = planner("n1");
    assert!(pass(&mut p, &tree, &data, T0).await.submitted.is_empty(), "01:00: outside the window");
    assert_eq!(pass(&mut p, &tree, &data, T0 + HOUR + 30_000).await.submitted.len(), 1, "02:00:30: fired");
    let ids = task_ids(&tree).await;
    finish(&tree, &ids[0]).await;
    write(&data, "t1", "p2", 4).await;
    // A new monitor the same night: the fire was planned (LastPass).
    assert!(pass(&mut planner("n2"), &tree, &data, T0 + HOUR + 600_000).await.submitted.is_empty());
    // The next night, after two days down: one pass, both due partitions.
    let r = pass(&mut planner("n2"), &tree, &data, T0 + 49 * HOUR + 60_000).await;
    assert_eq!(r.submitted.len(), 2, "{:?}", r.submitted);
}

#[tokio::test]
async fn dry_run_judges_without_writing() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    let before: Vec<String> = tree.list_stream("", true).map_ok(|e| e.path).try_collect().await.unwrap();
    let dry = view::plan(&tree, &data, T0).await.unwrap();
    assert_eq!(dry.would_submit.len(), 1, "{dry:?}");
    assert!(dry.would_submit[0].starts_with("db/public/t1/p1: 4 small files >= 4"), "{dry:?}");
    let after: Vec<String> = tree.list_stream("", true).map_ok(|e| e.path).try_collect().await.unwrap();
    assert_eq!(before, after);
}

/// Runs one round; asserts it had no errors.
async fn round(p: &mut Planner, tree: &Store, data: &Store, i: u64, wall_ms: u64) -> PlanReport {
    let r = p.round(tree, data, &cap(SLOTS), Duration::from_secs(i), wall_ms).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    r
}

#[tokio::test]
async fn a_policy_paused_while_its_pass_goes_on_submits_nothing_from_the_next_round() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    for t in ["t1", "t2", "t3"] {
        write(&data, t, "p1", 4).await;
    }
    // A budget of one request: each round visits at most one table.
    let mut p = Planner::new(PlannerConfig { interval: Duration::ZERO, budget: 1, ..Default::default() }, node("n1"));
    let mut submitted = vec![];
    let mut i = 0;
    while submitted.is_empty() {
        submitted = round(&mut p, &tree, &data, i, T0).await.submitted;
        i += 1;
        assert!(i < 10, "nothing submitted");
    }
    assert_eq!(submitted.len(), 1, "{submitted:?}");
    define::pause(&tree, &n("warehouse"), "test", T0).await.unwrap();
    let r = round(&mut p, &tree, &data, i, T0).await;
    assert!(r.submitted.is_empty(), "{:?}", r.submitted);
    assert!(r.pass_ended, "the paused policy's tables left the pass");
    assert_eq!(task_ids(&tree).await.len(), 1);
}

#[tokio::test]
async fn a_table_listed_over_several_rounds_is_judged_whole_within_each_rounds_budget() {
    let (tree, data) = stores().await;
    apply(&tree, "max-units-per-table = 8").await;
    assert!(data.lists_from_key());
    // 2,500 files: three listing pages, one a round at a budget of 2.
    for part in ["p1", "p2", "p3", "p4", "p5"] {
        write(&data, "big", part, 500).await;
    }
    let mut p = Planner::new(PlannerConfig { interval: Duration::ZERO, budget: 2, ..Default::default() }, node("n1"));
    let (mut rounds, mut submitted) = (0, vec![]);
    loop {
        let r = round(&mut p, &tree, &data, rounds, T0).await;
        rounds += 1;
        if rounds > 1 && submitted.is_empty() && !r.pass_ended {
            // A round that only lists: its recheck and at most its budget.
            assert!(r.requests <= 1 + 2, "a listing round spent {} requests", r.requests);
        }
        submitted.extend(r.submitted);
        if r.pass_ended {
            // Due partitions left for lack of budget: submitted by the
            // rounds that follow at once, a decision at least each.
            let mut more = r.more;
            while more {
                let r = p.changed(&tree, &data, &cap(SLOTS), T0, 0).await;
                assert!(r.errors.is_empty(), "{:?}", r.errors);
                assert!(!r.submitted.is_empty());
                submitted.extend(r.submitted);
                more = r.more;
            }
            break;
        }
        assert!(rounds < 20, "the pass did not end");
    }
    assert!(rounds >= 3, "the listing went on over rounds ({rounds})");
    assert_eq!(submitted.len(), 5, "{submitted:?}");
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert_eq!((views[0].summary.files, views[0].summary.partitions), (2500, 5));
}

/// Fair share, simulated: each round is one planner pass, then `slots`
/// workers run the oldest unfinished tasks (a task's compaction removes its
/// partition's small files), and every small table gets a new due
/// partition. Returns, per small table's partition, the round its task
/// finished in.
async fn finishing_rounds(big_backlog: usize, slots: usize, rounds: u64) -> BTreeMap<String, u64> {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let cap = cap(slots as u32);
    for i in 0..big_backlog {
        write(&data, "big", &format!("p{i:03}"), 4).await;
    }
    let small: Vec<String> = (1..=9).map(|i| format!("s{i}")).collect();
    let mut p = planner("n1");
    let mut done = BTreeMap::new();
    for r in 0..rounds {
        for t in &small {
            write(&data, t, &format!("r{r:02}"), 4).await;
        }
        pass_with(&mut p, &tree, &data, &cap, T0 + r * 1000).await;
        let mut open = vec![];
        for id in task_ids(&tree).await {
            if !tree.exists(&v2::task_status(&id, TaskState::Done)).await.unwrap() {
                open.push(id);
            }
        }
        for id in open.into_iter().take(slots) {
            let info = tasks::read_info(&tree, &id).await.unwrap();
            let marker = info.run.params[paths::MARKER_PARAM].clone();
            let (table_part, _) = marker.rsplit_once('#').unwrap();
            for e in data.list_stream(&format!("{table_part}/"), true).try_collect::<Vec<_>>().await.unwrap() {
                data.delete(&e.path).await.unwrap();
            }
            finish(&tree, &id).await;
            if !table_part.starts_with("db/public/big/") {
                done.insert(table_part.to_string(), r);
            }
        }
    }
    done
}

/// The look-ahead at its most here: a simulated round is a second, a
/// tenth of the heartbeat, so three units wait behind each slot.
#[tokio::test]
async fn a_table_with_100x_the_backlog_delays_no_other_table_by_more_than_one_round() {
    // 9 small tables gain a due partition each round; 12 workers.
    let (slots, rounds) = (12, 8);
    let alone = finishing_rounds(1, slots, rounds).await;
    let beside = finishing_rounds(100, slots, rounds).await;
    let mut worst = 0;
    for (part, r) in &alone {
        let with_big = beside.get(part).copied().unwrap_or(rounds);
        worst = worst.max(with_big.saturating_sub(*r));
        assert!(with_big <= r + 1, "{part}: round {r} alone, {with_big} beside the backlog");
    }
    eprintln!(
        "fair share: {} small partitions; worst extra delay beside a 100x backlog: {worst} round(s)",
        alone.len()
    );
    assert!(alone.len() >= 9 * (rounds as usize - 1), "{alone:?}");
}

#[tokio::test]
async fn a_bad_decision_file_holds_its_partition_and_not_the_table() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    write(&data, "t1", "p2", 4).await;
    let claim = paths::decision(&n("db"), &n("public"), &n("t1"), &n("p1"), 1, DecisionFile::Claim);
    tree.create(&claim, b"not json".to_vec()).await.unwrap();
    let r = pass(&mut planner("n1"), &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    assert!(r.submitted[0].starts_with("db/public/t1/p2 "), "{:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let p1 = views[0].summary.detail.iter().find(|d| d.partition == "p1").unwrap();
    assert!(p1.in_flight && p1.why.contains(&claim), "{p1:?}");
}

#[tokio::test]
async fn a_stopped_task_holds_its_partition_until_its_executors_have_surely_ended() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    let mut p = planner("n1");
    assert_eq!(pass(&mut p, &tree, &data, T0).await.submitted.len(), 1);
    let id = task_ids(&tree).await[0];
    // Stopped: the manager deleted the units' folders and wrote Cancel, but
    // a worker may not have noticed yet.
    tree.create(&v2::task_status(&id, TaskState::Cancel), Vec::new()).await.unwrap();
    let settle = PlannerConfig::default().stop_settle.as_millis() as u64;
    let seen = T0 + 1000;
    assert!(pass(&mut p, &tree, &data, seen).await.submitted.is_empty());
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let d = &views[0].summary.detail[0];
    assert!(d.in_flight && d.why.contains("stopped"), "{d:?}");
    assert!(pass(&mut p, &tree, &data, seen + settle - 1).await.submitted.is_empty());
    assert_eq!(pass(&mut p, &tree, &data, seen + settle).await.submitted.len(), 1);
}

#[tokio::test]
async fn a_deleted_policy_hands_its_tables_on_and_its_running_decision_is_kept() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    let text = "name = \"orders\"\ntables = [\"db/public/orders\"]\nmin-small-files = 2\nmin-interval = \"0s\"\n";
    define::apply(&tree, spec::parse("o.toml", text).unwrap(), "test", T0).await.unwrap();
    write(&data, "orders", "p1", 4).await;
    let mut p = planner("n1");
    let r = pass(&mut p, &tree, &data, T0).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert_eq!(views[0].summary.policy, "orders");

    assert_eq!(define::delete(&tree, &n("orders")).await.unwrap(), 1);
    let mut bad = vec![];
    let names: Vec<String> =
        define::list(&tree, &mut bad).await.unwrap().iter().map(|r| r.definition.name.to_string()).collect();
    assert_eq!(names, ["warehouse"]);
    assert!(matches!(define::delete(&tree, &n("orders")).await, Err(PolicyError::NotFound { .. })));
    assert_eq!(define::version(&tree, &n("orders"), 1).await.unwrap().version, 1, "the version log is kept");
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert!(views[0].policy_deleted, "{views:?}");

    // The table now belongs to the less specific policy, which waits for
    // the deleted one's task like for its own.
    let r = pass(&mut p, &tree, &data, T0 + 1000).await;
    assert!(r.submitted.is_empty(), "a partition with a task in flight: {:?}", r.submitted);
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    assert_eq!((views[0].summary.policy.as_str(), views[0].policy_deleted), ("warehouse", false));
    finish(&tree, &task_ids(&tree).await[0]).await;
    let r = pass(&mut p, &tree, &data, T0 + 2000).await;
    assert_eq!(r.submitted.len(), 1, "{:?}", r.submitted);

    // Applied again, the name goes on from its logged versions.
    let again = define::apply(&tree, spec::parse("o.toml", text).unwrap(), "test", T0).await.unwrap();
    assert_eq!(again.version, 2);
}

/// A planner reads a table's summary once: it remembers what it read or
/// wrote (within its epoch it is the only writer), so a pass over idle
/// tables lists and reads only the policies' files and lists each table's
/// `Decisions/` (and its data), writing nothing; a table that changed is
/// still written; a new planner (a new monitor) reads the summaries again.
#[tokio::test]
async fn a_planner_reads_each_summary_once_and_still_writes_what_changed() {
    use store::layers::{CountingLayer, OpCounter};
    let counter = OpCounter::new();
    let c = counter.clone();
    let (tree, data) = stores().await;
    let tree = tree.layered(move |op| op.layer(CountingLayer::new(c.clone())));
    apply(&tree, "").await;
    for t in ["t1", "t2", "t3"] {
        write(&data, t, "p1", 1).await;
    }
    let mut p = planner("n1");
    let before = counter.snapshot();
    pass(&mut p, &tree, &data, T0).await;
    let first = counter.snapshot() - before;
    // The policies' listing, the policy's folder, each table's Decisions/.
    let listings = 1 + 1 + 3;
    assert_eq!((first.read, first.put, first.list), (1 + 3, 3, listings), "a first pass: {first}");
    let before = counter.snapshot();
    pass(&mut p, &tree, &data, T0 + 1000).await;
    let idle = counter.snapshot() - before;
    assert_eq!((idle.read, idle.total()), (1, 1 + listings), "an idle pass reads the policy only: {idle}");
    write(&data, "t2", "p2", 1).await;
    let before = counter.snapshot();
    pass(&mut p, &tree, &data, T0 + 2000).await;
    let changed = counter.snapshot() - before;
    assert_eq!((changed.read, changed.put), (1, 1), "the changed table's summary is written: {changed}");
    let views = view::tables(&tree, usize::MAX, &mut vec![], T0).await.unwrap();
    let t2 = views.iter().find(|v| v.summary.table == "t2").unwrap();
    assert_eq!(t2.summary.partitions, 2);
    let before = counter.snapshot();
    pass(&mut planner("n2"), &tree, &data, T0 + 3000).await;
    let fresh = counter.snapshot() - before;
    assert_eq!((fresh.read, fresh.put), (1 + 3, 0), "a new planner reads every summary, writes none: {fresh}");
}
