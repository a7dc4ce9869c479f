//! The node's face to operators and to other nodes: everything it serves or
//! signals outside the tree.
//!
//! - [`http`]: the listener (`run --listen`): pokes (handed to
//!   [`crate::cluster::wake`], which owns wake-ups between nodes and
//!   waiting clients), `/metrics`, `/healthz`,
//!   `/readyz`, the status page (the latter four on their own address with
//!   `run --ops-listen`); no request changes the tree, and no client can
//!   stall it (its limits are in its module doc).
//! - [`metrics`]: the Prometheus registry and [`metrics::Health`], which
//!   `/healthz`, `/readyz` and the watchdog judge.
//! - [`status`]: the read-only cluster view the status page renders, read
//!   from the tree by any node.
//! - [`systemd`]: `Type=notify`: READY=1 once joined, watchdog pings while
//!   live.
//!
//! Nothing here decides anything for the protocol: the node's duties are
//! [`crate::node`]'s, and everything they read comes from the tree.

pub mod http;
pub mod metrics;
pub mod status;
pub mod systemd;
