//! [`FaultLayer`]: seeded fault injection and latency (the [module
//! docs](super) say what a fault is and how decisions are drawn). Built with
//! the `testing` feature only.

use std::fmt;
use std::future::Future;
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

use super::OpKind;
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
    /// The kind of the injected errors.
    error_kind: Mutex<ErrorKind>,
    only: Mutex<Option<PathFilter>>,
}

/// Which paths a layer acts on (see [`FaultHandle::set_only`]).
pub type PathFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Called before each affected operation while the layer is not paused (see
/// [`FaultHandle::set_on_op`]).
pub type OpHook = Arc<dyn Fn(OpKind, &str) + Send + Sync>;

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
                error_kind: Mutex::new(ErrorKind::Unexpected),
                only: Mutex::new(None),
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

    /// Calls `hook` with the kind and path before every affected operation (not while paused). Tests
    /// use it to charge simulated time per request to an injected clock: a
    /// slow backend without real sleeps.
    pub fn set_on_op(&self, hook: Option<OpHook>) {
        *self.state.on_op.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Makes injected faults errors of `kind` (default `Unexpected`): e.g.
    /// `Conflict`, what OpenDAL makes of S3's 409 on a conditional write.
    pub fn set_error_kind(&self, kind: ErrorKind) {
        *self.state.error_kind.lock().unwrap_or_else(|e| e.into_inner()) = kind;
    }

    /// Acts only on operations whose path `only` accepts (`None`: all); the
    /// others pass untouched, like kinds the layer does not act on. Tests
    /// use it to fail one kind of file (a dispatch, a heartbeat) and no other.
    pub fn set_only(&self, only: Option<PathFilter>) {
        *self.state.only.lock().unwrap_or_else(|e| e.into_inner()) = only;
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
    fn affects(&self, kind: OpKind, path: &str) -> bool {
        let only = self.only.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.kinds & kind.bit() != 0 && only.is_none_or(|f| f(path))
    }

    fn decide(&self, kind: OpKind, path: &str) -> Decision {
        if !self.affects(kind, path) {
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
    async fn enter(&self, kind: OpKind, path: &str) -> Option<Strike> {
        let d = self.decide(kind, path);
        if self.affects(kind, path) && !self.paused.load(Ordering::Relaxed) {
            // Cloned out so that the hook runs without the lock held.
            let hook = self.on_op.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(hook) = hook {
                hook(kind, path);
            }
        }
        if let Some(delay) = d.delay.filter(|d| !d.is_zero()) {
            // Injected latency is real latency by design (a slow backend);
            // simulations that need no waiting charge time via `on_op`.
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(delay).await;
        }
        d.strike
    }
}

fn injected_error(state: &FaultState, kind: OpKind, path: &str, strike: Strike) -> Error {
    let message = match strike {
        Strike::Before => "injected fault",
        Strike::After => "injected fault (after the operation was performed)",
    };
    let error_kind = *state.error_kind.lock().unwrap_or_else(|e| e.into_inner());
    Error::new(error_kind, message).with_operation(kind.as_str()).with_context("path", path).set_temporary()
}

/// Runs `op` under the fault decision for one operation.
async fn faulty<T>(state: &FaultState, kind: OpKind, path: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
    match state.enter(kind, path).await {
        None => op.await,
        Some(Strike::Before) => Err(injected_error(state, kind, path, Strike::Before)),
        Some(Strike::After) => {
            op.await?;
            Err(injected_error(state, kind, path, Strike::After))
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
            self.phase = match self.state.enter(self.kind, &self.path).await {
                None => WriterPhase::Clean,
                Some(Strike::Before) => WriterPhase::Failed,
                Some(Strike::After) => WriterPhase::LoseReply,
            };
        }
        if self.phase == WriterPhase::Failed {
            return Err(injected_error(&self.state, self.kind, &self.path, Strike::Before));
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
            return Err(injected_error(&self.state, self.kind, &self.path, Strike::After));
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
            match self.state.enter(OpKind::List, &self.path).await {
                None => self.phase = ListerPhase::Clean,
                Some(strike) => {
                    if strike == Strike::After {
                        // The first page was fetched; its reply is lost.
                        let _ = self.inner.next().await;
                    }
                    self.phase = ListerPhase::Failed;
                    return Err(injected_error(&self.state, OpKind::List, &self.path, strike));
                }
            }
        }
        if self.phase == ListerPhase::Failed {
            return Err(injected_error(&self.state, OpKind::List, &self.path, Strike::Before));
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
        match self.state.enter(OpKind::Delete, path).await {
            None => self.inner.delete(path, args).await,
            Some(Strike::Before) => Err(injected_error(&self.state, OpKind::Delete, path, Strike::Before)),
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
            Some(path) => Err(injected_error(&self.state, OpKind::Delete, &path, Strike::After)),
            None => Ok(()),
        }
    }
}
