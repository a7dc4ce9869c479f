//! systemd integration of `compactd run` (`Type=notify`): `READY=1` once the
//! node is in the monitor's member view, `WATCHDOG=1` after each tick of the
//! daemon loop (at most once a second), `STOPPING=1` as soon as a stop is
//! asked (SIGTERM, SIGINT), and `EXTEND_TIMEOUT_USEC` while the node drains
//! and leaves, so that systemd's stop timeout follows `--drain-timeout`
//! rather than a number written in the unit. The watchdog follows the loop,
//! not the backend: a loop that stops ticking is a bug a restart cures; a
//! backend outage is not (restarting would only add a restart loop to it),
//! so it shows on `/healthz` instead.
//!
//! Owns nothing but when it last pinged and what it already said; shared
//! between the daemon loop and the task that hears the stop signals. Without
//! `NOTIFY_SOCKET` in the environment every call is a no-op, so the daemon
//! runs the same under any supervisor. A failed send is logged once and
//! never stops the node.

use std::sync::Mutex;
use std::time::Duration;

use sd_notify::NotifyState;

use crate::serve::metrics::Health;

#[derive(Debug)]
pub struct Notifier {
    enabled: bool,
    /// Ping at least this often: half the watchdog interval systemd set.
    ping_every: Option<Duration>,
    said: Mutex<Said>,
}

#[derive(Debug, Default)]
struct Said {
    last_ping: Option<Duration>,
    ready: bool,
    stopping: bool,
    warned: bool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` (and `WATCHDOG_PID`).
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some();
        Notifier {
            enabled,
            ping_every: sd_notify::watchdog_enabled().filter(|_| enabled).map(|d| d / 2),
            said: Mutex::default(),
        }
    }

    fn said(&self) -> std::sync::MutexGuard<'_, Said> {
        self.said.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(said: &mut Said, states: &[NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            if !said.warned {
                said.warned = true;
                tracing::warn!("notifying the service manager (NOTIFY_SOCKET) failed: {e}");
            }
        }
    }

    /// After each tick of the daemon loop (`now`: monotonic).
    pub fn after_tick(&self, health: &Health, now: Duration) {
        if !self.enabled {
            return;
        }
        let mut said = self.said();
        // Once stopping, READY=1 would tell systemd the stop is over.
        if !said.ready && !said.stopping && health.ready().ok {
            said.ready = true;
            Self::send(&mut said, &[NotifyState::Ready, NotifyState::Status("joined the cluster")]);
        }
        if let Some(every) = self.ping_every {
            let due = said.last_ping.is_none_or(|t| now.saturating_sub(t) >= every.min(Duration::from_secs(1)));
            if due {
                said.last_ping = Some(now);
                Self::send(&mut said, &[NotifyState::Watchdog]);
            }
        }
    }

    /// A stop was asked (`status`: what the daemon does about it). Sent
    /// once; later calls send nothing.
    pub fn stopping(&self, status: &str) {
        if !self.enabled {
            return;
        }
        let mut said = self.said();
        if !said.stopping {
            said.stopping = true;
            Self::send(&mut said, &[NotifyState::Stopping, NotifyState::Status(status)]);
        }
    }

    /// Asks systemd to wait `left` more from now before it kills the
    /// service. It only ever extends its timeout, and never below
    /// `TimeoutStopSec`; nothing is sent for zero, which would ask for
    /// nothing. The crate's field is 32 bits of µs (71 min): a longer ask is
    /// cut to that, which is harmless as long as the caller renews it
    /// sooner.
    pub fn extend_stop(&self, left: Duration) {
        if !self.enabled || left.is_zero() {
            return;
        }
        let usec = u32::try_from(left.as_micros()).unwrap_or(u32::MAX);
        Self::send(&mut self.said(), &[NotifyState::ExtendTimeoutUsec(usec)]);
    }
}
