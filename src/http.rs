//! The node's HTTP face (`run --listen`): wake-up pokes and read-only
//! status. Nothing served here changes the tree or the node's decisions: a
//! poke only makes the node look at the tree sooner (see [`crate::wake`]).
//!
//! Routes (README "The node's listener" lists them for ops):
//! - `POST /v1/poke?scope=work|monitor` → `202 Accepted`, body ignored;
//! - `GET /v1/status` → JSON: node, address, wake-up and backend counters;
//! - `GET /metrics` → Prometheus (OpenMetrics text) exposition;
//! - `GET /healthz`, `GET /readyz` → 200 or 503 with the reason;
//! - `GET /` the cluster page, `/tasks/{id}`, `/jobs/{job}/{trigger}`, and
//!   the same as JSON under `/api/cluster`, `/api/tasks/{id}`,
//!   `/api/jobs/{job}/{trigger}`: read from the tree (any node serves the
//!   whole cluster), the overview cached for [`VIEW_TTL`] so that a page
//!   left refreshing costs the backend at most one read of the view per TTL.
//!
//! Limits: request bodies are never read (a poke has none; at most
//! [`BODY_LIMIT`] bytes would be accepted by an extractor); at most
//! [`MAX_CONNECTIONS`] connections are open at once (the next is accepted
//! when one closes, so the rest wait in the kernel's accept queue, not in
//! memory); a poke is O(1) (two atomic operations). A client holding every
//! connection open only delays pokes: nodes still poll.

use std::pin::Pin;
use std::task::{Context, Poll};

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use store::layers::OpCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::metrics::Metrics;
use crate::status;
use crate::wake::{Scope, Wakeup};

/// How long the overview (`/`, `/api/cluster`) is served from cache.
pub const VIEW_TTL: Duration = Duration::from_secs(1);

/// Connections open at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Largest request body an extractor would accept.
pub const BODY_LIMIT: usize = 1024;

/// The last overview read, with when (monotonic).
pub type ViewCache = Arc<Mutex<Option<(Duration, Arc<status::ClusterView>)>>>;

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    pub node: String,
    pub addr: Option<String>,
    pub wake: Arc<Wakeup>,
    /// Backend requests of this node (its tree store).
    pub backend: Option<OpCounter>,
    /// The tree the pages read (None: pages answer 404).
    pub store: Option<store::Store>,
    pub clock: SharedClock,
    pub metrics: Option<Arc<Metrics>>,
    /// The last overview read, with when (monotonic).
    pub view_cache: ViewCache,
}

fn text(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

async fn metrics(State(s): State<HttpState>) -> Response {
    match &s.metrics {
        Some(m) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            m.encode(),
        )
            .into_response(),
        None => text(StatusCode::NOT_FOUND, "no metrics in this process\n".into()),
    }
}

fn verdict(v: Option<crate::metrics::Verdict>) -> Response {
    match v {
        Some(v) if v.ok => text(StatusCode::OK, format!("ok: {}\n", v.reason)),
        Some(v) => text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {}\n", v.reason)),
        None => text(StatusCode::SERVICE_UNAVAILABLE, "no daemon loop in this process\n".into()),
    }
}

async fn healthz(State(s): State<HttpState>) -> Response {
    verdict(s.metrics.as_ref().map(|m| m.health.live()))
}

async fn readyz(State(s): State<HttpState>) -> Response {
    verdict(s.metrics.as_ref().map(|m| m.health.ready()))
}

/// The overview, from cache when fresh. The lock is never held across the
/// read: two concurrent misses both read (bounded by the connection limit).
async fn cluster_view(s: &HttpState) -> Result<Arc<status::ClusterView>, Response> {
    let Some(store) = &s.store else {
        return Err(text(StatusCode::NOT_FOUND, "no tree in this process\n".into()));
    };
    let now = s.clock.mono();
    if let Some((at, v)) = s.view_cache.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        if now.saturating_sub(*at) < VIEW_TTL {
            return Ok(v.clone());
        }
    }
    match status::collect(store, &s.node, s.clock.wall_ms(), status::Limits::default()).await {
        Ok(v) => {
            let v = Arc::new(v);
            *s.view_cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, v.clone()));
            Ok(v)
        }
        Err(e) => Err(backend_error(&s.node, &e.to_string())),
    }
}

fn backend_error(node: &str, e: &str) -> Response {
    let body = status::render_error("the tree could not be read", e, node);
    (StatusCode::SERVICE_UNAVAILABLE, Html(body)).into_response()
}

async fn index(State(s): State<HttpState>) -> Response {
    match cluster_view(&s).await {
        Ok(v) => Html(status::render_index(&v)).into_response(),
        Err(r) => r,
    }
}

async fn api_cluster(State(s): State<HttpState>) -> Response {
    match cluster_view(&s).await {
        Ok(v) => Json(&*v).into_response(),
        Err(r) => r,
    }
}

async fn read_task(s: &HttpState, id: &str) -> Result<crate::tasks::TaskStatus, (StatusCode, String)> {
    let store = s.store.as_ref().ok_or((StatusCode::NOT_FOUND, "no tree in this process".to_string()))?;
    let id = layouts::TaskId::parse(id).map_err(|e| (StatusCode::BAD_REQUEST, format!("task id {id:?}: {e}")))?;
    crate::tasks::status(store, &id).await.map_err(|e| match e {
        crate::tasks::TaskError::NotFound(_) => (StatusCode::NOT_FOUND, e.to_string()),
        e => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    })
}

async fn task_page(State(s): State<HttpState>, Path(id): Path<String>) -> Response {
    match read_task(&s, &id).await {
        Ok(t) => Html(status::render_task(&t, &s.node, s.clock.wall_ms())).into_response(),
        Err((code, e)) => (code, Html(status::render_error("task", &e, &s.node))).into_response(),
    }
}

async fn api_task(State(s): State<HttpState>, Path(id): Path<String>) -> Response {
    match read_task(&s, &id).await {
        Ok(t) => Json(t).into_response(),
        Err((code, e)) => (code, Json(serde_json::json!({ "error": e }))).into_response(),
    }
}

async fn read_job(
    s: &HttpState,
    job: &str,
    trigger: &str,
) -> Result<crate::jobs::instance::JobView, (StatusCode, String)> {
    let store = s.store.as_ref().ok_or((StatusCode::NOT_FOUND, "no tree in this process".to_string()))?;
    let (j, t) = status::job_names(job, trigger).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    crate::jobs::instance::view(store, &j, &t, false).await.map_err(|e| match e {
        crate::jobs::JobError::NoInstance { .. } => (StatusCode::NOT_FOUND, e.to_string()),
        e => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    })
}

async fn job_page(State(s): State<HttpState>, Path((job, trigger)): Path<(String, String)>) -> Response {
    match read_job(&s, &job, &trigger).await {
        Ok(j) => Html(status::render_job(&j, &s.node, s.clock.wall_ms())).into_response(),
        Err((code, e)) => (code, Html(status::render_error("job", &e, &s.node))).into_response(),
    }
}

async fn api_job(State(s): State<HttpState>, Path((job, trigger)): Path<(String, String)>) -> Response {
    match read_job(&s, &job, &trigger).await {
        Ok(j) => Json(j).into_response(),
        Err((code, e)) => (code, Json(serde_json::json!({ "error": e }))).into_response(),
    }
}

#[derive(Deserialize)]
struct PokeQuery {
    scope: Option<String>,
}

async fn poke(State(s): State<HttpState>, Query(q): Query<PokeQuery>) -> (StatusCode, &'static str) {
    match q.scope.as_deref().map(Scope::parse).unwrap_or(Some(Scope::Work)) {
        Some(scope) => {
            s.wake.poke(scope);
            (StatusCode::ACCEPTED, "")
        }
        None => (StatusCode::BAD_REQUEST, "scope must be work or monitor\n"),
    }
}

async fn node_status(State(s): State<HttpState>) -> Json<serde_json::Value> {
    let c = &s.wake.counters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let backend = s.backend.as_ref().map(|b| {
        let o = b.snapshot();
        serde_json::json!({
            "create": o.create, "put": o.put, "read": o.read, "stat": o.stat,
            "list": o.list, "delete": o.delete, "other": o.other,
        })
    });
    Json(serde_json::json!({
        "node": s.node,
        "addr": s.addr,
        "version": env!("CARGO_PKG_VERSION"),
        "wake": {
            "pokes_received": load(&c.received),
            "woken_ticks": load(&c.woken_ticks),
            "pokes_sent": load(&c.sent),
            "pokes_dropped": load(&c.dropped),
            "pokes_failed": load(&c.failed),
            "pokes_coalesced": load(&c.coalesced),
            "wakeups_rate_limited": load(&c.rate_limited),
        },
        "backend": backend,
    }))
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/v1/poke", post(poke))
        .route("/v1/status", get(node_status))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .route("/tasks/{id}", get(task_page))
        .route("/jobs/{job}/{trigger}", get(job_page))
        .route("/api/cluster", get(api_cluster))
        .route("/api/tasks/{id}", get(api_task))
        .route("/api/jobs/{job}/{trigger}", get(api_job))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// A bound listener and the address others should dial.
pub struct Listener {
    pub listener: tokio::net::TcpListener,
    pub local: SocketAddr,
    pub advertise: String,
}

/// Binds `listen`; `advertise` defaults to the bound address, or to this
/// host's name with the bound port when bound to every interface.
pub async fn bind(listen: SocketAddr, advertise: Option<String>) -> std::io::Result<Listener> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    let advertise = advertise.unwrap_or_else(|| {
        if local.ip().is_unspecified() {
            let host = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into());
            format!("{host}:{}", local.port())
        } else {
            local.to_string()
        }
    });
    Ok(Listener { listener, local, advertise })
}

/// Serves until `shutdown` fires.
pub async fn serve(l: tokio::net::TcpListener, state: HttpState, shutdown: CancellationToken) -> std::io::Result<()> {
    let bounded = Bounded { inner: l, slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)) };
    axum::serve(bounded, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

/// A TCP listener that accepts a connection only when fewer than
/// [`MAX_CONNECTIONS`] are open.
struct Bounded {
    inner: tokio::net::TcpListener,
    slots: Arc<Semaphore>,
}

impl axum::serve::Listener for Bounded {
    type Io = Held;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Held, SocketAddr) {
        let slot = self.slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (Held { stream, _slot: slot }, addr)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// An accepted connection; its slot is freed when it is dropped.
struct Held {
    stream: tokio::net::TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl tokio::io::AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Held {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
