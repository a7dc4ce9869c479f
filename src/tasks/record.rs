//! A manager's side of layout 3 batches: judging one unit attempt from its
//! batch's markers (the rules of [`super::collect`]), taking an unstarted
//! attempt back (`Released`, then a listing), settling a batch whose create
//! failed, and recording a batch once every unit attempt in it ended
//! (`Outcomes/Batch.r<round>.t<term>.b<batch>`, then the folder deleted).

use std::collections::{BTreeSet, HashMap};

use layouts::formats::{self, StatusMark};
use layouts::v3::{self, BatchNo, Mark};
use layouts::{Name, NodeId};
use store::Created;

use super::batches::End;
use super::collect::Gone;
use super::folder::list_batch;
use super::manager::{Ctx, TakeBack, TaskManager, UnitState};
use super::TaskError;

impl TaskManager {
    /// Judges unit `u`'s attempt in batch `n` on `node`; an attempt that can
    /// no longer run is returned (collect moves the unit on).
    pub(super) async fn collect_unit(
        &mut self,
        ctx: &mut Ctx<'_>,
        u: usize,
        n: BatchNo,
        node: &NodeId,
        ni: u64,
        declared: &mut HashMap<(NodeId, u64), bool>,
    ) -> Result<Option<Gone>, TaskError> {
        if self.batches.get(&n).is_none_or(|b| b.unsure.is_some()) {
            return Ok(None);
        }
        let (round, attempt, unit) = (self.round_no(), self.runs[u].attempt, u as u32);
        let name = v3::batch_name(&self.id, round, n);
        let folder = ctx.folders.get(ctx.store, node).await?;
        let node_ended = folder.ended.clone();
        let tb = self.runs[u].taken_back.clone();
        let gone =
            |why: String, count: bool| Gone { unit: u, node: node.clone(), batch: Some(n), why, count, keep: true };
        let Some(bf) = folder.batches.get(name.as_str()).cloned() else {
            tracing::warn!(task = %self.id, unit = u, %node, batch = %name, "batch folder vanished: marking the unit \
                cancelled, and waiting for its node to acknowledge or be declared offline");
            ctx.store.create(&v3::unit_mark(node, &name, unit, attempt, Mark::Cancel), Vec::new()).await?;
            ctx.pokes.work(node);
            let wait_for = Some(ni).filter(|i| *i != 0).or_else(|| ctx.members.get(node).copied());
            let t = tb.unwrap_or_else(|| TakeBack::new("its batch vanished", true));
            self.runs[u].taken_back = Some(TakeBack { wait_for, ..t });
            return Ok(None);
        };
        // Counted as a failure unless taken back on request or released.
        let m = bf.marks(unit, attempt);
        let released = m.released || bf.released;
        let count = tb.as_ref().is_none_or(|t| t.count) && !released;
        if m.success {
            let stats =
                if m.output { self.unit_stats(ctx, node, &name, unit, attempt).await? } else { Default::default() };
            if let Some(b) = self.batches.get_mut(&n) {
                b.end(unit, End::Done(stats));
            }
            self.runs[u].state = UnitState::Ending { batch: n };
            self.runs[u].taken_back = None;
            return Ok(None);
        }
        if m.failed {
            let why = self.unit_failure(ctx, node, &name, unit, attempt).await;
            return Ok(Some(gone(why, count)));
        }
        let member = ctx.members.get(node).copied();
        if m.running.is_empty() {
            if m.cancel && !bf.has_info {
                // A vanished batch marked again: whoever ran the attempt (its
                // claim went with the folder) acknowledges, or is declared.
                let over = match tb.as_ref().and_then(|t| t.wait_for) {
                    Some(inc) => self.is_declared(ctx, node, inc, &node_ended, declared).await?,
                    None => false,
                };
                return Ok(over.then(|| gone(format!("node {node} is offline"), count)));
            }
            if released {
                return Ok(Some(gone("released before it started".into(), false)));
            }
            let why = match (&tb, member) {
                (Some(t), _) => t.why.clone(),
                (None, None) => format!("node {node} is not a member"),
                (None, Some(_)) if m.cancel => "cancelled".into(),
                (None, Some(_)) => return Ok(None),
            };
            return self.take_back(ctx, u, node, &name, why).await;
        }
        let mut over = true;
        for inc in &m.running {
            over &= self.is_declared(ctx, node, *inc, &node_ended, declared).await?;
        }
        if over {
            return Ok(Some(gone(format!("node {node} incarnations {:?} are offline", m.running), count)));
        }
        if tb.is_some() || m.cancel {
            if !m.cancel {
                ctx.store.create(&v3::unit_mark(node, &name, unit, attempt, Mark::Cancel), Vec::new()).await?;
                // Its worker kills the executor at once instead of at its next poll.
                ctx.pokes.work(node);
            }
            return Ok(None);
        }
        if let ([runner], Some(member)) = (m.running.as_slice(), member) {
            if *runner == member {
                self.runs[u].state =
                    UnitState::Dispatched { node: node.clone(), node_incarnation: member, batch: Some(n) };
                self.runs[u].waiting = false;
                return Ok(None);
            }
        }
        let run = &mut self.runs[u];
        if !run.waiting {
            run.waiting = true;
            tracing::info!(
                task = %self.id, unit = u, %node, runners = ?m.running, member = ?member,
                "the node's view does not list the incarnation running the unit: waiting for it to end or be declared offline"
            );
        }
        Ok(None)
    }

    /// Takes an attempt that no worker claimed back: its `Released`, then a
    /// listing of the batch; no claim there, and none can start it any more.
    async fn take_back(
        &mut self,
        ctx: &mut Ctx<'_>,
        u: usize,
        node: &NodeId,
        name: &Name,
        why: String,
    ) -> Result<Option<Gone>, TaskError> {
        let (unit, attempt) = (u as u32, self.runs[u].attempt);
        ctx.store.create(&v3::unit_mark(node, name, unit, attempt, Mark::Released), Vec::new()).await?;
        let after = list_batch(ctx.store, node, name).await?;
        if !after.marks(unit, attempt).running.is_empty() {
            // Claimed first: the next round judges its runner.
            return Ok(None);
        }
        let gone = Gone {
            unit: u,
            node: node.clone(),
            batch: self.batch_of(u),
            why: format!("taken back before it started: {why}"),
            count: false,
            keep: true,
        };
        Ok(Some(gone))
    }

    fn batch_of(&self, u: usize) -> Option<BatchNo> {
        match self.runs[u].state {
            UnitState::Dispatched { batch, .. } => batch,
            _ => None,
        }
    }

    /// The counters a succeeded attempt reported (its `Success` mark holds
    /// them when its `Output` is there).
    async fn unit_stats(
        &self,
        ctx: &Ctx<'_>,
        node: &NodeId,
        name: &Name,
        unit: u32,
        attempt: u32,
    ) -> Result<std::collections::BTreeMap<String, u64>, TaskError> {
        let mark = ctx.store.read_or_bad(&v3::unit_mark(node, name, unit, attempt, Mark::Success)).await?;
        Ok(mark
            .and_then(Result::ok)
            .filter(|b| !b.is_empty())
            .and_then(|b| formats::decode::<StatusMark>(&b).ok())
            .map(|m| m.stats)
            .unwrap_or_default())
    }

    /// Why an attempt failed, for the log and the record: its error and the
    /// end of its output.
    async fn unit_failure(&self, ctx: &Ctx<'_>, node: &NodeId, name: &Name, unit: u32, attempt: u32) -> String {
        let mark = match ctx.store.read(&v3::unit_mark(node, name, unit, attempt, Mark::Failed)).await {
            Ok(Some(b)) if !b.is_empty() => formats::decode::<StatusMark>(&b).ok(),
            _ => None,
        };
        let mut why = match mark {
            Some(m) => m.error.unwrap_or_else(|| format!("exit code {:?}", m.exit_code)),
            None => "executor failed".into(),
        };
        if let Ok(Some(out)) = ctx.store.read(&v3::unit_mark(node, name, unit, attempt, Mark::Output)).await {
            let text = String::from_utf8_lossy(&out);
            let tail: String = text.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
            why = format!("{why}; output ends: {}", tail.trim().escape_debug());
        }
        why
    }

    /// Batches whose create failed: there after all (a lost reply), made
    /// again under the same name while their node is a member, or, with
    /// their node gone, released whole so that a create still in flight
    /// starts nothing. Returns the batches written to now: their units are
    /// judged from the next round's listing (this one predates the write).
    pub(super) async fn settle_batches(&mut self, ctx: &mut Ctx<'_>) -> Result<BTreeSet<BatchNo>, TaskError> {
        let mut written = BTreeSet::new();
        let round = self.round_no();
        let unsure: Vec<(BatchNo, NodeId, bytes::Bytes)> =
            self.batches.iter().filter_map(|(n, b)| Some((*n, b.node.clone(), b.unsure.clone()?))).collect();
        for (n, node, bytes) in unsure {
            let name = v3::batch_name(&self.id, round, n);
            let there = ctx.folders.get(ctx.store, &node).await?.batches.get(name.as_str()).is_some_and(|b| b.has_info);
            let taken_back = self.batches[&n].units.keys().any(|u| self.runs[*u as usize].taken_back.is_some());
            let member = ctx.members.get(&node).copied();
            if !there {
                written.insert(n);
            }
            let ni = if there {
                Some(0)
            } else if member.is_some() && !taken_back {
                match ctx.store.create(&v3::batch_info(&node, &name), bytes).await {
                    Ok(Created::Created) => {
                        ctx.pokes.work(&node);
                        member
                    }
                    Ok(Created::Exists) => Some(0),
                    Err(e) => {
                        tracing::warn!(task = %self.id, batch = %name, %node, "creating the batch again failed: {e}");
                        None
                    }
                }
            } else {
                ctx.store.create(&v3::batch_released(&node, &name), Vec::new()).await?;
                tracing::warn!(task = %self.id, batch = %name, %node, "a batch whose create failed was released: \
                    its units are dispatched again once no claim shows");
                if let Some(b) = self.batches.get_mut(&n) {
                    b.keep = true;
                }
                Some(0)
            };
            let Some(ni) = ni else { continue };
            let b = self.batches.get_mut(&n).expect("listed above");
            b.unsure = None;
            for u in b.units.keys() {
                if let UnitState::Dispatched { node_incarnation, .. } = &mut self.runs[*u as usize].state {
                    *node_incarnation = ni;
                }
            }
        }
        Ok(written)
    }

    /// Records every batch whose unit attempts all ended, then deletes its
    /// folder; its units become final. In that order: a crash in between
    /// leaves a recorded batch's folder, which the next rebuild deletes.
    pub(super) async fn record_batches(&mut self, ctx: &mut Ctx<'_>) -> Result<(), TaskError> {
        let round = self.round_no();
        let complete: Vec<BatchNo> = self.batches.iter().filter(|(_, b)| b.complete()).map(|(n, _)| *n).collect();
        let mut recorded = BTreeSet::new();
        for n in complete {
            if ctx.deadline.passed() {
                break;
            }
            let b = &self.batches[&n];
            let rec = b.record();
            ctx.store.create(&v3::batch_record(&self.id, round, n), formats::encode(&rec)).await?;
            if !b.keep {
                let name = v3::batch_name(&self.id, round, n);
                super::remove::remove_folder(ctx.store, &v3::batch_dir(&b.node, &name)).await?;
                // Its worker forgets the batch at once, not at its next poll.
                ctx.pokes.hint(&b.node);
            }
            for (unit, end) in &b.ended {
                let run = &mut self.runs[*unit as usize];
                if run.state == (UnitState::Ending { batch: n }) {
                    run.state = match end {
                        End::Done(_) => UnitState::Done,
                        _ => UnitState::Failed,
                    };
                }
            }
            recorded.insert(n);
        }
        self.batches.retain(|n, _| !recorded.contains(n));
        Ok(())
    }
}
