//! `compactd nodes`: the cluster's members as the monitor sees them.

use store::Store;

#[derive(Debug, clap::Args)]
pub struct NodesArgs {
    /// Print JSON (stable field names).
    #[arg(long)]
    pub json: bool,
}

/// One row of `compactd nodes --json`: see [`crate::serve::status::NodeRow`].
pub use crate::serve::status::{newest_lease, NodeRow};

pub async fn run(store: Store, args: NodesArgs) -> anyhow::Result<i32> {
    let rows = crate::serve::status::nodes(&store).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    let lease = newest_lease(&store).await?;
    match &lease {
        Some(l) => println!("monitor: {} (epoch {}, renewal {})", l.holder, l.epoch, l.renewal),
        None => println!("monitor: none elected yet"),
    }
    println!("{:<28} {:<6} {:<8} {:>14} {:>8} {:>7}", "NODE", "ALIVE", "MONITOR", "INCARNATION", "PID", "FENCED");
    for r in rows {
        println!(
            "{:<28} {:<6} {:<8} {:>14} {:>8} {:>7}",
            r.id,
            if r.alive {
                "yes"
            } else if r.declared_offline {
                "OFFLN"
            } else {
                "no"
            },
            if r.monitor { "yes" } else { "" },
            r.incarnation.map(|i| i.to_string()).unwrap_or_default(),
            r.pid.map(|p| p.to_string()).unwrap_or_default(),
            r.fenced_actions
        );
    }
    Ok(0)
}
