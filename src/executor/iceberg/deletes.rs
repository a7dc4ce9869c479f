//! The delete files of an Iceberg table that apply to a unit's inputs, read
//! and applied while the inputs are rewritten, as Spark's
//! `rewrite_data_files` does: the outputs hold only the rows a reader of
//! the snapshot the unit read would see.
//!
//! Which delete files apply to a data file (Java's `DeleteFileIndex`):
//! - a position delete file of the same spec and partition whose data
//!   sequence number is at least the data file's, to the rows it names by
//!   the data file's path and position;
//! - an equality delete file whose data sequence number is greater than the
//!   data file's, of the same spec and partition, or of any partition when
//!   its spec is unpartitioned (no fields, or all `void`), to the rows
//!   whose values in its equality columns equal one of its rows' (a null
//!   equals a null).
//!
//! The outputs keep the data sequence number of the snapshot read, so
//! equality deletes committed after it keep applying to them; deletes
//! committed before it no longer do, which is why they are applied here.
//! A position delete file every row of which names a rewritten input (or a
//! file no longer live) is spent: the commit removes it with its inputs.
//!
//! Memory: positions as sorted lists per input, equality deletes as a hash
//! set of their rows' encoded values, both bounded by the delete files of
//! one partition (and the unpartitioned ones).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Fields, Schema};
use futures::StreamExt;
use store::Store;

use super::manifest::{unit_key, Entry};
use super::schema::{ById, FIELD_ID};
use super::Head;
use crate::executor::merge::parquet;
use crate::executor::throttle::Throttle;

/// The reserved field ids of a position delete file's columns.
const FILE_PATH_ID: &str = "2147483546";
const POS_ID: &str = "2147483545";

/// Rows of one equality delete file: the values of its columns.
struct EqualitySet {
    /// Its columns' indices in the table's schema.
    columns: Vec<usize>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

/// What the deletes remove from each input (by store path).
#[derive(Default)]
pub struct Deletes {
    positions: HashMap<String, Vec<u64>>,
    equality: HashMap<String, Vec<Arc<EqualitySet>>>,
}

impl Deletes {
    /// `batch` (in the table's schema) of the input `path`, its rows from
    /// `first_row` on, without the rows deleted.
    pub fn apply(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        let n = batch.num_rows();
        let mut keep = vec![true; n];
        let mut any = false;
        if let Some(pos) = self.positions.get(path) {
            any |= parquet::deleted::clear(pos, first_row, &mut keep);
        }
        for set in self.equality.get(path).into_iter().flatten() {
            let columns: Vec<ArrayRef> = set.columns.iter().map(|&c| batch.column(c).clone()).collect();
            let rows = set.converter.convert_columns(&columns).map_err(|e| e.to_string())?;
            for (i, k) in keep.iter_mut().enumerate() {
                if *k && set.keys.contains(rows.row(i).as_ref()) {
                    *k = false;
                    any = true;
                }
            }
        }
        if !any {
            return Ok(batch);
        }
        arrow_select::filter::filter_record_batch(&batch, &BooleanArray::from(keep)).map_err(|e| e.to_string())
    }

    /// Whether any delete applies to the input `path`.
    pub fn touches(&self, path: &str) -> bool {
        self.positions.get(path).is_some_and(|p| !p.is_empty())
            || self.equality.get(path).is_some_and(|e| !e.is_empty())
    }

    /// Rows deleted from the inputs by position (for figures).
    pub fn positions(&self) -> usize {
        self.positions.values().map(Vec::len).sum()
    }
}

/// The deletes that apply to a unit's inputs.
pub struct Loaded {
    pub deletes: Deletes,
    /// Each position delete file read (its path as the manifest names it)
    /// and the data files its rows name.
    pub position_files: Vec<(String, BTreeSet<String>)>,
    /// The equality delete files applied.
    pub equality_files: Vec<String>,
}

impl Loaded {
    /// The position delete files spent once `rewritten` (data file paths
    /// as manifests name them) are replaced: every row names one of them
    /// or a file `head` no longer holds live.
    pub fn spent(&self, head: &Head, rewritten: &BTreeSet<String>) -> Vec<String> {
        let live: HashSet<&str> =
            head.live().filter(|(_, e)| e.content == 0).map(|(_, e)| e.file_path.as_str()).collect();
        self.position_files
            .iter()
            .filter(|(_, refs)| refs.iter().all(|r| rewritten.contains(r) || !live.contains(r.as_str())))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The position delete files not spent by `rewritten` alone whose
    /// other live files are all in `others` (files another unit of the
    /// partition may rewrite), with those files.
    pub fn shared(
        &self,
        head: &Head,
        rewritten: &BTreeSet<String>,
        others: &BTreeSet<String>,
    ) -> BTreeMap<String, Vec<String>> {
        let live: HashSet<&str> =
            head.live().filter(|(_, e)| e.content == 0).map(|(_, e)| e.file_path.as_str()).collect();
        let mut out = BTreeMap::new();
        for (path, refs) in &self.position_files {
            let rest: Vec<String> =
                refs.iter().filter(|r| !rewritten.contains(*r) && live.contains(r.as_str())).cloned().collect();
            if !rest.is_empty() && rest.iter().all(|r| others.contains(r)) && refs.iter().any(|r| rewritten.contains(r))
            {
                out.insert(path.clone(), rest);
            }
        }
        out
    }
}

/// Reads a whole Parquet file of the table.
async fn read_all(store: &Store, path: &str, len: u64, io: &Throttle) -> Result<Vec<RecordBatch>, String> {
    let (reader, meta) = parquet::open(store, path, len, true, io).await.map_err(|e| format!("{path}: {e}"))?;
    let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
        .with_batch_size(parquet::BATCH_ROWS)
        .build()
        .map_err(|e| format!("{path}: {e}"))?;
    let mut out = vec![];
    while let Some(b) = stream.next().await {
        out.push(b.map_err(|e| format!("{path}: corrupt or truncated: {e}"))?);
    }
    Ok(out)
}

/// The index of the column of `fields` with field id `id` (or, in a file
/// without ids, named `name`).
fn column(fields: &Fields, id: &str, name: &str) -> Option<usize> {
    let ids = fields.iter().any(|f| f.metadata().contains_key(FIELD_ID));
    fields.iter().position(|f| match ids {
        true => f.metadata().get(FIELD_ID).is_some_and(|v| v == id),
        false => f.name() == name,
    })
}

/// Whether delete entry `d` applies to data entry `e` by scope and sequence
/// number (see the module doc).
pub fn applies(head: &Head, d: &Entry, e: &Entry) -> bool {
    match d.content {
        1 => {
            d.sequence_number >= e.sequence_number
                && d.spec_id == e.spec_id
                && unit_key(d.spec_id, &d.partition) == unit_key(e.spec_id, &e.partition)
                && d.referenced_data_file.as_ref().is_none_or(|r| *r == e.file_path)
        }
        2 => {
            d.sequence_number > e.sequence_number
                && (head.table.unpartitioned(d.spec_id)
                    || (d.spec_id == e.spec_id
                        && unit_key(d.spec_id, &d.partition) == unit_key(e.spec_id, &e.partition)))
        }
        _ => false,
    }
}

/// Reads the delete files of `head` that apply to `inputs` (live data
/// entries of one partition); an error names a delete file compactd cannot
/// apply (not Parquet, an equality column that is nested or dropped).
pub async fn load(
    store: &Store,
    head: &Head,
    inputs: &[&Entry],
    by_id: &ById,
    io: &Throttle,
) -> Result<Loaded, String> {
    let t = &head.table;
    let mut loaded = Loaded { deletes: Deletes::default(), position_files: vec![], equality_files: vec![] };
    let by_uri: HashMap<&str, &Entry> = inputs.iter().map(|e| (e.file_path.as_str(), *e)).collect();
    let deletes: Vec<&Entry> =
        head.live().map(|(_, e)| e).filter(|d| d.content != 0 && inputs.iter().any(|e| applies(head, d, e))).collect();
    let mut positions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // A data file with a deletion vector takes its deletes from the vector
    // alone (position delete files of a table upgraded to v3 no longer
    // apply to it).
    let mut dv_of: HashSet<String> = HashSet::new();
    for d in deletes.iter().filter(|d| d.is_dv()) {
        let Some(e) = d.referenced_data_file.as_deref().and_then(|r| by_uri.get(r)).filter(|e| applies(head, d, e))
        else {
            continue;
        };
        let path = t.store_path(&e.file_path)?;
        if !dv_of.insert(path.clone()) {
            return Err(format!("data file {} has two deletion vectors", e.file_path));
        }
        let p = positions.entry(path).or_default();
        p.extend(read_dv(store, t, d, io).await?);
        let refs = BTreeSet::from([e.file_path.clone()]);
        loaded.position_files.push((d.key(), refs));
    }
    for d in deletes.iter().filter(|d| !d.is_dv()) {
        if !d.file_format.eq_ignore_ascii_case("parquet") {
            return Err(format!(
                "delete file {} is {}: compactd applies Parquet deletes only",
                d.file_path, d.file_format
            ));
        }
        let path = t.store_path(&d.file_path)?;
        let batches = read_all(store, &path, d.file_size.max(0) as u64, io).await?;
        if d.content == 1 {
            let mut refs = BTreeSet::new();
            for b in &batches {
                let (Some(f), Some(p)) = (
                    column(b.schema().fields(), FILE_PATH_ID, "file_path"),
                    column(b.schema().fields(), POS_ID, "pos"),
                ) else {
                    return Err(format!("position delete file {}: no file_path and pos columns", d.file_path));
                };
                let files = arrow_cast::cast(b.column(f), &DataType::Utf8).map_err(|e| e.to_string())?;
                let files = files.as_string::<i32>();
                let pos = arrow_cast::cast(b.column(p), &DataType::Int64).map_err(|e| e.to_string())?;
                let pos = pos.as_primitive::<Int64Type>();
                for i in 0..b.num_rows() {
                    if files.is_null(i) || pos.is_null(i) {
                        return Err(format!("position delete file {}: a null path or position", d.file_path));
                    }
                    let file = files.value(i);
                    if !refs.contains(file) {
                        refs.insert(file.to_string());
                    }
                    if let Some(e) = by_uri.get(file).filter(|e| applies(head, d, e)) {
                        let path = t.store_path(&e.file_path)?;
                        if !dv_of.contains(&path) {
                            positions.entry(path).or_default().push(pos.value(i) as u64);
                        }
                    }
                }
            }
            loaded.position_files.push((d.key(), refs));
        } else {
            let set = Arc::new(equality_set(d, &batches, by_id)?);
            for e in inputs.iter().filter(|e| applies(head, d, e)) {
                loaded.deletes.equality.entry(t.store_path(&e.file_path)?).or_default().push(set.clone());
            }
            loaded.equality_files.push(d.file_path.clone());
        }
    }
    for (path, mut p) in positions {
        p.sort_unstable();
        p.dedup();
        loaded.deletes.positions.insert(path, p);
    }
    Ok(loaded)
}

/// The positions a deletion vector deletes: its blob in the Puffin file is
/// a big-endian length (of the magic and the vector), the magic, a
/// 64-bit Roaring bitmap in the portable layout and a big-endian CRC-32 of
/// the magic and the vector.
async fn read_dv(store: &Store, t: &super::table::Table, d: &Entry, io: &Throttle) -> Result<Vec<u64>, String> {
    let bad = |why: &str| {
        format!("deletion vector of {} in {}: {why}", d.referenced_data_file.as_deref().unwrap_or("?"), d.file_path)
    };
    let (Some(offset), Some(size)) = (d.content_offset, d.content_size) else {
        return Err(bad("no content_offset and content_size_in_bytes"));
    };
    if offset < 0 || size < 12 {
        return Err(bad("a blob offset or size out of range"));
    }
    let path = t.store_path(&d.file_path)?;
    io.take(size as u64).await.map_err(|e| e.to_string())?;
    let blob = store
        .read_range(&path, offset as u64, size as u64)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| bad("the Puffin file is missing"))?;
    if blob.len() != size as usize {
        return Err(bad("the Puffin file is shorter than the blob"));
    }
    parquet::deleted::parse_frame(&blob, d.record_count).map_err(|e| bad(&e))
}

/// An equality delete file's rows as values of the table's columns.
fn equality_set(d: &Entry, batches: &[RecordBatch], by_id: &ById) -> Result<EqualitySet, String> {
    let table = by_id.schema.fields();
    let mut columns = vec![];
    for id in &d.equality_ids {
        let at = table.iter().position(|f| f.metadata().get(FIELD_ID).is_some_and(|v| *v == id.to_string()));
        match at {
            Some(at) if !table[at].data_type().is_nested() => columns.push(at),
            Some(_) => {
                return Err(format!(
                    "equality delete file {}: column id {id} is nested; compactd applies equality deletes on \
                     top-level columns only",
                    d.file_path
                ))
            }
            None => {
                return Err(format!(
                    "equality delete file {}: column id {id} is not a top-level column of the current schema",
                    d.file_path
                ))
            }
        }
    }
    if columns.is_empty() {
        return Err(format!("equality delete file {} names no equality columns", d.file_path));
    }
    // The delete file's rows read into the table's types (promoted as
    // data files are), projected onto the equality columns.
    let fields: Vec<_> = columns.iter().map(|&c| table[c].as_ref().clone().with_nullable(true)).collect();
    let sub = ById::of_arrow(Arc::new(Schema::new(fields)));
    let converter = RowConverter::new(columns.iter().map(|&c| SortField::new(table[c].data_type().clone())).collect())
        .map_err(|e| e.to_string())?;
    let mut keys = HashSet::new();
    for b in batches {
        sub.check(&b.schema()).map_err(|e| format!("equality delete file {}: {e}", d.file_path))?;
        let b = sub.project(b).map_err(|e| format!("equality delete file {}: {e}", d.file_path))?;
        let rows = converter.convert_columns(b.columns()).map_err(|e| e.to_string())?;
        for r in rows.iter() {
            keys.insert(Box::<[u8]>::from(r.as_ref()));
        }
    }
    Ok(EqualitySet { columns, converter, keys })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::Field;

    #[test]
    fn positions_and_equal_rows_are_removed_null_equal_to_null() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true), Field::new("s", DataType::Utf8, true)]));
        let batch = |ids: Vec<Option<i64>>| {
            let s: Vec<String> = ids.iter().map(|i| format!("{i:?}")).collect();
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(s))])
                .unwrap()
        };
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let doomed: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None]));
        let keys = converter.convert_columns(&[doomed]).unwrap().iter().map(|r| r.as_ref().into()).collect();
        let set = Arc::new(EqualitySet { columns: vec![0], converter, keys });
        let mut d = Deletes::default();
        d.positions.insert("f".into(), vec![1, 9, 10]);
        d.equality.insert("f".into(), vec![set]);
        // Rows 8..12 of the file: 9 and 10 by position, id 5 and the null
        // id by equality.
        let out = d.apply("f", 8, batch(vec![Some(1), Some(2), Some(3), Some(5), None, Some(6)])).unwrap();
        let ids = out.column(0).as_primitive::<Int64Type>();
        assert_eq!(ids.iter().collect::<Vec<_>>(), vec![Some(1), Some(6)]);
        // Another file: nothing applies.
        assert_eq!(d.apply("g", 0, batch(vec![Some(5)])).unwrap().num_rows(), 1);
    }
}
