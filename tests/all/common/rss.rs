//! A command's peak resident set, as GNU time (`/usr/bin/time`) reports it.
//!
//! Not the rusage `wait4` gives this process for a child: a child spawned
//! from here carries this test binary's pages until its `exec`, and the
//! kernel keeps the larger of the two peaks. With every test in one
//! process, that is the test binary's peak (80 to 130 MiB), not the
//! command's. `time` forks the command from a process of a megabyte or two.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Measured {
    pub output: Output,
    /// Peak RSS in KiB.
    pub peak_kib: u64,
    /// Killed (with its process group) for running past the limit.
    pub killed: bool,
}

impl Measured {
    /// Standard output, then standard error, as text.
    pub fn text(&self) -> String {
        format!("{}{}", String::from_utf8_lossy(&self.output.stdout), String::from_utf8_lossy(&self.output.stderr))
    }
}

/// Runs `cmd` (its program, arguments and environment; stdin closed) to
/// its end, or kills it past `limit`.
pub fn peak_rss(cmd: &Command, limit: Duration) -> Measured {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new("/usr/bin/time");
    timed.args(["-f", "%M", "-o"]).arg(report.path()).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    let child = timed
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("GNU time (/usr/bin/time, Debian's time; .ci/install-test-deps.sh installs it)");
    let group = child.id() as i32;
    let (done, killed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (watch_done, watch_killed) = (done.clone(), killed.clone());
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if watch_done.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !watch_done.load(Ordering::SeqCst) {
            watch_killed.store(true, Ordering::SeqCst);
            // SAFETY: signals the process group this function made.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    });
    let output = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    // "Command exited with non-zero status N" comes first when it did.
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let peak_kib = text.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    Measured { output, peak_kib, killed: killed.load(Ordering::SeqCst) }
}
