//! `compactd upgrade --finalize`: verify, then remove the v1 tree and the
//! locks. Crash-safe by its marker: `Finalizing` is written before anything
//! is removed and goes last, with the locks folder.

use layouts::formats::UpgradePhase;
use layouts::{v1, v2};
use store::Store;

use super::{pass, read_state, write_state, MigrateError, Mode, OnTask, Options, Report};

/// `--verify` then removal of the v1 tree and the locks (the seed's last
/// picture). Refuses while verify reports anything, except that `force`
/// accepts orphans, problems and v1 files that cannot be migrated (they are
/// removed with the tree); it never accepts an unmigrated valid task.
pub async fn finalize(store: &Store, opts: &Options, on_task: OnTask<'_>) -> Result<Report, MigrateError> {
    let started = opts.clock.mono();
    let marker = read_state(store).await.ok().flatten().map(|s| s.phase());
    let mut report = if marker == Some(UpgradePhase::Finalizing) {
        // A finalize was interrupted after verify passed: just finish it.
        Report::new(Mode::Finalize)
    } else {
        let verify = Options { mode: Mode::Verify, ..opts.clone() };
        let mut r = pass(store, &verify, on_task).await?;
        r.mode = Mode::Finalize;
        if r.unmigrated > 0 {
            let why =
                format!("{} v1 task(s) have no complete v2 task or lock; run `compactd upgrade` first", r.unmigrated);
            return Ok(refuse(r, why, (opts.clock.mono() - started).as_millis() as u64));
        }
        if !r.is_clean() && !opts.force {
            let why = format!(
                "verify reported {} unmigratable task file(s), {} orphan subtask(s) and {} problem(s); \
                 fix them, or pass --force to remove them with the v1 tree",
                r.failed, r.orphans, r.problems
            );
            return Ok(refuse(r, why, (opts.clock.mono() - started).as_millis() as u64));
        }
        r
    };
    write_state(store, opts, UpgradePhase::Finalizing, report.v1_tasks).await?;
    store.delete_all(v1::ROOT).await?;
    report.removed.push(v1::ROOT.to_string());
    // The marker is inside the locks folder and goes last with it: a crash
    // before that leaves `Finalizing`, which a rerun completes.
    store.delete_all(v2::UPGRADE_LOCKS).await?;
    report.removed.push(v2::UPGRADE_LOCKS.to_string());
    report.state = None;
    report.elapsed_ms = (opts.clock.mono() - started).as_millis() as u64;
    Ok(report)
}

fn refuse(mut r: Report, why: String, elapsed_ms: u64) -> Report {
    tracing::warn!("finalize refused: {why}");
    r.refused = Some(why);
    r.elapsed_ms = elapsed_ms;
    r
}
