//! What a worker writes when a unit attempt ends, and what a draining
//! worker writes to give back the attempts it will not start.
//!
//! Invariants:
//! - A report is its output tail first (only when there is something to
//!   keep: a command's output, a failure, counters), then the terminal
//!   mark; the manager reads the tail only when the mark is there.
//! - Layout 3: the terminal mark is a create (`Success` empty unless the
//!   executor reported counters, `Failed` with its reason); finding it
//!   there already is a report written before (a lost reply).
//! - A release is what a manager's take-back of an unstarted attempt is:
//!   layout 2 creates the attempt's `Status.Running` naming no incarnation
//!   (one name: if it wins, nobody ever starts the attempt), layout 3 the
//!   batch's `Released`. The manager gives the unit to another node without
//!   counting it as a failure.

use layouts::formats::{self, ExecutorKind, StatusMark};
use layouts::v3::{self, Mark};
use layouts::{v2, Name, NodeId, SubtaskState};
use store::{Created, Store};

use super::folder::{NodeFolder, Slot};
use crate::executor;

/// Writes one finished attempt's result: its output (when there is one to
/// keep), then its terminal mark.
pub(super) async fn write_report(
    store: &Store,
    me: &NodeId,
    incarnation: u64,
    wall_ms: u64,
    slot: &Slot,
    kind: ExecutorKind,
    f: &executor::Finished,
) -> store::Result<SubtaskState> {
    // Counters reported by the executor travel in the status mark; an
    // `Output` beside a success tells the manager to read them.
    let stats = crate::executor::parse_stats(&f.tail);
    if let Some(n) = stats.get("skipped_special").filter(|n| **n > 0) {
        tracing::warn!(subtask = %slot, skipped = n, "entries that are not regular files were left alone (listed in its Output)");
    }
    let keep_output = !f.tail.is_empty() && (kind == ExecutorKind::Command || !f.success || !stats.is_empty());
    let state = if f.success { SubtaskState::Success } else { SubtaskState::Failed };
    let mark = StatusMark { incarnation, wall_ms, exit_code: f.exit_code, error: f.error.clone(), stats };
    match slot {
        Slot::Sub(name) => {
            let sub = Name::parse(name).expect("listed subtask names are valid");
            if keep_output {
                store.put(&v2::subtask_output(me, &sub), f.tail.clone().into_bytes()).await?;
            }
            store.put(&v2::subtask_status(me, &sub, state), formats::encode(&mark)).await?;
        }
        Slot::Unit { batch, unit, attempt } => {
            let batch = Name::parse(batch).expect("listed batch names are valid");
            if keep_output {
                let out = v3::unit_mark(me, &batch, *unit, *attempt, Mark::Output);
                store.put(&out, f.tail.clone().into_bytes()).await?;
            }
            // Empty unless there is something to say: a success without
            // counters is the usual case, and on HDFS an empty file is 2
            // RPCs and no block.
            let say = !mark.stats.is_empty() || mark.error.is_some() || !f.success;
            let body = if say { formats::encode(&mark) } else { Vec::new() };
            let at = if f.success { Mark::Success } else { Mark::Failed };
            store.create(&v3::unit_mark(me, &batch, *unit, *attempt, at), body).await?;
        }
    }
    Ok(state)
}

/// A draining node gives back every attempt in `folder` that it has not
/// claimed (module docs): returns how many places it released, and the
/// managers to poke. Each place once: `done` remembers them.
pub(super) async fn release_unstarted(
    store: &Store,
    me: &NodeId,
    folder: &NodeFolder,
    wall_ms: u64,
    done: &mut std::collections::BTreeSet<String>,
) -> store::Result<(usize, Vec<NodeId>)> {
    let mut released = 0;
    let mut managers = vec![];
    for (name, f) in &folder.subtasks {
        if !f.has_info || !f.markers.is_empty() || done.contains(name) {
            continue;
        }
        let Ok(sub) = Name::parse(name) else { continue };
        let mark = StatusMark {
            incarnation: 0,
            wall_ms,
            error: Some(format!("released by node {me}, which is draining: it starts nothing new")),
            ..Default::default()
        };
        let won = store.create(&v2::subtask_status(me, &sub, SubtaskState::Running), formats::encode(&mark)).await?;
        done.insert(name.clone());
        if won == Created::Created {
            released += 1;
            let info = store.read_or_bad(&v2::subtask_info(me, &sub)).await?.and_then(Result::ok);
            if let Some(m) = info
                .and_then(|b| formats::decode::<formats::TaskInfo>(&b).ok())
                .and_then(|i| i.run.subtask.and_then(|s| s.manager))
            {
                managers.push(m);
            }
        }
    }
    for (name, b) in &folder.batches {
        if !b.has_info || b.released || done.contains(name) {
            continue;
        }
        let Ok(batch) = Name::parse(name) else { continue };
        store.create(&v3::batch_released(me, &batch), Vec::new()).await?;
        done.insert(name.clone());
        released += 1;
        if let Some(m) = store
            .read_or_bad(&v3::batch_info(me, &batch))
            .await?
            .and_then(Result::ok)
            .and_then(|b| formats::decode::<v3::BatchInfo>(&b).ok())
            .map(|i| i.manager)
        {
            managers.push(m);
        }
    }
    Ok((released, managers))
}
