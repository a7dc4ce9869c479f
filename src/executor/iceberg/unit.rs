//! A partition unit of an `iceberg` task: rewrites the partition's small
//! data files and stages the outputs for the task's commit (see the
//! module doc of [`super`]).
//!
//! Invariants:
//! - Nothing of the table's metadata is written: the outputs are files no
//!   snapshot names, and the staged record lives in the scheduler tree.
//! - Outputs are written in the table's current schema (each input read
//!   into it by field id, [`super::schema`]) without the rows the table's
//!   delete files remove ([`super::deletes`]), in the inputs' spec and
//!   partition, beside the first input; an output's size in the record is
//!   the stored object's.
//! - A unit refuses, naming the file, a partition whose files or delete
//!   files are not Parquet, or an input that does not read into the
//!   table's schema; it removes its own files when it fails before
//!   staging.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use store::Store;

use super::deletes;
use super::manifest::{fnv64, unit_key, Entry};
use super::metrics::{file_metrics, MetricsConfig};
use super::rows::TableRows;
use super::schema::ById;
use super::{group, Head, IcebergError, IcebergJob, Outcome, StagedOutput, StagedUnit};
use crate::executor::merge::{parquet, Format, SUPERSEDED};

/// The file-name stem of this unit's outputs in this round: the unit hash
/// covers its index and name, so that two units never share an output's
/// name (even two of one partition, which the commit refuses to take
/// both of: it deletes the outputs of the one it abandons).
pub fn round_stem(job: &IcebergJob) -> Result<String, IcebergError> {
    let unit = format!("{}/{}", job.unit_index()?, job.unit);
    Ok(format!("compactd-{}-r{}-u{:016x}-a", job.merge.task, job.merge.round, fnv64(&unit)))
}

pub async fn run(store: &Store, job: &IcebergJob) -> Result<(Outcome, BTreeMap<String, u64>), IcebergError> {
    let dir = job.table().to_string();
    job.catalog.check_writers(store, &dir)?;
    let head = Head::load(store, &job.catalog, &dir).await?;
    let Some(snapshot) = head.snapshot.clone() else {
        return Ok((Outcome::NothingToDo, BTreeMap::new()));
    };
    let t = &head.table;
    let (partition, _) = group::parse(&job.unit);
    let target = job.sizing.target(t);
    let threshold = parquet::small_threshold(target) as i64;
    // Small files, and files most of whose rows deletes may remove: the
    // partition's candidates, of which this unit's group is its own.
    let heavy = head.delete_heavy(job.sizing.delete_files);
    let candidates: Vec<&Entry> = head
        .live()
        .map(|(_, e)| e)
        .filter(|e| e.content == 0 && unit_key(e.spec_id, &e.partition) == partition)
        .filter(|e| e.file_size < threshold || heavy.contains(&e.file_path))
        .collect();
    let mut small: Vec<&Entry> =
        candidates.iter().copied().filter(|e| group::holds(&job.unit, partition, &e.file_path)).collect();
    if let Some(e) = small.iter().find(|e| !e.file_format.eq_ignore_ascii_case("parquet")) {
        return Err(job.broken(format!("{} is {} data: compactd rewrites Parquet only", e.file_path, e.file_format)));
    }
    small.sort_by(|a, b| a.file_path.cmp(&b.file_path));
    if small.len() < 2 && !small.iter().any(|e| heavy.contains(&e.file_path)) {
        return Ok((Outcome::NothingToDo, BTreeMap::new()));
    }
    let mut inputs = vec![];
    for e in &small {
        inputs.push((t.store_path(&e.file_path).map_err(|p| job.broken(p))?, e.file_size.max(0) as u64));
    }
    let first = &inputs[0].0;
    let out_dir = first.rfind('/').map(|i| first[..=i].to_string()).unwrap_or_else(|| dir.clone());
    store.sweep_stale_temps(&out_dir).await?;
    let stem = format!("{}{}-", round_stem(job)?, job.merge.attempt);
    let name = |k: usize| {
        let p = format!("{out_dir}{stem}{k}.parquet");
        (p.clone(), p)
    };
    let Format::Parquet(options) = &job.merge.format else {
        return Err(job.broken("the iceberg executor writes Parquet: its job's format must be Parquet"));
    };
    let props = t.properties();
    let options = &table_options(options, &props, &dir, target);
    let by_id = ById::new(t.current_schema(), &props).map_err(|e| job.broken(format!("its current schema: {e}")))?;
    let mut loaded = deletes::load(store, &head, &small, &by_id, &job.merge.io)
        .await
        .map_err(|e| job.broken(format!("unit {}: {e}", job.unit)))?;
    let (position_files, equality_files) = (loaded.position_files.len(), loaded.equality_files.len());
    // The equality deletes index the table's columns, which the lineage
    // columns follow.
    let (by_id, lineage) = if t.format_version() >= 3 {
        let mut l = std::collections::HashMap::new();
        for e in &small {
            l.insert(t.store_path(&e.file_path).map_err(|p| job.broken(p))?, (e.first_row_id, e.sequence_number));
        }
        (by_id.with_lineage(), Some(l))
    } else {
        (by_id, None)
    };
    let fit = TableRows {
        by_id,
        schema_json: t.current_schema().to_string(),
        deletes: Arc::new(std::mem::take(&mut loaded.deletes)),
        lineage,
    };
    let merge = crate::executor::merge::MergeJob { target_size: target, ..job.merge.clone() };
    let staged = match parquet::rewrite(store, &merge, options, inputs, name, Some(Arc::new(fit))).await {
        Ok(s) => s,
        Err(e) => {
            remove_attempt_files(store, &out_dir, &stem).await;
            return Err(e.into());
        }
    };
    if staged.outputs.is_empty() {
        return Ok((Outcome::NothingToDo, BTreeMap::new()));
    }
    let config = MetricsConfig::new(&props, t.current_schema(), &t.sort_fields());
    let by_store: BTreeMap<String, &Entry> =
        small.iter().map(|e| (t.store_path(&e.file_path).unwrap_or_default(), *e)).collect();
    let mut outputs = vec![];
    let mut input_paths = vec![];
    for ((o, (bytes, _)), footer) in staged.outputs.iter().zip(&staged.written).zip(&staged.footers) {
        outputs.push(StagedOutput {
            uri: t.file_uri(&o.final_path),
            store_path: o.final_path.clone(),
            size: *bytes,
            metrics: file_metrics(footer, &config),
        });
        for i in &o.inputs {
            input_paths.push(by_store[i].file_path.clone());
        }
    }
    let rewritten: BTreeSet<String> = input_paths.iter().cloned().collect();
    let spent_deletes = loaded.spent(&head, &rewritten);
    let others: BTreeSet<String> =
        candidates.iter().map(|e| e.file_path.clone()).filter(|p| !rewritten.contains(p)).collect();
    let shared_deletes = loaded.shared(&head, &rewritten, &others);
    let record = StagedUnit {
        unit: job.unit.clone(),
        spec_id: small[0].spec_id,
        table_uuid: t.uuid().to_string(),
        format_version: t.format_version(),
        snapshot_read: snapshot.id,
        sequence_number: snapshot.sequence_number,
        inputs: input_paths,
        outputs,
        stats: staged.stats.clone(),
        spent_deletes,
        shared_deletes,
    };
    let (tree, task) = job.tree()?;
    if let Some((sched, folder)) = &job.merge.fence {
        if !crate::executor::merge::fence_holds(sched, folder).await? {
            remove_attempt_files(store, &out_dir, &stem).await;
            return Err(job.broken(SUPERSEDED));
        }
    }
    let path = layouts::v2::staged_unit(&task, job.merge.round, job.unit_index()?, job.merge.attempt);
    let bytes = serde_json::to_vec_pretty(&record).expect("a staged unit serializes");
    if tree.create(&path, bytes).await? == store::Created::Exists {
        // An attempt number is never reused: a record there is this
        // attempt's own create whose reply was lost.
        tracing::info!(path, "the staged record exists already (a retried create)");
    }
    let mut stats = staged.stats;
    stats.insert("snapshot_read".into(), snapshot.id as u64);
    stats.insert("position_delete_files".into(), position_files as u64);
    stats.insert("equality_delete_files".into(), equality_files as u64);
    let outcome = Outcome::Staged { inputs: record.inputs.len(), outputs: record.outputs.len() };
    Ok((outcome, stats))
}

/// The outputs' encoding as the table's properties ask it of every writer
/// (Java's defaults where they are unset: zstd at level 3, row groups of at
/// most 128 MiB, here also at most the task's): `write.parquet.compression-codec`,
/// `write.parquet.compression-level` and `write.parquet.row-group-size-bytes`.
/// A codec compactd does not write (brotli) keeps the node's, and says so.
fn table_options(
    node: &parquet::ParquetOptions,
    props: &BTreeMap<String, String>,
    table: &str,
    target: u64,
) -> parquet::ParquetOptions {
    let codec = props.get("write.parquet.compression-codec").map(|c| c.to_ascii_lowercase());
    let level = props.get("write.parquet.compression-level");
    let spec = match (codec.as_deref().unwrap_or("zstd"), level) {
        ("zstd", Some(l)) => format!("zstd:{l}"),
        ("zstd", None) => "zstd:3".to_string(),
        (c, _) => c.to_string(),
    };
    let mut out = parquet::ParquetOptions::for_target(target, node.compression);
    match parquet::parse_compression(&spec) {
        Ok(c) => out.compression = c,
        Err(e) => tracing::warn!(
            table,
            property = spec,
            "the table's codec is not one compactd writes ({e}): kept the node's"
        ),
    }
    if let Some(bytes) = props.get("write.parquet.row-group-size-bytes").and_then(|b| b.parse::<usize>().ok()) {
        out.row_group_bytes = bytes.clamp(1 << 16, out.row_group_bytes.max(1 << 16));
    }
    out
}

/// Deletes the files this attempt wrote (no snapshot names them). Best
/// effort: what is left is an orphan for `vacuum-orphans`.
pub async fn remove_attempt_files(store: &Store, dir: &str, prefix: &str) {
    match store.list(dir).await {
        Ok(entries) => {
            for e in entries.iter().filter(|e| !e.is_dir && e.name().starts_with(prefix)) {
                if let Err(err) = store.delete(&e.path).await {
                    tracing::warn!(path = e.path, error = %err, "could not remove a file of an uncommitted attempt");
                }
            }
        }
        Err(err) => tracing::warn!(dir, error = %err, "could not list a folder to clean an uncommitted attempt"),
    }
}
