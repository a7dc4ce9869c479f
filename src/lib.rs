//! compactd: a compaction scheduler whose nodes coordinate only through files
//! on a shared backend. See README.md for the product and layouts/ for the tree.

pub mod check;
pub mod cli;
pub mod clock;
pub mod daemon;
pub mod election;
pub mod events;
pub mod logging;
pub mod monitor;
pub mod node;
pub mod registry;
pub mod ring;
pub mod tasks;
pub use store;

pub use check::Anomaly;
