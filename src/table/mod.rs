//! Tables on the data backend as compactd finds them: what a table folder
//! is ([`format`]: Delta Lake, Apache Iceberg, Apache Hudi, Hive ACID and the
//! other formats whose files a log or manifest names), so that no executor
//! ever changes a table it does not own.
//!
//! Every path that can lead to a table being changed asks [`format`]: `submit`
//! (when it knows the data backend), the manager's discovery of a task's
//! units, the policy planner, and each executor process itself right before
//! it reads anything (defence in depth: an older manager, a hand-written task
//! or a planner that ran before a table was converted cannot make it write).

pub mod file;
pub mod format;

pub use format::{Detector, Findings, TableFormat};
