//! Tree paths resolved below the fs root without following a symbolic
//! link, as the data root's `beneath` resolves its paths.
//!
//! Anybody with write access to the tree may plant a link in it: a
//! heartbeat named `n1 -> /etc/shadow` (a root daemon would read it and
//! quote its content in an error), a folder `Registry/Nodes -> /etc/cron.d`
//! (a daemon would write its heartbeat there). So every operation of the
//! fs layer first opens the folder its path names with `openat2` and
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` from a handle of the root (one
//! system call; on kernels without `openat2`, one `openat(O_NOFOLLOW)` per
//! component), then acts on the last component relative to that handle,
//! never following it either: a read opens it with `O_NOFOLLOW`, a create
//! links and a put renames beside it, a delete unlinks the name itself.
//! The root path itself may be a link (`/var/lib/compactd` on another
//! disk): it is the operator's choice, not the tree's.
//!
//! Path-based APIs (`std::fs`) are given `/proc/self/fd/<fd>/<name>`, the
//! folder's handle as a path, while the handle is held.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// An open folder of the tree.
pub(crate) struct Dir {
    fd: OwnedFd,
}

impl Dir {
    pub(crate) fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// The folder as a path for `std::fs` (valid while `self` lives).
    pub(crate) fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// `name` in this folder as a path for `std::fs` (its last component is
    /// resolved by the call that gets it: use only with calls that do not
    /// follow it, or on names this process made).
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)` of `name`; `None` if absent.
    pub(crate) fn lstat(&self, name: &str) -> io::Result<Option<libc::stat>> {
        let n = cstr(name)?;
        // SAFETY: zeroed is a valid `stat`; the fd and the C string are valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatat(self.raw(), n.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
        }
        Ok(Some(st))
    }

    /// Opens `name` in this folder for reading, refusing a link
    /// (`O_NOFOLLOW`), non-blocking (a FIFO swapped in cannot hang the
    /// reader; the caller checks the type with `fstat`).
    pub(crate) fn open_read(&self, name: &str) -> io::Result<std::fs::File> {
        let n = cstr(name)?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: a valid fd and C string; the returned fd is owned below.
        let fd = cvt(unsafe { libc::openat(self.raw(), n.as_ptr(), flags) })?;
        // SAFETY: a fresh fd owned by nobody else.
        Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Creates the empty file `name` in this folder if no name stands there
    /// (`openat(O_CREAT | O_EXCL | O_NOFOLLOW)`: exclusive, and a link at
    /// the name counts as a name). The new file, for the caller to sync (its
    /// inode must survive a power loss with the folder's entry) before
    /// anyone is told it exists. `None`: the name existed. Mode 0444 (less
    /// the umask): nothing writes into a marker (a put renames a new file
    /// over its name), and a marker that took content would say something
    /// else than its name.
    pub(crate) fn create_empty(&self, name: &str) -> io::Result<Option<std::fs::File>> {
        let n = cstr(name)?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC;
        // The mode binds later opens only: this one may still sync it.
        // SAFETY: a valid fd and C string; the returned fd is owned below.
        let r = unsafe { libc::openat(self.raw(), n.as_ptr(), flags, 0o444 as libc::c_uint) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::AlreadyExists { Ok(None) } else { Err(e) };
        }
        // SAFETY: a fresh fd owned by nobody else.
        Ok(Some(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(r) })))
    }

    /// Opens the folder `name` in this one without following a link;
    /// `None` if it is gone. (A listing's subfolders: one `openat`.)
    pub(crate) fn open_child(&self, name: &str) -> io::Result<Option<Dir>> {
        let n = cstr(name)?;
        // SAFETY: a valid fd and C string.
        let r = unsafe { libc::openat(self.raw(), n.as_ptr(), DIR_FLAGS | libc::O_NOFOLLOW) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => Err(not_a_folder(name)),
                _ => Err(e),
            };
        }
        // SAFETY: a fresh fd.
        Ok(Some(Dir { fd: unsafe { OwnedFd::from_raw_fd(r) } }))
    }

    /// The names in this folder (`.` and `..` left out), read from this
    /// handle itself: exactly the folder opened, whatever its path is now.
    pub(crate) fn entries(&self) -> io::Result<Entries> {
        // SAFETY: a valid fd; the duplicate is owned by the DIR from here on.
        let fd = cvt(unsafe { libc::fcntl(self.raw(), libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: `fd` is a fresh descriptor of a folder.
        let dir = unsafe { libc::fdopendir(fd) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed: `fd` is still ours to close.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        Ok(Entries { dir })
    }

    /// Syncs the folder itself (its entries survive a power loss).
    pub(crate) fn sync(&self) -> io::Result<()> {
        // SAFETY: a valid fd.
        cvt(unsafe { libc::fsync(self.raw()) }).map(|_| ())
    }

    /// `unlinkat` of `name` (a folder with `dir`): the name itself, never
    /// what a link points to.
    pub(crate) fn unlink(&self, name: &str, dir: bool) -> io::Result<()> {
        let n = cstr(name)?;
        let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: a valid fd and C string.
        cvt(unsafe { libc::unlinkat(self.raw(), n.as_ptr(), flags) }).map(|_| ())
    }
}

/// A folder's names being read (`readdir`); see [`Dir::entries`].
pub(crate) struct Entries {
    dir: *mut libc::DIR,
}

// SAFETY: the stream is used by one thread at a time (a listing moves from
// one blocking call to the next), and only through `&mut self`: a shared
// reference gives no access to it.
unsafe impl Send for Entries {}
// SAFETY: as above, `&Entries` exposes nothing.
unsafe impl Sync for Entries {}

impl Iterator for Entries {
    /// A name as bytes (not every name is UTF-8).
    type Item = io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // readdir reports an error only through errno, left as it was
            // at the end of the stream.
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid, open stream.
            let e = unsafe { libc::readdir64(self.dir) };
            if e.is_null() {
                let err = io::Error::last_os_error();
                return (err.raw_os_error() != Some(0)).then_some(Err(err));
            }
            // SAFETY: readdir returned an entry whose name is NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                return Some(Ok(name.to_vec()));
            }
        }
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        // SAFETY: opened by fdopendir, closed once (with its descriptor).
        unsafe { libc::closedir(self.dir) };
    }
}

pub(crate) fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
}

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The components of a relative tree path; `.` and `..` are refused.
pub(crate) fn components(rel: &str) -> io::Result<Vec<&str>> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{rel}: `.` and `..` are not allowed")));
    }
    Ok(parts)
}

/// Splits `rel` into its folder and its last component.
pub(crate) fn split(rel: &str) -> io::Result<(String, String)> {
    let mut parts = components(rel)?;
    let name = parts.pop().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty path"))?;
    Ok((parts.join("/"), name.to_string()))
}

pub(crate) fn not_a_folder(rel: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!(
            "{rel}: a symbolic link or other non-folder stands where a folder is expected (links are not followed)"
        ),
    )
}

pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(root.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the root path"))?;
    // SAFETY: a valid C string; the fd is owned below.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const DIR_FLAGS: libc::c_int = libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC;

/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; `Err(ENOSYS)` where the
/// kernel has none.
fn openat2_dir(root: &OwnedFd, rel: &str) -> io::Result<OwnedFd> {
    let path = cstr(if rel.is_empty() { "." } else { rel })?;
    // SAFETY: zeroed is a valid `open_how` (every field an integer).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = DIR_FLAGS as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid fd, C string and `open_how` of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

/// One `openat(O_NOFOLLOW)` per component, making missing folders with
/// `create` (each new one synced into its parent).
fn walk(root: OwnedFd, rel: &str, create: bool) -> io::Result<Option<OwnedFd>> {
    walk_parts(root, &components(rel)?, create, rel)
}

/// [`walk`] over components already split and checked; `shown` is the path
/// an error names.
pub(crate) fn walk_parts(root: OwnedFd, parts: &[&str], create: bool, shown: &str) -> io::Result<Option<OwnedFd>> {
    let mut dir = root;
    for p in parts {
        let name = cstr(p)?;
        let flags = DIR_FLAGS | libc::O_NOFOLLOW;
        // SAFETY: a valid fd and C string.
        let mut r = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::NotFound {
            if !create {
                return Ok(None);
            }
            // SAFETY: as above.
            let m = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
            if m < 0 && io::Error::last_os_error().kind() != io::ErrorKind::AlreadyExists {
                return Err(io::Error::last_os_error());
            }
            // The new folder's name must survive a power loss: the creates
            // below it rely on it.
            // SAFETY: a valid fd.
            cvt(unsafe { libc::fsync(dir.as_raw_fd()) })?;
            // SAFETY: as above.
            r = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => not_a_folder(shown),
                _ => e,
            });
        }
        // SAFETY: a fresh fd.
        dir = unsafe { OwnedFd::from_raw_fd(r) };
    }
    Ok(Some(dir))
}

/// Opens the folder `rel` below `root` (`""`: the root) without following
/// a link; `None` if it or a folder above it is missing. A link or a file
/// where a folder is expected is an error naming the path.
pub(crate) fn open_dir(root: &Path, rel: &str) -> io::Result<Option<Dir>> {
    let r = open_root(root)?;
    let rel = rel.trim_matches('/');
    match openat2_dir(&r, rel) {
        Ok(fd) => Ok(Some(Dir { fd })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::EXDEV)) => {
            Err(not_a_folder(rel))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
            Ok(walk(r, rel, false)?.map(|fd| Dir { fd }))
        }
        Err(e) => Err(e),
    }
}

/// [`open_dir`], making the missing folders (each synced into its parent).
pub(crate) fn make_dir(root: &Path, rel: &str) -> io::Result<Dir> {
    if let Some(d) = open_dir(root, rel)? {
        return Ok(d);
    }
    let fd = walk(open_root(root)?, rel.trim_matches('/'), true)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{rel}: could not be made")))?;
    Ok(Dir { fd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_link_is_followed_below_the_root_but_the_root_may_be_one() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir_all(real.join("a/b")).unwrap();
        std::fs::create_dir_all(t.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside"), real.join("a/link")).unwrap();
        std::os::unix::fs::symlink(&real, t.path().join("root")).unwrap();
        let root = t.path().join("root");
        assert!(open_dir(&root, "a/b").unwrap().is_some());
        assert!(open_dir(&root, "a/missing/x").unwrap().is_none());
        let e = open_dir(&root, "a/link").err().expect("a link is refused");
        assert!(e.to_string().contains("links are not followed"), "{e}");
        assert!(make_dir(&root, "a/link/new").is_err());
        assert!(!t.path().join("outside/new").exists(), "nothing was made through the link");
        let d = make_dir(&root, "a/c/d").unwrap();
        assert!(real.join("a/c/d").is_dir());
        assert!(d.lstat("nothing").unwrap().is_none());
        assert!(walk(open_root(&root).unwrap(), "a/link", false).is_err(), "the fallback refuses links too");
    }
}
