//! [`CountingLayer`]: counts the requests passing through it, by kind (the
//! table in the [module docs](super)).

use std::fmt;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opendal::raw::{
    oio, Layer, OpCompose, OpCopy, OpCreateDir, OpDelete, OpList, OpPresign, OpRead, OpRename, OpRestore, OpStat,
    OpWrite, RpCreateDir, RpPresign, RpRead, RpRename, RpRestore, RpStat, Service, ServiceInfo, Servicer,
};
use opendal::{Buffer, BytesRange, Capability, Metadata, OperationContext, Result};

use super::OpKind;
// ---------------------------------------------------------------------------
// Counting
// ---------------------------------------------------------------------------

/// A snapshot of [`OpCounter`]. See the module docs for what each field
/// counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub create: u64,
    pub put: u64,
    pub read: u64,
    pub stat: u64,
    pub list: u64,
    pub list_entries: u64,
    /// Estimated S3 list requests: `max(1, ceil(entries / 1000))` per list
    /// call. Not a real page count (pages are not observable by a layer).
    pub list_pages_est: u64,
    pub delete: u64,
    pub other: u64,
}

impl OpCounts {
    /// Operations issued: every kind except `list_entries` and
    /// `list_pages_est` (entries are not requests; pages are an estimate of
    /// what the `list` calls cost on S3).
    pub fn total(&self) -> u64 {
        self.create + self.put + self.read + self.stat + self.list + self.delete + self.other
    }

    /// The count of one kind (`OpKind::List` is list calls).
    pub fn get(&self, kind: OpKind) -> u64 {
        match kind {
            OpKind::Create => self.create,
            OpKind::Put => self.put,
            OpKind::Read => self.read,
            OpKind::Stat => self.stat,
            OpKind::List => self.list,
            OpKind::Delete => self.delete,
            OpKind::Other => self.other,
        }
    }
}

impl fmt::Display for OpCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "create={} put={} read={} stat={} list={} list_entries={} list_pages_est={} delete={} other={}",
            self.create,
            self.put,
            self.read,
            self.stat,
            self.list,
            self.list_entries,
            self.list_pages_est,
            self.delete,
            self.other
        )
    }
}

/// `later - earlier`: the operations between two snapshots. Saturating, so a
/// [`OpCounter::reset`] in between gives zeros rather than a panic.
impl OpCounts {
    /// Combines two counts kind by kind.
    fn zip(self, o: OpCounts, f: impl Fn(u64, u64) -> u64) -> OpCounts {
        OpCounts {
            create: f(self.create, o.create),
            put: f(self.put, o.put),
            read: f(self.read, o.read),
            stat: f(self.stat, o.stat),
            list: f(self.list, o.list),
            list_entries: f(self.list_entries, o.list_entries),
            list_pages_est: f(self.list_pages_est, o.list_pages_est),
            delete: f(self.delete, o.delete),
            other: f(self.other, o.other),
        }
    }

    /// Every kind multiplied by `factor`, rounded (e.g. an idle rate scaled
    /// to another duration).
    pub fn scaled(self, factor: f64) -> OpCounts {
        self.zip(OpCounts::default(), |v, _| (v as f64 * factor).round() as u64)
    }
}

impl Sub for OpCounts {
    type Output = OpCounts;

    /// Kind by kind, floored at zero (a reset in between gives zeros).
    fn sub(self, rhs: OpCounts) -> OpCounts {
        self.zip(rhs, u64::saturating_sub)
    }
}

impl std::ops::Add for OpCounts {
    type Output = OpCounts;

    fn add(self, rhs: OpCounts) -> OpCounts {
        self.zip(rhs, |a, b| a + b)
    }
}

impl std::iter::Sum for OpCounts {
    fn sum<I: Iterator<Item = OpCounts>>(iter: I) -> OpCounts {
        iter.fold(OpCounts::default(), |a, b| a + b)
    }
}

#[derive(Debug, Default)]
struct Counters {
    create: AtomicU64,
    put: AtomicU64,
    read: AtomicU64,
    stat: AtomicU64,
    list: AtomicU64,
    list_entries: AtomicU64,
    list_pages_est: AtomicU64,
    delete: AtomicU64,
    other: AtomicU64,
}

/// Shared operation counters; clones count into the same totals, so one
/// counter can be handed to every operator of a store (or of a cluster).
#[derive(Debug, Clone, Default)]
pub struct OpCounter(Arc<Counters>);

impl OpCounter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn snapshot(&self) -> OpCounts {
        let c = &*self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        OpCounts {
            create: get(&c.create),
            put: get(&c.put),
            read: get(&c.read),
            stat: get(&c.stat),
            list: get(&c.list),
            list_entries: get(&c.list_entries),
            list_pages_est: get(&c.list_pages_est),
            delete: get(&c.delete),
            other: get(&c.other),
        }
    }

    /// Sets every count to zero. Not atomic with respect to operations in
    /// flight; reset between phases of a test.
    pub fn reset(&self) {
        let c = &*self.0;
        for a in [&c.create, &c.put, &c.read, &c.stat, &c.list, &c.list_entries, &c.list_pages_est, &c.delete, &c.other]
        {
            a.store(0, Ordering::Relaxed);
        }
    }

    fn add(&self, kind: OpKind) {
        let c = &*self.0;
        let a = match kind {
            OpKind::Create => &c.create,
            OpKind::Put => &c.put,
            OpKind::Read => &c.read,
            OpKind::Stat => &c.stat,
            OpKind::List => &c.list,
            OpKind::Delete => &c.delete,
            OpKind::Other => &c.other,
        };
        a.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts the operations passing through it into an [`OpCounter`].
#[derive(Debug, Clone)]
pub struct CountingLayer {
    counter: OpCounter,
}

impl CountingLayer {
    pub fn new(counter: OpCounter) -> Self {
        Self { counter }
    }

    pub fn counter(&self) -> &OpCounter {
        &self.counter
    }
}

impl Layer for CountingLayer {
    fn apply_service(&self, inner: Servicer) -> Servicer {
        Arc::new(CountingService { inner, counter: self.counter.clone() })
    }
}

#[derive(Debug)]
struct CountingService {
    inner: Servicer,
    counter: OpCounter,
}

impl Service for CountingService {
    type Reader = CountingReader;
    type Writer = CountingWriter;
    type Lister = CountingLister;
    type Deleter = CountingDeleter;
    type Copier = oio::Copier;
    type Composer = oio::Composer;

    fn info(&self) -> ServiceInfo {
        self.inner.info()
    }

    fn capability(&self) -> Capability {
        self.inner.capability()
    }

    async fn create_dir(&self, ctx: &OperationContext, path: &str, args: OpCreateDir) -> Result<RpCreateDir> {
        self.counter.add(OpKind::Other);
        self.inner.create_dir(ctx, path, args).await
    }

    async fn stat(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        self.counter.add(OpKind::Stat);
        self.inner.stat(ctx, path, args).await
    }

    fn read(&self, ctx: &OperationContext, path: &str, args: OpRead) -> Result<Self::Reader> {
        // Creating a reader does no I/O; each open/read on it is one GET.
        let inner = self.inner.read(ctx, path, args)?;
        Ok(CountingReader { inner, counter: self.counter.clone() })
    }

    fn write(&self, ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        let kind = OpKind::of_write(&args);
        let inner = self.inner.write(ctx, path, args)?;
        Ok(CountingWriter { inner, counter: self.counter.clone(), kind, counted: false })
    }

    fn delete(&self, ctx: &OperationContext) -> Result<Self::Deleter> {
        let inner = self.inner.delete(ctx)?;
        Ok(CountingDeleter { inner, counter: self.counter.clone() })
    }

    fn list(&self, ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        // Count the call even if the backend refuses it up front: memory
        // scans here, S3 and fs on the first `next`.
        self.counter.add(OpKind::List);
        self.counter.0.list_pages_est.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.list(ctx, path, args)?;
        Ok(CountingLister { inner, counter: self.counter.clone(), entries: 0 })
    }

    fn copy(&self, ctx: &OperationContext, from: &str, to: &str, args: OpCopy) -> Result<Self::Copier> {
        self.counter.add(OpKind::Other);
        self.inner.copy(ctx, from, to, args)
    }

    fn compose(&self, ctx: &OperationContext, to: &str, args: OpCompose) -> Result<Self::Composer> {
        self.counter.add(OpKind::Other);
        self.inner.compose(ctx, to, args)
    }

    async fn rename(&self, ctx: &OperationContext, from: &str, to: &str, args: OpRename) -> Result<RpRename> {
        self.counter.add(OpKind::Other);
        self.inner.rename(ctx, from, to, args).await
    }

    async fn restore(&self, ctx: &OperationContext, path: &str, args: OpRestore) -> Result<RpRestore> {
        self.counter.add(OpKind::Other);
        self.inner.restore(ctx, path, args).await
    }

    async fn presign(&self, ctx: &OperationContext, path: &str, args: OpPresign) -> Result<RpPresign> {
        // Signing is local; the request it signs is made by someone else.
        self.inner.presign(ctx, path, args).await
    }
}

struct CountingReader {
    inner: oio::Reader,
    counter: OpCounter,
}

impl oio::Read for CountingReader {
    async fn open(&self, range: BytesRange) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        self.counter.add(OpKind::Read);
        self.inner.open(range).await
    }

    async fn read(&self, range: BytesRange) -> Result<(RpRead, Buffer)> {
        self.counter.add(OpKind::Read);
        self.inner.read(range).await
    }
}

struct CountingWriter {
    inner: oio::Writer,
    counter: OpCounter,
    kind: OpKind,
    counted: bool,
}

impl CountingWriter {
    fn touch(&mut self) {
        if !self.counted {
            self.counted = true;
            self.counter.add(self.kind);
        }
    }
}

impl oio::Write for CountingWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.touch();
        self.inner.write(bs).await
    }

    async fn copy_from(&mut self, path: &str, args: OpRead, range: BytesRange) -> Result<()> {
        self.touch();
        self.inner.copy_from(path, args, range).await
    }

    async fn close(&mut self) -> Result<Metadata> {
        self.touch();
        self.inner.close().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

struct CountingLister {
    inner: oio::Lister,
    counter: OpCounter,
    entries: u64,
}

impl oio::List for CountingLister {
    async fn next(&mut self) -> Result<Option<oio::Entry>> {
        let entry = self.inner.next().await?;
        if entry.is_some() {
            self.entries += 1;
            let c = &self.counter.0;
            c.list_entries.fetch_add(1, Ordering::Relaxed);
            // Entry 1001, 2001, … would start a new 1,000-key S3 page (the
            // first page was counted when the lister was created).
            if self.entries > 1 && (self.entries - 1).is_multiple_of(1000) {
                c.list_pages_est.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(entry)
    }
}

struct CountingDeleter {
    inner: oio::Deleter,
    counter: OpCounter,
}

impl oio::Delete for CountingDeleter {
    async fn delete(&mut self, path: &str, args: OpDelete) -> Result<()> {
        // Per path queued: one-shot deleters (fs, memory) delete here,
        // batching ones (S3) on a full batch or on close.
        self.counter.add(OpKind::Delete);
        self.inner.delete(path, args).await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }
}
