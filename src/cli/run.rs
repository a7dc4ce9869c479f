//! `compactd run`: the node daemon.

use std::time::Duration;

use layouts::formats::ExecutorKind;
use layouts::NodeId;
use tokio_util::sync::CancellationToken;

use crate::clock::SystemClock;
use crate::node::NodeConfig;
use crate::serve::http::Face;
use crate::tasks::worker::WorkConfig;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// This node's id (default: <hostname>_<pid>, like the seed's xcloud24_9876).
    #[arg(long, env = "COMPACTD_NODE_ID", value_parser = NodeId::parse)]
    pub node_id: Option<NodeId>,
    /// Heartbeat interval; also how often a node polls its folder.
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
    /// Data backend holding the tables (<db>/<schema>/<table>/<partition>/); any URI --root takes.
    #[arg(long, env = "COMPACTD_DATA", default_value = "./data")]
    pub data: String,
    /// Default executor for tasks that do not name one.
    #[arg(long, value_enum, default_value = "merge")]
    pub executor: ExecutorArg,
    /// A command this node runs, repeatable: NAME=TEMPLATE defines a named
    /// command that tasks and job steps ask for with `commandName`; a
    /// TEMPLATE without NAME= is the node's default for command tasks that
    /// name none. Placeholders {db} {schema} {table} {partition} {task}
    /// {subtask} {shard_index} {shard_total} {param.NAME} become
    /// shell-quoted values.
    #[arg(long = "command", value_name = "[NAME=]TEMPLATE")]
    pub commands: Vec<String>,
    /// Also run command templates carried by tasks and job steps themselves
    /// (anyone who can write the tree could then run any program here).
    #[arg(long)]
    pub allow_inline_commands: bool,
    /// Run command executors as this user (needed when the daemon runs as root).
    #[arg(long, value_name = "USER")]
    pub run_as: Option<String>,
    /// Start as root even though command executors would run as root.
    #[arg(long)]
    pub allow_root: bool,
    /// Size of merged outputs: files below it are merged (merge executor), files
    /// below 3/4 of it are rewritten (parquet executor); e.g. 134217728 or 128MiB.
    #[arg(long, default_value = "128MiB", value_parser = parse_target_size)]
    pub target_size: u64,
    /// Codec of the parquet executor's outputs: zstd (level 1), zstd:LEVEL, snappy, lz4, gzip, none.
    #[arg(long, default_value = "zstd", value_parser = parse_compression_arg)]
    pub parquet_compression: String,
    /// Bytes per second the built-in executors (merge, parquet) of this node
    /// may read plus write, all of them together, e.g. 200MiB; unlimited
    /// when not set. Command executors are not limited.
    #[arg(long, value_name = "BYTES_PER_SECOND", value_parser = parse_size)]
    pub io_limit: Option<u64>,
    /// Subtasks this node runs at once (1 to 1024).
    #[arg(long, default_value_t = 2, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..=1024), usize::from))]
    pub max_running: usize,
    /// Re-dispatches of a failed subtask before it fails for good (at most 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,
    /// Executor time limit.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub command_timeout: Duration,
    /// Finished tasks older than this are archived into Scheduler/Compress/ (by the monitor).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub history_retention: Duration,
    /// Archives of finished tasks older than this are deleted from Scheduler/Compress/ (0: kept forever).
    #[arg(long, default_value = "30d", value_parser = parse_retention)]
    pub archive_retention: Duration,
    /// How often the monitor sweeps the task tree (manager failover safety net, archiving, garbage).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub sweep: Duration,
    /// Time between two passes of the policy planner over the tables (the
    /// monitor's duty; see `compactd policy`).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub plan_interval: Duration,
    /// Backend requests the policy planner may spend per monitor round (1 to 1000000).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub plan_budget: u64,
    /// The highest tree layout this node lets the cluster switch to: 4
    /// (dispatch batches of empty markers named by their manager's term),
    /// 3 (the same batches as versions before 4 name them) or 2, to keep a
    /// rolling upgrade reversible until every node runs this version
    /// (layouts/README.md, "Layouts and the switch"). It holds a switch
    /// back, never undoes one: below the layout in force, `run` refuses.
    #[arg(long, default_value_t = layouts::v3::NEWEST, value_parser = clap::value_parser!(u32).range(2..=4))]
    pub max_layout: u32,
    /// Warm shutdown: after a first SIGTERM the node starts nothing new,
    /// hands its tasks over and waits this long at most for its running
    /// units to finish and report before it stops them; a second SIGTERM
    /// or a SIGINT stops them at once. 0s: a first SIGTERM stops at once.
    /// Under systemd the node extends its stop timeout while it drains
    /// (systemd 236 and later); elsewhere keep the service manager's stop
    /// timeout above it plus two minutes for the leave.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Start even if a v1 → v2 upgrade of this root is unfinished.
    #[arg(long)]
    pub allow_unfinished_upgrade: bool,
    /// Where this node listens for wake-up pokes and serves its read-only
    /// status: HOST:PORT (port 0 picks a free port), or `off` (then the
    /// node only polls; others' pokes to it are skipped). The default is
    /// this host only: on a cluster of several hosts give the address of
    /// the cluster's network (10.0.0.5:7471), or other hosts' pokes reach
    /// this node only through its inbox, at its next poll.
    #[arg(long, env = "COMPACTD_LISTEN", default_value = "127.0.0.1:7471", value_parser = parse_listen)]
    pub listen: Listen,
    /// `--listen` was left at its default: if that port is taken (a second
    /// node on this host), the node takes a free one and says so.
    #[arg(skip)]
    pub listen_defaulted: bool,
    /// HOST:PORT other nodes and the CLI dial to poke this node (default:
    /// the bound address, or this host's name and the bound port when
    /// listening on every interface).
    #[arg(long, env = "COMPACTD_ADVERTISE")]
    pub advertise: Option<String>,
    /// Serve the status page, /api/*, /v1/status, /metrics, /healthz and
    /// /readyz on this HOST:PORT instead (an admin or metrics port, e.g.
    /// 127.0.0.1:7472); the --listen port then serves only pokes.
    #[arg(long, env = "COMPACTD_OPS_LISTEN", value_name = "HOST:PORT", value_parser = parse_addr)]
    pub ops_listen: Option<std::net::SocketAddr>,
}

/// `--listen`: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Off,
    On(std::net::SocketAddr),
}

fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "off" {
        return Ok(Listen::Off);
    }
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?}: {e} (write HOST:PORT, e.g. 0.0.0.0:7471 or 127.0.0.1:0, or off)"))?
        .next()
        .map(Listen::On)
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?}: {e} (write HOST:PORT, e.g. 127.0.0.1:7472)"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ExecutorArg {
    /// Built in: concatenates a partition's small newline-delimited files.
    Merge,
    /// Built in: rewrites a partition's small Parquet files (`*.parquet`).
    Parquet,
    /// Built in: compacts a partition of a Delta Lake table as one commit.
    Delta,
    /// Built in: compacts the partitions of an Apache Iceberg table, one
    /// `replace` snapshot per task.
    Iceberg,
    Command,
    /// Succeeds at once, in process (measures the scheduler alone). Built
    /// with the `testing` feature only.
    #[cfg(feature = "testing")]
    Noop,
}

fn parse_compression_arg(s: &str) -> Result<String, String> {
    crate::executor::merge::parquet::parse_compression(s).map(|_| s.to_string())
}

/// Durations and sizes, each with its maximum (`layouts::units`); clap
/// names the flag (or the configuration file its key) in the error.
pub use layouts::units::{parse_duration, parse_size, parse_target_size};

/// A retention: a duration, or `0` for ever.
fn parse_retention(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

fn default_node_id() -> String {
    let host = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "node".into());
    let host: String = host
        .split('.')
        .next()
        .unwrap_or("node")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    format!("{}_{}", if host.is_empty() { "node" } else { &host }, std::process::id())
}

pub async fn run(store: store::Store, args: RunArgs) -> anyhow::Result<i32> {
    let id = match args.node_id.clone() {
        Some(id) => id,
        None => NodeId::parse(&default_node_id())?,
    };
    if !args.allow_unfinished_upgrade {
        if let Some(why) = migrate::upgrade_in_progress(&store).await? {
            anyhow::bail!(
                "{why}\n(finish it with `compactd upgrade`, or start anyway with --allow-unfinished-upgrade)"
            );
        }
    }
    refuse_unreadable_layout(&store, args.max_layout).await?;
    let cfg = NodeConfig {
        id,
        heartbeat: args.heartbeat,
        session_timeout: args.session_timeout,
        lease: args.lease,
        event_retention: args.event_retention,
        max_layout: args.max_layout,
        newest_on_fresh_tree: true,
        drain_timeout: args.drain_timeout,
    };
    let executor = match args.executor {
        ExecutorArg::Merge => ExecutorKind::Merge,
        ExecutorArg::Parquet => ExecutorKind::Parquet,
        ExecutorArg::Delta => ExecutorKind::Delta,
        ExecutorArg::Iceberg => ExecutorKind::Iceberg,
        ExecutorArg::Command => ExecutorKind::Command,
        #[cfg(feature = "testing")]
        ExecutorArg::Noop => ExecutorKind::Noop,
    };
    let (default_command, commands) = split_commands(&args.commands)?;
    if matches!(executor, ExecutorKind::Command) && default_command.is_none() {
        anyhow::bail!("--executor command needs a default --command TEMPLATE");
    }
    let runs_commands = default_command.is_some() || !commands.is_empty() || args.allow_inline_commands;
    let run_as = match &args.run_as {
        Some(u) => Some(crate::executor::RunAs::lookup(u).map_err(|e| anyhow::anyhow!("--run-as {u}: {e}"))?),
        None => None,
    };
    // SAFETY: geteuid has no preconditions.
    if runs_commands && run_as.is_none() && unsafe { libc::geteuid() } == 0 && !args.allow_root {
        anyhow::bail!("refusing to run command executors as root: pass --run-as USER (or --allow-root to accept it)");
    }
    let data = store::Store::open_data_with_options(&store::RootUri::parse(&args.data)?, store.options()).await?;
    let work = WorkConfig {
        data_uri: args.data.clone(),
        root_uri: store.uri().to_string(),
        executor,
        command: default_command,
        commands,
        allow_inline: args.allow_inline_commands,
        run_as,
        target_size: args.target_size,
        parquet_compression: args.parquet_compression.clone(),
        max_running: args.max_running.max(1),
        command_timeout: args.command_timeout,
        retries: args.retries,
        history_retention: args.history_retention,
        archive_retention: args.archive_retention,
        sweep: args.sweep,
        io_limit: args.io_limit,
    };
    let planner = crate::policy::PlannerConfig {
        interval: args.plan_interval,
        budget: args.plan_budget.max(1),
        stop_settle: args.session_timeout + args.heartbeat,
        heartbeat: args.heartbeat,
        ..Default::default()
    };
    let shutdown = CancellationToken::new();
    let clock = SystemClock::shared();
    let wake = crate::cluster::wake::Wakeup::bounded(clock.clone());
    let health = std::sync::Arc::new(crate::serve::metrics::Health::new(clock.clone(), cfg.session_timeout));
    let namenode = [("tree", &store), ("data", &data)]
        .into_iter()
        .filter_map(|(role, s)| s.namenode_rpcs().map(|r| (role, r)))
        .collect();
    let metrics = crate::serve::metrics::Metrics::new(
        health,
        matches!(args.listen, Listen::On(_)).then(|| wake.clone()),
        namenode,
    );
    // The backend requests of this node: counted for its status (by kind)
    // and for /metrics (OpenDAL's layer: by operation, with latency), once
    // on each store.
    let counter = store::layers::OpCounter::new();
    let backend = metrics.backend_layer();
    let store = store.layered(|op| op.layer(store::layers::CountingLayer::new(counter.clone())).layer(backend.clone()));
    let data = data.layered(|op| op.layer(backend.clone()));
    // One overview cache for both listeners: the page costs the backend the
    // same whichever port serves it.
    let view_cache = crate::serve::http::ViewCache::default();
    let http_state = |addr: Option<String>| crate::serve::http::HttpState {
        node: cfg.id.to_string(),
        addr,
        wake: wake.clone(),
        backend: Some(counter.clone()),
        store: Some(store.clone()),
        clock: clock.clone(),
        metrics: Some(metrics.clone()),
        view_cache: view_cache.clone(),
    };
    let (wakeups, server) = match args.listen {
        Listen::Off => (None, None),
        Listen::On(addr) => {
            let l = match crate::serve::http::bind(addr, args.advertise.clone()).await {
                // Several nodes started on one host with the defaults (the
                // three-node example of docs/concepts.md): the port is a hint carried
                // in the heartbeat, so any free one serves; a port someone
                // chose stays a hard requirement (firewalls name it).
                Err(e) if args.listen_defaulted && e.kind() == std::io::ErrorKind::AddrInUse => {
                    let any = std::net::SocketAddr::new(addr.ip(), 0);
                    let l = crate::serve::http::bind(any, args.advertise.clone())
                        .await
                        .map_err(|e| anyhow::anyhow!("--listen {any}: {e} (pick another address, or --listen off)"))?;
                    tracing::warn!(
                        taken = %addr, listen = %l.local,
                        "the default listening port is taken (another node on this host?): listening on a free port \
                         instead; set --listen to choose one"
                    );
                    l
                }
                other => other
                    .map_err(|e| anyhow::anyhow!("--listen {addr}: {e} (pick another address, or --listen off)"))?,
            };
            if l.local.ip().is_loopback() && args.advertise.is_none() {
                tracing::info!(
                    listen = %l.local,
                    "listening on this host only: nodes on other hosts cannot poke this node, their work reaches it \
                     at its next poll (set --listen to an address of the cluster's network)"
                );
            }
            let face = if args.ops_listen.is_some() {
                tracing::info!(listen = %l.local, advertise = %l.advertise, "listening for wake-ups");
                Face::Wake
            } else {
                tracing::info!(listen = %l.local, advertise = %l.advertise, "listening for wake-ups, metrics and the status page");
                Face::Both
            };
            let app = crate::serve::http::router(http_state(Some(l.advertise.clone())), face);
            let server = tokio::spawn(crate::serve::http::serve(l.listener, app, shutdown.clone()));
            (Some(crate::node::daemon::Wakeups { wake: wake.clone(), addr: l.advertise }), Some(server))
        }
    };
    let ops_server = match args.ops_listen {
        None => None,
        Some(addr) => {
            let l = crate::serve::http::bind(addr, None)
                .await
                .map_err(|e| anyhow::anyhow!("--ops-listen {addr}: {e} (pick another address)"))?;
            tracing::info!(ops_listen = %l.local, "serving metrics, health and the status page");
            let app = crate::serve::http::router(http_state(wakeups.as_ref().map(|w| w.addr.clone())), Face::Ops);
            Some(tokio::spawn(crate::serve::http::serve(l.listener, app, shutdown.clone())))
        }
    };
    // A first SIGTERM drains (warm shutdown); a second one, or a SIGINT,
    // stops at once.
    let drain = CancellationToken::new();
    let signals = {
        let (shutdown, drain) = (shutdown.clone(), drain.clone());
        let warm = !args.drain_timeout.is_zero();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            loop {
                tokio::select! {
                    _ = term.recv() => {
                        if warm && !drain.is_cancelled() {
                            tracing::info!("SIGTERM: draining (a second SIGTERM or a SIGINT stops at once)");
                            drain.cancel();
                            continue;
                        }
                    }
                    _ = tokio::signal::ctrl_c() => {}
                }
                break;
            }
            tracing::info!("shutdown requested: stopping now");
            shutdown.cancel();
        })
    };
    let result = crate::node::daemon::run(
        cfg,
        store,
        Some(crate::node::daemon::WorkSetup { cfg: work, data, planner }),
        clock,
        crate::node::daemon::Stop { now: shutdown.clone(), drain },
        wakeups,
        Some(metrics),
    )
    .await;
    signals.abort();
    shutdown.cancel();
    for server in [server, ops_server].into_iter().flatten() {
        match server.await {
            Ok(Err(e)) => tracing::warn!("the listener failed: {e}"),
            Err(e) => tracing::warn!("the listener task failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
    result?;
    Ok(0)
}

/// Refuses to start on a tree whose layout in force this node cannot take
/// part in ([`layouts::v3::cannot_take_part`]): above the newest this
/// release reads, or above `--max-layout`. Such a node would join, beat and
/// idle for good, its tasks untouched. Decided before anything is written
/// (no probe, id claim, heartbeat or election), from the markers and the
/// newest lease (a monitor may hold a layout in force on its lease's word
/// while a file no monitor wrote stands at the marker's name): only reads.
///
/// A tree it cannot read (an `Election` or `Registry` that is a file, an
/// unreachable backend) is no reason to refuse: the daemon meets the same
/// fault in its loop, where it reports it and keeps running, and it checks
/// the layout in force again at every poll.
async fn refuse_unreadable_layout(store: &store::Store, max_layout: u32) -> anyhow::Result<()> {
    let listed = crate::tasks::listed_layout(store).await;
    let leased = crate::cluster::election::newest_lease(store).await;
    let (listed, leased) = match (listed, leased) {
        (Ok(listed), Ok(leased)) => (listed, leased.map_or(listed, |l| l.layout())),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "could not read the layout in force before starting; the loop reads it again");
            return Ok(());
        }
    };
    match layouts::v3::cannot_take_part(listed.max(leased), max_layout) {
        Some(why) => anyhow::bail!("refusing to start, nothing was written to the tree: {why}"),
        None => Ok(()),
    }
}

/// Splits `--command` values into the default template and the named ones.
/// `NAME=TEMPLATE` is named when NAME is a command name (letters, digits,
/// `_`, `-`, `.`); anything else is the default template.
fn split_commands(values: &[String]) -> anyhow::Result<(Option<String>, std::collections::BTreeMap<String, String>)> {
    let mut default = None;
    let mut named = std::collections::BTreeMap::new();
    for v in values {
        layouts::limits::check_template("a --command template", v)?;
        match v.split_once('=') {
            Some((name, template)) if crate::tasks::valid_command_name(name) => {
                if named.insert(name.to_string(), template.to_string()).is_some() {
                    anyhow::bail!("--command {name}=… is given twice");
                }
            }
            _ => {
                if default.replace(v.clone()).is_some() {
                    anyhow::bail!(
                        "more than one default --command TEMPLATE (name the others: --command NAME=TEMPLATE)"
                    );
                }
            }
        }
    }
    Ok((default, named))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_flags_split_into_named_and_default() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (d, named) =
            split_commands(&v(&["compact_orc=spark-submit {db}.{table}", "sleep 4", "stats=echo a=b"])).unwrap();
        assert_eq!(d.as_deref(), Some("sleep 4"));
        assert_eq!(named["compact_orc"], "spark-submit {db}.{table}");
        assert_eq!(named["stats"], "echo a=b");
        assert!(split_commands(&v(&["a=x", "a=y"])).is_err(), "a name given twice");
        assert!(split_commands(&v(&["true", "false"])).is_err(), "two defaults");
        let (d, _) = split_commands(&v(&["echo x=1 y"])).unwrap();
        assert_eq!(d.as_deref(), Some("echo x=1 y"), "not a name before '=': a default template");
    }

    /// `run`'s arguments as the flags and the config file in `argv` give them.
    fn run_args(argv: &[&str]) -> Result<RunArgs, String> {
        match crate::cli::config::load(argv.iter().map(Into::into).collect()) {
            Ok(l) => match l.cli.command {
                crate::cli::Command::Run(a) => Ok(a),
                other => panic!("{other:?}"),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// `--io-limit` takes a size; the file's `io_limit` key goes through
    /// the same parser; absent, no limit.
    #[test]
    fn the_io_limit_comes_from_the_flag_or_the_file() {
        let io_limit = |argv: &[&str]| run_args(argv).map(|a| a.io_limit);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "io_limit = \"200MiB\"\n").unwrap();
        let file = file.to_str().unwrap();
        let none = dir.path().join("none.toml");
        std::fs::write(&none, "").unwrap();
        let none = none.to_str().unwrap();
        assert_eq!(io_limit(&["compactd", "--config", none, "run"]).unwrap(), None);
        assert_eq!(io_limit(&["compactd", "--config", none, "run", "--io-limit", "4MiB"]).unwrap(), Some(4 << 20));
        assert_eq!(io_limit(&["compactd", "--config", file, "run"]).unwrap(), Some(200 << 20));
        assert!(io_limit(&["compactd", "--config", none, "run", "--io-limit", "fast"]).is_err());
    }

    /// `--ops-listen` and the file's `ops_listen` key: unset by default (one
    /// listener serves everything), an address when given.
    #[test]
    fn the_ops_address_comes_from_the_flag_or_the_file() {
        let ops = |argv: &[&str]| run_args(argv).map(|a| a.ops_listen.map(|a| a.to_string()));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "ops_listen = \"127.0.0.1:7472\"\n").unwrap();
        let file = file.to_str().unwrap();
        let none = dir.path().join("none.toml");
        std::fs::write(&none, "").unwrap();
        let none = none.to_str().unwrap();
        assert_eq!(ops(&["compactd", "--config", none, "run"]).unwrap(), None);
        assert_eq!(ops(&["compactd", "--config", file, "run"]).unwrap().as_deref(), Some("127.0.0.1:7472"));
        let flag = ops(&["compactd", "--config", file, "run", "--ops-listen", "127.0.0.1:9"]).unwrap();
        assert_eq!(flag.as_deref(), Some("127.0.0.1:9"));
        assert!(ops(&["compactd", "--config", none, "run", "--ops-listen", "nowhere"]).is_err());
    }

    #[test]
    fn sizes_durations_and_counts_name_the_flag_and_the_maximum() {
        let err = |argv: &[&str]| run_args(argv).unwrap_err().to_string();
        let e = err(&["compactd", "run", "--session-timeout", "18446744073709552s"]);
        assert!(e.contains("--session-timeout") && e.contains("maximum of 3650d"), "{e}");
        let e = err(&["compactd", "run", "--target-size", "18446744073709551616"]);
        assert!(e.contains("--target-size") && e.contains("maximum of 64 GiB"), "{e}");
        let e = err(&["compactd", "run", "--max-running", "100000"]);
        assert!(e.contains("--max-running") && e.contains("1..=1024"), "{e}");
        let e = err(&["compactd", "run", "--archive-retention", "99999d"]);
        assert!(e.contains("--archive-retention") && e.contains("maximum"), "{e}");
        assert_eq!(
            run_args(&["compactd", "run", "--archive-retention", "0"]).unwrap().archive_retention,
            Duration::ZERO
        );
        assert_eq!(run_args(&["compactd", "run", "--max-running", "3"]).unwrap().max_running, 3);
    }
}
