//! A worker's claim of a unit attempt, in both layouts, and the executor
//! request it then starts (layouts/PROTOCOL.md, "Tasks").
//!
//! Invariants:
//! - Layout 2: the claim is the atomic create of the subtask's
//!   `Status.Running` naming this incarnation; the info is read after it,
//!   so an attempt whose folder was removed meanwhile never starts. Of a
//!   worker and a manager creating that one name, exactly one wins.
//! - Layout 3: the claim is the create of the empty
//!   `u<unit>.a<attempt>.Running.<incarnation>`; then the batch is listed,
//!   and the attempt starts only if that listing shows the batch's `Info`
//!   and no `Released` (of the batch or the unit) and no `Cancel`. A
//!   manager or a draining worker releasing the attempt creates its
//!   `Released` and lists after it: of two such write-then-list pairs at
//!   least one listing shows the other's write, so an attempt is either
//!   started here or released, never both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use layouts::formats::{self, ExecutorKind, ExecutorSpec, Shard, StatusMark, TaskInfo};
use layouts::v3::{self, BatchInfo, Mark};
use layouts::{v2, Name, NodeId, SubtaskState, TaskId};
use store::{Created, Store};

use super::config::WorkConfig;
use super::folder::list_batch;
use crate::executor::ExecRequest;
use crate::tasks::WRITE_CONCURRENCY;

/// What a claim found for an attempt to start.
pub(super) enum Prepared {
    /// Claimed by this incarnation: start this.
    Start { req: Box<ExecRequest>, manager: Option<NodeId> },
    /// Claimed by another incarnation of this node, or taken back by its
    /// manager before anyone claimed it (layout 2).
    Earlier,
    /// Released after this incarnation claimed it (layout 3): it does not
    /// start, and its end is reported (the manager may wait for it).
    Released { manager: NodeId },
    /// Gone, or failed before anything ran (its `Failed` mark is written).
    Nothing,
}

/// One unit attempt as the executor is told about it.
struct UnitSpec<'a> {
    task: &'a TaskInfo,
    parent: TaskId,
    round: u32,
    unit: u32,
    attempt: u32,
    partition: Option<&'a Name>,
    shard: Option<Shard>,
    fence: String,
}

/// The executor request of a unit attempt, or why nothing may run here.
fn request(cfg: &WorkConfig, me: &NodeId, u: UnitSpec<'_>) -> Result<ExecRequest, String> {
    let info = u.task;
    let executor = info.run.executor.clone();
    let kind = executor.as_ref().map(|e| e.kind).unwrap_or(cfg.executor);
    let mut vars = BTreeMap::new();
    vars.insert("db", info.db_name.to_string());
    vars.insert("schema", info.schema_name.to_string());
    vars.insert("table", info.table_name.to_string());
    vars.insert("partition", u.partition.map(|p| p.to_string()).unwrap_or_default());
    vars.insert("task", u.parent.to_string());
    vars.insert("subtask", v3::unit_id(&u.parent, u.round, u.unit, u.attempt).to_string());
    vars.insert("round", u.round.to_string());
    vars.insert("attempt", u.attempt.to_string());
    if let Some(s) = u.shard {
        vars.insert("shard_index", s.index.to_string());
        vars.insert("shard_total", s.total.to_string());
    }
    let command = match kind {
        // Nothing is executed when it fails; the manager retries the unit
        // on another node (which may define the command).
        ExecutorKind::Command => Some(command_for(cfg, me, executor.as_ref())?),
        _ => None,
    };
    if kind.is_builtin_merge() && u.partition.is_none() {
        return Err(format!("the {} executor needs a partition", kind.label()));
    }
    Ok(ExecRequest {
        kind,
        command,
        timeout: executor.as_ref().and_then(|e| e.timeout_ms).map(Duration::from_millis).unwrap_or(cfg.command_timeout),
        vars,
        params: info.run.params.clone(),
        data_uri: cfg.data_uri.clone(),
        target_size: crate::tasks::discover::target_size(info, cfg.target_size),
        compression: cfg.parquet_compression.clone(),
        fence: Some((cfg.root_uri.clone(), u.fence)),
        run_as: cfg.run_as.clone(),
    })
}

/// Layout 2: claims a subtask (creates its `Status.Running` mark naming
/// `incarnation`), then reads its info; writes its `Failed` mark when it
/// cannot run here. `marked`: the listing showed it claimed already, so
/// the mark is read to tell whose it is (this incarnation's own claim whose
/// reply was lost is taken up again).
pub(super) async fn prepare(
    store: &Store,
    cfg: &WorkConfig,
    me: &NodeId,
    incarnation: u64,
    sub: &Name,
    marked: bool,
    wall_ms: u64,
) -> store::Result<Prepared> {
    let path = v2::subtask_status(me, sub, SubtaskState::Running);
    let claim = StatusMark { incarnation, wall_ms, ..Default::default() };
    let ours = if marked { false } else { store.create(&path, formats::encode(&claim)).await? == Created::Created };
    if !ours {
        let mark =
            store.read_or_bad(&path).await?.and_then(Result::ok).and_then(|b| formats::decode::<StatusMark>(&b).ok());
        if mark.is_none_or(|m| m.incarnation != incarnation) {
            return Ok(Prepared::Earlier);
        }
    }
    let failed = |why: String| async move {
        let mark = StatusMark { incarnation, wall_ms, exit_code: None, error: Some(why), ..Default::default() };
        store.put(&v2::subtask_status(me, sub, SubtaskState::Failed), formats::encode(&mark)).await?;
        Ok(Prepared::Nothing)
    };
    let info = match store.read_or_bad(&v2::subtask_info(me, sub)).await? {
        Some(Ok(b)) => formats::decode::<TaskInfo>(&b).map_err(|e| e.to_string()),
        Some(Err(bad)) => Err(bad.to_string()),
        None => {
            // Removed since the listing (its manager moved or ended it):
            // never started; our claim would only be litter.
            store.delete(&path).await?;
            return Ok(Prepared::Nothing);
        }
    };
    let info = match info {
        Ok(i) if i.run.subtask.as_ref().is_some_and(|m| m.node == *me) => i,
        Ok(_) => return failed("subtask info does not name this node".into()).await,
        Err(e) => {
            // Creates are complete-or-absent, so this is not a write in
            // progress: garbage, or a file torn by a crashed older
            // compactd. Failing the attempt lets the manager retry the
            // unit on another attempt instead of waiting forever.
            tracing::warn!(subtask = %sub, "subtask info does not parse, failing the attempt: {e}");
            return failed(format!("subtask info does not parse: {e}")).await;
        }
    };
    let meta = info.run.subtask.clone().expect("checked above");
    let spec = UnitSpec {
        task: &info,
        parent: meta.parent,
        round: meta.round,
        unit: meta.index,
        attempt: meta.attempt,
        partition: info.partition_name.as_ref(),
        shard: meta.shard,
        fence: v2::subtask_dir(me, sub),
    };
    match request(cfg, me, spec) {
        Ok(req) => Ok(Prepared::Start { req: Box::new(req), manager: meta.manager }),
        Err(why) => {
            tracing::warn!(subtask = %sub, "{why}");
            failed(why).await
        }
    }
}

/// Layout 3: claims the `units` (unit, attempt, claimed already by this
/// incarnation) of one batch, lists the batch, and says of each claimed
/// one whether it starts (module docs). An error of one claim leaves that
/// unit for the next round; the first error is returned beside the rest.
pub(super) async fn prepare_batch(
    store: &Store,
    cfg: &WorkConfig,
    me: &NodeId,
    incarnation: u64,
    batch: &Name,
    info: &Arc<BatchInfo>,
    units: Vec<(u32, u32, bool)>,
) -> (Vec<((u32, u32), Prepared)>, Option<store::StoreError>) {
    let mut first_err = None;
    let claims: Vec<((u32, u32), store::Result<Created>)> = futures::stream::iter(units)
        .map(|(u, a, ours)| async move {
            if ours {
                return ((u, a), Ok(Created::Exists));
            }
            let path = v3::unit_mark(me, batch, u, a, Mark::Running(incarnation));
            ((u, a), store.create(&path, Vec::new()).await)
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    // Created, or there already: this incarnation's own claim (a lost
    // reply); another incarnation's has another name.
    let claimed: Vec<(u32, u32)> = claims
        .into_iter()
        .filter_map(|(k, r)| match r {
            Ok(_) => Some(k),
            Err(e) => {
                first_err.get_or_insert(e);
                None
            }
        })
        .collect();
    if claimed.is_empty() {
        return (vec![], first_err);
    }
    let listed = match list_batch(store, me, batch).await {
        Ok(l) => l,
        Err(e) => return (vec![], first_err.or(Some(e))),
    };
    let mut out = vec![];
    for (u, a) in claimed {
        let marks = listed.marks(u, a);
        if !listed.has_info {
            // Removed since the listing: never started; the claim would be
            // litter.
            if let Err(e) = store.delete(&v3::unit_mark(me, batch, u, a, Mark::Running(incarnation))).await {
                first_err.get_or_insert(e);
            }
            out.push(((u, a), Prepared::Nothing));
            continue;
        }
        if listed.released || marks.released || marks.cancel {
            out.push(((u, a), Prepared::Released { manager: info.manager.clone() }));
            continue;
        }
        let Some(bu) = info.units.iter().find(|x| x.unit == u && x.attempt == a) else { continue };
        let spec = UnitSpec {
            task: &info.task,
            parent: info.task.id,
            round: info.round,
            unit: u,
            attempt: a,
            partition: bu.partition.as_ref(),
            shard: bu.shard,
            fence: v3::fence_of_unit(me, batch, u, a),
        };
        match request(cfg, me, spec) {
            Ok(req) => out.push(((u, a), Prepared::Start { req: Box::new(req), manager: Some(info.manager.clone()) })),
            Err(why) => {
                tracing::warn!(%batch, unit = u, attempt = a, "{why}");
                let mark = StatusMark { incarnation, exit_code: None, error: Some(why), ..Default::default() };
                let failed = v3::unit_mark(me, batch, u, a, Mark::Failed);
                match store.create(&failed, formats::encode(&mark)).await {
                    Ok(_) => out.push(((u, a), Prepared::Nothing)),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
    }
    (out, first_err)
}

/// Reads a batch's `Info` (once per batch: it never changes). `Ok(None)`:
/// gone. `Err(why)` in the inner result: not an info this node can run from
/// (unreadable, or for another node).
pub(super) async fn read_batch_info(
    store: &Store,
    me: &NodeId,
    batch: &Name,
) -> store::Result<Option<Result<BatchInfo, String>>> {
    Ok(match store.read_or_bad(&v3::batch_info(me, batch)).await? {
        None => None,
        Some(Err(bad)) => Some(Err(bad.to_string())),
        Some(Ok(b)) => Some(match formats::decode::<BatchInfo>(&b) {
            Ok(i) if i.node == *me => Ok(i),
            Ok(_) => Err("the batch's info does not name this node".into()),
            Err(e) => Err(format!("the batch's info does not parse: {e}")),
        }),
    })
}

/// The template a command subtask runs on this node: the named command if
/// the task names one (only names this node defines), else the task's own
/// inline template if this node allows inline templates, else the node's
/// default `--command`. `Err` says why nothing may run, naming the node.
pub fn command_for(cfg: &WorkConfig, me: &NodeId, spec: Option<&ExecutorSpec>) -> Result<String, String> {
    if let Some(name) = spec.and_then(|s| s.command_name.as_deref()) {
        return cfg.commands.get(name).cloned().ok_or_else(|| {
            let defined: Vec<&str> = cfg.commands.keys().map(String::as_str).collect();
            format!(
                "command {name:?} is not defined on node {me} (it defines: {}); define it with --command {name}=TEMPLATE",
                if defined.is_empty() { "none".to_string() } else { defined.join(", ") }
            )
        });
    }
    if let Some(inline) = spec.and_then(|s| s.command.as_deref()) {
        if !cfg.allow_inline {
            return Err(format!(
                "node {me} does not run command templates carried by a task (start it with --allow-inline-commands, \
                 or name a command the node defines with --command-name); nothing was executed"
            ));
        }
        return Ok(inline.to_string());
    }
    cfg.command
        .clone()
        .ok_or_else(|| format!("node {me} has no default command (--command TEMPLATE) and the task names none"))
}
