//! The daemon's side of the limit: one [`IoLimit`] per node, shared by the
//! tasks that serve its executors' sockets.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::bucket::Bucket;
use super::{IoStats, CHUNK, FD_ENV};
use crate::clock::SharedClock;

/// A node's limit: its bucket, its clock and what it granted.
#[derive(Debug, Clone)]
pub struct IoLimit {
    bucket: Arc<Mutex<Bucket>>,
    clock: SharedClock,
    stats: Arc<IoStats>,
    rate: u64,
}

impl IoLimit {
    /// `rate` bytes per second for the whole node.
    pub fn new(rate: u64, clock: SharedClock) -> IoLimit {
        let bucket = Bucket::new(rate, Bucket::burst_for(rate), clock.mono());
        IoLimit { bucket: Arc::new(Mutex::new(bucket)), clock, stats: Default::default(), rate }
    }

    /// Bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Counts grants into `stats` (the node's metrics) from now on.
    pub fn count_into(&mut self, stats: Arc<IoStats>) {
        self.stats = stats;
    }

    /// Gives the executor about to be started by `cmd` its end of a new
    /// grant socket (as its standard input, named by [`FD_ENV`]) and serves
    /// the other end until the executor closes it.
    pub fn attach(&self, cmd: &mut tokio::process::Command) -> std::io::Result<()> {
        // Standard input, not an inherited descriptor of its own: the spawn
        // puts it in place without code between fork and exec, and no other
        // child can inherit it (both ends are close-on-exec here).
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let ours = tokio::net::UnixStream::from_std(ours)?;
        cmd.stdin(std::process::Stdio::from(OwnedFd::from(theirs))).env(FD_ENV, "0");
        tokio::spawn(self.clone().serve(ours));
        Ok(())
    }

    /// Grants one child's requests, one at a time, until it closes its end.
    pub(super) async fn serve(self, mut child: tokio::net::UnixStream) {
        let mut ask = [0u8; 4];
        while child.read_exact(&mut ask).await.is_ok() {
            // A child asks for a chunk at most; a larger ask is cut to one
            // so that no request holds the others back for long.
            let bytes = u64::from(u32::from_le_bytes(ask)).min(CHUNK);
            let wait = self.bucket.lock().unwrap_or_else(|e| e.into_inner()).reserve(self.clock.mono(), bytes);
            if !wait.is_zero() {
                // The limit is bytes per real second: this task waits real
                // time, like the daemon loop, on a span computed on the clock.
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep(wait).await;
            }
            self.stats.granted(bytes, wait);
            if child.write_all(&[1]).await.is_err() {
                break;
            }
        }
    }
}
