//! Scheduled jobs: a job definition with a `schedule` (a 5-field cron
//! pattern, in `timeZone`, default UTC) is triggered by the monitor's job
//! drive at each fire instant, with [`crate::schedule`]'s daylight-saving
//! rules.
//!
//! - **Exactly once.** The instance of fire instant `F` has the trigger
//!   `cron-<F in unix ms>` and is created through [`trigger`]'s one atomic
//!   create, so two monitors that both find `F` due (a fenced old one and a
//!   new one) make one instance between them.
//! - **Catch-up: run once.** The last fire instant of a job is its newest
//!   `cron-*` instance, read off the drive's listing of instances (no extra
//!   request); a definition version logged later counts instead, so a new
//!   or changed schedule does not fire for the past. Only the latest fire
//!   instant since then is triggered ([`Cron::due`]): a monitor back after
//!   three days triggers once, not three times, and every monitor that
//!   looks then picks the same instant, hence the same trigger.
//! - **Cost.** The drive looks at schedules at most once per sweep
//!   interval, and at the next fire instant (the node waits no longer than
//!   that): one LIST of `Definitions/` and one GET of each job's main copy.

use std::collections::BTreeMap;

use layouts::jobs::{self as paths, JobDefinition};
use layouts::{Name, NodeId};
use store::Store;

use super::instance::{trigger, ScheduleView};
use super::{define, JobError};
use crate::schedule::{Cron, ScheduleError, DEFAULT_ZONE};

/// Prefix of the triggers the schedule makes.
pub const TRIGGER_PREFIX: &str = "cron-";

/// The trigger of fire instant `fire_ms`.
pub fn trigger_name(fire_ms: u64) -> Name {
    Name::parse(&format!("{TRIGGER_PREFIX}{fire_ms}")).expect("digits make a valid name")
}

/// The fire instant a schedule's trigger stands for; `None` for other
/// triggers (`compactd trigger` keys).
pub fn fire_of(trigger: &Name) -> Option<u64> {
    let digits = trigger.as_str().strip_prefix(TRIGGER_PREFIX)?;
    digits.bytes().all(|b| b.is_ascii_digit()).then(|| digits.parse().ok())?
}

/// The schedule of a stored definition; an error for one that does not
/// parse (written by hand or by a foreign writer).
pub fn cron_of(def: &JobDefinition) -> Option<Result<Cron, ScheduleError>> {
    let expr = def.schedule.as_deref()?;
    Some(Cron::parse(expr, def.time_zone.as_deref().unwrap_or(DEFAULT_ZONE)))
}

/// Every defined job (main copy) that has a schedule, by name. A main copy
/// that does not read is left to `check` (and to the drive's other duties).
pub async fn scheduled(store: &Store) -> Result<Vec<JobDefinition>, JobError> {
    let mut out = vec![];
    for e in store.list(paths::DEFINITIONS).await? {
        let Some(job) = e.is_dir.then(|| Name::parse(e.name()).ok()).flatten() else {
            continue;
        };
        if let Ok(Some(def)) = define::current(store, &job).await {
            if def.schedule.is_some() {
                out.push(def);
            }
        }
    }
    Ok(out)
}

/// The schedules of the defined jobs as of `wall_ms`.
pub async fn views(store: &Store, wall_ms: u64) -> Result<Vec<ScheduleView>, JobError> {
    Ok(scheduled(store).await?.iter().map(|def| view(def, wall_ms)).collect())
}

pub fn view(def: &JobDefinition, wall_ms: u64) -> ScheduleView {
    let parsed = cron_of(def);
    ScheduleView {
        job: def.name.clone(),
        schedule: def.schedule.clone().unwrap_or_default(),
        time_zone: def.time_zone.clone().unwrap_or_else(|| DEFAULT_ZONE.into()),
        next_fire_ms: parsed.as_ref().and_then(|c| c.as_ref().ok()).and_then(|c| c.next_after(wall_ms)),
        problem: parsed.and_then(Result::err).map(|e| e.to_string()),
    }
}

/// What [`fire_due`] did.
#[derive(Debug, Default)]
pub struct Fired {
    /// (job, trigger) of the instances it created, to be driven in the
    /// same round.
    pub created: Vec<(Name, Name)>,
    /// Schedules that could not be looked at or triggered.
    pub errors: Vec<String>,
    /// The next fire instant of any schedule.
    pub next_fire_ms: Option<u64>,
}

/// Triggers the due fire instant of every scheduled job (see the module
/// doc). `instances` is the drive's listing.
pub async fn fire_due(
    store: &Store,
    me: &NodeId,
    wall_ms: u64,
    instances: &[(Name, Name, bool)],
) -> Result<Fired, JobError> {
    let mut last: BTreeMap<&Name, u64> = BTreeMap::new();
    for (job, fire) in instances.iter().filter_map(|(j, t, _)| Some((j, fire_of(t)?))) {
        let e = last.entry(job).or_insert(fire);
        *e = (*e).max(fire);
    }
    let mut out = Fired::default();
    for def in scheduled(store).await? {
        let cron = match cron_of(&def) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                out.errors.push(format!("{}: {e}", paths::job_main(&def.name)));
                continue;
            }
            None => continue,
        };
        let since = last.get(&def.name).copied().unwrap_or(0).max(def.wall_ms);
        if let Some(fire) = cron.due(Some(since), wall_ms) {
            let name = trigger_name(fire);
            match trigger(store, &def.name, &name, BTreeMap::new(), me.as_str(), wall_ms).await {
                Ok(t) if t.created => {
                    tracing::info!(job = %def.name, trigger = %name, "scheduled job triggered");
                    out.created.push((def.name.clone(), name));
                }
                // Another monitor made it: it is in the next listing.
                Ok(_) => {}
                Err(JobError::Store(e)) => return Err(e.into()),
                Err(e) => out.errors.push(format!("{}/{name}: {e}", def.name)),
            }
        }
        if let Some(next) = cron.next_after(wall_ms) {
            out.next_fire_ms = Some(out.next_fire_ms.map_or(next, |n| n.min(next)));
        }
    }
    Ok(out)
}
