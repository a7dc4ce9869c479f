//! The node's face to operators and to other nodes: everything it serves or
//! signals outside the tree.
//!
//! - [`wake`]: wake-ups between nodes. A poke is a hint that makes a node
//!   look at the tree now instead of at its next poll; the tree stays the
//!   truth, so a lost poke costs a poll interval and a forged one a look.
//! - [`ended`]: the same for a client waiting on a task (`submit --wait`):
//!   the task's manager answers a waiting request when it has seen the
//!   task end, and the client then reads the task.
//! - [`http`]: the listener (`run --listen`): pokes, `/metrics`, `/healthz`,
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

pub mod ended;
pub mod http;
pub mod metrics;
pub mod status;
pub mod systemd;
pub mod wake;
