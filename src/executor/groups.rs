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
//!
//! **Ends never wait for a start.** The lock is held across a fork, about a
//! millisecond on a loaded host, and a busy node starts hundreds in a row.
//! An executor's end is therefore queued apart ([`Groups::remove`]) and
//! taken out of the set by whoever holds the lock next, before it does
//! anything else (so no kill ever reaches a group that ended), or by the
//! ending task itself when the lock is free. Every holder looks at the
//! queue again after it lets go, so an end queued while the lock was held
//! is never left behind; the reaper hears the ends of one such round in
//! one write. An end names its start (the group id and the start's
//! number), so a group id the kernel gives again to a start made before
//! an earlier end with that id was taken out (a pid reused within that
//! moment) stays in the set: only its own end takes it out.

use std::collections::BTreeMap;
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
    /// Groups that ended, not yet taken out of `set`, with the
    /// `CLOCK_BOOTTIME` instant of each end (module docs). Held only to
    /// push or take, never across anything else.
    ended: Arc<Mutex<Vec<(Started, u64)>>>,
    /// Woken whenever the guard changes (the daemon's guard timer waits on it).
    changed: Arc<tokio::sync::Notify>,
}

/// One start: its process group and its number among this set's starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Started {
    pub pgid: i32,
    seq: u64,
}

#[derive(Default)]
struct GroupSet {
    /// Each live group with the number of the start that registered it.
    live: BTreeMap<i32, u64>,
    starts: u64,
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

    /// Takes the queued ends out of the set (see [`Groups::remove`]).
    fn take_ended(&mut self, ended: &Mutex<Vec<(Started, u64)>>) {
        let ended = std::mem::take(&mut *ended.lock().unwrap_or_else(|e| e.into_inner()));
        let mut msg = String::new();
        for (started, at) in ended {
            if let Guard::Open(o) = self.guard {
                if at >= o.boot_ns {
                    self.ended_at_deadline += 1;
                }
            }
            let pgid = started.pgid;
            // A later start that got the same group id owns it now.
            if self.live.get(&pgid) != Some(&started.seq) {
                continue;
            }
            self.live.remove(&pgid);
            if !msg.is_empty() {
                msg.push('\n');
            }
            msg.push_str(&format!("-{pgid}"));
        }
        if !msg.is_empty() {
            self.tell(&msg);
        }
    }

    fn kill_all(&self) -> usize {
        for &g in self.live.keys() {
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

    /// The set, with the queued ends taken out first; looks at the queue
    /// again once let go.
    fn lock(&self) -> Locked<'_> {
        let mut g = self.set.lock().unwrap_or_else(|e| e.into_inner());
        g.take_ended(&self.ended);
        Locked { g: Some(g), groups: self }
    }

    /// Takes queued ends out of the set if the lock is free; if it is not,
    /// its holder does once it lets go ([`Locked`]'s drop).
    fn settle(&self) {
        loop {
            if self.ended.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                return;
            }
            let mut g = match self.set.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            g.take_ended(&self.ended);
        }
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
    ) -> std::io::Result<(T, Started)> {
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
        g.starts += 1;
        let started = Started { pgid, seq: g.starts };
        g.live.insert(pgid, started.seq);
        g.tell(&format!("+{pgid}"));
        Ok((child, started))
    }

    /// The group of `started` ended (its leader was waited for): out of
    /// the set now if the lock is free, else as soon as its holder lets
    /// go; never waits for a start (module docs).
    pub(super) fn remove(&self, started: Started) {
        self.ended.lock().unwrap_or_else(|e| e.into_inner()).push((started, crate::clock::boot_ns()));
        self.settle();
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

/// The set under its lock; once let go, ends queued meanwhile are taken
/// out ([`Groups::settle`]).
struct Locked<'a> {
    g: Option<std::sync::MutexGuard<'a, GroupSet>>,
    groups: &'a Groups,
}

impl std::ops::Deref for Locked<'_> {
    type Target = GroupSet;
    fn deref(&self) -> &GroupSet {
        self.g.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut GroupSet {
        self.g.as_mut().expect("held until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        drop(self.g.take());
        self.groups.settle();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn live(g: &Groups) -> Vec<i32> {
        g.lock().live.keys().copied().collect()
    }

    /// An end that comes while a start holds the lock returns at once, and
    /// is out of the set by the time the start lets go; a later holder
    /// never sees it.
    #[test]
    fn an_end_does_not_wait_for_a_start_and_is_out_once_the_start_lets_go() {
        let g = Groups::default();
        // Group ids no process has (the test never kills): registered by
        // starts that run nothing.
        let ((), first) = g.start_child(0, Duration::ZERO, || Ok(((), -101))).unwrap();
        let (entered, in_start) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let starter = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.start_child(0, Duration::ZERO, || {
                    entered.send(()).unwrap();
                    wait.recv().unwrap();
                    Ok(((), -102))
                })
                .unwrap()
                .1
            })
        };
        in_start.recv().unwrap();
        // The start holds the lock: the end is queued, not waited on.
        let (done_tx, done) = std::sync::mpsc::channel();
        {
            let g = g.clone();
            std::thread::spawn(move || {
                g.remove(first);
                done_tx.send(()).unwrap();
            });
        }
        done.recv_timeout(Duration::from_secs(5)).expect("the end waited for the start");
        assert!(g.set.try_lock().is_err(), "the start still holds the lock");
        assert_eq!(g.ended.lock().unwrap().len(), 1);
        release.send(()).unwrap();
        let second = starter.join().unwrap();
        // The start's holder took it out as it let go.
        assert!(g.ended.lock().unwrap().is_empty());
        assert_eq!(g.set.lock().unwrap().live.keys().copied().collect::<Vec<_>>(), [-102]);
        // With the lock free, an end is out at once.
        g.remove(second);
        assert!(g.set.lock().unwrap().live.is_empty());
        assert!(live(&g).is_empty());
    }

    /// A group id given again to a start made before the earlier end with
    /// that id was taken out stays live: the old end does not take the new
    /// start's group out of the set (which a trip or the reaper would then
    /// never kill); its own end does.
    #[test]
    fn an_end_takes_out_only_its_own_start_when_a_group_id_comes_again() {
        let g = Groups::default();
        let ((), old) = g.start_child(0, Duration::ZERO, || Ok(((), -201))).unwrap();
        // The old end is queued while a start holds the lock, and that start
        // gets the same id.
        let ((), new) = g
            .start_child(0, Duration::ZERO, || {
                g.ended.lock().unwrap().push((old, 0));
                Ok(((), -201))
            })
            .unwrap();
        assert_ne!(old, new);
        assert_eq!(live(&g), [-201], "the new start's group is still registered");
        g.remove(new);
        assert!(live(&g).is_empty());
    }
}
