//! The command line: parsing, dispatch, exit codes (0 ok, 1 failure, 2 usage).

pub mod check;
pub mod nodes;
pub mod run;
pub mod upgrade;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "compactd",
    version,
    about = "Compaction scheduler coordinating through files on a shared backend"
)]
pub struct Cli {
    /// Backend root: a path or fs:///abs/path, memory://, s3://bucket/prefix?endpoint=…&region=…
    #[arg(
        long,
        global = true,
        env = "COMPACTD_ROOT",
        default_value = "./cluster.compact"
    )]
    pub root: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run this node's daemon until SIGTERM.
    Run(run::RunArgs),
    /// List the cluster's nodes as the monitor sees them.
    Nodes(nodes::NodesArgs),
    /// Verify the tree; report every anomaly with its path (exit 1 if any).
    Check(check::CheckArgs),
    /// Migrate a legacy v1 tree (Compaction/) to v2 (Compaction_V2/).
    Upgrade(upgrade::UpgradeArgs),
}

/// Runs the parsed command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let uri = store::RootUri::parse(&cli.root)?;
    let store = store::Store::open(&uri).await?;
    match cli.command {
        Command::Run(args) => run::run(store, args).await,
        Command::Nodes(args) => nodes::run(store, args).await,
        Command::Check(args) => check::run(store, args).await,
        Command::Upgrade(args) => upgrade::run(store, args).await,
    }
}
