//! Time, injected: the one place where compactd reads ambient time.
//!
//! `clippy.toml` bans `SystemTime::now`, `Instant::now` and the sleeps
//! everywhere else; code that needs time takes a [`SharedClock`] (or, at the
//! CLI edge, [`SystemClock`]).
//!
//! Liveness and leases are judged on a monotonic clock local to each node
//! ([`Clock::mono`]); wall time ([`Clock::wall_ms`]) is only written into
//! files for humans and for id generation, never compared across nodes.
//! Tests use [`ManualClock`] to move time without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Monotonic time since an arbitrary origin. Keeps running while the
    /// process is stopped (SIGSTOP) and while the host is suspended
    /// ([`boot_ns`]), which is what lets a paused node notice, on resume,
    /// that its lease and session may have lapsed.
    fn mono(&self) -> Duration;
    /// Wall-clock Unix milliseconds.
    fn wall_ms(&self) -> u64;
}

pub type SharedClock = Arc<dyn Clock>;

/// Nanoseconds of the host's `CLOCK_BOOTTIME`: monotonic, shared by every
/// process of the host, and counting while the host is suspended (where
/// `CLOCK_MONOTONIC`, and so `Instant`, stops). A node's session guard and
/// its executors' reaper (a separate process) judge one deadline on it; a
/// host that slept through a session finds it over on waking.
pub fn boot_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: plain syscall writing into a timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // Not on Linux (or a kernel before 2.6.39): the monotonic clock,
        // which only misses a suspend.
        #[allow(clippy::disallowed_methods)] // the clock itself
        return FALLBACK.get_or_init(Instant::now).elapsed().as_nanos() as u64;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

static FALLBACK: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

#[derive(Debug)]
pub struct SystemClock {
    origin_ns: u64,
}

impl SystemClock {
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock { origin_ns: boot_ns() })
    }
}

impl Clock for SystemClock {
    fn mono(&self) -> Duration {
        Duration::from_nanos(boot_ns().saturating_sub(self.origin_ns))
    }

    #[allow(clippy::disallowed_methods)] // the clock itself
    fn wall_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// Wall-clock Unix milliseconds now, for one-shot commands (the CLI edge).
pub fn wall_now_ms() -> u64 {
    SystemClock::shared().wall_ms()
}

/// Wall time as a `SystemTime`, from a clock's milliseconds.
pub fn wall_time(clock: &dyn Clock) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(clock.wall_ms())
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    mono_ns: AtomicU64,
    wall_ms: AtomicU64,
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock { mono_ns: AtomicU64::new(0), wall_ms: AtomicU64::new(1_700_000_000_000) })
    }

    pub fn advance(&self, d: Duration) {
        self.mono_ns.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        self.wall_ms.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Steps the wall clock alone (as NTP does), monotonic time unmoved:
    /// calendar schedules are tested on chosen dates and across days of
    /// downtime without ticking through them, and without the jump
    /// expiring any session (those run on monotonic time).
    pub fn set_wall_ms(&self, wall_ms: u64) {
        self.wall_ms.store(wall_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn mono(&self) -> Duration {
        Duration::from_nanos(self.mono_ns.load(Ordering::SeqCst))
    }

    fn wall_ms(&self) -> u64 {
        self.wall_ms.load(Ordering::SeqCst)
    }
}

/// When a tick stops taking on more work: the loops of a worker or manager
/// round check it between backend operations and leave the rest for the
/// next tick. A node writes its heartbeat at the start of a tick, so a tick
/// that ran on (thousands of creates on a slow backend) would outlast the
/// session and get a live node declared offline.
#[derive(Debug)]
pub struct Deadline {
    clock: SharedClock,
    at: Duration,
    cut_short: std::sync::atomic::AtomicBool,
}

impl Deadline {
    pub fn new(clock: SharedClock, at: Duration) -> Deadline {
        Deadline { clock, at, cut_short: Default::default() }
    }

    /// Asked before each further piece of work: true means stop and leave it
    /// (which [`cut_short`](Self::cut_short) remembers).
    pub fn passed(&self) -> bool {
        let passed = self.clock.mono() >= self.at;
        if passed {
            self.cut_short.store(true, Ordering::Relaxed);
        }
        passed
    }

    /// The clock's monotonic time now.
    pub fn now(&self) -> Duration {
        self.clock.mono()
    }

    /// When it passes.
    pub fn at(&self) -> Duration {
        self.at
    }

    /// Work was left for the next tick although this deadline did not pass
    /// (a piece of work that stopped at a tighter deadline of its own).
    pub fn leave_work(&self) {
        self.cut_short.store(true, Ordering::Relaxed);
    }

    /// Some work was left for the next tick: the caller should tick again
    /// soon rather than wait a whole poll interval.
    pub fn cut_short(&self) -> bool {
        self.cut_short.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_passes_when_its_clock_reaches_it() {
        let clock = ManualClock::new();
        let d = Deadline::new(clock.clone(), Duration::from_millis(100));
        assert!(!d.passed());
        clock.advance(Duration::from_millis(99));
        assert!(!d.passed() && !d.cut_short());
        clock.advance(Duration::from_millis(1));
        assert!(!d.cut_short(), "only a caller that stopped work cuts it short");
        assert!(d.passed() && d.cut_short());
    }
}
