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
pub(crate) struct StoreSink {
    writer: Option<StoreWriter>,
    io: Throttle,
    /// The file's last bytes, held back until the writer completes: the
    /// footer's column orders are put right there ([`type_defined_orders`]).
    tail: Vec<u8>,
    /// Leaf columns of the file's schema.
    leaves: usize,
}

/// Bytes of the footer's end [`type_defined_orders`] may change: the
/// column orders (three bytes a leaf, a list header of at most six), the
/// footer's end marker, its length and the magic.
fn tail_len(leaves: usize) -> usize {
    3 * leaves + 6 + 1 + 8
}

impl StoreSink {
    /// A sink for a Parquet file whose Arrow schema is `schema`.
    pub(crate) fn new(writer: StoreWriter, io: Throttle, schema: &Schema) -> StoreSink {
        let leaves = parquet::arrow::ArrowSchemaConverter::new().convert(schema).map(|d| d.num_columns()).unwrap_or(0);
        StoreSink { writer: Some(writer), io, tail: vec![], leaves }
    }
}

impl AsyncFileWriter for StoreSink {
    fn write(&mut self, bs: Bytes) -> BoxFuture<'_, parquet::errors::Result<()>> {
        async move {
            self.io.take(bs.len() as u64).await.map_err(external)?;
            let keep = tail_len(self.leaves);
            if self.tail.is_empty() && bs.len() <= keep {
                self.tail.extend_from_slice(&bs);
                return Ok(());
            }
            // Everything but the last `keep` bytes goes out now.
            let w = self.writer.as_mut().expect("open");
            if self.tail.len() + bs.len() <= keep {
                self.tail.extend_from_slice(&bs);
            } else if bs.len() >= keep {
                if !self.tail.is_empty() {
                    w.write(Bytes::from(std::mem::take(&mut self.tail))).await.map_err(external)?;
                }
                let cut = bs.len() - keep;
                w.write(bs.slice(..cut)).await.map_err(external)?;
                self.tail = bs[cut..].to_vec();
            } else {
                self.tail.extend_from_slice(&bs);
                let cut = self.tail.len() - keep;
                let rest = self.tail.split_off(cut);
                w.write(Bytes::from(std::mem::replace(&mut self.tail, rest))).await.map_err(external)?;
            }
            Ok(())
        }
        .boxed()
    }

    fn complete(&mut self) -> BoxFuture<'_, parquet::errors::Result<()>> {
        async move {
            let mut w = self.writer.take().expect("open");
            let mut tail = std::mem::take(&mut self.tail);
            type_defined_orders(&mut tail, self.leaves);
            if !tail.is_empty() {
                w.write(Bytes::from(tail)).await.map_err(external)?;
            }
            w.close().await.map_err(external)
        }
        .boxed()
    }
}

/// Puts the type-defined column order back where the Parquet writer (since
/// parquet-rs 60) labels float and double columns with the IEEE 754 total
/// order of the newest format: readers that predate it, which is every
/// Java reader today (parquet-java through 1.17: Spark, Hive, Trino,
/// Iceberg's metrics) and Polars, then drop the statistics of the file's
/// columns or refuse the file. The statistics written keep the older
/// order's rules too (a NaN is a bound only of a column of NaNs, which
/// readers ignore; zeros are bounded by sign), so the older label is true
/// of them.
///
/// The column orders are the footer's last field, a list of one-field
/// unions: `1C 00 00` (type-defined) or `2C 00 00` (total order) per leaf
/// column, then the footer's stop byte, its length and `PAR1`. `tail` (the
/// file's end) is changed only where it is exactly that; otherwise (an
/// encrypted footer, another writer's layout) it is left as it is and
/// `false` returned.
pub(crate) fn type_defined_orders(tail: &mut [u8], leaves: usize) -> bool {
    let n = tail.len();
    if leaves == 0 || n < tail_len(leaves) - 6 || &tail[n - 4..] != b"PAR1" || tail[n - 9] != 0 {
        return false;
    }
    let end = n - 9;
    let start = end - 3 * leaves;
    let elements = &tail[start..end];
    if !elements.chunks(3).all(|e| matches!(e, [0x1C | 0x2C, 0, 0])) {
        return false;
    }
    // The list header (size and element type 12, a struct), after the
    // field header of field 7 (a list, 9) following field 6.
    let header: Vec<u8> = if leaves < 15 {
        vec![0x19, ((leaves as u8) << 4) | 0x0C]
    } else {
        let mut h = vec![0x19, 0xFC];
        let mut v = leaves as u64;
        loop {
            let b = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                h.push(b);
                break;
            }
            h.push(b | 0x80);
        }
        h
    };
    if start < header.len() || tail[start - header.len()..start] != header[..] {
        return false;
    }
    for e in tail[start..end].chunks_mut(3) {
        e[0] = 0x1C;
    }
    true
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

#[cfg(test)]
mod order_tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field};
    use parquet::basic::{ColumnOrder, SortOrder};
    use parquet::file::reader::FileReader;

    fn file(columns: usize) -> (Vec<u8>, usize) {
        let fields: Vec<Field> = (0..columns)
            .map(|i| match i % 2 {
                0 => Field::new(format!("f{i}"), DataType::Float64, true),
                _ => Field::new(format!("i{i}"), DataType::Int64, true),
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let arrays: Vec<arrow_array::ArrayRef> = (0..columns)
            .map(|i| -> arrow_array::ArrayRef {
                match i % 2 {
                    0 => Arc::new(Float64Array::from(vec![f64::NAN, -0.0, 2.5])),
                    _ => Arc::new(Int64Array::from(vec![1, 2, 3])),
                }
            })
            .collect();
        let mut out = vec![];
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema.clone(), None).unwrap();
        w.write(&RecordBatch::try_new(schema.clone(), arrays).unwrap()).unwrap();
        w.close().unwrap();
        let leaves = parquet::arrow::ArrowSchemaConverter::new().convert(&schema).unwrap().num_columns();
        (out, leaves)
    }

    #[test]
    fn float_columns_are_labelled_with_the_order_every_reader_knows() {
        for columns in [1, 2, 14, 15, 40, 300] {
            let (mut bytes, leaves) = file(columns);
            let orders = |b: &[u8]| {
                let r = parquet::file::serialized_reader::SerializedFileReader::new(Bytes::from(b.to_vec())).unwrap();
                r.metadata().file_metadata().column_orders().cloned().unwrap()
            };
            assert!(orders(&bytes).contains(&ColumnOrder::IEEE_754_TOTAL_ORDER), "the writer's own label");
            let n = bytes.len();
            let keep = tail_len(leaves).min(n);
            assert!(type_defined_orders(&mut bytes[n - keep..], leaves), "{columns} columns");
            let after = orders(&bytes);
            assert_eq!(after.len(), leaves);
            for (i, o) in after.iter().enumerate() {
                assert_eq!(*o, ColumnOrder::TYPE_DEFINED_ORDER(SortOrder::SIGNED), "{columns} columns, leaf {i}");
            }
            // Statistics still read, the NaN left out of the bounds.
            let r = parquet::file::serialized_reader::SerializedFileReader::new(Bytes::from(bytes.clone())).unwrap();
            let stats = r.metadata().row_group(0).column(0).statistics().unwrap().clone();
            assert!(!format!("{stats:?}").contains("NaN"), "{stats:?}");
        }
        // Not a Parquet footer: nothing changes.
        let mut junk = vec![0x2C, 0, 0, 0, 1, 2, 3, 4, b'P', b'A', b'R', b'2'];
        assert!(!type_defined_orders(&mut junk, 1));
        assert_eq!(junk[0], 0x2C);
    }
}
