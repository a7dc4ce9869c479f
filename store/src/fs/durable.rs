//! Complete-or-absent creates and the directory syncs they rely on: stage,
//! link (or `renameat2(RENAME_NOREPLACE)`), sync the parent; shared syncs of
//! one folder; ext4's top-of-hierarchy flag.

use super::*;

/// Stage + link, in the target's folder opened without following links
/// (`nofollow`). A file with content: an empty one (a marker) needs no
/// stage, and is made by `marks.rs`. `Ok(true)`: created; `Ok(false)`: the
/// name existed.
pub(super) fn create_complete(root: &Path, path: &str, data: &[u8]) -> io::Result<bool> {
    let (parent_rel, name) = nofollow::split(path)?;
    // Missing folders are made (each synced into its parent); a link where
    // a folder should be is an error, never followed.
    let dir = nofollow::make_dir(root, &parent_rel)?;
    // A name that exists already loses without staging anything (the link
    // below stays the decision: a racer may still publish in between).
    if dir.lstat(&name)?.is_some() {
        return Ok(false);
    }
    // Only the publish may say "exists" (a stale temp name is skipped).
    let (tmp, mut f) = open_temp(&dir.path(), CREATE_TEMP, path)?;
    let target = dir.join(&name);
    let published = (|| {
        f.write_all(data)?;
        f.sync_all()?;
        publish_noreplace(&tmp, &target)
    })();
    drop(f);
    let _ = fs::remove_file(&tmp);
    match published {
        Ok(()) => {
            sync_dir(&root.join(&parent_rel), &dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Publishes `tmp` as `target` unless `target` exists: `link(2)`, or where the
/// file system has no hard links, `renameat2(RENAME_NOREPLACE)`. Both name
/// the same folder through its handle (`/proc/self/fd/…`), and neither
/// follows a link at `target`.
pub(super) fn publish_noreplace(tmp: &Path, target: &Path) -> io::Result<()> {
    match fs::hard_link(tmp, target) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EOPNOTSUPP) | Some(libc::EMLINK)) => {
            rename_noreplace(tmp, target).map_err(|e2| {
                io::Error::new(
                    e2.kind(),
                    format!("neither link ({e}) nor renameat2(RENAME_NOREPLACE) ({e2}) works on this file system"),
                )
            })
        }
        Err(e) => Err(e),
    }
}

pub(super) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `FS_TOPDIR_FL` (`chattr +T`, not in the libc crate).
pub(crate) const FS_TOPDIR_FL: libc::c_int = 0x0002_0000;

/// A file's or folder's attribute flags (`FS_IOC_GETFLAGS`, what `lsattr`
/// shows); `None` where the file system has none.
pub(crate) fn attr_flags(f: &File) -> Option<libc::c_int> {
    use std::os::unix::io::AsRawFd;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int into `flags`, which outlives the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags as *mut libc::c_int) };
    (r == 0).then_some(flags)
}

/// Creates `dir` if missing (synced like a create's folders) and gives it
/// `FS_TOPDIR_FL`, the attribute that tells ext4's Orlov allocator to place
/// each new subfolder in a block group of its own choosing, as for the
/// subfolders of the root, instead of beside its parent. `Ok(false)`: this
/// file system has no such attribute (tmpfs, NFS and others: nothing to do).
///
/// Why a scheduler wants it: a node's folder receives a subtask folder and
/// three files per subtask, all freed minutes later, and every new inode
/// goes to its parent's group. On ext4 without a journal the allocator then
/// walks past every inode of that group freed in the last 5 minutes (5 more
/// while their table block is dirty) for each new one: in a profile of a
/// 2,000-subtask dispatch on such a disk that walk was 40 % of all CPU,
/// much of it under the folder's lock. Spread over groups, each walk is
/// short. A journalled ext4 does no such walk; there the attribute only
/// changes which group a folder lands in (not measured here: this machine's
/// only disk has no journal).
pub(crate) fn spread_children(root: &Path, dir: &str) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    let d = nofollow::make_dir(root, dir)?;
    let f = File::open(d.path())?;
    let Some(mut flags) = attr_flags(&f) else { return Ok(false) };
    if flags & FS_TOPDIR_FL != 0 {
        return Ok(true);
    }
    flags |= FS_TOPDIR_FL;
    // SAFETY: FS_IOC_SETFLAGS reads one int from `flags`, which outlives the call.
    if unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags as *const libc::c_int) } != 0 {
        return Ok(false);
    }
    Ok(true)
}

/// Syncs a folder, sharing the sync with this process's other callers for
/// the same folder (a group commit): a caller is covered by any sync that
/// started after it asked, so callers that arrive while one runs wait for
/// the next and share it. A manager records many outcomes at once in one
/// task folder and creates as many subtask folders in one node's folder
/// (`WRITE_CONCURRENCY` at a time), and each of those used to sync the
/// shared folder itself.
///
/// `key` names the folder (its path below the root: one folder, one
/// group); `dir` is this caller's handle of it, which its own sync uses.
pub(super) fn sync_dir(key: &Path, dir: &nofollow::Dir) -> io::Result<()> {
    static SYNCS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<DirSync>>>> =
        std::sync::OnceLock::new();
    let map = SYNCS.get_or_init(Default::default);
    let slot = map.lock().unwrap_or_else(|e| e.into_inner()).entry(key.to_path_buf()).or_default().clone();
    let r = slot.sync(|| dir.sync());
    // The last one out removes the folder's entry.
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    if Arc::strong_count(&slot) == 2 {
        m.remove(key);
    }
    r
}

/// One folder's group sync (see [`sync_dir`]).
#[derive(Default)]
pub(super) struct DirSync {
    pub(super) state: std::sync::Mutex<DirSyncState>,
    pub(super) done: std::sync::Condvar,
}

#[derive(Default)]
pub(super) struct DirSyncState {
    /// Tickets handed out: a caller's ticket is covered by a sync whose
    /// `upto` is at least it.
    pub(super) asked: u64,
    /// The highest ticket a finished sync covered.
    pub(super) covered: u64,
    pub(super) running: bool,
    /// Failed syncs so far.
    pub(super) failures: u64,
}

impl DirSync {
    /// Returns once a run of `sync_now` that started after this call began
    /// has succeeded, or with the error of this caller's own run.
    fn sync(&self, sync_now: impl Fn() -> io::Result<()>) -> io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.asked += 1;
        let (ticket, failures) = (st.asked, st.failures);
        loop {
            if st.covered >= ticket {
                if st.failures == failures {
                    return Ok(());
                }
                // A sync failed meanwhile (maybe the one that covered this
                // caller): this caller's own sync decides.
                drop(st);
                return sync_now();
            }
            if !st.running {
                st.running = true;
                let upto = st.asked;
                drop(st);
                let r = sync_now();
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.running = false;
                st.covered = upto;
                if r.is_err() {
                    st.failures += 1;
                }
                self.done.notify_all();
                return r;
            }
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod group_sync_tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Eight callers; the first sync to run holds on until all eight have
    /// asked, so the others must all be covered by one more.
    fn eight_callers(
        outcome: impl Fn(usize) -> io::Result<()> + Send + Sync + 'static,
    ) -> (usize, Vec<io::Result<()>>) {
        let slot = Arc::new(DirSync::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let outcome = Arc::new(outcome);
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (slot, runs, outcome) = (slot.clone(), runs.clone(), outcome.clone());
                std::thread::spawn(move || {
                    let me = slot.clone();
                    me.sync(|| {
                        let run = runs.fetch_add(1, Ordering::SeqCst);
                        if run == 0 {
                            while slot.state.lock().unwrap().asked < 8 {
                                std::thread::yield_now();
                            }
                        }
                        outcome(run)
                    })
                })
            })
            .collect();
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (runs.load(Ordering::SeqCst), results)
    }

    #[test]
    fn callers_that_overlap_share_one_sync() {
        let (runs, results) = eight_callers(|_| Ok(()));
        assert_eq!(runs, 2, "one sync under way, then one for the seven that asked meanwhile");
        assert!(results.iter().all(|r| r.is_ok()));
    }

    #[test]
    fn a_failed_sync_never_counts_as_done() {
        let (_, results) = eight_callers(|_| Err(io::Error::other("device gone")));
        assert!(results.iter().all(|r| r.is_err()), "every caller sees the failure: {results:?}");
        // Only the first run fails: its caller gets the error, and those
        // that waited on a sync after a failure run their own, which works.
        let (_, results) = eight_callers(|run| if run == 0 { Err(io::Error::other("once")) } else { Ok(()) });
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1, "{results:?}");
    }
}
