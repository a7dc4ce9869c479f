//! Who runs under a node id: the start-up claim of `Registry/Owners/`.
//!
//! Two processes under one id would write one heartbeat and look like one
//! flapping node (the monitor declares its own id offline again and again).
//! So a starting process claims its id by an atomic create of the next
//! generation, `Registry/Owners/<id>.<generation>`, holding its host and
//! pid ([`OwnerClaim`]):
//!
//! - of processes starting at the same instant, exactly one create wins
//!   (the backend's atomic create, probed at start-up); the others read the
//!   winner's claim and exit naming its pid and host;
//! - before claiming over an existing generation, the starter makes sure
//!   that generation's owner is gone: on the same host, its pid no longer
//!   exists (a restart after SIGKILL starts at once); otherwise its
//!   heartbeat must not advance for a whole session timeout (the protocol's
//!   own definition of a dead node), and a heartbeat that advances means the
//!   id is in use: refused;
//! - a clean leave deletes the claim, so the next start is immediate.
//!
//! The claim guards against people, not against the protocol: a backend
//! error other than "exists" (an unreadable `Registry/`) is logged and the
//! node starts unguarded, as before this file existed, rather than not at
//! all.

use std::time::Duration;

use layouts::formats::{self, Heartbeat, OwnerClaim};
use layouts::{v2, NodeId};
use store::{Created, Store};

use super::NodeConfig;

/// Why this process may not run under its node id.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("node id {node} is in use by another process (pid {pid} on host {host}): {how}; pick another --node-id")]
    InUse { node: String, pid: String, host: String, how: String },
}

/// This process's claim, to delete on a clean leave.
#[derive(Debug, Clone)]
pub struct Claim {
    pub path: String,
    node: NodeId,
    generation: u64,
}

impl Claim {
    /// After this process rejoined (the monitor declared it offline: it
    /// stalled past its session), another process may have claimed the id
    /// meanwhile; then this one must go. One listing, only on a rejoin.
    pub async fn superseded(&self, store: &Store) -> Option<ClaimError> {
        let listed = store.list(v2::OWNERS).await.ok()?;
        let newer = listed
            .iter()
            .filter_map(|e| v2::parse_owner_claim(e.name()))
            .filter(|(n, g)| *n == self.node && *g > self.generation)
            .map(|(_, g)| g)
            .max()?;
        let other = read_claim(store, &self.node, newer).await;
        Some(in_use(&self.node, other.as_ref(), "it claimed the id while this process was stalled past its session"))
    }

    pub async fn release(&self, store: &Store) {
        if let Err(e) = store.delete(&self.path).await {
            tracing::warn!("could not delete this node's id claim {}: {e}", self.path);
        }
    }
}

fn this_host() -> String {
    hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "unknown".into())
}

/// Whether a process with this pid exists on this host.
fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // Signal 0: existence and permission check only. EPERM: it exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Claims `cfg.id` for this process; see the module doc.
pub async fn claim(store: &Store, cfg: &NodeConfig, wall_ms: u64) -> Result<Option<Claim>, ClaimError> {
    let me = OwnerClaim {
        node: cfg.id.clone(),
        host: this_host(),
        pid: std::process::id(),
        wall_ms,
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let generations = match store.list(v2::OWNERS).await {
        Ok(listed) => {
            let mut g: Vec<u64> = listed
                .iter()
                .filter(|e| !e.is_dir)
                .filter_map(|e| v2::parse_owner_claim(e.name()))
                .filter(|(node, _)| *node == cfg.id)
                .map(|(_, g)| g)
                .collect();
            g.sort_unstable();
            g
        }
        Err(e) => {
            tracing::warn!("cannot list {}: starting without the node id guard: {e}", v2::OWNERS);
            return Ok(None);
        }
    };
    let newest = generations.last().copied().unwrap_or(0);
    wait_until_gone(store, cfg, newest).await?;
    let path = v2::owner_claim(&cfg.id, newest + 1);
    match store.create(&path, formats::encode(&me)).await {
        Ok(Created::Created) => {}
        Ok(Created::Exists) => {
            let other = read_claim(store, &cfg.id, newest + 1).await;
            return Err(in_use(&cfg.id, other.as_ref(), "it started at the same moment and claimed the id first"));
        }
        Err(e) => {
            tracing::warn!("cannot create {path}: starting without the node id guard: {e}");
            return Ok(None);
        }
    }
    for g in generations {
        let _ = store.delete(&v2::owner_claim(&cfg.id, g)).await;
    }
    Ok(Some(Claim { path, node: cfg.id.clone(), generation: newest + 1 }))
}

async fn read_claim(store: &Store, node: &NodeId, generation: u64) -> Option<OwnerClaim> {
    let bytes = store.read(&v2::owner_claim(node, generation)).await.ok().flatten()?;
    formats::decode::<OwnerClaim>(&bytes).ok()
}

fn in_use(node: &NodeId, other: Option<&OwnerClaim>, how: &str) -> ClaimError {
    let (pid, host) = match other {
        Some(c) => (c.pid.to_string(), c.host.clone()),
        None => ("?".into(), "?".into()),
    };
    ClaimError::InUse { node: node.to_string(), pid, host, how: how.to_string() }
}

/// Returns once the owner of `generation` is gone; refuses if it is alive.
/// Generation 0 (no claim yet: a first start, or a process of a version
/// before claims): a heartbeat of the id, if any, is watched for one and a
/// half of its intervals, as those versions did.
async fn wait_until_gone(store: &Store, cfg: &NodeConfig, generation: u64) -> Result<(), ClaimError> {
    let owner = if generation > 0 { read_claim(store, &cfg.id, generation).await } else { None };
    if let Some(o) = &owner {
        if o.host == this_host() && o.pid != std::process::id() && !pid_exists(o.pid) {
            tracing::info!(node = %cfg.id, pid = o.pid, "the node id's previous process on this host is gone");
            return Ok(());
        }
    }
    let read_beat = || async {
        let b = store.read(&v2::heartbeat(&cfg.id)).await.ok().flatten()?;
        formats::decode::<Heartbeat>(&b).ok()
    };
    let first = read_beat().await;
    let session = match (&first, generation) {
        (None, 0) => return Ok(()),
        (Some(h), 0) => Duration::from_millis(h.heartbeat_ms.clamp(10, 60_000)).mul_f64(1.5),
        (Some(h), _) => Duration::from_millis(h.session_timeout_ms).clamp(cfg.heartbeat, Duration::from_secs(120)),
        (None, _) => cfg.session_timeout,
    };
    let (pid, host) = owner.as_ref().map(|o| (o.pid.to_string(), o.host.clone())).unwrap_or(("?".into(), "?".into()));
    tracing::info!(
        node = %cfg.id, pid, host, waiting = ?session,
        "this node id was last run by another process: waiting a session timeout for its heartbeat, \
         to start only if it stays still (the process is gone)"
    );
    let step = (cfg.heartbeat / 2).clamp(Duration::from_millis(10), Duration::from_millis(500));
    let mut waited = Duration::ZERO;
    while waited < session {
        // Start-up of a real process: another process's heartbeat moves on
        // real time.
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(step).await;
        waited += step;
        let now = read_beat().await;
        let moved = match (&first, &now) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(a), Some(b)) => (a.incarnation, a.beat) != (b.incarnation, b.beat),
        };
        if moved {
            let other = owner.clone().or_else(|| {
                now.as_ref().map(|h| OwnerClaim {
                    node: cfg.id.clone(),
                    host: "?".into(),
                    pid: h.pid,
                    wall_ms: h.wall_ms,
                    version: h.version.clone(),
                })
            });
            return Err(in_use(&cfg.id, other.as_ref(), "its heartbeat is still advancing"));
        }
    }
    Ok(())
}
