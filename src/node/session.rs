//! This node's incarnation: its heartbeat, the session guard that bounds
//! its runs, and how an incarnation ends (a rejoin, a clean leave).
//!
//! Invariants (layouts/PROTOCOL.md, "The session guard"):
//! - A beat counts only if its reply arrives before the guard's deadline in
//!   force (for the first beat of an incarnation: within [`GUARD_FRACTION`]
//!   of the session after its start). A counted beat that started at `b`
//!   moves the deadline to `b + GUARD_FRACTION · session`, and opens the
//!   executors' guard ([`crate::executor::Groups`]) for this incarnation
//!   until then.
//! - At the deadline every executor is killed and none starts again under
//!   this incarnation: it is over, and the node rejoins under a new one at
//!   its next tick (a beat whose reply comes later may have landed after
//!   the monitor declared the incarnation, and must not revive it).
//! - An incarnation that ends on the node's own account (a rejoin, a clean
//!   leave) leaves `TaskAssigned/<node>/Ended.<incarnation>` once its
//!   executors are dead: a manager waiting for the runner of a subtask to
//!   be declared offline may go on at once.

use std::time::Duration;

use layouts::formats::{self, EndedMark, Heartbeat};
use layouts::v2;

use super::{Node, GUARD_FRACTION};
use crate::executor::Tripped;
use crate::serve::metrics::Metrics;

/// Ended markers of this node older than this are removed by the node
/// (by their incarnation, which is the wall clock in ms at its start): by
/// then every manager has long seen them, or the monitor's declaration.
const ENDED_KEPT: Duration = Duration::from_secs(24 * 3600);

fn is_old_ended(incarnation: u64, wall_ms: u64) -> bool {
    incarnation < wall_ms.saturating_sub(ENDED_KEPT.as_millis() as u64)
}

/// Logs a guard trip and records it (`late`: after the deadline; the
/// margin left is what remains of the session after the kill: the earliest
/// moment the monitor can give this node's units away, on this clock).
pub fn report_trip(t: Tripped, session: Duration, metrics: Option<&Metrics>, by: &str) {
    let margin = session.mul_f64(1.0 - GUARD_FRACTION).checked_sub(t.late);
    if let Some(m) = metrics {
        m.guard_tripped(t.late, margin.unwrap_or_default());
    }
    // Within 1 % of the session, a kill is on time; later ones are shown.
    let on_time = t.late <= session / 100;
    match margin {
        Some(margin) if on_time => tracing::warn!(
            killed = t.killed, late = ?t.late, ?margin, by,
            "no heartbeat counted for 0.8 of the session: executors killed"
        ),
        Some(margin) => tracing::warn!(
            killed = t.killed, late = ?t.late, ?margin, by,
            "no heartbeat counted for 0.8 of the session: executors killed LATE, past the guard's deadline"
        ),
        None => tracing::error!(
            killed = t.killed, late = ?t.late, by,
            "no heartbeat counted for 0.8 of the session: executors killed after the session itself ran out: \
             another node may have started their units already"
        ),
    }
}

impl Node {
    /// The guard at the start of a tick: past its deadline, the executors
    /// die (if the daemon's timer has not killed them already) and the
    /// incarnation ends.
    pub(super) fn check_guard(&mut self, now: Duration) {
        let Some(at) = self.guard.filter(|at| now >= *at) else { return };
        if let Some(t) = self.work.as_ref().and_then(|w| w.worker.groups().trip(now)) {
            report_trip(t, self.cfg.session_timeout, self.metrics.as_deref(), "tick");
        }
        let gap = now.saturating_sub(self.last_beat_ok.unwrap_or_default());
        self.rejoin(&format!(
            "no heartbeat counted for {gap:?} (guard deadline passed {:?} ago), 0.8 of the session timeout",
            now - at
        ));
    }

    pub(super) async fn write_heartbeat(&mut self, now: Duration) -> store::Result<()> {
        if !self.prior_checked {
            self.outrank_prior_incarnation().await?;
        }
        self.beat += 1;
        let hb = Heartbeat {
            node: self.cfg.id.clone(),
            incarnation: self.stats.incarnation,
            beat: self.beat,
            session_timeout_ms: self.cfg.session_timeout.as_millis() as u64,
            heartbeat_ms: self.cfg.heartbeat.as_millis() as u64,
            wall_ms: self.clock.wall_ms(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            monitor_epoch: self.election.epoch(),
            fenced_actions: self.stats.fenced_actions,
            event_cursor: self.consumer.as_ref().map(|c| c.cursor).unwrap_or(0),
            commands: self.work.as_ref().map(|w| w.cfg.commands.keys().cloned().collect()).unwrap_or_default(),
            addr: self.addr.clone(),
            executor: self.work.as_ref().map(|w| w.cfg.executor.label().to_string()),
            executors: self
                .work
                .as_ref()
                .map(|_| layouts::formats::ExecutorKind::ALL.iter().map(|k| k.label().to_string()).collect()),
            slots: self.work.as_ref().map(|w| u32::try_from(w.cfg.max_running).unwrap_or(u32::MAX)),
            layouts: Some(self.cfg.layouts()),
            draining: self.draining.is_some(),
        };
        if !self.join_marked {
            if self.work.is_some() {
                // Subtask folders come and go by the thousand in a node's
                // folder, and each task folder takes an outcome file per
                // unit: on ext4 both are best spread over block groups (see
                // `Store::spread_children`; a no-op on other backends).
                self.store.spread_children(&v2::node_assigned_dir(&self.cfg.id)).await;
                self.store.spread_children(v2::SCHEDULER).await;
            }
            // A new incarnation: the monitor reads beats off the listing,
            // where a restart looks like a beat; the marker (before the first
            // beat, or retried with the next ones if its create fails) makes
            // it read ours.
            let marker = v2::join_marker(&self.cfg.id, self.stats.incarnation);
            match self.store.create(&marker, Vec::new()).await {
                Ok(_) => self.join_marked = true,
                Err(e) => tracing::warn!("writing the join marker failed (retried with the next beat): {e}"),
            }
        }
        // The session is measured from when the write started: that is the
        // latest moment the monitor may have seen the previous beat.
        let started = self.clock.mono();
        self.store.put(&v2::heartbeat(&self.cfg.id), formats::encode(&hb)).await?;
        let replied = self.clock.mono();
        self.next_beat_at = now + self.cfg.heartbeat;
        let window = self.cfg.session_timeout.mul_f64(GUARD_FRACTION);
        let limit = self.guard.unwrap_or(started + window);
        if replied >= limit {
            let late = replied - limit;
            if self.guard.is_some() {
                // It may have landed after the monitor declared us: this
                // incarnation is over, whatever the reply says.
                if let Some(t) = self.work.as_ref().and_then(|w| w.worker.groups().trip(replied)) {
                    report_trip(t, self.cfg.session_timeout, self.metrics.as_deref(), "late heartbeat");
                }
                self.rejoin(&format!("a heartbeat's reply came {late:?} after the guard's deadline"));
            } else {
                tracing::warn!(took = ?(replied - started), "the first heartbeat of this incarnation replied too late to count");
            }
            return Ok(());
        }
        self.last_beat_ok = Some(started);
        let until = started + window;
        self.guard = Some(until);
        if let Some(w) = self.work.as_ref() {
            w.worker.groups().open(self.stats.incarnation, until, replied);
        }
        Ok(())
    }

    /// A new process under this id starts above every incarnation the
    /// tree still names for it, even when this host's wall clock went back
    /// since the previous process (NTP stepping it, a skewed host fixed):
    /// its heartbeat (a crash, a kill), its offline declarations and its
    /// join markers (one read and two listings per start). Offline
    /// declarations and join markers are named by incarnation, and the
    /// monitor takes a heartbeat older than a join marker for a stale one.
    /// A process that left cleanly (SIGTERM) leaves none of these behind,
    /// and then nothing compares its incarnation with the next one's.
    async fn outrank_prior_incarnation(&mut self) -> store::Result<()> {
        let mut prior: Option<u64> = None;
        if let Some(Ok(bytes)) = self.store.read_or_bad(&v2::heartbeat(&self.cfg.id)).await? {
            if let Ok(hb) = formats::decode::<Heartbeat>(&bytes) {
                if hb.node == self.cfg.id {
                    prior = Some(hb.incarnation);
                    if self.prior_gone && self.work.is_some() && hb.incarnation != self.stats.incarnation {
                        // The process that wrote it is gone (this one claimed
                        // the id after it), and its executors with it.
                        self.ended.push((hb.incarnation, "a new process took over this node id".into()));
                    }
                }
            }
        }
        for dir in [v2::OFFLINE, v2::JOINS] {
            for e in self.store.list(dir).await? {
                if let Some((node, inc)) = v2::parse_offline_marker(e.name()) {
                    if node == self.cfg.id {
                        prior = prior.max(Some(inc));
                    }
                }
            }
        }
        if let Some(prior) = prior.filter(|p| *p >= self.stats.incarnation && self.beat == 0) {
            let incarnation = prior + 1;
            tracing::warn!(
                prior,
                clock = self.stats.incarnation,
                new = incarnation,
                "this host's wall clock is behind an earlier incarnation of this node: starting above it"
            );
            self.stats.incarnation = incarnation;
            self.election.set_incarnation(incarnation);
        }
        self.prior_checked = true;
        Ok(())
    }

    pub(super) fn rejoin(&mut self, why: &str) {
        let old = self.stats.incarnation;
        let incarnation = self.clock.wall_ms().max(old + 1);
        tracing::warn!(old, new = incarnation, "rejoining with a new incarnation: {why}");
        self.stats.incarnation = incarnation;
        self.stats.rejoins += 1;
        self.beat = 0;
        self.last_beat_ok = None;
        self.guard = None;
        self.next_beat_at = Duration::ZERO;
        self.election.set_incarnation(incarnation);
        // Work of the old incarnation is no longer ours: its managers
        // re-dispatch it, and the tasks we managed are rebuilt from the tree.
        if let Some(w) = self.work.as_mut() {
            w.worker.groups().close();
            w.worker.drop_all();
            w.managers.clear();
            self.ended.push((old, why.to_string()));
        }
        self.inbox = super::InboxWatch::default();
        self.join_marked = false;
    }

    /// Writes the `Ended.<incarnation>` markers of incarnations that ended
    /// here (retried at every tick until written), and removes this node's
    /// old ones ([`ENDED_KEPT`]) seen in `listed`.
    pub(super) async fn mark_ended(&mut self, listed: Option<&std::collections::BTreeSet<u64>>) {
        let wall = self.clock.wall_ms();
        let mut left = vec![];
        for (incarnation, why) in std::mem::take(&mut self.ended) {
            let mark = EndedMark { node: self.cfg.id.clone(), incarnation, wall_ms: wall, why: why.clone() };
            match self.store.create(&v2::ended_marker(&self.cfg.id, incarnation), formats::encode(&mark)).await {
                Ok(_) => tracing::info!(incarnation, "marked the old incarnation ended: its executors are dead"),
                Err(e) => {
                    tracing::warn!(incarnation, "writing the ended marker failed (retried next tick): {e}");
                    left.push((incarnation, why));
                }
            }
        }
        self.ended = left;
        for inc in listed.into_iter().flatten().filter(|i| is_old_ended(**i, wall)) {
            if let Err(e) = self.store.delete(&v2::ended_marker(&self.cfg.id, *inc)).await {
                tracing::warn!(incarnation = inc, "removing an old ended marker failed: {e}");
            }
        }
    }
}
