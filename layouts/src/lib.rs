//! The compactd on-storage trees as typed paths and file formats.
//!
//! This crate is the contract that operators' scripts rely on: it names every
//! path compactd reads or writes below its root and defines every file format.
//! It does no I/O. See `README.md` beside this crate for the tree with a real
//! listing, and `PROTOCOL.md` for the coordination protocol built on it.
//!
//! Invariants:
//! - Every path segment that comes from data (node ids, task ids, table names)
//!   is a validated [`Name`]: no `/`, no `..`, no control characters, not empty.
//! - Every state is readable from a listing alone (`Status.<State>` files).
//! - Formats are JSON with stable field names; unknown fields are ignored on
//!   read so that newer writers do not break older readers.

pub mod anomaly;
pub mod formats;
pub mod id;
pub mod jobs;
pub mod layout;
pub mod limits;
pub mod name;
pub mod policies;
pub mod state;
pub mod units;
pub mod v1;
pub mod v2;
pub mod v3;

pub use anomaly::Anomaly;
pub use id::{IdGenerator, TaskId};
pub use name::{Name, NameError, NodeId};
pub use state::{StateError, SubtaskState, TaskState};
