//! The task layer's settings, from `compactd run` (flags and the
//! configuration file).

use std::collections::BTreeMap;
use std::time::Duration;

use layouts::formats::ExecutorKind;

use crate::executor;

/// Settings of the task layer, from `compactd run`.
#[derive(Debug, Clone)]
pub struct WorkConfig {
    /// Data backend URI (`--data`), for discovery and the merge executor.
    pub data_uri: String,
    /// The scheduler root URI (`--root`), for the merge executor's fence.
    pub root_uri: String,
    pub executor: ExecutorKind,
    /// The node's default command template (`--command TEMPLATE`), for
    /// tasks that use the command executor without naming a command.
    pub command: Option<String>,
    /// Named command templates (`--command NAME=TEMPLATE`): the only ones a
    /// task or job step can ask for by name.
    pub commands: BTreeMap<String, String>,
    /// Run a template carried by a task or step itself (`--allow-inline-commands`).
    pub allow_inline: bool,
    /// Run command executors as this user (`--run-as`); resolved at start.
    pub run_as: Option<executor::RunAs>,
    pub target_size: u64,
    /// Codec of the Parquet executor's outputs (`run --parquet-compression`).
    pub parquet_compression: String,
    /// Subtasks run at once on this node.
    pub max_running: usize,
    pub command_timeout: Duration,
    /// Re-dispatches of a failed subtask before it fails for good.
    pub retries: u32,
    /// Finished tasks older than this are archived into `Compress/`.
    pub history_retention: Duration,
    /// Archives older than this are deleted from `Compress/` (zero: kept
    /// forever), so the tree does not grow without bound.
    pub archive_retention: Duration,
    /// How often the monitor sweeps the task tree.
    pub sweep: Duration,
    /// Bytes per second the built-in executors may read plus write, all
    /// together (`run --io-limit`); none: unlimited.
    pub io_limit: Option<u64>,
}

impl Default for WorkConfig {
    fn default() -> Self {
        WorkConfig {
            data_uri: "./data".into(),
            root_uri: "./cluster.compact".into(),
            executor: ExecutorKind::Merge,
            command: None,
            commands: BTreeMap::new(),
            allow_inline: false,
            run_as: None,
            target_size: 128 * 1024 * 1024,
            parquet_compression: "zstd".into(),
            max_running: 2,
            command_timeout: Duration::from_secs(3600),
            retries: 3,
            history_retention: Duration::from_secs(24 * 3600),
            archive_retention: Duration::from_secs(30 * 24 * 3600),
            sweep: Duration::from_secs(60),
            io_limit: None,
        }
    }
}
