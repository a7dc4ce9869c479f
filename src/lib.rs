//! compactd: a compaction scheduler whose nodes coordinate only through files
//! on a shared backend. See README.md for the product, `layouts/` for the tree
//! (the public interface) and `layouts/PROTOCOL.md` for the protocol.
//!
//! # Layout
//!
//! Each concept has one home; the folders follow the protocol's layers.
//!
//! | module | what it owns |
//! |---|---|
//! | [`clock`] | the one source of time (monotonic and wall), injectable: [`clock::ManualClock`] in tests |
//! | [`cluster`] | what every node takes part in: [`cluster::election`] (leases, epochs, the monitor's fence check), [`cluster::liveness`] (reading heartbeats, judging sessions), [`cluster::events`] (the change log), [`cluster::wake`] (pokes are hints that make a node look at the tree now: [`cluster::wake::Wakeup`] receives, rate-bounds and coalesces, [`cluster::wake::Poker`] sends; [`cluster::wake::ended`] answers clients waiting on a task) |
//! | [`monitor`] | the elected monitor's duties: membership ([`monitor::Monitor`]: joins, offline declarations, cleanup) and the task sweep ([`monitor::tasks`]: hand-overs, archiving, orphan cleanup) |
//! | [`tasks`] | compaction tasks: the client API and tree readers ([`tasks`]), the per-task [`tasks::manager`], the per-node [`tasks::worker`], and [`tasks::placement`] (consistent hashing) |
//! | [`executor`] | running one subtask: the `command` executor and the built-in crash-safe merges: [`executor::merge`] (the shared staged-outputs + create-once commit protocol) with its two formats, [`executor::merge::lines`] (newline-delimited files) and [`executor::merge::parquet`] (Parquet files, Arrow's `parquet` crate), which never import each other |
//! | [`jobs`] | versioned job definitions, exactly-once triggers, the DAG driver |
//! | [`schedule`] | calendar time: [`schedule::Cron`] (cron patterns in a time zone, the daylight-saving and catch-up rules) and [`schedule::Windows`] (daily local windows); pure functions of a given wall instant |
//! | [`serve`] | the node's face to operators and to other nodes: [`serve::http`] (the listener: pokes, `/metrics`, `/healthz`, `/readyz`, the status page, and its limits against hostile clients), [`serve::metrics`] (the Prometheus registry and [`serve::metrics::Health`]), [`serve::status`] (the read-only cluster view the status page renders), [`serve::systemd`] (`Type=notify`) |
//! | [`table`] | tables on the data backend: [`table::format`] tells what a table folder is (Delta Lake, Iceberg, Hudi, Hive ACID, …) and which executor may change it; [`table::file`] what a data file is (by name and first bytes) |
//! | [`policy`] | table policies (compaction that runs itself): [`policy::spec`] (the TOML file), [`policy::define`] (versioned in the tree), [`policy::planner`] (the monitor's duty: due partitions, submitted exactly once, fair share per table), [`policy::view`] (`tables`, `plan --dry-run`) |
//! | [`node`] | one node: a tick that runs its heartbeat, election, monitor, manager and worker duties ([`node::Node`]), and the [`node::daemon`] loop with its shutdown |
//! | [`check`] | `compactd check`: every anomaly of the tree with its path |
//! | [`cli`] | the command line (the only place that uses `anyhow`) |
//! | [`logging`] | log set-up |
//!
//! Backend access is the `store` crate's alone; file formats and paths are
//! the `layouts` crate's; the v1 upgrader is `migrate`. The modules stack in
//! layers, each using only those below it (`LAYERS` in `.ci/shape.py`, which
//! CI holds): clock, logging, schedule, table, cluster, executor, tasks,
//! jobs, policy, monitor, serve, node, check, cli.

pub mod check;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod executor;
pub mod jobs;
pub mod logging;
pub mod monitor;
pub mod node;
pub mod policy;
pub mod schedule;
pub mod serve;
pub mod table;
pub mod tasks;
pub use store;
