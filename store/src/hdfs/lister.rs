//! Listings: `getListing` pages (1,000 entries each, the NameNode's
//! default), one level or the whole subtree. A missing folder lists as
//! empty. Temp files of writes are skipped; a crashed writer's (older than
//! [`STALE_TEMP`](super::STALE_TEMP)) is deleted on the way.

use std::sync::Arc;

use hdfs_native::client::ListStatusIterator;
use hdfs_native::HdfsError;
use opendal::raw::oio;
use opendal::{MetadataBuilder, Result};

use super::{is_temp, to_error, version, Core, Method, STALE_TEMP};

/// Entries per `getListing` page (the NameNode's `dfs.ls.limit` default).
const PAGE: u64 = 1000;

pub struct HdfsLister {
    core: Arc<Core>,
    iter: Option<ListStatusIterator>,
    /// Whether the listed folder's first page was counted.
    pages: u64,
    /// Entries seen per folder: every 1,000 more is one more page.
    seen: std::collections::HashMap<String, u64>,
    done: bool,
    /// A recursive listing reads each folder it meets: a page more each.
    recursive: bool,
    /// An error ended the listing: every later call fails too.
    failed: Option<String>,
}

impl HdfsLister {
    pub(super) fn new(core: Arc<Core>, path: &str, recursive: bool) -> Self {
        let abs = core.abs(path);
        let iter = core.client.list_status_iter(&abs, recursive);
        HdfsLister { core, iter: Some(iter), pages: 0, seen: Default::default(), done: false, recursive, failed: None }
    }
}

impl oio::List for HdfsLister {
    async fn next(&mut self) -> Result<Option<oio::Entry>> {
        if let Some(msg) = &self.failed {
            return Err(opendal::Error::new(
                opendal::ErrorKind::Unexpected,
                format!("listing interrupted by an earlier error: {msg}"),
            ));
        }
        loop {
            if self.done {
                return Ok(None);
            }
            if self.pages == 0 {
                // The first page of the listed folder itself.
                self.pages = 1;
                self.core.count(Method::GetListing);
            }
            let Some(iter) = self.iter.as_mut() else { return Ok(None) };
            let status = match iter.next().await {
                None => {
                    self.done = true;
                    return Ok(None);
                }
                Some(Err(HdfsError::FileNotFound(_))) => {
                    self.done = true;
                    return Ok(None);
                }
                Some(Err(e)) => {
                    // `hdfs-native`'s iterator ends after an error, so a
                    // retried `next` would see the listing end early: a
                    // truncated listing that looks whole. The error is made
                    // permanent (the retry layer gives up and the whole
                    // listing fails), and the lister stays failed.
                    let err = to_error(e, "getListing");
                    let msg = err.to_string();
                    self.failed = Some(msg);
                    return Err(opendal::Error::new(err.kind(), err.to_string()));
                }
                Some(Ok(s)) => s,
            };
            let rel = self.core.rel(&status.path).to_string();
            let parent = rel.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
            let n = self.seen.entry(parent.to_string()).or_default();
            *n += 1;
            if *n % PAGE == 1 && *n > 1 {
                self.core.count(Method::GetListing);
            }
            let name = rel.rsplit('/').next().unwrap_or("");
            if status.isdir {
                if self.recursive {
                    // Read next: one more page (a one-level listing only names it).
                    self.core.count(Method::GetListing);
                }
                return Ok(Some(oio::Entry::new(&format!("{rel}/"), MetadataBuilder::dir().build())));
            }
            if is_temp(name) {
                if stale(status.modification_time) {
                    self.core.count(Method::Delete);
                    let _ = self.core.client.delete(&status.path, false).await;
                    tracing::info!(path = %rel, "removed the temp file of a crashed write");
                }
                continue;
            }
            self.core.saw(&status);
            let mut meta = MetadataBuilder::file(status.length as u64);
            if let Ok(t) = opendal::raw::Timestamp::from_millisecond(status.modification_time as i64) {
                meta.last_modified(t);
            }
            meta.etag(version(&status));
            return Ok(Some(oio::Entry::new(&rel, meta.build())));
        }
    }
}

/// Whether a temp file last modified at `mtime_ms` (the NameNode's clock) is
/// a crashed writer's.
fn stale(mtime_ms: u64) -> bool {
    // Ambient time: the age of a file nobody reads, judged against the
    // NameNode's clock; a skew of minutes against STALE_TEMP's day only
    // hastens or delays its removal.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    let now_ms = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    now_ms.saturating_sub(mtime_ms) > STALE_TEMP.as_millis() as u64
}
