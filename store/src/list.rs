//! Listings: a folder's children, streamed recursive listings (S3 and
//! HDFS carry each object's size and version in them), and listings that
//! resume after a key. Temp names of the fs backend's writes are never
//! listed.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use opendal::ErrorKind;

use crate::{Entry, Result, RootUri, Store, StoreError, FS_TMP_DIR};

impl Store {
    /// Lists the direct children of folder `dir` (which ends in `/`), sorted
    /// by path. A missing folder lists as empty.
    pub async fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        if self.beneath.is_some() {
            let d = dir.to_string();
            let all = self.fs_data("list", dir, move |fs| fs.list(&d)).await?;
            return Ok(all.into_iter().map(|(e, _)| e).filter(|e| !e.path.starts_with(FS_TMP_DIR)).collect());
        }
        let mut out: Vec<Entry> = self.list_stream(dir, false).try_collect().await?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Streams the entries below `dir` page by page, without holding the
    /// whole listing in memory. With `recursive`, only objects are yielded.
    pub fn list_stream<'a>(&'a self, dir: &'a str, recursive: bool) -> BoxStream<'a, Result<Entry>> {
        self.list_stream_with(dir, recursive, false, None)
    }

    /// A recursive listing that also yields the folders the backend has
    /// (fs keeps empty ones; object stores have none), for sweeps that must
    /// find folders left empty by a crash.
    pub fn list_tree<'a>(&'a self, dir: &'a str) -> BoxStream<'a, Result<Entry>> {
        self.list_stream_with(dir, true, true, None)
    }

    /// True where a listing can resume after a key at no extra cost: S3's
    /// `start-after` (the planner's cursor across rounds), and the memory
    /// backend, whose listings come in key order.
    pub fn lists_from_key(&self) -> bool {
        self.beneath.is_none()
            && (self.op.info().capability().list_with_start_after || matches!(self.uri, RootUri::Memory))
    }

    /// A recursive listing of `dir`'s objects in key order from just after
    /// `after` (a path this store listed), where [`Store::lists_from_key`];
    /// elsewhere the whole listing.
    pub fn list_stream_after<'a>(&'a self, dir: &'a str, after: Option<&'a str>) -> BoxStream<'a, Result<Entry>> {
        let Some(after) = after.filter(|_| self.lists_from_key()) else {
            return self.list_stream(dir, true);
        };
        if self.op.info().capability().list_with_start_after {
            return self.list_stream_with(dir, true, false, Some(after));
        }
        self.list_stream(dir, true).try_filter(move |e| futures::future::ready(e.path.as_str() > after)).boxed()
    }

    fn list_stream_with<'a>(
        &'a self,
        dir: &'a str,
        recursive: bool,
        dirs: bool,
        after: Option<&'a str>,
    ) -> BoxStream<'a, Result<Entry>> {
        if self.beneath.is_some() {
            // No-follow, folder by folder (a data store's folders are small).
            let d = dir.to_string();
            return futures::stream::once(async move {
                let all = self.fs_data("list", dir, move |fs| fs.walk(&d, recursive)).await?;
                Ok::<_, StoreError>(futures::stream::iter(all.into_iter().map(Ok)))
            })
            .try_flatten()
            .boxed();
        }
        let dir_owned = dir.to_string();
        // S3's and HDFS's listings carry every object's size.
        let sized = matches!(self.uri, RootUri::S3 { .. } | RootUri::Hdfs { .. });
        futures::stream::once(async move {
            let mut lister = self.op.lister_with(dir).recursive(recursive);
            if let Some(after) = after {
                lister = lister.start_after(after);
            }
            match lister.await {
                Ok(l) => Ok(l.map_err(move |e| self.err("list", dir, e)).boxed()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(futures::stream::empty().boxed()),
                Err(e) => Err(self.err("list", dir, e)),
            }
        })
        .try_flatten()
        .try_filter_map(move |e| {
            let path = e.path().to_string();
            let keep =
                path != dir_owned && !path.starts_with(FS_TMP_DIR) && !(recursive && !dirs && path.ends_with('/'));
            let is_dir = path.ends_with('/');
            let meta = e.metadata();
            let len = (sized && !is_dir).then(|| meta.content_length());
            let version = if is_dir {
                None
            } else if let Some(v) = &self.versions {
                v.get(&path)
            } else if let Some(etag) = meta.etag() {
                Some(etag.to_string())
            } else {
                meta.last_modified().map(|t| format!("{t}/{}", meta.content_length()))
            };
            let modified_ms =
                (!is_dir).then(|| meta.last_modified().map(|t| t.into_inner().as_millisecond())).flatten();
            futures::future::ready(Ok(keep.then_some(Entry { is_dir, path, special: None, len, version, modified_ms })))
        })
        .boxed()
    }
}
