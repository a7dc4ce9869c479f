//! `compactd check`: report every anomaly in the tree (exit 1 if any).

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Print a JSON array of {path, problem}.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(store: store::Store, args: CheckArgs) -> anyhow::Result<i32> {
    let found = crate::check::check_tree(&store).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else if found.is_empty() {
        println!("ok: no anomalies in {}", store.uri());
    } else {
        for a in &found {
            println!("{a}");
        }
        eprintln!("{} anomalies", found.len());
    }
    Ok(if found.is_empty() { 0 } else { 1 })
}
