//! No-follow access to an fs data root, for executors.
//!
//! Partitions are written by ingest jobs that compactd does not control, and
//! compactd often runs as a more privileged user than they do. So on the fs
//! data backend no path may leave the root, whatever the names: every path is
//! resolved one component at a time from an open handle of the root with
//! `openat(O_NOFOLLOW)`, so a symbolic link is never followed, not in a
//! partition (`evil -> /etc/shadow`), not in the folders leading to it, not in
//! `_compactd/`, and not when one is swapped in between a listing and an open
//! (there is no check-then-open: the open itself refuses). Only regular files
//! are read; a symbolic link, FIFO, socket or device is listed as
//! [`Entry::special`] and is never read, written through or deleted (an
//! unlink of a final component removes the link itself, never its target, and
//! is refused for such entries anyway).
//!
//! Writes use the same walk: a temp file is created inside the target's own
//! folder handle (`.compactd-put.<host>.<pid>.<seq>.<name>`, hidden from
//! Hive-style readers by its dot; [`Beneath::sweep_stale_puts`] removes those
//! of dead processes of this host), synced, then renamed over the name (replace) or linked to it
//! (create-once); folders on the way are made with `mkdirat`.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fs::nofollow::{components, cstr, cvt, open_root, walk_parts};
use crate::Entry;

#[derive(Debug, Clone)]
pub(crate) struct Beneath {
    root: PathBuf,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

const PUT_PREFIX: &str = ".compactd-put.";

/// What stands at a name that is not a regular file or a folder.
pub(crate) fn special_kind(ft: &std::fs::FileType) -> Option<&'static str> {
    if ft.is_symlink() {
        Some("symbolic link")
    } else if ft.is_fifo() {
        Some("FIFO")
    } else if ft.is_socket() {
        Some("socket")
    } else if ft.is_block_device() || ft.is_char_device() {
        Some("device")
    } else {
        None
    }
}

impl Beneath {
    pub(crate) fn new(root: PathBuf) -> Self {
        Beneath { root }
    }

    /// Opens the folder `parts` below the root without following any link;
    /// with `create`, makes the missing ones. `Ok(None)`: a folder is missing.
    fn open_dir(&self, parts: &[&str], create: bool, shown: &str) -> io::Result<Option<OwnedFd>> {
        walk_parts(open_root(&self.root)?, parts, create, shown)
    }

    fn split(path: &str) -> io::Result<(Vec<&str>, &str)> {
        let mut parts = components(path)?;
        let name = parts.pop().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty path"))?;
        Ok((parts, name))
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)` of `name` in `dir`.
    fn lstat_at(dir: &OwnedFd, name: &str) -> io::Result<Option<libc::stat>> {
        let n = cstr(name)?;
        // SAFETY: zeroed is a valid `stat`; dir and n are valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatat(dir.as_raw_fd(), n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
        }
        Ok(Some(st))
    }

    fn is_reg(st: &libc::stat) -> bool {
        st.st_mode & libc::S_IFMT == libc::S_IFREG
    }

    /// The direct children of `dir`, with symbolic links, FIFOs, sockets and
    /// devices marked [`Entry::special`].
    pub(crate) fn list(&self, dir: &str) -> io::Result<Vec<(Entry, u64)>> {
        let Some(fd) = self.open_dir(&components(dir)?, false, dir)? else {
            return Ok(vec![]);
        };
        let prefix = if dir.is_empty() || dir.ends_with('/') { dir.to_string() } else { format!("{dir}/") };
        let mut out = vec![];
        // Reading through the fd's /proc name lists exactly the folder opened
        // above, even if its path was swapped since.
        for e in std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))? {
            let e = e?;
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                // Cannot be named in the tree's paths: listed, never used.
                let shown = e.file_name().to_string_lossy().into_owned();
                out.push((
                    Entry {
                        path: format!("{prefix}{shown}"),
                        is_dir: false,
                        special: Some("non-UTF-8 name"),
                        len: None,
                        version: None,
                        modified_ms: None,
                    },
                    0,
                ));
                continue;
            };
            // DirEntry::metadata does not follow a link.
            let meta = match e.metadata() {
                Ok(m) => m,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            let ft = meta.file_type();
            let entry = if ft.is_dir() {
                Entry {
                    path: format!("{prefix}{name}/"),
                    is_dir: true,
                    special: None,
                    len: None,
                    version: None,
                    modified_ms: None,
                }
            } else if ft.is_file() && meta.nlink() > 1 {
                // A second name of a file that may live anywhere (another
                // table, /etc): never read as this partition's data.
                Entry {
                    path: format!("{prefix}{name}"),
                    is_dir: false,
                    special: Some("file with several hard links"),
                    len: None,
                    version: None,
                    modified_ms: None,
                }
            } else {
                let special = special_kind(&ft);
                let len = (special.is_none() && ft.is_file()).then(|| meta.size());
                // The file system's clock, for ages (e.g. of orphans).
                let modified_ms = Some(meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000);
                Entry { path: format!("{prefix}{name}"), is_dir: false, special, len, version: None, modified_ms }
            };
            out.push((entry, if ft.is_file() { meta.size() } else { 0 }));
        }
        out.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        Ok(out)
    }

    /// Size of a regular file; `None` if absent or not a regular file.
    pub(crate) fn stat(&self, path: &str) -> io::Result<Option<u64>> {
        let (parts, name) = Self::split(path)?;
        let Some(dir) = self.open_dir(&parts, false, path)? else { return Ok(None) };
        Ok(Self::lstat_at(&dir, name)?.filter(Self::is_reg).map(|st| st.st_size as u64))
    }

    /// Opens a regular file for reading without following a link;
    /// `Ok(None)` if absent, an error naming what stands there otherwise.
    fn open_regular(&self, path: &str) -> io::Result<Option<File>> {
        let (parts, name) = Self::split(path)?;
        let Some(dir) = self.open_dir(&parts, false, path)? else { return Ok(None) };
        let n = cstr(name)?;
        // O_PATH first: nothing is opened for I/O (no device driver's open
        // runs, no FIFO waits) until the type is known.
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid fd and C string.
        let r = unsafe { libc::openat(dir.as_raw_fd(), n.as_ptr(), flags) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                Some(libc::ELOOP) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{path}: a symbolic link, not read (links are not followed)"),
                )),
                _ => Err(e),
            };
        }
        // SAFETY: r is a fresh fd.
        let handle = unsafe { OwnedFd::from_raw_fd(r) };
        // SAFETY: zeroed is a valid `stat`; handle is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(handle.as_raw_fd(), &mut st) })?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path}: a symbolic link, not read (links are not followed)"),
            ));
        }
        if !Self::is_reg(&st) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{path}: not a regular file, not read")));
        }
        // compactd's own files (`_compactd/`, and the Delta commits it
        // creates in `_delta_log/`) may have two names for a moment (a
        // create links its temp, then unlinks it; a crash in between leaves
        // both until the temp is swept).
        if st.st_nlink > 1 && !path.contains("/_compactd/") && !path.contains("/_delta_log/") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path}: a file with several hard links, not read"),
            ));
        }
        // Reopen that very inode for reading through its /proc name.
        let f = File::open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
        Ok(Some(f))
    }

    pub(crate) fn read(&self, path: &str) -> io::Result<Option<Vec<u8>>> {
        let Some(mut f) = self.open_regular(path)? else { return Ok(None) };
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(Some(buf))
    }

    /// Reads `len` bytes at `offset` of a regular file (fewer at its end).
    pub(crate) fn read_range(&self, path: &str, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let Some(f) = self.open_regular(path)? else { return Ok(None) };
        let mut buf = vec![0u8; len as usize];
        let mut got = 0;
        while got < buf.len() {
            let n = f.read_at(&mut buf[got..], offset + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(Some(buf))
    }

    /// Writes `bytes` to a temp file in the target's folder and hands it to
    /// `publish(dir, tmp, name)`.
    fn stage(
        &self,
        path: &str,
        bytes: &[u8],
        publish: impl FnOnce(&OwnedFd, &CString, &CString) -> io::Result<bool>,
    ) -> io::Result<bool> {
        let mut put = self.begin_put(path)?;
        put.write(bytes)?;
        put.finish_with(publish)
    }

    /// Replaces `path` whole (a link standing there is replaced, not followed).
    pub(crate) fn put(&self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.stage(path, bytes, rename_over).map(|_| ())
    }

    /// Starts a streamed replace of `path`: a temp file in the target's
    /// folder, written by [`PutFile::write`], published by [`PutFile::finish`]
    /// (sync, rename, sync the folder) and removed if dropped unfinished.
    pub(crate) fn begin_put(&self, path: &str) -> io::Result<PutFile> {
        let (parts, name) = Self::split(path)?;
        let dir = self.open_dir(&parts, true, path)?.expect("created");
        // The target's name rides along, for a person reading a listing (and
        // for a test that places a crash at this file).
        let tmp = cstr(&format!(
            "{PUT_PREFIX}{}.{}.{}.{}",
            crate::fs::host_tag(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            name.chars().take(100).collect::<String>()
        ))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid fd and C string.
        let r = cvt(unsafe { libc::openat(dir.as_raw_fd(), tmp.as_ptr(), flags, 0o644) })?;
        // SAFETY: r is a fresh fd.
        let file = unsafe { File::from_raw_fd(r) };
        Ok(PutFile { dir, tmp, name: cstr(name)?, file: Some(file) })
    }

    /// Renames the regular file `from` to `to` (replacing what stands there),
    /// both resolved without following links; `Ok(false)` if `from` is absent.
    /// No data is copied: this is how a staged output becomes visible.
    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<bool> {
        let (fparts, fname) = Self::split(from)?;
        let Some(fdir) = self.open_dir(&fparts, false, from)? else { return Ok(false) };
        match Self::lstat_at(&fdir, fname)? {
            None => return Ok(false),
            Some(st) if Self::is_reg(&st) => {}
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{from}: not a regular file, not moved"),
                ))
            }
        }
        let (tparts, tname) = Self::split(to)?;
        let tdir = self.open_dir(&tparts, true, to)?.expect("created");
        let (f, t) = (cstr(fname)?, cstr(tname)?);
        // SAFETY: valid fds and C strings; renameat never follows the last component.
        let r = unsafe { libc::renameat(fdir.as_raw_fd(), f.as_ptr(), tdir.as_raw_fd(), t.as_ptr()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound { Ok(false) } else { Err(e) };
        }
        File::from(tdir).sync_all()?;
        Ok(true)
    }

    /// Creates `path` unless something stands there; `Ok(true)` if created.
    pub(crate) fn create(&self, path: &str, bytes: &[u8]) -> io::Result<bool> {
        self.stage(path, bytes, |dir, tmp, name| {
            // SAFETY: valid fd and C strings; flags 0 = do not follow.
            let r = unsafe { libc::linkat(dir.as_raw_fd(), tmp.as_ptr(), dir.as_raw_fd(), name.as_ptr(), 0) };
            if r == 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(false)
            } else {
                Err(e)
            }
        })
    }

    /// Deletes a regular file. Anything else standing at the name (a link, a
    /// FIFO, …) is left alone: `Ok(false)`.
    pub(crate) fn delete(&self, path: &str) -> io::Result<bool> {
        let (parts, name) = Self::split(path)?;
        let Some(dir) = self.open_dir(&parts, false, path)? else { return Ok(true) };
        match Self::lstat_at(&dir, name)? {
            None => Ok(true),
            Some(st) if Self::is_reg(&st) => {
                let n = cstr(name)?;
                // SAFETY: valid fd and C string.
                let r = unsafe { libc::unlinkat(dir.as_raw_fd(), n.as_ptr(), 0) };
                if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::NotFound {
                    return Err(io::Error::last_os_error());
                }
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    /// Removes a symbolic link (never its target); `Ok(false)` if `path` is
    /// not a link.
    pub(crate) fn remove_link(&self, path: &str) -> io::Result<bool> {
        let (parts, name) = Self::split(path.trim_end_matches('/'))?;
        let Some(dir) = self.open_dir(&parts, false, path)? else { return Ok(false) };
        match Self::lstat_at(&dir, name)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                let n = cstr(name)?;
                // SAFETY: valid fd and C string.
                cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), n.as_ptr(), 0) })?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Deletes a folder and everything below it, unlinking links and other
    /// special entries themselves, never following them.
    pub(crate) fn delete_all(&self, dir: &str) -> io::Result<()> {
        let (parts, name) = Self::split(dir.trim_end_matches('/'))?;
        let Some(parent) = self.open_dir(&parts, false, dir)? else { return Ok(()) };
        Self::remove_tree_at(&parent, name)
    }

    fn remove_tree_at(parent: &OwnedFd, name: &str) -> io::Result<()> {
        let n = cstr(name)?;
        match Self::lstat_at(parent, name)? {
            None => return Ok(()),
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                let flags = libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC;
                // SAFETY: valid fd and C string.
                let r = cvt(unsafe { libc::openat(parent.as_raw_fd(), n.as_ptr(), flags) })?;
                // SAFETY: fresh fd.
                let fd = unsafe { OwnedFd::from_raw_fd(r) };
                let children: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))?
                    .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect();
                for c in children {
                    Self::remove_tree_at(&fd, &c)?;
                }
                // SAFETY: valid fd and C string.
                let r = unsafe { libc::unlinkat(parent.as_raw_fd(), n.as_ptr(), libc::AT_REMOVEDIR) };
                if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::NotFound {
                    return Err(io::Error::last_os_error());
                }
            }
            Some(_) => {
                // SAFETY: valid fd and C string.
                let r = unsafe { libc::unlinkat(parent.as_raw_fd(), n.as_ptr(), 0) };
                if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::NotFound {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// Removes temp files of writes in `dir` left by crashed processes of
    /// this host (their pid is gone); returns how many.
    pub(crate) fn sweep_stale_puts(&self, dir: &str) -> io::Result<usize> {
        let prefix = format!("{PUT_PREFIX}{}.", crate::fs::host_tag());
        let mut removed = 0;
        for (e, _) in self.list(dir)? {
            let Some(rest) = e.name().strip_prefix(&prefix) else { continue };
            let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
            if pid != std::process::id()
                && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                && self.delete(&e.path)?
            {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The entries below `dir`: one level, or with `recursive` every object
    /// below it (folders are entered, never through a link).
    pub(crate) fn walk(&self, dir: &str, recursive: bool) -> io::Result<Vec<Entry>> {
        let mut out = vec![];
        let mut pending = vec![dir.to_string()];
        while let Some(d) = pending.pop() {
            for (e, _) in self.list(&d)? {
                if e.path.starts_with(crate::FS_TMP_DIR) {
                    continue;
                }
                if !recursive {
                    out.push(e);
                } else if e.is_dir {
                    pending.push(e.path);
                } else {
                    out.push(e);
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Moves a torn create-once file at `path` out of the way so that the
    /// name can be created again (see `Store::quarantine_torn`).
    ///
    /// Repairers serialise on `<root>/.compactd-tmp/repair.lock`; under it a
    /// repairer opens the file without following links, judges its content
    /// and age through that open file, renames the name to a hidden grave in
    /// the same folder and deletes the grave only if it is the very inode it
    /// judged. Creators need no lock: only a repairer takes a name from torn
    /// to absent, so a valid file (created after another repairer's move) is
    /// judged valid and left alone.
    pub(crate) fn quarantine_torn(
        &self,
        path: &str,
        is_torn: &dyn Fn(&[u8]) -> bool,
        grace: std::time::Duration,
        now: std::time::SystemTime,
    ) -> io::Result<crate::fs::Quarantine> {
        use crate::fs::Quarantine;
        use std::os::unix::fs::MetadataExt;
        let (parts, name) = Self::split(path)?;
        let Some(dir) = self.open_dir(&parts, false, path)? else { return Ok(Quarantine::NotTorn) };
        let tmp = self.open_dir(&[crate::FS_TMP_DIR], true, crate::FS_TMP_DIR)?.expect("created");
        let lock_name = cstr("repair.lock")?;
        // SAFETY: valid fd and C string.
        let l = cvt(unsafe {
            libc::openat(
                tmp.as_raw_fd(),
                lock_name.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        })?;
        // SAFETY: l is a fresh fd.
        let lock = unsafe { File::from_raw_fd(l) };
        lock.lock()?;
        let n = cstr(name)?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: valid fd and C string.
        let r = unsafe { libc::openat(dir.as_raw_fd(), n.as_ptr(), flags) };
        if r < 0 {
            // Absent, a link or anything not openable as a file: not ours.
            return Ok(Quarantine::NotTorn);
        }
        // SAFETY: r is a fresh fd.
        let f = unsafe { File::from_raw_fd(r) };
        let meta = f.metadata()?;
        if !meta.is_file() || meta.len() > MAX_JUDGED {
            return Ok(Quarantine::NotTorn);
        }
        let mut content = Vec::new();
        (&f).take(MAX_JUDGED).read_to_end(&mut content)?;
        if !is_torn(&content) {
            return Ok(Quarantine::NotTorn);
        }
        let age = now.duration_since(meta.modified()?).unwrap_or_default();
        if age < grace {
            return Ok(Quarantine::TooYoung { age });
        }
        let grave = cstr(&format!(
            ".compactd-torn.{}.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            name.chars().take(100).collect::<String>()
        ))?;
        // SAFETY: valid fds and C strings.
        let r = unsafe { libc::renameat(dir.as_raw_fd(), n.as_ptr(), dir.as_raw_fd(), grave.as_ptr()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound { Ok(Quarantine::NotTorn) } else { Err(e) };
        }
        let moved = Self::lstat_at(&dir, &grave.to_string_lossy())?;
        if moved.is_some_and(|st| st.st_dev == meta.dev() && st.st_ino == meta.ino()) {
            // SAFETY: valid fd and C string.
            cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), grave.as_ptr(), 0) })?;
            File::from(dir).sync_all()?;
            return Ok(Quarantine::Removed);
        }
        // Not the file we judged (something replaced it meanwhile): put it
        // back without replacing anything, or keep it for a person.
        // SAFETY: valid fds and C strings; flags 0 = no follow.
        let back = unsafe { libc::linkat(dir.as_raw_fd(), grave.as_ptr(), dir.as_raw_fd(), n.as_ptr(), 0) };
        if back == 0 {
            // SAFETY: as above.
            unsafe { libc::unlinkat(dir.as_raw_fd(), grave.as_ptr(), 0) };
            File::from(dir).sync_all()?;
        } else {
            tracing::error!(path, "a repaired name was replaced while it was judged; the moved file is kept beside it");
        }
        Ok(Quarantine::NotTorn)
    }
}

/// Create-once files are small state files; a larger one is not judged.
const MAX_JUDGED: u64 = 4 * 1024 * 1024;

/// A streamed replace in progress ([`Beneath::begin_put`]).
pub(crate) struct PutFile {
    dir: OwnedFd,
    tmp: CString,
    name: CString,
    file: Option<File>,
}

impl PutFile {
    pub(crate) fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.as_mut().expect("not finished").write_all(bytes)
    }

    /// Syncs the temp file, renames it over the name and syncs the folder.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.finish_with(rename_over).map(|_| ())
    }

    /// Syncs the temp file and hands it to `publish(dir, tmp, name)`; then
    /// the temp name is removed (it may be gone already: a rename) and, if
    /// published, the folder synced.
    fn finish_with(
        mut self,
        publish: impl FnOnce(&OwnedFd, &CString, &CString) -> io::Result<bool>,
    ) -> io::Result<bool> {
        let f = self.file.take().expect("not finished");
        let result = f.sync_all().and_then(|_| publish(&self.dir, &self.tmp, &self.name));
        drop(f);
        // SAFETY: valid fd and C string.
        unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.tmp.as_ptr(), 0) };
        let published = result?;
        if published {
            File::from(self.dir.try_clone()?).sync_all()?;
        }
        Ok(published)
    }
}

/// Publishes a temp file by renaming it over the name.
fn rename_over(dir: &OwnedFd, tmp: &CString, name: &CString) -> io::Result<bool> {
    // SAFETY: valid fd and C strings.
    cvt(unsafe { libc::renameat(dir.as_raw_fd(), tmp.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })?;
    Ok(true)
}

impl Drop for PutFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // SAFETY: valid fd and C string; unfinished, so the temp is ours.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.tmp.as_ptr(), 0) };
        }
    }
}

impl crate::Store {
    /// Runs a no-follow fs operation off the async threads.
    pub(crate) async fn fs_data<T: Send + 'static>(
        &self,
        op: &'static str,
        path: &str,
        f: impl FnOnce(&Beneath) -> std::io::Result<T> + Send + 'static,
    ) -> crate::Result<T> {
        let b = self.beneath.clone().expect("fs_data on a data store");
        let task = tokio::task::spawn_blocking(move || f(&b));
        // Content moves (reads, writes, puts) take as long as they are large,
        // and run in executors bounded by their command timeout; everything
        // else is a metadata call that a hung file system (NFS) must not
        // hold forever: past the request timeout the caller gets an error
        // (the blocking call itself cannot be interrupted and ends when the
        // file system answers).
        let content = matches!(op, "read" | "read range" | "write" | "put" | "create");
        let done = match self.options.timeout.filter(|_| !content) {
            Some(t) => match tokio::time::timeout(t, task).await {
                Ok(r) => r,
                Err(_) => {
                    let e = opendal::Error::new(
                        opendal::ErrorKind::Unexpected,
                        format!("no answer from the file system in {t:?}"),
                    )
                    .set_temporary();
                    return Err(self.err(op, path, e));
                }
            },
            None => task.await,
        };
        done.expect("fs task does not panic").map_err(|e| {
            let kind = match e.kind() {
                std::io::ErrorKind::NotFound => opendal::ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied => opendal::ErrorKind::PermissionDenied,
                std::io::ErrorKind::NotADirectory => opendal::ErrorKind::NotADirectory,
                _ => opendal::ErrorKind::Unexpected,
            };
            self.err(op, path, opendal::Error::new(kind, e.to_string()))
        })
    }
}
