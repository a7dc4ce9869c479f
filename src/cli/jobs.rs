//! `compactd define …`, `compactd trigger`, `compactd jobs`, `compactd job`:
//! job definitions, requests and instances (see `crate::jobs`).

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use layouts::{Name, NodeId};
use serde::Serialize;
use store::Store;

use crate::jobs::{self, define, instance, JobView};

#[derive(Debug, clap::Args)]
pub struct DefineArgs {
    #[command(subcommand)]
    pub command: DefineCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum DefineCommand {
    /// Register a job definition from a JSON file; logs a new version of
    /// what changed (nothing if it is unchanged).
    Apply {
        /// The definition (`{"jobName": …, "steps": [...]}`).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a job's logged versions (the current one is marked).
    Versions {
        job: Name,
        #[arg(long)]
        json: bool,
    },
    /// Make a logged version the current definition again.
    Switch { job: Name, version: u64 },
    /// Print a definition reassembled as one JSON.
    Show {
        job: Name,
        /// A logged version instead of the current one.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Remove the current definition; its version log is kept.
    Delete { job: Name },
    /// List defined jobs with their current version.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct TriggerArgs {
    /// The job (its current definition is pinned by the instance).
    pub job: Name,
    /// The request key (e.g. a date); one instance per job and key.
    #[arg(long)]
    pub trigger: Name,
    /// A parameter for every step (`{param.NAME}`, `COMPACTD_PARAM_<NAME>`).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    /// Only instances of this job.
    #[arg(long)]
    pub job: Option<Name>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    pub job: Name,
    pub trigger: Name,
    /// Print JSON (seed 002's Job / Step / Task shapes).
    #[arg(long)]
    pub json: bool,
}

use crate::clock::wall_now_ms as now_ms;

fn when(ms: Option<u64>) -> String {
    ms.map(|ms| humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string())
        .unwrap_or_else(|| "-".into())
}

/// `<host>_<pid>`: who wrote a definition or request (for humans), and the
/// node code of the Snowflake codes it makes.
fn writer() -> NodeId {
    let host = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    let host: String = host
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let host = if host.is_empty() { "cli".into() } else { host };
    NodeId::parse(&format!("{host}_{}", std::process::id())).unwrap_or_else(|_| NodeId::parse("cli").expect("valid"))
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub async fn define(store: Store, args: DefineArgs) -> anyhow::Result<i32> {
    match args.command {
        DefineCommand::Apply { file, json } => {
            let shown = file.display().to_string();
            let bytes = super::read_bounded(&file, layouts::formats::MAX_FILE_BYTES, "a job definition")
                .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
            let spec = jobs::spec::parse(&shown, &bytes)?;
            let who = writer();
            let applied = define::apply(&store, &spec, &who, who.as_str(), now_ms()).await?;
            for w in define::warnings(&store, &spec).await? {
                super::errln!("warning: {w}");
            }
            if json {
                print_json(&applied)?;
            } else if applied.changed {
                let steps: Vec<&str> = applied.changed_steps.iter().map(Name::as_str).collect();
                super::outln!(
                    "{}: version {} (changed steps: {}; relations version {})",
                    applied.job,
                    applied.version,
                    if steps.is_empty() { "none".into() } else { steps.join(", ") },
                    applied.relations_version
                );
            } else {
                super::outln!("{}: unchanged (version {})", applied.job, applied.version);
            }
        }
        DefineCommand::Versions { job, json } => {
            let rows = define::versions(&store, &job).await?;
            if json {
                print_json(&rows)?;
            } else {
                super::outln!("{:<8} {:<8} {:<25} {:<24} STEPS", "VERSION", "CURRENT", "LOGGED", "BY");
                for r in rows {
                    let steps: Vec<String> = r.steps.iter().map(|s| format!("{}@{}", s.name, s.version)).collect();
                    super::outln!(
                        "{:<8} {:<8} {:<25} {:<24} {}",
                        r.version,
                        if r.current { "yes" } else { "" },
                        when(Some(r.wall_ms)),
                        r.by,
                        steps.join(" ")
                    );
                }
            }
        }
        DefineCommand::Switch { job, version } => {
            let def = define::switch(&store, &job, version).await?;
            super::outln!("{}: switched to version {}", def.name, def.version);
        }
        DefineCommand::Show { job, version } => {
            print_json(&define::show(&store, &job, version).await?)?;
        }
        DefineCommand::Delete { job } => {
            let v = define::delete(&store, &job).await?;
            super::outln!("{job}: deleted (was version {v}; the version log is kept)");
        }
        DefineCommand::List { json } => {
            let rows = define::list(&store).await?;
            if json {
                #[derive(Serialize)]
                struct Row {
                    #[serde(rename = "jobName")]
                    job: Name,
                    version: Option<u64>,
                }
                let rows: Vec<Row> = rows.into_iter().map(|(job, version)| Row { job, version }).collect();
                print_json(&rows)?;
            } else {
                super::outln!("{:<32} VERSION", "JOB");
                for (job, v) in rows {
                    super::outln!("{:<32} {}", job.as_str(), v.map_or("deleted".into(), |v| v.to_string()));
                }
            }
        }
    }
    Ok(0)
}

pub async fn trigger(store: Store, args: TriggerArgs) -> anyhow::Result<i32> {
    let params = instance::parse_params(&args.params)?;
    let who = writer();
    let t = jobs::trigger(&store, &args.job, &args.trigger, params, who.as_str(), now_ms()).await?;
    if t.created {
        // The monitor drives the new instance now instead of at its next sweep.
        let mut p = crate::cluster::wake::Pokes::default();
        p.monitor();
        crate::cluster::wake::poke_now(&store, &p, crate::clock::SystemClock::shared()).await;
    }
    let view = instance::view(&store, &args.job, &args.trigger, false).await?;
    if args.json {
        #[derive(Serialize)]
        struct Out {
            created: bool,
            job: JobView,
        }
        print_json(&Out { created: t.created, job: view })?;
    } else if t.created {
        super::outln!(
            "created job {}/{} (definition version {}, {} steps)",
            view.job,
            view.trigger,
            view.job_version,
            view.steps.len()
        );
    } else {
        super::outln!(
            "job {}/{} exists: {} (definition version {}, created {} by {})",
            view.job,
            view.trigger,
            view.state.as_str(),
            view.job_version,
            when(Some(view.created_wall_ms)),
            t.instance.by
        );
    }
    Ok(0)
}

pub async fn list(store: Store, args: JobsArgs) -> anyhow::Result<i32> {
    let mut views = instance::views(&store, args.job.as_ref()).await?;
    let mut schedules = jobs::cron::views(&store, now_ms()).await?;
    schedules.retain(|s| args.job.as_ref().is_none_or(|j| *j == s.job));
    for v in &mut views {
        v.schedule = schedules.iter().find(|s| s.job == v.job).cloned();
    }
    if args.json {
        print_json(&views)?;
        return Ok(0);
    }
    if !schedules.is_empty() {
        super::outln!("{:<24} {:<20} {:<20} NEXT FIRE", "SCHEDULED JOB", "SCHEDULE", "TIME ZONE");
        for s in &schedules {
            let next = s.problem.clone().unwrap_or_else(|| when(s.next_fire_ms));
            super::outln!("{:<24} {:<20} {:<20} {next}", s.job.as_str(), s.schedule, s.time_zone);
        }
        super::outln!();
    }
    super::outln!(
        "{:<24} {:<20} {:<10} {:>7} {:>9} {:<25} FINISHED",
        "JOB",
        "TRIGGER",
        "STATE",
        "VERSION",
        "STEPS OK",
        "CREATED"
    );
    for v in views {
        let ok = v.steps.iter().filter(|s| s.state == layouts::jobs::StepState::Succeeded).count();
        super::outln!(
            "{:<24} {:<20} {:<10} {:>7} {:>9} {:<25} {}",
            v.job.as_str(),
            v.trigger.as_str(),
            v.state.as_str(),
            v.job_version,
            format!("{ok}/{}", v.steps.len()),
            when(Some(v.created_wall_ms)),
            when(v.finished_wall_ms)
        );
    }
    Ok(0)
}

pub async fn show(store: Store, args: JobArgs) -> anyhow::Result<i32> {
    let mut v = instance::view(&store, &args.job, &args.trigger, true).await?;
    if let Ok(Some(def)) = define::current(&store, &args.job).await {
        v.schedule = def.schedule.is_some().then(|| jobs::cron::view(&def, now_ms()));
    }
    if args.json {
        print_json(&v)?;
        return Ok(0);
    }
    super::outln!(
        "job {}/{}: {} (definition version {}, created {}, finished {})",
        v.job,
        v.trigger,
        v.state.as_str(),
        v.job_version,
        when(Some(v.created_wall_ms)),
        when(v.finished_wall_ms)
    );
    if let Some(s) = &v.schedule {
        let next = s.problem.clone().unwrap_or_else(|| format!("next fire {}", when(s.next_fire_ms)));
        super::outln!("schedule {:?} in {}: {next}", s.schedule, s.time_zone);
    }
    super::outln!("{:<20} {:<10} {:<30} {:<25} {:<25} AFTER", "STEP", "STATE", "TASK", "STARTED", "FINISHED");
    for s in &v.steps {
        let deps: Vec<&str> = s.dependent_steps.iter().map(Name::as_str).collect();
        super::outln!(
            "{:<20} {:<10} {:<30} {:<25} {:<25} {}",
            s.name.as_str(),
            s.state.as_str(),
            s.task.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            when(s.started_wall_ms),
            when(s.finished_wall_ms),
            deps.join(",")
        );
        if let Some(r) = &s.reason {
            super::outln!("{:<20} {r}", "");
        }
    }
    Ok(0)
}
