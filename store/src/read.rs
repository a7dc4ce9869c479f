//! Bounded reads of state files: the one way compactd reads a file of the
//! tree, which anybody with write access to the backend may have replaced
//! with anything.
//!
//! Invariants (every backend):
//! - A read of a tree store ([`Store::open`]) returns at most
//!   [`MAX_STATE_BYTES`] bytes. A larger object is refused with
//!   [`StoreError::BadFile`] naming the path and the limit, and no more
//!   than one byte past the limit is ever fetched: on S3 and HDFS the read
//!   is one ranged request of bytes `0..limit + 1` (a GET with a `Range`
//!   header; on HDFS, DataNode reads of that range after one
//!   `getBlockLocations`), on fs a `read(2)` loop that stops there (a 2 GB
//!   sparse file or `/dev/zero` costs 4 MiB, not RAM). WebHDFS and memory
//!   send one request without a range and stop reading past the limit (the
//!   rest of the response is dropped unread).
//! - Only regular files are opened. On fs no symbolic link is followed,
//!   in the folders leading to the file or at its name (`fs::nofollow`);
//!   the type is checked with `lstat` before `open`, and the file is opened
//!   `O_NOFOLLOW`, non-blocking and checked again with `fstat` (a link or
//!   FIFO swapped in between is refused and cannot hang the reader); a
//!   folder, link, FIFO, socket or device at a file's name is
//!   [`StoreError::BadFile`], and so is a file below a link. S3 has only
//!   objects; HDFS refuses to read a folder.
//! - A data store ([`Store::open_data`]) reads whole objects of any size:
//!   executors read the inputs they were asked to merge.
//!
//! Callers treat [`StoreError::is_bad_file`] like a file that does not
//! parse: that one file loses its meaning, nothing else stops.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use bytes::Bytes;
use futures::TryStreamExt;
use opendal::{BytesRange, ErrorKind};

use crate::{Result, RootUri, Store, StoreError};

/// The largest state file compactd reads: 4 MiB (layouts' `MAX_FILE_BYTES`).
pub const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;

/// Why a file at a name the protocol reads is not usable, whatever it holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadFile {
    /// Something other than a regular file stands at the name.
    #[error("not a regular file: {0}")]
    NotAFile(String),
    /// Larger than the limit; reading stopped past it.
    #[error("larger than the {limit}-byte limit for state files (refused unread)")]
    TooLarge { limit: u64 },
}

impl StoreError {
    /// The object exists but cannot be a state file ([`BadFile`]): callers
    /// treat it as malformed, never as a backend failure.
    pub fn is_bad_file(&self) -> bool {
        matches!(self, StoreError::BadFile { .. })
    }

    /// Retrying cannot help: the backend refused the request for what
    /// stands at the path or who asks (a file or a link where a folder is
    /// expected, no permission, an unusable file, a backend compactd
    /// refuses), not for a failure of its own. A caller that retries
    /// transient errors reports these instead of retrying them forever.
    pub fn is_permanent(&self) -> bool {
        match self {
            StoreError::BadFile { .. } | StoreError::Unsafe { .. } | StoreError::Uri(_) => true,
            StoreError::Backend { source, .. } => {
                !source.is_temporary()
                    && matches!(
                        source.kind(),
                        ErrorKind::NotADirectory
                            | ErrorKind::IsADirectory
                            | ErrorKind::PermissionDenied
                            | ErrorKind::ConfigInvalid
                            | ErrorKind::Unsupported
                    )
            }
        }
    }
}

/// What stands at a name, for messages: "folder", "FIFO", "socket",
/// "device", "symbolic link".
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "folder"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() || t.is_char_device() {
        "device"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special"
    }
}

/// The opendal error the fs reader returns for a name that is not a
/// regular file; [`Store::read`] turns it into [`BadFile::NotAFile`].
pub(crate) const NOT_A_FILE: &str = "compactd: not a regular file";

/// Reads the regular file at `rel` below the fs root `root` from `offset`,
/// at most `limit` bytes (all of it when `None`), without ever opening
/// anything else: no
/// link is followed, neither in the folders leading to it nor at its name
/// (`fs::nofollow`), and only a regular file is read.
pub(crate) fn read_regular(root: &Path, rel: &str, offset: u64, limit: Option<u64>) -> io::Result<Vec<u8>> {
    let not_a_file = |kind: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{NOT_A_FILE}: {kind}"));
    let (dir, name) = crate::fs::nofollow::split(rel)?;
    let not_found = || io::Error::new(io::ErrorKind::NotFound, format!("{rel}: not found"));
    let dir = match crate::fs::nofollow::open_dir(root, &dir) {
        Ok(Some(d)) => d,
        Ok(None) => return Err(not_found()),
        // A link (or a file) where a folder of the path should be: what
        // stands at this name cannot be a state file either.
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Err(not_a_file("symbolic link")),
        Err(e) => return Err(e),
    };
    let Some(st) = dir.lstat(&name)? else { return Err(not_found()) };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(not_a_file(kind_of_mode(st.st_mode)));
    }
    // O_NOFOLLOW and non-blocking: a link or FIFO swapped in since the
    // stat is refused by the open or by the fstat below.
    let f: File = match dir.open_read(&name) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_a_file("symbolic link")),
        other => other?,
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(not_a_file(kind_of(meta.file_type())));
    }
    let limit = limit.unwrap_or(u64::MAX);
    let mut f = f;
    if offset > 0 {
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(offset))?;
    }
    let mut buf = Vec::with_capacity(meta.len().saturating_sub(offset).min(limit) as usize);
    f.take(limit).read_to_end(&mut buf)?;
    Ok(buf)
}

/// [`kind_of`] for a `stat`'s mode.
fn kind_of_mode(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "folder",
        libc::S_IFIFO => "FIFO",
        libc::S_IFSOCK => "socket",
        libc::S_IFBLK | libc::S_IFCHR => "device",
        libc::S_IFLNK => "symbolic link",
        _ => "special",
    }
}

/// Whether a ranged read failed only because the object is shorter than
/// the range `0..limit + 1`, i.e. it was read to its end: S3 answers 416 for
/// an empty object, OpenDAL's position reader (HDFS) reports the range
/// unsatisfied at the end of the file, and its completeness check reports a
/// response that ended cleanly short of the range ("reader got too little
/// data"; a connection cut short is "http response got too little data",
/// a transient error, and stays an error).
fn ended_before_range(e: &opendal::Error) -> bool {
    match e.kind() {
        ErrorKind::RangeNotSatisfied => true,
        ErrorKind::Unexpected => !e.is_temporary() && e.to_string().contains("reader got too little data"),
        _ => false,
    }
}

impl Store {
    /// Reads a whole object; `None` if it does not exist. On a tree store it
    /// is bounded by [`MAX_STATE_BYTES`] and refuses anything but a regular
    /// file ([`StoreError::BadFile`]); see the module doc.
    pub async fn read(&self, path: &str) -> Result<Option<Bytes>> {
        if self.beneath.is_some() {
            let p = path.to_string();
            return Ok(self.fs_data("read", path, move |fs| fs.read(&p)).await?.map(Bytes::from));
        }
        let bad = |why: BadFile| StoreError::BadFile { backend: self.uri.to_string(), path: path.to_string(), why };
        // A data store reads whole objects of any size.
        let limit = self.read_limit.unwrap_or(u64::MAX);
        // One request, consumed until it ends or passes the limit; dropping
        // the stream closes it. A tree store on S3 or HDFS asks for the
        // range `0..limit + 1` only, so a huge object is never sent; elsewhere
        // (and for a data store) the request has no range.
        let ranged = self.read_limit.is_some() && matches!(self.uri, RootUri::S3 { .. } | RootUri::Hdfs { .. });
        let range: BytesRange = if ranged { (0..limit + 1).into() } else { (..).into() };
        let classify = |e: opendal::Error| match e.kind() {
            ErrorKind::IsADirectory => Err(bad(BadFile::NotAFile("folder".into()))),
            ErrorKind::Unsupported if e.to_string().contains(NOT_A_FILE) => {
                let what = e.to_string();
                let kind = what.split(&format!("{NOT_A_FILE}: ")).nth(1).unwrap_or("special");
                let kind = kind.split([',', ')', '\n']).next().unwrap_or("special").trim();
                Err(bad(BadFile::NotAFile(kind.to_string())))
            }
            _ => Err(self.err("read", path, e)),
        };
        let started = async {
            let reader = self.op.reader(path).await?;
            reader.into_stream(range).await
        };
        let mut out = bytes::BytesMut::new();
        let mut stream = match started.await {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) if ranged && ended_before_range(&e) => return Ok(Some(out.freeze())),
            Err(e) => return classify(e),
        };
        loop {
            match stream.try_next().await {
                Ok(Some(chunk)) => {
                    if (out.len() + chunk.len()) as u64 > limit {
                        return Err(bad(BadFile::TooLarge { limit }));
                    }
                    for b in chunk {
                        out.extend_from_slice(&b);
                    }
                }
                Ok(None) => return Ok(Some(out.freeze())),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) if ranged && ended_before_range(&e) => return Ok(Some(out.freeze())),
                Err(e) => return classify(e),
            }
        }
    }

    /// [`Store::read`] with a bad file as a value, for callers that treat
    /// it like a malformed one: `Ok(Some(Err(_)))` is a
    /// [`StoreError::BadFile`], any other error stays an error.
    pub async fn read_or_bad(&self, path: &str) -> Result<Option<Result<Bytes>>> {
        match self.read(path).await {
            Ok(found) => Ok(found.map(Ok)),
            Err(e) if e.is_bad_file() => Ok(Some(Err(e))),
            Err(e) => Err(e),
        }
    }
}
