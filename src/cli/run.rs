//! `compactd run`: the node daemon.

use std::time::Duration;

use layouts::NodeId;
use tokio_util::sync::CancellationToken;

use crate::clock::SystemClock;
use crate::node::NodeConfig;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// This node's id (default: <hostname>_<pid>, like the seed's xcloud24_9876).
    #[arg(long, env = "COMPACTD_NODE_ID")]
    pub node_id: Option<String>,
    /// Heartbeat interval.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub heartbeat: Duration,
    /// How long this node may go without a heartbeat before the monitor declares it offline.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Monitor lease duration.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,
    /// How long change events are kept.
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    pub event_retention: Duration,
}

/// Parses `500ms`, `10s`, `1h`, `1h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e} (write durations like 500ms, 10s, 1h)"))?;
    if d.is_zero() {
        return Err("duration must be positive".into());
    }
    Ok(d)
}

fn default_node_id() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "node".into());
    let host: String = host
        .split('.')
        .next()
        .unwrap_or("node")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!(
        "{}_{}",
        if host.is_empty() { "node" } else { &host },
        std::process::id()
    )
}

pub async fn run(store: store::Store, args: RunArgs) -> anyhow::Result<i32> {
    let id = NodeId::parse(&args.node_id.unwrap_or_else(default_node_id))?;
    let cfg = NodeConfig {
        id,
        heartbeat: args.heartbeat,
        session_timeout: args.session_timeout,
        lease: args.lease,
        event_retention: args.event_retention,
    };
    let shutdown = CancellationToken::new();
    let signals = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("shutdown requested");
            shutdown.cancel();
        })
    };
    let result = crate::daemon::run(cfg, store, SystemClock::shared(), shutdown).await;
    signals.abort();
    result?;
    Ok(0)
}
