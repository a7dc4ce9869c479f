//! The built-in `parquet` executor's staging: rewrites a partition's small
//! Parquet files into files of about the target size, re-encoded (zstd by
//! default) with row groups of a bounded size. The commit, roll-forward and
//! fencing are [`super`]'s, shared with the text merge; the `delta`
//! executor uses [`rewrite`] too.
//!
//! What is an input: a regular file directly in the partition whose name ends
//! in `.parquet`, does not start with `_` or `.` (Hive/Spark: metadata and
//! temp files), and is smaller than [`small_threshold`] (3/4 of the target,
//! as Iceberg's bin-packing): files at or near the target are left alone.
//!
//! Before anything is written, every input's footer is read (the last
//! 64 KiB, [`FOOTERS_AHEAD`] files at a time) and folded into what the
//! outputs will be:
//! - their schema, the union of the inputs' ([`schema`]: what readers
//!   resolve, such as added nullable columns or list child names, is not a
//!   difference; another type or field id is, and fails the unit naming the
//!   field and both files);
//! - their footer key-value pairs ([`spark::KeyValueMerge`]), so that
//!   Spark's keys (its version, legacy-calendar markers, time zone, schema)
//!   and other writers' survive the rewrite;
//! - how Spark reads their dates back ([`spark`]): inputs that Spark would
//!   rebase differently fail the unit naming both files, and an input whose
//!   INT96 timestamps could read differently once stored as INT64 is
//!   checked value by value while decoded (one before 1900 fails the unit
//!   naming the column and the file).
//!
//! A file that is not readable Parquet fails the unit with its path.
//! Nothing is touched then. Why fail rather than merge the compatible
//! files: which schema is "right" is the table owner's call, and a silently
//! skipped file would stay small forever. Then each input is decoded: a
//! file under [`WHOLE_READ`] in one request, a larger one footer first,
//! then one ranged read per row group (its column chunks coalesced); its
//! rows are fitted to the output's schema ([`schema::conform`]).
//!
//! Outputs are cut at input-file boundaries (an input's rows go to one
//! output, so the commit names exactly which inputs each output replaces).
//! A new output starts when the current one's expected size plus the next
//! input's (input bytes × the output/input ratio of the outputs finished so
//! far; for the first output the writer's own estimate, at most 1) would pass
//! the target; a last input that would be alone in an output is left alone.
//! Outputs say `created_by: compactd version <v>` and keep min/max
//! statistics per column chunk, which the `delta` executor turns into its
//! commit's per-file statistics. A column no input dictionary-encodes is
//! written plain ([`encoding`]).
//!
//! Memory is bounded by the writer's open row group (at most
//! [`ParquetOptions::row_group_bytes`], encoded), the same again while a
//! finished row group is handed to the store, [`DECODED_AHEAD`] decoded
//! batches of [`BATCH_ROWS`] rows, one input row group's column chunks (or
//! one small input), [`FOOTERS_AHEAD`] footers, the union schema and the
//! distinct footer keys; never by the number of files, the partition or the
//! output size.

pub mod deleted;
mod encoding;
mod io;
pub mod schema;
pub mod spark;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::RecordBatch;
use arrow_schema::{FieldRef, Schema, SchemaRef};
use futures::StreamExt;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::async_writer::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, ParquetMetaData};
use parquet::file::properties::WriterProperties;
use store::Store;

pub use io::WHOLE_READ;
pub(crate) use io::{open, StoreSink};

use super::{MergeError, MergeJob, Output, Staged};

/// Rows per decoded batch.
pub const BATCH_ROWS: usize = 8192;

/// How outputs are encoded.
#[derive(Debug, Clone)]
pub struct ParquetOptions {
    pub compression: Compression,
    /// A row group is closed once its encoded size reaches this.
    pub row_group_bytes: usize,
}

impl ParquetOptions {
    /// zstd level 1, row groups of at most `min(target, 64 MiB)`.
    pub fn for_target(target_size: u64, compression: Compression) -> ParquetOptions {
        ParquetOptions { compression, row_group_bytes: target_size.clamp(1 << 16, 64 << 20) as usize }
    }
}

/// `zstd` (level 1), `zstd:N`, `snappy`, `lz4`, `gzip` or `none`.
pub fn parse_compression(s: &str) -> Result<Compression, String> {
    let bad = || format!("{s:?}: compression is zstd, zstd:LEVEL (1-22), snappy, lz4, gzip or none");
    Ok(match s {
        "zstd" => Compression::ZSTD(ZstdLevel::default()),
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4_RAW,
        "gzip" => Compression::GZIP(Default::default()),
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        _ => match s.strip_prefix("zstd:").and_then(|l| l.parse::<i32>().ok()) {
            Some(l) => Compression::ZSTD(ZstdLevel::try_new(l).map_err(|_| bad())?),
            None => return Err(bad()),
        },
    })
}

/// Inputs below this size are merged: 3/4 of the target.
pub fn small_threshold(target_size: u64) -> u64 {
    target_size / 4 * 3
}

/// `created_by` of every output, in the form parquet-java's version parser
/// reads (`<application> version <version>`).
pub fn created_by() -> String {
    format!("compactd version {}", env!("CARGO_PKG_VERSION"))
}

/// An input: its path and size.
pub type Input = (String, u64);

/// How the inputs' rows are made to fit the outputs when the table, not
/// the inputs, decides the outputs' schema (an Iceberg table's current
/// schema, its columns matched by field id), and which rows are gone
/// (deletes applied while rewriting). Without one, the outputs take the
/// union of the inputs' schemas ([`schema`]) and every row.
pub trait Projection: Send + Sync {
    /// The outputs' schema when the table decides it; `None`: the union of
    /// the inputs' ([`schema`]), as without a projection.
    fn schema(&self) -> Option<SchemaRef>;
    /// Footer pairs the outputs carry, replacing the inputs' of one key.
    fn footer(&self) -> Vec<KeyValue> {
        vec![]
    }
    /// Why the input `path`, of schema `file`, cannot be read into the
    /// outputs, if it cannot: asked of every footer before anything is
    /// written, where [`Projection::schema`] is the table's.
    fn check(&self, _path: &str, _file: &Schema) -> Result<(), String> {
        Ok(())
    }
    /// `batch`, the rows of the input `path` from its row `first_row` on,
    /// in the outputs' schema and without the rows deleted. Where
    /// [`Projection::schema`] is `None`, `batch` is already in the union
    /// schema.
    fn project(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String>;
    /// Whether the input `path` is worth rewriting even alone in an output
    /// (rows of it are deleted: its rewrite retires the deletes).
    fn worth_alone(&self, _path: &str) -> bool {
        false
    }
    /// Whether the table lets its columns' types widen, where the union of
    /// the inputs' schemas is the outputs' ([`schema::Union::widening`]).
    fn widens(&self) -> bool {
        false
    }
    /// Columns every output holds beyond the union of the inputs' (where
    /// [`Projection::schema`] is `None`), nullable: an input without one
    /// reads as nulls there before [`Projection::project`] fills them.
    fn extra_fields(&self) -> Vec<FieldRef> {
        vec![]
    }
}

/// Footers read at once while schemas are checked.
const FOOTERS_AHEAD: usize = 8;

/// Stages the rewrite of a partition's small Parquet files; no outputs if
/// fewer than two files are small.
pub async fn stage(
    store: &Store,
    job: &MergeJob,
    opts: &ParquetOptions,
    files: Vec<(String, u64)>,
    staging: &str,
) -> Result<Staged, MergeError> {
    let threshold = small_threshold(job.target_size);
    let candidates: Vec<(String, u64)> =
        files.into_iter().filter(|(p, len)| p.ends_with(".parquet") && *len < threshold).collect();
    let name =
        |k: usize| (format!("{staging}{k}"), format!("{}compacted-{}-r{}-{k}.parquet", job.dir, job.task, job.round));
    rewrite(store, job, opts, candidates, name, None).await
}

/// A footer's key-value pairs without Arrow's own schema (the writer makes
/// the output's).
fn footer_key_values(meta: &ParquetMetaData) -> spark::KeyValues {
    meta.file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter(|kv| kv.key != parquet::arrow::ARROW_SCHEMA_META_KEY)
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// What the outputs of a rewrite are, from every input's footer.
struct Plan {
    schema: SchemaRef,
    key_values: Vec<KeyValue>,
    /// Input index -> its INT96 columns (indices) whose values must all be
    /// from 1900 on (see [`spark::Rebase::int96_reads_like_datetime`]).
    int96_checks: BTreeMap<usize, Vec<usize>>,
    /// Columns to write without a dictionary ([`encoding`]).
    plain: Vec<parquet::schema::types::ColumnPath>,
}

/// Reads every footer (a few at a time; memory does not grow with the
/// number of files) and decides the outputs' schema and footer, or fails
/// the unit before anything is written.
async fn plan(
    store: &Store,
    job: &MergeJob,
    candidates: &[Input],
    fit: Option<&dyn Projection>,
) -> Result<Plan, MergeError> {
    let mut footers = futures::stream::iter(candidates.iter().cloned())
        .map(|(path, len)| async move {
            let meta = open(store, &path, len, false, &job.io).await.map(|(_, m)| m);
            (path, meta)
        })
        .buffered(FOOTERS_AHEAD);
    let mut union = match fit {
        Some(f) if f.widens() => schema::Union::widening(),
        _ => schema::Union::default(),
    };
    let (mut footer_kv, mut arrow_kv) = (spark::KeyValueMerge::default(), spark::KeyValueMerge::default());
    let mut first: Option<(String, spark::Rebase)> = None;
    let mut int96_checks = BTreeMap::new();
    let mut dictionaries = encoding::Dictionaries::default();
    let mut i = 0;
    while let Some((path, meta)) = footers.next().await {
        let meta = meta.map_err(|e| job.broken(format!("{path}: not a readable Parquet file: {e}")))?;
        let schema = meta.schema();
        match fit.filter(|f| f.schema().is_some()) {
            Some(fit) => fit.check(&path, schema),
            None => union.add(&path, schema),
        }
        .map_err(|e| job.broken(format!("{path}: {e}; nothing was merged")))?;
        let kv = footer_key_values(meta.metadata());
        let rebase = spark::Rebase::of(&kv);
        match &first {
            None => first = Some((path.clone(), rebase.clone())),
            Some((first_path, want)) if !want.same_datetime(&rebase) => {
                return Err(job.broken(format!(
                    "{path}: Spark reads its dates and timestamps {} but {first_path}'s {} (footer keys \
                     org.apache.spark.*): one output cannot hold both; nothing was merged",
                    rebase.describe(),
                    want.describe()
                )));
            }
            Some(_) => {}
        }
        let int96 = io::int96_columns(meta.metadata());
        if !int96.is_empty() && !kv.contains_key(spark::VERSION_KEY) {
            // Spark's INT96 holds microseconds; Hive and Impala write
            // nanoseconds, which the rewrite as TIMESTAMP(MICROS) would cut.
            let writer = meta.metadata().file_metadata().created_by().unwrap_or("an unnamed writer");
            return Err(job.broken(format!(
                "{path}: its INT96 timestamps were written by {writer}, not Spark: they may hold nanoseconds, \
                 which compactd's TIMESTAMP(MICROS) outputs would cut; nothing was merged"
            )));
        }
        if !int96.is_empty() && !rebase.int96_reads_like_datetime() {
            int96_checks.insert(i, int96);
        }
        dictionaries.add(meta.metadata());
        footer_kv.add(&kv);
        let arrow: spark::KeyValues = schema.metadata().iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        arrow_kv.add(&arrow);
        i += 1;
    }
    let (mut footer, dropped) = footer_kv.finish();
    if !dropped.is_empty() {
        tracing::info!(partition = job.dir, keys = ?dropped, "footer keys the inputs do not all share are not kept");
    }
    let (arrow, _) = arrow_kv.finish();
    let arrow: std::collections::HashMap<String, String> =
        arrow.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
    for kv in fit.map(Projection::footer).unwrap_or_default() {
        footer.insert(kv.key, kv.value);
    }
    let schema = match fit.and_then(Projection::schema) {
        Some(table) => table,
        None => {
            let mut fields: Vec<FieldRef> = union.fields().iter().cloned().collect();
            for extra in fit.map(Projection::extra_fields).unwrap_or_default() {
                match fields.iter_mut().find(|f| f.name() == extra.name()) {
                    Some(f) => *f = extra,
                    None => fields.push(extra),
                }
            }
            Arc::new(Schema::new_with_metadata(fields, arrow))
        }
    };
    let key_values = footer.into_iter().map(|(key, value)| KeyValue { key, value }).collect();
    let plain = dictionaries.plain_columns(&schema);
    Ok(Plan { schema, key_values, int96_checks, plain })
}

/// Rewrites `candidates` (paths and sizes, in the order their rows are to
/// be written) into outputs of about the target size: output `k` is written
/// at `name(k).0` and is to be published as `name(k).1` (the same path when
/// the caller publishes by other means, as a Delta commit does). No outputs
/// if fewer than two candidates. [`Staged::written`] holds each output's
/// bytes and rows, [`Staged::footers`] its footer. With `fit`, the rows
/// are fitted and filtered by it (see [`Projection`]); the figures then
/// count the rows it dropped as `rows_deleted`.
pub async fn rewrite(
    store: &Store,
    job: &MergeJob,
    opts: &ParquetOptions,
    candidates: Vec<Input>,
    name: impl Fn(usize) -> (String, String),
    fit: Option<Arc<dyn Projection>>,
) -> Result<Staged, MergeError> {
    let fit_alone = fit.clone();
    let alone = move |p: &str| fit_alone.as_ref().is_some_and(|f| f.worth_alone(p));
    if candidates.len() < 2 && !candidates.iter().any(|(p, _)| alone(p)) {
        return Ok(Staged::default());
    }
    let Plan { schema, key_values, int96_checks, plain } = plan(store, job, &candidates, fit.as_deref()).await?;
    let inputs = candidates;
    let mut props = WriterProperties::builder();
    for c in plain {
        props = props.set_column_dictionary_enabled(c, false);
    }
    let props = props
        .set_compression(opts.compression)
        .set_max_row_group_bytes(Some(opts.row_group_bytes))
        .set_max_row_group_row_count(Some(1 << 20))
        .set_created_by(created_by())
        .set_key_value_metadata(Some(key_values))
        // Min/max per column chunk (what pyarrow and DuckDB write and prune
        // by, and what Delta statistics are made of), not per page: page
        // statistics and their index cost CPU that readers of compacted
        // partitions rarely use.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        // Whole values, as parquet-java writes them: a bound cut short is
        // no bound to an Iceberg reader in `full` metrics mode, nor to a
        // Delta reader's statistics.
        .set_statistics_truncate_length(None)
        .set_write_batch_size(BATCH_ROWS)
        .build();

    let (mut bytes_in, mut bytes_out, mut rows_in, mut rows_out, mut files_in) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Rows read but deleted (by `fit`), and rows handed to the writers.
    let (mut rows_deleted, mut rows_kept) = (0u64, 0u64);
    // Bytes out per byte in, from what was written so far.
    let (mut seen_in, mut seen_out) = (0u64, 0u64);
    let mut staged = Staged::default();
    let mut current: Option<(AsyncArrowWriter<StoreSink>, Output, u64)> = None;
    let n = inputs.len();
    // Decoding runs in a task of its own, ahead by at most a few batches (a
    // bounded channel), so that decoding and encoding use two cores.
    let (tx, mut rx) = tokio::sync::mpsc::channel(DECODED_AHEAD);
    let order: Vec<Input> = inputs.clone();
    let fitted = fit.is_some();
    let decoder = Decoder { store: store.clone(), job: job.clone(), schema: schema.clone(), int96_checks, fit };
    let _decoder = AbortOnDrop(tokio::spawn(decoder.run(inputs, tx)));
    for (idx, input) in order.into_iter().enumerate() {
        // Output bytes per input byte: measured on the outputs finished so
        // far; for the first, the writer's estimate of what it holds (its
        // closed pages are exact, its open pages counted before
        // compression, so it errs high on a small target: capped at 1).
        let ratio = match &current {
            _ if seen_in > 0 => seen_out as f64 / seen_in as f64,
            Some((w, _, in_this)) if *in_this > 0 => {
                ((w.bytes_written() + w.in_progress_size()) as f64 / *in_this as f64).min(1.0)
            }
            _ => 1.0,
        };
        let expected = (input.1 as f64 * ratio) as u64;
        // An output holding one input takes the next one even past the
        // target (by less than a small file): a rewrite of one file alone
        // would gain nothing.
        if let Some((_, out, in_this)) = &current {
            let size = (*in_this as f64 * ratio) as u64;
            // The last input may overshoot a little rather than stay small.
            let limit = if idx + 1 == n { job.target_size + job.target_size / 5 } else { job.target_size };
            if out.inputs.len() > 1 && size + expected > limit {
                let (w, out, in_this) = current.take().expect("checked");
                let (written, rows, footer) = finish(w, job, &out).await?;
                (seen_in, seen_out) = (seen_in + in_this, seen_out + written);
                bytes_out += written;
                rows_out += rows;
                staged.outputs.push(out);
                staged.written.push((written, rows));
                staged.footers.push(footer);
            }
        }
        if current.is_none() {
            if idx + 1 == n && !alone(&input.0) {
                // The last input, alone in an output: left as it is.
                break;
            }
            let (path, final_path) = name(staged.outputs.len());
            let sink = StoreSink::new(store.writer(&path).await?, job.io.clone(), &schema);
            let w = AsyncArrowWriter::try_new(sink, schema.clone(), Some(props.clone()))
                .map_err(|e| job.broken(format!("cannot start {path}: {e}")))?;
            let out = Output { staged: path, final_path, inputs: vec![] };
            current = Some((w, out, 0));
        }
        let (w, out, in_this) = current.as_mut().expect("opened above");
        let (path, len) = input;
        loop {
            match rx.recv().await {
                Some(Ok(Piece::Rows(b))) => {
                    rows_kept += b.num_rows() as u64;
                    w.write(&b).await.map_err(|e| job.broken(format!("writing {}: {e}", out.staged)))?;
                }
                Some(Ok(Piece::End { read, kept })) => {
                    rows_in += read;
                    rows_deleted += read - kept;
                    break;
                }
                Some(Err(e)) => return Err(e),
                None => return Err(job.broken(format!("the decoder stopped before the end of {path}"))),
            }
        }
        bytes_in += len;
        files_in += 1;
        *in_this += len;
        out.inputs.push(path);
    }
    if let Some((w, out, _)) = current.take() {
        let (written, rows, footer) = finish(w, job, &out).await?;
        bytes_out += written;
        rows_out += rows;
        staged.outputs.push(out);
        staged.written.push((written, rows));
        staged.footers.push(footer);
    }
    if rows_kept != rows_out || rows_in != rows_out + rows_deleted {
        // A staged output that lost rows must never be committed.
        return Err(job.broken(format!(
            "staged {rows_out} rows for {rows_in} read ({rows_deleted} of them deleted); nothing was committed"
        )));
    }
    staged.stats = super::stats(files_in, staged.outputs.len() as u64, bytes_in, bytes_out, rows_in, rows_out);
    if fitted {
        staged.stats.insert("rows_deleted".into(), rows_deleted);
    }
    Ok(staged)
}

/// Batches decoded ahead of the writer.
const DECODED_AHEAD: usize = 4;

/// A part of one input as the decoder sends it.
enum Piece {
    /// Rows in the output's schema.
    Rows(RecordBatch),
    /// The input's end: the rows read from it, and how many of them were
    /// sent (the others were deleted).
    End { read: u64, kept: u64 },
}

/// What the decoder sends, or why it stopped.
type Decoded = Result<Piece, MergeError>;

/// Decodes the inputs in order, fitted to the output's schema.
struct Decoder {
    store: Store,
    job: MergeJob,
    schema: SchemaRef,
    int96_checks: BTreeMap<usize, Vec<usize>>,
    fit: Option<Arc<dyn Projection>>,
}

impl Decoder {
    /// Sends each input's batches, then its end, into `tx`; stops when the
    /// receiver is gone or at the first error (sent).
    async fn run(self, inputs: Vec<Input>, tx: tokio::sync::mpsc::Sender<Decoded>) {
        let job = &self.job;
        for (i, (path, len)) in inputs.into_iter().enumerate() {
            let batches = match open(&self.store, &path, len, true, &job.io).await {
                Ok((reader, meta)) => ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| job.broken(format!("{path}: {e}"))),
                Err(e) => Err(job.broken(format!("{path}: not a readable Parquet file: {e}"))),
            };
            let mut batches = match batches {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let checks = self.int96_checks.get(&i).map(Vec::as_slice).unwrap_or_default();
            let (mut read, mut kept) = (0u64, 0u64);
            while let Some(b) = batches.next().await {
                let first_row = read;
                let msg = b
                    .map_err(|e| job.broken(format!("{path}: corrupt or truncated: {e}")))
                    .inspect(|b| read += b.num_rows() as u64)
                    .and_then(|b| self.fit(b, &path, first_row, checks))
                    .inspect(|b| kept += b.num_rows() as u64)
                    .map(Piece::Rows);
                let failed = msg.is_err();
                if tx.send(msg).await.is_err() || failed {
                    return;
                }
            }
            if tx.send(Ok(Piece::End { read, kept })).await.is_err() {
                return;
            }
        }
    }

    /// `batch` of `path` (its rows from `first_row` on) in the output's
    /// schema, once its INT96 columns `int96` (read as UTC microseconds)
    /// are known to hold no value Spark could read differently as INT64.
    fn fit(&self, batch: RecordBatch, path: &str, first_row: u64, int96: &[usize]) -> Result<RecordBatch, MergeError> {
        for &c in int96 {
            let name = batch.schema().field(c).name().clone();
            let Some(values) = batch.column(c).as_primitive_opt::<TimestampMicrosecondType>() else {
                return Err(self.job.broken(format!("{path}: INT96 column {name:?} did not decode as timestamps")));
            };
            if let Some(early) = values.iter().flatten().find(|v| *v < spark::INT96_SAME_FROM_MICROS) {
                return Err(self.job.broken(format!(
                    "{path}: INT96 column {name:?} holds {} (microseconds since 1970, UTC), before \
                     1900-01-01T00:00:00Z, and its footer does not fix how Spark rebases INT96 timestamps as it \
                     does other timestamps: rewritten as INT64 it could read differently; nothing was merged",
                    early
                )));
            }
        }
        match &self.fit {
            Some(fit) if fit.schema().is_some() => fit.project(path, first_row, batch),
            Some(fit) => schema::conform(batch, &self.schema)
                .map_err(|e| e.to_string())
                .and_then(|b| fit.project(path, first_row, b)),
            None => schema::conform(batch, &self.schema).map_err(|e| e.to_string()),
        }
        .map_err(|e| self.job.broken(format!("{path}: its rows do not fit the outputs' schema: {e}")))
    }
}

/// Stops the decoder when staging ends early (an error, a last input left alone).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Closes an output; its size in bytes, its rows and its footer.
async fn finish(
    mut w: AsyncArrowWriter<StoreSink>,
    job: &MergeJob,
    out: &Output,
) -> Result<(u64, u64, Arc<ParquetMetaData>), MergeError> {
    let meta = w.finish().await.map_err(|e| job.broken(format!("finishing {}: {e}", out.staged)))?;
    let rows = meta.file_metadata().num_rows() as u64;
    Ok((w.bytes_written() as u64, rows, Arc::new(meta)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::throttle::Throttle;
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field};

    /// A file of `rows` rows in row groups of `group` rows, uncompressed.
    fn file(rows: i64, group: usize) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let ids = Int64Array::from_iter_values(0..rows);
        let s = StringArray::from_iter_values(
            (0..rows).map(|i| format!("{:064x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        );
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(s)]).unwrap();
        let props = WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_max_row_group_row_count(Some(group))
            .set_dictionary_enabled(false)
            .build();
        let mut out = vec![];
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        out
    }

    #[tokio::test]
    async fn a_large_input_is_read_footer_first_then_row_group_by_row_group() {
        let store = Store::memory().await;
        let bytes = file(40_000, 10_000);
        let len = bytes.len() as u64;
        assert!(len > 2 * WHOLE_READ, "{len}");
        store.put("t/p/big.parquet", bytes).await.unwrap();
        let (reader, meta) = io::open(&store, "t/p/big.parquet", len, true, &Throttle::none()).await.unwrap();
        let fetched = reader.fetched.clone();
        assert_eq!(meta.metadata().num_row_groups(), 4);
        // The footer: one read at the end of the file.
        let footer = fetched.lock().unwrap().clone();
        assert_eq!(footer.len(), 1, "{footer:?}");
        assert_eq!(footer[0].end, len);
        assert!(footer[0].start >= len - io::FOOTER_HINT as u64);
        fetched.lock().unwrap().clear();
        let mut batches = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta).build().unwrap();
        let mut rows = 0;
        while let Some(b) = batches.next().await {
            rows += b.unwrap().num_rows();
        }
        assert_eq!(rows, 40_000);
        // Then one read per row group (its column chunks coalesced), each
        // about a quarter of the file, never the whole object.
        let groups = fetched.lock().unwrap().clone();
        assert_eq!(groups.len(), 4, "{groups:?}");
        assert!(groups.iter().all(|r| r.end - r.start < len / 3), "{groups:?}");
    }

    #[tokio::test]
    async fn a_small_input_costs_one_read() {
        let store = Store::memory().await;
        let bytes = file(1000, 500);
        let len = bytes.len() as u64;
        store.put("t/p/small.parquet", bytes).await.unwrap();
        let (reader, meta) = io::open(&store, "t/p/small.parquet", len, true, &Throttle::none()).await.unwrap();
        let fetched = reader.fetched.clone();
        let mut batches = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta).build().unwrap();
        while let Some(b) = batches.next().await {
            b.unwrap();
        }
        assert_eq!(*fetched.lock().unwrap(), vec![0..len]);
    }

    /// Every byte the merge reads (footers twice: checked, then decoded)
    /// and writes goes through the node's limit.
    /// A parquet unit of the partition folder `dir`: attempt 1 of round 1,
    /// uncompressed outputs of at most 8 MiB.
    fn job_of(dir: &str) -> MergeJob {
        MergeJob {
            dir: dir.into(),
            task: "aaaaffff.16176931.56000000.0".into(),
            round: 1,
            attempt: 1,
            target_size: 8 << 20,
            delay_before_commit: std::time::Duration::ZERO,
            min_age: std::time::Duration::ZERO,
            fence: None,
            now: std::time::UNIX_EPOCH,
            format: super::super::Format::Parquet(ParquetOptions::for_target(8 << 20, Compression::UNCOMPRESSED)),
            io: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_merge_asks_the_limit_for_everything_it_reads_and_writes() {
        let store = Store::memory().await;
        for f in 0..3 {
            store.put(&format!("db/s/t/p/part-{f}.parquet"), file(2000, 1000)).await.unwrap();
        }
        let mut limit = crate::executor::throttle::IoLimit::new(1 << 40, crate::clock::SystemClock::shared());
        let stats = Arc::new(crate::executor::throttle::IoStats::default());
        limit.count_into(stats.clone());
        let job = MergeJob { io: crate::executor::throttle::served(&limit), ..job_of("db/s/t/p/") };
        let (outcome, figures) = super::super::run_with_stats(&store, &job).await.unwrap();
        assert!(matches!(outcome, super::super::Outcome::Merged { inputs: 3, outputs: 1 }), "{outcome:?}");
        let data = figures["bytes_in"] + figures["bytes_out"];
        assert!(stats.bytes() >= data, "granted {} bytes for {data} read and written", stats.bytes());
        assert!(stats.bytes() <= data + 3 * io::FOOTER_HINT as u64, "granted {} bytes for {data}", stats.bytes());
    }

    /// A Delta writer puts its data files down before its first commit
    /// makes the folder a Delta table: a `parquet` unit that planned before
    /// the log appeared refuses at its commit, and no byte changes.
    // A writer beside the unit on a real file system, whose times are the
    // wall clock's: real time.
    #[allow(clippy::disallowed_methods)]
    #[tokio::test]
    async fn a_delta_log_that_appears_while_a_unit_runs_stops_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_data(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
        for f in 0..3 {
            store.put(&format!("db/s/t/p/part-{f}.parquet"), file(2000, 1000)).await.unwrap();
        }
        let snapshot = || {
            let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path().join("db/s/t/p"))
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().unwrap().is_file())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
                .collect();
            all.sort();
            all
        };
        let before = snapshot();
        let job = MergeJob {
            delay_before_commit: std::time::Duration::from_millis(500),
            now: std::time::SystemTime::now(),
            ..job_of("db/s/t/p/")
        };
        let writer = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            std::fs::create_dir_all(dir.path().join("db/s/t/_delta_log")).unwrap();
            std::fs::write(dir.path().join("db/s/t/_delta_log/00000000000000000000.json"), b"{}\n").unwrap();
        };
        let (out, ()) = tokio::join!(super::super::run(&store, &job), writer);
        let err = out.unwrap_err().to_string();
        assert!(err.contains("Delta") && err.contains("nothing was merged"), "{err}");
        assert_eq!(snapshot(), before, "a byte of the table changed");
    }

    #[test]
    fn compressions_parse_and_bad_ones_say_what_is_allowed() {
        assert_eq!(parse_compression("zstd").unwrap(), Compression::ZSTD(ZstdLevel::default()));
        assert_eq!(parse_compression("zstd:9").unwrap(), Compression::ZSTD(ZstdLevel::try_new(9).unwrap()));
        assert_eq!(parse_compression("none").unwrap(), Compression::UNCOMPRESSED);
        assert!(parse_compression("zstd:99").unwrap_err().contains("zstd, zstd:LEVEL"));
        assert!(parse_compression("brotli").is_err());
    }
}
