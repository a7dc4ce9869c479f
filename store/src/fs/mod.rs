//! Complete-or-absent atomic create on the local file system.
//!
//! OpenDAL's fs service implements `write_with(..).if_not_exists(true)` as
//! `open(O_CREAT|O_EXCL)` followed by writes to that file: a process killed
//! between the two leaves an empty or partial file that no later create can
//! replace (every later create loses to it). With `atomic_write_dir` it is
//! worse: an existence check, then a rename that overwrites. Neither gives the
//! protocol what it needs, so [`FsCreateLayer`] takes over exactly that one
//! operation for the fs backend, below every other layer (counting and fault
//! layers still see one `create`):
//!
//! 1. the content is written to a fresh temp file beside the target
//!    (`.compactd-create.<host>.<pid>.<seq>.<hint>`: same folder, so no lock
//!    is shared with writes to other folders) and `fsync`ed;
//! 2. it is published with `link(2)` to the final name, which fails with
//!    `EEXIST` if the name exists, so exactly one of N racing creators wins and
//!    the name never refers to a partial file (on file systems without hard
//!    links, `renameat2(RENAME_NOREPLACE)` does the same);
//! 3. the parent folder is `fsync`ed after a successful publish (and after
//!    creating any missing folder on the way; concurrent syncs of one folder
//!    by this process share one `fsync`, see `durable::sync_dir`), because the protocol relies on a
//!    created name surviving a power loss: a lease, an offline declaration or a
//!    merge commit that vanished after a crash of the machine could be won a
//!    second time;
//! 4. the temp name is unlinked. A crash before this leaves a stray temp file,
//!    never a wrong name. Temp names are never listed, and a listing that
//!    comes across one of a dead process of this host removes it
//!    ([`sweep_stale_temps`] removes those an older version left in
//!    `<root>/.compactd-tmp/`).
//!
//! An **empty** file (a state marker, a claim, a lock) skips steps 1, 2 and
//! 4: it is made at its name as a hard link of one empty inode this
//! process holds (`shared_inode.rs`; where that cannot work, created with
//! `openat(O_CREAT|O_EXCL|O_NOFOLLOW)`), synced, and its folder synced. With no content there is nothing to see
//! half-written, so the exclusive create is complete-or-absent and the
//! decision by itself: one `openat` and two `fsync`s instead of a temp file,
//! a `link` and an `unlink` (what made a marker cost as much as a file
//! with content). The markers asked for in one folder while a batch of
//! that folder is being made are made together in the next, one hand-off
//! and one folder sync for all (`marks.rs`).
//!
//! NFS: `link` is atomic on the server (NFSv3 and v4), and the reply cache
//! covers a retransmitted `LINK` whose first reply was lost; a client that
//! still sees `EEXIST` for its own retransmission would report "lost the race"
//! for a create it won, which the protocol treats like a lost reply (the
//! caller re-reads the name).
//!
//! Whole-object reads are served here too, by one `read(2)` of the file's
//! size: OpenDAL's fs reader zero-fills a 2 MiB buffer per read call (two
//! calls for a small file), which was a seventh of a busy node's CPU, since
//! the tree's files are a few hundred bytes. Ranged reads pass through.
//!
//! So are replacing writes (`put`), listings and deletes, each in **one**
//! hand-off to tokio's blocking pool: OpenDAL's fs service makes one per
//! step (open, write, flush, sync, rename: five per put; a `stat` per listed
//! entry), and those thread hand-offs (futex wake-ups, context switches) were
//! a third of a busy node's CPU in a profile of a 2,000-subtask dispatch.
//! A put stages its content beside the target (`.compactd-put.<host>.<pid>.…`,
//! hidden and swept like the creates' temps), syncs it and renames it over
//! the name, as OpenDAL's `atomic_write_dir` did but within one folder: a
//! rename across folders takes the file system's rename lock, and one
//! shared temp folder was a lock every write of every node contended on
//! (a sixth of the CPU spun on it on ext4); a listing walks the folder (and, when
//! recursive, its subfolders) in chunks of [`LIST_CHUNK`] entries, without
//! following symbolic links, as OpenDAL's lister does.
//!
//! Every other operation passes through untouched.
//!
//! Files: this one holds the layer, its dispatch, the whole-file reader,
//! the deleter and the temp names; `put.rs` the replacing writer,
//! `list.rs` the walker, `durable.rs` the complete-or-absent create and the
//! directory syncs it relies on, `marks.rs` the batches of empty creates.

mod durable;
mod list;
mod marks;
pub(crate) mod nofollow;
mod put;
mod shared_inode;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use durable::create_complete;
pub(crate) use durable::spread_children;
#[cfg(test)]
pub(crate) use durable::{attr_flags, FS_TOPDIR_FL};
use list::{Walk, WalkLister};
use opendal::raw::{
    oio, Layer, OpCopy, OpCreateDir, OpDelete, OpList, OpPresign, OpRead, OpRename, OpStat, OpWrite, RpCreateDir,
    RpPresign, RpRead, RpRename, RpStat, Service, ServiceInfo, Servicer,
};
use opendal::{Buffer, BytesRange, Capability, Error, ErrorKind, Metadata, MetadataBuilder, OperationContext, Result};
use put::PutWriter;

/// Prefixes of the temp files of creates and puts of older versions, inside
/// the temp folder (swept at open).
const LEGACY_TEMP_PREFIXES: [&str; 2] = ["create.", "put."];
/// Prefixes of the temp files of creates and puts, beside their target.
const CREATE_TEMP: &str = ".compactd-create.";
const PUT_TEMP: &str = ".compactd-put.";
/// Entries a listing reads per hand-off to the blocking pool.
pub const LIST_CHUNK: usize = 1024;
/// Bytes a put buffers before it writes them to its temp file (the tree's
/// files are far smaller: one hand-off at close).
const PUT_BUFFER: usize = 8 * 1024 * 1024;
#[cfg(test)]
pub(crate) const PUT_BUFFER_FOR_TESTS: usize = PUT_BUFFER;

/// Serves `if_not_exists` writes on an fs root by stage + link.
#[derive(Debug, Clone)]
pub struct FsCreateLayer {
    root: Arc<PathBuf>,
}

impl FsCreateLayer {
    /// `root`: the fs backend's root folder.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: Arc::new(root.into()) }
    }
}

impl Layer for FsCreateLayer {
    fn apply_service(&self, inner: Servicer) -> Servicer {
        Arc::new(FsCreateService { inner, root: self.root.clone() })
    }
}

#[derive(Debug)]
struct FsCreateService {
    inner: Servicer,
    root: Arc<PathBuf>,
}

impl Service for FsCreateService {
    type Reader = oio::Reader;
    type Writer = FsWriter;
    type Lister = oio::Lister;
    type Deleter = oio::Deleter;
    type Copier = oio::Copier;
    type Composer = oio::Composer;

    fn info(&self) -> ServiceInfo {
        self.inner.info()
    }

    fn capability(&self) -> Capability {
        self.inner.capability()
    }

    async fn create_dir(&self, _ctx: &OperationContext, path: &str, _args: OpCreateDir) -> Result<RpCreateDir> {
        let (root, p) = (self.root.clone(), path.to_string());
        tokio::task::spawn_blocking(move || nofollow::make_dir(&root, &p).map(drop))
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, "fs create_dir task failed").set_source(e))?
            .map_err(|e| io_error(e, "create_dir", path))?;
        Ok(RpCreateDir::default())
    }

    /// What stands at the name itself: a link is not followed (it is a
    /// name of unknown kind, as in a listing).
    async fn stat(&self, _ctx: &OperationContext, path: &str, _args: OpStat) -> Result<RpStat> {
        let (root, p) = (self.root.clone(), path.to_string());
        let st = tokio::task::spawn_blocking(move || -> io::Result<Option<libc::stat>> {
            let rel = p.trim_end_matches('/');
            if rel.is_empty() {
                return nofollow::open_dir(&root, "")?.map(|d| d.lstat(".")).transpose().map(Option::flatten);
            }
            let (dir, name) = nofollow::split(rel)?;
            match nofollow::open_dir(&root, &dir) {
                Ok(Some(d)) => d.lstat(&name),
                Ok(None) => Ok(None),
                // Below a link: nothing of the tree stands there.
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs stat task failed").set_source(e))?
        .map_err(|e| io_error(e, "stat", path))?;
        let Some(st) = st else {
            return Err(Error::new(ErrorKind::NotFound, "not found").with_context("path", path));
        };
        let mut b = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => MetadataBuilder::dir(),
            libc::S_IFREG => MetadataBuilder::file(st.st_size as u64),
            _ => MetadataBuilder::unknown(),
        };
        if let Ok(t) = opendal::raw::Timestamp::try_from(list::modified(&st)) {
            b.last_modified(t);
        }
        Ok(RpStat::new(b.build()))
    }

    fn read(&self, _ctx: &OperationContext, path: &str, _args: OpRead) -> Result<Self::Reader> {
        Ok(Box::new(WholeFileReader { root: self.root.clone(), path: path.to_string() }))
    }

    fn write(&self, ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        if args.append() || args.if_match().is_some() || args.if_none_match().is_some() {
            return Ok(FsWriter::Inner(self.inner.write(ctx, path, args)?));
        }
        if args.if_not_exists() {
            return Ok(FsWriter::Staged { root: self.root.clone(), path: path.to_string(), buf: Vec::new() });
        }
        Ok(FsWriter::Put(PutWriter {
            root: self.root.clone(),
            path: path.to_string(),
            buf: Vec::new(),
            len: 0,
            temp: None,
        }))
    }

    fn delete(&self, _ctx: &OperationContext) -> Result<Self::Deleter> {
        Ok(Box::new(oio::OneShotDeleter::new(FsDeleter { root: self.root.clone() })))
    }

    fn list(&self, _ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        Ok(Box::new(WalkLister {
            walk: Some(Walk::new(self.root.clone(), path, args.recursive())),
            chunk: Vec::new().into_iter(),
        }))
    }

    fn copy(&self, ctx: &OperationContext, from: &str, to: &str, args: OpCopy) -> Result<Self::Copier> {
        self.inner.copy(ctx, from, to, args)
    }

    /// Both folders opened without following links; the names themselves
    /// are renamed (a link at `to` is replaced, never followed).
    async fn rename(&self, _ctx: &OperationContext, from: &str, to: &str, _args: OpRename) -> Result<RpRename> {
        let (root, f, t) = (self.root.clone(), from.to_string(), to.to_string());
        tokio::task::spawn_blocking(move || {
            let ((fd, fname), (td, tname)) = (nofollow::split(&f)?, nofollow::split(&t)?);
            let from_dir = nofollow::open_dir(&root, &fd)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{f}: not found")))?;
            let to_dir = nofollow::make_dir(&root, &td)?;
            fs::rename(from_dir.join(&fname), to_dir.join(&tname))
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs rename task failed").set_source(e))?
        .map_err(|e| io_error(e, "rename", from))?;
        Ok(RpRename::default())
    }

    async fn presign(&self, ctx: &OperationContext, path: &str, args: OpPresign) -> Result<RpPresign> {
        self.inner.presign(ctx, path, args).await
    }
}

/// A write: OpenDAL's for appends and conditions the fs has no use for,
/// ours for creates ([`create_complete`], markers in `marks.rs`) and puts
/// ([`PutWriter`]).
pub enum FsWriter {
    Inner(oio::Writer),
    Put(PutWriter),
    /// Collects the content (created files are small state files) and
    /// publishes it whole on close.
    Staged {
        root: Arc<PathBuf>,
        path: String,
        buf: Vec<u8>,
    },
}

impl oio::Write for FsWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        match self {
            FsWriter::Inner(w) => w.write(bs).await,
            FsWriter::Put(p) => p.write(bs).await,
            FsWriter::Staged { buf, .. } => {
                buf.extend(bs.to_bytes());
                Ok(())
            }
        }
    }

    async fn close(&mut self) -> Result<Metadata> {
        match self {
            FsWriter::Inner(w) => w.close().await,
            FsWriter::Put(p) => p.close().await,
            FsWriter::Staged { root, path, buf } => {
                let (root, path, data) = (root.clone(), path.clone(), std::mem::take(buf));
                let len = data.len() as u64;
                let p = path.clone();
                let (what, result) = if data.is_empty() {
                    ("create (marker)", marks::create_empty(root, &p).await)
                } else {
                    let staged = tokio::task::spawn_blocking(move || create_complete(&root, &p, &data))
                        .await
                        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs create task failed").set_source(e))?;
                    ("create (stage + link)", staged)
                };
                match result {
                    Ok(true) => Ok(opendal::MetadataBuilder::file(len).build()),
                    Ok(false) => Err(Error::new(
                        ErrorKind::ConditionNotMatch,
                        "file already exists, doesn't match the condition if_not_exists",
                    )
                    .with_context("path", &path)),
                    Err(e) => Err(io_error(e, what, &path)),
                }
            }
        }
    }

    async fn abort(&mut self) -> Result<()> {
        match self {
            FsWriter::Inner(w) => w.abort().await,
            FsWriter::Put(p) => {
                p.abort();
                Ok(())
            }
            FsWriter::Staged { buf, .. } => {
                buf.clear();
                Ok(())
            }
        }
    }
}

/// Reads a range of a file in one call (`read.rs`: regular files only, no
/// link followed); a range from the start is bounded (see [`whole_limit`]).
struct WholeFileReader {
    root: Arc<PathBuf>,
    path: String,
}

impl WholeFileReader {
    async fn read_range(&self, range: BytesRange) -> Result<Buffer> {
        let (root, path) = (self.root.clone(), self.path.clone());
        let (offset, limit) = match range.offset() {
            0 => (0, Some(whole_limit(range))),
            n => (n, range.size()),
        };
        match tokio::task::spawn_blocking(move || crate::read::read_regular(&root, &path, offset, limit)).await {
            Ok(Ok(bytes)) => Ok(Buffer::from(bytes)),
            Ok(Err(e)) => Err(io_error(e, "read", &self.path)),
            Err(e) => Err(Error::new(ErrorKind::Unexpected, "read task failed").set_source(e)),
        }
    }
}

/// The most a read from the start fetches: the range's size, and never more
/// than one byte past a state file's limit, so that a tree store's bounded
/// read ([`crate::Store::read`]) of `/dev/zero` stops there. Only tree stores
/// read through this layer (a data store over fs reads through `beneath`),
/// and they read larger objects only in explicit ranges.
fn whole_limit(range: BytesRange) -> u64 {
    range.size().unwrap_or(crate::MAX_STATE_BYTES + 1)
}

impl oio::Read for WholeFileReader {
    async fn open(&self, range: BytesRange) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        Ok((RpRead::default(), Box::new(self.read_range(range).await?)))
    }

    async fn read(&self, range: BytesRange) -> Result<(RpRead, Buffer)> {
        Ok((RpRead::default(), self.read_range(range).await?))
    }
}

/// Opens a fresh temp file for `path` in `dir` (its target's own folder:
/// no lock shared with writes elsewhere, and the publishing rename or link
/// stays inside one folder).
fn open_temp(dir: &Path, prefix: &str, path: &str) -> io::Result<(PathBuf, File)> {
    // A temp name left by an earlier process with the same pid (a reboot,
    // a container) is skipped.
    loop {
        let tmp = dir.join(temp_name(prefix, path));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Deletes one path per blocking call: a file, or a folder (with
/// everything below it when recursive). A missing path is deleted already.
struct FsDeleter {
    root: Arc<PathBuf>,
}

impl oio::OneShotDelete for FsDeleter {
    async fn delete_once(&self, path: String, args: OpDelete) -> Result<()> {
        let (root, p) = (self.root.clone(), path.clone());
        let recursive = args.recursive();
        // The name itself is removed, a link included, never what it
        // points to; the folders leading to it are not followed either.
        let r = tokio::task::spawn_blocking(move || {
            let (dir, name) = nofollow::split(&p)?;
            let dir = match nofollow::open_dir(&root, &dir) {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Ok(()),
                Err(e) => return Err(e),
            };
            match dir.lstat(&name)? {
                None => Ok(()),
                Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR && recursive => {
                    // std's remove_dir_all does not follow links inside.
                    fs::remove_dir_all(dir.join(&name))
                }
                Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => dir.unlink(&name, true),
                Some(_) => dir.unlink(&name, false),
            }
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs delete task failed").set_source(e))?;
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(e, "delete", &path)),
        }
    }
}

fn io_error(e: io::Error, op: &'static str, path: &str) -> Error {
    let kind = match e.kind() {
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        io::ErrorKind::IsADirectory => ErrorKind::IsADirectory,
        io::ErrorKind::NotADirectory => ErrorKind::NotADirectory,
        _ => ErrorKind::Unexpected,
    };
    if e.kind() == io::ErrorKind::InvalidInput && e.to_string().starts_with(crate::read::NOT_A_FILE) {
        return Error::new(ErrorKind::Unsupported, e.to_string()).with_context("path", path);
    }
    Error::new(kind, op).with_context("path", path).set_source(e)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The temp name of this process's next create of `path`:
/// `create.<host>.<pid>.<seq>.<hint>`, so that [`sweep_stale_temps`] can tell
/// whose it is, and a person (or a test placing a crash) what it was for:
/// the hint is the target's last two path segments joined by `_`.
fn temp_name(prefix: &str, path: &str) -> String {
    let mut segs = path.trim_end_matches('/').rsplit('/');
    let last = segs.next().unwrap_or("");
    let hint: String = match segs.next() {
        Some(parent) => format!("{parent}_{last}"),
        None => last.to_string(),
    }
    .chars()
    .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
    .take(100)
    .collect();
    format!("{prefix}{}.{}.{}.{hint}", host_tag(), std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

pub(crate) fn host_tag() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let raw = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let tag: String = raw.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        if tag.is_empty() {
            "host".to_string()
        } else {
            tag
        }
    })
}

/// How old a torn create-once file must be before a repair moves it away:
/// long past any create of an older compactd that is still running (those
/// write their content microseconds after creating the name), with room for
/// clock differences between the hosts sharing a file system.
pub const TORN_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a repair of a torn create-once file did (`Store::quarantine_torn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quarantine {
    /// The torn file was moved away: the name is free for a create.
    Removed,
    /// Nothing to do: the name is absent, or it holds a valid file (someone
    /// repaired it first; a valid file that was moved by mistake was put back).
    NotTorn,
    /// The file is torn but younger than the grace period: its writer may be
    /// a live process of an older version, between its create and its write.
    TooYoung { age: std::time::Duration },
}

/// Removes temp files of creates and puts left in the temp folder by processes of this host that are no
/// longer running (a crash between staging and unlinking the temp name).
/// Returns how many were removed. Temps of other hosts (a shared NFS root) and
/// of live processes are left alone.
pub fn sweep_stale_temps(tmp_dir: &Path) -> io::Result<usize> {
    let prefixes = LEGACY_TEMP_PREFIXES.map(|p| format!("{p}{}.", host_tag()));
    let mut removed = 0;
    // Only a real folder of the root: a link planted there is not followed.
    if !fs::symlink_metadata(tmp_dir).is_ok_and(|m| m.is_dir()) {
        return Ok(0);
    }
    let entries = match fs::read_dir(tmp_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| prefixes.iter().find_map(|p| n.strip_prefix(p.as_str()))) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            match fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}
