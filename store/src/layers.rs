//! OpenDAL layers for tests and benchmarks: operation counting
//! ([`CountingLayer`]) and seeded fault injection ([`FaultLayer`]).
//!
//! Both are ordinary OpenDAL layers, applied with
//! [`Operator::layer`](opendal::Operator::layer) or through
//! [`Store::open_with`](crate::Store::open_with), so they see the requests
//! the store's operators hand to the backend, not the calls made on
//! [`Store`](crate::Store).
//!
//! # What a count means
//!
//! One count is one request issued to the service below the layer:
//!
//! | kind           | counted when                                                   |
//! |----------------|----------------------------------------------------------------|
//! | `create`       | a writer opened with `if_not_exists` does its first I/O        |
//! | `put`          | any other writer does its first I/O (a multipart upload is 1)  |
//! | `read`         | a reader opens a range or reads one (a GET, hit or NotFound)   |
//! | `stat`         | a stat (also the ones OpenDAL issues itself, e.g. to size a read) |
//! | `list`         | a lister is created (one list call)                            |
//! | `list_entries` | a lister yields an entry                                       |
//! | `list_pages_est` | see below                                                    |
//! | `delete`       | a path is queued on a deleter (a recursive delete counts 1)    |
//! | `other`        | create_dir, copy, rename, restore, compose                     |
//!
//! Writes count on first I/O rather than on `close` because on fs a create
//! that loses the race fails on its first `write` (the file is opened with
//! `O_EXCL` lazily) and is never closed.
//!
//! List pages are not observable from a layer: OpenDAL's `oio::List` yields
//! entries one by one and fetches pages inside the service. On S3 (and
//! anything else paging at 1,000 keys, the default `max-keys`) each list call
//! costs `max(1, ceil(entries / 1000))` requests; `list_pages_est` is that
//! sum, accumulated per lister. It is meaningless on fs and memory. (Real
//! pages could be counted one level lower, by wrapping the HTTP transport in
//! `Layer::apply_context`, which would need the `http` crate as a direct
//! dependency to name `http::Request`.)
//!
//! # Where the layers sit
//!
//! `Operator::new` already stacks OpenDAL's own layers on the service
//! (error context, *simulation*, completion, correctness checks), and user
//! layers go on top of those. So work that OpenDAL simulates is invisible
//! here and counted as the one call that asked for it:
//! - a recursive delete (`Store::delete_all`) counts as one `delete`; on
//!   memory and S3 OpenDAL lists and deletes each object below it;
//! - a recursive list on fs counts as one `list`; OpenDAL walks every folder;
//! - a stat of a folder path (ending in `/`) may be a list underneath;
//! - S3 batches queued deletes into `DeleteObjects` requests of up to 1,000.
//!
//! Layer order matters when both are used: the layer applied last is the
//! outermost. `op.layer(CountingLayer::new(c)).layer(FaultLayer::new(f))`
//! counts only what got past the injected faults (what "reached the
//! backend"); the reverse order counts every attempt.
//!
//! # Faults
//!
//! [`FaultLayer`] fails operations with a temporary `ErrorKind::Unexpected`
//! error whose message contains `"injected fault"`, and can delay them. The
//! decisions come from one seeded RNG per layer (shared by its clones): a
//! fixed number of draws per affected operation (stat, read open, a writer's
//! or lister's first I/O, each path queued for deletion), so the same seed
//! and the same sequence of calls give the same faults whatever the rate or
//! pause state at each call.
//! Concurrent operations draw in whatever order they reach the layer.
//!
//! A fault normally hits before the request reaches the backend (nothing
//! happened). With [`FaultConfig::lost_reply`] a fraction of faults are raised
//! after the request was performed: the effect happened but the caller sees
//! an error, as when a response is lost — the case that makes a retried
//! atomic create see its own object.

use std::fmt;
use std::future::Future;
use std::ops::Sub;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opendal::raw::{
    oio, Layer, OpCompose, OpCopy, OpCreateDir, OpDelete, OpList, OpPresign, OpRead, OpRename, OpRestore, OpStat,
    OpWrite, RpCreateDir, RpPresign, RpRead, RpRename, RpRestore, RpStat, Service, ServiceInfo, Servicer,
};
use opendal::{Buffer, BytesRange, Capability, Error, ErrorKind, Metadata, OperationContext, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Kind of backend operation, as counted by [`CountingLayer`] and filtered
/// by [`FaultConfig::kinds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Write with `if_not_exists` (atomic create).
    Create,
    /// Any other write.
    Put,
    Read,
    Stat,
    List,
    /// One path deleted.
    Delete,
    /// create_dir, copy, rename, restore, compose.
    Other,
}

impl OpKind {
    pub const ALL: [OpKind; 7] =
        [OpKind::Create, OpKind::Put, OpKind::Read, OpKind::Stat, OpKind::List, OpKind::Delete, OpKind::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Put => "put",
            OpKind::Read => "read",
            OpKind::Stat => "stat",
            OpKind::List => "list",
            OpKind::Delete => "delete",
            OpKind::Other => "other",
        }
    }

    fn of_write(args: &OpWrite) -> OpKind {
        if args.if_not_exists() {
            OpKind::Create
        } else {
            OpKind::Put
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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

// ---------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------

/// Configuration of a [`FaultLayer`].
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// Seed of the layer's RNG.
    pub seed: u64,
    /// Probability in `0..=1` that an affected operation fails.
    pub error_rate: f64,
    /// Uniform random delay in `min..=max` added before each affected
    /// operation (also when it then fails).
    pub latency: Option<(Duration, Duration)>,
    /// Operation kinds affected; the others pass untouched and draw nothing
    /// from the RNG. Default: all.
    pub kinds: Vec<OpKind>,
    /// Probability in `0..=1` that an injected fault is raised *after* the
    /// operation was performed (its effect is kept, the reply is "lost").
    /// Default 0: faults happen before anything reaches the backend.
    pub lost_reply: f64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self { seed: 0, error_rate: 0.0, latency: None, kinds: OpKind::ALL.to_vec(), lost_reply: 0.0 }
    }
}

/// Injects seeded, reproducible failures and delays. Clones share the RNG
/// and the run-time settings (see [`FaultHandle`]).
#[derive(Debug, Clone)]
pub struct FaultLayer {
    state: Arc<FaultState>,
}

/// Changes a [`FaultLayer`]'s behaviour while it is in use.
#[derive(Debug, Clone)]
pub struct FaultHandle {
    state: Arc<FaultState>,
}

struct FaultState {
    rng: Mutex<StdRng>,
    /// f64 bits, so that the rate can change without a lock.
    error_rate: AtomicU64,
    lost_reply: AtomicU64,
    latency: Mutex<Option<(Duration, Duration)>>,
    kinds: u8,
    paused: AtomicBool,
    injected: AtomicU64,
    on_op: Mutex<Option<OpHook>>,
}

/// Called before each affected operation while the layer is not paused (see
/// [`FaultHandle::set_on_op`]).
pub type OpHook = Arc<dyn Fn(OpKind) + Send + Sync>;

impl fmt::Debug for FaultState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultState")
            .field("error_rate", &f64::from_bits(self.error_rate.load(Ordering::Relaxed)))
            .field("lost_reply", &f64::from_bits(self.lost_reply.load(Ordering::Relaxed)))
            .field("latency", &*self.latency.lock().unwrap_or_else(|e| e.into_inner()))
            .field("kinds", &format_args!("{:#09b}", self.kinds))
            .field("paused", &self.paused.load(Ordering::Relaxed))
            .field("injected", &self.injected.load(Ordering::Relaxed))
            .field("on_op", &self.on_op.lock().unwrap_or_else(|e| e.into_inner()).is_some())
            .finish_non_exhaustive()
    }
}

fn check_probability(what: &str, p: f64) -> f64 {
    assert!((0.0..=1.0).contains(&p), "FaultConfig: {what} must be within 0..=1, got {p}");
    p
}

fn check_latency(latency: Option<(Duration, Duration)>) -> Option<(Duration, Duration)> {
    if let Some((min, max)) = latency {
        assert!(min <= max, "FaultConfig: latency min {min:?} exceeds max {max:?}");
    }
    latency
}

impl FaultLayer {
    /// # Panics
    /// If a rate is outside `0..=1` or the latency range is inverted.
    pub fn new(config: FaultConfig) -> Self {
        let error_rate = check_probability("error_rate", config.error_rate);
        let lost_reply = check_probability("lost_reply", config.lost_reply);
        let kinds = config.kinds.iter().fold(0, |bits, k| bits | k.bit());
        Self {
            state: Arc::new(FaultState {
                rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
                error_rate: AtomicU64::new(error_rate.to_bits()),
                lost_reply: AtomicU64::new(lost_reply.to_bits()),
                latency: Mutex::new(check_latency(config.latency)),
                kinds,
                paused: AtomicBool::new(false),
                injected: AtomicU64::new(0),
                on_op: Mutex::new(None),
            }),
        }
    }

    pub fn handle(&self) -> FaultHandle {
        FaultHandle { state: self.state.clone() }
    }
}

impl FaultHandle {
    /// # Panics
    /// If `rate` is outside `0..=1`.
    pub fn set_error_rate(&self, rate: f64) {
        let rate = check_probability("error_rate", rate);
        self.state.error_rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    pub fn error_rate(&self) -> f64 {
        f64::from_bits(self.state.error_rate.load(Ordering::Relaxed))
    }

    /// # Panics
    /// If `fraction` is outside `0..=1`.
    pub fn set_lost_reply(&self, fraction: f64) {
        let fraction = check_probability("lost_reply", fraction);
        self.state.lost_reply.store(fraction.to_bits(), Ordering::Relaxed);
    }

    /// # Panics
    /// If the range is inverted.
    pub fn set_latency(&self, latency: Option<(Duration, Duration)>) {
        let latency = check_latency(latency);
        *self.state.latency.lock().unwrap_or_else(|e| e.into_inner()) = latency;
    }

    /// Stops injecting faults and delays. The RNG keeps advancing, so the
    /// faults after [`resume`](Self::resume) are those an unpaused run would
    /// have seen at the same calls.
    pub fn pause(&self) {
        self.state.paused.store(true, Ordering::Relaxed);
    }

    pub fn resume(&self) {
        self.state.paused.store(false, Ordering::Relaxed);
    }

    pub fn is_paused(&self) -> bool {
        self.state.paused.load(Ordering::Relaxed)
    }

    /// Calls `hook` before every affected operation (not while paused). Tests
    /// use it to charge simulated time per request to an injected clock: a
    /// slow backend without real sleeps.
    pub fn set_on_op(&self, hook: Option<OpHook>) {
        *self.state.on_op.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Faults injected so far (by every clone of the layer).
    pub fn injected(&self) -> u64 {
        self.state.injected.load(Ordering::Relaxed)
    }
}

/// When an injected fault strikes relative to the real operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strike {
    Before,
    After,
}

/// What the RNG decided for one operation.
#[derive(Debug, Clone, Copy, Default)]
struct Decision {
    delay: Option<Duration>,
    strike: Option<Strike>,
}

impl FaultState {
    fn decide(&self, kind: OpKind) -> Decision {
        if self.kinds & kind.bit() == 0 {
            return Decision::default();
        }
        // Always three draws, whatever the settings, so that toggling rates
        // or pausing does not shift the faults of later calls.
        let (fail, delay, after) = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            (rng.random::<f64>(), rng.random::<f64>(), rng.random::<f64>())
        };
        if self.paused.load(Ordering::Relaxed) {
            return Decision::default();
        }
        let error_rate = f64::from_bits(self.error_rate.load(Ordering::Relaxed));
        let lost_reply = f64::from_bits(self.lost_reply.load(Ordering::Relaxed));
        let latency = *self.latency.lock().unwrap_or_else(|e| e.into_inner());
        // `random::<f64>()` is in [0, 1): rate 0 never fails, rate 1 always.
        let strike = (fail < error_rate).then(|| {
            self.injected.fetch_add(1, Ordering::Relaxed);
            if after < lost_reply {
                Strike::After
            } else {
                Strike::Before
            }
        });
        let delay = latency.map(|(min, max)| min + (max - min).mul_f64(delay));
        Decision { delay, strike }
    }

    /// Decides, and sleeps the decided delay (the lock is not held here).
    async fn enter(&self, kind: OpKind) -> Option<Strike> {
        let d = self.decide(kind);
        if self.kinds & kind.bit() != 0 && !self.paused.load(Ordering::Relaxed) {
            // Cloned out so that the hook runs without the lock held.
            let hook = self.on_op.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(hook) = hook {
                hook(kind);
            }
        }
        if let Some(delay) = d.delay.filter(|d| !d.is_zero()) {
            tokio::time::sleep(delay).await;
        }
        d.strike
    }
}

fn injected_error(kind: OpKind, path: &str, strike: Strike) -> Error {
    let message = match strike {
        Strike::Before => "injected fault",
        Strike::After => "injected fault (after the operation was performed)",
    };
    Error::new(ErrorKind::Unexpected, message).with_operation(kind.as_str()).with_context("path", path).set_temporary()
}

/// Runs `op` under the fault decision for one operation.
async fn faulty<T>(state: &FaultState, kind: OpKind, path: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
    match state.enter(kind).await {
        None => op.await,
        Some(Strike::Before) => Err(injected_error(kind, path, Strike::Before)),
        Some(Strike::After) => {
            op.await?;
            Err(injected_error(kind, path, Strike::After))
        }
    }
}

impl Layer for FaultLayer {
    fn apply_service(&self, inner: Servicer) -> Servicer {
        Arc::new(FaultService { inner, state: self.state.clone() })
    }
}

#[derive(Debug)]
struct FaultService {
    inner: Servicer,
    state: Arc<FaultState>,
}

impl Service for FaultService {
    type Reader = FaultReader;
    type Writer = FaultWriter;
    type Lister = FaultLister;
    type Deleter = FaultDeleter;
    // Copy and compose are not used by compactd; they pass untouched.
    type Copier = oio::Copier;
    type Composer = oio::Composer;

    fn info(&self) -> ServiceInfo {
        self.inner.info()
    }

    fn capability(&self) -> Capability {
        self.inner.capability()
    }

    async fn create_dir(&self, ctx: &OperationContext, path: &str, args: OpCreateDir) -> Result<RpCreateDir> {
        faulty(&self.state, OpKind::Other, path, self.inner.create_dir(ctx, path, args)).await
    }

    async fn stat(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        faulty(&self.state, OpKind::Stat, path, self.inner.stat(ctx, path, args)).await
    }

    fn read(&self, ctx: &OperationContext, path: &str, args: OpRead) -> Result<Self::Reader> {
        let inner = self.inner.read(ctx, path, args)?;
        Ok(FaultReader { inner, state: self.state.clone(), path: path.to_string() })
    }

    fn write(&self, ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        let kind = OpKind::of_write(&args);
        let inner = self.inner.write(ctx, path, args)?;
        Ok(FaultWriter { inner, state: self.state.clone(), kind, path: path.to_string(), phase: WriterPhase::Fresh })
    }

    fn delete(&self, ctx: &OperationContext) -> Result<Self::Deleter> {
        let inner = self.inner.delete(ctx)?;
        Ok(FaultDeleter { inner, state: self.state.clone(), lost: None })
    }

    fn list(&self, ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        let inner = self.inner.list(ctx, path, args)?;
        Ok(FaultLister { inner, state: self.state.clone(), path: path.to_string(), phase: ListerPhase::Fresh })
    }

    fn copy(&self, ctx: &OperationContext, from: &str, to: &str, args: OpCopy) -> Result<Self::Copier> {
        self.inner.copy(ctx, from, to, args)
    }

    fn compose(&self, ctx: &OperationContext, to: &str, args: OpCompose) -> Result<Self::Composer> {
        self.inner.compose(ctx, to, args)
    }

    async fn rename(&self, ctx: &OperationContext, from: &str, to: &str, args: OpRename) -> Result<RpRename> {
        faulty(&self.state, OpKind::Other, from, self.inner.rename(ctx, from, to, args)).await
    }

    async fn restore(&self, ctx: &OperationContext, path: &str, args: OpRestore) -> Result<RpRestore> {
        faulty(&self.state, OpKind::Other, path, self.inner.restore(ctx, path, args)).await
    }

    async fn presign(&self, ctx: &OperationContext, path: &str, args: OpPresign) -> Result<RpPresign> {
        self.inner.presign(ctx, path, args).await
    }
}

struct FaultReader {
    inner: oio::Reader,
    state: Arc<FaultState>,
    path: String,
}

impl oio::Read for FaultReader {
    async fn open(&self, range: BytesRange) -> Result<(RpRead, Box<dyn oio::ReadStreamDyn>)> {
        faulty(&self.state, OpKind::Read, &self.path, self.inner.open(range)).await
    }

    async fn read(&self, range: BytesRange) -> Result<(RpRead, Buffer)> {
        faulty(&self.state, OpKind::Read, &self.path, self.inner.read(range)).await
    }
}

/// A writer decides once, on its first I/O (where [`CountingLayer`] counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterPhase {
    Fresh,
    Clean,
    /// Failed before reaching the backend; every later call fails too.
    Failed,
    /// Must fail once the write has been performed, i.e. after `close`.
    LoseReply,
}

struct FaultWriter {
    inner: oio::Writer,
    state: Arc<FaultState>,
    kind: OpKind,
    path: String,
    phase: WriterPhase,
}

impl FaultWriter {
    async fn enter(&mut self) -> Result<()> {
        if self.phase == WriterPhase::Fresh {
            self.phase = match self.state.enter(self.kind).await {
                None => WriterPhase::Clean,
                Some(Strike::Before) => WriterPhase::Failed,
                Some(Strike::After) => WriterPhase::LoseReply,
            };
        }
        if self.phase == WriterPhase::Failed {
            return Err(injected_error(self.kind, &self.path, Strike::Before));
        }
        Ok(())
    }
}

impl oio::Write for FaultWriter {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.enter().await?;
        self.inner.write(bs).await
    }

    async fn copy_from(&mut self, path: &str, args: OpRead, range: BytesRange) -> Result<()> {
        self.enter().await?;
        self.inner.copy_from(path, args, range).await
    }

    async fn close(&mut self) -> Result<Metadata> {
        self.enter().await?;
        let meta = self.inner.close().await?;
        if self.phase == WriterPhase::LoseReply {
            return Err(injected_error(self.kind, &self.path, Strike::After));
        }
        Ok(meta)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListerPhase {
    Fresh,
    Clean,
    Failed,
}

/// A lister decides once, on its first `next` (the first page request).
struct FaultLister {
    inner: oio::Lister,
    state: Arc<FaultState>,
    path: String,
    phase: ListerPhase,
}

impl oio::List for FaultLister {
    async fn next(&mut self) -> Result<Option<oio::Entry>> {
        if self.phase == ListerPhase::Fresh {
            match self.state.enter(OpKind::List).await {
                None => self.phase = ListerPhase::Clean,
                Some(strike) => {
                    if strike == Strike::After {
                        // The first page was fetched; its reply is lost.
                        let _ = self.inner.next().await;
                    }
                    self.phase = ListerPhase::Failed;
                    return Err(injected_error(OpKind::List, &self.path, strike));
                }
            }
        }
        if self.phase == ListerPhase::Failed {
            return Err(injected_error(OpKind::List, &self.path, Strike::Before));
        }
        self.inner.next().await
    }
}

/// Decides per path queued (where [`CountingLayer`] counts).
struct FaultDeleter {
    inner: oio::Deleter,
    state: Arc<FaultState>,
    /// A path whose deletion must be reported as failed after `close`.
    lost: Option<String>,
}

impl oio::Delete for FaultDeleter {
    async fn delete(&mut self, path: &str, args: OpDelete) -> Result<()> {
        match self.state.enter(OpKind::Delete).await {
            None => self.inner.delete(path, args).await,
            Some(Strike::Before) => Err(injected_error(OpKind::Delete, path, Strike::Before)),
            Some(Strike::After) => {
                // Batching deleters only delete on close, so the lost reply
                // is reported there.
                self.inner.delete(path, args).await?;
                self.lost.get_or_insert_with(|| path.to_string());
                Ok(())
            }
        }
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await?;
        match self.lost.take() {
            Some(path) => Err(injected_error(OpKind::Delete, &path, Strike::After)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Created, RootUri, Store};
    use opendal::Operator;

    fn memory() -> Operator {
        Operator::new(opendal::services::Memory::default()).unwrap()
    }

    fn fs(dir: &tempfile::TempDir) -> Operator {
        let root = dir.path().to_string_lossy().into_owned();
        Operator::new(opendal::services::Fs::default().root(&root)).unwrap()
    }

    /// The same scripted sequence on any backend; returns the number of
    /// entries the one list call returned.
    async fn script(op: &Operator, counter: &OpCounter) -> usize {
        let expect = |counts: OpCounts| assert_eq!(counter.snapshot(), counts, "{}", counter.snapshot());
        let mut want = OpCounts::default();

        // Two creates of one path: the second loses.
        op.write_with("lock", "a").if_not_exists(true).await.unwrap();
        let lost = op.write_with("lock", "b").if_not_exists(true).await.unwrap_err();
        assert_eq!(lost.kind(), ErrorKind::ConditionNotMatch);
        want.create = 2;
        expect(want);

        // Three puts, one overwriting.
        op.write("dir/x", "1").await.unwrap();
        op.write("dir/y", "2").await.unwrap();
        op.write("dir/x", "3").await.unwrap();
        want.put = 3;
        expect(want);

        // Four reads, one of a missing object.
        assert_eq!(op.read("lock").await.unwrap().to_vec(), b"a");
        assert_eq!(op.read("dir/x").await.unwrap().to_vec(), b"3");
        assert_eq!(op.read("dir/y").await.unwrap().to_vec(), b"2");
        let missing = op.read("dir/missing").await.unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        want.read = 4;
        expect(want);

        op.stat("lock").await.unwrap();
        assert!(!op.exists("nope").await.unwrap());
        want.stat = 2;
        expect(want);

        let entries = op.list("dir/").await.unwrap();
        want.list = 1;
        want.list_entries = entries.len() as u64;
        want.list_pages_est = 1;
        expect(want);

        // Two paths in one deleter, plus one missing path on its own.
        op.delete_iter(["dir/x", "dir/y"]).await.unwrap();
        op.delete("dir/never-was").await.unwrap();
        want.delete = 3;
        expect(want);

        assert_eq!(want.total(), 2 + 3 + 4 + 2 + 1 + 3);
        entries.len()
    }

    #[tokio::test]
    async fn counts_scripted_ops_on_memory() {
        let counter = OpCounter::new();
        let op = memory().layer(CountingLayer::new(counter.clone()));
        let listed = script(&op, &counter).await;
        // Memory lists only the two children…
        assert_eq!(listed, 2);
    }

    #[tokio::test]
    async fn counts_scripted_ops_on_fs() {
        let dir = tempfile::TempDir::new().unwrap();
        let counter = OpCounter::new();
        let op = fs(&dir).layer(CountingLayer::new(counter.clone()));
        let listed = script(&op, &counter).await;
        // … fs lists the folder itself too.
        assert_eq!(listed, 3);
    }

    #[tokio::test]
    async fn list_pages_are_estimated_per_thousand_entries() {
        let counter = OpCounter::new();
        let op = memory().layer(CountingLayer::new(counter.clone()));
        for i in 0..2500 {
            op.write(&format!("many/{i:04}"), "").await.unwrap();
        }
        counter.reset();
        let n = op.list_with("many/").recursive(true).await.unwrap().len() as u64;
        let _ = op.list("empty/").await.unwrap();
        let c = counter.snapshot();
        assert_eq!(c.list, 2);
        assert_eq!(c.list_entries, n);
        // ceil(n / 1000) for the big one, 1 for the empty one.
        assert_eq!(c.list_pages_est, n.div_ceil(1000) + 1);
    }

    #[tokio::test]
    async fn counts_store_calls() {
        let counter = OpCounter::new();
        let store =
            Store::open_with(&RootUri::Memory, |op| op.layer(CountingLayer::new(counter.clone()))).await.unwrap();
        store_script(&store, &counter, 2).await;
    }

    #[tokio::test]
    async fn counts_store_calls_on_fs() {
        let dir = tempfile::TempDir::new().unwrap();
        let uri = RootUri::Fs { root: dir.path().to_path_buf() };
        let counter = OpCounter::new();
        let store = Store::open_with(&uri, |op| op.layer(CountingLayer::new(counter.clone()))).await.unwrap();
        // Put's temp file and rename happen below the layer: one put.
        store_script(&store, &counter, 3).await;
    }

    async fn store_script(store: &Store, counter: &OpCounter, listed_entries: u64) {
        let step = |before: OpCounts| counter.snapshot() - before;
        let one = |kind: OpKind| {
            let mut c = OpCounts::default();
            match kind {
                OpKind::Create => c.create = 1,
                OpKind::Put => c.put = 1,
                OpKind::Read => c.read = 1,
                OpKind::Stat => c.stat = 1,
                OpKind::List => c.list = 1,
                OpKind::Delete => c.delete = 1,
                OpKind::Other => c.other = 1,
            }
            c
        };

        let s = counter.snapshot();
        assert_eq!(store.create("a/lock", "1").await.unwrap(), Created::Created);
        assert_eq!(step(s), one(OpKind::Create));

        let s = counter.snapshot();
        assert_eq!(store.create("a/lock", "2").await.unwrap(), Created::Exists);
        assert_eq!(step(s), one(OpKind::Create));

        let s = counter.snapshot();
        store.put("a/state", "x").await.unwrap();
        assert_eq!(step(s), one(OpKind::Put));

        let s = counter.snapshot();
        assert!(store.read("a/state").await.unwrap().is_some());
        assert_eq!(step(s), one(OpKind::Read));

        let s = counter.snapshot();
        assert!(store.read("a/none").await.unwrap().is_none());
        assert_eq!(step(s), one(OpKind::Read));

        let s = counter.snapshot();
        assert!(store.exists("a/lock").await.unwrap());
        assert_eq!(step(s), one(OpKind::Stat));

        let s = counter.snapshot();
        assert_eq!(store.list("a/").await.unwrap().len(), 2);
        let d = step(s);
        assert_eq!((d.list, d.total()), (1, 1));
        // fs also yields the folder's own entry, which the store drops.
        assert_eq!(d.list_entries, listed_entries);

        let s = counter.snapshot();
        store.delete("a/lock").await.unwrap();
        assert_eq!(step(s), one(OpKind::Delete));

        // A recursive delete is one call here, whatever OpenDAL does below
        // (memory: a list and one delete per object, invisible to layers).
        let s = counter.snapshot();
        store.delete_all("a/").await.unwrap();
        assert_eq!(step(s), one(OpKind::Delete));
        assert!(store.list("a/").await.unwrap().is_empty());
    }

    #[test]
    fn counts_display_and_sub() {
        let a = OpCounts {
            create: 3,
            put: 2,
            read: 5,
            stat: 1,
            list: 2,
            list_entries: 40,
            list_pages_est: 2,
            delete: 1,
            other: 0,
        };
        assert_eq!(
            a.to_string(),
            "create=3 put=2 read=5 stat=1 list=2 list_entries=40 list_pages_est=2 delete=1 other=0"
        );
        assert_eq!(a.total(), 14);
        let b = OpCounts { read: 2, list_entries: 10, ..a };
        assert_eq!(a - b, OpCounts { read: 3, list_entries: 30, ..Default::default() });
        assert_eq!(b - a, OpCounts { ..Default::default() });
    }

    fn is_injected(e: &Error) -> bool {
        e.kind() == ErrorKind::Unexpected && e.is_temporary() && e.to_string().contains("injected fault")
    }

    /// 200 operations of mixed kinds; true where the operation succeeded.
    async fn run_200(op: &Operator) -> Vec<bool> {
        let mut out = Vec::with_capacity(200);
        for i in 0..200 {
            let path = format!("f/{}", i % 7);
            let r = match i % 4 {
                0 => op.write(&path, "x").await.map(|_| ()),
                1 => op.stat(&path).await.map(|_| ()),
                2 => op.read(&path).await.map(|_| ()),
                _ => op.list("f/").await.map(|_| ()),
            };
            match r {
                Ok(()) => out.push(true),
                // A read or stat of an object whose write was faulted.
                Err(e) if e.kind() == ErrorKind::NotFound => out.push(true),
                Err(e) => {
                    assert!(is_injected(&e), "{e}");
                    out.push(false)
                }
            }
        }
        out
    }

    fn faulty_memory(config: FaultConfig) -> (Operator, FaultHandle) {
        let layer = FaultLayer::new(config);
        let handle = layer.handle();
        (memory().layer(layer), handle)
    }

    #[tokio::test]
    async fn same_seed_same_faults() {
        let config = |seed| FaultConfig { seed, error_rate: 0.5, ..Default::default() };
        let (a, ha) = faulty_memory(config(7));
        let (b, _) = faulty_memory(config(7));
        let (c, _) = faulty_memory(config(8));
        let ra = run_200(&a).await;
        let rb = run_200(&b).await;
        let rc = run_200(&c).await;
        assert_eq!(ra, rb);
        assert_ne!(ra, rc);
        let failed = ra.iter().filter(|ok| !**ok).count();
        assert_eq!(failed as u64, ha.injected());
        assert!((60..=140).contains(&failed), "{failed} of 200 failed");
    }

    #[tokio::test]
    async fn rate_zero_injects_nothing() {
        let (op, h) = faulty_memory(FaultConfig { seed: 1, ..Default::default() });
        assert!(run_200(&op).await.iter().all(|ok| *ok));
        assert_eq!(h.injected(), 0);
    }

    #[tokio::test]
    async fn rate_one_fails_every_kind_before_the_backend() {
        let base = memory();
        base.write("there", "1").await.unwrap();
        let layer = FaultLayer::new(FaultConfig { seed: 1, error_rate: 1.0, ..Default::default() });
        let op = base.clone().layer(layer.clone());
        let errs = [
            op.write_with("new", "1").if_not_exists(true).await.unwrap_err(),
            op.write("new", "1").await.unwrap_err(),
            op.read("there").await.unwrap_err(),
            op.stat("there").await.unwrap_err(),
            op.list("").await.unwrap_err(),
            op.delete("there").await.unwrap_err(),
        ];
        for e in &errs {
            assert!(is_injected(e), "{e}");
        }
        assert_eq!(layer.handle().injected(), errs.len() as u64);
        // Nothing reached the backend.
        assert!(!base.exists("new").await.unwrap());
        assert!(base.exists("there").await.unwrap());
    }

    #[tokio::test]
    async fn lost_reply_keeps_the_effect() {
        let base = memory();
        let (counter, faults) = (
            OpCounter::new(),
            FaultLayer::new(FaultConfig { seed: 3, error_rate: 1.0, lost_reply: 1.0, ..Default::default() }),
        );
        // Counting inside the faults: it sees what reached the backend.
        let op = base.clone().layer(CountingLayer::new(counter.clone())).layer(faults.clone());
        let e = op.write_with("lock", "1").if_not_exists(true).await.unwrap_err();
        assert!(is_injected(&e), "{e}");
        assert!(base.exists("lock").await.unwrap());
        let e = op.delete("lock").await.unwrap_err();
        assert!(is_injected(&e), "{e}");
        assert!(!base.exists("lock").await.unwrap());
        assert_eq!((counter.snapshot().create, counter.snapshot().delete), (1, 1));

        // Faults before the backend are not counted by an inner counter.
        faults.handle().set_lost_reply(0.0);
        op.write("x", "1").await.unwrap_err();
        assert_eq!(counter.snapshot().put, 0);
    }

    #[tokio::test]
    async fn outer_counter_sees_faulted_attempts() {
        let counter = OpCounter::new();
        let op = memory()
            .layer(FaultLayer::new(FaultConfig { error_rate: 1.0, ..Default::default() }))
            .layer(CountingLayer::new(counter.clone()));
        op.write("x", "1").await.unwrap_err();
        op.read("x").await.unwrap_err();
        assert_eq!((counter.snapshot().put, counter.snapshot().read), (1, 1));
    }

    #[tokio::test]
    async fn handle_toggles_faults() {
        let (op, h) = faulty_memory(FaultConfig { seed: 5, ..Default::default() });
        op.write("a", "1").await.unwrap();
        h.set_error_rate(1.0);
        assert_eq!(h.error_rate(), 1.0);
        assert!(is_injected(&op.read("a").await.unwrap_err()));
        h.pause();
        assert!(h.is_paused());
        op.read("a").await.unwrap();
        h.resume();
        assert!(is_injected(&op.stat("a").await.unwrap_err()));
        h.set_error_rate(0.0);
        op.stat("a").await.unwrap();
        assert_eq!(h.injected(), 2);
    }

    #[tokio::test]
    async fn pause_does_not_shift_later_faults() {
        let config = FaultConfig { seed: 11, error_rate: 0.5, ..Default::default() };
        let (a, _) = faulty_memory(config.clone());
        let (b, hb) = faulty_memory(config);
        let head_a = run_stats(&a, 50).await;
        hb.pause();
        let head_b = run_stats(&b, 50).await;
        hb.resume();
        assert!(head_a.contains(&false));
        assert!(head_b.iter().all(|ok| *ok));
        // The paused calls still drew from the RNG: what follows matches.
        assert_eq!(run_200(&a).await, run_200(&b).await);
    }

    /// `n` stats (of missing objects); true where no fault was injected.
    async fn run_stats(op: &Operator, n: usize) -> Vec<bool> {
        let mut out = Vec::new();
        for i in 0..n {
            let r = op.stat(&format!("p/{i}")).await;
            out.push(!matches!(r, Err(ref e) if is_injected(e)));
        }
        out
    }

    #[tokio::test]
    async fn kinds_limit_faults() {
        let (op, _) =
            faulty_memory(FaultConfig { seed: 2, error_rate: 1.0, kinds: vec![OpKind::Read], ..Default::default() });
        op.write("a", "1").await.unwrap();
        op.stat("a").await.unwrap();
        op.list("").await.unwrap();
        assert!(is_injected(&op.read("a").await.unwrap_err()));
        op.delete("a").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_added() {
        let (op, h) = faulty_memory(FaultConfig {
            seed: 9,
            latency: Some((Duration::from_millis(50), Duration::from_millis(50))),
            ..Default::default()
        });
        let t = tokio::time::Instant::now();
        op.write("a", "1").await.unwrap();
        op.read("a").await.unwrap();
        op.stat("a").await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_millis(150));

        h.set_latency(Some((Duration::from_millis(10), Duration::from_millis(20))));
        for _ in 0..20 {
            let t = tokio::time::Instant::now();
            op.stat("a").await.unwrap();
            let e = t.elapsed();
            assert!((Duration::from_millis(10)..=Duration::from_millis(20)).contains(&e), "{e:?}");
        }

        h.set_latency(None);
        let t = tokio::time::Instant::now();
        op.stat("a").await.unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn the_op_hook_sees_affected_operations_unless_paused() {
        let (op, h) = faulty_memory(FaultConfig { kinds: vec![OpKind::Put, OpKind::Read], ..Default::default() });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        h.set_on_op(Some(Arc::new(move |k| s.lock().unwrap().push(k))));
        op.write("a", "1").await.unwrap();
        op.read("a").await.unwrap();
        op.stat("a").await.unwrap();
        h.pause();
        op.read("a").await.unwrap();
        h.resume();
        h.set_on_op(None);
        op.read("a").await.unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![OpKind::Put, OpKind::Read]);
    }
}
