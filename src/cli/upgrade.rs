//! `compactd upgrade`: migrate a legacy v1 tree (`Compaction/`) to v2
//! (`Compaction_V2/`). See `layouts/UPGRADE.md` for the protocol.
//!
//! ```text
//! compactd upgrade --dry-run        print the plan, write nothing
//! compactd upgrade                  apply (progress bar on a terminal), summary
//! compactd upgrade --verify         check every v1 task has its v2 task and lock
//! compactd upgrade --finalize       verify, then remove the v1 tree and the locks
//! ```
//!
//! Exit codes: 0 clean, 1 anything reported (failed task, orphan, problem,
//! refused finalize) or an error, 2 usage. `--json` prints JSON Lines on
//! stdout: one object per task in `--dry-run`, and always a last
//! `{"summary": …}` object. Logs go to stderr.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use anyhow::Context;
use migrate::{Mode, Options, Outcome, Report, TaskEvent};

#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    /// Print the plan and write nothing.
    #[arg(long, conflicts_with_all = ["verify", "finalize", "generate_fixture"])]
    pub dry_run: bool,

    /// Check that every v1 task has its v2 task and lock (writes only the
    /// upgrade state marker, to `complete`, when all is in place).
    #[arg(long, conflicts_with_all = ["finalize", "generate_fixture"])]
    pub verify: bool,

    /// After a passing verify, remove the v1 tree (`Compaction/`) and the
    /// locks (`Compaction_V2/TaskUpgradeLock/`).
    #[arg(long, conflicts_with = "generate_fixture")]
    pub finalize: bool,

    /// With --finalize: also remove orphan subtasks and v1 files that cannot
    /// be migrated (never a valid v1 task without its v2 task).
    #[arg(long, requires = "finalize")]
    pub force: bool,

    /// Backend operations in flight at once.
    #[arg(long, default_value_t = migrate::DEFAULT_CONCURRENCY as u64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub concurrency: u64,

    /// Machine-readable output (JSON Lines on stdout; the last line is the summary).
    #[arg(long)]
    pub json: bool,

    /// Write a generated v1 tree of N tasks into the root (tests, benchmarks).
    #[arg(long, value_name = "N", hide = true)]
    pub generate_fixture: Option<u64>,

    /// Seed of --generate-fixture.
    #[arg(long, default_value_t = 1, hide = true, requires = "generate_fixture")]
    pub seed: u64,
}

pub async fn run(store: store::Store, args: UpgradeArgs) -> anyhow::Result<i32> {
    if let Some(tasks) = args.generate_fixture {
        let spec = migrate::fixture::Spec { tasks, seed: args.seed };
        let files = migrate::fixture::write(&store, &spec, args.concurrency as usize)
            .await
            .context("generating the v1 fixture")?;
        eprintln!("wrote a v1 tree of {tasks} tasks ({files} files, seed {}) at {}", args.seed, store.uri());
        return Ok(0);
    }
    let mode = if args.dry_run {
        Mode::DryRun
    } else if args.verify {
        Mode::Verify
    } else if args.finalize {
        Mode::Finalize
    } else {
        Mode::Apply
    };
    let opts = Options { mode, concurrency: args.concurrency as usize, force: args.force, ..Options::default() };
    let bar = (!args.json && std::io::stderr().is_terminal() && mode != Mode::DryRun).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} v1 tasks {msg} [{elapsed}, {per_sec}]")
                .expect("static template"),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    });
    let failed = std::sync::atomic::AtomicU64::new(0);
    let stdout = Mutex::new(std::io::stdout());
    let on_task = |ev: &TaskEvent| {
        if matches!(ev.outcome, Outcome::Failed(_) | Outcome::Unmigrated(_)) {
            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(bar) = &bar {
            bar.inc(1);
            let f = failed.load(std::sync::atomic::Ordering::Relaxed);
            if f > 0 {
                bar.set_message(format!("({f} failed)"));
            }
        }
        if mode == Mode::DryRun {
            let mut out = stdout.lock().unwrap();
            let _ = if args.json {
                serde_json::to_writer(&mut *out, &serde_json::json!({ "task": ev }))
                    .map_err(std::io::Error::other)
                    .and_then(|_| writeln!(out))
            } else {
                writeln!(out, "{}", plan_line(ev))
            };
        }
    };
    let clock = crate::clock::SystemClock::shared();
    let started = clock.mono();
    let result = migrate::run(&store, &opts, &on_task).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = result.with_context(|| format!("upgrade of {} stopped", store.uri()))?;
    let mut out = stdout.lock().unwrap();
    if args.json {
        serde_json::to_writer(&mut *out, &serde_json::json!({ "summary": &report }))?;
        writeln!(out)?;
    } else {
        write!(out, "{}", summary(&report, clock.mono() - started))?;
    }
    out.flush()?;
    Ok(if report.is_clean() { 0 } else { 1 })
}

fn plan_line(ev: &TaskEvent) -> String {
    let target = match (&ev.v2_id, ev.v2_state) {
        (Some(id), Some(s)) => format!(" -> {id}/Status.{s}"),
        _ => String::new(),
    };
    match &ev.outcome {
        Outcome::WouldMigrate => format!("migrate  {}{target}", ev.path),
        Outcome::AlreadyDone => format!("done     {}{target}", ev.path),
        Outcome::Failed(r) => format!("FAILED   {}: {r}", ev.path),
        other => format!("{other:?} {}{target}", ev.path),
    }
}

fn summary(r: &Report, elapsed: std::time::Duration) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { r.v1_tasks as f64 / secs } else { 0.0 };
    let head = match r.mode {
        Mode::DryRun => format!(
            "dry run: {} v1 tasks: {} to migrate, {} already done, {} failed",
            r.v1_tasks, r.would_migrate, r.already_done, r.failed
        ),
        Mode::Apply => format!(
            "upgrade: {} v1 tasks: {} migrated, {} already done, {} failed",
            r.v1_tasks, r.migrated, r.already_done, r.failed
        ),
        Mode::Verify | Mode::Finalize => format!(
            "{}: {} v1 tasks: {} verified, {} not upgraded, {} failed",
            if r.mode == Mode::Verify { "verify" } else { "finalize" },
            r.v1_tasks,
            r.verified,
            r.unmigrated,
            r.failed
        ),
    };
    let _ = writeln!(s, "{head} ({secs:.1} s, {rate:.0} tasks/s)");
    let _ = writeln!(
        s,
        "subtasks: {} ({} open, carried for re-run; {} finished, counted); orphans: {}; problems: {}",
        r.subtasks, r.subtasks_open, r.subtasks_finished, r.orphans, r.problems
    );
    for i in &r.failures {
        let _ = writeln!(s, "FAILED  {i}");
    }
    for i in &r.orphan_list {
        let _ = writeln!(s, "ORPHAN  {i}");
    }
    for i in &r.problem_list {
        let _ = writeln!(s, "PROBLEM {i}");
    }
    if r.truncated {
        let _ = writeln!(s, "(lists cut at {} entries each; counts are exact)", migrate::MAX_LISTED);
    }
    if let Some(why) = &r.refused {
        let _ = writeln!(s, "finalize REFUSED: {why}");
    }
    for p in &r.removed {
        let _ = writeln!(s, "removed {p}");
    }
    let state = match r.state {
        Some(p) => format!("{p:?}").to_lowercase(),
        None => "none".into(),
    };
    let _ = writeln!(s, "upgrade state: {state}");
    s
}
