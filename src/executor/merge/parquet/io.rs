//! Parquet files read and written through the [`Store`]: an input read by
//! ranged requests (or whole, when small) for Arrow's async reader, and an
//! output written as a streamed whole-object write for Arrow's async writer,
//! both asking the node's I/O limit before every request.

use std::ops::Range;
use std::sync::Arc;

use arrow_schema::{DataType, Schema, SchemaRef};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::async_writer::AsyncFileWriter;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use store::{Store, StoreWriter};

use crate::executor::throttle::Throttle;

/// Inputs up to this size are read in one request (their footer and column
/// chunks together); larger ones footer first, then column chunks.
pub const WHOLE_READ: u64 = 1 << 20;
/// Bytes read at the end of a file for its footer in one request (most
/// footers fit; a larger one costs a second read).
pub(super) const FOOTER_HINT: usize = 64 << 10;
/// Column chunks of one row group closer than this are fetched in one read.
const COALESCE_GAP: u64 = 1 << 20;

/// Reads one input through the store: ranged reads, or one whole read for a
/// small file.
pub(crate) struct StoreReader {
    store: Store,
    path: String,
    len: u64,
    whole: Option<Bytes>,
    /// Files up to this size are read whole by the first request.
    whole_max: u64,
    /// The ranges requested from the store, in order (a few per file).
    pub(super) fetched: Arc<std::sync::Mutex<Vec<Range<u64>>>>,
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
pub(crate) struct StoreSink(Option<StoreWriter>, Throttle);

impl StoreSink {
    pub(crate) fn new(writer: StoreWriter, io: Throttle) -> StoreSink {
        StoreSink(Some(writer), io)
    }
}

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

/// Opens an input: reads its footer. `whole`: a small file is read whole in
/// that one request (to decode it); otherwise only its end is read.
pub(crate) async fn open(
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

/// The top-level columns of a file stored as INT96 (their indices).
pub(crate) fn int96_columns(meta: &ParquetMetaData) -> Vec<usize> {
    let roots = meta.file_metadata().schema_descr().root_schema().get_fields().to_vec();
    roots
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_primitive() && t.get_physical_type() == parquet::basic::Type::INT96)
        .map(|(i, _)| i)
        .collect()
}

fn contains_int96(t: &parquet::schema::types::Type) -> bool {
    if t.is_primitive() {
        return t.get_physical_type() == parquet::basic::Type::INT96;
    }
    t.get_fields().iter().any(|f| contains_int96(f))
}
