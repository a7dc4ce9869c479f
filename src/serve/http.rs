//! The node's HTTP face (`run --listen`): wake-up pokes and read-only
//! status. Nothing served here changes the tree or the node's decisions: a
//! poke only makes the node look at the tree sooner (see [`crate::cluster::wake`]).
//! With `run --ops-listen` it is two listeners ([`Face`]): the wake-up port
//! serves only pokes and task-end waits, the ops port everything else.
//!
//! Routes ([`ROUTES`]; docs/cli.md, "The listener", lists them for ops):
//! - `POST /v1/poke?scope=work|monitor|plan|policy[&node=ID]` → `202 Accepted`, body
//!   ignored; `421` when `node` names another node than this one;
//! - `GET /v1/tasks/{id}/ended?wait_ms=N` → JSON `{"task", "ended"}`: whether
//!   this node saw the task end as its manager, answered at the end or
//!   after `N` ms (at most 10 s), for `submit --wait` ([`crate::cluster::wake::ended`]);
//! - `GET /v1/status` → JSON: node, address, wake-up and backend counters;
//! - `GET /metrics` → Prometheus (OpenMetrics text) exposition;
//! - `GET /healthz`, `GET /readyz` → 200 or 503 with the reason;
//! - `GET /` the cluster page, `/tasks/{id}`, `/jobs/{job}/{trigger}`, and
//!   the same as JSON under `/api/cluster`, `/api/tasks/{id}`,
//!   `/api/jobs/{job}/{trigger}`: read from the tree (any node serves the
//!   whole cluster), the overview cached for [`VIEW_TTL`] so that a page
//!   left refreshing costs the backend at most one read of the view per TTL.
//!
//! Limits, so that no client can stall the node or its pokes (the hostile
//! HTTP test holds 300 idle and 100 slow connections while tasks run):
//! - a request's head must arrive within [`HEADER_TIMEOUT`] of the moment
//!   the connection waits for it (new or kept alive), so idle and
//!   byte-a-second clients are closed, not waited on; a head over
//!   [`MAX_HEAD`] bytes gets 431;
//! - bodies: none of the routes reads one; a declared body over
//!   [`BODY_LIMIT`] bytes, or a chunked one, gets 413 before any handler,
//!   on every route; a `Content-Type` the route does not take gets 415
//!   (the poke: none, or an empty form, [`POKE_TAKES`]); a method the
//!   route does not answer gets 405;
//! - at most [`MAX_CONNECTIONS`] connections at once, each its own task
//!   (the accept loop never waits on a client), none kept past
//!   [`CONNECTION_LIFE`]; past the cap the next connection waits in the
//!   kernel's accept queue, not in memory; the soft limit of open files is
//!   raised to fit;
//! - a poke is O(1) (two atomic operations). A client holding every
//!   connection slot open only delays pokes: nodes still poll.

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
use crate::cluster::wake::{Scope, Wakeup};
use crate::serve::metrics::Metrics;
use crate::serve::status;

/// How long the overview (`/`, `/api/cluster`) is served from cache.
pub const VIEW_TTL: Duration = Duration::from_secs(1);

/// Connections open at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections the kernel holds for the node before it accepts them (its
/// `somaxconn` caps this).
pub const ACCEPT_BACKLOG: u32 = MAX_CONNECTIONS as u32;
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

fn verdict(v: Option<crate::serve::metrics::Verdict>) -> Response {
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
    /// The node the poker means (absent from older pokers).
    node: Option<String>,
}

async fn poke(State(s): State<HttpState>, Query(q): Query<PokeQuery>) -> (StatusCode, &'static str) {
    // A poke meant for another node (an address another node advertised
    // reaches this one: a port reused after a restart, or 127.0.0.1 seen
    // from another host) is refused, so that its sender writes the
    // intended node's inbox instead of believing it delivered.
    if q.node.as_deref().is_some_and(|n| n != s.node) {
        return (StatusCode::MISDIRECTED_REQUEST, "not the node this poke is for\n");
    }
    match q.scope.as_deref().map(Scope::parse).unwrap_or(Some(Scope::Work)) {
        Some(scope) => {
            s.wake.poke_from_peer(scope);
            (StatusCode::ACCEPTED, "")
        }
        None => (StatusCode::BAD_REQUEST, "scope must be work, monitor, plan or policy\n"),
    }
}

#[derive(Deserialize)]
struct EndedQuery {
    /// How long to wait for the end, in ms (0: answer at once).
    wait_ms: Option<u64>,
}

/// Whether this node saw the task end as its manager, waiting up to
/// `wait_ms` for it ([`crate::cluster::wake::ended`]): a hint for a waiting client.
async fn task_ended(State(s): State<HttpState>, Path(id): Path<String>, Query(q): Query<EndedQuery>) -> Response {
    let Ok(id) = layouts::TaskId::parse(&id) else {
        return text(StatusCode::BAD_REQUEST, "not a task id\n".into());
    };
    let ended = s.wake.ends.wait(&id, Duration::from_millis(q.wait_ms.unwrap_or(0))).await;
    Json(serde_json::json!({ "task": id.to_string(), "ended": ended })).into_response()
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
            "task_end_waits": load(&s.wake.ends.asked),
            "task_end_waits_told_ended": load(&s.wake.ends.told_ended),
        },
        "backend": backend,
    }))
}

/// Which of the node's faces a listener serves: with `run --ops-listen`
/// the wake-up port serves only pokes and task-end waits, the ops port everything else;
/// without it one listener serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    /// Pokes and task-end waits only (`--listen` when `--ops-listen` is set).
    Wake,
    /// The status page, `/api/*`, `/v1/status`, `/metrics`, `/healthz`,
    /// `/readyz` (`--ops-listen`).
    Ops,
    /// Everything (`--listen` alone).
    Both,
}

impl Face {
    fn serves(self, route: Face) -> bool {
        self == Face::Both || self == route
    }
}

/// One route: its path pattern, the one method it answers, which face
/// serves it, and the media types of the bodies it takes (`None`: a GET,
/// which reads no body, so its Content-Type is not looked at).
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub path: &'static str,
    pub method: &'static str,
    pub face: Face,
    pub takes: Option<&'static [&'static str]>,
}

/// What a poke may declare: nothing (compactd's own pokes send no body and
/// no Content-Type), or an empty form, which is what `curl -d ''` and an
/// HTML form send. Anything else (JSON, multipart …) gets 415: the poke
/// reads no body, and a client sending one expects something else.
pub const POKE_TAKES: &[&str] = &["application/x-www-form-urlencoded"];

/// Every route the listener has; the router is built from this table, so
/// a test that walks it walks every route.
pub const ROUTES: &[Route] = &[
    Route { path: "/v1/poke", method: "POST", face: Face::Wake, takes: Some(POKE_TAKES) },
    Route { path: "/v1/tasks/{id}/ended", method: "GET", face: Face::Wake, takes: None },
    Route { path: "/v1/status", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/metrics", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/healthz", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/readyz", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/tasks/{id}", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/jobs/{job}/{trigger}", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/api/cluster", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/api/tasks/{id}", method: "GET", face: Face::Ops, takes: None },
    Route { path: "/api/jobs/{job}/{trigger}", method: "GET", face: Face::Ops, takes: None },
];

fn handler(path: &str) -> axum::routing::MethodRouter<HttpState> {
    match path {
        "/v1/poke" => post(poke),
        "/v1/tasks/{id}/ended" => get(task_ended),
        "/v1/status" => get(node_status),
        "/metrics" => get(metrics),
        "/healthz" => get(healthz),
        "/readyz" => get(readyz),
        "/" => get(index),
        "/tasks/{id}" => get(task_page),
        "/jobs/{job}/{trigger}" => get(job_page),
        "/api/cluster" => get(api_cluster),
        "/api/tasks/{id}" => get(api_task),
        "/api/jobs/{job}/{trigger}" => get(api_job),
        other => unreachable!("{other} is in ROUTES without a handler"),
    }
}

/// The routes `face` serves, each behind the limits of the module doc
/// (others: 404).
pub fn router(state: HttpState, face: Face) -> Router {
    let mut app = Router::new();
    for r in ROUTES.iter().filter(|r| face.serves(r.face)) {
        let mut h = handler(r.path);
        if let Some(takes) = r.takes {
            // A route layer: a wrong method is 405 whatever it declares.
            h = h.route_layer(axum::middleware::from_fn_with_state(takes, check_content_type));
        }
        app = app.route(r.path, h);
    }
    app.layer(DefaultBodyLimit::max(BODY_LIMIT)).layer(axum::middleware::from_fn(limit_body)).with_state(state)
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
    let socket = if listen.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As std's bind does, so that a restarted node binds while its old
    // connections linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(listen)?;
    // A burst of pokes (every node of a large cluster at once) waits in
    // the accept queue instead of being dropped to a 1 s SYN retry: the
    // default backlog here was 128, the kernel caps it at somaxconn.
    let listener = socket.listen(ACCEPT_BACKLOG)?;
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

/// Serves until `shutdown` fires. Each connection is its own task, served
/// by hyper with the limits of the module doc; the accept loop never waits
/// on a connection.
pub async fn serve(l: tokio::net::TcpListener, app: Router, shutdown: CancellationToken) -> std::io::Result<()> {
    // Room for two listeners' connections (`--ops-listen`) and the backend's.
    raise_fd_limit(2 * MAX_CONNECTIONS as u64 + 256);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            r = l.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: the slot goes back; the error is
                    // the kernel's, the next accept may succeed.
                    tracing::warn!("accepting a connection failed: {e}");
                    drop(slot);
                    tokio::task::yield_now().await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        conns.spawn(serve_connection(stream, app.clone(), slot, shutdown.clone()));
    }
    // In-flight requests get a moment to finish; nothing waits on a client.
    let _ = tokio::time::timeout(Duration::from_secs(1), async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    Ok(())
}

/// Largest request head (request line and headers): 431 past it.
pub const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send a request's head, from the moment the
/// connection waits for one (a new connection, or an idle kept-alive one).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is kept, whatever it does: a client that never
/// reads its responses cannot hold a slot for longer.
pub const CONNECTION_LIFE: Duration = Duration::from_secs(60);

async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    _slot: OwnedSemaphorePermit,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEAD.max(8192));
    let conn = b.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let life = tokio::time::timeout(CONNECTION_LIFE, async {
        tokio::select! {
            _ = conn.as_mut() => {}
            _ = shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.as_mut().await;
            }
        }
    });
    let _ = life.await;
}

/// Raises this process's soft limit of open files towards `want` (within
/// the hard limit): the listener's connections must never starve the
/// backend's of descriptors. Public for tests that open as many
/// connections as the listener holds.
pub fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Refuses a request body this API never takes: over [`BODY_LIMIT`] by
/// its `Content-Length` (413), or of unknown length (chunked: 413 too),
/// before any handler runs, so no route reads more than the limit.
async fn limit_body(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    if chunked || declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return text(StatusCode::PAYLOAD_TOO_LARGE, format!("request bodies are at most {BODY_LIMIT} bytes\n"));
    }
    next.run(req).await
}

/// Refuses (415) a request whose `Content-Type` is present and not one the
/// route takes (the media type, case-insensitive, parameters ignored).
async fn check_content_type(
    State(takes): State<&'static [&'static str]>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(v) = req.headers().get(header::CONTENT_TYPE) {
        let media = v.to_str().ok().and_then(|v| v.split(';').next()).map(|m| m.trim().to_ascii_lowercase());
        if !media.is_some_and(|m| takes.contains(&m.as_str())) {
            let shown = String::from_utf8_lossy(v.as_bytes()).into_owned();
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("{} {shown:?}: send no Content-Type or one of {}\n", header::CONTENT_TYPE, takes.join(", ")),
            );
        }
    }
    next.run(req).await
}
