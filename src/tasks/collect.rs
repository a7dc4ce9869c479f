//! A manager's collect: what became of each dispatched attempt, and when a
//! unit may go to another node, in both layouts.
//!
//! Invariant: **a unit's next attempt is dispatched only once its current
//! attempt can no longer run** (layouts/PROTOCOL.md, "Tasks"). That is
//! proven by one of:
//! - a terminal mark of the attempt (`Success`, or `Failed` written by the
//!   worker after the executor died, or at once if it never ran there);
//! - the attempt's claim naming an incarnation that is declared offline
//!   (in the view, or `Registry/Offline/<node>.<incarnation>`) or ended
//!   (`TaskAssigned/<node>/Ended.<incarnation>`): by then the session guard
//!   has killed that incarnation's executors and lets none start; or whose
//!   node's heartbeat now names a newer incarnation (one process per node
//!   id, and a process beats under a new incarnation only after the old
//!   one's executors were killed, or after the process that ran it ended);
//!   in layout 3 every claim of the attempt (a late claim of an ended
//!   incarnation may stand beside its successor's);
//! - layout 2: the manager's own create of the claim (`Status.Running`
//!   naming no incarnation), made while none existed: the attempt never
//!   started, and no worker can claim it any more;
//! - layout 3: a `Released` (the attempt's, or its batch's) and a listing
//!   made after it that shows no claim: a worker lists the batch after its
//!   claim and starts only if that listing shows no `Released`, so the
//!   attempt never started and never will.
//!
//! A view that does not list the runner (a stale or incomplete one), a
//! runner that differs from the node's member incarnation, a folder that
//! vanished or a create whose reply was lost prove none of these: the unit
//! waits. A unit taken back on request (reassign) gets a `Cancel` mark and
//! waits for the worker's acknowledgement.

use std::collections::HashMap;

use futures::StreamExt;
use layouts::formats::{self, StatusMark};
use layouts::v3::BatchNo;
use layouts::{v2, Name, NodeId, SubtaskState};
use store::Created;

use super::batches::End;
use super::folder::SubFolder;
use super::manager::{Ctx, TakeBack, TaskManager, UnitState};
use super::{TaskError, WRITE_CONCURRENCY};

/// What collect found an attempt to be.
enum Verdict {
    /// In flight; nothing to do this round.
    Wait,
    /// Claimed by this incarnation, which is a live member.
    Live(u64),
    /// Succeeded; `reported`: an `Output` holds its counters.
    Success { reported: bool },
    /// Can no longer run: the unit goes elsewhere. `count`: as a failure of
    /// the unit (its retries); `keep`: the folder stays (a claim that keeps
    /// a late create from ever running).
    Ended { why: String, count: bool, keep: bool },
    /// Unclaimed and to be taken back: create its claim ourselves.
    Claim { why: String },
    /// Claimed and to be taken back: mark it `Cancel`, wait for the ack.
    Cancel,
    /// Its folder vanished: mark it `Cancel` (a worker running it
    /// acknowledges), wait for the ack or `runner`'s declaration.
    Vanished,
}

/// The claim a manager creates to take an unstarted attempt back.
pub(super) fn revoked_claim(wall_ms: u64, why: &str) -> Vec<u8> {
    let mark = StatusMark {
        incarnation: 0,
        wall_ms,
        error: Some(format!("taken back by its manager before it started: {why}")),
        ..Default::default()
    };
    formats::encode(&mark)
}

/// An attempt that can no longer run, as collect found it.
pub(super) struct Gone {
    pub(super) unit: usize,
    pub(super) node: NodeId,
    /// Layout 3: its batch (nothing is deleted: the batch notes its end).
    pub(super) batch: Option<BatchNo>,
    pub(super) why: String,
    /// As a failure of the unit (its retries).
    pub(super) count: bool,
    /// Layout 2: its folder stays (a claim that keeps a late create from
    /// ever running).
    pub(super) keep: bool,
}

impl TaskManager {
    /// Reads the states of dispatched units, re-dispatches attempts proven
    /// ended (module docs) and records finished units. A unit becomes Done
    /// only once its outcome is written, so an error anywhere leaves it to
    /// be seen again next round.
    pub(super) async fn collect(&mut self, ctx: &mut Ctx<'_>) -> Result<(), TaskError> {
        let round = self.info.as_ref().expect("loaded").run.round;
        let mut successes: Vec<(usize, NodeId, Name, bool)> = vec![];
        let mut ended: Vec<Gone> = vec![];
        let mut declared: HashMap<(NodeId, u64), bool> = HashMap::new();
        let settled_now = self.settle_batches(ctx).await?;
        for u in 0..self.runs.len() {
            // Units not looked at stay dispatched: the next round sees them.
            if ctx.deadline.passed() {
                break;
            }
            let name = self.name(round, u, self.runs[u].attempt);
            let (node, ni) = match self.runs[u].state.clone() {
                UnitState::Dispatched { node, node_incarnation, batch: Some(n) } => {
                    if settled_now.contains(&n) {
                        continue;
                    }
                    if let Some(g) = self.collect_unit(ctx, u, n, &node, node_incarnation, &mut declared).await? {
                        ended.push(g);
                    }
                    continue;
                }
                UnitState::Dispatched { node, node_incarnation, batch: None } => (node, node_incarnation),
                UnitState::Unsure { node } => {
                    if !self.settle_unsure(ctx, u, &node, &name).await? {
                        continue;
                    }
                    (node, 0)
                }
                _ => continue,
            };
            let folder = ctx.folders.get(ctx.store, &node).await?;
            let f = folder.subtasks.get(name.as_str()).cloned();
            let node_ended = folder.ended.clone();
            let verdict = match f {
                None => Verdict::Vanished,
                Some(f) => self.judge(ctx, u, &node, ni, &name, &f, &node_ended, &mut declared).await?,
            };
            let tb = self.runs[u].taken_back.clone();
            let gone = |why: String, count: bool, keep: bool| Gone {
                unit: u,
                node: node.clone(),
                batch: None,
                why,
                count,
                keep,
            };
            match verdict {
                Verdict::Wait => {}
                Verdict::Live(inc) => {
                    self.runs[u].state = UnitState::Dispatched { node, node_incarnation: inc, batch: None };
                    self.runs[u].waiting = false;
                }
                Verdict::Success { reported } => successes.push((u, node, name, reported)),
                Verdict::Ended { why, count, keep } => ended.push(gone(why, count, keep)),
                Verdict::Claim { why } => {
                    let claim = v2::subtask_status(&node, &name, SubtaskState::Running);
                    if ctx.store.create(&claim, revoked_claim(ctx.wall_ms, &why)).await? == Created::Created {
                        ended.push(gone(format!("taken back before it started: {why}"), false, false));
                    }
                    // Else someone claimed it first: the next round reads whom.
                }
                Verdict::Cancel => {
                    self.mark_cancel(ctx, &node, &name).await?;
                }
                Verdict::Vanished => {
                    tracing::warn!(task = %self.id, unit = u, %node, subtask = %name, "subtask folder vanished: \
                        marking it cancelled, and waiting for its node to acknowledge or be declared offline");
                    self.mark_cancel(ctx, &node, &name).await?;
                    let wait_for = Some(ni).filter(|i| *i != 0).or_else(|| ctx.members.get(&node).copied());
                    let t = tb.unwrap_or_else(|| TakeBack::new("its folder vanished", true));
                    self.runs[u].taken_back = Some(TakeBack { wait_for, ..t });
                }
            }
        }
        for g in ended {
            if ctx.deadline.passed() {
                break;
            }
            // Gone before counted: a crash here repeats the deletion only.
            if g.batch.is_none() && !g.keep {
                let name = self.name(round, g.unit, self.runs[g.unit].attempt);
                super::remove::remove_folder(ctx.store, &v2::subtask_dir(&g.node, &name)).await?;
                // Its worker forgets the attempt at once, not at its next poll.
                ctx.pokes.work(&g.node);
            }
            let run = &mut self.runs[g.unit];
            let prefer = run.taken_back.take().and_then(|t| t.prefer);
            run.waiting = false;
            if prefer.is_some() {
                run.avoid = vec![g.node];
                run.prefer = prefer;
            } else {
                run.avoid.push(g.node);
            }
            if g.count {
                run.failures += 1;
            }
            let why = g.why;
            let for_good = g.count && run.failures > ctx.cfg.retries;
            if for_good {
                tracing::warn!(task = %self.id, unit = g.unit, "subtask failed for good after {} attempts: {why}", run.failures);
            } else {
                tracing::warn!(task = %self.id, unit = g.unit, attempt = run.attempt, "subtask attempt ended, dispatching again: {why}");
            }
            match g.batch {
                Some(n) => {
                    let end = if for_good { End::Failed(why) } else { End::Released(why) };
                    if let Some(b) = self.batches.get_mut(&n) {
                        b.end(g.unit as u32, end);
                    }
                    run.state = if for_good { UnitState::Ending { batch: n } } else { UnitState::Pending };
                }
                None if for_good => {
                    run.state = UnitState::Failed;
                    self.unrecorded_failed.insert(g.unit as u32, why);
                }
                None => run.state = UnitState::Pending,
            }
        }
        self.record(ctx, round, successes).await
    }

    /// One attempt whose folder exists.
    #[allow(clippy::too_many_arguments)]
    async fn judge(
        &mut self,
        ctx: &mut Ctx<'_>,
        u: usize,
        node: &NodeId,
        ni: u64,
        name: &Name,
        f: &SubFolder,
        node_ended: &std::collections::BTreeSet<u64>,
        declared: &mut HashMap<(NodeId, u64), bool>,
    ) -> Result<Verdict, TaskError> {
        let tb = self.runs[u].taken_back.clone();
        // Counted as a failure unless taken back on request.
        let count = tb.as_ref().is_none_or(|t| t.count);
        let has = |s: SubtaskState| f.markers.contains(&s);
        if has(SubtaskState::Success) {
            return Ok(Verdict::Success { reported: f.files.iter().any(|x| x == v2::OUTPUT) });
        }
        if has(SubtaskState::Failed) {
            let why = self.failure_reason(ctx, node, name).await;
            return Ok(Verdict::Ended { why, count, keep: false });
        }
        let member = ctx.members.get(node).copied();
        let cancelled = has(SubtaskState::Cancel);
        if !has(SubtaskState::Running) {
            if cancelled && !f.has_info {
                // A vanished folder marked again: whoever ran it (its claim
                // went with the folder) acknowledges, or is declared.
                let gone = match tb.as_ref().and_then(|t| t.wait_for) {
                    Some(inc) => self.is_declared(ctx, node, inc, node_ended, declared).await?,
                    None => false,
                };
                return Ok(if gone {
                    Verdict::Ended { why: format!("node {node} is offline"), count, keep: false }
                } else {
                    Verdict::Wait
                });
            }
            return Ok(match (&tb, member) {
                (Some(t), _) => Verdict::Claim { why: t.why.clone() },
                (None, None) => Verdict::Claim { why: format!("node {node} is not a member") },
                (None, Some(_)) if cancelled => Verdict::Claim { why: "cancelled".into() },
                (None, Some(_)) => Verdict::Wait,
            });
        }
        // Claimed: by whom? The member incarnation the unit was seen with
        // needs no read while the view still lists it, unless its node
        // drains: the claim may then be its release (incarnation 0), which
        // sends the unit elsewhere now, uncounted, not when the node leaves.
        let draining = ctx.placement.draining.contains(node);
        let runner = if ni != 0 && member == Some(ni) && tb.is_none() && !cancelled && !draining {
            ni
        } else {
            let path = v2::subtask_status(node, name, SubtaskState::Running);
            let mark = ctx.store.read_or_bad(&path).await?.and_then(Result::ok);
            match mark.as_deref().map(formats::decode::<StatusMark>) {
                Some(Ok(m)) if m.incarnation == 0 => {
                    return Ok(Verdict::Ended { why: "taken back before it started".into(), count: false, keep: false })
                }
                Some(Ok(m)) => m.incarnation,
                // Gone since the listing: the next round sees what is left.
                None => return Ok(Verdict::Wait),
                Some(Err(e)) => {
                    // Not a claim this version writes (PUTs are whole): its
                    // runner is unknown, and only an ack ends it.
                    tracing::warn!(task = %self.id, unit = u, %path, "unreadable claim, waiting for an ack: {e}");
                    return Ok(if cancelled { Verdict::Wait } else { Verdict::Cancel });
                }
            }
        };
        if self.is_declared(ctx, node, runner, node_ended, declared).await? {
            return Ok(Verdict::Ended {
                why: format!("node {node} incarnation {runner} is offline"),
                count,
                keep: false,
            });
        }
        if tb.is_some() || cancelled {
            return Ok(if cancelled { Verdict::Wait } else { Verdict::Cancel });
        }
        if member == Some(runner) {
            return Ok(Verdict::Live(runner));
        }
        let run = &mut self.runs[u];
        if !run.waiting {
            run.waiting = true;
            tracing::info!(
                task = %self.id, unit = u, %node, runner, member = ?member,
                "the node's view does not list the incarnation running the unit: waiting for it to end or be declared offline"
            );
        }
        Ok(Verdict::Wait)
    }

    /// Whether `node`'s incarnation `inc` is over: declared offline (the
    /// view, else one stat of its marker), ended, or outrun by a newer
    /// incarnation in the node's heartbeat (one read); each asked once per
    /// round.
    pub(super) async fn is_declared(
        &self,
        ctx: &mut Ctx<'_>,
        node: &NodeId,
        inc: u64,
        node_ended: &std::collections::BTreeSet<u64>,
        declared: &mut HashMap<(NodeId, u64), bool>,
    ) -> Result<bool, TaskError> {
        if node_ended.contains(&inc) || ctx.offline.contains(&(node.clone(), inc)) {
            return Ok(true);
        }
        if let Some(d) = declared.get(&(node.clone(), inc)) {
            return Ok(*d);
        }
        let mut d = ctx.store.stat(&v2::offline_marker(node, inc)).await?.is_some();
        if !d {
            let hb = ctx.store.read_or_bad(&v2::heartbeat(node)).await?.and_then(Result::ok);
            let beating = hb.and_then(|b| formats::decode::<layouts::formats::Heartbeat>(&b).ok());
            d = beating.is_some_and(|hb| hb.node == *node && hb.incarnation > inc);
        }
        declared.insert((node.clone(), inc), d);
        Ok(d)
    }

    async fn mark_cancel(&self, ctx: &mut Ctx<'_>, node: &NodeId, name: &Name) -> Result<(), TaskError> {
        let mark =
            StatusMark { wall_ms: ctx.wall_ms, error: Some("taken back by its manager".into()), ..Default::default() };
        ctx.store.put(&v2::subtask_status(node, name, SubtaskState::Cancel), formats::encode(&mark)).await?;
        // Its worker kills the executor at once instead of at its next poll.
        ctx.pokes.work(node);
        Ok(())
    }

    /// An attempt whose create failed: it exists (the reply was lost), or
    /// may still land. True if it is there, to be judged as dispatched.
    async fn settle_unsure(
        &mut self,
        ctx: &mut Ctx<'_>,
        u: usize,
        node: &NodeId,
        name: &Name,
    ) -> Result<bool, TaskError> {
        if ctx.folders.get(ctx.store, node).await?.subtasks.contains_key(name.as_str()) {
            self.runs[u].state = UnitState::Dispatched { node: node.clone(), node_incarnation: 0, batch: None };
            return Ok(true);
        }
        if ctx.members.contains_key(node) && self.runs[u].taken_back.is_none() {
            // The same name again: a create that lands late then loses.
            let bytes = self.subtask_bytes(ctx, u, node.clone(), self.runs[u].attempt);
            match ctx.store.create(&v2::subtask_info(node, name), bytes).await {
                Ok(created) => {
                    let inc = if created == Created::Created { ctx.members[node] } else { 0 };
                    self.runs[u].state =
                        UnitState::Dispatched { node: node.clone(), node_incarnation: inc, batch: None };
                    ctx.pokes.work(node);
                }
                Err(e) => tracing::warn!(task = %self.id, unit = u, %node, "creating the subtask again failed: {e}"),
            }
            return Ok(false);
        }
        // Its node is gone (or the unit is taken back): claim the name, so
        // that a create still in flight can never run; the claim stays.
        let claim = v2::subtask_status(node, name, SubtaskState::Running);
        let why = format!("node {node} is not a member");
        if ctx.store.create(&claim, revoked_claim(ctx.wall_ms, &why)).await? == Created::Exists {
            self.runs[u].state = UnitState::Dispatched { node: node.clone(), node_incarnation: 0, batch: None };
            return Ok(false);
        }
        let run = &mut self.runs[u];
        run.avoid.push(node.clone());
        if let Some(p) = run.taken_back.take().and_then(|t| t.prefer) {
            run.prefer = Some(p);
        }
        run.state = UnitState::Pending;
        tracing::warn!(task = %self.id, unit = u, %node, "an attempt whose create failed was taken back: dispatching again");
        Ok(false)
    }

    /// Records successes (each outcome a create-once file, before its
    /// folder is deleted, in that order within a unit; units go
    /// concurrently), then the units that failed for good.
    async fn record(
        &mut self,
        ctx: &mut Ctx<'_>,
        round: u32,
        successes: Vec<(usize, NodeId, Name, bool)>,
    ) -> Result<(), TaskError> {
        let (store, id) = (ctx.store, self.id);
        let record = |(u, node, name, reported): (usize, NodeId, Name, bool)| async move {
            // The executor's counters (only read when it reported some: an
            // `Output` beside the success) go into the outcome file.
            let mut outcome = Vec::new();
            if reported {
                let mark = store.read_or_bad(&v2::subtask_status(&node, &name, SubtaskState::Success)).await?;
                let stats =
                    mark.and_then(Result::ok).and_then(|b| formats::decode::<StatusMark>(&b).ok()).map(|m| m.stats);
                if let Some(stats) = stats.filter(|s| !s.is_empty()) {
                    outcome = formats::encode(&formats::UnitOutcome { stats, error: None });
                }
            }
            store.create(&v2::unit_outcome(&id, round, u as u32, true), outcome).await?;
            super::remove::remove_folder(store, &v2::subtask_dir(&node, &name)).await?;
            Ok::<usize, store::StoreError>(u)
        };
        let results: Vec<store::Result<usize>> = futures::stream::iter(successes)
            .take_while(|_| std::future::ready(!ctx.deadline.passed()))
            .map(record)
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(u) => {
                    self.runs[u].state = UnitState::Done;
                    self.runs[u].taken_back = None;
                }
                // Not Done: seen again next round (the outcome create is
                // idempotent for its manager).
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        if let Some(e) = first_err {
            return Err(e.into());
        }
        let failed: Vec<(u32, String)> = self.unrecorded_failed.iter().map(|(u, w)| (*u, w.clone())).collect();
        for (u, why) in failed {
            let outcome = formats::UnitOutcome { error: Some(why), ..Default::default() };
            ctx.store.create(&v2::unit_outcome(&self.id, round, u, false), formats::encode(&outcome)).await?;
            self.unrecorded_failed.remove(&u);
        }
        Ok(())
    }

    /// Why an attempt failed, for the log: the executor's error and the
    /// end of its output (the folder, with its `Output`, is deleted next).
    async fn failure_reason(&self, ctx: &mut Ctx<'_>, node: &NodeId, name: &Name) -> String {
        let mark = match ctx.store.read(&v2::subtask_status(node, name, SubtaskState::Failed)).await {
            Ok(Some(b)) => formats::decode::<StatusMark>(&b).ok(),
            _ => None,
        };
        let mut why = match mark {
            Some(m) => m.error.unwrap_or_else(|| format!("exit code {:?}", m.exit_code)),
            None => "executor failed".into(),
        };
        if let Ok(Some(out)) = ctx.store.read(&v2::subtask_output(node, name)).await {
            let text = String::from_utf8_lossy(&out);
            let tail: String = text.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
            why = format!("{why}; output ends: {}", tail.trim().escape_debug());
        }
        why
    }

    /// Reassign requests: the unit's attempt is taken back (module docs)
    /// and the unit goes to the named node, or the next on the ring.
    pub(super) async fn handle_reassign(&mut self, ctx: &mut Ctx<'_>, reassign: &[u32]) -> Result<(), TaskError> {
        for unit in reassign {
            let path = v2::reassign_request(&self.id, *unit);
            let to = match ctx.store.read_or_bad(&path).await?.and_then(Result::ok) {
                Some(b) => formats::decode::<formats::ReassignRequest>(&b).ok().and_then(|r| r.to),
                None => None,
            };
            if let Some(run) = self.runs.get_mut(*unit as usize) {
                if let UnitState::Dispatched { node, .. } | UnitState::Unsure { node } = run.state.clone() {
                    let t = TakeBack { prefer: to.clone(), ..TakeBack::new("reassigned on request", false) };
                    run.taken_back = Some(t);
                    tracing::info!(task = %self.id, unit, from = %node, to = ?to, "subtask reassigned on request");
                }
            }
            ctx.store.delete(&path).await?;
        }
        Ok(())
    }
}
