//! The fs layer's listing: a walk in chunks that never follows links (the
//! folder listed is opened with `nofollow`, each subfolder with `openat
//! (O_NOFOLLOW)` from its parent's handle, each entry `lstat`ed from it)
//! and hides (and, for dead processes of this host, removes) temp files.

use super::*;

/// A listing in progress: the folders still open, deepest last.
pub(super) struct Walk {
    pub(super) root: Arc<PathBuf>,
    /// The listed path itself, yielded first (as OpenDAL's lister does).
    pub(super) first: Option<String>,
    /// The folder to open first (relative, ends in `/`).
    pub(super) start: Option<String>,
    /// Each open folder: its path, its names, its handle (the names are
    /// looked at relative to it).
    pub(super) stack: Vec<(String, nofollow::Entries, nofollow::Dir)>,
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
            match nofollow::open_dir(&self.root, &start)? {
                Some(dir) => self.stack.push((start, dir.entries()?, dir)),
                // A folder that is not there lists as empty.
                None => return Ok(out),
            }
            if let Some(first) = self.first.take() {
                out.push(oio::Entry::new(&first, MetadataBuilder::dir().build()));
            }
        }
        while out.len() < max {
            let Some((dir, names, handle)) = self.stack.last_mut() else { break };
            let name = match names.next() {
                None => {
                    self.stack.pop();
                    continue;
                }
                Some(Ok(name)) => name,
                // Removed while listed: what is gone is gone.
                Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => {
                    self.stack.pop();
                    continue;
                }
                Some(Err(e)) => return Err(e),
            };
            let Ok(name) = String::from_utf8(name) else {
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
            // No symbolic link is followed: the entry is `lstat`ed.
            let Some(st) = handle.lstat(&name)? else { continue };
            let kind = st.st_mode & libc::S_IFMT;
            let mut b = match kind {
                libc::S_IFDIR => MetadataBuilder::dir(),
                libc::S_IFREG => MetadataBuilder::file(st.st_size as u64),
                _ => MetadataBuilder::unknown(),
            };
            if let Ok(t) = opendal::raw::Timestamp::try_from(modified(&st)) {
                b.last_modified(t);
            }
            if kind == libc::S_IFDIR {
                let sub = format!("{rel}/");
                out.push(oio::Entry::new(&sub, b.build()));
                if self.recursive {
                    // Relative to its parent's handle: no link on the way.
                    if let Some(child) = handle.open_child(&name)? {
                        let names = child.entries()?;
                        self.stack.push((sub, names, child));
                    }
                }
            } else {
                out.push(oio::Entry::new(&rel, b.build()));
            }
        }
        Ok(out)
    }
}

/// When a file was last modified, from its `stat`.
pub(super) fn modified(st: &libc::stat) -> std::time::SystemTime {
    std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(st.st_mtime.max(0) as u64)
        + std::time::Duration::from_nanos(st.st_mtime_nsec.max(0) as u64)
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
