//! What a task runs ([`plan`]): its executor, fixed once for all its units
//! (a task written without one takes its manager's default), and its units:
//! its shards, the partitions it names, or, when it names none, the
//! partition folders of its table on the data backend (for a `delta` task,
//! the partitions of the table's log that hold small files; for an
//! `iceberg` task, the partitions of its current snapshot that hold small
//! files, then one last unit, [`Unit::Commit`], that commits what they
//! staged as one snapshot). A table its
//! executor must not change ([`refusal`], see [`crate::table::format`]) is
//! no unit's. Discovery runs once per round by the task's manager, which
//! records what it found in the task's info so that a later manager runs the
//! same units with the same executor.

use layouts::formats::{ExecutorKind, ExecutorSpec, Shard, TaskInfo};
use layouts::Name;
use store::Store;

/// One unit of a task: what one subtask runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    Partition(Name),
    Shard(Shard),
    /// A command task without partitions or shards: one subtask.
    Whole,
    /// An `iceberg` task's last unit: commits what its partition units
    /// staged as one snapshot of the table. Dispatched once every other
    /// unit of the round has ended; its subtask names the partition
    /// [`commit_unit_name`].
    Commit,
}

/// The partition a [`Unit::Commit`] subtask names: reserved (a leading `_`),
/// so never a partition unit's.
pub fn commit_unit_name() -> Name {
    Name::parse(layouts::v2::COMMIT_UNIT).expect("a valid name")
}

/// What a task runs, as its manager decides when it loads the task.
#[derive(Debug, Default)]
pub struct Plan {
    pub units: Vec<Unit>,
    /// Why the task cannot run at all (it then fails with this as its
    /// error): a table its executor must not change, a merge task that
    /// found no partition or named partitions that are not there.
    pub cannot_run: Option<String>,
    /// The task's info changed (its executor fixed, its partitions
    /// discovered): the manager writes it before it dispatches anything, so
    /// that a later manager runs the same units with the same executor.
    pub record: bool,
}

/// The units of the task `info` describes, fixing its executor on the way
/// (`default_executor`: this node's `run --executor`, for a task written
/// without one by an older client or a job step) so that every unit runs
/// the same one whichever node runs it.
pub async fn plan(
    data: &Store,
    info: &mut TaskInfo,
    default_executor: ExecutorKind,
    default_target: u64,
) -> store::Result<Plan> {
    match plan_units(data, info, default_executor, default_target).await {
        // The table cannot be read for a reason no retry changes (a link
        // where its log folder should be, no permission): the task fails
        // with it instead of waiting for it forever.
        Err(e) if e.is_permanent() => Ok(Plan { cannot_run: Some(e.to_string()), ..Plan::default() }),
        other => other,
    }
}

async fn plan_units(
    data: &Store,
    info: &mut TaskInfo,
    default_executor: ExecutorKind,
    default_target: u64,
) -> store::Result<Plan> {
    let mut plan = Plan::default();
    let kind = match &info.run.executor {
        Some(e) => e.kind,
        None => {
            info.run.executor = Some(ExecutorSpec::builtin(default_executor));
            plan.record = true;
            default_executor
        }
    };
    let command = !kind.is_builtin_merge();
    let table = table_dir(&info.db_name, &info.schema_name, &info.table_name);
    if kind == ExecutorKind::Expire {
        // A table's retention is one unit: the whole table.
        plan.cannot_run = expire_refusal(data, &table, &info.run.params).await?;
        if plan.cannot_run.is_none() {
            plan.units = vec![Unit::Whole];
        }
        return Ok(plan);
    }
    plan.units = if let Some(n) = info.run.shards {
        (0..n).map(|index| Unit::Shard(Shard { index, total: n })).collect()
    } else if !info.run.partitions.is_empty() {
        plan.cannot_run = refusal(data, &table, None, info.run.partitions.first(), kind).await?;
        // A Delta or Iceberg unit is a partition of the table's log or
        // manifests, not a folder: the unit itself finds it (or nothing)
        // there. A merge of a folder that is not there would "succeed"
        // having merged nothing.
        if !command && !matches!(kind, ExecutorKind::Delta | ExecutorKind::Iceberg) && plan.cannot_run.is_none() {
            plan.cannot_run = missing_partitions(data, &table, &info.run.partitions).await?;
        }
        if kind == ExecutorKind::Iceberg && plan.cannot_run.is_none() {
            split_iceberg_groups(data, info, default_target, &table, &mut plan).await?;
        }
        info.run.partitions.iter().cloned().map(Unit::Partition).collect()
    } else if let Some(p) = &info.partition_name {
        plan.cannot_run = refusal(data, &table, None, Some(p), kind).await?;
        vec![Unit::Partition(p.clone())]
    } else {
        match units(data, info, kind, default_target).await? {
            Ok(found) if found.is_empty() && command => vec![Unit::Whole],
            Ok(found) => {
                // Remember what was discovered: a later manager must run the
                // same units (none: a compact Delta table).
                info.run.partitions = found.clone();
                plan.record = true;
                found.into_iter().map(Unit::Partition).collect()
            }
            Err(why) => {
                plan.cannot_run = Some(why);
                vec![]
            }
        }
    };
    if kind == ExecutorKind::Iceberg && !plan.units.is_empty() {
        plan.units.push(Unit::Commit);
    }
    Ok(plan)
}

/// The partitions a task without a partition list runs, found on the data
/// backend (`command`: the task runs a command executor, whose table may
/// have no partition folders; then none found is `Ok(vec![])`). `Err`: why
/// the task cannot run, for its status.
pub async fn units(
    data: &Store,
    info: &TaskInfo,
    kind: ExecutorKind,
    default_target: u64,
) -> store::Result<Result<Vec<Name>, String>> {
    let dir = table_dir(&info.db_name, &info.schema_name, &info.table_name);
    if kind == ExecutorKind::Delta {
        if let Some(why) = refusal(data, &dir, None, None, kind).await? {
            return Ok(Err(why));
        }
        return delta(data, info, default_target).await;
    }
    if kind == ExecutorKind::Iceberg {
        if let Some(why) = refusal(data, &dir, None, None, kind).await? {
            return Ok(Err(why));
        }
        return iceberg(data, info, default_target).await;
    }
    let listed = data.list(&dir).await?;
    let found = partition_folders_in(&listed);
    if let Some(why) = refusal(data, &dir, Some(&listed), found.first(), kind).await? {
        return Ok(Err(why));
    }
    if found.is_empty() && kind.is_builtin_merge() {
        // Nothing to compact is not success: ops submitted a table that is
        // missing or empty, or the wrong --data.
        return Ok(Err(format!(
            "no partition folders under {dir} on the data backend {}: is the table name or --data right?",
            data.uri()
        )));
    }
    if let Err(e) = layouts::limits::check_units("partitions", found.len() as u64) {
        return Ok(Err(format!("refused: {dir} on the data backend holds {e}")));
    }
    Ok(Ok(found))
}

/// The units of a `delta` task: the partitions of the table's log with two
/// or more small files (of the task's target size, else `default_target`).
/// `Err`: why the task cannot run (not a Delta table, an unsupported
/// protocol, a partition whose name cannot be a unit name).
async fn delta(data: &Store, info: &TaskInfo, default_target: u64) -> store::Result<Result<Vec<Name>, String>> {
    let target = target_size(info, default_target);
    let table = table_dir(&info.db_name, &info.schema_name, &info.table_name);
    let found = match crate::executor::delta::partitions_to_compact(data, &table, target).await {
        Ok(f) => f,
        Err(crate::executor::delta::DeltaError::Store(e)) if !e.is_bad_file() && !e.is_permanent() => return Err(e),
        Err(e) => return Ok(Err(format!("{e} (on the data backend {})", data.uri()))),
    };
    if let Err(e) = layouts::limits::check_units("partitions", found.len() as u64) {
        return Ok(Err(format!("refused: {table} on the data backend holds {e}")));
    }
    let mut out = vec![];
    for p in found {
        match Name::parse(&p) {
            Ok(n) => out.push(n),
            Err(e) => return Ok(Err(format!("{table}: partition {p:?} cannot name a unit: {e}"))),
        }
    }
    Ok(Ok(out))
}

/// The units of an `iceberg` task: the partitions (spec and tuple) of the
/// table's current snapshot with small data files or many deleted rows,
/// split in file groups when large (see
/// [`crate::executor::iceberg::partitions_to_compact`]). `Err`: why the task cannot run (not an
/// Iceberg table, one compactd refuses, a catalog it does not commit to).
async fn iceberg(data: &Store, info: &TaskInfo, default_target: u64) -> store::Result<Result<Vec<Name>, String>> {
    let table = table_dir(&info.db_name, &info.schema_name, &info.table_name);
    let param = |k: &str| info.run.params.get(k).cloned();
    let sizing = match crate::executor::iceberg::Sizing::from_params(param, default_target) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let cat = match crate::executor::iceberg::catalog::Catalog::from_params(|k| info.run.params.get(k).cloned()).await {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    if let Err(e) = cat.check_writers(data, &table) {
        return Ok(Err(e.to_string()));
    }
    let found = match crate::executor::iceberg::partitions_to_compact(data, &cat, &table, &sizing).await {
        Ok(f) => f,
        Err(crate::executor::iceberg::IcebergError::Store(e)) if !e.is_bad_file() && !e.is_permanent() => {
            return Err(e)
        }
        Err(e) => return Ok(Err(format!("{e} (on the data backend {})", data.uri()))),
    };
    if let Err(e) = layouts::limits::check_units("partitions", found.len() as u64) {
        return Ok(Err(format!("refused: {table} on the data backend holds {e}")));
    }
    let mut out = vec![];
    for p in found {
        match Name::parse(&p) {
            Ok(n) => out.push(n),
            Err(e) => return Ok(Err(format!("{table}: partition {p:?} cannot name a unit: {e}"))),
        }
    }
    Ok(Ok(out))
}

/// A large partition an `iceberg` task names is split into file groups as
/// a discovered one is ([`crate::executor::iceberg::split_named`]), once:
/// the groups are recorded as the task's partitions, with
/// [`SPLIT_PARAM`](crate::executor::iceberg::group::SPLIT_PARAM), so that
/// a later manager runs the same units. A table that cannot be read now
/// keeps the names: its units report why.
async fn split_iceberg_groups(
    data: &Store,
    info: &mut TaskInfo,
    default_target: u64,
    table: &str,
    plan: &mut Plan,
) -> store::Result<()> {
    use crate::executor::iceberg::group::SPLIT_PARAM;
    if info.run.params.contains_key(SPLIT_PARAM) {
        return Ok(());
    }
    let param = |k: &str| info.run.params.get(k).cloned();
    let (Ok(sizing), Ok(cat)) = (
        crate::executor::iceberg::Sizing::from_params(param, default_target),
        crate::executor::iceberg::catalog::Catalog::from_params(param).await,
    ) else {
        return Ok(());
    };
    let named: Vec<String> = info.run.partitions.iter().map(|n| n.to_string()).collect();
    let split = match crate::executor::iceberg::split_named(data, &cat, table, &sizing, &named).await {
        Ok(s) => s,
        Err(crate::executor::iceberg::IcebergError::Store(e)) if !e.is_bad_file() && !e.is_permanent() => {
            return Err(e)
        }
        Err(_) => return Ok(()),
    };
    let names: Result<Vec<Name>, _> = split.iter().map(|s| Name::parse(s)).collect();
    if let Ok(names) = names {
        info.run.partitions = names;
        info.run.params.insert(SPLIT_PARAM.into(), "true".into());
        plan.record = true;
    }
    Ok(())
}

/// The target size of a task's outputs: its own (a policy's task carries
/// one), else the node's `default`.
pub fn target_size(info: &TaskInfo, default: u64) -> u64 {
    info.run
        .params
        .get(layouts::formats::TARGET_SIZE_PARAM)
        .and_then(|v| layouts::units::parse_target_size(v).ok())
        .unwrap_or(default)
}

/// `<db>/<schema>/<table>/` on the data backend.
pub fn table_dir(db: &Name, schema: &Name, table: &Name) -> String {
    format!("{db}/{schema}/{table}/")
}

/// Why the `kind` executor must not change the table at `dir`, judged by
/// [`crate::table::format::judge`] with one of its partition folders
/// (`listed`: a listing of the table folder the caller has). `None`: it
/// may; always for `command` executors, which are the user's own.
pub async fn refusal(
    data: &Store,
    dir: &str,
    listed: Option<&[store::Entry]>,
    partition: Option<&Name>,
    kind: ExecutorKind,
) -> store::Result<Option<String>> {
    let partition = partition.map(|p| format!("{dir}{p}/"));
    crate::table::format::judge(data, dir, listed, partition.as_deref(), kind).await
}

/// Why an `expire` task cannot run on the table at `dir`: it is neither a
/// Delta nor an Iceberg table, or one of a format compactd must not
/// change, or its retention is refused.
pub async fn expire_refusal(
    data: &Store,
    dir: &str,
    params: &std::collections::BTreeMap<String, String>,
) -> store::Result<Option<String>> {
    use crate::executor::delta::{expire, DeltaError};
    use crate::executor::iceberg::{self, IcebergError};
    let retention = match crate::executor::expire::retention(|k| params.get(k).cloned()) {
        Ok(r) => r,
        Err(e) => return Ok(Some(e.to_string())),
    };
    let log = format!("{dir}{}", crate::executor::delta::log::LOG_DIR);
    let delta = data.list(&log).await.is_ok_and(|e| !e.is_empty());
    if delta {
        match expire::refusal(data, dir, &retention).await {
            Ok(None) => {}
            Ok(Some(why)) => return Ok(Some(why)),
            Err(DeltaError::Store(e)) if !e.is_bad_file() && !e.is_permanent() => return Err(e),
            Err(e) => return Ok(Some(format!("{e} (on the data backend {})", data.uri()))),
        }
    } else if iceberg::orphans::is_table(data, dir).await {
        let checked = async {
            let cat = iceberg::catalog::Catalog::from_params(|k| params.get(k).cloned()).await?;
            iceberg::expire::refusal(data, &cat, dir, &retention).await
        };
        match checked.await {
            Ok(None) => {}
            Ok(Some(why)) => return Ok(Some(why)),
            Err(IcebergError::Store(e)) if !e.is_bad_file() && !e.is_permanent() => return Err(e),
            Err(e) => return Ok(Some(format!("{e} (on the data backend {})", data.uri()))),
        }
        return Ok(refusal(data, dir, None, None, ExecutorKind::Iceberg)
            .await?
            .map(|why| format!("the expire executor runs only on the table formats it knows: {why}")));
    }
    Ok(match refusal(data, dir, None, None, ExecutorKind::Delta).await? {
        Some(why) => Some(format!("the expire executor runs Delta retention only: {why}")),
        None if !delta => Some(format!(
            "{dir} on the data backend {} is neither a Delta table (no {log}) nor an Iceberg one (no \
             {dir}metadata/*.metadata.json): the expire executor runs a table format's retention (a folder table's \
             merge deletes what it replaces)",
            data.uri()
        )),
        None => None,
    })
}

/// The folders `<dir><partition>/`, sorted; names that do not validate or
/// start with `_` or `.` are skipped.
async fn partition_folders(data: &Store, dir: &str) -> store::Result<Vec<Name>> {
    Ok(partition_folders_in(&data.list(dir).await?))
}

fn partition_folders_in(listed: &[store::Entry]) -> Vec<Name> {
    let mut out: Vec<Name> = listed
        .iter()
        .filter(|e| e.is_dir && !layouts::limits::reserved_partition(e.name()))
        .filter_map(|e| Name::parse(e.name()).ok())
        .collect();
    out.sort();
    out
}

/// Why a merge of `partitions` of the table at `dir` ([`table_dir`]) cannot
/// run: the folders of those that are not on the data backend (`None`: all
/// there). Asked by `submit` when it is given the data backend, and by the
/// manager of a merge task before it starts.
pub async fn missing_partitions(data: &Store, dir: &str, partitions: &[Name]) -> store::Result<Option<String>> {
    let found = partition_folders(data, dir).await?;
    let missing: Vec<String> =
        partitions.iter().filter(|p| found.binary_search(p).is_err()).map(|p| format!("{dir}{p}/")).collect();
    Ok((!missing.is_empty()).then(|| {
        let more = missing.len().saturating_sub(5);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        format!(
            "no partition folder {}{tail} on the data backend {}: is the partition name or --data right?",
            missing[..missing.len().min(5)].join(", "),
            data.uri()
        )
    }))
}
