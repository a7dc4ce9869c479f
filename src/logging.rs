//! Log set-up: human-readable lines (or JSON, `--log-format json`) on
//! stderr, filtered by `RUST_LOG` (default `info`). Stdout is reserved for command output (`--json`).
//!
//! The credential-signing crates are capped at `info` whatever `RUST_LOG`
//! says: at `debug` they print the credentials they try, in clear.
//!
//! Logging never stops the process: a daemon whose stderr is full
//! (`2>/dev/full`), closed (`2>&1 | head -1`) or stalled (a reader that
//! stopped reading) must go on heartbeating and must still leave on SIGTERM.
//! So lines do not go to stderr from the thread that logs: they are queued
//! (at most [`QUEUE_LINES`]) for one writer thread, and a line that cannot be
//! queued or written is dropped and counted ([`dropped_lines`], exported as
//! `compactd_log_lines_dropped_total`). Only the writer thread can block on
//! a stalled stderr; [`flush`] waits for it a bounded time at exit.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Targets that must never log below `info` (they print secrets).
const SECRET_TARGETS: &[&str] = &[
    "reqsign",
    "reqsign_core",
    "reqsign_aws_v4",
    "reqsign_file_read_tokio",
    "reqsign_http_send_reqwest",
    "reqwest",
    "hyper",
];

/// Lines waiting for the writer thread at most; more are dropped. Lines are
/// short (a few hundred bytes), so this bounds the queue to a few MiB even
/// while stderr is stalled.
pub const QUEUE_LINES: usize = 4096;

/// How long [`flush`] waits for queued lines at exit: a stalled stderr must
/// not keep a node from leaving within its stated time.
pub const FLUSH_WAIT: Duration = Duration::from_secs(1);

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped since start: stderr refused them (full, closed, any
/// write error) or the queue was full because stderr stalled.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The writer thread's side: the queue, and how many lines it holds or is
/// writing (for [`flush`]).
struct Queue {
    tx: SyncSender<Vec<u8>>,
    pending: Mutex<usize>,
    drained: Condvar,
}

static QUEUE: OnceLock<Option<Queue>> = OnceLock::new();

/// The queue, with its writer thread started on first use; `None` if the
/// thread could not be started (lines are then written in place).
fn queue() -> Option<&'static Queue> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_LINES);
            let spawned = std::thread::Builder::new().name("log-writer".into()).spawn(move || write_lines(rx));
            spawned.ok().map(|_| Queue { tx, pending: Mutex::new(0), drained: Condvar::new() })
        })
        .as_ref()
}

/// Bytes of queued lines the writer thread joins into one write at most.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes the queued lines, those queued meanwhile joined into one write
/// (a busy daemon logs thousands of lines a second; a write and a wake-up
/// each cost more than the line).
fn write_lines(rx: Receiver<Vec<u8>>) {
    let mut batch = Vec::new();
    for first in rx.iter() {
        batch.clear();
        batch.extend_from_slice(&first);
        let mut lines = 1;
        while batch.len() < WRITE_BATCH {
            let Ok(line) = rx.try_recv() else { break };
            batch.extend_from_slice(&line);
            lines += 1;
        }
        if !write_now(&batch) {
            // Counted per line, as a line that could not be queued is.
            DROPPED.fetch_add(lines as u64 - 1, Ordering::Relaxed);
        }
        if let Some(q) = QUEUE.get().and_then(Option::as_ref) {
            let mut n = q.pending.lock().unwrap_or_else(|p| p.into_inner());
            *n = n.saturating_sub(lines);
            q.drained.notify_all();
        }
    }
}

/// One write to stderr; an error drops the line (counted), never panics.
/// False if it was dropped.
fn write_now(line: &[u8]) -> bool {
    let mut err = std::io::stderr().lock();
    if err.write_all(line).and_then(|()| err.flush()).is_err() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    true
}

/// Hands one complete line (or event) to the writer thread; never blocks
/// on stderr.
fn enqueue(line: Vec<u8>) {
    let Some(q) = queue() else {
        write_now(&line);
        return;
    };
    *q.pending.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = q.tx.try_send(line) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        let mut n = q.pending.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
    }
}

/// Prints a message line on stderr the way log lines go (after them, never
/// panicking, never blocking): for the CLI's own error lines, which
/// `eprintln!` would turn into a panic on a broken stderr.
pub fn eprint_line(msg: &str) {
    let mut line = msg.as_bytes().to_vec();
    line.push(b'\n');
    if QUEUE.get().is_some() {
        enqueue(line);
    } else {
        write_now(&line);
    }
}

/// Waits until the queued lines are written, at most [`FLUSH_WAIT`]; for
/// the end of the process (lines still queued after it are lost).
pub fn flush() {
    let Some(Some(q)) = QUEUE.get() else { return };
    let n = q.pending.lock().unwrap_or_else(|p| p.into_inner());
    let _ = q.drained.wait_timeout_while(n, FLUSH_WAIT, |n| *n > 0);
}

/// The `MakeWriter` of the log: each event is formatted into a buffer,
/// queued whole when the buffer is dropped.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueuedStderr;

/// One event's bytes.
#[derive(Debug, Default)]
pub struct EventBuf(Vec<u8>);

impl Write for EventBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuf {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            enqueue(std::mem::take(&mut self.0));
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for QueuedStderr {
    type Writer = EventBuf;

    fn make_writer(&'a self) -> EventBuf {
        EventBuf::default()
    }
}

pub fn filter() -> tracing_subscriber::EnvFilter {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    for target in SECRET_TARGETS {
        filter = filter.add_directive(format!("{target}=info").parse().expect("static directive"));
    }
    filter
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`,
    /// the event's fields, and its spans), for log shippers.
    Json,
}

pub fn init(format: LogFormat) {
    // tracing-subscriber reports a failed write with `eprintln!`, which
    // panics on the very stderr that failed: the writer counts instead.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(QueuedStderr)
        .log_internal_errors(false)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_stderr_is_counted_not_a_panic() {
        // The unit-test harness captures stderr in-process, so the write
        // itself is not failed here (tests/all/hostile/broken_stderr.rs does that with
        // real processes); this checks the queue's bookkeeping.
        let before = dropped_lines();
        for i in 0..10 {
            eprint_line(&format!("line {i}"));
        }
        enqueue(b"x\n".to_vec());
        flush();
        let q = QUEUE.get().and_then(Option::as_ref).expect("the writer thread starts");
        assert_eq!(*q.pending.lock().unwrap(), 0, "flush waited for every queued line");
        assert_eq!(dropped_lines(), before, "nothing dropped on a working stderr");
    }
}
