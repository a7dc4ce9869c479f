//! The rows a partition unit writes: each input's rows in the table's
//! current schema (found by field id, [`super::schema`]), without the rows
//! the table's delete files remove from it ([`super::deletes`]), as
//! Spark's `rewrite_data_files` writes them.

use std::sync::Arc;

use arrow_array::RecordBatch;
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
}

impl Projection for TableRows {
    fn schema(&self) -> SchemaRef {
        self.by_id.schema.clone()
    }

    fn footer(&self) -> Vec<KeyValue> {
        vec![KeyValue { key: SCHEMA_KEY.into(), value: Some(self.schema_json.clone()) }]
    }

    fn check(&self, _path: &str, file: &Schema) -> Result<(), String> {
        self.by_id.check(file)
    }

    fn project(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        let batch = self.by_id.project(&batch)?;
        self.deletes.apply(path, first_row, batch)
    }
}
