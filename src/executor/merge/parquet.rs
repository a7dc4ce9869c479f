//! The built-in `parquet` executor's staging: rewrites a partition's small
//! Parquet files into files of about the target size, re-encoded (zstd by
//! default) with row groups of a bounded size. The commit, roll-forward and
//! fencing are [`super`]'s, shared with the text merge.
//!
//! What is an input: a regular file directly in the partition whose name ends
//! in `.parquet`, does not start with `_` or `.` (Hive/Spark: metadata and
//! temp files), and is smaller than [`small_threshold`] (3/4 of the target,
//! as Iceberg's bin-packing): files at or near the target are left alone.
//!
//! Before anything is written, every input's footer is read (the last
//! 64 KiB, [`FOOTERS_AHEAD`] files at a time) and its schema compared with
//! the first one's: fields (names, types, nullability, nested types, field
//! metadata) and the schema's key-value metadata. A file that differs fails
//! the unit with its path and the first differing field; a file that is not
//! readable Parquet fails it with its path. Nothing is touched then. Why fail
//! rather than merge the compatible files: which schema is "right" is the
//! table owner's call, and a silently skipped file would stay small forever.
//! Then each input is decoded: a file under [`WHOLE_READ`] in one request,
//! a larger one footer first, then one ranged read per row group (its column
//! chunks coalesced). Only schemas are kept between the two passes.
//!
//! Outputs are cut at input-file boundaries (an input's rows go to one
//! output, so the commit names exactly which inputs each output replaces).
//! A new output starts when the current one's expected size plus the next
//! input's (input bytes × the output/input ratio of the outputs finished so
//! far; for the first output the writer's own estimate, at most 1) would pass
//! the target; a last input that would be alone in an output is left alone.
//!
//! Memory is bounded by the writer's open row group (at most
//! [`ParquetOptions::row_group_bytes`], encoded), the same again while a
//! finished row group is handed to the store, [`DECODED_AHEAD`] decoded
//! batches of [`BATCH_ROWS`] rows, one input row group's column chunks (or
//! one small input) and [`FOOTERS_AHEAD`] footers; never by the number of
//! files, the partition or the output size.

use std::ops::Range;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::arrow::async_writer::{AsyncArrowWriter, AsyncFileWriter};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use store::{Store, StoreWriter};

use super::{MergeError, MergeJob, Output, Staged};
use crate::executor::throttle::Throttle;

/// Rows per decoded batch.
pub const BATCH_ROWS: usize = 8192;
/// Inputs up to this size are read in one request (their footer and column
/// chunks together); larger ones footer first, then column chunks.
pub const WHOLE_READ: u64 = 1 << 20;
/// Bytes read at the end of a file for its footer in one request (most
/// footers fit; a larger one costs a second read).
const FOOTER_HINT: usize = 64 << 10;
/// Column chunks of one row group closer than this are fetched in one read.
const COALESCE_GAP: u64 = 1 << 20;

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

/// Reads one input through the store: ranged reads, or one whole read for a
/// small file.
struct StoreReader {
    store: Store,
    path: String,
    len: u64,
    whole: Option<Bytes>,
    /// Files up to this size are read whole by the first request.
    whole_max: u64,
    /// The ranges requested from the store, in order (a few per file).
    fetched: Arc<std::sync::Mutex<Vec<Range<u64>>>>,
    /// Asked before every read.
    io: Throttle,
}

impl StoreReader {
    async fn fetch(&mut self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        if self.whole.is_none() && self.len <= self.whole_max {
            self.fetched.lock().unwrap_or_else(|e| e.into_inner()).push(0..self.len);
            self.io.take(self.len).await.map_err(external)?;
            let b = self.store.read_range(&self.path, 0, self.len).await.map_err(external)?;
            self.whole = Some(b.ok_or_else(|| ParquetError::General("vanished while being read".into()))?);
        }
        if let Some(w) = &self.whole {
            if range.end > w.len() as u64 {
                return Err(ParquetError::EOF(format!("range {range:?} is past the end ({} bytes)", w.len())));
            }
            return Ok(w.slice(range.start as usize..range.end as usize));
        }
        if range.end > self.len {
            return Err(ParquetError::EOF(format!("range {range:?} is past the end ({} bytes)", self.len)));
        }
        self.fetched.lock().unwrap_or_else(|e| e.into_inner()).push(range.clone());
        self.io.take(range.end - range.start).await.map_err(external)?;
        self.store
            .read_range(&self.path, range.start, range.end - range.start)
            .await
            .map_err(external)?
            .ok_or_else(|| ParquetError::General("vanished while being read".into()))
    }
}

fn external(e: impl std::error::Error + Send + Sync + 'static) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.fetch(range).boxed()
    }

    /// A row group's column chunks lie side by side: one read covers them.
    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let mut order: Vec<usize> = (0..ranges.len()).collect();
            order.sort_by_key(|i| ranges[*i].start);
            let mut out = vec![Bytes::new(); ranges.len()];
            let mut k = 0;
            while k < order.len() {
                let start = ranges[order[k]].start;
                let mut end = ranges[order[k]].end;
                let mut j = k + 1;
                while j < order.len() && ranges[order[j]].start <= end + COALESCE_GAP {
                    end = end.max(ranges[order[j]].end);
                    j += 1;
                }
                let b = self.fetch(start..end).await?;
                for &i in &order[k..j] {
                    let r = &ranges[i];
                    out[i] = b.slice((r.start - start) as usize..(r.end - start) as usize);
                }
                k = j;
            }
            Ok(out)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let len = self.len;
            let meta = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_HINT))
                .load_and_finish(&mut *self, len)
                .await?;
            Ok(Arc::new(meta))
        }
        .boxed()
    }
}

/// The staged output being written, through the store, asking the node's
/// limit before every write.
struct StoreSink(Option<StoreWriter>, Throttle);

impl AsyncFileWriter for StoreSink {
    fn write(&mut self, bs: Bytes) -> BoxFuture<'_, parquet::errors::Result<()>> {
        async move {
            self.1.take(bs.len() as u64).await.map_err(external)?;
            self.0.as_mut().expect("open").write(bs).await.map_err(external)
        }
        .boxed()
    }

    fn complete(&mut self) -> BoxFuture<'_, parquet::errors::Result<()>> {
        async move { self.0.take().expect("open").close().await.map_err(external) }.boxed()
    }
}

/// An input: its path and size.
pub type Input = (String, u64);

/// Footers read at once while schemas are checked.
const FOOTERS_AHEAD: usize = 8;

/// Opens an input: reads its footer. `whole`: a small file is read whole in
/// that one request (to decode it); otherwise only its end is read.
async fn open(
    store: &Store,
    path: &str,
    len: u64,
    whole: bool,
    io: &Throttle,
) -> Result<(StoreReader, ArrowReaderMetadata), ParquetError> {
    let mut r = StoreReader {
        store: store.clone(),
        path: path.to_string(),
        len,
        whole: None,
        whole_max: if whole { WHOLE_READ } else { 0 },
        fetched: Default::default(),
        io: io.clone(),
    };
    let meta = ArrowReaderMetadata::load_async(&mut r, ArrowReaderOptions::new()).await?;
    let meta = match int96_hint(&meta)? {
        Some(hint) => {
            ArrowReaderMetadata::try_new(meta.metadata().clone(), ArrowReaderOptions::new().with_schema(hint))?
        }
        None => meta,
    };
    Ok((r, meta))
}

/// Spark's legacy INT96 timestamps (still its default encoding) decode as
/// `Timestamp(ns)` without a zone, which the writer would re-encode as
/// INT64 nanoseconds with `isAdjustedToUTC=false`: a type Spark 3 refuses,
/// Delta's `timestamp` forbids, and that overflows outside 1677-2262. They
/// are read as `Timestamp(µs, UTC)` instead (INT96 is UTC by Spark's
/// convention), so outputs hold standard `TIMESTAMP(MICROS, UTC)` columns
/// with the full range. Top-level columns only: a nested INT96 column is
/// refused with its name.
fn int96_hint(meta: &ArrowReaderMetadata) -> Result<Option<SchemaRef>, ParquetError> {
    let descr = meta.metadata().file_metadata().schema_descr();
    let roots = descr.root_schema().get_fields();
    let int96 =
        |t: &parquet::schema::types::Type| t.is_primitive() && t.get_physical_type() == parquet::basic::Type::INT96;
    if !descr.columns().iter().any(|c| c.physical_type() == parquet::basic::Type::INT96) {
        return Ok(None);
    }
    let schema = meta.schema();
    let mut fields = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let root = roots.get(i).ok_or_else(|| ParquetError::General("schema mismatch".into()))?;
        if int96(root) {
            let ts = DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into()));
            fields.push(Arc::new(f.as_ref().clone().with_data_type(ts)));
        } else if !root.is_primitive() && contains_int96(root) {
            return Err(ParquetError::General(format!(
                "column {:?} holds INT96 timestamps inside a nested type, which compactd does not rewrite",
                f.name()
            )));
        } else {
            fields.push(f.clone());
        }
    }
    Ok(Some(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))))
}

fn contains_int96(t: &parquet::schema::types::Type) -> bool {
    if t.is_primitive() {
        return t.get_physical_type() == parquet::basic::Type::INT96;
    }
    t.get_fields().iter().any(|f| contains_int96(f))
}

/// Stages the rewrite of a partition's small Parquet files; no outputs if
/// fewer than two files are small.
pub async fn stage(store: &Store, job: &MergeJob, opts: &ParquetOptions, staging: &str) -> Result<Staged, MergeError> {
    let threshold = small_threshold(job.target_size);
    let candidates: Vec<(String, u64)> = super::data_files(store, &job.dir)
        .await?
        .into_iter()
        .filter(|(p, len)| p.ends_with(".parquet") && *len < threshold)
        .collect();
    let name =
        |k: usize| (format!("{staging}{k}"), format!("{}compacted-{}-r{}-{k}.parquet", job.dir, job.task, job.round));
    rewrite(store, job, opts, candidates, name).await
}

/// Rewrites `candidates` (paths and sizes, in the order their rows are to
/// be written) into outputs of about the target size: output `k` is written
/// at `name(k).0` and is to be published as `name(k).1` (the same path when
/// the caller publishes by other means, as a Delta commit does). No outputs
/// if fewer than two candidates. [`Staged::written`] holds each output's
/// bytes and rows.
pub async fn rewrite(
    store: &Store,
    job: &MergeJob,
    opts: &ParquetOptions,
    candidates: Vec<Input>,
    name: impl Fn(usize) -> (String, String),
) -> Result<Staged, MergeError> {
    if candidates.len() < 2 {
        return Ok(Staged::default());
    }
    // Every footer and schema first (a few at a time; only the schema is
    // kept, so memory does not grow with the number of files): a bad file
    // fails the unit before anything is written.
    let mut footers = futures::stream::iter(candidates.iter().cloned())
        .map(|(path, len)| async move {
            let schema = open(store, &path, len, false, &job.io).await.map(|(_, m)| m.schema().clone());
            (path, schema)
        })
        .buffered(FOOTERS_AHEAD);
    let mut first: Option<(String, SchemaRef)> = None;
    while let Some((path, schema)) = footers.next().await {
        let schema = schema.map_err(|e| job.broken(format!("{path}: not a readable Parquet file: {e}")))?;
        match &first {
            None => first = Some((path, schema)),
            Some((first_path, want)) => {
                if let Some(diff) = schema_difference(want, &schema) {
                    return Err(job.broken(format!(
                        "{path}: its schema differs from {first_path}'s: {diff}; nothing was merged"
                    )));
                }
            }
        }
    }
    drop(footers);
    let inputs = candidates;
    let schema: SchemaRef = first.expect("two or more candidates").1;
    let props = WriterProperties::builder()
        .set_compression(opts.compression)
        .set_max_row_group_bytes(Some(opts.row_group_bytes))
        .set_max_row_group_row_count(Some(1 << 20))
        .set_created_by(format!("compactd {}", env!("CARGO_PKG_VERSION")))
        // Min/max per column chunk (what pyarrow and DuckDB write and prune
        // by), not per page: page statistics and their index cost CPU that
        // readers of compacted partitions rarely use.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_write_batch_size(BATCH_ROWS)
        .build();

    let (mut bytes_in, mut bytes_out, mut rows_in, mut rows_out, mut files_in) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Bytes out per byte in, from what was written so far.
    let (mut seen_in, mut seen_out) = (0u64, 0u64);
    let mut staged = Staged::default();
    let mut current: Option<(AsyncArrowWriter<StoreSink>, Output, u64)> = None;
    let n = inputs.len();
    // Decoding runs in a task of its own, ahead by at most a few batches (a
    // bounded channel), so that decoding and encoding use two cores.
    let (tx, mut rx) = tokio::sync::mpsc::channel(DECODED_AHEAD);
    let order: Vec<Input> = inputs.clone();
    let _decoder = AbortOnDrop(tokio::spawn(decode_all(store.clone(), job.clone(), inputs, tx)));
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
                let (written, rows) = finish(w, job, &out).await?;
                (seen_in, seen_out) = (seen_in + in_this, seen_out + written);
                bytes_out += written;
                rows_out += rows;
                staged.outputs.push(out);
                staged.written.push((written, rows));
            }
        }
        if current.is_none() {
            if idx + 1 == n {
                // The last input, alone in an output: left as it is.
                break;
            }
            let (path, final_path) = name(staged.outputs.len());
            let sink = StoreSink(Some(store.writer(&path).await?), job.io.clone());
            let w = AsyncArrowWriter::try_new(sink, schema.clone(), Some(props.clone()))
                .map_err(|e| job.broken(format!("cannot start {path}: {e}")))?;
            let out = Output { staged: path, final_path, inputs: vec![] };
            current = Some((w, out, 0));
        }
        let (w, out, in_this) = current.as_mut().expect("opened above");
        let (path, len) = input;
        let mut rows = 0u64;
        loop {
            match rx.recv().await {
                Some(Ok(Some(b))) => {
                    rows += b.num_rows() as u64;
                    w.write(&b).await.map_err(|e| job.broken(format!("writing {}: {e}", out.staged)))?;
                }
                Some(Ok(None)) => break,
                Some(Err(e)) => return Err(e),
                None => return Err(job.broken(format!("the decoder stopped before the end of {path}"))),
            }
        }
        rows_in += rows;
        bytes_in += len;
        files_in += 1;
        *in_this += len;
        out.inputs.push(path);
    }
    if let Some((w, out, _)) = current.take() {
        let (written, rows) = finish(w, job, &out).await?;
        bytes_out += written;
        rows_out += rows;
        staged.outputs.push(out);
        staged.written.push((written, rows));
    }
    if rows_in != rows_out {
        // A staged output that lost rows must never be committed.
        return Err(job.broken(format!("staged {rows_out} rows for {rows_in} read; nothing was committed")));
    }
    staged.stats = super::stats(files_in, staged.outputs.len() as u64, bytes_in, bytes_out, rows_in, rows_out);
    Ok(staged)
}

/// Batches decoded ahead of the writer.
const DECODED_AHEAD: usize = 4;

/// What the decoder sends: a batch, the end of one input (`None`), or why it
/// stopped.
type Decoded = Result<Option<arrow_array::RecordBatch>, MergeError>;

/// Decodes the inputs in order into `tx`; stops when the receiver is gone.
async fn decode_all(store: Store, job: MergeJob, inputs: Vec<Input>, tx: tokio::sync::mpsc::Sender<Decoded>) {
    for (path, len) in inputs {
        let batches = match open(&store, &path, len, true, &job.io).await {
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
        while let Some(b) = batches.next().await {
            let msg = b.map(Some).map_err(|e| job.broken(format!("{path}: corrupt or truncated: {e}")));
            let failed = msg.is_err();
            if tx.send(msg).await.is_err() || failed {
                return;
            }
        }
        if tx.send(Ok(None)).await.is_err() {
            return;
        }
    }
}

/// Stops the decoder when staging ends early (an error, a last input left alone).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Closes an output; its size in bytes and its rows.
async fn finish(mut w: AsyncArrowWriter<StoreSink>, job: &MergeJob, out: &Output) -> Result<(u64, u64), MergeError> {
    let meta = w.finish().await.map_err(|e| job.broken(format!("finishing {}: {e}", out.staged)))?;
    let rows = meta.file_metadata().num_rows() as u64;
    Ok((w.bytes_written() as u64, rows))
}

/// The first difference between two schemas, in words; `None` if equal.
pub fn schema_difference(a: &Schema, b: &Schema) -> Option<String> {
    for fa in a.fields() {
        match b.field_with_name(fa.name()) {
            Err(_) => return Some(format!("field {:?} is missing", fa.name())),
            Ok(fb) => {
                if let Some(d) = field_difference(fa, fb, fa.name()) {
                    return Some(d);
                }
            }
        }
    }
    if let Some(extra) = b.fields().iter().find(|f| a.field_with_name(f.name()).is_err()) {
        return Some(format!("it has an extra field {:?}", extra.name()));
    }
    let (na, nb): (Vec<_>, Vec<_>) =
        (a.fields().iter().map(|f| f.name()).collect(), b.fields().iter().map(|f| f.name()).collect());
    if na != nb {
        return Some(format!("its fields are in another order ({nb:?} instead of {na:?})"));
    }
    if a.metadata() != b.metadata() {
        let key = a
            .metadata()
            .iter()
            .find(|(k, v)| b.metadata().get(k) != Some(*v))
            .map(|(k, _)| k)
            .or_else(|| b.metadata().keys().find(|k| !a.metadata().contains_key(k)))
            .cloned()
            .unwrap_or_default();
        return Some(format!("its key-value metadata differs (key {key:?})"));
    }
    None
}

fn field_difference(a: &Field, b: &Field, at: &str) -> Option<String> {
    if a.name() != b.name() {
        return Some(format!("field {at:?} is named {:?}", b.name()));
    }
    if a.is_nullable() != b.is_nullable() {
        return Some(format!(
            "field {at:?} is {} instead of {}",
            if b.is_nullable() { "nullable" } else { "not nullable" },
            if a.is_nullable() { "nullable" } else { "not nullable" }
        ));
    }
    let nested = |x: &DataType| -> Option<Vec<Arc<Field>>> {
        match x {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) | DataType::Map(f, _) => {
                Some(vec![f.clone()])
            }
            DataType::Struct(fs) => Some(fs.iter().cloned().collect()),
            _ => None,
        }
    };
    match (nested(a.data_type()), nested(b.data_type())) {
        (Some(ca), Some(cb))
            if ca.len() == cb.len()
                && std::mem::discriminant(a.data_type()) == std::mem::discriminant(b.data_type()) =>
        {
            for (x, y) in ca.iter().zip(&cb) {
                if let Some(d) = field_difference(x, y, &format!("{at}.{}", x.name())) {
                    return Some(d);
                }
            }
            if a.data_type() != b.data_type() {
                return Some(format!("field {at:?} has type {} instead of {}", b.data_type(), a.data_type()));
            }
        }
        _ if a.data_type() != b.data_type() => {
            return Some(format!("field {at:?} has type {} instead of {}", b.data_type(), a.data_type()));
        }
        _ => {}
    }
    if a.metadata() != b.metadata() {
        return Some(format!("field {at:?} has other field metadata"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatch, StringArray};

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
        let (reader, meta) = open(&store, "t/p/big.parquet", len, true, &Throttle::none()).await.unwrap();
        let fetched = reader.fetched.clone();
        assert_eq!(meta.metadata().num_row_groups(), 4);
        // The footer: one read at the end of the file.
        let footer = fetched.lock().unwrap().clone();
        assert_eq!(footer.len(), 1, "{footer:?}");
        assert_eq!(footer[0].end, len);
        assert!(footer[0].start >= len - FOOTER_HINT as u64);
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
        let (reader, meta) = open(&store, "t/p/small.parquet", len, true, &Throttle::none()).await.unwrap();
        let fetched = reader.fetched.clone();
        let mut batches = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta).build().unwrap();
        while let Some(b) = batches.next().await {
            b.unwrap();
        }
        assert_eq!(*fetched.lock().unwrap(), vec![0..len]);
    }

    /// Every byte the merge reads (footers twice: checked, then decoded)
    /// and writes goes through the node's limit.
    #[tokio::test]
    async fn a_merge_asks_the_limit_for_everything_it_reads_and_writes() {
        let store = Store::memory().await;
        for f in 0..3 {
            store.put(&format!("db/s/t/p/part-{f}.parquet"), file(2000, 1000)).await.unwrap();
        }
        let mut limit = crate::executor::throttle::IoLimit::new(1 << 40, crate::clock::SystemClock::shared());
        let stats = Arc::new(crate::executor::throttle::IoStats::default());
        limit.count_into(stats.clone());
        let job = MergeJob {
            dir: "db/s/t/p/".into(),
            task: "aaaaffff.16176931.56000000.0".into(),
            round: 1,
            attempt: 1,
            target_size: 8 << 20,
            delay_before_commit: std::time::Duration::ZERO,
            fence: None,
            now: std::time::UNIX_EPOCH,
            format: super::super::Format::Parquet(ParquetOptions::for_target(8 << 20, Compression::UNCOMPRESSED)),
            io: crate::executor::throttle::served(&limit),
        };
        let (outcome, figures) = super::super::run_with_stats(&store, &job).await.unwrap();
        assert!(matches!(outcome, super::super::Outcome::Merged { inputs: 3, outputs: 1 }), "{outcome:?}");
        let data = figures["bytes_in"] + figures["bytes_out"];
        assert!(stats.bytes() >= data, "granted {} bytes for {data} read and written", stats.bytes());
        assert!(stats.bytes() <= data + 3 * FOOTER_HINT as u64, "granted {} bytes for {data}", stats.bytes());
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
