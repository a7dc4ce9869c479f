//! The rows a Delta unit writes: each input's rows without those its
//! deletion vector deletes ([`super::vectors`]), and, where the table lets
//! its columns' types widen (the `typeWidening` feature), in the widest
//! type its inputs hold ([`crate::executor::merge::parquet::schema::Union::widening`]).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::vectors::Vectors;
use crate::executor::merge::parquet::Projection;

pub struct TableRows {
    pub vectors: Vectors,
    pub widening: bool,
}

impl Projection for TableRows {
    fn schema(&self) -> Option<SchemaRef> {
        None
    }

    fn project(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        self.vectors.apply(path, first_row, batch)
    }

    fn worth_alone(&self, path: &str) -> bool {
        self.vectors.touches(path)
    }

    fn widens(&self) -> bool {
        self.widening
    }
}
