//! Warm shutdown (a first SIGTERM): the node starts nothing new, says so in
//! its heartbeat (`draining`), gives back what it was given but has not
//! started, hands the tasks it manages to other members, lets its running
//! units finish and report, and then leaves. The daemon bounds it
//! (`run --drain-timeout`, counted from the signal); a second SIGTERM or a
//! SIGINT stops at once.
//!
//! Invariants:
//! - A draining node claims nothing: every unit it runs was claimed before
//!   the drain began, so each one ends here, reports once, and runs nowhere
//!   else (its manager waits for that report, or for the incarnation's end).
//! - The heartbeat saying `draining` is written before the join marker that
//!   makes the monitor read it at once: a monitor that lists the marker
//!   reads a heartbeat that says it (PROTOCOL.md, "Warm shutdown").
//! - A managed task is handed over only to a member that may manage it
//!   ([`crate::tasks::may_manage`]: not draining, reading the layout in
//!   force); with none, the node keeps managing it until it leaves, and the
//!   monitor hands it over once the incarnation has ended.

use std::time::Duration;

use layouts::{v2, TaskId};

use super::Node;
use crate::tasks::placement::Ring;

impl Node {
    /// Starts draining (idempotent): the worker starts nothing from now on,
    /// and the next tick beats at once with `draining` set. `since`
    /// (monotonic) is when the stop was asked, which may be a tick ago.
    pub fn start_draining(&mut self, since: Duration) {
        if self.draining.is_some() {
            return;
        }
        tracing::info!("draining: starting nothing new; running units finish and report, then the node leaves");
        self.draining = Some(since);
        self.drain_announced = false;
        if let Some(w) = self.work.as_mut() {
            w.worker.drain();
        }
        self.next_beat_at = Duration::ZERO;
        self.inbox.poked = true;
        if let Some(w) = &self.wake {
            w.poke(crate::cluster::wake::Scope::Work);
        }
    }

    /// Draining, since when (monotonic).
    pub fn draining_since(&self) -> Option<Duration> {
        self.draining
    }

    /// A draining node may leave: nothing of its own runs or waits to be
    /// reported, and it manages no task another member could take.
    pub fn drained(&self) -> bool {
        let Some(w) = self.work.as_ref() else { return self.draining.is_some() };
        if self.draining.is_none() || !self.drain_announced || w.worker.busy() {
            return false;
        }
        w.managers.is_empty() || !crate::tasks::may_manage(self.election.view()).iter().any(|n| *n != self.cfg.id)
    }

    /// After the heartbeat that says `draining`: the join marker that makes
    /// the monitor read it now rather than at its turn.
    pub(super) async fn announce_drain(&mut self) {
        if self.draining.is_none() || self.drain_announced {
            return;
        }
        let marker = v2::join_marker(&self.cfg.id, self.stats.incarnation);
        match self.store.create(&marker, Vec::new()).await {
            Ok(_) => self.drain_announced = true,
            Err(e) => tracing::warn!("writing the drain's join marker failed (retried next tick): {e}"),
        }
    }

    /// Gives every task this node manages to another member that may manage
    /// it (a new manager term; the new manager rebuilds the task from the
    /// tree). Tasks no member can take stay here.
    pub(super) async fn hand_over_managed(&mut self) {
        if self.draining.is_none() {
            return;
        }
        let Some(work) = self.work.as_ref() else { return };
        if work.managers.is_empty() {
            return;
        }
        let me = self.cfg.id.clone();
        let others: Vec<_> = crate::tasks::may_manage(self.election.view()).into_iter().filter(|n| *n != me).collect();
        let ring = Ring::new(&others);
        let ids: Vec<TaskId> = work.managers.keys().copied().collect();
        let wall = self.clock.wall_ms();
        for id in ids {
            let Some(to) = ring.node_for(&id.to_string()) else {
                // Nobody to take it: kept; retried at the next tick.
                return;
            };
            match crate::tasks::reassign_manager(&self.store, &id, &to, "drain", wall).await {
                Ok(term) => {
                    tracing::info!(task = %id, %to, term, "draining: handed the task over");
                    self.pokes.work(&to);
                    if let Some(w) = self.work.as_mut() {
                        w.managers.remove(&id);
                    }
                }
                // Ended meanwhile: nothing to hand over.
                Err(crate::tasks::TaskError::Finished { .. }) | Err(crate::tasks::TaskError::NotFound(_)) => {
                    if let Some(w) = self.work.as_mut() {
                        w.managers.remove(&id);
                    }
                    if let Err(e) = self.store.delete(&v2::manage_pointer(&me, &id)).await {
                        tracing::warn!(task = %id, "removing the manager pointer failed: {e}");
                    }
                }
                Err(e) => tracing::warn!(task = %id, "draining: handing the task over failed (retried): {e}"),
            }
        }
    }
}
