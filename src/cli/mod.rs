//! The command line: parsing, dispatch, exit codes (0 ok, 1 failure, 2 usage).

pub mod upgrade;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "compactd", version, about = "Compaction scheduler coordinating through files on a shared backend")]
pub struct Cli {
    /// Backend root: a path or fs:///abs/path, memory://, s3://bucket/prefix?endpoint=…&region=…
    #[arg(long, global = true, env = "COMPACTD_ROOT", default_value = "./cluster.compact")]
    pub root: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrate a legacy v1 tree (Compaction/) to v2 (Compaction_V2/).
    Upgrade(upgrade::UpgradeArgs),
}

/// Runs the parsed command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let uri = store::RootUri::parse(&cli.root)?;
    let store = store::Store::open(&uri).await?;
    match cli.command {
        Command::Upgrade(args) => upgrade::run(store, args).await,
    }
}
