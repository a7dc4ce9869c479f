//! Which units a task runs when it names no partitions: the partition
//! folders of its table on the data backend, or, for a `delta` task, the
//! partitions of the table's log that hold small files. Discovery runs once
//! per round by the task's manager, which records what it found in the
//! task's info so that a later manager runs the same units.

use layouts::formats::{ExecutorKind, TaskInfo};
use layouts::Name;
use store::Store;

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
    if kind == ExecutorKind::Delta {
        return delta(data, info, default_target).await;
    }
    let dir = table_dir(&info.db_name, &info.schema_name, &info.table_name);
    let found = partition_folders(data, &dir).await?;
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
        Err(crate::executor::delta::DeltaError::Store(e)) if !e.is_bad_file() => return Err(e),
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

/// The target size of a task's outputs: its own (a policy's task carries
/// one), else the node's `default`.
pub fn target_size(info: &TaskInfo, default: u64) -> u64 {
    info.run
        .params
        .get(crate::policy::TARGET_SIZE_PARAM)
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// `<db>/<schema>/<table>/` on the data backend.
pub fn table_dir(db: &Name, schema: &Name, table: &Name) -> String {
    format!("{db}/{schema}/{table}/")
}

/// The folders `<dir><partition>/`, sorted; names that do not validate or
/// start with `_` or `.` are skipped.
async fn partition_folders(data: &Store, dir: &str) -> store::Result<Vec<Name>> {
    let mut out: Vec<Name> = data
        .list(dir)
        .await?
        .into_iter()
        .filter(|e| e.is_dir && !layouts::limits::reserved_partition(e.name()))
        .filter_map(|e| Name::parse(e.name()).ok())
        .collect();
    out.sort();
    Ok(out)
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
