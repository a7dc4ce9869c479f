//! Task commands: `submit`, `status`, `list`, `stop`, `reassign`, `history`,
//! and the hidden `__merge` that the merge executor runs as a child process.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use layouts::formats::{self, ExecutorKind, ExecutorSpec, ReassignRequest};
use layouts::{v2, Name, NodeId, TaskId, TaskState};
use store::Store;

use crate::cli::run::parse_duration;
use crate::schedule::Cron;
use crate::tasks::{self, Repeat, TaskSpec};

use crate::clock::wall_now_ms as wall_ms;

fn parse_command_name(s: &str) -> Result<String, String> {
    if tasks::valid_command_name(s) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?}: a command name is letters, digits, '_', '-', '.', starting with a letter"))
    }
}

/// The pattern alone (its zone is --tz's): refused before the tree is opened.
fn parse_cron(s: &str) -> Result<String, String> {
    Cron::parse(s, crate::schedule::DEFAULT_ZONE).map(|_| s.to_string()).map_err(|e| e.to_string())
}

fn parse_zone(s: &str) -> Result<String, String> {
    crate::schedule::check_zone(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
        return Err(format!("parameter name {k:?} may only hold letters, digits, '_', '-', '.'"));
    }
    layouts::limits::check_submitted_params([&k.to_string()]).map_err(|e| e.to_string())?;
    Ok((k.to_string(), v.to_string()))
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TaskExecutorArg {
    Merge,
    Parquet,
    /// A Delta Lake table: each unit is one partition, compacted as one
    /// OPTIMIZE commit of the table.
    Delta,
    /// An Apache Iceberg table: each unit is one partition; one commit (a
    /// `replace` snapshot) for the whole task.
    Iceberg,
    /// A Delta table's retention (`VACUUM` and log cleanup) as one unit:
    /// `--param expire.older-than=DURATION`, `expire.log-older-than`,
    /// `expire.retain-last=N`, `expire.force=true` (default: the table's
    /// own retention).
    Expire,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    #[arg(long, value_parser = Name::parse)]
    pub db: Name,
    #[arg(long, value_parser = Name::parse)]
    pub schema: Name,
    #[arg(long, value_parser = Name::parse)]
    pub table: Name,
    /// A partition to compact (repeatable, at most 100000); none: every
    /// partition folder of the table on the data backend. Names starting
    /// with `_` or `.` are reserved (`_compactd/` is compactd's own).
    #[arg(long = "partition", value_parser = Name::parse)]
    pub partitions: Vec<Name>,
    /// Run as N shards instead of partitions (command executor; at most 100000).
    #[arg(long, conflicts_with = "partitions")]
    pub shards: Option<u32>,
    /// Rounds of a repeat task (0: until stopped; at most 1000000); with --interval or --cron.
    #[arg(long, requires = "when", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub repeat: Option<u32>,
    /// Pause between rounds of a repeat task.
    #[arg(long, value_parser = parse_duration, requires = "repeat", group = "when")]
    pub interval: Option<Duration>,
    /// Start the rounds of a repeat task at this 5-field cron schedule's
    /// fire instants ("0 2 * * *"); missed ones run once.
    #[arg(long, value_name = "EXPR", requires = "repeat", group = "when", value_parser = parse_cron)]
    pub cron: Option<String>,
    /// IANA time zone of --cron ("Europe/Berlin").
    #[arg(long, value_name = "ZONE", requires = "cron", default_value = crate::schedule::DEFAULT_ZONE, value_parser = parse_zone)]
    pub tz: String,
    /// The data backend holding the table (as `run --data`). When known,
    /// a merge of `--partition`s that are not folders there is refused here
    /// (otherwise the task's manager fails it).
    #[arg(long, env = "COMPACTD_DATA")]
    pub data: Option<String>,
    /// Manager node (default: the live node the ring picks).
    #[arg(long, value_parser = NodeId::parse)]
    pub manager: Option<NodeId>,
    /// Built-in executor of this task: merge (newline-delimited text),
    /// parquet (Parquet files), delta (a Delta Lake table) or iceberg (an
    /// Apache Iceberg table). Default: the
    /// nodes' `run --executor`, recorded in the task at submit (nodes that
    /// disagree are an error). A table of a format the executor does not
    /// own (Delta, Iceberg, Hudi, Hive ACID, …) is refused by name.
    #[arg(long, value_enum, conflicts_with_all = ["command", "command_name"])]
    pub executor: Option<TaskExecutorArg>,
    /// Run the command NAME that the nodes define (`run --command NAME=TEMPLATE`).
    #[arg(long, value_name = "NAME", conflicts_with = "command", value_parser = parse_command_name)]
    pub command_name: Option<String>,
    /// Run this inline command template (only nodes started with
    /// --allow-inline-commands run it; prefer --command-name).
    #[arg(long)]
    pub command: Option<String>,
    /// Executor parameter KEY=VALUE (repeatable): {param.KEY} and COMPACTD_PARAM_KEY.
    #[arg(long = "param", value_parser = parse_kv)]
    pub params: Vec<(String, String)>,
    /// Submit a task naming a command (--command-name) that no live node
    /// defines now (its units fail until a node that defines it joins).
    #[arg(long, requires = "command_name")]
    pub force: bool,
    /// Wait until the task ends, showing progress; exit 0 if Done, 1 otherwise.
    #[arg(long)]
    pub wait: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn submit(store: Store, args: SubmitArgs) -> anyhow::Result<i32> {
    let mut spec = TaskSpec::table(args.db, args.schema, args.table);
    spec.partitions = args.partitions;
    spec.shards = args.shards;
    spec.manager = args.manager;
    spec.params = args.params.into_iter().collect::<BTreeMap<_, _>>();
    if let Some(e) = args.executor {
        let kind = match e {
            TaskExecutorArg::Merge => ExecutorKind::Merge,
            TaskExecutorArg::Parquet => ExecutorKind::Parquet,
            TaskExecutorArg::Delta => ExecutorKind::Delta,
            TaskExecutorArg::Iceberg => ExecutorKind::Iceberg,
            TaskExecutorArg::Expire => ExecutorKind::Expire,
        };
        if kind == ExecutorKind::Expire && (!spec.partitions.is_empty() || spec.shards.is_some()) {
            anyhow::bail!("--executor expire runs on a whole table: no --partition or --shards");
        }
        spec.executor = Some(ExecutorSpec { kind, command: None, command_name: None, timeout_ms: None });
    }
    if args.command_name.is_some() || args.command.is_some() {
        spec.executor = Some(ExecutorSpec {
            kind: ExecutorKind::Command,
            command: args.command,
            command_name: args.command_name,
            timeout_ms: None,
        });
    }
    if let Some(rounds) = args.repeat {
        let cron = args.cron.map(|c| Cron::parse(&c, &args.tz)).transpose()?;
        spec.repeat = Some(Repeat { rounds, interval: args.interval.unwrap_or_default(), cron });
    }
    if spec.executor.is_none() {
        // The task's executor is fixed now: the nodes' common default.
        let view = crate::cluster::election::newest_lease(&store).await?;
        spec.executor = tasks::default_executor(view.as_ref())?.map(ExecutorSpec::builtin);
    }
    if let Some(name) = spec.executor.as_ref().and_then(|e| e.command_name.clone()) {
        // A command no node defines would fail every unit on every node
        // (a large task for a long time): refused now, unless insisted on.
        // A request over a limit is refused for that first.
        tasks::check_spec(&spec)?;
        let view = crate::cluster::election::newest_lease(&store).await?;
        if let Some(why) = tasks::placement::undefined_command(view.as_ref(), &name) {
            if !args.force {
                anyhow::bail!("refused: {why}; or submit anyway with --force");
            }
            super::errln!("compactd: warning: {why}; submitted anyway (--force): its units fail until one does");
        }
    }
    // With the data backend known, a table the executor must not change is
    // refused here, before a task exists (otherwise its manager fails it).
    let kind = spec.executor.as_ref().map(|e| e.kind).unwrap_or(ExecutorKind::Merge);
    if kind == ExecutorKind::Expire {
        crate::executor::expire::check_params(&spec.params).map_err(|e| anyhow::anyhow!("refused: --param {e}"))?;
        if let Some(data) = &args.data {
            let data = Store::open_data_with_options(&store::RootUri::parse(data)?, store.options())
                .await
                .with_context(|| format!("--data {data}"))?;
            let dir = tasks::table_dir(&spec.db, &spec.schema, &spec.table);
            if let Some(why) = tasks::discover::expire_refusal(&data, &dir, &spec.params).await? {
                anyhow::bail!("refused: {why}");
            }
        }
    }
    if let (Some(data), true) = (&args.data, kind.is_builtin_merge()) {
        // Limits first: no listing for a request that is refused anyway.
        layouts::limits::check_partitions(&spec.partitions)?;
        let data = Store::open_data_with_options(&store::RootUri::parse(data)?, store.options())
            .await
            .with_context(|| format!("--data {data}"))?;
        let dir = tasks::table_dir(&spec.db, &spec.schema, &spec.table);
        let listed = data.list(&dir).await?;
        let first = spec.partitions.first().cloned().or_else(|| {
            listed
                .iter()
                .filter(|e| e.is_dir && !layouts::limits::reserved_partition(e.name()))
                .find_map(|e| Name::parse(e.name()).ok())
        });
        if let Some(why) = tasks::discover::refusal(&data, &dir, Some(&listed), first.as_ref(), kind).await? {
            anyhow::bail!("refused: {why}");
        }
        // A Delta or Iceberg table's partitions are values of its log or
        // manifests, checked by the unit itself.
        if !spec.partitions.is_empty() && !matches!(kind, ExecutorKind::Delta | ExecutorKind::Iceberg) {
            if let Some(why) = tasks::missing_partitions(&data, &dir, &spec.partitions).await? {
                anyhow::bail!("{why} (a command task whose partitions are not folders: --command-name)");
            }
        }
    }
    let placed = tasks::submit_placed(&store, spec, wall_ms()).await?;
    // The view submit read gives the manager's address: no second read.
    let mut pokes = crate::cluster::wake::Pokes::default();
    pokes.work(&placed.manager);
    crate::cluster::wake::poke_in_view(&store, placed.view.as_ref(), &pokes, crate::clock::SystemClock::shared()).await;
    let id = placed.id;
    if args.json {
        println!("{}", serde_json::json!({ "id": id }));
    } else {
        super::outln!("{id}");
    }
    if !args.wait {
        return Ok(0);
    }
    let mut hint = EndHint::of(&placed);
    // A progress bar on a terminal; plain lines (one per change) otherwise,
    // for logs and scripts.
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {prefix} [{bar:30}] {pos}/{len} units {msg} [{elapsed}]",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        b.set_prefix(id.to_string());
        b.enable_steady_tick(Duration::from_millis(120));
        b
    });
    let mut last = String::new();
    // Quick looks first (work usually starts within milliseconds), then
    // slower ones: each look is two reads.
    let mut pause = Duration::from_millis(25);
    let mut waited = Duration::ZERO;
    loop {
        let mut dir = tasks::read_dir(&store, &id).await?;
        let info = tasks::read_info(&store, &id).await?;
        let state = dir.state.unwrap_or(TaskState::Init);
        let r = tasks::read_counts(&store, &id, &mut dir, &info).await?;
        let line = format!("{id}: {state} round {} success {} failed {}", info.run.round, r.success, r.failed);
        match &bar {
            Some(b) => {
                let units = info.run.shards.map(u64::from).unwrap_or(info.run.partitions.len() as u64);
                b.set_length(units.max(r.success + r.failed));
                b.set_position(r.success + r.failed);
                b.set_message(format!("{state}, {} failed", r.failed));
            }
            None if line != last => super::errln!("{line}"),
            None => {}
        }
        last = line;
        if state.is_terminal() {
            if let Some(b) = &bar {
                b.finish_and_clear();
                super::errln!("{last}");
            }
            if let Some(e) = &info.run.error {
                super::errln!("{id}: {e}");
            }
            return Ok(if state == TaskState::Done { 0 } else { 1 });
        }
        hint.pause(&id, pause).await;
        // Short tasks end soon after they start: look often for the first
        // half minute (each look is a listing and a read), then once a second.
        waited += pause;
        let cap = if waited < Duration::from_secs(30) { Duration::from_millis(250) } else { Duration::from_secs(1) };
        pause = (pause * 3 / 2).min(cap);
    }
}

/// The manager's listener, asked between looks to answer as soon as it has
/// seen the task end ([`crate::cluster::wake::ended`]): a hint, the next look reads
/// the task. Dropped for the rest of the wait once it cannot be asked (no
/// address, an older version, a refusal), and the looks go on alone.
struct EndHint(Option<(reqwest::Client, String)>);

impl EndHint {
    fn of(placed: &tasks::Placed) -> EndHint {
        let addr = placed
            .view
            .as_ref()
            .and_then(|v| v.members.iter().find(|m| m.node == placed.manager).and_then(|m| m.addr.clone()));
        let client = reqwest::Client::builder().no_proxy().build().ok();
        EndHint(addr.zip(client).map(|(a, c)| (c, format!("http://{a}/v1/tasks/{}/ended", placed.id))))
    }

    /// Returns after `pause`, or sooner once the manager says the task
    /// ended.
    async fn pause(&mut self, id: &TaskId, pause: Duration) {
        // The CLI edge: a person waits on real time.
        #[allow(clippy::disallowed_methods)]
        let start = std::time::Instant::now();
        if let Some((client, url)) = &self.0 {
            let asked = client
                .get(format!("{url}?wait_ms={}", pause.as_millis()))
                .timeout(pause + Duration::from_secs(1))
                .send()
                .await;
            let ended = match asked {
                Ok(r) if r.status().is_success() => small_body(r).await.map(|b| {
                    let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                    v["ended"] == serde_json::Value::Bool(true) && v["task"].as_str() == Some(&id.to_string())
                }),
                _ => None,
            };
            match ended {
                // Once: should the next look not see the end yet (a
                // listing that lags the manager's), the looks go on at
                // their pace instead of asking again and again.
                Some(true) => {
                    self.0 = None;
                    return;
                }
                Some(false) => {}
                None => self.0 = None,
            }
        }
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(pause.saturating_sub(start.elapsed())).await;
    }
}

/// A reply's body if it is a few KiB at most (the answer is a line).
async fn small_body(mut r: reqwest::Response) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = r.chunk().await.ok()? {
        body.extend_from_slice(&chunk);
        if body.len() > 4096 {
            return None;
        }
    }
    Some(body)
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(value_parser = TaskId::parse)]
    pub task: TaskId,
    #[arg(long)]
    pub json: bool,
}

pub async fn status(store: Store, args: StatusArgs) -> anyhow::Result<i32> {
    let s = tasks::status(&store, &args.task).await?;
    for p in &s.skipped {
        super::errln!("compactd: skipping {p}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(0);
    }
    super::outln!("task {}  {}.{}.{}", s.id, s.db, s.schema, s.table);
    super::outln!(
        "state {}  round {}  manager {}  success {}  failed {}",
        s.state,
        s.round,
        s.manager.as_deref().unwrap_or("-"),
        s.result.success,
        s.result.failed
    );
    if s.stop_requested && !s.state.is_terminal() {
        super::outln!("stop requested");
    }
    if let (Some(next), false) = (s.next_round_at_ms, s.state.is_terminal()) {
        let at = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(next));
        match &s.repeat.cron {
            Some(c) => {
                let tz = s.repeat.time_zone.as_deref().unwrap_or(crate::schedule::DEFAULT_ZONE);
                super::outln!("next round {at} (schedule {c:?} in {tz})");
            }
            None => super::outln!("next round {at}"),
        }
    }
    if let Some(e) = &s.error {
        super::outln!("error: {e}");
    }
    for f in &s.failures {
        super::outln!("unit {} failed: {}", f.unit, f.error.as_deref().unwrap_or("(no error recorded)"));
    }
    if !s.stats.is_empty() {
        let figures: Vec<String> = s.stats.iter().map(|(k, v)| format!("{k} {v}")).collect();
        super::outln!("figures: {}", figures.join(", "));
    }
    if !s.table_versions.is_empty() {
        super::outln!("{:<6} {:<28} {:>10} {:>10}  RESULT", "UNIT", "PARTITION", "VERSION", "COMMITTED");
        for v in &s.table_versions {
            let after = v.version_after.map(|a| a.to_string()).unwrap_or_else(|| "-".into());
            let what = if v.abandoned {
                "abandoned: a concurrent commit conflicted".to_string()
            } else if v.version_after == Some(v.version_before) {
                "nothing to compact".to_string()
            } else {
                let g = |k: &str| v.figure(k);
                let files = format!("{} files into {}, {} rows", g("files_in"), g("files_out"), g("rows_out"));
                match v.snapshots() {
                    Some((read, after)) => format!(
                        "snapshot {read} -> {}: {files}, {} bytes into {}",
                        after.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
                        g("bytes_in"),
                        g("bytes_out")
                    ),
                    None => files,
                }
            };
            let part = v.partition.as_deref().unwrap_or(if v.snapshots().is_some() { "(commit)" } else { "" });
            super::outln!("{:<6} {:<28} {:>10} {:>10}  {what}", v.unit, part, v.version_before, after);
        }
    }
    if !s.subtasks.is_empty() {
        super::outln!("{:<52} {:<20} {:<16} {:<8} {:>7}", "SUBTASK", "PARTITION", "NODE", "STATE", "ATTEMPT");
        for t in &s.subtasks {
            let unit = t.partition.clone().or(t.shard.map(|s| format!("shard {s}"))).unwrap_or_default();
            super::outln!("{:<52} {:<20} {:<16} {:<8} {:>7}", t.id, unit, t.node, t.state.as_str(), t.attempt);
        }
    }
    Ok(0)
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
    /// Show at most this many tasks, newest first (at most 10000000); 0 shows all.
    #[arg(long, default_value_t = 100, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(0..=10_000_000), |n| n as usize))]
    pub limit: usize,
    /// Only tasks in these states (comma-separated or repeated: Init, Running,
    /// Done, Failed, Cancel).
    #[arg(long, value_delimiter = ',', value_parser = TaskState::parse)]
    pub state: Vec<TaskState>,
}

pub async fn list(store: Store, args: ListArgs) -> anyhow::Result<i32> {
    let query = tasks::TaskQuery { limit: (args.limit > 0).then_some(args.limit), states: args.state.clone() };
    let page = tasks::list_page(&store, &query).await?;
    for p in &page.problems {
        super::errln!("skipped {p}");
    }
    let rows = page.rows;
    // Only a limit hides tasks; a skipped one was named above.
    if page.read < page.matched {
        super::errln!(
            "showing the newest {} of {} tasks{} (--limit 0 shows all)",
            page.read,
            page.matched,
            if args.state.is_empty() { String::new() } else { format!(" in the asked states ({} in all)", page.total) }
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    super::outln!(
        "{:<32} {:<8} {:<30} {:<16} {:>5} {:>8} {:>7}",
        "TASK",
        "STATE",
        "TABLE",
        "MANAGER",
        "ROUND",
        "SUCCESS",
        "FAILED"
    );
    for r in rows {
        let state = r.state.map(|s| s.as_str()).unwrap_or("(no status)");
        super::outln!(
            "{:<32} {:<8} {:<30} {:<16} {:>5} {:>8} {:>7}",
            r.id.to_string(),
            state,
            r.table,
            r.manager.as_deref().unwrap_or("-"),
            r.round,
            r.success,
            r.failed
        );
    }
    Ok(0)
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    #[arg(value_parser = TaskId::parse)]
    pub task: TaskId,
}

pub async fn stop(store: Store, args: StopArgs) -> anyhow::Result<i32> {
    tasks::stop(&store, &args.task, "cli", wall_ms()).await?;
    if let Some(m) = tasks::manager_of(&store, &args.task).await {
        poke_work(&store, &m).await;
    }
    super::outln!("stop requested for {}; its manager cancels it", args.task);
    Ok(0)
}

#[derive(Debug, clap::Args)]
pub struct ReassignArgs {
    /// A subtask id (`<task>.r<round>.u<unit>.a<attempt>`) or, with --manager, a task id.
    pub id: String,
    /// Target node for a subtask (default: the next live node on the ring).
    #[arg(long, value_parser = NodeId::parse, conflicts_with = "manager")]
    pub to: Option<NodeId>,
    /// Give the task's manager role to this node.
    #[arg(long, value_parser = NodeId::parse)]
    pub manager: Option<NodeId>,
}

pub async fn reassign(store: Store, args: ReassignArgs) -> anyhow::Result<i32> {
    if let Some(node) = args.manager {
        let id = TaskId::parse(&args.id).context("--manager takes a task id")?;
        let view = tasks::current_view(&store).await?;
        if let Some(refused) = tasks::why_not_manager(view.as_ref(), &node) {
            return Err(refused.into());
        }
        let term = tasks::reassign_manager(&store, &id, &node, "reassign", wall_ms()).await?;
        poke_work(&store, &node).await;
        super::outln!("task {id} is managed by {node} from term {term}");
        return Ok(0);
    }
    let (task, _, unit, _) = v2::parse_subtask_name(&args.id)
        .context("not a subtask id (<task>.r<round>.u<unit>.a<attempt>); for a task's manager use --manager NODE")?;
    if let Some(to) = &args.to {
        if !tasks::live_members(&store).await?.contains(to) {
            anyhow::bail!("node {to} is not a live member");
        }
    }
    let req = ReassignRequest { to: args.to, wall_ms: wall_ms() };
    store.put(&v2::reassign_request(&task, unit), formats::encode(&req)).await?;
    if let Some(m) = tasks::manager_of(&store, &task).await {
        poke_work(&store, &m).await;
    }
    super::outln!("reassign requested for unit {unit} of task {task}; its manager moves it");
    Ok(0)
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[arg(long)]
    pub json: bool,
}

pub async fn history(store: Store, args: HistoryArgs) -> anyhow::Result<i32> {
    let (tasks, bad) = crate::monitor::tasks::read_history(&store).await?;
    for a in &bad {
        super::errln!("skipping {a}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&tasks)?);
        return Ok(0);
    }
    super::outln!("{:<32} {:<8} {:<30} {:>8} {:>7}", "TASK", "STATE", "TABLE", "SUCCESS", "FAILED");
    for t in tasks {
        let i = &t.info;
        super::outln!(
            "{:<32} {:<8} {:<30} {:>8} {:>7}",
            i.id.to_string(),
            t.state.as_str(),
            format!("{}.{}.{}", i.db_name, i.schema_name, i.table_name),
            i.result.success_count,
            i.result.failed_count
        );
    }
    Ok(0)
}

/// Arguments of the merge executor's child process (run by workers).
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    #[arg(long)]
    pub dir: String,
    #[arg(long)]
    pub task: String,
    #[arg(long)]
    pub round: u32,
    #[arg(long)]
    pub attempt: u32,
    #[arg(long, value_parser = crate::cli::run::parse_target_size)]
    pub target_size: u64,
    /// What the partition's files are.
    #[arg(long, value_enum, default_value = "lines")]
    pub format: MergeFormat,
    /// Codec of Parquet outputs.
    #[arg(long, default_value = "zstd", value_parser = crate::executor::merge::parquet::parse_compression)]
    pub compression: parquet::basic::Compression,
    /// Scheduler root whose --fence-dir must still exist right before the commit.
    #[arg(long, requires = "fence_dir")]
    pub fence_root: Option<String>,
    #[arg(long, requires = "fence_root")]
    pub fence_dir: Option<String>,
    /// Files written more recently than this are no inputs (`10m`, `1h`;
    /// `0`: any age). Default: the task's `merge.min-age` parameter, else 0.
    #[arg(long)]
    pub min_age: Option<String>,
    /// `--format delta`: the unit, a partition of the table's log
    /// (`col=value[,col=value…]`, or `whole-table`); --dir is the table.
    #[arg(long)]
    pub partition: Option<String>,
}

/// `compactd __expire`: one unit of an `expire` task, the retention of
/// one table (the task's `expire.*` parameters reach it as
/// `COMPACTD_PARAM_EXPIRE_*`).
#[derive(Debug, clap::Args)]
pub struct ExpireArgs {
    /// The table's folder, `<db>/<schema>/<table>/`.
    #[arg(long)]
    pub dir: String,
    /// Name what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Scheduler root whose --fence-dir must still exist when the run starts.
    #[arg(long, requires = "fence_dir")]
    pub fence_root: Option<String>,
    #[arg(long, requires = "fence_root")]
    pub fence_dir: Option<String>,
}

pub async fn expire(data: Store, args: ExpireArgs) -> anyhow::Result<i32> {
    if args.dir.split('/').any(|p| p == ".." || p == ".") || args.dir.starts_with('/') {
        anyhow::bail!("invalid table folder {:?}", args.dir);
    }
    let mut retention = crate::executor::expire::retention(crate::executor::param_from_env)?;
    retention.dry_run = args.dry_run;
    let fence = match (args.fence_root, args.fence_dir) {
        (Some(root), Some(dir)) => {
            Some((Store::open_with_options(&store::RootUri::parse(&root)?, data.options(), |op| op).await?, dir))
        }
        _ => None,
    };
    let job = crate::executor::expire::ExpireJob {
        table: format!("{}/", args.dir.trim_end_matches('/')),
        retention,
        fence,
        // The CLI edge: the one place this child process reads the clock.
        now: crate::clock::wall_time(&*crate::clock::SystemClock::shared()),
        catalog: crate::executor::iceberg::catalog::Catalog::from_params(crate::executor::param_from_env).await?,
    };
    let (outcome, stats) = crate::executor::expire::run(&data, &job).await?;
    println!("{outcome}");
    println!("{}{}", crate::executor::STATS_PREFIX, serde_json::to_string(&stats)?);
    Ok(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MergeFormat {
    Lines,
    Parquet,
    /// A Delta Lake table: --dir is the table, --partition the unit.
    Delta,
    /// An Apache Iceberg table: --dir is the table, --partition the unit
    /// (or `_commit`: the task's commit of what its units staged).
    Iceberg,
}

pub async fn merge(data: Store, args: MergeArgs) -> anyhow::Result<i32> {
    if args.dir.split('/').any(|p| p == ".." || p == ".") || args.dir.starts_with('/') {
        anyhow::bail!("invalid partition folder {:?}", args.dir);
    }
    // A test seam (the `testing` feature only): a pause after staging, so
    // that a kill in a process test lands before the commit.
    #[cfg(feature = "testing")]
    let delay = std::env::var("COMPACTD_TEST_MERGE_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or_default();
    #[cfg(not(feature = "testing"))]
    let delay = Duration::ZERO;
    let fence = match (args.fence_root, args.fence_dir) {
        (Some(root), Some(dir)) => {
            Some((Store::open_with_options(&store::RootUri::parse(&root)?, data.options(), |op| op).await?, dir))
        }
        _ => None,
    };
    // The task's parameters reach executors as `COMPACTD_PARAM_<NAME>`.
    let min_age = match args.min_age.or_else(|| std::env::var(crate::executor::merge::MIN_AGE_ENV).ok()) {
        Some(s) => layouts::units::parse_duration_or_zero(&s)
            .map_err(|e| anyhow::anyhow!("{}: {e}", crate::executor::merge::MIN_AGE_PARAM))?,
        None => Duration::ZERO,
    };
    let job = crate::executor::merge::MergeJob {
        min_age,
        dir: args.dir,
        task: args.task,
        round: args.round,
        attempt: args.attempt,
        target_size: args.target_size,
        delay_before_commit: delay,
        fence,
        // The CLI edge: the one place this child process reads the clock.
        now: crate::clock::wall_time(&*crate::clock::SystemClock::shared()),
        format: match args.format {
            MergeFormat::Lines => crate::executor::merge::Format::Lines,
            MergeFormat::Parquet | MergeFormat::Delta | MergeFormat::Iceberg => {
                crate::executor::merge::Format::Parquet(crate::executor::merge::parquet::ParquetOptions::for_target(
                    args.target_size,
                    args.compression,
                ))
            }
        },
        io: crate::executor::throttle::Throttle::from_env()?,
    };
    if args.format == MergeFormat::Iceberg {
        let partition = args.partition.context("--format iceberg needs --partition (a unit of the table)")?;
        let clock = crate::clock::SystemClock::shared();
        let mut job = crate::executor::iceberg::IcebergJob::new(job, partition, clock);
        // The task's parameters, as the worker passes parameters to executors.
        let param = crate::executor::param_from_env;
        job.catalog = crate::executor::iceberg::catalog::Catalog::from_params(&param).await?;
        job.sizing =
            crate::executor::iceberg::Sizing::from_params(param, args.target_size).map_err(anyhow::Error::msg)?;
        let (outcome, stats) = crate::executor::iceberg::run(&data, &job).await?;
        println!("{outcome}");
        println!("{}{}", crate::executor::STATS_PREFIX, serde_json::to_string(&stats)?);
        return Ok(0);
    }
    if args.format == MergeFormat::Delta {
        let partition = args.partition.context("--format delta needs --partition (a unit of the table)")?;
        let clock = crate::clock::SystemClock::shared();
        let job = crate::executor::delta::DeltaJob { merge: job, partition, clock };
        let (outcome, stats) = crate::executor::delta::run(&data, &job).await?;
        println!("{outcome}");
        println!("{}{}", crate::executor::STATS_PREFIX, serde_json::to_string(&stats)?);
        return Ok(0);
    }
    // Listed before the run: `_compactd/` links are removed by the run.
    let special = crate::executor::merge::special_entries(&data, &job.dir).await?;
    for (path, kind) in &special {
        tracing::warn!(path, kind, "not a regular file: left alone, not read");
        println!("skipped {kind}: {path}");
    }
    let (outcome, mut stats) = crate::executor::merge::run_with_stats(&data, &job).await?;
    println!("{outcome:?}");
    // Counters only when there is something to report: a stats line makes
    // the worker store the output and the manager read it (two requests),
    // which a merge that changed nothing does not need.
    if !special.is_empty() {
        stats.insert("skipped_special".into(), special.len() as u64);
    }
    if !stats.is_empty() {
        println!("{}{}", crate::executor::STATS_PREFIX, serde_json::to_string(&stats)?);
    }
    Ok(0)
}

/// Wakes `node` to look at its folder now (a hint: it polls anyway).
async fn poke_work(store: &Store, node: &NodeId) {
    let mut p = crate::cluster::wake::Pokes::default();
    p.work(node);
    crate::cluster::wake::poke_now(store, &p, crate::clock::SystemClock::shared()).await;
}
