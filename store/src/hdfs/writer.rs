//! Writes: staged under a temp name beside the target, completed (closed),
//! then published by one `rename2` (see the module doc of `hdfs`); an empty
//! create-once file (a marker) is created at its name directly.
//!
//! Content up to [`BUFFER`] is held in memory and the whole write (create,
//! data, complete, rename) happens in `close`, so a `close` that failed can
//! be called again and does it all again from the buffer: OpenDAL's retry
//! layer retries a writer's failed `close`, and the tree's files are far
//! smaller than the buffer. Larger content (an executor's output) is
//! streamed to the temp file as it comes; once streaming, a failed write or
//! close **poisons** the writer: every later call fails and nothing is ever
//! published (a retried `close` after a failed write must not publish what
//! the temp file holds, which may be nothing). A writer dropped or aborted
//! before its close deletes its temp file (best effort; a listing removes
//! what a crash leaves).

use std::sync::Arc;

use hdfs_native::file::FileWriter;
use hdfs_native::{HdfsError, WriteOptions};
use opendal::raw::oio;
use opendal::{Buffer, Error, ErrorKind, Metadata, MetadataBuilder, Result};

use super::{temp_name, to_error, Core, Method};

/// Content held in memory before a write streams to its temp file.
const BUFFER: usize = 8 << 20;

pub struct HdfsWriter {
    core: Arc<Core>,
    path: String,
    /// Create-once (rename without OVERWRITE) or replace.
    once: bool,
    /// Content not yet sent to a temp file.
    buf: Vec<bytes::Bytes>,
    buffered: usize,
    /// The absolute temp path and its open writer, once streaming.
    temp: Option<(String, FileWriter)>,
    /// A streamed write or close failed: nothing may be published.
    poisoned: bool,
    len: u64,
}

impl HdfsWriter {
    pub(super) fn new(core: Arc<Core>, path: &str, once: bool) -> Self {
        HdfsWriter {
            core,
            path: path.to_string(),
            once,
            buf: Vec::new(),
            buffered: 0,
            temp: None,
            poisoned: false,
            len: 0,
        }
    }

    fn poisoned_error(&self) -> Error {
        Error::new(ErrorKind::Unexpected, "an earlier write of this file failed: nothing was published")
            .with_context("path", &self.path)
    }

    async fn create_temp(&self) -> Result<(String, FileWriter)> {
        let abs = self.core.abs(&temp_name(&self.path));
        // Overwrite: the name is this process's own (see `temp_name`);
        // create_parent makes the target's folder in the same RPC.
        let w = self
            .core
            .client
            .create(&abs, WriteOptions::default().overwrite(true).create_parent(true))
            .await
            .map_err(|e| to_error(e, "create (temp)").with_context("path", &self.path))?;
        Ok((abs, w))
    }

    /// Sends the buffered content to the temp file.
    async fn flush(w: &mut FileWriter, buf: &mut Vec<bytes::Bytes>) -> std::result::Result<(), HdfsError> {
        for chunk in buf.drain(..) {
            w.write_bytes(chunk).await?;
        }
        Ok(())
    }

    /// Deletes a temp file (best effort).
    async fn discard(&self, abs: &str) {
        self.core.count(Method::Delete);
        let _ = self.core.client.delete(abs, false).await;
    }

    /// Creates the empty file at the target itself (see `close`): 2
    /// NameNode RPCs and no block. An existing name, one being created by
    /// another client, or one whose dead creator's lease is being recovered,
    /// all mean "exists". A `complete` that fails leaves the empty file
    /// standing (its name is already the decision): the error says so, and
    /// a reader finds the name either way, as for a create whose reply was
    /// lost.
    async fn create_empty(&self) -> Result<()> {
        let target = self.core.abs(&self.path);
        self.core.count(Method::Create);
        let opts = WriteOptions::default().overwrite(false).create_parent(true);
        let mut w = match self.core.client.create(&target, opts).await {
            Ok(w) => w,
            Err(e) => {
                let exists = matches!(&e, HdfsError::AlreadyExists(_))
                    || matches!(&e, HdfsError::RPCError(c, _) if c.ends_with("FileAlreadyExistsException")
                        || c.ends_with("AlreadyBeingCreatedException")
                        || c.ends_with("RecoveryInProgressException"));
                if exists {
                    return Err(Error::new(
                        ErrorKind::ConditionNotMatch,
                        "file already exists, doesn't match the condition if_not_exists",
                    )
                    .with_context("path", &self.path));
                }
                return Err(to_error(e, "create (empty)").with_context("path", &self.path));
            }
        };
        self.core.count(Method::Complete);
        w.close().await.map_err(|e| to_error(e, "complete (empty)").with_context("path", &self.path))
    }

    /// Completes the temp file and publishes it at the target.
    async fn publish(&self, abs: String, mut w: FileWriter) -> Result<()> {
        self.core.count_write(self.len);
        #[cfg(feature = "testing")]
        if failpoint::complete_fails() {
            drop(w);
            self.discard(&abs).await;
            return Err(Error::new(ErrorKind::Unexpected, "hdfs complete: injected failure (testing)")
                .with_context("path", &self.path)
                .set_temporary());
        }
        if let Err(e) = w.close().await {
            // A DataNode pipeline that could not be completed: nothing is
            // published, and the temp file goes.
            self.discard(&abs).await;
            return Err(to_error(e, "complete").with_context("path", &self.path));
        }
        let target = self.core.abs(&self.path);
        self.core.count(Method::Rename2);
        match self.core.client.rename(&abs, &target, !self.once).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let exists = matches!(&e, HdfsError::AlreadyExists(_))
                    || matches!(&e, HdfsError::RPCError(c, _) if c.ends_with("FileAlreadyExistsException"));
                self.discard(&abs).await;
                if self.once && exists {
                    Err(Error::new(
                        ErrorKind::ConditionNotMatch,
                        "file already exists, doesn't match the condition if_not_exists",
                    )
                    .with_context("path", &self.path))
                } else {
                    // Lost reply or any other failure: not "created", not
                    // "exists" (see the module doc).
                    Err(to_error(e, "rename2 (publish)").with_context("path", &self.path))
                }
            }
        }
    }
}

impl oio::Write for HdfsWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        if self.poisoned {
            return Err(self.poisoned_error());
        }
        self.len += bs.len() as u64;
        self.buffered += bs.len();
        self.buf.extend(bs);
        if self.buffered < BUFFER {
            return Ok(());
        }
        if self.temp.is_none() {
            match self.create_temp().await {
                Ok(t) => self.temp = Some(t),
                Err(e) => {
                    self.poisoned = true;
                    return Err(e);
                }
            }
        }
        let (abs, w) = self.temp.as_mut().expect("created above");
        if let Err(e) = Self::flush(w, &mut self.buf).await {
            let abs = abs.clone();
            self.poisoned = true;
            self.temp = None;
            self.discard(&abs).await;
            return Err(to_error(e, "write").with_context("path", &self.path));
        }
        self.buffered = 0;
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        if self.poisoned {
            return Err(self.poisoned_error());
        }
        match self.temp.take() {
            // Streaming: the rest of the content, then publish; a failure
            // poisons the writer.
            Some((abs, mut w)) => {
                if let Err(e) = Self::flush(&mut w, &mut self.buf).await {
                    self.poisoned = true;
                    self.discard(&abs).await;
                    return Err(to_error(e, "write").with_context("path", &self.path));
                }
                let r = self.publish(abs, w).await;
                self.poisoned = r.is_err();
                r?;
            }
            // An empty create-once file: one `create` without overwrite at
            // the name itself, then `complete`. Nothing to stage: a marker
            // under construction and a completed one both read as empty, so
            // the name is complete from the moment it is visible.
            None if self.once && self.len == 0 => self.create_empty().await?,
            // Buffered: the whole write from the buffer, which stays, so a
            // failed close can be retried.
            None => {
                let (abs, mut w) = self.create_temp().await?;
                let mut buf = self.buf.clone();
                if let Err(e) = Self::flush(&mut w, &mut buf).await {
                    self.discard(&abs).await;
                    return Err(to_error(e, "write").with_context("path", &self.path));
                }
                self.publish(abs, w).await?;
            }
        }
        Ok(MetadataBuilder::file(self.len).build())
    }

    async fn abort(&mut self) -> Result<()> {
        self.buf.clear();
        if let Some((abs, _)) = self.temp.take() {
            self.discard(&abs).await;
        }
        Ok(())
    }
}

impl Drop for HdfsWriter {
    fn drop(&mut self) {
        if let Some((abs, _)) = self.temp.take() {
            let core = self.core.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    core.count(Method::Delete);
                    let _ = core.client.delete(&abs, false).await;
                });
            }
        }
    }
}

/// A failpoint for tests: the next `n` completes of this process fail as a
/// DataNode pipeline that dies between the last write and `complete` does
/// (the file is left under construction, and the error is temporary, so the
/// store's retry layer retries the close).
#[cfg(feature = "testing")]
pub mod failpoint {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static COMPLETES: AtomicUsize = AtomicUsize::new(0);

    pub fn fail_next_completes(n: usize) {
        COMPLETES.store(n, Ordering::SeqCst);
    }

    pub(super) fn complete_fails() -> bool {
        COMPLETES.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}
