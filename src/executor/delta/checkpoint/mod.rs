//! Classic Delta checkpoints (`_delta_log/<v>.checkpoint.parquet`): read a
//! row group at a time for the log reader, and written when a unit's commit
//! lands on a multiple of the table's `delta.checkpointInterval` (default
//! 10), as Delta's writers do, so that readers of a table compactd commits
//! to often do not replay an ever longer log.
//!
//! What a checkpoint of version `v` holds (PROTOCOL.md "Checkpoints",
//! "Action Reconciliation", "Checkpoint Schema"): the protocol and metadata
//! in force at `v`, the newest `txn` of each application (unless older than
//! `delta.setTransactionRetentionDuration`, when set), every active file's
//! `add` with its `stats` and `tags`, and the `remove` tombstones younger
//! than `delta.deletedFileRetentionDuration` (default one week), without
//! their `stats` and `tags`. It is V1 spec: one Parquet file, every column
//! nullable (as Spark writes them), partition values and tags as
//! `map<string,string>`, stats as a JSON string (or left out when
//! `delta.checkpoint.writeStatsAsJson` is false). A table that asks for
//! `stats_parsed` (`delta.checkpoint.writeStatsAsStruct` set to true) or
//! holds actions compactd cannot carry (domain metadata) gets no checkpoint
//! from compactd: the next writer that can makes one. Files are keyed by
//! their path and deletion vector, as the protocol reconciles them: a
//! file's tombstone with its old vector and its `add` with the new one are
//! both kept.
//!
//! How it is made, in bounded memory where the log allows: the commits
//! after the newest complete checkpoint before `v` are read first (their
//! file actions kept by path), then that checkpoint is streamed a row group
//! at a time, each row copied unless a later commit replaced it, then the
//! commits' own actions follow. The file is written by a streamed
//! whole-object write (nothing is visible at its name until it is whole),
//! then `_last_checkpoint` is replaced (unless it already names a newer
//! version). Both are deterministic for their version up to the tombstones'
//! expiry, so a checkpoint another writer made first is left as it is.
//!
//! A failed checkpoint never fails the unit: its commit already landed, and
//! the protocol makes checkpoints optional ([`after_commit`] logs why).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use futures::TryStreamExt;
use parquet::arrow::async_writer::AsyncArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::{json, Value};
use store::Store;

use super::log::{self, Metadata};
use super::DeltaError;
use crate::executor::merge::parquet::{self as pq, StoreSink};
use crate::executor::throttle::Throttle;

/// The checkpoint interval when the table does not set one.
const DEFAULT_INTERVAL: u64 = 10;
/// Tombstones younger than this are kept when the table does not say.
const DEFAULT_TOMBSTONE_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
use read::{bad, rows, Columns, BATCH_ROWS};

/// `_delta_log/<version>.checkpoint.parquet`
pub fn path(table: &str, version: u64) -> String {
    format!("{table}{}{version:020}.checkpoint.parquet", log::LOG_DIR)
}

/// Writes the checkpoint of `version` if it lands on the table's interval
/// (`meta`: the table's metadata at that version; `now`: judges tombstones'
/// age). Never fails the caller: a checkpoint the unit could not write is
/// logged.
pub async fn after_commit(store: &Store, table: &str, version: u64, meta: &Metadata, now: SystemTime) {
    match write(store, table, version, meta, now).await {
        Ok(Some(w)) => tracing::info!(
            table,
            version,
            actions = w.actions,
            files = w.adds,
            bytes = w.bytes,
            "wrote the table's checkpoint"
        ),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(table, version, error = %e, "could not write the table's checkpoint (the commit stands)")
        }
    }
}

/// What a checkpoint holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Rows (actions).
    pub actions: u64,
    /// `add` actions.
    pub adds: u64,
    pub bytes: u64,
}

fn setting(meta: &Metadata, key: &str) -> Option<String> {
    meta.configuration.get(key).cloned().flatten()
}

/// Writes the checkpoint of `version` (see the module's doc); `None` when
/// none is due (not on the interval, or already there) or the table asks
/// for what compactd does not write.
pub async fn write(
    store: &Store,
    table: &str,
    version: u64,
    meta: &Metadata,
    now: SystemTime,
) -> Result<Option<Written>, DeltaError> {
    let refuse = |problem: String| DeltaError::Table { table: table.to_string(), problem };
    let interval = match setting(meta, "delta.checkpointInterval") {
        None => DEFAULT_INTERVAL,
        Some(s) => s.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            refuse(format!("delta.checkpointInterval {s:?} is not a positive integer: no checkpoint"))
        })?,
    };
    if version == 0 || !version.is_multiple_of(interval) {
        return Ok(None);
    }
    write_at(store, table, version, meta, now).await
}

/// Writes the checkpoint of `version` whatever the interval (retention
/// makes one so that the log behind it can go); `None` when it is there
/// already.
pub async fn write_at(
    store: &Store,
    table: &str,
    version: u64,
    meta: &Metadata,
    now: SystemTime,
) -> Result<Option<Written>, DeltaError> {
    let refuse = |problem: String| DeltaError::Table { table: table.to_string(), problem };
    if setting(meta, "delta.checkpoint.writeStatsAsStruct").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Err(refuse(
            "delta.checkpoint.writeStatsAsStruct is true, and compactd writes statistics as JSON only: no checkpoint"
                .into(),
        ));
    }
    let target = path(table, version);
    if store.exists(&target).await? {
        return Ok(None);
    }
    let stats_json =
        !setting(meta, "delta.checkpoint.writeStatsAsJson").is_some_and(|v| v.trim().eq_ignore_ascii_case("false"));
    let now_ms = now.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let retention = |key: &str| setting(meta, key).map(|s| parse_interval(&s).ok_or(s));
    let tombstones_after = match retention("delta.deletedFileRetentionDuration") {
        None => now_ms - DEFAULT_TOMBSTONE_RETENTION.as_millis() as i64,
        Some(Ok(d)) => now_ms - d.as_millis() as i64,
        // Keeping a tombstone too long only delays its VACUUM.
        Some(Err(_)) => i64::MIN,
    };
    let txns_after = match retention("delta.setTransactionRetentionDuration") {
        Some(Ok(d)) => now_ms - d.as_millis() as i64,
        _ => i64::MIN,
    };
    let base = base(store, table, version).await?;
    let later = Later::read(store, table, base.as_ref().map_or(0, |(v, _)| v + 1), version).await?;
    let keep = Keep { tombstones_after, txns_after, later: &later };

    let schema = schema(stats_json);
    let props =
        WriterProperties::builder().set_compression(Compression::SNAPPY).set_created_by(pq::created_by()).build();
    let sink = StoreSink::new(store.writer(&target).await?, Throttle::none(), &schema);
    let mut out = Out {
        writer: AsyncArrowWriter::try_new(sink, schema.clone(), Some(props)).map_err(|e| bad(&target, e))?,
        schema,
        lines: Vec::new(),
        rows: 0,
        written: Written { actions: 0, adds: 0, bytes: 0 },
        path: target.clone(),
        has_protocol: false,
        has_metadata: false,
    };
    // A failure from here on leaves a temp file at most: the name appears
    // only once the write completes.
    if let Some((_, parts)) = &base {
        for (part, len) in parts {
            let Some(mut batches) = rows(store, part, *len, Columns::All).await? else {
                return Err(bad(part, "vanished while it was read"));
            };
            while let Some(lines) = batches.try_next().await? {
                for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    let row: Value = serde_json::from_slice(line).map_err(|e| bad(part, e))?;
                    if let Some((kind, a)) = keep.checkpoint_row(part, row)? {
                        out.push(kind, &a.to_string());
                    }
                }
                out.flush().await?;
            }
        }
    }
    for a in later.actions(&keep) {
        out.push(a.kind, &a.text);
        if out.rows >= BATCH_ROWS {
            out.flush().await?;
        }
    }
    let written = out.finish().await?;
    let last = format!("{}{}_last_checkpoint", table, log::LOG_DIR);
    let newer = match store.read(&last).await {
        Ok(Some(b)) => serde_json::from_slice::<Value>(&b)
            .ok()
            .and_then(|v| v.get("version").and_then(Value::as_u64))
            .is_some_and(|v| v >= version),
        _ => false,
    };
    if !newer {
        let body = json!({"version": version, "size": written.actions, "sizeInBytes": written.bytes,
            "numOfAddFiles": written.adds});
        store.put(&last, body.to_string().into_bytes()).await?;
    }
    Ok(Some(written))
}

/// `7 days`, `interval 1 week`, `2 hours 30 minutes`: a Spark calendar
/// interval without months or years.
pub fn parse_interval(s: &str) -> Option<Duration> {
    let s = s.trim().to_ascii_lowercase();
    let s = s.strip_prefix("interval").unwrap_or(&s);
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(2) {
        return None;
    }
    let mut micros: u128 = 0;
    for pair in words.chunks(2) {
        let n: u128 = pair[0].parse().ok()?;
        let unit: u128 = match pair[1].trim_end_matches('s') {
            "week" => 7 * 86_400_000_000,
            "day" => 86_400_000_000,
            "hour" => 3_600_000_000,
            "minute" => 60_000_000,
            "second" => 1_000_000,
            "millisecond" => 1_000,
            "microsecond" => 1,
            _ => return None,
        };
        micros = micros.checked_add(n.checked_mul(unit)?)?;
    }
    Some(Duration::from_micros(u64::try_from(micros).ok()?))
}

/// A checkpoint part: its path, and its size if listed.
type Part = log::Listed;

/// The newest complete checkpoint before `version` (the log reader's
/// choice: classic or multi-part, whole only): its version and parts.
async fn base(store: &Store, table: &str, version: u64) -> Result<Option<(u64, Vec<Part>)>, DeltaError> {
    if version == 0 {
        return Ok(None);
    }
    Ok(log::list_log(store, table, None).await?.newest_complete_checkpoint(version - 1))
}

/// The commits after the base checkpoint, up to the checkpoint's version:
/// their last action for each file, application and table property, kept
/// as the commit's own JSON lines (a parsed tree costs several times more).
#[derive(Default)]
struct Later {
    /// File key ([`file_key`]) -> its last `add` or `remove`.
    files: BTreeMap<String, Line>,
    txns: BTreeMap<String, Line>,
    protocol: Option<Line>,
    metadata: Option<Line>,
}

/// What an action is, for counting and keeping it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    /// A tombstone, deleted at this time (ms; 0 if it does not say).
    Remove(i64),
    /// An application's transaction, last updated then (if it says).
    Txn(Option<i64>),
    Metadata,
    Protocol,
}

/// One action as a JSON line.
struct Line {
    kind: Kind,
    text: Box<str>,
}

impl Later {
    async fn read(store: &Store, table: &str, from: u64, to: u64) -> Result<Later, DeltaError> {
        let mut later = Later::default();
        for v in from..=to {
            let p = log::commit_path(table, v);
            // A line at a time: only the lines kept are held, not the commit.
            let found = log::for_each_line(store, &p, None, |number, line| {
                if line.iter().all(u8::is_ascii_whitespace) {
                    return Ok(());
                }
                let a: Value = serde_json::from_slice(line)
                    .map_err(|e| bad(&p, format!("line {number}: not a Delta action: {e}")))?;
                // Valid JSON, so valid UTF-8.
                let text = String::from_utf8_lossy(line).trim().into();
                later.apply(&p, &a, text)
            })
            .await?;
            if !found {
                return Err(DeltaError::Table {
                    table: table.to_string(),
                    problem: format!("the log has no commit {v} (a checkpoint of {to} needs it)"),
                });
            }
        }
        Ok(later)
    }

    fn apply(&mut self, path: &str, action: &Value, text: Box<str>) -> Result<(), DeltaError> {
        let Value::Object(m) = action else {
            return Err(bad(path, "an action that is not a JSON object"));
        };
        refuse_uncarried(path, m)?;
        let Some((kind, key)) = classify(m) else {
            return Ok(()); // commitInfo, cdc, …: not in checkpoints
        };
        let line = Line { kind, text };
        let missing = || bad(path, "an add, remove or txn without its path or appId");
        match kind {
            Kind::Add | Kind::Remove(_) => {
                self.files.insert(key.ok_or_else(missing)?, line);
            }
            Kind::Txn(_) => {
                self.txns.insert(key.ok_or_else(missing)?, line);
            }
            Kind::Metadata => self.metadata = Some(line),
            Kind::Protocol => self.protocol = Some(line),
        }
        Ok(())
    }

    /// The actions the checkpoint takes from these commits.
    fn actions<'a>(&'a self, keep: &'a Keep) -> impl Iterator<Item = &'a Line> + 'a {
        let files = self.files.values().chain(self.txns.values()).filter(|l| keep.kind(l.kind));
        files.chain(self.metadata.iter()).chain(self.protocol.iter())
    }
}

/// The kind of the one action an action object (or checkpoint row, whose
/// other columns are null) holds, with its key (a file's [`file_key`], a
/// txn's application); `None` for actions checkpoints do not keep.
fn classify(m: &serde_json::Map<String, Value>) -> Option<(Kind, Option<String>)> {
    let get = |k: &str| m.get(k).filter(|v| !v.is_null());
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    if let Some(a) = get("add") {
        return Some((Kind::Add, file_key(a)));
    }
    if let Some(r) = get("remove") {
        let at = r.get("deletionTimestamp").and_then(Value::as_i64).unwrap_or(0);
        return Some((Kind::Remove(at), file_key(r)));
    }
    if let Some(t) = get("txn") {
        return Some((Kind::Txn(t.get("lastUpdated").and_then(Value::as_i64)), text(t, "appId")));
    }
    if get("metaData").is_some() {
        return Some((Kind::Metadata, None));
    }
    get("protocol").map(|_| (Kind::Protocol, None))
}

/// A file action's key: its decoded path, then its deletion vector's
/// unique id where it has one.
fn file_key(action: &Value) -> Option<String> {
    let path = log::path_key(action.get("path")?.as_str()?);
    Some(match action.get("deletionVector").filter(|v| !v.is_null()).and_then(log::dv_unique_id) {
        Some(dv) => format!("{path}\n{dv}"),
        None => path,
    })
}

/// Actions a checkpoint cannot hold as compactd writes it.
fn refuse_uncarried(path: &str, m: &serde_json::Map<String, Value>) -> Result<(), DeltaError> {
    for k in ["domainMetadata", "checkpointMetadata", "sidecar"] {
        if m.get(k).is_some_and(|v| !v.is_null()) {
            return Err(bad(path, format!("it holds a {k} action, which compactd does not carry")));
        }
    }
    Ok(())
}

/// Which rows a checkpoint keeps.
struct Keep<'a> {
    tombstones_after: i64,
    txns_after: i64,
    later: &'a Later,
}

impl Keep<'_> {
    /// Tombstones and transactions while young enough; the rest always.
    fn kind(&self, kind: Kind) -> bool {
        match kind {
            Kind::Remove(at) => at > self.tombstones_after,
            Kind::Txn(at) => at.is_none_or(|at| at >= self.txns_after),
            _ => true,
        }
    }

    /// A row of the base checkpoint, if the new one keeps it: its kind and
    /// its one action (the row's null columns dropped).
    fn checkpoint_row(&self, part: &str, row: Value) -> Result<Option<(Kind, Value)>, DeltaError> {
        let Value::Object(mut m) = row else {
            return Err(bad(part, "a row that is not an object"));
        };
        refuse_uncarried(part, &m)?;
        let Some((kind, key)) = classify(&m) else {
            return Ok(None);
        };
        let replaced = match (kind, &key) {
            (Kind::Add | Kind::Remove(_), Some(k)) => self.later.files.contains_key(k),
            (Kind::Txn(_), Some(app)) => self.later.txns.contains_key(app),
            (Kind::Metadata, _) => self.later.metadata.is_some(),
            (Kind::Protocol, _) => self.later.protocol.is_some(),
            _ => return Err(bad(part, "an add, remove or txn without its path or appId")),
        };
        if replaced || !self.kind(kind) {
            return Ok(None);
        }
        let name = match kind {
            Kind::Add => "add",
            Kind::Remove(_) => "remove",
            Kind::Txn(_) => "txn",
            Kind::Metadata => "metaData",
            Kind::Protocol => "protocol",
        };
        Ok(m.remove(name).map(|a| (kind, json!({ name: a }))))
    }
}

/// The checkpoint being written: JSON action lines decoded into batches of
/// the checkpoint's schema.
struct Out {
    writer: AsyncArrowWriter<StoreSink>,
    schema: SchemaRef,
    lines: Vec<u8>,
    rows: usize,
    written: Written,
    path: String,
    has_protocol: bool,
    has_metadata: bool,
}

impl Out {
    fn push(&mut self, kind: Kind, line: &str) {
        self.written.actions += 1;
        self.written.adds += u64::from(kind == Kind::Add);
        self.has_protocol |= kind == Kind::Protocol;
        self.has_metadata |= kind == Kind::Metadata;
        self.lines.extend_from_slice(line.as_bytes());
        self.lines.push(b'\n');
        self.rows += 1;
    }

    async fn flush(&mut self) -> Result<(), DeltaError> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut decoder = arrow_json::ReaderBuilder::new(self.schema.clone())
            .with_batch_size(self.rows)
            .build_decoder()
            .map_err(|e| bad(&self.path, e))?;
        let mut at = 0;
        while at < self.lines.len() {
            let n = decoder.decode(&self.lines[at..]).map_err(|e| bad(&self.path, e))?;
            if n == 0 {
                break;
            }
            at += n;
        }
        if let Some(batch) = decoder.flush().map_err(|e| bad(&self.path, e))? {
            if batch.num_rows() != self.rows {
                return Err(bad(&self.path, format!("{} actions decoded as {} rows", self.rows, batch.num_rows())));
            }
            self.writer.write(&batch).await.map_err(|e| bad(&self.path, e))?;
        }
        self.lines.clear();
        self.rows = 0;
        Ok(())
    }

    /// Completes the file (it appears at its name now); what it holds.
    async fn finish(mut self) -> Result<Written, DeltaError> {
        self.flush().await?;
        if !self.has_protocol || !self.has_metadata {
            return Err(bad(&self.path, "the log has no protocol or no metadata up to this version"));
        }
        self.writer.finish().await.map_err(|e| bad(&self.path, e))?;
        self.written.bytes = self.writer.bytes_written() as u64;
        Ok(self.written)
    }
}

/// The checkpoint's schema: every field nullable, as Spark writes it.
fn schema(stats_json: bool) -> SchemaRef {
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    let long = |n: &str| Field::new(n, DataType::Int64, true);
    let int = |n: &str| Field::new(n, DataType::Int32, true);
    let bool = |n: &str| Field::new(n, DataType::Boolean, true);
    let map = |n: &str| {
        let entries = Field::new(
            "key_value",
            DataType::Struct(vec![Field::new("key", DataType::Utf8, false), s("value")].into()),
            false,
        );
        Field::new(n, DataType::Map(Arc::new(entries), false), true)
    };
    let list = |n: &str| Field::new(n, DataType::List(Arc::new(s("element"))), true);
    let strukt = |n: &str, fields: Vec<Field>| Field::new(n, DataType::Struct(Fields::from(fields)), true);
    let vector = || {
        strukt(
            "deletionVector",
            vec![
                s("storageType"),
                s("pathOrInlineDv"),
                int("offset"),
                int("sizeInBytes"),
                long("cardinality"),
                long("maxRowIndex"),
            ],
        )
    };
    let mut add = vec![s("path"), map("partitionValues"), long("size"), long("modificationTime"), bool("dataChange")];
    if stats_json {
        add.push(s("stats"));
    }
    add.push(map("tags"));
    add.push(vector());
    Arc::new(Schema::new(vec![
        strukt("txn", vec![s("appId"), long("version"), long("lastUpdated")]),
        strukt("add", add),
        strukt(
            "remove",
            vec![
                s("path"),
                long("deletionTimestamp"),
                bool("dataChange"),
                bool("extendedFileMetadata"),
                map("partitionValues"),
                long("size"),
                vector(),
            ],
        ),
        strukt(
            "metaData",
            vec![
                s("id"),
                s("name"),
                s("description"),
                strukt("format", vec![s("provider"), map("options")]),
                s("schemaString"),
                list("partitionColumns"),
                map("configuration"),
                long("createdTime"),
            ],
        ),
        strukt(
            "protocol",
            vec![int("minReaderVersion"), int("minWriterVersion"), list("readerFeatures"), list("writerFeatures")],
        ),
    ]))
}

pub mod read;
#[cfg(test)]
mod tests;
