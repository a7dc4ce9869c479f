//! The legacy v1 tree (`<root>/Compaction/…`). Filled in by the upgrade work.
