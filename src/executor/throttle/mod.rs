//! The per-node I/O rate limit of the built-in executors (`run --io-limit`):
//! bytes read plus bytes written by a node's `merge` and `parquet` children,
//! together, per second.
//!
//! Owns: the token bucket ([`bucket`]), the daemon's side that grants bytes
//! ([`IoLimit`], [`grant`]), the child's side that asks for them
//! ([`Throttle`], [`take`]), and the wire between them.
//!
//! How: the daemon owns one bucket. Each built-in executor it starts gets
//! one end of a fresh socketpair as its standard input, named by
//! [`FD_ENV`]; a task of the daemon serves the other end. Before each read
//! or write of data the child asks for its size, in requests of at most
//! [`CHUNK`] bytes (a little-endian `u32`), and waits for the one-byte
//! grant. Requests are served in the order they reach the bucket, each
//! reserving its bytes at once, so children that ask at the same time
//! share the limit chunk by chunk.
//!
//! Invariants:
//! - Over any span of `t` seconds the node grants at most
//!   `burst + limit × t` bytes ([`bucket::Bucket`]; `burst` is a tenth of a
//!   second of the limit, at least one chunk), however many children ask.
//! - Data bytes count, read and written: every read of a merge's inputs
//!   (footer checks included) and every write of its staged outputs. The
//!   small commit and listing requests do not, nor does
//!   a promotion (a rename, or S3's server-side copy: no bytes through
//!   the node).
//! - Without a limit nothing changes: no socket, no variable, no request.
//! - A child whose daemon is gone fails its next request
//!   ([`ThrottleError::Gone`]) and stops: it would be killed anyway.
//! - A killed child's reserved but unused chunk (at most [`CHUNK`]) is
//!   lost to the node; the limit errs on the side of less I/O.

pub mod bucket;
pub mod grant;
pub mod take;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use grant::IoLimit;
pub use take::Throttle;

/// The environment variable naming the child's end of the grant socket.
pub const FD_ENV: &str = "COMPACTD_IO_LIMIT_FD";

/// The largest grant one request asks for: small enough that several
/// executors take turns many times a second, large enough that a request
/// costs nothing next to the I/O it admits.
pub const CHUNK: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ThrottleError {
    /// [`FD_ENV`] is set but does not name a socket this process holds.
    #[error("{FD_ENV}={value:?} is not the node's I/O limit socket: {why}")]
    Setup { value: String, why: String },
    /// The daemon stopped answering.
    #[error("the node's I/O limiter is gone ({0}): the daemon that started this executor has ended")]
    Gone(#[source] std::io::Error),
}

/// What a node's limit granted, for `/metrics`: bytes, and the time
/// executors waited for them, summed over executors.
#[derive(Debug, Default)]
pub struct IoStats {
    bytes: AtomicU64,
    waited_ns: AtomicU64,
}

impl IoStats {
    fn granted(&self, bytes: u64, waited: Duration) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.waited_ns.fetch_add(waited.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// Bytes granted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Time executors waited for their grants so far.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed))
    }
}

/// A child's side served by `limit` in this process (tests of executors).
#[cfg(test)]
pub(crate) fn served(limit: &IoLimit) -> Throttle {
    let (ours, theirs) = tokio::net::UnixStream::pair().expect("a socketpair");
    tokio::spawn(limit.clone().serve(ours));
    Throttle::over(theirs)
}

#[cfg(test)]
mod tests;
