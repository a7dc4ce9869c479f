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

/// Prints the nodes; each lease or heartbeat entry that it passed over (a
/// folder, a file that is not one) is named on stderr, one line each, and
/// does not change the exit code (the rows are what could be read).
pub async fn run(store: Store, args: NodesArgs) -> anyhow::Result<i32> {
    let mut skipped = vec![];
    let mut lease = crate::cluster::election::newest_lease_noting(&store, &mut skipped).await?;
    if let Some(l) = lease.as_mut() {
        // A lease written by an older monitor omits the layout in force.
        l.keep_layout_at_least(crate::tasks::listed_layout(&store).await?);
    }
    let rows = crate::serve::status::nodes_with(&store, lease.as_ref(), &mut skipped).await?;
    for a in &skipped {
        super::errln!("compactd: skipping {a}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    match &lease {
        Some(l) => super::outln!(
            "monitor: {} (epoch {}, renewal {}) · layout {} in force",
            l.holder,
            l.epoch,
            l.renewal,
            l.layout()
        ),
        None => super::outln!("monitor: none elected yet"),
    }
    super::outln!(
        "{:<28} {:<6} {:<8} {:>14} {:>8} {:>7} {:>12}  VERSION",
        "NODE",
        "ALIVE",
        "MONITOR",
        "INCARNATION",
        "PID",
        "FENCED",
        "CLOCK SKEW"
    );
    let mut skewed = vec![];
    let mut notes = vec![];
    for r in rows {
        if r.draining && r.alive {
            notes.push(format!("{}: draining (starts nothing new; leaves once its running units reported)", r.id));
        }
        if r.behind_layout() {
            let reads = r.layouts.iter().max().copied().unwrap_or(layouts::layout::LAYOUT_2);
            notes.push(format!(
                "{}: layout {reads} node in a layout {} cluster: upgrade it (it gets no new work)",
                r.id, r.layout_in_force
            ));
        }
        let skew = r.clock_skew_ms.map(crate::serve::status::fmt_skew).unwrap_or_default();
        if crate::serve::status::skew_flagged(&r) {
            skewed.push(format!("{} ({skew})", r.id));
        }
        super::outln!(
            "{:<28} {:<6} {:<8} {:>14} {:>8} {:>7} {:>12}  {}",
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
            r.fenced_actions,
            skew,
            // The version each node runs, for a rolling upgrade.
            r.version.as_deref().unwrap_or("")
        );
    }
    for n in notes {
        super::outln!("{n}");
    }
    if !skewed.is_empty() {
        // Sessions and leases do not depend on it; timestamps these nodes
        // write (job runs, history, logs) do.
        super::outln!(
            "clock skew: {} differ from the backend's clock by {} s or more, beyond what one heartbeat can be off \
             by (compactd's sessions and leases do not depend on wall clocks; the times these nodes write do: \
             check their NTP)",
            skewed.join(", "),
            crate::serve::status::SKEW_FLAG_MS / 1000
        );
    }
    Ok(0)
}
