//! systemd integration of `compactd run` (`Type=notify`): `READY=1` once the
//! node is in the monitor's member view, `WATCHDOG=1` after each tick of the
//! daemon loop (at most once a second), `STOPPING=1` on leave. The watchdog
//! follows the loop, not the backend: a loop that stops ticking is a bug a
//! restart cures; a backend outage is not (restarting would only add a
//! restart loop to it), so it shows on `/healthz` instead.
//!
//! Owns nothing but when it last pinged. Without `NOTIFY_SOCKET` in the
//! environment every call is a no-op, so the daemon runs the same under any
//! supervisor. A failed send is logged once and never stops the node.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::serve::metrics::Health;

#[derive(Debug)]
pub struct Notifier {
    enabled: bool,
    /// Ping at least this often: half the watchdog interval systemd set.
    ping_every: Option<Duration>,
    last_ping: Option<Duration>,
    ready: bool,
    warned: bool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` (and `WATCHDOG_PID`).
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some();
        Notifier {
            enabled,
            ping_every: sd_notify::watchdog_enabled().filter(|_| enabled).map(|d| d / 2),
            last_ping: None,
            ready: false,
            warned: false,
        }
    }

    fn send(&mut self, states: &[NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            if !self.warned {
                self.warned = true;
                tracing::warn!("notifying the service manager (NOTIFY_SOCKET) failed: {e}");
            }
        }
    }

    /// After each tick of the daemon loop (`now`: monotonic).
    pub fn after_tick(&mut self, health: &Health, now: Duration) {
        if !self.enabled {
            return;
        }
        if !self.ready && health.ready().ok {
            self.ready = true;
            self.send(&[NotifyState::Ready, NotifyState::Status("joined the cluster")]);
        }
        if let Some(every) = self.ping_every {
            let due = self.last_ping.is_none_or(|t| now.saturating_sub(t) >= every.min(Duration::from_secs(1)));
            if due {
                self.last_ping = Some(now);
                self.send(&[NotifyState::Watchdog]);
            }
        }
    }

    /// The daemon is leaving the cluster.
    pub fn stopping(&mut self) {
        if self.enabled {
            self.send(&[NotifyState::Stopping]);
        }
    }
}
