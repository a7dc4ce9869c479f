//! The rows a Delta unit writes: each input's rows without those its
//! deletion vector deletes ([`super::vectors`]), with their row ids and
//! commit versions materialized where the table tracks rows
//! ([`super::tracking`]), and, where the table lets its columns' types
//! widen (the `typeWidening` feature), in the widest type its inputs hold
//! ([`crate::executor::merge::parquet::schema::Union::widening`]).

use arrow_array::RecordBatch;
use arrow_schema::{FieldRef, SchemaRef};

use super::tracking::Materialize;
use super::vectors::Vectors;
use crate::executor::merge::parquet::Projection;

pub struct TableRows {
    pub vectors: Vectors,
    pub widening: bool,
    pub tracking: Option<Materialize>,
}

impl Projection for TableRows {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    fn extra_fields(&self) -> Vec<FieldRef> {
        self.tracking.as_ref().map(Materialize::fields).unwrap_or_default()
    }

    fn project(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        // By physical position, which deleting rows would shift.
        let batch = match &self.tracking {
            Some(t) => t.apply(path, first_row, batch)?,
            None => batch,
        };
        self.vectors.apply(path, first_row, batch)
    }

    fn worth_alone(&self, path: &str) -> bool {
        self.vectors.touches(path)
    }

    fn widens(&self) -> bool {
        self.widening
    }
}
