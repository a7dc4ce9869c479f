//! The executors' reaper: a small `compactd __reaper` process that a daemon
//! starts once, at start-up, and tells over a pipe which process groups its
//! executors lead (`+<pgid>` when one starts, `-<pgid>` when it has ended).
//! When the pipe closes, because the daemon is gone however it ended
//! (SIGKILL, OOM, panic), the reaper kills every group still registered and
//! exits.
//!
//! It also keeps the node's session-guard deadline (`D<ns>`, an instant of
//! `CLOCK_BOOTTIME`, see [`super::groups`]): once that instant passes it
//! kills every group registered, and any registered later until a new
//! deadline comes. The daemon kills them there itself; the reaper's copy
//! is what holds when the daemon cannot (SIGSTOP, a starved or stuck
//! runtime), since the monitor's clock keeps running.
//!
//! Why a process and not `PR_SET_PDEATHSIG` in each child: setting it needs
//! code between fork and exec, which forces a full `fork` of the daemon (its
//! hundreds of mappings and threads) for every executor; without it the
//! standard library spawns with `posix_spawn` (a `vfork`), which was a third
//! of a 2,000-subtask dispatch's CPU on tmpfs. And the reaper kills each
//! executor's whole process group, where the death signal reached only the
//! shell and left whatever it had started running.
//!
//! The reaper ignores SIGINT, SIGTERM and SIGHUP: it ends with its daemon
//! (whose own shutdown kills its executors first), never before it. If it
//! dies anyway, the daemon's next message fails and a new reaper is started
//! with the groups then alive; if none can be started, executors fall back
//! to the death signal (see [`super::spawn`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The daemon's end: the reaper process and the pipe to it.
pub(super) struct Reaper {
    child: Child,
    /// Non-blocking: the daemon never waits on the reaper (a stopped or
    /// slow reaper must not stall the thread that starts executors, which
    /// holds their registry's lock).
    pipe: Option<ChildStdin>,
    /// Messages the pipe had no room for yet, written before the next one.
    pending: Vec<u8>,
}

impl Reaper {
    /// Starts `<this executable> __reaper` in its own process group (a
    /// Ctrl-C in the daemon's terminal is not for it), told of `live`.
    pub(super) fn start(live: &BTreeMap<i32, u64>, deadline: Option<u64>) -> std::io::Result<Reaper> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("__reaper").stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit()).process_group(0);
        for k in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            cmd.env_remove(k);
        }
        let mut child = cmd.spawn()?;
        let pipe = child.stdin.take();
        if let Some(p) = &pipe {
            use std::os::fd::AsRawFd;
            let fd = p.as_raw_fd();
            // SAFETY: flags of a descriptor this process owns.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        let mut r = Reaper { child, pipe, pending: Vec::new() };
        if let Some(d) = deadline {
            r.send(&format!("D{d}"))?;
        }
        for g in live.keys() {
            r.send(&format!("+{g}"))?;
        }
        tracing::debug!(pid = r.child.id(), "executors' reaper started");
        Ok(r)
    }

    /// One message; `Err` if the reaper is gone. Never blocks: what the
    /// pipe has no room for waits in memory for the next message (a few
    /// bytes per executor started or ended while the reaper is stopped).
    pub(super) fn send(&mut self, msg: &str) -> std::io::Result<()> {
        let pipe = self.pipe.as_mut().ok_or_else(|| std::io::Error::other("the pipe to the reaper is closed"))?;
        self.pending.extend_from_slice(msg.as_bytes());
        self.pending.push(b'\n');
        while !self.pending.is_empty() {
            match pipe.write(&self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // End of the pipe: the reaper kills what is still registered (after a
        // clean shutdown, nothing) and exits; wait so that no zombie is left.
        drop(self.pipe.take());
        // A stopped reaper must not hold the daemon's exit: wait a moment,
        // then leave it (it reads the end of the pipe when it runs again).
        for _ in 0..100 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            // Exit path of the daemon, on real time.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// How long the reaper waits on its pipe at most while a deadline is set:
/// it reads the clock again after each wait, so a suspended host or a
/// missed wake-up costs at most this much lateness.
const DEADLINE_SLICE_MS: u64 = 500;

/// The reaper's side (`compactd __reaper`): reads messages from stdin until
/// it closes, killing every registered group whenever the deadline passes;
/// at the end it kills every group still registered. Returns the exit code.
pub fn serve() -> i32 {
    // SAFETY: setting signal dispositions in a single-threaded process.
    unsafe {
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(s, libc::SIG_IGN);
        }
    }
    let mut state = ReaperState::default();
    let mut buf = Vec::new();
    loop {
        let now = crate::clock::boot_ns();
        state.kill_if_due(now);
        let timeout: i32 = match state.deadline {
            Some(d) if d > now => ((d - now) / 1_000_000 + 1).min(DEADLINE_SLICE_MS) as i32,
            _ => -1,
        };
        let mut pfd = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if n == 0 || (n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted) {
            continue;
        }
        let mut chunk = [0u8; 4096];
        // SAFETY: reading into a buffer we own.
        let r = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
        if r <= 0 {
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        buf.extend_from_slice(&chunk[..r as usize]);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            state.apply(String::from_utf8_lossy(&line[..end]).trim(), crate::clock::boot_ns());
        }
    }
    state.deadline = Some(0);
    state.kill_if_due(crate::clock::boot_ns());
    0
}

/// What the reaper knows: the live groups and the deadline.
#[derive(Debug, Default)]
struct ReaperState {
    live: BTreeSet<i32>,
    /// `CLOCK_BOOTTIME` ns; `None` until the daemon sends one.
    deadline: Option<u64>,
}

impl ReaperState {
    fn apply(&mut self, line: &str, now: u64) {
        let (op, n) = line.split_at(line.len().min(1));
        match (op, n.parse::<i64>()) {
            ("+", Ok(g)) if g > 0 && g <= i32::MAX as i64 => {
                self.live.insert(g as i32);
                // Started past the deadline (the daemon's clock and ours
                // disagree by the pipe's delay only): it must not live.
                self.kill_if_due(now);
            }
            ("-", Ok(g)) => {
                self.live.remove(&(g as i32));
            }
            ("D", Ok(d)) if d >= 0 => self.deadline = Some(d as u64),
            // Only a daemon writes here; anything else is ignored.
            _ => {}
        }
    }

    fn kill_if_due(&mut self, now: u64) {
        if self.deadline.is_some_and(|d| now >= d) {
            for &g in &self.live {
                // SAFETY: plain syscall; every group here was an executor's.
                unsafe {
                    libc::killpg(g, libc::SIGKILL);
                }
            }
            // A killed group's `-` may never come (the daemon is stopped):
            // forgotten here, so that a reused pgid is not killed later.
            self.live.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_kills_what_is_registered_then_and_later() {
        let mut s = ReaperState::default();
        s.apply("+999999999", 10);
        s.apply("D100", 10);
        s.kill_if_due(50);
        assert_eq!(s.live.len(), 1, "not due yet");
        s.apply("D200", 60);
        s.kill_if_due(150);
        assert_eq!(s.live.len(), 1, "the deadline moved on");
        s.kill_if_due(200);
        assert!(s.live.is_empty(), "due: killed and forgotten");
        s.apply("+999999998", 250);
        assert!(s.live.is_empty(), "registered past the deadline: killed at once");
        s.apply("D1000", 260);
        s.apply("+999999997", 270);
        s.apply("x", 270);
        assert_eq!(s.live.len(), 1);
    }
}
