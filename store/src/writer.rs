//! Streamed whole-object writes ([`StoreWriter`], from
//! [`Store::writer`]): content too large to hold in memory goes to the
//! backend as it comes and becomes visible at once on
//! [`StoreWriter::close`] (fs: a temp file in the folder, synced and
//! renamed; S3: a multipart upload completed on close; HDFS: a temp file
//! renamed by the NameNode).

use bytes::Bytes;
use opendal::ErrorKind;

use crate::{beneath, Result, Store, StoreError};

/// Part size of streamed writes (S3 multipart: at least 5 MiB).
pub(crate) const WRITE_CHUNK: usize = 8 << 20;

/// A streamed write in progress ([`Store::writer`]). Dropped without
/// [`StoreWriter::close`], nothing becomes visible (fs: the temp file is
/// removed; S3: the upload is never completed).
pub struct StoreWriter {
    store: Store,
    path: String,
    inner: WriterInner,
    written: u64,
}

pub(crate) enum WriterInner {
    Fs(Option<beneath::PutFile>),
    Dal(opendal::Writer),
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter").field("path", &self.path).field("written", &self.written).finish()
    }
}

impl StoreWriter {
    pub(crate) fn new(store: Store, path: &str, inner: WriterInner) -> StoreWriter {
        StoreWriter { store, path: path.to_string(), inner, written: 0 }
    }

    /// Appends `bytes`.
    pub async fn write(&mut self, bytes: Bytes) -> Result<()> {
        let n = bytes.len() as u64;
        match &mut self.inner {
            WriterInner::Fs(slot) => {
                let mut put = slot.take().expect("a writer is not used after a failed write");
                let (put, r) = tokio::task::spawn_blocking(move || {
                    let r = put.write(&bytes);
                    (put, r)
                })
                .await
                .expect("fs write does not panic");
                r.map_err(|e| fs_err(&self.store, "write", &self.path, e))?;
                *slot = Some(put);
            }
            WriterInner::Dal(w) => w.write(bytes).await.map_err(|e| self.store.err("write", &self.path, e))?,
        }
        self.written += n;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Publishes the object whole.
    pub async fn close(self) -> Result<()> {
        let StoreWriter { store, path, inner, .. } = self;
        match inner {
            WriterInner::Fs(slot) => {
                let put = slot.expect("a writer is not used after a failed write");
                let r = tokio::task::spawn_blocking(move || put.finish()).await.expect("fs finish does not panic");
                r.map_err(|e| fs_err(&store, "write (publish)", &path, e))
            }
            WriterInner::Dal(mut w) => {
                w.close().await.map_err(|e| store.err("write (close)", &path, e))?;
                store.wrote(&path);
                Ok(())
            }
        }
    }
}

fn fs_err(store: &Store, op: &'static str, path: &str, e: std::io::Error) -> StoreError {
    store.err(op, path, opendal::Error::new(ErrorKind::Unexpected, e.to_string()))
}
