//! Writes: staged under a temp name beside the target, completed (closed),
//! then published by one `rename2` (see the module doc of `hdfs`).
//!
//! The temp file is created on the first write (or at close for an empty
//! file), so content is streamed to the DataNodes as it comes and never held
//! whole. A writer dropped or aborted before its close deletes its temp file
//! (best effort; a listing removes what a crash leaves).

use std::sync::Arc;

use hdfs_native::file::FileWriter;
use hdfs_native::{HdfsError, WriteOptions};
use opendal::raw::oio;
use opendal::{Buffer, Error, ErrorKind, Metadata, MetadataBuilder, Result};

use super::{temp_name, to_error, Core, Method};

pub struct HdfsWriter {
    core: Arc<Core>,
    path: String,
    /// Create-once (rename without OVERWRITE) or replace.
    once: bool,
    /// The absolute temp path and its open writer, from the first write.
    temp: Option<(String, FileWriter)>,
    len: u64,
}

impl HdfsWriter {
    pub(super) fn new(core: Arc<Core>, path: &str, once: bool) -> Self {
        HdfsWriter { core, path: path.to_string(), once, temp: None, len: 0 }
    }

    async fn open(&mut self) -> Result<&mut FileWriter> {
        if self.temp.is_none() {
            let abs = self.core.abs(&temp_name(&self.path));
            // Overwrite: the name is this process's own (see `temp_name`);
            // create_parent makes the target's folder in the same RPC.
            let w = self
                .core
                .client
                .create(&abs, WriteOptions::default().overwrite(true).create_parent(true))
                .await
                .map_err(|e| to_error(e, "create (temp)").with_context("path", &self.path))?;
            self.temp = Some((abs, w));
        }
        Ok(&mut self.temp.as_mut().expect("opened above").1)
    }

    /// Deletes the temp file, if any (best effort).
    async fn discard(&mut self) {
        if let Some((abs, _)) = self.temp.take() {
            self.core.count(Method::Delete);
            let _ = self.core.client.delete(&abs, false).await;
        }
    }
}

impl oio::Write for HdfsWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        let n = bs.len() as u64;
        let path = self.path.clone();
        let w = self.open().await?;
        for chunk in bs {
            if let Err(e) = w.write_bytes(chunk).await {
                let err = to_error(e, "write").with_context("path", &path);
                self.discard().await;
                return Err(err);
            }
        }
        self.len += n;
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        self.open().await?;
        let (abs, mut w) = self.temp.take().expect("opened above");
        self.core.count_write(self.len);
        if let Err(e) = w.close().await {
            // A DataNode pipeline that could not be completed: nothing is
            // published, and the temp file goes.
            self.temp = Some((abs, w));
            self.discard().await;
            return Err(to_error(e, "complete").with_context("path", &self.path));
        }
        let target = self.core.abs(&self.path);
        self.core.count(Method::Rename2);
        match self.core.client.rename(&abs, &target, !self.once).await {
            Ok(()) => Ok(MetadataBuilder::file(self.len).build()),
            Err(e) => {
                let exists = matches!(&e, HdfsError::AlreadyExists(_))
                    || matches!(&e, HdfsError::RPCError(c, _) if c.ends_with("FileAlreadyExistsException"));
                self.core.count(Method::Delete);
                let _ = self.core.client.delete(&abs, false).await;
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

    async fn abort(&mut self) -> Result<()> {
        self.discard().await;
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
