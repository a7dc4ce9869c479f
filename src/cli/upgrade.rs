//! `compactd upgrade`: placeholder until the migrate work lands.

#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    /// Print the plan and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(_store: store::Store, _args: UpgradeArgs) -> anyhow::Result<i32> {
    anyhow::bail!("upgrade is not implemented yet")
}
