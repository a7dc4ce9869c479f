//! compactd: a compaction scheduler whose nodes coordinate only through files
//! on a shared backend. See README.md for the product and layouts/ for the tree.

pub mod cli;
pub mod logging;
pub use store;
