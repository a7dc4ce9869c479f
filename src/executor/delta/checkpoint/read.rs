//! Reading a classic checkpoint (or one part of a multi-part one) a row
//! group at a time: its rows as the JSON actions they stand for, so that the
//! log reader and the checkpoint writer parse them as they parse commits.
//! Only one row group's column chunks and one batch are in memory at once,
//! whatever the checkpoint's size.

use futures::stream::BoxStream;
use futures::StreamExt;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use store::Store;

use crate::executor::delta::DeltaError;
use crate::executor::merge::parquet as pq;
use crate::executor::throttle::Throttle;

/// Rows per batch.
pub(super) const BATCH_ROWS: usize = 4096;

/// Which columns of a checkpoint a reader takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// What a snapshot keeps: `add` (its statistics for their row count),
    /// the path, deletion vector and time of a `remove` (its key, and for
    /// retention its age), `metaData`,
    /// `protocol` and `domainMetadata` (row tracking's high-water mark).
    State,
    /// Every action, for copying into a new checkpoint (the parsed copies of
    /// statistics and partition values are not read: a checkpoint compactd
    /// writes has neither).
    All,
}

pub(super) fn bad(path: &str, problem: impl std::fmt::Display) -> DeltaError {
    DeltaError::Table { table: path.to_string(), problem: format!("checkpoint: {problem}") }
}

/// The rows of the checkpoint (or checkpoint part) at `path` (`len` bytes,
/// if listed), a batch at a time as JSON action lines; only a row group and
/// a batch are in memory at once. `None` if it does not exist.
pub async fn rows(
    store: &Store,
    path: &str,
    len: Option<u64>,
    columns: Columns,
) -> Result<Option<BoxStream<'static, Result<Vec<u8>, DeltaError>>>, DeltaError> {
    let len = match len {
        Some(l) => l,
        None => match store.stat(path).await? {
            Some(m) => m.len,
            None => return Ok(None),
        },
    };
    let (reader, meta) = pq::open(store, path, len, false, &Throttle::none()).await.map_err(|e| bad(path, e))?;
    let descr = meta.metadata().file_metadata().schema_descr_ptr();
    let wanted: Vec<usize> =
        descr.columns().iter().enumerate().filter(|(_, c)| wanted(columns, c.path().parts())).map(|(i, _)| i).collect();
    let batches = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
        .with_projection(ProjectionMask::leaves(&descr, wanted))
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| bad(path, e))?;
    let path = path.to_string();
    Ok(Some(
        batches
            .map(move |batch| {
                let batch = batch.map_err(|e| bad(&path, e))?;
                // Explicit nulls: a map's null values (a null partition
                // value) are dropped otherwise, and an action must keep
                // every key.
                let mut w = arrow_json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow_json::writer::LineDelimited>(Vec::new());
                w.write(&batch).map_err(|e| bad(&path, e))?;
                w.finish().map_err(|e| bad(&path, e))?;
                Ok(w.into_inner())
            })
            .boxed(),
    ))
}

/// Whether a checkpoint's leaf column at `parts` is read for `columns`.
fn wanted(columns: Columns, parts: &[String]) -> bool {
    let (top, field) = (parts[0].as_str(), parts.get(1).map(String::as_str));
    match columns {
        Columns::State => match top {
            "add" => !matches!(field, Some("stats_parsed" | "partitionValues_parsed")),
            "remove" => matches!(field, Some("path" | "deletionVector" | "deletionTimestamp")),
            "metaData" | "protocol" | "domainMetadata" => true,
            _ => false,
        },
        Columns::All => match top {
            "add" => !matches!(field, Some("stats_parsed" | "partitionValues_parsed")),
            "remove" | "metaData" | "protocol" | "txn" | "domainMetadata" | "checkpointMetadata" | "sidecar" => true,
            _ => false,
        },
    }
}
