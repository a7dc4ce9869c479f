//! The rows a partition unit writes: each input's rows in the table's
//! current schema (found by field id, [`super::schema`]), without the rows
//! the table's delete files remove from it ([`super::deletes`]), as
//! Spark's `rewrite_data_files` writes them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{Schema, SchemaRef};
use parquet::file::metadata::KeyValue;

use super::deletes::Deletes;
use super::schema::ById;
use crate::executor::merge::parquet::Projection;

/// The footer key Iceberg's Parquet writer stores the file's schema under.
const SCHEMA_KEY: &str = "iceberg.schema";

pub struct TableRows {
    pub by_id: ById,
    /// The current schema as the metadata writes it.
    pub schema_json: String,
    pub deletes: Arc<Deletes>,
    /// v3: each input's (by store path) first row id and data sequence
    /// number, from which the rows that store no lineage of their own take
    /// theirs (`by_id` then ends with the two lineage columns).
    pub lineage: Option<HashMap<String, (Option<i64>, i64)>>,
}

/// `col` with its nulls at row `i` replaced by `fill(i)`.
fn filled(col: &ArrayRef, fill: impl Fn(usize) -> Option<i64>) -> ArrayRef {
    let col = col.as_primitive::<Int64Type>();
    if col.null_count() == 0 {
        return Arc::new(col.clone());
    }
    Arc::new((0..col.len()).map(|i| if col.is_valid(i) { Some(col.value(i)) } else { fill(i) }).collect::<Int64Array>())
}

impl Projection for TableRows {
    fn schema(&self) -> Option<SchemaRef> {
        Some(self.by_id.schema.clone())
    }

    fn footer(&self) -> Vec<KeyValue> {
        vec![KeyValue { key: SCHEMA_KEY.into(), value: Some(self.schema_json.clone()) }]
    }

    fn check(&self, _path: &str, file: &Schema) -> Result<(), String> {
        self.by_id.check(file)
    }

    fn project(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        let mut batch = self.by_id.project(&batch)?;
        if let Some(lineage) = &self.lineage {
            // As Java's readers materialise them: a row's own values, or
            // its file's first row id plus its position and its file's
            // data sequence number (none of either if the file has no
            // first row id).
            let (first_id, seq) = lineage.get(path).copied().unwrap_or((None, 0));
            let n = batch.num_columns();
            let mut columns = batch.columns().to_vec();
            columns[n - 2] = filled(&columns[n - 2], |i| first_id.map(|f| f + first_row as i64 + i as i64));
            columns[n - 1] = filled(&columns[n - 1], |_| first_id.map(|_| seq));
            batch = RecordBatch::try_new(batch.schema(), columns).map_err(|e| e.to_string())?;
        }
        self.deletes.apply(path, first_row, batch)
    }

    fn worth_alone(&self, path: &str) -> bool {
        self.deletes.touches(path)
    }
}
