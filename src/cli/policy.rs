//! `compactd policy …`, `compactd tables`, `compactd plan --dry-run`: table
//! policies and what the planner makes of them (see `crate::policy`).

use std::path::PathBuf;

use anyhow::Context;
use layouts::Name;
use serde::Serialize;
use store::Store;

use crate::clock::wall_now_ms;
use crate::policy::{define, spec, view};

#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Register a policy from a TOML file; logs a new version if it changed.
    Apply {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// List the policies with their version and state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Print a policy (the current definition, or a logged version).
    Show {
        policy: Name,
        #[arg(long)]
        version: Option<u64>,
    },
    /// Stop submitting for the policy's tables (running tasks finish).
    Pause { policy: Name },
    /// Submit again for a paused policy's tables.
    Resume { policy: Name },
    /// Delete a policy: nothing new is submitted for its tables (running
    /// tasks finish; a table another policy matches goes to that one). Its
    /// version log is kept.
    Delete { policy: Name },
}

#[derive(Debug, clap::Args)]
pub struct TablesArgs {
    /// One JSON array, one object per table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Judge every table now without writing anything (the only mode: the
    /// planner itself runs in the monitor).
    #[arg(long, required = true)]
    pub dry_run: bool,
    /// The data backend (`run --data`) whose tables the policies match.
    #[arg(long, env = "COMPACTD_DATA", default_value = "./data")]
    pub data: String,
    #[arg(long)]
    pub json: bool,
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn who() -> String {
    let host = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    format!("{host}_{}", std::process::id())
}

pub async fn policy(store: Store, args: PolicyArgs) -> anyhow::Result<i32> {
    match args.command {
        PolicyCommand::Apply { file, json } => {
            let bytes = super::read_bounded(&file, layouts::formats::MAX_FILE_BYTES, "a policy file")
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", file.display()))?;
            let def = spec::parse(&file.display().to_string(), &text)?;
            let applied = define::apply(&store, def, &who(), wall_now_ms()).await?;
            if applied.changed {
                poke_planner(&store).await;
            }
            if json {
                print_json(&applied)?;
            } else if applied.changed {
                super::outln!("policy {} version {}", applied.policy, applied.version);
            } else {
                super::outln!("policy {} unchanged (version {})", applied.policy, applied.version);
            }
        }
        PolicyCommand::List { json } => {
            let mut bad = vec![];
            let rows = define::list(&store, &mut bad).await?;
            for e in &bad {
                super::errln!("compactd: skipping: {e}");
            }
            if json {
                print_json(&rows)?;
            } else {
                super::outln!("{:<20} {:>7} {:<7} {:<10} TABLES", "POLICY", "VERSION", "STATE", "EXECUTOR");
                for r in rows {
                    let d = &r.definition;
                    super::outln!(
                        "{:<20} {:>7} {:<7} {:<10} {}",
                        d.name.as_str(),
                        d.version,
                        if r.paused { "paused" } else { "active" },
                        d.executor,
                        d.tables.join(" ")
                    );
                }
            }
            if !bad.is_empty() {
                return Ok(1);
            }
        }
        PolicyCommand::Show { policy, version } => {
            let def = match version {
                Some(v) => define::version(&store, &policy, v).await?,
                None => define::current(&store, &policy)
                    .await?
                    .ok_or_else(|| crate::policy::PolicyError::NotFound { policy: policy.to_string() })?,
            };
            let paused = define::is_paused(&store, &policy).await?;
            print_json(&define::PolicyRow { definition: def, paused })?;
        }
        PolicyCommand::Pause { policy } => {
            define::pause(&store, &policy, &who(), wall_now_ms()).await?;
            super::outln!("policy {policy} paused");
        }
        PolicyCommand::Resume { policy } => {
            define::resume(&store, &policy).await?;
            poke_planner(&store).await;
            super::outln!("policy {policy} resumed");
        }
        PolicyCommand::Delete { policy } => {
            let version = define::delete(&store, &policy).await?;
            super::outln!(
                "policy {policy} deleted (was version {version}; its version log is kept): nothing new is submitted \
                 for its tables, tasks already submitted finish"
            );
        }
    }
    Ok(0)
}

/// Tells the monitor's planner that a policy changed: it starts a pass at
/// once instead of at its interval (a hint: a lost poke costs the wait).
async fn poke_planner(store: &Store) {
    let mut pokes = crate::cluster::wake::Pokes::default();
    pokes.policy();
    crate::cluster::wake::poke_now(store, &pokes, crate::clock::SystemClock::shared()).await;
}

pub async fn tables(store: Store, args: TablesArgs) -> anyhow::Result<i32> {
    let mut bad = vec![];
    let rows = view::tables(&store, usize::MAX, &mut bad, wall_now_ms()).await?;
    for e in &bad {
        super::errln!("compactd: skipping: {e}");
    }
    if args.json {
        print_json(&rows)?;
    } else {
        super::outln!(
            "{:<32} {:<16} {:>10} {:>11} {:>9} {:<20} STATE",
            "TABLE",
            "POLICY",
            "PARTITIONS",
            "SMALL FILES",
            "IN FLIGHT",
            "LAST COMPACTION"
        );
        for t in &rows {
            let s = &t.summary;
            let last = s
                .last_compaction_wall_ms
                .map(|ms| {
                    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
                        .to_string()
                })
                .unwrap_or_else(|| "-".into());
            let state = format!("{}: {}", t.status.state, t.status.reason);
            super::outln!(
                "{:<32} {:<16} {:>10} {:>11} {:>9} {:<20} {}",
                t.table,
                s.policy,
                s.partitions,
                s.small_files,
                s.in_flight,
                last,
                state
            );
            if let Some(c) = &t.last_compaction {
                super::outln!("  last compaction: {}", c.describe());
            }
            if let Some(r) = &t.retention {
                super::outln!("  retention: {r}");
            }
        }
    }
    Ok(if bad.is_empty() { 0 } else { 1 })
}

pub async fn plan(store: Store, args: PlanArgs) -> anyhow::Result<i32> {
    let uri = store::RootUri::parse(&args.data)?;
    let data = store::Store::open_data_with_options(&uri, store.options()).await?;
    let dry = view::plan(&store, &data, wall_now_ms()).await?;
    if args.json {
        print_json(&dry)?;
    } else {
        if dry.would_submit.is_empty() {
            super::outln!("nothing would be submitted now");
        }
        for s in &dry.would_submit {
            super::outln!("would submit {s}");
        }
        for s in &dry.not_visited {
            super::outln!("not planned now: {s}");
        }
        let assumed = if dry.slots_assumed { " (no node has run yet: one node's default assumed)" } else { "" };
        super::outln!("{} executor slots{assumed}; {} planner task(s) in flight", dry.slots, dry.in_flight);
        for t in &dry.tables {
            super::outln!("{}/{}/{}: {}", t.db, t.schema, t.table, t.state);
        }
        for e in &dry.errors {
            super::errln!("compactd: {e}");
        }
    }
    Ok(if dry.errors.is_empty() { 0 } else { 1 })
}
