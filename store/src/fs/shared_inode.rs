//! The one empty inode a process's markers are hard links of.
//!
//! A marker is an empty file whose name is all it says. Made as a file of
//! its own, each costs an inode: ext4 allocates it, syncs it, and frees it
//! minutes later when its folder goes. On ext4 without a journal the
//! allocator then walks past every inode freed in the last 5 minutes for
//! each new one, so the cost of a create grows with the churn
//! (`bench/markers.py` on this machine's disk, 2,000 markers in folders of
//! 64, synced, then removed, round after round: 0.025–0.05 ms of CPU per
//! marker on a rested disk, rising to 0.55 ms as freed inodes pile up, as
//! they do under a busy node's dispatch or a Celery filesystem broker). A
//! scheduler must not be a generator of small files, on a local disk any
//! more than on a NameNode. So on fs a marker is a hard link, at its name,
//! of one empty inode this process holds: `linkat` of `/proc/self/fd/<n>`
//! (`AT_SYMLINK_FOLLOW`) into the marker's folder. That is 0.014 ms of CPU
//! per marker whatever the disk's history, and a batch syncs that inode
//! once instead of each file.
//!
//! Invariants:
//! - the link is an exclusive create: `linkat` fails with `EEXIST` on any
//!   name that stands, a symbolic link included, and never follows it, so
//!   of two callers naming one marker exactly one makes it, as with
//!   `openat(O_CREAT | O_EXCL)`;
//! - the inode is opened with `O_TMPFILE`: it has no name of its own, never
//!   appears in the tree, and goes with the process (a marker keeps it);
//! - it stays empty: markers are never opened for writing (the fs layer's
//!   writes stage a temp file and rename it over a name, which replaces the
//!   name and leaves the inode alone), so every name linked to it reads as
//!   the empty file it stands for. A write through any one name would land
//!   in all of them (a `Registry/Layout.3` that must stay empty included),
//!   so the inode is mode 0444 whatever the umask and this process holds it
//!   only read-only: the descriptor `O_TMPFILE` needs writable is closed
//!   once the read-only one is open. Root may still write it or `chmod` it:
//!   its permission checks pass whatever the mode. What a reader of the
//!   tree sees that it did not before: `ls -l` shows a link count, and the
//!   markers share one inode number and one modification time (nothing in
//!   compactd reads a marker's time);
//! - a full inode (`EMLINK`: ext4 allows 65,000 names) or one whose names
//!   are all gone (`ENOENT`: an inode with no name left cannot be linked
//!   again) is replaced by a fresh one and the link tried again;
//! - where this cannot work (no `O_TMPFILE`, no hard links, a folder on
//!   another mount or removed meanwhile, no descriptor or space for the
//!   inode for now) the marker is made as a file of its own, as before: the
//!   caller falls back on any outcome but "made" and "exists". Only a file
//!   system that has no `O_TMPFILE`, no links or no modes (or a host without
//!   `/proc`, where the inode cannot be reopened read-only) stops the
//!   linking for good; anything passing leaves the next marker to try
//!   again.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::nofollow::Dir;

/// The mode of every marker: nobody but root may write one.
const READ_ONLY: libc::mode_t = 0o444;

/// An empty inode with no name of its own, held open (read-only) by this
/// process.
pub(super) struct SharedInode {
    file: File,
    /// `/proc/self/fd/<n>` of `file`: what `linkat` links.
    proc_path: CString,
    /// Whether a link of it was ever made: until then it has no name and
    /// may still take one, so an `ENOENT` is not about it.
    linked: AtomicBool,
}

impl SharedInode {
    /// A fresh one on the file system of `dir`.
    fn new(dir: &Dir) -> Result<Self, NotMade> {
        // `O_TMPFILE` refuses a read-only open; the mode binds later opens
        // only, so a 0444 inode is created through a writable descriptor.
        // SAFETY: a valid folder fd and a static C string.
        let r = unsafe {
            libc::openat(
                dir.raw(),
                c".".as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                READ_ONLY as libc::c_uint,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(if unsupported(&e) { NotMade::ForGood } else { NotMade::ForNow });
        }
        // SAFETY: a fresh fd owned by nobody else.
        let writable = unsafe { OwnedFd::from_raw_fd(r) };
        // Exactly 0444: a umask that took the owner's read bit would stop
        // the read-only reopen below (for a user other than root).
        // SAFETY: a valid fd.
        if unsafe { libc::fchmod(writable.as_raw_fd(), READ_ONLY) } < 0 {
            return Err(past_creation());
        }
        // The inode through a read-only descriptor, which `fsync` (the
        // batch's sync of the link count) works on; `O_PATH` would not.
        let path = CString::new(format!("/proc/self/fd/{r}")).expect("no NUL in a number");
        // SAFETY: a valid C string.
        let ro = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if ro < 0 {
            return Err(past_creation());
        }
        // SAFETY: a fresh fd owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(ro) });
        drop(writable);
        let proc_path = CString::new(format!("/proc/self/fd/{ro}")).expect("no NUL in a number");
        Ok(Self { file, proc_path, linked: AtomicBool::new(false) })
    }

    /// Makes its durable state (the link count) survive a power loss: one
    /// sync for all the names a batch linked.
    pub(super) fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Whether every name it had is gone: such an inode cannot take one
    /// again.
    fn lost_its_names(&self) -> bool {
        self.linked.load(Ordering::Acquire)
            && self.file.metadata().is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) == 0)
    }
}

/// What became of a marker asked to be a link.
pub(super) enum Linked {
    /// The name is now a link of this inode (to be synced with it).
    Made(Arc<SharedInode>),
    /// A name stood there already.
    Existed,
    /// Not done: make the marker as a file of its own.
    Plain,
}

/// This process's inode per file system (`st_dev`); `None`: no such inode
/// can be had there, every marker of it is a file of its own.
#[derive(Default)]
pub(super) struct Inodes(Mutex<HashMap<u64, Option<Arc<SharedInode>>>>);

/// The process's [`Inodes`].
pub(super) fn inodes() -> &'static Inodes {
    static INODES: OnceLock<Inodes> = OnceLock::new();
    INODES.get_or_init(Default::default)
}

/// The file system `dir` is on.
pub(super) fn device(dir: &Dir) -> Option<u64> {
    // SAFETY: zeroed is a valid `stat`, and the fd is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(dir.raw(), &mut st) } == 0).then_some(st.st_dev)
}

impl Inodes {
    /// The current inode of `dev`; `retire`: the one the caller found full
    /// or nameless, replaced unless another caller did so already.
    fn current(&self, dev: u64, dir: &Dir, retire: Option<&Arc<SharedInode>>) -> Option<Arc<SharedInode>> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let stale = match (map.get(&dev), retire) {
            (None, _) => true,
            (Some(Some(now)), Some(old)) => Arc::ptr_eq(old, now),
            _ => false,
        };
        if stale {
            match SharedInode::new(dir) {
                Ok(i) => {
                    map.insert(dev, Some(Arc::new(i)));
                }
                // This file system (or this host) cannot give one: markers
                // there are files of their own from now on.
                Err(NotMade::ForGood) => {
                    map.insert(dev, None);
                }
                // Out of descriptors, space or quota, for now: this marker
                // is a file of its own, the next caller tries again.
                Err(NotMade::ForNow) => {
                    map.remove(&dev);
                    return None;
                }
            }
        }
        map.get(&dev).cloned().flatten()
    }

    /// Links the marker `name` in `dir` (on file system `dev`).
    pub(super) fn link(&self, dir: &Dir, dev: u64, name: &CStr) -> Linked {
        let mut retire = None;
        // A second try only after replacing a full or nameless inode.
        for _ in 0..2 {
            let Some(inode) = self.current(dev, dir, retire.as_ref()) else { return Linked::Plain };
            // SAFETY: valid C strings and a valid folder fd.
            let r = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    inode.proc_path.as_ptr(),
                    dir.raw(),
                    name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            if r == 0 {
                inode.linked.store(true, Ordering::Release);
                return Linked::Made(inode);
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EEXIST) => return Linked::Existed,
                Some(libc::EMLINK) => retire = Some(inode),
                Some(libc::ENOENT) if inode.lost_its_names() => retire = Some(inode),
                // This file system has no hard links: stop trying on it.
                Some(libc::EOPNOTSUPP) => {
                    self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(dev, None);
                    return Linked::Plain;
                }
                // The folder gone, another mount (EXDEV), links refused
                // here (EPERM: a file system without them, an immutable
                // folder), no space: the plain create says what is wrong,
                // or works.
                _ => return Linked::Plain,
            }
        }
        Linked::Plain
    }
}

/// Errors of `O_TMPFILE` that will not go away: kernels or file systems
/// without it answer `EOPNOTSUPP`, `EISDIR` or `EINVAL`. (`ENOENT` is the
/// folder removed meanwhile, which the next caller's folder is not.)
fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL))
}

/// Why no inode was had.
enum NotMade {
    /// It never will be on this file system: stop trying there.
    ForGood,
    /// Not now: the next marker tries again.
    ForNow,
}

/// A failure once the inode exists, of its `fchmod` or read-only reopen
/// (the last OS error): a want of resources passes; anything else (modes
/// refused, no `/proc`) would recur for every marker, each costing an
/// inode made and dropped, the very cost the links save.
fn past_creation() -> NotMade {
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EINTR) => {
            NotMade::ForNow
        }
        _ => NotMade::ForGood,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir(p: &std::path::Path) -> Dir {
        super::super::nofollow::make_dir(p, "").unwrap()
    }

    fn made(l: Linked) -> Arc<SharedInode> {
        match l {
            Linked::Made(i) => i,
            Linked::Existed => panic!("existed"),
            Linked::Plain => panic!("not linked (this test needs O_TMPFILE and /proc)"),
        }
    }

    /// Markers of two folders share one inode; a name that stands (a file,
    /// a link at /etc/passwd) loses without being followed or changed; and
    /// once every name is gone a fresh inode takes over.
    #[test]
    fn markers_are_names_of_one_empty_inode_and_a_standing_name_loses() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a")).unwrap();
        std::fs::create_dir_all(t.path().join("b")).unwrap();
        let (a, b) = (super::super::nofollow::make_dir(t.path(), "a").unwrap(), dir(&t.path().join("b")));
        let (dev, inodes) = (device(&a).unwrap(), Inodes::default());
        let link = |d: &Dir, n: &CStr| inodes.link(d, dev, n);
        let i1 = made(link(&a, c"m1"));
        let i2 = made(link(&b, c"m2"));
        assert!(Arc::ptr_eq(&i1, &i2));
        let (m1, m2) =
            (std::fs::metadata(t.path().join("a/m1")).unwrap(), std::fs::metadata(t.path().join("b/m2")).unwrap());
        assert_eq!((m1.ino(), m1.len(), m1.nlink()), (m2.ino(), 0, 2));
        assert!(matches!(link(&a, c"m1"), Linked::Existed));
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("a/l")).unwrap();
        assert!(matches!(link(&a, c"l"), Linked::Existed));
        assert!(std::fs::symlink_metadata(t.path().join("a/l")).unwrap().file_type().is_symlink());
        // Every name gone: the inode cannot take a name again, a new one does.
        std::fs::remove_file(t.path().join("a/m1")).unwrap();
        std::fs::remove_file(t.path().join("b/m2")).unwrap();
        let i3 = made(link(&a, c"m3"));
        assert!(!Arc::ptr_eq(&i1, &i3));
        i3.sync().unwrap();
        assert_eq!(std::fs::metadata(t.path().join("a/m3")).unwrap().len(), 0);
    }

    /// A folder removed under a caller (a batch folder its manager deletes
    /// while a marker is on its way) is that caller's error alone: the
    /// inode is neither retired nor given up, before or after its first
    /// link.
    #[test]
    fn a_removed_folder_neither_retires_the_inode_nor_stops_linking() {
        let t = tempfile::tempdir().unwrap();
        let mk = |n: &str| {
            std::fs::create_dir(t.path().join(n)).unwrap();
            super::super::nofollow::make_dir(t.path(), n).unwrap()
        };
        let (gone, a, gone2) = (mk("gone"), mk("a"), mk("gone2"));
        std::fs::remove_dir(t.path().join("gone")).unwrap();
        std::fs::remove_dir(t.path().join("gone2")).unwrap();
        let (dev, inodes) = (device(&a).unwrap(), Inodes::default());
        // No inode yet: making one in the removed folder fails, for now.
        assert!(matches!(inodes.link(&gone, dev, c"m"), Linked::Plain));
        let first = made(inodes.link(&a, dev, c"m1"));
        assert!(matches!(inodes.link(&gone2, dev, c"m"), Linked::Plain));
        let again = made(inodes.link(&a, dev, c"m2"));
        assert!(Arc::ptr_eq(&first, &again), "the inode was not retired");
    }

    /// Runs `sh -c script PATH` as `nobody` (`setpriv`); `None`: this test
    /// cannot switch users here.
    fn as_nobody(script: &str, path: &std::path::Path) -> Option<std::process::Output> {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script, "sh"])
            .arg(path)
            .output();
        out.ok()
    }

    /// Nobody but root can write a marker: its inode is mode 0444, the
    /// process holds it read-only, and a write tried through one name
    /// leaves every marker empty. Root's permission checks pass whatever
    /// the mode, so root can still write one (or `chmod` it first), which
    /// reaches every marker of the node. A marker made as a file of its
    /// own is read-only too.
    #[test]
    fn markers_are_read_only_and_a_write_through_one_name_fails() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        // Reachable by the user the write is tried as.
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = dir(t.path());
        let (dev, inodes) = (device(&d).unwrap(), Inodes::default());
        let inode = made(inodes.link(&d, dev, c"Layout.3"));
        made(inodes.link(&d, dev, c"m1"));
        inode.sync().expect("fsync through the read-only descriptor");
        d.create_empty("plain").unwrap().expect("made").sync_all().unwrap();
        let (m1, plain) = (t.path().join("m1"), t.path().join("plain"));
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&m1), 0o444);
        assert_eq!(mode(&plain) & 0o222, 0, "a file of its own: {:o}", mode(&plain));
        // SAFETY: a valid fd.
        let flags = unsafe { libc::fcntl(inode.file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_ACCMODE, libc::O_RDONLY, "the process holds the inode read-only");
        let empty = || {
            for n in ["Layout.3", "m1", "plain"] {
                assert_eq!(std::fs::read(t.path().join(n)).unwrap(), b"", "{n}");
            }
        };
        // SAFETY: no arguments, no state.
        if unsafe { libc::geteuid() } != 0 {
            for p in [&m1, &plain] {
                let e = std::fs::OpenOptions::new().write(true).open(p).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{}", p.display());
            }
            return empty();
        }
        // Root: try it as `nobody`, who can reach and read the markers.
        match as_nobody("cat \"$1\"", &m1) {
            Some(o) if o.status.success() => {}
            o => {
                eprintln!("SKIPPED the write as nobody: cannot run as nobody here ({o:?}); modes checked only");
                return empty();
            }
        }
        for p in [&m1, &plain] {
            let o = as_nobody("echo x > \"$1\"", p).unwrap();
            assert!(!o.status.success(), "nobody wrote {}", p.display());
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("Permission denied"), "{}: {err}", p.display());
            let o = as_nobody("truncate -s 1 \"$1\"", p).unwrap();
            assert!(!o.status.success(), "nobody truncated {}", p.display());
        }
        empty();
    }

    /// A file system's limit of names per inode (ext4: 65,000) moves the
    /// markers to a fresh inode: every marker is made, none fails.
    #[test]
    fn a_full_inode_is_replaced() {
        let t = tempfile::tempdir().unwrap();
        let d = dir(t.path());
        let (dev, inodes) = (device(&d).unwrap(), Inodes::default());
        for i in 0..65_010 {
            let name = CString::new(format!("m{i}")).unwrap();
            made(inodes.link(&d, dev, &name));
        }
        let ino = |n: &str| std::fs::metadata(t.path().join(n)).unwrap().ino();
        let limited = std::fs::metadata(t.path().join("m0")).unwrap().nlink() < 65_010;
        // On ext4 the limit is reached and a second inode takes the rest; a
        // file system without such a limit keeps one.
        assert_eq!(ino("m0") != ino("m65009"), limited);
    }
}
