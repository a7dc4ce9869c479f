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
//!    by this process share one `fsync`, see [`sync_dir`]), because the protocol relies on a
//!    created name surviving a power loss: a lease, an offline declaration or a
//!    merge commit that vanished after a crash of the machine could be won a
//!    second time;
//! 4. the temp name is unlinked. A crash before this leaves a stray temp file,
//!    never a wrong name. Temp names are never listed, and a listing that
//!    comes across one of a dead process of this host removes it
//!    ([`sweep_stale_temps`] removes those an older version left in
//!    `<root>/.compactd-tmp/`).
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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opendal::raw::{
    oio, Layer, OpCopy, OpCreateDir, OpDelete, OpList, OpPresign, OpRead, OpRename, OpStat, OpWrite, RpCreateDir,
    RpPresign, RpRead, RpRename, RpStat, Service, ServiceInfo, Servicer,
};
use opendal::{Buffer, BytesRange, Capability, Error, ErrorKind, Metadata, MetadataBuilder, OperationContext, Result};

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

    async fn create_dir(&self, ctx: &OperationContext, path: &str, args: OpCreateDir) -> Result<RpCreateDir> {
        self.inner.create_dir(ctx, path, args).await
    }

    async fn stat(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        self.inner.stat(ctx, path, args).await
    }

    fn read(&self, ctx: &OperationContext, path: &str, args: OpRead) -> Result<Self::Reader> {
        let inner = self.inner.read(ctx, path, args)?;
        Ok(Box::new(WholeFileReader { file: self.root.join(path), path: path.to_string(), inner }))
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

    async fn rename(&self, ctx: &OperationContext, from: &str, to: &str, args: OpRename) -> Result<RpRename> {
        self.inner.rename(ctx, from, to, args).await
    }

    async fn presign(&self, ctx: &OperationContext, path: &str, args: OpPresign) -> Result<RpPresign> {
        self.inner.presign(ctx, path, args).await
    }
}

/// A write: OpenDAL's for appends and conditions the fs has no use for,
/// ours for creates ([`create_complete`]) and puts ([`PutWriter`]).
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
                let result = tokio::task::spawn_blocking(move || create_complete(&root, &p, &data))
                    .await
                    .map_err(|e| Error::new(ErrorKind::Unexpected, "fs create task failed").set_source(e))?;
                match result {
                    Ok(true) => Ok(opendal::MetadataBuilder::file(len).build()),
                    Ok(false) => Err(Error::new(
                        ErrorKind::ConditionNotMatch,
                        "file already exists, doesn't match the condition if_not_exists",
                    )
                    .with_context("path", &path)),
                    Err(e) => Err(io_error(e, "create (stage + link)", &path)),
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

/// Reads a file from its start in one call, at most the range's size
/// (`read.rs`: regular files only); other ranges go to OpenDAL's reader.
struct WholeFileReader {
    file: PathBuf,
    path: String,
    inner: oio::Reader,
}

impl WholeFileReader {
    async fn read_whole(&self, limit: Option<u64>) -> Result<Buffer> {
        let file = self.file.clone();
        match tokio::task::spawn_blocking(move || crate::read::read_regular(&file, limit)).await {
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
        if range.offset() != 0 {
            return oio::Read::open(&self.inner, range).await;
        }
        Ok((RpRead::default(), Box::new(self.read_whole(Some(whole_limit(range))).await?)))
    }

    async fn read(&self, range: BytesRange) -> Result<(RpRead, Buffer)> {
        if range.offset() != 0 {
            return oio::Read::read(&self.inner, range).await;
        }
        Ok((RpRead::default(), self.read_whole(Some(whole_limit(range))).await?))
    }
}

/// A replacing write: buffered, then staged beside the target, synced and
/// renamed over the name in one blocking call at close (content beyond
/// [`PUT_BUFFER`] goes to the temp file as it comes).
pub struct PutWriter {
    root: Arc<PathBuf>,
    path: String,
    buf: Vec<u8>,
    len: u64,
    temp: Option<(PathBuf, File)>,
}

impl PutWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.len += bs.len() as u64;
        self.buf.extend(bs.to_bytes());
        if self.buf.len() >= PUT_BUFFER {
            self.spill(false).await?;
        }
        Ok(())
    }

    /// Writes the buffer to the temp file (opened on first use) and, when
    /// `publish`, syncs it and renames it over the name.
    async fn spill(&mut self, publish: bool) -> Result<()> {
        let (root, path) = (self.root.clone(), self.path.clone());
        let temp = self.temp.take();
        let data = std::mem::take(&mut self.buf);
        let joined = tokio::task::spawn_blocking(move || {
            let mut temp = match temp {
                Some(t) => t,
                None => {
                    let target = root.join(&path);
                    let parent = target.parent().unwrap_or(&root);
                    if !parent.is_dir() {
                        fs::create_dir_all(parent)?;
                    }
                    open_temp(parent, PUT_TEMP, &path)?
                }
            };
            let r = (|| {
                temp.1.write_all(&data)?;
                if publish {
                    temp.1.sync_all()?;
                    fs::rename(&temp.0, root.join(&path))?;
                }
                Ok(())
            })();
            match r {
                Ok(()) => Ok((!publish).then_some(temp)),
                Err(e) => {
                    let _ = fs::remove_file(&temp.0);
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "fs put task failed").set_source(e))?;
        self.temp = joined.map_err(|e| io_error(e, "put (stage + rename)", &self.path))?;
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        self.spill(true).await?;
        Ok(MetadataBuilder::file(self.len).build())
    }

    fn abort(&mut self) {
        self.buf.clear();
        if let Some((temp, _)) = self.temp.take() {
            let _ = fs::remove_file(temp);
        }
    }
}

impl Drop for PutWriter {
    fn drop(&mut self) {
        self.abort();
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
        let p = self.root.join(&path);
        let recursive = args.recursive();
        let r = tokio::task::spawn_blocking(move || match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() && recursive => fs::remove_dir_all(&p),
            Ok(m) if m.is_dir() => fs::remove_dir(&p),
            Ok(_) => fs::remove_file(&p),
            Err(e) => Err(e),
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

/// A listing in progress: the folders still open, deepest last.
struct Walk {
    root: Arc<PathBuf>,
    /// The listed path itself, yielded first (as OpenDAL's lister does).
    first: Option<String>,
    /// The folder to open first (relative, ends in `/`).
    start: Option<String>,
    stack: Vec<(String, fs::ReadDir)>,
    recursive: bool,
}

impl Walk {
    fn new(root: Arc<PathBuf>, path: &str, recursive: bool) -> Self {
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
    fn next_chunk(&mut self, max: usize) -> io::Result<Vec<oio::Entry>> {
        let mut out = Vec::new();
        if let Some(start) = self.start.take() {
            match fs::read_dir(self.root.join(&start)) {
                Ok(rd) => self.stack.push((start, rd)),
                // A folder that is not there lists as empty.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(e),
            }
            if let Some(first) = self.first.take() {
                out.push(oio::Entry::new(&first, MetadataBuilder::dir().build()));
            }
        }
        while out.len() < max {
            let Some((dir, rd)) = self.stack.last_mut() else { break };
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
                    let _ = fs::remove_file(de.path());
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
                    match fs::read_dir(self.root.join(&sub)) {
                        Ok(rd) => self.stack.push((sub, rd)),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
            } else {
                out.push(oio::Entry::new(&rel, b.build()));
            }
        }
        Ok(out)
    }
}

/// For a temp name of a create or put: `Some(Some(pid))` if a process of
/// this host made it, `Some(None)` if another host did.
fn temp_owner(name: &str) -> Option<Option<u32>> {
    let rest = name.strip_prefix(CREATE_TEMP).or_else(|| name.strip_prefix(PUT_TEMP))?;
    let mine = rest.strip_prefix(host_tag()).and_then(|r| r.strip_prefix('.'));
    Some(mine.and_then(|r| r.split('.').next()).and_then(|p| p.parse().ok()))
}

/// Yields a [`Walk`]'s entries, reading [`LIST_CHUNK`] per blocking call.
struct WalkLister {
    walk: Option<Walk>,
    chunk: std::vec::IntoIter<oio::Entry>,
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

/// Stage + link. `Ok(true)`: created; `Ok(false)`: the name existed.
fn create_complete(root: &Path, path: &str, data: &[u8]) -> io::Result<bool> {
    let target = root.join(path);
    let target = target.as_path();
    // A name that exists already loses without staging anything (the link
    // below stays the decision: a racer may still publish in between).
    if fs::symlink_metadata(target).is_ok() {
        return Ok(false);
    }
    let parent = target.parent().unwrap_or(root);
    create_dirs_synced(root, parent)?;
    // Only the publish may say "exists" (a stale temp name is skipped).
    let (tmp, mut f) = open_temp(parent, CREATE_TEMP, path)?;
    let published = (|| {
        f.write_all(data)?;
        f.sync_all()?;
        publish_noreplace(&tmp, target)
    })();
    drop(f);
    let _ = fs::remove_file(&tmp);
    match published {
        Ok(()) => {
            sync_dir(parent)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Publishes `tmp` as `target` unless `target` exists: `link(2)`, or where the
/// file system has no hard links, `renameat2(RENAME_NOREPLACE)`.
fn publish_noreplace(tmp: &Path, target: &Path) -> io::Result<()> {
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

fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
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

/// Creates the missing folders from `root` down to `dir`, syncing the parent
/// of each new one so the chain survives a power loss.
fn create_dirs_synced(root: &Path, dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = vec![];
    let mut d = dir;
    while !d.is_dir() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) if p.starts_with(root) || p == root => d = p,
            _ => break,
        }
    }
    for m in missing.iter().rev() {
        match fs::create_dir(m) {
            Ok(()) => {
                if let Some(p) = m.parent() {
                    sync_dir(p)?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && m.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
pub(crate) fn spread_children(root: &Path, dir: &Path) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    create_dirs_synced(root, dir)?;
    let f = File::open(dir)?;
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
fn sync_dir(dir: &Path) -> io::Result<()> {
    static SYNCS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<PathBuf, Arc<DirSync>>>> =
        std::sync::OnceLock::new();
    let map = SYNCS.get_or_init(Default::default);
    let slot = map.lock().unwrap_or_else(|e| e.into_inner()).entry(dir.to_path_buf()).or_default().clone();
    let r = slot.sync(|| File::open(dir)?.sync_all());
    // The last one out removes the folder's entry.
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    if Arc::strong_count(&slot) == 2 {
        m.remove(dir);
    }
    r
}

/// One folder's group sync (see [`sync_dir`]).
#[derive(Default)]
struct DirSync {
    state: std::sync::Mutex<DirSyncState>,
    done: std::sync::Condvar,
}

#[derive(Default)]
struct DirSyncState {
    /// Tickets handed out: a caller's ticket is covered by a sync whose
    /// `upto` is at least it.
    asked: u64,
    /// The highest ticket a finished sync covered.
    covered: u64,
    running: bool,
    /// Failed syncs so far.
    failures: u64,
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
