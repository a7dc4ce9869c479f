//! The replacing writer of the fs layer: buffered, staged beside the
//! target, synced and renamed over it (see the module doc of `fs`).

use super::*;

/// A replacing write: buffered, then staged beside the target, synced and
/// renamed over the name in one blocking call at close (content beyond
/// [`PUT_BUFFER`] goes to the temp file as it comes).
pub struct PutWriter {
    pub(super) root: Arc<PathBuf>,
    pub(super) path: String,
    pub(super) buf: Vec<u8>,
    pub(super) len: u64,
    /// The target's folder (opened without following links), the temp
    /// file's path through it, and the temp file.
    pub(super) temp: Option<(nofollow::Dir, PathBuf, File)>,
}

impl PutWriter {
    pub(super) async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.len += bs.len() as u64;
        self.buf.extend(bs.to_bytes());
        if self.buf.len() >= PUT_BUFFER {
            self.spill(false).await?;
        }
        Ok(())
    }

    /// Writes the buffer to the temp file (opened on first use) and, when
    /// `publish`, syncs it and renames it over the name.
    pub(super) async fn spill(&mut self, publish: bool) -> Result<()> {
        let (root, path) = (self.root.clone(), self.path.clone());
        let temp = self.temp.take();
        let data = std::mem::take(&mut self.buf);
        let joined = tokio::task::spawn_blocking(move || {
            let mut temp = match temp {
                Some(t) => t,
                None => {
                    let (parent, _) = nofollow::split(&path)?;
                    let dir = nofollow::make_dir(&root, &parent)?;
                    let (tmp, f) = open_temp(&dir.path(), PUT_TEMP, &path)?;
                    (dir, tmp, f)
                }
            };
            let r = (|| {
                temp.2.write_all(&data)?;
                if publish {
                    temp.2.sync_all()?;
                    // The rename replaces the name itself, a link included.
                    let (_, name) = nofollow::split(&path)?;
                    fs::rename(&temp.1, temp.0.join(&name))?;
                }
                Ok(())
            })();
            match r {
                Ok(()) => Ok((!publish).then_some(temp)),
                Err(e) => {
                    let _ = fs::remove_file(&temp.1);
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs put task failed").set_source(e))?;
        self.temp = joined.map_err(|e| io_error(e, "put (stage + rename)", &self.path))?;
        Ok(())
    }

    pub(super) async fn close(&mut self) -> Result<Metadata> {
        self.spill(true).await?;
        Ok(MetadataBuilder::file(self.len).build())
    }

    pub(super) fn abort(&mut self) {
        self.buf.clear();
        if let Some((_dir, temp, _)) = self.temp.take() {
            let _ = fs::remove_file(temp);
        }
    }
}

impl Drop for PutWriter {
    fn drop(&mut self) {
        self.abort();
    }
}
