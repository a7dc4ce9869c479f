//! The `compactd run` loop: start-up checks, then one [`Node::tick`] (a
//! poll) per interval until the shutdown token fires, then a clean leave.
//! The drain token (a first SIGTERM) starts a warm shutdown
//! ([`super::drain`]): the loop goes on until the node is drained or
//! `cfg.drain_timeout` has passed since the signal, then leaves the same
//! way. systemd hears of a stop the moment it is asked, and its stop timeout
//! is kept past the drain and the leave ([`stop_notices`]).
//! Between polls, pokes ([`crate::cluster::wake`]) run [`Node::tick_woken`]: a burst
//! of pokes is one woken tick, woken ticks start at least [`MIN_WOKEN_GAP`]
//! apart, and the listener's [`Wakeup`] lets through at most a few a second
//! (its rate bound): that is what bounds what a flood can cost.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use layouts::v2;
use store::Store;
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::cluster::wake::{Wakeup, Woken, MIN_WOKEN_GAP};
use crate::node::{Node, NodeConfig};
use crate::serve::metrics::Metrics;
use crate::serve::systemd::Notifier;
use crate::tasks::worker::WorkConfig;

/// The wake-up side of a daemon: what its listener feeds, and the address
/// its heartbeat advertises.
pub struct Wakeups {
    pub wake: Arc<Wakeup>,
    pub addr: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    NodeIdInUse(#[from] super::claim::ClaimError),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Validates timing settings so that the protocol's assumptions hold.
pub fn validate(cfg: &NodeConfig) -> Result<(), DaemonError> {
    if cfg.session_timeout <= cfg.heartbeat {
        return Err(DaemonError::Config(format!(
            "--session-timeout ({:?}) must be longer than --heartbeat ({:?}), or every node would expire between two beats",
            cfg.session_timeout, cfg.heartbeat
        )));
    }
    if cfg.lease < Duration::from_millis(30) {
        return Err(DaemonError::Config("--lease must be at least 30ms".into()));
    }
    Ok(())
}

/// How the daemon is told to stop: `drain` starts a warm shutdown (a first
/// SIGTERM), `now` stops at once (a second SIGTERM, a SIGINT).
#[derive(Debug, Clone, Default)]
pub struct Stop {
    pub now: CancellationToken,
    pub drain: CancellationToken,
}

/// What a node that runs and plans work needs beyond its membership: the
/// task layer's settings, the data backend, the policy planner's settings.
pub struct WorkSetup {
    pub cfg: WorkConfig,
    pub data: Store,
    pub planner: crate::policy::PlannerConfig,
}

pub async fn run(
    cfg: NodeConfig,
    store: Store,
    work: Option<WorkSetup>,
    clock: SharedClock,
    stop: Stop,
    wakeups: Option<Wakeups>,
    metrics: Option<Arc<Metrics>>,
) -> Result<(), DaemonError> {
    let Stop { now: shutdown, drain } = stop;
    validate(&cfg)?;
    // Listening from the start: a signal may come while start-up waits on
    // the backend, and systemd must hear of it then, not after.
    let notifier = Arc::new(Notifier::from_env());
    let drain_began = Arc::new(OnceLock::new());
    let leaving = CancellationToken::new();
    let _leaving_guard = leaving.clone().drop_guard();
    tokio::spawn(stop_notices(
        Stop { now: shutdown.clone(), drain: drain.clone() },
        drain_began.clone(),
        cfg.drain_timeout,
        clock.clone(),
        notifier.clone(),
        leaving.clone(),
    ));
    // A scratch name of this process alone: two processes started under one
    // id at once must not race each other's probe.
    let scratch = format!("{}Probe/{}.{}.{}", v2::REGISTRY, cfg.id, std::process::id(), clock.wall_ms());
    store.probe_atomic_create(&scratch, 4).await?;
    if let Some(m) = &metrics {
        m.health.set_probed();
    }
    if let Some(WorkSetup { data, .. }) = &work {
        // Executors create files once on the data backend too (a merge's
        // commit, a Delta table's next version): a server that ignores
        // conditional writes would let two writers both win there.
        let scratch = format!("_compactd/probe/{}.{}.{}", cfg.id, std::process::id(), clock.wall_ms());
        data.probe_atomic_create(&scratch, 4).await?;
    }
    let claim = super::claim::claim(&store, &cfg, clock.wall_ms()).await?;
    let interval = cfg.tick_interval();
    tracing::info!(
        node = %cfg.id, root = %store.uri(), heartbeat = ?cfg.heartbeat, session_timeout = ?cfg.session_timeout, lease = ?cfg.lease,
        "compactd node starting"
    );
    let mut node = Node::new(cfg.clone(), store, clock.clone());
    if let Some(WorkSetup { cfg: work, data, planner }) = work {
        node = node.with_work(work, data);
        node.planner_cfg = planner;
        if let Some(groups) = node.executor_groups() {
            // Executors die with this daemon, however it ends.
            if let Err(e) = groups.start_reaper() {
                tracing::warn!("cannot start the executors' reaper ({e}): executors get a death signal instead");
            }
            // The session guard's kill does not wait for a tick: a tick stuck
            // on a backend, or an idle daemon asleep between polls, must not
            // let executors outlive the guard's deadline.
            let session = cfg.session_timeout;
            tokio::spawn(guard_timer(groups, clock.clone(), session, metrics.clone()));
        }
    }
    if let Some(m) = &metrics {
        node = node.with_metrics(m.clone());
    }
    if claim.is_some() {
        node.previous_process_gone();
    }
    // Without a listener nothing pokes the loop; executors still do.
    let wake = match wakeups {
        Some(w) => {
            node = node.with_wakeups(Some(w.addr), w.wake.clone());
            w.wake
        }
        None => {
            let w = Wakeup::new();
            node = node.with_wakeups(None, w.clone());
            w
        }
    };
    // The policy planner runs in a task of its own, stopped and awaited
    // before the node leaves (and stopped on any other way out).
    let planner_stop = CancellationToken::new();
    let _planner_guard = planner_stop.clone().drop_guard();
    let planner = node.spawn_planner(planner_stop.clone());
    let mut incarnation = node.stats().incarnation;
    let mut next_poll = clock.mono();
    let mut busy = false;
    // Set when the drain starts: by then the node leaves, drained or not.
    let mut drain_until: Option<std::time::Duration> = None;
    loop {
        if drain.is_cancelled() && drain_until.is_none() {
            // Counted from the signal, which [`stop_notices`] saw at once: the
            // tick it came during may have waited long on the backend.
            let since = *drain_began.get_or_init(|| clock.mono());
            node.start_draining(since);
            drain_until = Some(since.saturating_add(cfg.drain_timeout));
        }
        let started = clock.mono();
        let woken = wake.take();
        let poll_now = started >= next_poll;
        if poll_now {
            next_poll = started + interval;
        } else {
            wake.counters.woken_ticks.fetch_add(1, Ordering::Relaxed);
        }
        // Work left over by a tick that ran out of time goes on.
        let pending = woken;
        let woken = if poll_now { None } else { Some(if busy { Woken::ALL } else { woken }) };
        busy = match woken {
            None => node.tick_poll(pending).await,
            Some(w) => node.tick_woken(w).await,
        };
        let end = clock.mono();
        if let Some(m) = &metrics {
            m.after_tick(&node.tick_report(), end.saturating_sub(started));
            m.health.ticked(end, node.last_beat_ok(), node.is_member());
            notifier.after_tick(&m.health, end);
        }
        if shutdown.is_cancelled() {
            break;
        }
        if let Some(until) = drain_until {
            if node.drained() {
                tracing::info!("drained: every unit this node ran has reported");
                break;
            }
            if clock.mono() >= until {
                tracing::warn!(
                    running = node.running_subtasks(),
                    "the drain timeout passed: stopping the units still running (their managers run them again)"
                );
                break;
            }
        }
        if node.stats().incarnation != incarnation {
            incarnation = node.stats().incarnation;
            if let Some(err) = match &claim {
                Some(c) => c.superseded(&node.store).await,
                None => None,
            } {
                // Leave without touching what the new owner now writes: no
                // clean leave (it would delete the heartbeat and the claim).
                tracing::error!("{err}");
                return Err(err.into());
            }
        }
        // The daemon loop is where a process waits on real time; everything
        // it runs reads time from the node's clock.
        let wake_at = drain_until.map_or(next_poll, |d| d.min(next_poll));
        #[allow(clippy::disallowed_methods)]
        let poll = tokio::time::sleep(wake_at.saturating_sub(clock.mono()));
        if !busy {
            tokio::select! {
                _ = poll => continue,
                _ = wake.notified() => {}
                _ = shutdown.cancelled() => break,
                _ = drain.cancelled(), if drain_until.is_none() => continue,
            }
        }
        // Woken (or busy): start no sooner than the gap after the last start.
        #[allow(clippy::disallowed_methods)]
        let gap = tokio::time::sleep((started + MIN_WOKEN_GAP).saturating_sub(clock.mono()));
        tokio::select! {
            _ = gap => {}
            _ = shutdown.cancelled() => break,
        }
    }
    leaving.cancel();
    tracing::info!(drained = node.drained(), "leaving the cluster");
    // Already said at the signal; this only covers a signal the notices'
    // task had not yet seen.
    notifier.stopping("leaving the cluster");
    // From the leave's start, whatever came before it: a drain that ran
    // past its deadline in a slow tick, or no drain at all (a SIGINT,
    // `--drain-timeout 0s`), still leaves the leave its whole allowance.
    notifier.extend_stop(LEAVE_ALLOWANCE);
    planner_stop.cancel();
    if let Some(p) = planner {
        let _ = p.await;
    }
    node.leave().await;
    if let Some(c) = claim {
        c.release(&node.store).await;
    }
    Ok(())
}

/// What systemd's stop timeout leaves the leave once the drain is over:
/// reporting, the ended marker, the lease and the heartbeat are a few
/// backend writes, each of which may take `--backend-timeout` times its
/// retries, and an HDFS NameNode fail-over can hold them up well past 30 s.
/// A leave cut short by SIGKILL writes no ended marker: its units then wait
/// a whole session before they run again elsewhere.
const LEAVE_ALLOWANCE: Duration = Duration::from_secs(120);

/// How often a draining daemon renews its ask for more stop time: well
/// within each ask, so that one lost message costs nothing.
const EXTEND_EVERY: Duration = Duration::from_secs(10);

/// Tells systemd of a stop the moment it is asked rather than after the
/// tick in progress, which may wait long on the backend: `STOPPING=1`, and
/// while the node drains, every [`EXTEND_EVERY`], `EXTEND_TIMEOUT_USEC` for
/// what is left of the drain plus [`LEAVE_ALLOWANCE`], so that systemd's stop
/// timeout follows `--drain-timeout` instead of a number in the unit. The
/// asks all end at one instant: a daemon stuck past its drain is still
/// killed. Starts the drain's clock (`began`). Ends when the leave begins.
async fn stop_notices(
    stop: Stop,
    began: Arc<OnceLock<Duration>>,
    drain_timeout: Duration,
    clock: SharedClock,
    notifier: Arc<Notifier>,
    leaving: CancellationToken,
) {
    tokio::select! {
        _ = stop.drain.cancelled() => {}
        _ = stop.now.cancelled() => {}
        _ = leaving.cancelled() => return,
    }
    if stop.now.is_cancelled() {
        // The leave follows at once and asks for its own time.
        notifier.stopping("stopping now: killing the running units, then leaving the cluster");
        return;
    }
    let since = *began.get_or_init(|| clock.mono());
    notifier.stopping(&format!(
        "draining: starting nothing new; running units have {drain_timeout:?} to finish, then the node leaves"
    ));
    let until = since.saturating_add(drain_timeout).saturating_add(LEAVE_ALLOWANCE);
    loop {
        notifier.extend_stop(until.saturating_sub(clock.mono()));
        // The daemon waits on real time here, as in its loop.
        #[allow(clippy::disallowed_methods)]
        let next = tokio::time::sleep(EXTEND_EVERY);
        tokio::select! {
            _ = next => {}
            _ = leaving.cancelled() => return,
            _ = stop.now.cancelled() => return,
        }
    }
}

/// How long the guard timer sleeps at most before it reads the clock again:
/// the daemon's timers stop while the host is suspended, its clock does not.
const GUARD_SLICE: Duration = Duration::from_millis(500);

/// Kills the node's executors at the session guard's deadline
/// ([`crate::executor::Groups::trip`]); the node ends the incarnation at its
/// next tick. Runs as long as the daemon does.
async fn guard_timer(
    groups: crate::executor::Groups,
    clock: SharedClock,
    session: Duration,
    metrics: Option<Arc<Metrics>>,
) {
    loop {
        let changed = groups.changed();
        let now = clock.mono();
        if let Some(t) = groups.trip(now) {
            crate::node::report_trip(t, session, metrics.as_deref(), "guard timer");
            continue;
        }
        let Some(at) = groups.deadline() else {
            changed.await;
            continue;
        };
        // The daemon waits on real time here, as in its loop.
        #[allow(clippy::disallowed_methods)]
        let sleep = tokio::time::sleep(at.saturating_sub(now).min(GUARD_SLICE));
        tokio::select! {
            _ = sleep => {}
            _ = changed => {}
        }
    }
}

#[cfg(test)]
// A real child and the daemon's real-time guard timer.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::executor::{ExecRequest, Groups};
    use layouts::formats::ExecutorKind;

    /// The guard's kill does not wait for a tick: with the daemon asleep
    /// between polls (no tick runs here at all), its timer kills the
    /// executors at the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_guard_timer_kills_at_the_deadline_without_a_tick() {
        let clock = crate::clock::SystemClock::shared();
        let groups = Groups::guarded();
        let req = ExecRequest {
            kind: ExecutorKind::Command,
            command: Some("sleep 30".into()),
            timeout: Duration::from_secs(60),
            vars: Default::default(),
            params: Default::default(),
            data_uri: String::new(),
            target_size: 0,
            compression: String::new(),
            fence: None,
            run_as: None,
        };
        let now = clock.mono();
        assert!(crate::executor::spawn(&req, now, &groups, 7, None, None).is_err(), "started under a closed guard");
        let deadline = now + Duration::from_millis(300);
        groups.open(7, deadline, now);
        let mut run = crate::executor::spawn(&req, clock.mono(), &groups, 7, None, None).unwrap();
        assert!(crate::executor::spawn(&req, clock.mono(), &groups, 6, None, None).is_err(), "another incarnation");
        tokio::spawn(guard_timer(groups.clone(), clock.clone(), Duration::from_secs(1), None));
        let ended = loop {
            if run.try_finish(clock.mono()).is_some() {
                break clock.mono();
            }
            assert!(clock.mono() < deadline + Duration::from_secs(5), "not killed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(ended >= deadline, "killed {:?} before the deadline", deadline - ended);
        assert!(ended < deadline + Duration::from_millis(200), "killed {:?} late", ended - deadline);
        assert!(!groups.may_start(7, clock.mono()), "the guard stays closed");
    }
}
