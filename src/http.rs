//! The node's HTTP face (`run --listen`): wake-up pokes and read-only
//! status. Nothing served here changes the tree or the node's decisions: a
//! poke only makes the node look at the tree sooner (see [`crate::wake`]).
//!
//! Routes (the router is where later read-only pages go):
//! - `POST /v1/poke?scope=work|monitor` → `202 Accepted`, body ignored;
//! - `GET /v1/status` → JSON: node, address, wake-up and backend counters.
//!
//! Limits: request bodies are never read (a poke has none; at most
//! [`BODY_LIMIT`] bytes would be accepted by an extractor), at most
//! [`MAX_CONCURRENT`] requests are served at once and the rest wait in the
//! kernel's accept queue, and a poke is O(1) (two atomic operations).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use store::layers::OpCounter;
use tokio_util::sync::CancellationToken;

use crate::wake::{Scope, Wakeup};

/// Requests served at once.
pub const MAX_CONCURRENT: usize = 256;
/// Largest request body an extractor would accept.
pub const BODY_LIMIT: usize = 1024;

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    pub node: String,
    pub addr: Option<String>,
    pub wake: Arc<Wakeup>,
    /// Backend requests of this node (its tree store).
    pub backend: Option<OpCounter>,
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

async fn status(State(s): State<HttpState>) -> Json<serde_json::Value> {
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
        },
        "backend": backend,
    }))
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/v1/poke", post(poke))
        .route("/v1/status", get(status))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(MAX_CONCURRENT))
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
    axum::serve(l, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}
