//! The child's side of the limit: a built-in executor asks its daemon for
//! each read or write before doing it.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ThrottleError, CHUNK, FD_ENV};

/// Asks the node's limit for bytes; without one (the default) every ask
/// returns at once. Clones share the one socket, and asks from several
/// tasks of the child take turns chunk by chunk.
#[derive(Debug, Clone, Default)]
pub struct Throttle(Option<Arc<tokio::sync::Mutex<Socket>>>);

#[derive(Debug)]
struct Socket {
    stream: tokio::net::UnixStream,
    /// Asks sent whose grant was not read: a task cancelled while it
    /// waited (an aborted decoder). The next ask reads those grants first,
    /// so that no ask mistakes another's grant for its own.
    unanswered: usize,
}

impl Socket {
    fn new(stream: tokio::net::UnixStream) -> Arc<tokio::sync::Mutex<Socket>> {
        Arc::new(tokio::sync::Mutex::new(Socket { stream, unanswered: 0 }))
    }

    async fn grant(&mut self) -> Result<(), ThrottleError> {
        let mut granted = [0u8; 1];
        self.stream.read_exact(&mut granted).await.map_err(ThrottleError::Gone)?;
        self.unanswered -= 1;
        Ok(())
    }
}

impl Throttle {
    /// No limit.
    pub fn none() -> Throttle {
        Throttle(None)
    }

    /// The limit the daemon gave this process ([`FD_ENV`]); none if the
    /// variable is not set. Call it once: it takes the descriptor over.
    pub fn from_env() -> Result<Throttle, ThrottleError> {
        let Ok(value) = std::env::var(FD_ENV) else {
            return Ok(Throttle::none());
        };
        let bad = |why: String| ThrottleError::Setup { value: value.clone(), why };
        let fd: i32 = value.trim().parse().map_err(|_| bad("not a descriptor number".into()))?;
        if fd < 0 {
            return Err(bad("not a descriptor number".into()));
        }
        // Check before owning: an inherited variable naming some other
        // descriptor must not have it closed or read by us.
        let meta = std::fs::metadata(format!("/proc/self/fd/{fd}")).map_err(|e| bad(e.to_string()))?;
        if !meta.file_type().is_socket() {
            return Err(bad("not a socket".into()));
        }
        // SAFETY: the descriptor is open (checked above) and the daemon gave
        // it to this process for this use alone; nothing else here owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let std = std::os::unix::net::UnixStream::from(owned);
        std.set_nonblocking(true).map_err(|e| bad(e.to_string()))?;
        let s = tokio::net::UnixStream::from_std(std).map_err(|e| bad(e.to_string()))?;
        Ok(Throttle(Some(Socket::new(s))))
    }

    /// A limit asked over `socket` (the tests' own pair).
    #[cfg(test)]
    pub(super) fn over(socket: tokio::net::UnixStream) -> Throttle {
        Throttle(Some(Socket::new(socket)))
    }

    /// Whether a limit applies.
    pub fn is_limited(&self) -> bool {
        self.0.is_some()
    }

    /// Waits until the node grants `bytes` (in chunks of at most [`CHUNK`]).
    pub async fn take(&self, mut bytes: u64) -> Result<(), ThrottleError> {
        let Some(socket) = &self.0 else { return Ok(()) };
        while bytes > 0 {
            let n = bytes.min(CHUNK);
            // Held for one chunk only: another task of this child asks next.
            let mut s = socket.lock().await;
            while s.unanswered > 0 {
                s.grant().await?;
            }
            s.stream.write_all(&(n as u32).to_le_bytes()).await.map_err(ThrottleError::Gone)?;
            s.unanswered += 1;
            s.grant().await?;
            bytes -= n;
        }
        Ok(())
    }
}
