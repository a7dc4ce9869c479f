//! The executors' reaper: a small `compactd __reaper` process that a daemon
//! starts once, at start-up, and tells over a pipe which process groups its
//! executors lead (`+<pgid>` when one starts, `-<pgid>` when it has ended).
//! When the pipe closes, because the daemon is gone however it ended
//! (SIGKILL, OOM, panic), the reaper kills every group still registered and
//! exits.
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

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
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
    pub(super) fn start(live: &BTreeSet<i32>) -> std::io::Result<Reaper> {
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
        for g in live {
            r.send('+', *g)?;
        }
        tracing::debug!(pid = r.child.id(), "executors' reaper started");
        Ok(r)
    }

    /// One message; `Err` if the reaper is gone. Never blocks: what the
    /// pipe has no room for waits in memory for the next message (a few
    /// bytes per executor started or ended while the reaper is stopped).
    pub(super) fn send(&mut self, op: char, pgid: i32) -> std::io::Result<()> {
        let pipe = self.pipe.as_mut().ok_or_else(|| std::io::Error::other("the pipe to the reaper is closed"))?;
        self.pending.extend_from_slice(format!("{op}{pgid}\n").as_bytes());
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

/// The reaper's side (`compactd __reaper`): reads messages from stdin until
/// it closes, then kills every group still registered. Returns the exit code.
pub fn serve() -> i32 {
    // SAFETY: setting signal dispositions in a single-threaded process.
    unsafe {
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(s, libc::SIG_IGN);
        }
    }
    let mut live = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (op, n) = line.split_at(line.len().min(1));
        match (op, n.parse::<i32>()) {
            ("+", Ok(g)) if g > 0 => {
                live.insert(g);
            }
            ("-", Ok(g)) => {
                live.remove(&g);
            }
            // Only a daemon writes here; anything else is ignored.
            _ => {}
        }
    }
    for g in live {
        // SAFETY: plain syscall; every group here was an executor's.
        unsafe {
            libc::killpg(g, libc::SIGKILL);
        }
    }
    0
}
