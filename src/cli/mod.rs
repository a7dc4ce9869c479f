//! The command line: parsing, dispatch, exit codes (0 ok, 1 failure, 2 usage).

/// `println!` for text output that may hold names read from the tree or the
/// data backend: the line is printed with control and bidirectional
/// characters escaped ([`layouts::name::shown`]), so that a name can
/// neither add a line to the output nor reorder the one it is on. JSON
/// output is escaped by JSON itself.
macro_rules! outln {
    () => { println!() };
    ($($arg:tt)*) => { println!("{}", layouts::name::shown(&format!($($arg)*))) };
}
pub(crate) use outln;

/// [`outln`] for stderr, through [`crate::logging::eprint_line`] (never
/// panics on a broken stderr).
macro_rules! errln {
    ($($arg:tt)*) => { $crate::logging::eprint_line(&layouts::name::shown(&format!($($arg)*))) };
}
pub(crate) use errln;

pub mod check;
pub mod config;
pub mod jobs;
pub mod nodes;
pub mod policy;
pub mod run;
pub mod tasks;
pub mod upgrade;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "compactd", version, about = "Compaction scheduler coordinating through files on a shared backend")]
pub struct Cli {
    /// Backend root: a path or fs:///abs/path, memory://, s3://bucket/prefix?endpoint=…&region=…,
    /// hdfs://namenode:port/path, hdfs://nameservice/path or hdfs:///path
    #[arg(long, global = true, env = "COMPACTD_ROOT", default_value = "./cluster.compact")]
    pub root: String,

    /// Limit of each backend request (each attempt); `0s` for none. Also read
    /// by executors started by a node (environment).
    #[arg(long, global = true, env = "COMPACTD_BACKEND_TIMEOUT", default_value = "5s", value_parser = layouts::units::parse_duration_or_zero)]
    pub backend_timeout: std::time::Duration,

    /// Retries of an idempotent backend request that failed transiently
    /// (timeouts, 5xx, resets), with exponential backoff and jitter (at most 10).
    #[arg(long, global = true, env = "COMPACTD_BACKEND_RETRIES", default_value_t = 2, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u8).range(0..=10), usize::from))]
    pub backend_retries: usize,

    /// Configuration file (TOML) for `run` and the global flags; default
    /// /etc/compactd/compactd.toml when it exists. See `compactd config`.
    #[arg(long, global = true, env = "COMPACTD_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Log lines on stderr: `text` for people, `json` (one object per line)
    /// for log shippers.
    #[arg(long, global = true, env = "COMPACTD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::logging::LogFormat,

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
    /// Remove the files `delta` units wrote into Delta tables and never
    /// committed (orphans `check --data` names), older than a given age.
    VacuumOrphans(check::VacuumOrphansArgs),
    /// Submit a compaction task; prints its id.
    Submit(tasks::SubmitArgs),
    /// Show a task: state, manager, result counts, outstanding subtasks.
    Status(tasks::StatusArgs),
    /// List the tasks under Scheduler/ (not the archived history).
    List(tasks::ListArgs),
    /// Stop a task: its running executors are killed and it ends Cancel.
    Stop(tasks::StopArgs),
    /// Move a subtask to another node, or a task's manager role (--manager).
    Reassign(tasks::ReassignArgs),
    /// Finished tasks archived in Scheduler/Compress/.
    History(tasks::HistoryArgs),
    /// Job definitions: apply, versions, switch, show, delete, list.
    Define(jobs::DefineArgs),
    /// Request a job instance for a trigger key (created exactly once).
    Trigger(jobs::TriggerArgs),
    /// List job instances.
    Jobs(jobs::JobsArgs),
    /// Show one job instance with its steps and tasks.
    Job(jobs::JobArgs),
    /// Table policies: apply, list, show, pause, resume, delete.
    Policy(policy::PolicyArgs),
    /// The tables the policies keep compact, as the planner last saw them.
    Tables(policy::TablesArgs),
    /// What the planner would submit now, and why (`--dry-run`).
    Plan(policy::PlanArgs),
    /// (internal) the merge executor, run by workers as a child process.
    #[command(name = "__merge", hide = true)]
    Merge(tasks::MergeArgs),
    #[command(name = "__expire", hide = true)]
    Expire(tasks::ExpireArgs),
    /// (internal) kills a daemon's executors when the daemon dies; started
    /// by `run` (see `executor::reaper`).
    #[command(name = "__reaper", hide = true)]
    Reaper,
    /// Migrate a legacy v1 tree (Compaction/) to v2 (Compaction_V2/).
    Upgrade(upgrade::UpgradeArgs),
    /// Print the effective configuration of `run` (flags > environment >
    /// config file > defaults) as TOML, with each value's source; secrets
    /// redacted. Takes the same flags as `run`.
    Config(run::RunArgs),
    /// Print a shell completion script: `compactd completions bash > /etc/bash_completion.d/compactd`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `compactd man > /usr/share/man/man1/compactd.1`.
    Man,
}

/// The one line `compactd: error: …` prints for a failed command: each
/// error of the chain once (an error whose message already quotes its cause
/// is not followed by that cause again), with control and bidirectional
/// characters escaped (a name read from the tree must not forge a line).
pub fn error_line(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    layouts::name::shown(&msg).into_owned()
}

/// Reads a file a person named (a policy, a job definition, the
/// configuration file), at most `max` bytes: a larger one, or one that never
/// ends (`/dev/zero`), is refused once `max + 1` bytes were read, with the
/// limit in the message (the caller names the path). `what` says what the
/// file is.
pub fn read_bounded(path: &std::path::Path, max: usize, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut buf).map_err(|e| e.to_string())?;
    if buf.len() > max {
        return Err(format!("over the {max}-byte limit of {what} (reading stopped there)"));
    }
    Ok(buf)
}

/// Commands that need no backend: they print and return.
pub fn offline(loaded: &config::Loaded) -> Option<i32> {
    use clap::CommandFactory;
    match &loaded.cli.command {
        Command::Config(_) => {
            print!("{}", config::print(loaded));
            Some(0)
        }
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "compactd", &mut std::io::stdout());
            Some(0)
        }
        Command::Reaper => Some(crate::executor::reaper::serve()),
        Command::Man => {
            let man = clap_mangen::Man::new(Cli::command());
            match man.render(&mut std::io::stdout()) {
                Ok(()) => Some(0),
                Err(e) => {
                    crate::logging::eprint_line(&format!("compactd: error: writing the man page: {e}"));
                    Some(1)
                }
            }
        }
        _ => None,
    }
}

/// Runs the parsed command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let options = store::StoreOptions {
        timeout: Some(cli.backend_timeout).filter(|t| !t.is_zero()),
        retries: cli.backend_retries,
    };
    let uri = store::RootUri::parse(&cli.root)?;
    if let store::RootUri::Fs { root } = &uri {
        // Only commands that set a cluster up may create its root: a typo in
        // --root must not leave a new empty tree behind.
        let creates = match &cli.command {
            Command::Run(_) | Command::Merge(_) | Command::Define(_) | Command::Policy(_) => true,
            Command::Upgrade(a) => a.generate_fixture.is_some(),
            _ => false,
        };
        if !creates && !root.exists() {
            anyhow::bail!("no compactd tree at {} (is --root right? `compactd run` creates it)", root.display());
        }
    }
    let store = match cli.command {
        // The merge executor's --root is a data root: no links followed.
        Command::Merge(_) | Command::Expire(_) => store::Store::open_data_with_options(&uri, &options).await?,
        _ => store::Store::open_with_options(&uri, &options, |op| op).await?,
    };
    // Commands that read a cluster: a root without a tree is a wrong --root
    // (e.g. `/proc`), not an empty cluster.
    let reads = matches!(
        cli.command,
        Command::Nodes(_)
            | Command::Check(_)
            | Command::VacuumOrphans(_)
            | Command::Status(_)
            | Command::List(_)
            | Command::Stop(_)
            | Command::Reassign(_)
            | Command::History(_)
            | Command::Jobs(_)
            | Command::Job(_)
            | Command::Tables(_)
            | Command::Plan(_)
    );
    if reads && store.list(layouts::v2::ROOT).await?.is_empty() {
        anyhow::bail!(
            "no compactd tree at {}: {} is missing or empty (is --root right? `compactd run` creates it)",
            store.uri(),
            layouts::v2::ROOT
        );
    }
    match cli.command {
        Command::Run(args) => run::run(store, args).await,
        Command::Nodes(args) => nodes::run(store, args).await,
        Command::Check(args) => check::run(store, args).await,
        Command::VacuumOrphans(args) => check::vacuum_orphans(store, args).await,
        Command::Submit(args) => tasks::submit(store, args).await,
        Command::Status(args) => tasks::status(store, args).await,
        Command::List(args) => tasks::list(store, args).await,
        Command::Stop(args) => tasks::stop(store, args).await,
        Command::Reassign(args) => tasks::reassign(store, args).await,
        Command::History(args) => tasks::history(store, args).await,
        Command::Merge(args) => tasks::merge(store, args).await,
        Command::Expire(args) => tasks::expire(store, args).await,
        Command::Define(args) => jobs::define(store, args).await,
        Command::Trigger(args) => jobs::trigger(store, args).await,
        Command::Jobs(args) => jobs::list(store, args).await,
        Command::Job(args) => jobs::show(store, args).await,
        Command::Upgrade(args) => upgrade::run(store, args).await,
        Command::Policy(args) => policy::policy(store, args).await,
        Command::Tables(args) => policy::tables(store, args).await,
        Command::Plan(args) => policy::plan(store, args).await,
        Command::Config(_) | Command::Completions { .. } | Command::Man | Command::Reaper => {
            unreachable!("handled by `offline` before any backend is opened")
        }
    }
}
