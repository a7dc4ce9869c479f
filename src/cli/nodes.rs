//! `compactd nodes`: the cluster's members as the monitor sees them.

use std::collections::BTreeMap;

use layouts::formats::Heartbeat;
use layouts::NodeId;
use serde::Serialize;
use store::Store;

#[derive(Debug, clap::Args)]
pub struct NodesArgs {
    /// Print JSON (stable field names).
    #[arg(long)]
    pub json: bool,
}

/// One row of `compactd nodes --json`.
#[derive(Debug, Serialize)]
pub struct NodeRow {
    pub id: String,
    /// In the monitor's member view with this incarnation.
    pub alive: bool,
    /// Holder of the newest monitor lease.
    pub monitor: bool,
    pub incarnation: Option<u64>,
    pub beat: Option<u64>,
    pub last_beat_wall_ms: Option<u64>,
    pub session_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub pid: Option<u32>,
    pub version: Option<String>,
    pub fenced_actions: u64,
    pub event_cursor: u64,
    /// Where the node takes wake-up pokes and serves its status (`--advertise`).
    pub addr: Option<String>,
    /// This incarnation was declared offline and not yet purged.
    pub declared_offline: bool,
}

pub use crate::cluster::election::newest_lease;

pub async fn collect(store: &Store) -> store::Result<Vec<NodeRow>> {
    let lease = newest_lease(store).await?;
    let (beats, _) = crate::cluster::liveness::read_heartbeats(store).await?;
    let mut ids: BTreeMap<NodeId, Option<&Heartbeat>> = beats.iter().map(|(k, v)| (k.clone(), Some(v))).collect();
    for m in lease.iter().flat_map(|l| l.members.iter()) {
        ids.entry(m.node.clone()).or_insert(None);
    }
    let rows = ids
        .into_iter()
        .map(|(id, hb)| {
            let member = lease.as_ref().and_then(|l| l.members.iter().find(|m| m.node == id));
            let incarnation = hb.map(|h| h.incarnation).or(member.map(|m| m.incarnation));
            // A member of the (possibly stale) view is alive only while its
            // heartbeat is there: a node that left deleted it, and the view
            // of a cluster where nothing runs any more is never updated.
            let alive = hb.is_some() && member.is_some_and(|m| Some(m.incarnation) == incarnation);
            let declared_offline = lease
                .as_ref()
                .is_some_and(|l| l.offline.iter().any(|m| m.node == id && Some(m.incarnation) == incarnation));
            NodeRow {
                monitor: hb.is_some() && lease.as_ref().is_some_and(|l| l.holder == id && !l.released),
                alive,
                incarnation,
                beat: hb.map(|h| h.beat),
                last_beat_wall_ms: hb.map(|h| h.wall_ms),
                session_timeout_ms: hb.map(|h| h.session_timeout_ms),
                heartbeat_ms: hb.map(|h| h.heartbeat_ms),
                pid: hb.map(|h| h.pid),
                version: hb.map(|h| h.version.clone()),
                fenced_actions: hb.map(|h| h.fenced_actions).unwrap_or(0),
                event_cursor: hb.map(|h| h.event_cursor).unwrap_or(0),
                addr: hb.and_then(|h| h.addr.clone()),
                declared_offline,
                id: id.to_string(),
            }
        })
        .collect();
    Ok(rows)
}

pub async fn run(store: Store, args: NodesArgs) -> anyhow::Result<i32> {
    let rows = collect(&store).await?;
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
