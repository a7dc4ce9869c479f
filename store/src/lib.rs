//! All backend access: the only module that touches OpenDAL.
//!
//! The store offers the few operations compactd's protocol is built on:
//! atomic create (create-if-not-exists, exactly one winner among racers),
//! replace (whole-object overwrite), read, stat, one-level and streamed
//! recursive list, and idempotent delete. Paths are relative to the root,
//! `/`-separated, with a trailing `/` for folders.
//!
//! Invariants:
//! - [`Store::open`] refuses a backend on which atomic create is not safe,
//!   naming the backend and the missing capability; there is no fallback to
//!   check-then-write.
//! - On fs, creates are complete-or-absent: the content is staged in a synced
//!   temp file and published with `link(2)`, which fails if the name exists
//!   ([`fs`]); a name, once visible, holds its whole content, even after
//!   a crash of the writer or a power loss. Replaces go through a temp file
//!   and a rename (readers see the old or the new file, never a mix).
//! - On HDFS, writes are staged, completed and published with one `rename2`
//!   (without `OVERWRITE` for a create): complete-or-absent too ([`hdfs`]).
//! - "Lost the race" is one result, [`Created::Exists`]: the backend said
//!   `ConditionNotMatch` (S3's 412) or `AlreadyExists`. S3's 409 on a
//!   conditional create (`ConditionalRequestConflict`, `OperationAborted`:
//!   another conditional write of the key is in flight, and this one was not
//!   applied) is not an answer: the create is sent again after a short
//!   backoff, a bounded number of times, then fails as an error (never
//!   "exists": the competing write may yet abort).

mod beneath;
pub mod fs;
pub mod hdfs;
pub mod layers;
mod list;
mod memory;
mod read;
#[cfg(feature = "testing")]
pub mod testing;
mod uri;
mod writer;

use bytes::Bytes;
use opendal::{ErrorKind, Operator};

use memory::MemVersions;
pub use read::{BadFile, MAX_STATE_BYTES};
pub use uri::{RootUri, UriError};
pub use writer::StoreWriter;
use writer::WriterInner;

/// Folder below the fs root where creates and replaces stage their temp
/// files; ignored by listings of the tree and by `compactd check`.
pub const FS_TMP_DIR: &str = ".compactd-tmp";

/// Attempts of a conditional create that S3 answers with 409 (a concurrent
/// conditional write of the key in flight), and the first backoff, doubled
/// after each: at most 50 + 100 + 200 + 400 ms of waiting.
const CREATE_CONFLICT_TRIES: u32 = 5;
const CREATE_CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Uri(#[from] UriError),
    #[error("backend {backend}: {op} {path:?} failed: {source}")]
    Backend { backend: String, op: &'static str, path: String, source: Box<opendal::Error> },
    #[error("backend {backend} is not safe for compactd: it lacks {capability} ({why})")]
    Unsafe { backend: String, capability: &'static str, why: String },
    #[error("backend {backend}: {path:?} is unusable: {why}")]
    BadFile { backend: String, path: String, why: BadFile },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Outcome of an atomic create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// This call created the object.
    Created,
    /// The object already existed (another writer won the race).
    Exists,
}

/// Outcome of a conditional replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    Replaced,
    /// The object changed (or vanished) since the version given.
    Conflict,
}

/// A listed object or folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Full path from the root; folders end in `/`.
    pub path: String,
    pub is_dir: bool,
    /// On a data store over fs ([`Store::open_data`]): what stands at this
    /// name if it is neither a regular file nor a folder ("symbolic link",
    /// "FIFO", "socket", "device"). Such an entry is never read or deleted.
    pub special: Option<&'static str>,
    /// The object's size, where the listing carries it (S3's ListObjectsV2,
    /// a data store over fs); `None` elsewhere ([`Store::stat`] tells).
    pub len: Option<u64>,
    /// A token that changes whenever the object is rewritten, where the
    /// listing carries one: S3's ETag (ListObjectsV2 returns it for every
    /// key), fs's modification time and size, the memory backend's write
    /// counter. `None` for folders and on a data store. Readers use it to
    /// skip reading an object they have seen at this version; on fs two
    /// rewrites within the file system's timestamp granularity and of the
    /// same size look alike, so a version may stay equal across a rewrite
    /// (never the other way round): treat "same version" as "probably
    /// unchanged" and read anyway where a missed change would be wrong.
    pub version: Option<String>,
    /// When the backend last wrote the object, by the backend's own clock
    /// (S3's LastModified, to the second; the file's mtime on fs and HDFS),
    /// in ms since the epoch, where the listing carries it. Never used to
    /// order anything: readers compare it with a writer's stated wall clock
    /// to show that writer's clock skew (`compactd nodes`).
    pub modified_ms: Option<i64>,
}

impl Entry {
    /// Last path segment, without a trailing `/`.
    pub fn name(&self) -> &str {
        self.path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub len: u64,
    pub etag: Option<String>,
}

/// Request timeouts and retries of a store ([`Store::open_with_options`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Limit of one request (each attempt); also of each I/O of a read or
    /// write. `None`: no limit.
    pub timeout: Option<std::time::Duration>,
    /// Retries of a request that failed with a transient error (a timeout,
    /// a 5xx, a reset connection), with exponential backoff and jitter. Only
    /// idempotent requests are retried: reads, stats, lists, deletes and
    /// whole-object replaces, never an atomic create (a create whose reply
    /// was lost would come back as "exists" when it was this caller's).
    pub retries: usize,
}

impl Default for StoreOptions {
    /// 5 s per request, 2 retries: a request that hangs costs at most about
    /// 16 s, within the default 30 s session.
    fn default() -> Self {
        StoreOptions { timeout: Some(std::time::Duration::from_secs(5)), retries: 2 }
    }
}

impl StoreOptions {
    /// No timeout and no retry: every fault reaches the caller (tests and
    /// benchmarks with fault-injecting layers).
    pub fn none() -> Self {
        StoreOptions { timeout: None, retries: 0 }
    }

    fn apply(&self, op: Operator, retry: bool) -> Operator {
        let op = match self.timeout {
            Some(t) => op.layer(opendal::layers::TimeoutLayer::new().with_timeout(t).with_io_timeout(t)),
            None => op,
        };
        if retry && self.retries > 0 {
            op.layer(
                opendal::layers::RetryLayer::new()
                    .with_max_times(self.retries)
                    .with_min_delay(std::time::Duration::from_millis(100))
                    .with_max_delay(std::time::Duration::from_secs(2))
                    .with_jitter()
                    // One line per retry (the default prints the error's
                    // backtrace when RUST_BACKTRACE is set).
                    .with_notify(|e: opendal::layers::RetryEvent<'_>| {
                        tracing::warn!(
                            op = ?e.op,
                            attempt = e.attempt,
                            after_ms = e.retry_after.as_millis() as u64,
                            "backend request failed, retrying: {}",
                            e.err.kind()
                        )
                    }),
            )
        } else {
            op
        }
    }
}

#[derive(Clone, Debug)]
pub struct Store {
    uri: RootUri,
    /// Reads, lists, stats and deletes (retried when transient).
    op: Operator,
    /// Atomic creates and conditional writes: never retried.
    create_op: Operator,
    /// Whole-object replaces (fs: temp file + rename).
    replace_op: Operator,
    /// A data store over fs: every operation resolves paths without
    /// following links ([`Store::open_data`]).
    beneath: Option<beneath::Beneath>,
    options: StoreOptions,
    /// The memory backend's write counters, its versions (`memory.rs`).
    versions: Option<std::sync::Arc<MemVersions>>,
    /// On HDFS: the NameNode RPCs this store issued, per method.
    rpcs: Option<std::sync::Arc<hdfs::NameNodeRpcs>>,
    /// Bound of [`Store::read`]: [`MAX_STATE_BYTES`] on a tree store, none
    /// on a data store (`read.rs`).
    read_limit: Option<u64>,
}

impl Store {
    /// Opens the backend named by `uri` with the default request timeout and
    /// retries, and checks that it is safe to use.
    pub async fn open(uri: &RootUri) -> Result<Store> {
        Self::open_with_options(uri, &StoreOptions::default(), |op| op).await
    }

    /// Applies `wrap` (OpenDAL layers: operation counting, fault injection)
    /// to every operator of the store, with no timeout or retry so that every
    /// injected fault reaches the caller.
    pub async fn open_with(uri: &RootUri, wrap: impl Fn(Operator) -> Operator) -> Result<Store> {
        Self::open_with_options(uri, &StoreOptions::none(), wrap).await
    }

    /// The general form: `wrap` is applied below the timeout and retry
    /// layers, so a counting layer counts every attempt (each is a request).
    pub async fn open_with_options(
        uri: &RootUri,
        options: &StoreOptions,
        wrap: impl Fn(Operator) -> Operator,
    ) -> Result<Store> {
        // HTTP services (S3, WebHDFS) need a process-wide transport; without
        // the `auto-register-services` feature nobody installs one for us.
        // First install wins, so calling it on every open is harmless.
        opendal::install_default();
        let fail = |e: opendal::Error| StoreError::Backend {
            backend: uri.to_string(),
            op: "open",
            path: String::new(),
            source: Box::new(e),
        };
        let rpcs = std::sync::Arc::new(hdfs::NameNodeRpcs::default());
        let (op, replace_op) = match uri {
            RootUri::Fs { root } => {
                let root = root.to_string_lossy().into_owned();
                let tmp = format!("{}/{FS_TMP_DIR}", root.trim_end_matches('/'));
                let op = Operator::new(opendal::services::Fs::default().root(&root))
                    .map_err(fail)?
                    .layer(fs::FsCreateLayer::new(&root));
                match fs::sweep_stale_temps(std::path::Path::new(&tmp)) {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(removed = n, dir = %tmp, "removed temp files an older version's crashed writes left")
                    }
                    Err(e) => tracing::warn!(dir = %tmp, error = %e, "could not sweep temp files of crashed creates"),
                }
                // Puts are staged beside their target and renamed by the same
                // layer.
                (op.clone(), op)
            }
            RootUri::Memory => {
                let op = Operator::new(opendal::services::Memory::default()).map_err(fail)?;
                (op.clone(), op)
            }
            RootUri::S3 { bucket, prefix, endpoint, region } => {
                let mut b = opendal::services::S3::default().bucket(bucket).root(&format!("/{prefix}")).region(region);
                if let Some(e) = endpoint {
                    b = b.endpoint(e);
                }
                if let (Ok(id), Ok(secret)) =
                    (std::env::var("AWS_ACCESS_KEY_ID"), std::env::var("AWS_SECRET_ACCESS_KEY"))
                {
                    b = b.access_key_id(&id).secret_access_key(&secret).disable_config_load().disable_ec2_metadata();
                    if let Ok(token) = std::env::var("AWS_SESSION_TOKEN") {
                        b = b.session_token(&token);
                    }
                }
                let op = Operator::new(b).map_err(fail)?;
                (op.clone(), op)
            }
            RootUri::Webhdfs { .. } => {
                return Err(StoreError::Unsafe {
                    backend: uri.to_string(),
                    capability: "atomic create (write_with_if_not_exists)",
                    why: "WebHDFS writes with overwrite and its rename cannot refuse an existing target through \
                          OpenDAL; use hdfs://namenode:port/path, which speaks the NameNode's RPC protocol directly"
                        .into(),
                })
            }
            RootUri::Hdfs { url, root } => {
                let b = hdfs::HdfsBuilder { url: url.clone(), root: root.clone(), rpcs: rpcs.clone() };
                let op = Operator::new(b).map_err(fail)?;
                (op.clone(), op)
            }
        };
        let store = Store {
            uri: uri.clone(),
            op: options.apply(wrap(op.clone()), true),
            create_op: options.apply(wrap(op), false),
            replace_op: options.apply(wrap(replace_op), true),
            beneath: None,
            options: options.clone(),
            versions: matches!(uri, RootUri::Memory).then(Default::default),
            rpcs: matches!(uri, RootUri::Hdfs { .. }).then_some(rpcs),
            read_limit: Some(MAX_STATE_BYTES),
        };
        store.check_capabilities()?;
        Ok(store)
    }

    /// Opens a **data** backend for executors. On fs every operation then
    /// resolves paths one component at a time without following symbolic
    /// links, reads only regular files, and lists links, FIFOs, sockets and
    /// devices as [`Entry::special`] (see `beneath.rs`); other backends have
    /// no links and behave as [`Store::open`].
    pub async fn open_data(uri: &RootUri) -> Result<Store> {
        Self::open_data_with_options(uri, &StoreOptions::default()).await
    }

    /// [`Store::open_data`] with explicit request timeout and retries.
    pub async fn open_data_with_options(uri: &RootUri, options: &StoreOptions) -> Result<Store> {
        let mut store = Self::open_with_options(uri, options, |op| op).await?;
        store.read_limit = None;
        if let RootUri::Fs { root } = uri {
            store.beneath = Some(beneath::Beneath::new(root.clone()));
        }
        Ok(store)
    }

    /// Builds a store over one in-memory operator, shared by every clone:
    /// several in-process nodes can use it as one cluster backend.
    pub async fn memory() -> Store {
        Self::open(&RootUri::Memory).await.expect("the memory backend always opens")
    }

    /// The same backend seen through more layers (a node of an in-process
    /// test cluster with its own fault layer over a shared memory store).
    pub fn layered(&self, wrap: impl Fn(Operator) -> Operator) -> Store {
        Store {
            uri: self.uri.clone(),
            op: wrap(self.op.clone()),
            create_op: wrap(self.create_op.clone()),
            replace_op: wrap(self.replace_op.clone()),
            beneath: self.beneath.clone(),
            options: self.options.clone(),
            versions: self.versions.clone(),
            rpcs: self.rpcs.clone(),
            read_limit: self.read_limit,
        }
    }

    /// On HDFS, the NameNode RPCs this store (and its clones) issued so far,
    /// per method; `None` on other backends.
    pub fn namenode_rpcs(&self) -> Option<std::sync::Arc<hdfs::NameNodeRpcs>> {
        self.rpcs.clone()
    }

    /// Records a write of `path` for the memory backend's versions.
    fn wrote(&self, path: &str) {
        if let Some(v) = &self.versions {
            v.bump(path);
        }
    }

    pub fn uri(&self) -> &RootUri {
        &self.uri
    }

    /// The request timeout and retries this store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    fn check_capabilities(&self) -> Result<()> {
        let cap = self.op.info().capability();
        let need: &[(bool, &'static str, &str)] = &[
            (
                cap.write_with_if_not_exists,
                "atomic create (write_with_if_not_exists)",
                "elections, offline declarations and task claims need exactly one winner among concurrent creators",
            ),
            (cap.list, "list", "the tree is read by listing"),
            (cap.read, "read", "state files are read"),
            (cap.delete, "delete", "finished work is removed"),
            (cap.stat, "stat", "fencing re-checks use stat"),
        ];
        for (ok, capability, why) in need {
            if !ok {
                return Err(StoreError::Unsafe { backend: self.uri.to_string(), capability, why: (*why).to_string() });
            }
        }
        Ok(())
    }

    /// Proves atomic create on the live backend, so that a server which
    /// advertises conditional writes but ignores them is refused at start-up:
    /// creates a scratch object, checks that a second create loses, races
    /// `racers` creates of a fresh key and checks exactly one wins.
    pub async fn probe_atomic_create(&self, scratch: &str, racers: usize) -> Result<()> {
        let a = format!("{scratch}/a");
        let b = format!("{scratch}/b");
        let _ = self.delete(&a).await;
        let _ = self.delete(&b).await;
        let first = self.create(&a, b"{}".to_vec()).await?;
        let second = self.create(&a, b"{}".to_vec()).await?;
        let race = futures::future::join_all((0..racers).map(|_| self.create(&b, b"{}".to_vec()))).await;
        let winners = race.iter().filter(|r| matches!(r, Ok(Created::Created))).count();
        let _ = self.delete_all(&format!("{}/", scratch.trim_end_matches('/'))).await;
        if first != Created::Created || second != Created::Exists || winners != 1 {
            return Err(StoreError::Unsafe {
                backend: self.uri.to_string(),
                capability: "working atomic create",
                why: format!(
                    "probe at {scratch}: first create {first:?}, second create {second:?} (expected Exists), \
                     {winners} of {racers} racing creates won (expected 1); the server ignores or races conditional writes"
                ),
            });
        }
        Ok(())
    }

    fn err(&self, op: &'static str, path: &str, source: opendal::Error) -> StoreError {
        StoreError::Backend { backend: self.uri.to_string(), op, path: path.to_string(), source: Box::new(source) }
    }

    /// Creates `path` with `bytes` unless it exists. Of N concurrent callers
    /// exactly one gets [`Created::Created`].
    pub async fn create(&self, path: &str, bytes: impl Into<Bytes>) -> Result<Created> {
        let bytes = bytes.into();
        if self.beneath.is_some() {
            let p = path.to_string();
            let made = self.fs_data("create", path, move |fs| fs.create(&p, &bytes)).await?;
            return Ok(if made { Created::Created } else { Created::Exists });
        }
        let mut tries = 1;
        loop {
            match self.create_op.write_with(path, bytes.clone()).if_not_exists(true).await {
                Ok(_) => {
                    self.wrote(path);
                    return Ok(Created::Created);
                }
                Err(e) if matches!(e.kind(), ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists) => {
                    return Ok(Created::Exists)
                }
                // Not applied: safe to send again, unlike a create whose
                // reply was lost.
                Err(e) if e.kind() == ErrorKind::Conflict && tries < CREATE_CONFLICT_TRIES => {
                    tracing::debug!(path, tries, "conditional create met a concurrent one in flight, retrying: {e}");
                    // A backoff between requests, as OpenDAL's retry layer
                    // sleeps; the store has no clock of its own.
                    #[allow(clippy::disallowed_methods)]
                    tokio::time::sleep(CREATE_CONFLICT_BACKOFF * (1 << (tries - 1))).await;
                    tries += 1;
                }
                Err(e) => return Err(self.err("create", path, e)),
            }
        }
    }

    /// Writes `path` whole, replacing any previous content. Readers see the
    /// old or the new content (fs: temp file and rename; S3: single PUT).
    pub async fn put(&self, path: &str, bytes: impl Into<Bytes>) -> Result<()> {
        if self.beneath.is_some() {
            let (p, b) = (path.to_string(), bytes.into());
            return self.fs_data("put", path, move |fs| fs.put(&p, &b)).await;
        }
        self.replace_op.write(path, bytes.into()).await.map_err(|e| self.err("put", path, e))?;
        self.wrote(path);
        Ok(())
    }

    /// Starts a streamed whole-object write of `path`, for objects too large
    /// to hold in memory: readers see nothing at `path` (or its old content)
    /// until [`StoreWriter::close`] returns (fs: a temp file in the folder,
    /// synced and renamed; S3: a multipart upload completed on close).
    pub async fn writer(&self, path: &str) -> Result<StoreWriter> {
        let inner = if self.beneath.is_some() {
            let p = path.to_string();
            WriterInner::Fs(Some(self.fs_data("write", path, move |fs| fs.begin_put(&p)).await?))
        } else {
            let w = self
                .replace_op
                .writer_with(path)
                .chunk(writer::WRITE_CHUNK)
                .await
                .map_err(|e| self.err("write", path, e))?;
            WriterInner::Dal(w)
        };
        Ok(StoreWriter::new(self.clone(), path, inner))
    }

    /// Makes the finished object `from` visible at `to`, replacing what is
    /// there: fs and HDFS rename it (no data copied; `from` is gone after),
    /// S3 copies it server-side. Idempotent for a roll-forward: if `from` is already
    /// gone and `to` exists, the move happened before.
    pub async fn promote(&self, from: &str, to: &str) -> Result<()> {
        let moved = if self.beneath.is_some() {
            let (f, t) = (from.to_string(), to.to_string());
            self.fs_data("promote", from, move |fs| fs.rename(&f, &t)).await?
        } else if self.op.info().capability().rename {
            // HDFS: a NameNode rename that replaces the target, no data
            // copied.
            match self.replace_op.rename(from, to).await {
                Ok(()) => true,
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(self.err("promote (rename)", from, e)),
            }
        } else if self.op.info().capability().copy {
            match self.op.copy(from, to).await {
                Ok(_) => true,
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => return Err(self.err("promote (copy)", from, e)),
            }
        } else {
            match self.read(from).await? {
                Some(b) => {
                    self.put(to, b).await?;
                    true
                }
                None => false,
            }
        };
        if moved {
            self.wrote(to);
        }
        if moved || self.exists(to).await? {
            return Ok(());
        }
        Err(self.err(
            "promote",
            from,
            opendal::Error::new(ErrorKind::NotFound, format!("neither {from} nor its destination {to} exists")),
        ))
    }

    /// Whether [`Store::put_if_match`] works on this backend (S3: `If-Match`).
    pub fn supports_conditional_put(&self) -> bool {
        self.op.info().capability().write_with_if_match
    }

    /// Replaces `path` only if its current version (its etag, from
    /// [`Store::stat`]) is `etag`. Backends without conditional writes (fs,
    /// memory, HDFS) refuse with [`StoreError::Unsafe`] rather than fall back
    /// to check-then-write.
    pub async fn put_if_match(&self, path: &str, bytes: impl Into<Bytes>, etag: &str) -> Result<Replaced> {
        if !self.supports_conditional_put() {
            return Err(StoreError::Unsafe {
                backend: self.uri.to_string(),
                capability: "conditional overwrite (write_with_if_match)",
                why: format!("replacing {path} only if unchanged"),
            });
        }
        match self.create_op.write_with(path, bytes.into()).if_match(etag).await {
            Ok(_) => {
                self.wrote(path);
                Ok(Replaced::Replaced)
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConditionNotMatch | ErrorKind::Conflict | ErrorKind::NotFound) => {
                Ok(Replaced::Conflict)
            }
            Err(e) => Err(self.err("put_if_match", path, e)),
        }
    }

    /// Reads `len` bytes of an object from `offset`: one ranged GET on S3.
    /// The range must lie within the object (callers know its size from a
    /// listing or [`Store::stat`]); a range past its end is an error on every
    /// backend. `None` if the object does not exist.
    pub async fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Option<Bytes>> {
        let got = if self.beneath.is_some() {
            let p = path.to_string();
            self.fs_data("read range", path, move |fs| fs.read_range(&p, offset, len)).await?.map(Bytes::from)
        } else {
            match self.op.read_with(path).range(offset..offset + len).await {
                Ok(buf) => Some(buf.to_bytes()),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(self.err("read range", path, e)),
            }
        };
        match got {
            Some(b) if (b.len() as u64) < len => Err(self.err(
                "read range",
                path,
                opendal::Error::new(
                    ErrorKind::RangeNotSatisfied,
                    format!("range {offset}..{} is past the end ({} bytes read)", offset + len, b.len()),
                ),
            )),
            other => Ok(other),
        }
    }

    /// Metadata of an object; `None` if it does not exist (on a data store
    /// over fs: if it is not a regular file).
    pub async fn stat(&self, path: &str) -> Result<Option<Meta>> {
        if self.beneath.is_some() {
            let p = path.to_string();
            let len = self.fs_data("stat", path, move |fs| fs.stat(&p)).await?;
            return Ok(len.map(|len| Meta { len, etag: None }));
        }
        match self.op.stat(path).await {
            Ok(m) => Ok(Some(Meta { len: m.content_length(), etag: m.etag().map(str::to_string) })),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("stat", path, e)),
        }
    }

    /// True if `path` exists (one stat).
    pub async fn exists(&self, path: &str) -> Result<bool> {
        Ok(self.stat(path).await?.is_some())
    }

    /// On a data store over fs: removes the temp files of writes in `dir`
    /// that crashed processes of this host left behind. Elsewhere a no-op
    /// (a PUT is atomic).
    pub async fn sweep_stale_temps(&self, dir: &str) -> Result<usize> {
        if self.beneath.is_none() {
            return Ok(0);
        }
        let d = dir.to_string();
        self.fs_data("sweep temps", dir, move |fs| fs.sweep_stale_puts(&d)).await
    }

    /// Removes the symbolic link at `path` itself (never its target) on a data
    /// store over fs; `false` if nothing like that stands there.
    pub async fn remove_link(&self, path: &str) -> Result<bool> {
        if self.beneath.is_none() {
            return Ok(false);
        }
        let p = path.to_string();
        self.fs_data("remove link", path, move |fs| fs.remove_link(&p)).await
    }

    /// Moves a torn create-once file at `path` out of the way so that it can
    /// be created again: fs only (see `beneath.rs`: serialised repairers,
    /// no-follow, the judged inode is the one removed), since
    /// only a crashed writer of an older compactd on fs leaves one. On other
    /// backends a file that does not parse was put there by someone else and
    /// is left alone ([`fs::Quarantine::NotTorn`]).
    pub async fn quarantine_torn(
        &self,
        path: &str,
        is_torn: fn(&[u8]) -> bool,
        grace: std::time::Duration,
        now: std::time::SystemTime,
    ) -> Result<fs::Quarantine> {
        let RootUri::Fs { root } = &self.uri else {
            return Ok(fs::Quarantine::NotTorn);
        };
        // The tree and data roots alike: resolved without following links.
        let fs = beneath::Beneath::new(root.clone());
        let p = path.to_string();
        tokio::task::spawn_blocking(move || fs.quarantine_torn(&p, &is_torn, grace, now))
            .await
            .expect("quarantine task does not panic")
            .map_err(|e| {
                self.err(
                    "quarantine torn file",
                    path,
                    opendal::Error::new(ErrorKind::Unexpected, "fs quarantine failed").set_source(e),
                )
            })
    }

    /// Marks the folder `dir` (ending in `/`) as one whose subfolders are
    /// unrelated, short-lived trees, creating it if missing. On fs that sets
    /// ext4's "top of a directory hierarchy" attribute (`chattr +T`; see
    /// [`fs::spread_children`] for why a node's folder wants it);
    /// on other backends, and on file systems without the attribute, it does
    /// nothing. Best effort: `true` when the attribute is set.
    pub async fn spread_children(&self, dir: &str) -> bool {
        let RootUri::Fs { root } = &self.uri else { return false };
        if self.beneath.is_some() {
            return false;
        }
        let (root, p) = (root.clone(), dir.trim_end_matches('/').to_string());
        match tokio::task::spawn_blocking(move || fs::spread_children(&root, &p)).await {
            Ok(Ok(set)) => set,
            Ok(Err(e)) => {
                tracing::debug!(dir, error = %e, "could not mark the folder for spread subfolders");
                false
            }
            Err(_) => false,
        }
    }

    /// Deletes an object; deleting a missing object succeeds. On a data
    /// store over fs, anything but a regular file standing at `path` is left
    /// alone (and logged).
    pub async fn delete(&self, path: &str) -> Result<()> {
        if self.beneath.is_some() {
            let p = path.to_string();
            if !self.fs_data("delete", path, move |fs| fs.delete(&p)).await? {
                tracing::warn!(path, "not deleted: not a regular file (links are never followed or removed)");
            }
            return Ok(());
        }
        if let Some(v) = &self.versions {
            v.remove(path);
        }
        match self.op.delete(path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err("delete", path, e)),
        }
    }

    /// Deletes objects, in batches where the backend has them (S3's
    /// `DeleteObjects`, up to 1,000 keys a request; elsewhere one by one);
    /// a missing object counts as deleted. Within one call no order is
    /// kept: a caller whose crash safety needs an order calls once per step.
    pub async fn delete_many(&self, paths: &[String]) -> Result<()> {
        let Some(first) = paths.first() else { return Ok(()) };
        if self.beneath.is_some() {
            for p in paths {
                self.delete(p).await?;
            }
            return Ok(());
        }
        if let Some(v) = &self.versions {
            for p in paths {
                v.remove(p);
            }
        }
        match self.op.delete_iter(paths.iter().map(String::as_str)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err("delete_many", first, e)),
        }
    }

    /// Deletes a folder and everything below it.
    pub async fn delete_all(&self, dir: &str) -> Result<()> {
        debug_assert!(dir.ends_with('/'));
        if self.beneath.is_some() {
            let d = dir.to_string();
            return self.fs_data("delete_all", dir, move |fs| fs.delete_all(&d)).await;
        }
        if let Some(v) = &self.versions {
            v.remove(dir);
        }
        match self.op.delete_with(dir).recursive(true).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err("delete_all", dir, e)),
        }
    }
}

#[cfg(test)]
mod tests;
