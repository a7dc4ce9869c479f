//! A new manager's rebuild of a running task from the tree: its subtask
//! folders (layout 2) and batches (layout 3) on every node, from the
//! tick's one recursive listing of `TaskAssigned/` plus one read of each
//! batch's `Info`. The newest attempt of each unit of the current round
//! stays in flight; older attempts' folders are deleted and older attempts
//! in batches released; batches already recorded, of other rounds, or
//! without an `Info` and without a unit's marker (a create cut short) are
//! deleted. A batch without `Info` that holds markers (its folder vanished
//! and its manager marked `Cancel` there, or it was emptied while a unit
//! ran) is kept, its units known from their markers: a unit whose attempt
//! may still run there is taken back (`Cancel`, then its worker's
//! acknowledgement or its incarnation's end) before it goes elsewhere;
//! deleting the folder would only make its worker kill the run at its next
//! poll, while the unit may already start elsewhere.

use std::collections::BTreeMap;

use layouts::formats;
use layouts::v3::{self, BatchInfo, BatchNo};
use layouts::{v2, NodeId};

use super::batches::{BatchRun, End};
use super::manager::{Ctx, TakeBack, TaskManager, UnitState};
use super::{TaskDir, TaskError};

impl TaskManager {
    pub(super) async fn rebuild(&mut self, ctx: &mut Ctx<'_>, round: u32, dir: &TaskDir) -> Result<(), TaskError> {
        tracing::debug!(task = %self.id, round, "rebuild");
        let prefix = format!("{}.", self.id);
        let seen: Vec<(String, String)> = ctx
            .folders
            .assigned(ctx.store)
            .await?
            .iter()
            .filter(|(_, sub)| sub.starts_with(&prefix))
            .cloned()
            .collect();
        // unit → (node, attempt, batch)
        let mut newest: BTreeMap<u32, (NodeId, u32, Option<BatchNo>)> = BTreeMap::new();
        let mut stale = vec![];
        let mut doomed = vec![];
        // Batches kept without an `Info`: their units are taken back.
        let mut infoless = std::collections::BTreeSet::new();
        let recorded: std::collections::BTreeSet<BatchNo> = dir.batch_records(round).collect();
        let open = |runs: &[super::manager::UnitRun], unit: u32| {
            (unit as usize) < runs.len() && !matches!(runs[unit as usize].state, UnitState::Done | UnitState::Failed)
        };
        for (node, sub) in &seen {
            let Ok(node) = NodeId::parse(node) else { continue };
            if let Some((task, r, unit, attempt)) = v2::parse_subtask_name(sub) {
                if task != self.id {
                    continue;
                }
                if r != round || !open(&self.runs, unit) {
                    stale.push((node, r, unit, attempt));
                    continue;
                }
                match newest.get(&unit) {
                    Some((_, a, _)) if *a >= attempt => stale.push((node, r, unit, attempt)),
                    _ => {
                        if let Some((n, a, b)) = newest.insert(unit, (node, attempt, None)) {
                            self.supersede(&mut stale, n, r, unit, a, b);
                        }
                    }
                }
                continue;
            }
            let Some((task, r, n)) = v3::parse_batch_name(sub) else { continue };
            if task != self.id {
                continue;
            }
            let name = v3::batch_name(&self.id, r, n);
            if r != round || recorded.contains(&n) {
                doomed.push((node, name));
                continue;
            }
            self.last_batch = self.last_batch.max(n.n);
            let info = match ctx.store.read_or_bad(&v3::batch_info(&node, &name)).await? {
                Some(Ok(b)) => formats::decode::<BatchInfo>(&b).ok(),
                _ => None,
            };
            let units: Vec<(u32, u32)> = match info.filter(|i| i.node == node && i.round == round && n.matches(i)) {
                Some(info) => info.units.iter().map(|u| (u.unit, u.attempt)).collect(),
                None => {
                    // No unit of it can start (its worker needs the info); but
                    // a released one fences a create that may still land: kept.
                    if ctx.store.exists(&v3::batch_released(&node, &name)).await? {
                        continue;
                    }
                    let folder = ctx.folders.get(ctx.store, &node).await?;
                    let marked = folder.batches.get(name.as_str()).map(|f| f.units.keys().copied().collect());
                    let marked: Vec<(u32, u32)> = marked.unwrap_or_default();
                    if marked.is_empty() {
                        doomed.push((node, name));
                        continue;
                    }
                    infoless.insert(n);
                    marked
                }
            };
            let mut b = BatchRun::new(node.clone());
            for (unit, attempt) in &units {
                // Markers of two attempts of a unit (hand-made): the newer.
                let a = b.units.entry(*unit).or_insert(*attempt);
                *a = (*a).max(*attempt);
            }
            for (unit, attempt) in b.units.clone() {
                if !open(&self.runs, unit) {
                    b.end(unit, End::Released("its unit is recorded".into()));
                    continue;
                }
                match newest.get(&unit) {
                    Some((_, a, _)) if *a >= attempt => {
                        b.end(unit, End::Released("a newer attempt exists".into()));
                    }
                    _ => {
                        if let Some((on, a, ob)) = newest.insert(unit, (node.clone(), attempt, Some(n))) {
                            self.supersede(&mut stale, on, r, unit, a, ob);
                        }
                    }
                }
            }
            self.batches.insert(n, b);
        }
        // A batch's superseded attempts are noted in it once every batch is
        // known (the newer one may be in a batch listed later).
        for (unit, (_, attempt, batch)) in &newest {
            for (n, b) in self.batches.iter_mut() {
                if Some(*n) != *batch && b.units.get(unit).is_some_and(|a| a < attempt) {
                    b.end(*unit, End::Released("a newer attempt exists".into()));
                }
            }
        }
        for (node, r, unit, attempt) in stale {
            let name = v2::subtask_name(&self.id, r, unit, attempt);
            super::remove::remove_folder(ctx.store, &v2::subtask_dir(&node, &name)).await?;
            // Its worker kills the executor at once instead of at its next poll.
            ctx.pokes.work(&node);
        }
        for (node, name) in doomed {
            super::remove::remove_folder(ctx.store, &v3::batch_dir(&node, &name)).await?;
            ctx.pokes.work(&node);
        }
        for (unit, (node, attempt, batch)) in newest {
            let run = &mut self.runs[unit as usize];
            run.attempt = attempt;
            // A manager that died between writing a subtask and poking (or
            // stamping) its worker left that worker unaware of it: whoever
            // rebuilds tells it again.
            ctx.pokes.work(&node);
            if batch.is_some_and(|b| infoless.contains(&b)) {
                // Whoever runs it acknowledges the `Cancel`, or its
                // incarnation ends.
                let wait_for = ctx.members.get(&node).copied();
                run.taken_back = Some(TakeBack { wait_for, ..TakeBack::new("its batch has no Info", true) });
            }
            // Unknown: the first collect reads the claim to tell a run of
            // the node's current incarnation from one of its old self.
            run.state = UnitState::Dispatched { node, node_incarnation: 0, batch };
        }
        Ok(())
    }

    /// An older attempt of `unit` than the one kept: its folder goes, or
    /// its batch notes it released.
    fn supersede(
        &mut self,
        stale: &mut Vec<(NodeId, u32, u32, u32)>,
        node: NodeId,
        round: u32,
        unit: u32,
        attempt: u32,
        batch: Option<BatchNo>,
    ) {
        match batch.and_then(|n| self.batches.get_mut(&n)) {
            Some(b) => b.end(unit, End::Released("a newer attempt exists".into())),
            None if batch.is_none() => stale.push((node, round, unit, attempt)),
            None => {}
        }
    }

    /// Units recorded while the rebuild listed (an old manager's records):
    /// their attempts in batches end.
    pub(super) fn release_recorded(&mut self) {
        for (u, run) in self.runs.iter().enumerate() {
            if matches!(run.state, UnitState::Done | UnitState::Failed) {
                for b in self.batches.values_mut() {
                    b.end(u as u32, End::Released("its unit is recorded".into()));
                }
            }
        }
    }
}
