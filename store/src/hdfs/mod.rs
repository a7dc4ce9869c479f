//! The HDFS backend: an OpenDAL service over one `hdfs-native` client (pure
//! Rust: no JVM, libhdfs or Hadoop install on a node).
//!
//! OpenDAL's own `services-hdfs-native` is not used, because none of the
//! operations the protocol is built on is safe or cheap through it: its
//! writes open the target itself with overwrite (a create is neither
//! exclusive nor complete-or-absent), its rename deletes the target first
//! (two RPCs and a window where the name is missing), its listing stats the
//! folder before listing it (an extra NameNode RPC per listing), it deletes
//! a folder file by file, and it maps a name service to a made-up HA config
//! instead of reading `HADOOP_CONF_DIR` as Hadoop clients do. This module
//! owns the whole service (one client, one RPC connection per NameNode):
//!
//! | operation | NameNode RPCs | how |
//! |---|---|---|
//! | create-once ([`writer`]) | `create` + `addBlock` per block + `complete` + `rename2` | staged under a temp name beside the target, closed, then published with `rename2` **without** `OVERWRITE`, which refuses an existing target atomically |
//! | create-once of an empty file (a marker) | `create` + `complete` | `create` **without** overwrite at the name itself (exclusive), then `complete`: no block, no temp |
//! | replace | the same, `rename2` **with** `OVERWRITE` | readers see the old or the new file, never a mix |
//! | read | `getBlockLocations` | the data comes from the DataNodes |
//! | stat | `getFileInfo` | |
//! | list | `getListing` per 1,000 entries | a missing folder lists as empty; temp names are skipped |
//! | delete (a folder: recursive) | `delete` | one RPC for a whole folder |
//! | rename (promote) | `rename2` with `OVERWRITE` | |
//!
//! Invariants:
//! - A name the protocol creates holds its whole content from the moment it
//!   is visible: the NameNode shows a file under construction (length 0,
//!   growing) until `complete`, and a writer that dies leaves it to lease
//!   recovery with whatever it had written, so nothing with content is ever
//!   written at a final name; only a completed temp file is renamed there.
//!   An empty file is the exception: under construction or completed it is
//!   empty, so its name is created directly (`create` without overwrite is
//!   exclusive: `FileAlreadyExistsException`, `AlreadyBeingCreatedException`
//!   and `RecoveryInProgressException` all say the name exists).
//! - A write of up to 8 MiB (every file of the tree) is done whole in
//!   `close`, from memory, so the retry layer's retry of a failed close
//!   starts it over; a larger, streamed write that failed is poisoned and
//!   never publishes ([`writer`]): a retried close once published an empty
//!   lease after a DataNode died between the last write and `complete`.
//! - A listing that hits an error fails as a whole and stays failed: the
//!   client's iterator ends after an error, so a retried `next` would
//!   otherwise return a shorter listing that looks complete.
//! - The client's own fail-over loop is cut to 3 attempts (about a second):
//!   the store's timeouts and retries decide, and the cause of a failure
//!   (a refused connection, a standby) reaches the caller.
//! - Temp names start with [`TEMP_PREFIX`] and are never listed. A listing
//!   that comes across one older than [`STALE_TEMP`] (by its modification
//!   time: a crashed writer's) deletes it.
//! - A mutation whose reply is lost is never retried blindly. `hdfs-native`
//!   retries (or fails over) a mutation only when the NameNode provably did
//!   not handle it (a standby's answer, a connection refused before the call
//!   was sent); each new connection takes a new client id, so the NameNode's
//!   retry cache is never what keeps a retry correct. An ambiguous `rename2`
//!   is reported as an error, as S3 reports a conditional PUT whose reply was
//!   lost: the caller does not learn "created" or "exists", re-reads the name
//!   later, and the protocol copes with a create that succeeded unseen
//!   (layouts/PROTOCOL.md). The temp file is deleted if it still exists, so a
//!   `rename2` still queued at the NameNode then fails on a missing source.
//! - Versions in listings are `<modification time in ms>/<length>`: a file
//!   replaced twice within one millisecond with the same length keeps its
//!   version (the store's [`crate::Entry::version`] contract allows that:
//!   "same version" means "probably unchanged").
//! - Every NameNode RPC this module issues is counted per method
//!   ([`NameNodeRpcs`]); `addBlock` is counted as one per 128 MiB written
//!   (HDFS's default block size), so the count is exact for the tree's
//!   files, which are far smaller than a block. `hdfs-native`'s own
//!   `getServerDefaults` (once per client) and `renewLease` (every 30 s while
//!   a file is open for writing) are not counted.

mod lister;
mod reader;
mod writer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hdfs_native::{Client, HdfsError};
use opendal::raw::{
    oio, OpCopy, OpCreateDir, OpDelete, OpList, OpPresign, OpRead, OpRename, OpStat, OpWrite, RpCreateDir, RpPresign,
    RpRename, RpStat, Service, ServiceInfo,
};
use opendal::{Capability, Error, ErrorKind, Metadata, MetadataBuilder, OperationContext, Result};

pub use lister::HdfsLister;
pub use reader::HdfsReader;
#[cfg(feature = "testing")]
pub use writer::failpoint;
pub use writer::HdfsWriter;

/// Prefix of the temp names that writes stage under, beside their target.
pub const TEMP_PREFIX: &str = ".compactd-tmp.";

/// Age past which a temp file is a crashed writer's: far longer than any
/// write of the tree's files (milliseconds) and than a streamed executor
/// output (minutes), whose modification time is that of its `create`.
pub const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// HDFS's default block size, by which `addBlock` RPCs are counted until a
/// file's status shows the cluster's (`dfs.blocksize`).
const DEFAULT_BLOCK: u64 = 128 << 20;

/// Counts of the NameNode RPCs this process issued through the store, per
/// method, shared by every clone of a store.
#[derive(Debug, Default)]
pub struct NameNodeRpcs {
    counts: [AtomicU64; Method::ALL.len()],
}

/// The NameNode methods the store calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    GetFileInfo,
    GetListing,
    GetBlockLocations,
    Create,
    AddBlock,
    Complete,
    Rename2,
    Delete,
    Mkdirs,
}

impl Method {
    pub const ALL: [Method; 9] = [
        Method::GetFileInfo,
        Method::GetListing,
        Method::GetBlockLocations,
        Method::Create,
        Method::AddBlock,
        Method::Complete,
        Method::Rename2,
        Method::Delete,
        Method::Mkdirs,
    ];

    /// The method's name in Hadoop's `ClientProtocol`.
    pub fn name(self) -> &'static str {
        match self {
            Method::GetFileInfo => "getFileInfo",
            Method::GetListing => "getListing",
            Method::GetBlockLocations => "getBlockLocations",
            Method::Create => "create",
            Method::AddBlock => "addBlock",
            Method::Complete => "complete",
            Method::Rename2 => "rename2",
            Method::Delete => "delete",
            Method::Mkdirs => "mkdirs",
        }
    }
}

impl NameNodeRpcs {
    fn add(&self, m: Method, n: u64) {
        self.counts[m as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts so far, by method name.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        Method::ALL.iter().map(|m| (m.name(), self.counts[*m as usize].load(Ordering::Relaxed))).collect()
    }

    /// All RPCs so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// What the service shares with its readers, writers and listers.
#[derive(Debug)]
pub(crate) struct Core {
    client: Client,
    /// Absolute HDFS path of the store's root, without a trailing `/`
    /// (empty for `/`).
    root: String,
    rpcs: Arc<NameNodeRpcs>,
    /// The block size of the files last seen (listings, stats): writes are
    /// counted one `addBlock` per block of it.
    block: AtomicU64,
}

impl Core {
    fn saw(&self, s: &hdfs_native::client::FileStatus) {
        if let Some(b) = s.blocksize.filter(|b| !s.isdir && *b > 0) {
            self.block.store(b, Ordering::Relaxed);
        }
    }

    /// The absolute HDFS path of a store path (`a/b`, `a/`).
    fn abs(&self, path: &str) -> String {
        let p = path.trim_end_matches('/');
        if p.is_empty() || p == "/" {
            if self.root.is_empty() {
                "/".to_string()
            } else {
                self.root.clone()
            }
        } else {
            format!("{}/{}", self.root, p.trim_start_matches('/'))
        }
    }

    /// The store path of an absolute HDFS path below the root.
    fn rel<'a>(&self, abs: &'a str) -> &'a str {
        abs.strip_prefix(&self.root).unwrap_or(abs).trim_start_matches('/')
    }

    fn count(&self, m: Method) {
        self.rpcs.add(m, 1);
    }

    fn count_write(&self, len: u64) {
        self.rpcs.add(Method::Create, 1);
        self.rpcs.add(Method::AddBlock, len.div_ceil(self.block.load(Ordering::Relaxed).max(1)));
        self.rpcs.add(Method::Complete, 1);
    }
}

/// Builds the service (through [`opendal::Operator::new`], so that OpenDAL's
/// default layers check and complete its operations): `url` is
/// `hdfs://<namenode host:port or name service>` (`None`: `fs.defaultFS`),
/// `root` an absolute folder. Name services, HA NameNodes and Kerberos come
/// from `HADOOP_CONF_DIR`'s `core-site.xml` and `hdfs-site.xml` (as for
/// Hadoop's own clients); a Kerberos ticket from the usual ticket cache
/// (`kinit`, `KRB5CCNAME`).
#[derive(Debug, Default)]
pub struct HdfsBuilder {
    pub url: Option<String>,
    pub root: String,
    pub rpcs: Arc<NameNodeRpcs>,
}

impl opendal::Builder for HdfsBuilder {
    type Config = ();

    fn build(self) -> Result<impl Service> {
        // The store owns retries (timeouts, backoff, only idempotent
        // requests) and the session guard bounds a node's runs: the client's
        // own fail-over loop (15 attempts, up to 15 s of sleeps by default)
        // would outlast every request timeout and hide the cause ("connection
        // refused") behind "timeout". Three attempts still try both NameNodes
        // of an HA pair within about a second.
        let mut b = hdfs_native::ClientBuilder::new().with_config([
            ("dfs.client.failover.max.attempts", "3"),
            ("dfs.client.failover.sleep.base.millis", "100"),
            ("dfs.client.failover.sleep.max.millis", "1000"),
        ]);
        if let Some(url) = &self.url {
            b = b.with_url(url.as_str());
        }
        let shown = self.url.clone().unwrap_or_else(|| "hdfs:// (fs.defaultFS)".into());
        let client = b.build().map_err(|e| {
            let hint = if e.to_string().contains("No NameNode hosts") {
                " (a name service is resolved from HADOOP_CONF_DIR's hdfs-site.xml: dfs.nameservices, \
                 dfs.ha.namenodes.<ns>, dfs.namenode.rpc-address.<ns>.<nn>)"
            } else {
                ""
            };
            Error::new(ErrorKind::ConfigInvalid, format!("hdfs client for {shown}: {e}{hint}"))
        })?;
        let root = self.root.trim_end_matches('/').to_string();
        Ok(HdfsService {
            core: Arc::new(Core { client, root, rpcs: self.rpcs, block: DEFAULT_BLOCK.into() }),
            url: shown,
        })
    }
}

#[derive(Debug)]
pub struct HdfsService {
    core: Arc<Core>,
    url: String,
}

impl Service for HdfsService {
    type Reader = oio::PositionReader<HdfsReader>;
    type Writer = HdfsWriter;
    type Lister = HdfsLister;
    type Deleter = oio::OneShotDeleter<HdfsDeleter>;
    type Copier = ();
    type Composer = ();

    fn info(&self) -> ServiceInfo {
        ServiceInfo::new("hdfs", &self.core.root, &self.url)
    }

    fn capability(&self) -> Capability {
        Capability {
            stat: true,
            read: true,
            write: true,
            write_can_multi: true,
            write_can_empty: true,
            write_with_if_not_exists: true,
            create_dir: true,
            delete: true,
            delete_with_recursive: true,
            list: true,
            list_with_recursive: true,
            rename: true,
            shared: true,
            ..Default::default()
        }
    }

    async fn create_dir(&self, _ctx: &OperationContext, path: &str, _args: OpCreateDir) -> Result<RpCreateDir> {
        let p = self.core.abs(path);
        self.core.count(Method::Mkdirs);
        self.core.client.mkdirs(&p, 0o755, true).await.map_err(|e| to_error(e, "mkdirs"))?;
        Ok(RpCreateDir::default())
    }

    async fn stat(&self, _ctx: &OperationContext, path: &str, _args: OpStat) -> Result<RpStat> {
        let p = self.core.abs(path);
        self.core.count(Method::GetFileInfo);
        let s = self.core.client.get_file_info(&p).await.map_err(|e| to_error(e, "getFileInfo"))?;
        self.core.saw(&s);
        Ok(RpStat::new(metadata(&s)))
    }

    fn read(&self, _ctx: &OperationContext, path: &str, _args: OpRead) -> Result<Self::Reader> {
        Ok(oio::PositionReader::new(HdfsReader::new(self.core.clone(), path)))
    }

    fn write(&self, _ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        if args.append() || args.if_match().is_some() || args.if_none_match().is_some() {
            return Err(Error::new(ErrorKind::Unsupported, "hdfs: only create-once and whole replaces are written"));
        }
        Ok(HdfsWriter::new(self.core.clone(), path, args.if_not_exists()))
    }

    fn delete(&self, _ctx: &OperationContext) -> Result<Self::Deleter> {
        Ok(oio::OneShotDeleter::new(HdfsDeleter { core: self.core.clone() }))
    }

    fn list(&self, _ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        Ok(HdfsLister::new(self.core.clone(), path, args.recursive()))
    }

    fn copy(&self, _ctx: &OperationContext, _from: &str, _to: &str, _args: OpCopy) -> Result<Self::Copier> {
        Err(Error::new(ErrorKind::Unsupported, "hdfs has no server-side copy; the store renames"))
    }

    async fn rename(&self, _ctx: &OperationContext, from: &str, to: &str, _args: OpRename) -> Result<RpRename> {
        let (f, t) = (self.core.abs(from), self.core.abs(to));
        self.core.count(Method::Rename2);
        self.core.client.rename(&f, &t, true).await.map_err(|e| to_error(e, "rename2"))?;
        Ok(RpRename::default())
    }

    async fn presign(&self, _ctx: &OperationContext, _path: &str, _args: OpPresign) -> Result<RpPresign> {
        Err(Error::new(ErrorKind::Unsupported, "hdfs has no presigned requests"))
    }
}

/// Deletes one path; a folder with everything below it when asked
/// recursively (one RPC either way).
pub struct HdfsDeleter {
    core: Arc<Core>,
}

impl oio::OneShotDelete for HdfsDeleter {
    async fn delete_once(&self, path: String, args: OpDelete) -> Result<()> {
        let p = self.core.abs(&path);
        self.core.count(Method::Delete);
        match self.core.client.delete(&p, args.recursive() || path.ends_with('/')).await {
            // `false`: nothing stood there, which a delete treats as done.
            Ok(_) => Ok(()),
            Err(HdfsError::FileNotFound(_)) => Ok(()),
            Err(e) => Err(to_error(e, "delete")),
        }
    }
}

fn metadata(s: &hdfs_native::client::FileStatus) -> Metadata {
    let mut m = if s.isdir { MetadataBuilder::dir() } else { MetadataBuilder::file(s.length as u64) };
    if let Ok(t) = opendal::raw::Timestamp::from_millisecond(s.modification_time as i64) {
        m.last_modified(t);
    }
    if !s.isdir {
        m.etag(version(s));
    }
    m.build()
}

/// A file's version: modification time (ms) and length.
fn version(s: &hdfs_native::client::FileStatus) -> String {
    format!("{}/{}", s.modification_time, s.length)
}

/// Maps an `hdfs-native` error to OpenDAL's kinds, keeping the NameNode's
/// exception in the message. Connection failures are temporary (the retry
/// layer retries the idempotent requests that see them).
pub(crate) fn to_error(e: HdfsError, op: &'static str) -> Error {
    let (kind, temporary) = match &e {
        HdfsError::FileNotFound(_) | HdfsError::BlocksNotFound(_) => (ErrorKind::NotFound, false),
        HdfsError::AlreadyExists(_) => (ErrorKind::AlreadyExists, false),
        HdfsError::IsADirectoryError(_) => (ErrorKind::IsADirectory, false),
        HdfsError::IOError(_) | HdfsError::DataTransferError(_) => (ErrorKind::Unexpected, true),
        HdfsError::RPCError(class, _) | HdfsError::FatalRPCError(class, _) => {
            let short = class.rsplit('.').next().unwrap_or(class);
            match short {
                // getBlockLocations of a folder: "Path is not a file".
                "FileNotFoundException" if e.to_string().contains("is not a file") => (ErrorKind::IsADirectory, false),
                "FileNotFoundException" => (ErrorKind::NotFound, false),
                "FileAlreadyExistsException" | "AlreadyBeingCreatedException" => (ErrorKind::AlreadyExists, false),
                "AccessControlException" => (ErrorKind::PermissionDenied, false),
                "ParentNotDirectoryException" => (ErrorKind::NotADirectory, false),
                "SafeModeException" | "RetriableException" | "StandbyException" | "ObserverRetryOnActiveException" => {
                    (ErrorKind::Unexpected, true)
                }
                _ => (ErrorKind::Unexpected, false),
            }
        }
        // No ticket, an expired one, a KDC out of reach: a person must act.
        HdfsError::GSSAPIError(..) | HdfsError::SASLError(_) => (ErrorKind::PermissionDenied, false),
        _ => (ErrorKind::Unexpected, false),
    };
    let hint = match &e {
        HdfsError::GSSAPIError(..) => {
            " (Kerberos: get a ticket with kinit, or point KRB5CCNAME at a cache that holds one)"
        }
        _ => "",
    };
    let err = Error::new(kind, format!("hdfs {op}: {e}{hint}"));
    if temporary {
        err.set_temporary()
    } else {
        err
    }
}

/// Whether a listed name is one of this module's temp files.
fn is_temp(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// A temp name for a write of `path`, unique on this host (host, pid and a
/// sequence number; a pid reused after a crash overwrites the dead
/// process's temp of that number, which nobody else writes).
fn temp_name(path: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let p = path.trim_end_matches('/');
    let (parent, last) = p.rsplit_once('/').unwrap_or(("", p));
    let hint: String = last
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .take(80)
        .collect();
    let name = format!(
        "{TEMP_PREFIX}{}.{}.{}.{hint}",
        crate::fs::host_tag(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    if parent.is_empty() {
        name
    } else {
        format!("{parent}/{name}")
    }
}
