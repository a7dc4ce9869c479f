//! The process groups of a node's live executors, and the session guard
//! that bounds them.
//!
//! Every executor leads a process group of its own; [`Groups`] lists them
//! while they live, so that the node can kill them all at once, and tells
//! the [`reaper`](super::reaper) (a separate process) about each, so that
//! they die with the daemon however it ends.
//!
//! **The guard.** A node's runs must end before the monitor can declare it
//! offline and give its units to others (layouts/PROTOCOL.md, "The session
//! guard"). The node keeps its guard here: [`Groups::open`] after each
//! heartbeat it counts, naming the incarnation and the deadline (0.8 of the
//! session after the start of that beat); [`Groups::trip`] at the deadline.
//! Invariants, all under one lock:
//! - an executor starts only while the guard is open, for the incarnation
//!   that claimed its subtask, and before the deadline; the check, the fork
//!   and the registration happen under the lock, so a trip either refuses a
//!   start or kills what it started;
//! - a trip kills every registered group and closes the guard until the
//!   next `open`; a new guard starts closed ([`Groups::guarded`]);
//! - the reaper is told each deadline as a `CLOCK_BOOTTIME` instant and
//!   kills every registered group there on its own, so a daemon that is
//!   stopped (SIGSTOP), starved or stuck still loses its executors in time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::reaper;

/// What [`Groups::trip`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tripped {
    /// Executor groups killed (by the trip, or at the same deadline by the
    /// reaper just before it).
    pub killed: usize,
    /// How long after the deadline the kill landed.
    pub late: Duration,
}

/// Executors may start only for `incarnation`, until `until` (the node's
/// monotonic clock; `boot_ns` is the same instant on `CLOCK_BOOTTIME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Open {
    incarnation: u64,
    until: Duration,
    boot_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Guard {
    /// No session guard (an executor outside a node: tests, tools).
    #[default]
    None,
    Closed,
    Open(Open),
}

/// The live executors' process groups and the node's session guard (see
/// the module docs). Clones share them.
#[derive(Clone, Default)]
pub struct Groups {
    set: Arc<Mutex<GroupSet>>,
    /// Woken whenever the guard changes (the daemon's guard timer waits on it).
    changed: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct GroupSet {
    live: BTreeSet<i32>,
    reaper: Option<reaper::Reaper>,
    guard: Guard,
    /// Executors that ended at or past the open guard's deadline, before
    /// the trip: the reaper, which kills at the same instant, got them.
    ended_at_deadline: usize,
}

impl GroupSet {
    /// Tells the reaper; one that is gone is replaced (told of every live
    /// group and the deadline), and without one executors fall back to the
    /// death signal.
    fn tell(&mut self, msg: &str) {
        let Some(r) = self.reaper.as_mut() else { return };
        if let Err(e) = r.send(msg) {
            tracing::warn!("the executors' reaper is gone ({e}); starting a new one");
            self.reaper = None;
            match reaper::Reaper::start(&self.live, self.reaper_deadline()) {
                Ok(r) => self.reaper = Some(r),
                Err(e) => tracing::error!(
                    "cannot start the executors' reaper ({e}): executors now get a death signal instead, \
                     which spares what they start if this daemon is killed"
                ),
            }
        }
    }

    /// The deadline as the reaper keeps it (`CLOCK_BOOTTIME` ns), if any.
    fn reaper_deadline(&self) -> Option<u64> {
        match self.guard {
            Guard::None => None,
            // Closed: whatever is still registered dies at once.
            Guard::Closed => Some(crate::clock::boot_ns()),
            Guard::Open(o) => Some(o.boot_ns),
        }
    }

    fn kill_all(&self) -> usize {
        for &g in &self.live {
            kill_group(g);
        }
        self.live.len()
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.lock();
        f.debug_struct("Groups")
            .field("live", &g.live)
            .field("reaper", &g.reaper.is_some())
            .field("guard", &g.guard)
            .finish()
    }
}

impl Groups {
    /// Groups under a session guard, closed until the first [`Groups::open`].
    pub fn guarded() -> Groups {
        let g = Groups::default();
        g.lock().guard = Guard::Closed;
        g
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupSet> {
        self.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets executors of `incarnation` start until `until` (both clocks
    /// read `now`: the node's monotonic one, and `boot_ns` for the reaper).
    pub fn open(&self, incarnation: u64, until: Duration, now: Duration) {
        let boot = crate::clock::boot_ns() + until.saturating_sub(now).as_nanos() as u64;
        let mut g = self.lock();
        g.guard = Guard::Open(Open { incarnation, until, boot_ns: boot });
        g.ended_at_deadline = 0;
        g.tell(&format!("D{boot}"));
        drop(g);
        self.changed.notify_waiters();
    }

    /// Closes the guard and kills every live executor: the incarnation is
    /// over (it rejoins, or the daemon leaves). Returns how many were killed.
    pub fn close(&self) -> usize {
        let mut g = self.lock();
        g.guard = Guard::Closed;
        let killed = g.kill_all();
        g.tell(&format!("D{}", crate::clock::boot_ns()));
        drop(g);
        self.changed.notify_waiters();
        killed
    }

    /// At or past the deadline (`now`, the node's monotonic clock): kills
    /// every live executor and closes the guard. `None` if the guard is not
    /// open or its deadline is still ahead.
    pub fn trip(&self, now: Duration) -> Option<Tripped> {
        let mut g = self.lock();
        let Guard::Open(o) = g.guard else { return None };
        if now < o.until {
            return None;
        }
        g.guard = Guard::Closed;
        let killed = g.kill_all() + std::mem::take(&mut g.ended_at_deadline);
        drop(g);
        self.changed.notify_waiters();
        Some(Tripped { killed, late: now - o.until })
    }

    /// The open guard's deadline, if any.
    pub fn deadline(&self) -> Option<Duration> {
        match self.lock().guard {
            Guard::Open(o) => Some(o.until),
            _ => None,
        }
    }

    /// Whether an executor of `incarnation` may start at `now`.
    pub fn may_start(&self, incarnation: u64, now: Duration) -> bool {
        may_start(self.lock().guard, incarnation, now)
    }

    /// Completes once the guard changes after this call (for the daemon's
    /// guard timer: made before it reads the guard, so no change is missed).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Starts a child with `start` under the guard (see the module docs):
    /// refused unless an executor of `incarnation` may start at `now`, and
    /// registered before the lock is let go.
    pub(super) fn start_child<T>(
        &self,
        incarnation: u64,
        now: Duration,
        start: impl FnOnce() -> std::io::Result<(T, i32)>,
    ) -> std::io::Result<T> {
        let mut g = self.lock();
        if !may_start(g.guard, incarnation, now) {
            return Err(std::io::Error::other(match g.guard {
                Guard::Open(o) if o.incarnation == incarnation => {
                    "the node's session guard is past its deadline (no heartbeat counted for 0.8 of the session)"
                }
                _ => "the node's session guard is closed for this incarnation",
            }));
        }
        let (child, pgid) = start()?;
        g.live.insert(pgid);
        g.tell(&format!("+{pgid}"));
        Ok(child)
    }

    pub(super) fn remove(&self, pgid: i32) {
        let mut g = self.lock();
        if let Guard::Open(o) = g.guard {
            if crate::clock::boot_ns() >= o.boot_ns {
                g.ended_at_deadline += 1;
            }
        }
        g.live.remove(&pgid);
        g.tell(&format!("-{pgid}"));
    }

    /// Starts the reaper that kills the live executors' groups when this
    /// process dies or the guard's deadline passes (see [`reaper`]); only a
    /// `compactd run` daemon does, as it runs `<this executable> __reaper`.
    pub fn start_reaper(&self) -> std::io::Result<()> {
        let mut g = self.lock();
        if g.reaper.is_none() {
            let deadline = g.reaper_deadline();
            g.reaper = Some(reaper::Reaper::start(&g.live, deadline)?);
        }
        Ok(())
    }

    pub(super) fn has_reaper(&self) -> bool {
        self.lock().reaper.is_some()
    }

    /// Kills every live executor and all it started; returns how many.
    pub fn kill_all(&self) -> usize {
        self.lock().kill_all()
    }
}

fn may_start(guard: Guard, incarnation: u64, now: Duration) -> bool {
    match guard {
        Guard::None => true,
        Guard::Closed => false,
        Guard::Open(o) => o.incarnation == incarnation && now < o.until,
    }
}

pub(super) fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: plain syscall on a process group we created.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}
