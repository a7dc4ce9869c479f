//! compactd: a compaction scheduler whose nodes coordinate only through files.
pub use store;
