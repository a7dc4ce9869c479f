//! compactd: a compaction scheduler whose nodes coordinate only through files
//! on a shared backend. See README.md for the product and layouts/ for the tree.

pub mod check;
pub mod cli;
pub mod clock;
pub mod daemon;
pub mod election;
pub mod events;
pub mod executor;
pub mod jobs;
pub mod logging;
pub mod manager;
pub mod monitor;
pub mod node;
pub mod registry;
pub mod ring;
pub mod supervise;
pub mod tasks;
pub mod worker;
pub use store;

pub use check::Anomaly;
