//! The node's HTTP face (`run --listen`): wake-up pokes and read-only
//! status. Nothing served here changes the tree or the node's decisions: a
//! poke only makes the node look at the tree sooner (see [`crate::wake`]).
//!
//! Routes (the router is where later read-only pages go):
//! - `POST /v1/poke?scope=work|monitor` → `202 Accepted`, body ignored;
//! - `GET /v1/status` → JSON: node, address, wake-up and backend counters.
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

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use store::layers::OpCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::wake::{Scope, Wakeup};

/// Connections open at once.
pub const MAX_CONNECTIONS: usize = 256;
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
