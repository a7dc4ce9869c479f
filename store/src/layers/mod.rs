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
//! error (or another kind: [`FaultHandle::set_error_kind`]) whose message
//! contains `"injected fault"`, and can delay them. The
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

mod counting;
#[cfg(feature = "testing")]
mod fault;
#[cfg(all(test, feature = "testing"))]
mod tests;

use std::fmt;

use opendal::raw::OpWrite;

pub use counting::{CountingLayer, OpCounter, OpCounts};
#[cfg(feature = "testing")]
pub use fault::{FaultConfig, FaultHandle, FaultLayer, PathFilter};
/// OpenDAL's own Prometheus layer (`opendal_*` families: requests by
/// operation with a latency histogram, errors by kind, bytes): what a
/// daemon's `/metrics` reports of its backend.
pub use opendal::layers::PrometheusClientLayer;

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

    #[cfg(feature = "testing")]
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
