//! Replays of the seeds the chaos found, each named after what it caught.

use super::*;

/// Replays `seed` without the task layer (the regression tests below).
fn regression(seed: u64) {
    let rt = runtime();
    if let Err(f) = run_seed_with(&rt, seed, false) {
        panic!("{f}");
    }
}

/// Seed 0: at t=8661 ms n1 wins `Lease.2` (atomic create succeeds), then
/// the LIST of `Election/` that `Election::try_take` does to delete old
/// leases fails. `try_take` has already made n1 leader, but returns the
/// error instead of `Step::Elected`, so `Node::election_round` never starts
/// its `Monitor`: n1 renews `Lease.2` forever with `is_monitor() == false`,
/// nobody takes over, and nobody joins, declares or cleans anything again.
#[test]
fn leader_without_monitor_after_an_error_behind_a_won_election() {
    let _turn = crate::common::turns::waits();
    regression(0);
}

/// Seed 16: the same end state by the other way in: n4 wins `Lease.2` at
/// t=5249 ms, `Step::Elected` reaches `Node::election_round`, and
/// `Monitor::start` fails on a transient error (the LIST of
/// `Registry/Events/` in `EventLog::open`). `Node::monitor_failed` treats it
/// as transient ("the monitor state stays, the scan is retried") but
/// `self.monitor` is `None`, so nothing retries the start: n4 renews its lease
/// forever as a leader without a monitor.
/// Suggested fix for both: in `Node::tick`, when `election.is_leader()` and
/// `monitor.is_none()`, (re)try `Monitor::start` (keep `previous` from the
/// `Elected` step); and make the old-lease cleanup in `Election::try_take`
/// best-effort (log, do not `?`), so a won election always returns `Elected`.
#[test]
fn leader_without_monitor_after_an_error_in_monitor_start() {
    let _turn = crate::common::turns::waits();
    regression(16);
}

/// Seed 29: monitor n2 (epoch 1) declares n5's dead incarnation offline at
/// t=9366 ms: the marker is created and the `NodeOffline` event appended,
/// then the delete of n5's heartbeat loses its reply (the file is deleted,
/// the call fails). `Monitor::declare_offline` returns the error before it
/// records the declaration (`self.offline`, marker update); on the next scan
/// the heartbeat is gone, so n2 logs `NodeLeft` for the same incarnation, and
/// the marker stays `cleaned: false` (with `event_seq: None`) for as long as
/// n2 is monitor: only `Monitor::start` finishes uncleaned markers, and
/// `purge` only deletes cleaned ones.
#[test]
fn offline_declaration_left_uncleaned_after_a_failed_cleanup() {
    let _turn = crate::common::turns::waits();
    regression(29);
}

/// Seed 105641 (found by a long run): the create of an offline marker landed
/// but its reply was lost, so the declaration was never recorded and the node
/// came back under a new incarnation: the marker stayed `cleaned: false`
/// forever. Fixed by deciding in memory before the create and finishing
/// pending declarations (re-creating a missing marker) on every scan.
#[test]
fn an_offline_marker_whose_create_reply_was_lost_is_finished() {
    let _turn = crate::common::turns::waits();
    regression(105641);
}

/// Directed: a quiet cluster whose whole event log ages past the retention.
/// The monitor's purge (every 60 s) deletes every event, oldest first, and
/// nothing stops it at the newest one; the next monitor's `EventLog::open`
/// finds an empty folder and starts again at sequence number 1. Numbers are
/// reused, the new lease's `last_event` goes back below every consumer's
/// cursor, and `Node::consume_events` (`last <= cursor`) ignores the new
/// events until the numbers pass the old cursor: notifications lost silently.
/// Suggested fix: `EventLog::purge` never deletes the newest event (or
/// `Monitor::start` opens the log at `max(listed, previous.last_event) + 1`,
/// with the previous lease's `last_event`), and consumers treat
/// `last_event < cursor` as a gap.
#[test]
fn event_numbers_are_reused_after_the_whole_log_was_purged() {
    let _turn = crate::common::turns::waits();
    let rt = runtime();
    let r: Result<(), Failure> = rt.block_on(async {
        let mut sim = Sim::with(1, Some(3), Some(Duration::from_secs(1))).await;
        let quiet_round = |sim: &mut Sim| {
            for s in &mut sim.cluster.slots {
                s.extra.paused_until = 0;
            }
        };
        // 70 s of a healthy, quiet cluster: the purge at 60 s empties the log.
        while sim.cluster.clock.mono() < Duration::from_secs(70) {
            quiet_round(&mut sim);
            for i in 0..sim.cluster.slots.len() {
                sim.tick(i).await;
            }
            sim.observe().await.map_err(|e| sim.fail(e))?;
            sim.cluster.clock.advance(Duration::from_millis(200));
            sim.round += 1;
        }
        sim.faults.pause();
        let left = sim.list_names(v2::EVENTS).await;
        sim.faults.resume();
        sim.log(format!("events left after 70 s: {left:?}"));
        // The monitor dies; the next one opens the log.
        let m = (0..sim.cluster.slots.len())
            .find(|i| sim.cluster.slots[*i].node.as_ref().is_some_and(|n| n.is_monitor()))
            .expect("a monitor");
        let dead = sim.cluster.slots[m].node.take().unwrap();
        sim.cluster.slots[m].extra.restart_at = usize::MAX;
        sim.log(format!("crash monitor {}", dead.id()));
        for _ in 0..40 {
            for i in 0..sim.cluster.slots.len() {
                if sim.cluster.slots[i].node.is_some() {
                    sim.tick(i).await;
                }
            }
            sim.observe().await.map_err(|e| sim.fail(e))?;
            sim.cluster.clock.advance(Duration::from_millis(200));
            sim.round += 1;
        }
        Ok(())
    });
    if let Err(f) = r {
        panic!("{f}");
    }
}

/// Replays `seed` with the task layer.
fn regression_with_tasks(seed: u64) {
    let rt = runtime();
    if let Err(f) = run_seed_with(&rt, seed, true) {
        panic!("{f}");
    }
}

/// Seed 0 with tasks: a worker's `Status.Success` write failed after the
/// worker had dropped the finished subtask; the result was lost and the
/// subtask stayed Running forever. Fixed: results are kept until written.
#[test]
fn a_failed_result_write_is_retried_not_lost() {
    let _turn = crate::common::turns::waits();
    regression_with_tasks(0);
}

/// Seed 5 with tasks: a unit was marked Done in memory, then a backend error
/// later in the same collect returned before it was recorded; the task ended
/// Done without it. Fixed: observe first, record each outcome as its own
/// create-once file, then change state.
#[test]
fn a_unit_is_done_only_once_its_outcome_is_recorded() {
    let _turn = crate::common::turns::waits();
    regression_with_tasks(5);
}

/// Seed 18 with tasks: the worker's `Status.Running` write landed but its
/// reply was lost; the worker never ran the subtask and took its own marker
/// for an earlier incarnation's. Then a rebuilt manager trusted an old
/// incarnation's Running marker. Fixed: both check the marker's incarnation.
#[test]
fn a_running_marker_is_judged_by_its_incarnation() {
    let _turn = crate::common::turns::waits();
    regression_with_tasks(18);
}

/// Seed 225 with tasks: a manager's rebuild failed halfway and left it
/// marked loaded with half-built state; it re-dispatched over a folder still
/// marked Running by a dead incarnation and waited forever. Fixed: loaded
/// only after the rebuild succeeds; an existing folder's runner is unknown.
#[test]
fn a_failed_rebuild_starts_over() {
    let _turn = crate::common::turns::waits();
    regression_with_tasks(225);
}
