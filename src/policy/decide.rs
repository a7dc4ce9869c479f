//! A table's decisions (see the module doc of [`super::planner`]): each
//! partition's newest one read back and followed to its task (completing
//! one its author left half done), and new ones taken exactly once: a
//! claim created once, the task submitted, the task recorded beside the
//! claim. A table's retention is decided the same way, under the reserved
//! name [`paths::EXPIRE_DECISION`] ([`super::retention`]).

use std::collections::BTreeMap;

use layouts::formats::{encode, ExecutorKind};
use layouts::policies::{self as paths, DecisionClaim, DecisionFile, DecisionTask, PartitionSummary, TableSummary};
use layouts::{Name, TaskId, TaskState};
use store::Created;

use super::define::read_json;
use super::visit::{executor_of, Visit};
use super::{PlanReport, PolicyError, TARGET_SIZE_PARAM};
use crate::tasks::{self, TaskError, TaskSpec};

/// The newest decision of a partition, from the `Decisions/` listing.
#[derive(Default, Clone, Copy)]
pub(super) struct Newest {
    pub seq: u64,
    pub claim: bool,
    pub task: bool,
}

impl Visit<'_> {
    /// Each partition's newest decision, and the files of older ones.
    pub(super) async fn list_decisions(&mut self) -> Result<(BTreeMap<Name, Newest>, Vec<String>), PolicyError> {
        let o = self.item;
        self.requests += 1;
        let mut newest: BTreeMap<Name, Newest> = BTreeMap::new();
        let mut all = vec![];
        for e in self.store.list(&paths::decisions_dir(&o.db, &o.schema, &o.table)).await? {
            let Some((part, seq, file)) = paths::parse_decision(e.name()) else { continue };
            let n = newest.entry(part.clone()).or_default();
            if seq > n.seq {
                *n = Newest { seq, claim: false, task: false };
            }
            if seq == n.seq {
                match file {
                    DecisionFile::Claim => n.claim = true,
                    DecisionFile::Task => n.task = true,
                }
            }
            all.push((part, seq, e.path));
        }
        let stale = all
            .into_iter()
            .filter(|(p, seq, _)| newest.get(p).is_some_and(|n| *seq < n.seq))
            .map(|(_, _, p)| p)
            .collect();
        Ok((newest, stale))
    }

    /// Brings the partition's newest decision forward: is its task still
    /// running, and when did it start?
    pub(super) async fn follow(
        &mut self,
        name: &Name,
        n: Newest,
        newest: &BTreeMap<Name, Newest>,
        before: Option<&PartitionSummary>,
        d: &mut PartitionSummary,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        let path = |f| paths::decision(&o.db, &o.schema, &o.table, name, n.seq, f);
        // Seen ended at this sequence number: nothing to read.
        if let Some(b) = before.filter(|b| b.seq == n.seq && !b.in_flight && b.task.is_some()) {
            d.last_compaction_wall_ms = b.last_compaction_wall_ms;
            return Ok(());
        }
        if !n.task {
            if !n.claim {
                return Ok(());
            }
            self.requests += 1;
            let claim = match read_json::<DecisionClaim>(self.store, &path(DecisionFile::Claim)).await {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(()),
                Err(e) => {
                    blocked(d, e);
                    return Ok(());
                }
            };
            d.in_flight = true;
            d.last_compaction_wall_ms = Some(claim.wall_ms);
            d.why = "being submitted".into();
            self.recover(name, n.seq, &claim, newest, d, report).await?;
            return Ok(());
        }
        let task = match d.task {
            Some(t) => t,
            None => {
                self.requests += 1;
                match read_json::<DecisionTask>(self.store, &path(DecisionFile::Task)).await {
                    Ok(Some(t)) => {
                        d.last_compaction_wall_ms = Some(t.wall_ms);
                        t.task
                    }
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        blocked(d, e);
                        return Ok(());
                    }
                }
            }
        };
        d.task = Some(task);
        self.requests += 1;
        let dir = tasks::read_dir(self.store, &task).await?;
        let mut ended = matches!(dir.state, Some(TaskState::Done | TaskState::Failed))
            || (dir.state.is_none() && !dir.has_info && dir.terms.is_empty());
        d.in_flight = !ended;
        d.why = super::retention::running(d, Some(task));
        if dir.state == Some(TaskState::Cancel) {
            // Stopped: its units' executors may still run until their
            // workers notice (see PlannerConfig::stop_settle).
            let seen = before.filter(|b| b.seq == n.seq).and_then(|b| b.stopped_seen_wall_ms).unwrap_or(self.wall_ms);
            d.stopped_seen_wall_ms = Some(seen);
            let until = seen.saturating_add(self.settle_ms);
            ended = self.wall_ms >= until;
            d.in_flight = !ended;
            d.why = format!(
                "task {task} was stopped: waiting {} s more for its executors to end",
                until.saturating_sub(self.wall_ms).div_ceil(1000)
            );
        }
        if ended {
            d.why.clear();
        }
        Ok(())
    }

    /// A claim without a recorded task (see the module doc).
    async fn recover(
        &mut self,
        name: &Name,
        seq: u64,
        claim: &DecisionClaim,
        newest: &BTreeMap<Name, Newest>,
        d: &mut PartitionSummary,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        self.requests += 2;
        if let Some(id) = tasks::find_marked(self.store, paths::MARKER_PARAM, &claim.marker, claim.wall_ms).await? {
            return self.record(name, seq, id, d).await;
        }
        let mine = claim.by == self.me.as_str();
        if self.dry {
            return Ok(());
        }
        if mine || self.wall_ms >= claim.wall_ms.saturating_add(crate::jobs::drive::CLAIM_GRACE_MS) {
            // A group's claim submits the group: its other partitions'
            // claims find the task by the marker. The group is the claims
            // its author won, not all it tried: a partition whose newest
            // claim is another planner's (its create came back Exists) is
            // that planner's to submit.
            let o = self.item;
            let mut spec_parts = vec![];
            for p in claim.partitions.iter().filter_map(|p| Name::parse(p).ok()) {
                if &p == name {
                    spec_parts.push(p);
                    continue;
                }
                let Some(m) = newest.get(&p).filter(|m| m.claim && !m.task) else { continue };
                self.requests += 1;
                let path = paths::decision(&o.db, &o.schema, &o.table, &p, m.seq, DecisionFile::Claim);
                if let Ok(Some(c)) = read_json::<DecisionClaim>(self.store, &path).await {
                    if c.marker == claim.marker {
                        spec_parts.push(p);
                    }
                }
            }
            if !spec_parts.contains(name) {
                spec_parts = vec![name.clone()];
            }
            self.submit(std::slice::from_mut(d), &[(0, name.clone(), seq)], spec_parts, claim, report).await?;
        }
        Ok(())
    }

    /// The retention's row of the table's summary, judged (`None` when the
    /// policy runs none and none is in flight), with the figures of a
    /// retention task seen ended for the first time added to `summary`.
    pub(super) async fn retention(
        &mut self,
        newest: &BTreeMap<Name, Newest>,
        before: Option<&PartitionSummary>,
        summary: &mut TableSummary,
        report: &mut PlanReport,
    ) -> Result<Option<PartitionSummary>, PolicyError> {
        let name = Name::parse(paths::EXPIRE_DECISION).expect("a valid name");
        let n = newest.get(&name).copied().unwrap_or_default();
        let p = &*self.item.policy;
        if !p.runs_retention() && n.seq == 0 {
            return Ok(None);
        }
        let mut d = PartitionSummary {
            partition: name.to_string(),
            last_compaction_wall_ms: before.and_then(|b| b.last_compaction_wall_ms),
            seq: n.seq,
            task: before.filter(|b| b.seq == n.seq).and_then(|b| b.task),
            ..PartitionSummary::default()
        };
        if n.seq > 0 {
            self.follow(&name, n, newest, before, &mut d, report).await?;
        }
        if !d.in_flight {
            if let Some(task) = d.task.filter(|t| summary.expire_counted != Some(*t)) {
                self.requests += super::retention::count_freed(self.store, task, summary).await;
            }
        }
        super::retention::judge(p, &mut d, self.wall_ms);
        if !p.runs_retention() && !d.in_flight {
            return Ok(None);
        }
        Ok(Some(d))
    }

    /// Takes the next decision of the due partitions `idxs` of `detail`:
    /// one task for them all (several: an `iceberg` table's, whose
    /// committer commits them together). Returns those now in flight.
    pub async fn decide(
        &mut self,
        detail: &mut [PartitionSummary],
        idxs: &[usize],
        report: &mut PlanReport,
    ) -> Result<Vec<usize>, PolicyError> {
        let o = self.item;
        let named: Vec<(usize, Name)> =
            idxs.iter().filter_map(|&i| Name::parse(&detail[i].partition).ok().map(|n| (i, n))).collect();
        let group: Vec<String> =
            if named.len() > 1 { named.iter().map(|(_, n)| n.to_string()).collect() } else { vec![] };
        let mut marker: Option<String> = None;
        let mut claimed = vec![];
        let mut now = vec![];
        for (i, name) in named {
            let d = &mut detail[i];
            let seq = d.seq + 1;
            let claim = DecisionClaim {
                policy: o.policy.name.clone(),
                policy_version: o.policy.version,
                by: self.me.to_string(),
                wall_ms: self.wall_ms,
                // The group's task carries the first claim's marker: any
                // of its partitions' claims finds it.
                marker: marker.clone().unwrap_or_else(|| paths::marker(&o.db, &o.schema, &o.table, &name, seq)),
                why: d.why.clone(),
                partitions: group.clone(),
            };
            if self.dry {
                report.submitted.push(format!("{}/{}/{}/{name}: {}", o.db, o.schema, o.table, d.why));
                d.why = format!("would submit: {}", d.why);
                d.due = false;
                now.push(i);
                continue;
            }
            self.requests += 1;
            let path = paths::decision(&o.db, &o.schema, &o.table, &name, seq, DecisionFile::Claim);
            d.seq = seq;
            d.task = None;
            d.in_flight = true;
            d.due = false;
            d.last_compaction_wall_ms = Some(self.wall_ms);
            now.push(i);
            match self.store.create(&path, encode(&claim)).await {
                Ok(Created::Exists) => {
                    // Another planner took this decision: it submits.
                    d.why = "being submitted by another planner".into();
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    // The claim may stand all the same (a lost reply): the
                    // partition stays in flight for the next visit to
                    // recover. The claims won so far are submitted now, so
                    // that the table's task holds them before another starts.
                    report.errors.push(format!("deciding {}/{}/{}/{name}: {e}", o.db, o.schema, o.table));
                    break;
                }
            }
            marker.get_or_insert_with(|| claim.marker.clone());
            claimed.push((i, name, seq, claim));
        }
        let Some((_, _, _, claim)) = claimed.first() else { return Ok(now) };
        let claim = claim.clone();
        let parts: Vec<(usize, Name, u64)> = claimed.into_iter().map(|(i, n, seq, _)| (i, n, seq)).collect();
        let spec_parts = parts.iter().map(|(_, n, _)| n.clone()).collect();
        self.submit(detail, &parts, spec_parts, &claim, report).await?;
        Ok(now.into_iter().filter(|&i| detail[i].in_flight).collect())
    }

    /// Submits the task of a decision (`claim`) for `spec_parts`, and
    /// records it in the decisions of `parts` (indices into `detail`).
    async fn submit(
        &mut self,
        detail: &mut [PartitionSummary],
        parts: &[(usize, Name, u64)],
        spec_parts: Vec<Name>,
        claim: &DecisionClaim,
        report: &mut PlanReport,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        let retention = spec_parts.iter().any(|p| p.as_str() == paths::EXPIRE_DECISION);
        // Unit keys hold commas (`spec0,part="p0"`): one partition a word.
        let names = spec_parts.iter().map(Name::as_str).collect::<Vec<_>>().join(" ");
        let mut spec = if retention { super::retention::task_spec(o) } else { compaction_spec(o, spec_parts) };
        spec.params.insert(paths::MARKER_PARAM.into(), claim.marker.clone());
        self.requests += 6;
        match tasks::submit_placed(self.store, spec, self.wall_ms).await {
            Ok(placed) => {
                report.managers.push(placed.manager);
                report.submitted.push(format!("{}/{}/{}/{names} {}", o.db, o.schema, o.table, placed.id));
                self.decisions += 1;
                for (i, name, seq) in parts {
                    self.record(name, *seq, placed.id, &mut detail[*i]).await?;
                }
                Ok(())
            }
            Err(e @ (TaskError::Invalid(_) | TaskError::Limit(_))) => {
                let problem = match e {
                    TaskError::Invalid(problem) => problem,
                    e => e.to_string(),
                };
                for (i, name, seq) in parts {
                    self.give_up(name, *seq, problem.clone(), &mut detail[*i]).await?;
                }
                Ok(())
            }
            // No live node, a store error: the claim is ours; the next
            // visit submits again.
            Err(e) => {
                for (i, _, _) in parts {
                    detail[*i].why = format!("submitting failed, retried next visit: {e}");
                }
                Ok(())
            }
        }
    }

    async fn record(&mut self, name: &Name, seq: u64, id: TaskId, d: &mut PartitionSummary) -> Result<(), PolicyError> {
        let o = self.item;
        let t = DecisionTask { task: id, by: self.me.to_string(), wall_ms: self.wall_ms };
        let path = paths::decision(&o.db, &o.schema, &o.table, name, seq, DecisionFile::Task);
        self.requests += 1;
        if self.store.create(&path, encode(&t)).await? == Created::Exists {
            if let Ok(Some(other)) = read_json::<DecisionTask>(self.store, &path).await {
                if other.task != id {
                    tracing::warn!(partition = %name, duplicate = %id, kept = %other.task, "stopping a duplicate planner task");
                    let _ = tasks::stop(self.store, &id, "planner: duplicate", self.wall_ms).await;
                }
                d.task = Some(other.task);
            }
        } else {
            d.task = Some(id);
        }
        d.in_flight = true;
        d.why = super::retention::running(d, d.task);
        Ok(())
    }

    /// A task that can never be submitted: the claim goes, the reason stays
    /// in the summary, and the partition is judged again next pass.
    async fn give_up(
        &mut self,
        name: &Name,
        seq: u64,
        problem: String,
        d: &mut PartitionSummary,
    ) -> Result<(), PolicyError> {
        let o = self.item;
        tracing::warn!(table = %format!("{}/{}/{}", o.db, o.schema, o.table), partition = %name, "planner cannot submit: {problem}");
        self.requests += 1;
        self.store.delete(&paths::decision(&o.db, &o.schema, &o.table, name, seq, DecisionFile::Claim)).await?;
        d.seq = seq - 1;
        d.in_flight = false;
        d.why = format!("cannot submit: {problem}");
        Ok(())
    }
}

/// The task a compaction decision submits for `spec_parts`, with what the
/// policy says of its executor.
fn compaction_spec(o: &super::Owned, spec_parts: Vec<Name>) -> TaskSpec {
    let mut spec = TaskSpec::table(o.db.clone(), o.schema.clone(), o.table.clone());
    spec.partitions = spec_parts;
    spec.executor = Some(executor_of(&o.policy));
    spec.params.insert(TARGET_SIZE_PARAM.into(), o.policy.target_size.to_string());
    if matches!(spec.executor.as_ref().map(|e| e.kind), Some(ExecutorKind::Merge | ExecutorKind::Parquet)) {
        let age = format!("{}ms", o.policy.min_file_age_ms());
        spec.params.insert(crate::executor::merge::MIN_AGE_PARAM.into(), age);
    }
    if o.policy.sole_writer {
        spec.params.insert(crate::executor::iceberg::catalog::SOLE_WRITER_PARAM.into(), "true".into());
    }
    if let Some(n) = o.policy.file_group_size {
        spec.params.insert(crate::executor::iceberg::group::GROUP_BYTES_PARAM.into(), n.to_string());
    }
    if let Some(n) = o.policy.delete_file_threshold {
        spec.params.insert(crate::executor::iceberg::DELETE_FILES_PARAM.into(), n.to_string());
    }
    spec
}

/// A partition whose newest decision file is bad (not one compactd wrote,
/// or unreadable): whether a task runs for it is unknown, so it is held as
/// in flight (never submitted twice) until the file is removed; the rest
/// of the table is planned as usual.
pub(super) fn blocked(d: &mut PartitionSummary, e: PolicyError) {
    if matches!(e, PolicyError::Store(_)) {
        tracing::warn!("planner: {e}");
    } else {
        tracing::warn!("planner: a bad decision file holds its partition until it is removed: {e}");
    }
    d.in_flight = true;
    d.why = format!("held: {e} (remove it to plan the partition again; `compactd check` names it)");
}
