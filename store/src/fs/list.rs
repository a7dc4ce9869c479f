//! The fs layer's listing: a walk in chunks that never follows links (each
//! folder is opened with `nofollow`, its entries are not followed) and
//! hides (and, for dead processes of this host, removes) temp files.

use super::*;

/// A listing in progress: the folders still open, deepest last.
pub(super) struct Walk {
    pub(super) root: Arc<PathBuf>,
    /// The listed path itself, yielded first (as OpenDAL's lister does).
    pub(super) first: Option<String>,
    /// The folder to open first (relative, ends in `/`).
    pub(super) start: Option<String>,
    /// Each open folder: its path, its entries, its handle (the entries'
    /// paths go through it).
    pub(super) stack: Vec<(String, fs::ReadDir, nofollow::Dir)>,
    pub(super) recursive: bool,
}

impl Walk {
    pub(super) fn new(root: Arc<PathBuf>, path: &str, recursive: bool) -> Self {
        let path = if path == "/" { String::new() } else { path.to_string() };
        Walk {
            root,
            first: Some(if path.is_empty() { "/".into() } else { path.clone() }),
            start: Some(path),
            stack: Vec::new(),
            recursive,
        }
    }

    /// Up to `max` more entries; empty when the walk is over.
    pub(super) fn next_chunk(&mut self, max: usize) -> io::Result<Vec<oio::Entry>> {
        let mut out = Vec::new();
        if let Some(start) = self.start.take() {
            match open(&self.root, &start)? {
                Some(opened) => self.stack.push((start, opened.0, opened.1)),
                // A folder that is not there lists as empty.
                None => return Ok(out),
            }
            if let Some(first) = self.first.take() {
                out.push(oio::Entry::new(&first, MetadataBuilder::dir().build()));
            }
        }
        while out.len() < max {
            let Some((dir, rd, handle)) = self.stack.last_mut() else { break };
            let de = match rd.next() {
                None => {
                    self.stack.pop();
                    continue;
                }
                Some(Ok(de)) => de,
                // Removed while listed: what is gone is gone.
                Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => {
                    self.stack.pop();
                    continue;
                }
                Some(Err(e)) => return Err(e),
            };
            let Some(name) = de.file_name().to_str().map(str::to_string) else {
                // Not UTF-8: not a name compactd or OpenDAL can address.
                continue;
            };
            if let Some(pid) = temp_owner(&name) {
                // A write in progress, or the leftover of a crashed one of
                // this host: never listed; a dead process's is removed.
                if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = handle.unlink(&name, false);
                }
                continue;
            }
            let rel = format!("{dir}{name}");
            // No symbolic link is followed: `file_type` and `metadata` of a
            // directory entry do not follow.
            let meta = match de.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let mut b = if meta.is_dir() {
                MetadataBuilder::dir()
            } else if meta.is_file() {
                MetadataBuilder::file(meta.len())
            } else {
                MetadataBuilder::unknown()
            };
            if let Ok(t) = meta.modified() {
                if let Ok(t) = opendal::raw::Timestamp::try_from(t) {
                    b.last_modified(t);
                }
            }
            if meta.is_dir() {
                let sub = format!("{rel}/");
                out.push(oio::Entry::new(&sub, b.build()));
                if self.recursive {
                    if let Some((rd, handle)) = open(&self.root, &sub)? {
                        self.stack.push((sub, rd, handle));
                    }
                }
            } else {
                out.push(oio::Entry::new(&rel, b.build()));
            }
        }
        Ok(out)
    }
}

/// Opens the folder `rel` for a listing, without following a link on the
/// way; `None` if it is not there.
fn open(root: &Path, rel: &str) -> io::Result<Option<(fs::ReadDir, nofollow::Dir)>> {
    let Some(dir) = nofollow::open_dir(root, rel)? else { return Ok(None) };
    // Through the handle's /proc name: exactly the folder opened above.
    match fs::read_dir(dir.path()) {
        Ok(rd) => Ok(Some((rd, dir))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// For a temp name of a create or put: `Some(Some(pid))` if a process of
/// this host made it, `Some(None)` if another host did.
pub(super) fn temp_owner(name: &str) -> Option<Option<u32>> {
    let rest = name.strip_prefix(CREATE_TEMP).or_else(|| name.strip_prefix(PUT_TEMP))?;
    let mine = rest.strip_prefix(host_tag()).and_then(|r| r.strip_prefix('.'));
    Some(mine.and_then(|r| r.split('.').next()).and_then(|p| p.parse().ok()))
}

/// Yields a [`Walk`]'s entries, reading [`LIST_CHUNK`] per blocking call.
pub(super) struct WalkLister {
    pub(super) walk: Option<Walk>,
    pub(super) chunk: std::vec::IntoIter<oio::Entry>,
}

impl oio::List for WalkLister {
    async fn next(&mut self) -> Result<Option<oio::Entry>> {
        loop {
            if let Some(e) = self.chunk.next() {
                return Ok(Some(e));
            }
            let Some(mut walk) = self.walk.take() else { return Ok(None) };
            let (walk, chunk) = tokio::task::spawn_blocking(move || {
                let chunk = walk.next_chunk(LIST_CHUNK);
                (walk, chunk)
            })
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, "fs list task failed").set_source(e))?;
            let chunk = chunk.map_err(|e| io_error(e, "list", walk.first.as_deref().unwrap_or("")))?;
            if chunk.is_empty() {
                return Ok(None);
            }
            self.walk = Some(walk);
            self.chunk = chunk.into_iter();
        }
    }
}
