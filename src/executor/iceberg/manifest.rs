//! A snapshot's manifest list and manifests: read into entries (their
//! inherited snapshot ids and sequence numbers made explicit), and the
//! files a `replace` commit writes: a manifest's copy with some of its
//! files marked deleted, a manifest of new files, and a manifest list.
//!
//! Invariants:
//! - A copy keeps every live entry of the manifest it replaces, unchanged
//!   but for its status (`EXISTING`, or `DELETED` for an input) and its
//!   now explicit sequence numbers; entries deleted earlier are dropped (as
//!   Java does). Its schema and header metadata are the original's.
//! - A new file's entry is made from one of its inputs' entries (the same
//!   spec, partition and manifest schema), every field compactd does not
//!   set emptied: nothing of an input (its metrics, its sort order id)
//!   leaks into an output.
//! - Counts, `min_sequence_number` and partition summaries of a manifest
//!   are computed from the entries written, as Java's `ManifestWriter`
//!   computes them.

use std::collections::{BTreeMap, HashSet};

use apache_avro::schema::RecordSchema;
use apache_avro::types::Value;
use store::Store;

use super::avro::{self, AvroFile};
use super::metrics::{min_be_bytes, FileMetrics};
use super::table::Table;
use super::IcebergError;

/// Entry statuses.
pub const EXISTING: i32 = 0;
pub const ADDED: i32 = 1;
pub const DELETED: i32 = 2;

/// Manifest-list field ids.
mod list_id {
    pub const PATH: i64 = 500;
    pub const LENGTH: i64 = 501;
    pub const SPEC_ID: i64 = 502;
    pub const ADDED_SNAPSHOT: i64 = 503;
    pub const ADDED_FILES: i64 = 504;
    pub const EXISTING_FILES: i64 = 505;
    pub const DELETED_FILES: i64 = 506;
    pub const PARTITIONS: i64 = 507;
    pub const ADDED_ROWS: i64 = 512;
    pub const EXISTING_ROWS: i64 = 513;
    pub const DELETED_ROWS: i64 = 514;
    pub const SEQUENCE: i64 = 515;
    pub const MIN_SEQUENCE: i64 = 516;
    pub const CONTENT: i64 = 517;
    pub const KEY_METADATA: i64 = 519;
    pub const FIRST_ROW_ID: i64 = 520;
}

/// Manifest-entry and data-file field ids.
mod entry_id {
    pub const STATUS: i64 = 0;
    pub const SNAPSHOT: i64 = 1;
    pub const DATA_FILE: i64 = 2;
    pub const SEQUENCE: i64 = 3;
    pub const FILE_SEQUENCE: i64 = 4;
    pub const FILE_PATH: i64 = 100;
    pub const FILE_FORMAT: i64 = 101;
    pub const PARTITION: i64 = 102;
    pub const RECORD_COUNT: i64 = 103;
    pub const FILE_SIZE: i64 = 104;
    pub const BLOCK_SIZE: i64 = 105;
    pub const COLUMN_SIZES: i64 = 108;
    pub const VALUE_COUNTS: i64 = 109;
    pub const NULL_COUNTS: i64 = 110;
    pub const LOWER_BOUNDS: i64 = 125;
    pub const UPPER_BOUNDS: i64 = 128;
    pub const KEY_METADATA: i64 = 131;
    pub const SPLIT_OFFSETS: i64 = 132;
    pub const CONTENT: i64 = 134;
    pub const EQUALITY_IDS: i64 = 135;
    pub const FIRST_ROW_ID: i64 = 142;
    pub const REFERENCED_DATA_FILE: i64 = 143;
    pub const CONTENT_OFFSET: i64 = 144;
    pub const CONTENT_SIZE: i64 = 145;
    /// The fields a new file's entry sets (all others are emptied).
    pub const SET: [i64; 13] = [
        CONTENT,
        FILE_PATH,
        FILE_FORMAT,
        PARTITION,
        RECORD_COUNT,
        FILE_SIZE,
        BLOCK_SIZE,
        COLUMN_SIZES,
        VALUE_COUNTS,
        NULL_COUNTS,
        LOWER_BOUNDS,
        UPPER_BOUNDS,
        SPLIT_OFFSETS,
    ];
}

/// One manifest of a manifest list.
#[derive(Debug, Clone)]
pub struct ManifestRef {
    pub path: String,
    pub spec_id: i32,
    /// 0: data files, 1: delete files.
    pub content: i32,
    pub sequence_number: i64,
    pub added_snapshot_id: i64,
    /// v3: the first row id of its files that inherit one.
    pub first_row_id: Option<i64>,
    /// Its record in the list, as read.
    pub record: Value,
}

/// A manifest list as read.
#[derive(Debug, Clone)]
pub struct ManifestList {
    pub file: AvroFile,
    pub manifests: Vec<ManifestRef>,
}

/// One live or deleted file of a manifest.
#[derive(Debug, Clone)]
pub struct Entry {
    pub status: i32,
    pub snapshot_id: i64,
    /// The data and file sequence numbers (inherited ones made explicit).
    pub sequence_number: i64,
    pub file_sequence_number: i64,
    pub file_path: String,
    /// 0: data, 1: position deletes, 2: equality deletes.
    pub content: i32,
    pub file_format: String,
    pub record_count: i64,
    pub file_size: i64,
    /// The partition tuple, as the manifest holds it.
    pub partition: Value,
    pub spec_id: i32,
    /// An equality delete's columns (field ids).
    pub equality_ids: Vec<i32>,
    /// The one data file a position delete file applies to, if it says.
    pub referenced_data_file: Option<String>,
    /// A deletion vector's blob in its Puffin file: offset and length.
    pub content_offset: Option<i64>,
    pub content_size: Option<i64>,
    /// v3: the row id of the data file's first row, stored or inherited
    /// from its manifest as Java's `ManifestReader` assigns it (live
    /// entries in order, each advancing by its record count).
    pub first_row_id: Option<i64>,
    /// The whole entry, as read.
    pub record: Value,
}

impl Entry {
    pub fn is_live(&self) -> bool {
        self.status != DELETED
    }

    /// Whether this is a v3 deletion vector (a blob of a Puffin file).
    pub fn is_dv(&self) -> bool {
        self.content == 1 && self.file_format.eq_ignore_ascii_case("puffin")
    }

    /// What names this entry among a snapshot's files: its path, and for a
    /// deletion vector also the data file it applies to (one Puffin file
    /// holds the vectors of many data files).
    pub fn key(&self) -> String {
        match (&self.referenced_data_file, self.is_dv()) {
            (Some(r), true) => format!("{}#{r}", self.file_path),
            _ => self.file_path.clone(),
        }
    }
}

/// A manifest as read.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub file: AvroFile,
    pub entries: Vec<Entry>,
}

impl Manifest {
    pub fn entry_schema(&self) -> Result<&RecordSchema, String> {
        avro::record_schema(&self.file.schema).ok_or_else(|| "a manifest whose schema is not a record".to_string())
    }
}

/// The record schema of a field holding a record (`data_file`, a partition).
pub fn sub_schema(schema: &RecordSchema, id: i64) -> Result<&RecordSchema, String> {
    let f = avro::field_by_id(schema, id).ok_or_else(|| format!("no field id {id} in the manifest schema"))?;
    avro::record_schema(&f.schema).ok_or_else(|| format!("field {} is not a record", f.name))
}

async fn read_avro(store: &Store, table: &Table, path: &str) -> Result<AvroFile, IcebergError> {
    let broken = |problem: String| IcebergError::Table { table: table.dir.clone(), problem };
    let sp = table.store_path(path).map_err(broken)?;
    let bytes = store.read(&sp).await?.ok_or_else(|| broken(format!("{path} is missing")))?;
    avro::read(&bytes).map_err(|e| broken(format!("{path}: {e}")))
}

/// Reads a snapshot's manifest list.
pub async fn read_list(store: &Store, table: &Table, path: &str) -> Result<ManifestList, IcebergError> {
    let file = read_avro(store, table, path).await?;
    let broken = |problem: String| IcebergError::Table { table: table.dir.clone(), problem };
    let rs = avro::record_schema(&file.schema).ok_or_else(|| broken(format!("{path}: not a manifest list")))?;
    let mut manifests = vec![];
    for r in &file.records {
        let path = avro::get(rs, r, list_id::PATH).and_then(avro::as_str);
        let spec = avro::get(rs, r, list_id::SPEC_ID).and_then(avro::as_i64);
        let (Some(p), Some(spec)) = (path, spec) else {
            return Err(broken(format!("{path:?}: a manifest list entry without a path or spec id")));
        };
        if avro::get(rs, r, list_id::KEY_METADATA).is_some() {
            return Err(broken(format!("manifest {p} is encrypted (key_metadata): compactd does not read it")));
        }
        manifests.push(ManifestRef {
            path: p.to_string(),
            spec_id: spec as i32,
            content: avro::get(rs, r, list_id::CONTENT).and_then(avro::as_i64).unwrap_or(0) as i32,
            sequence_number: avro::get(rs, r, list_id::SEQUENCE).and_then(avro::as_i64).unwrap_or(0),
            added_snapshot_id: avro::get(rs, r, list_id::ADDED_SNAPSHOT).and_then(avro::as_i64).unwrap_or(0),
            first_row_id: avro::get(rs, r, list_id::FIRST_ROW_ID).and_then(avro::as_i64),
            record: r.clone(),
        });
    }
    Ok(ManifestList { file, manifests })
}

/// Refuses a current manifest list written before the table's upgrade: a
/// commit writes the next list in its schema, which cannot hold what the
/// table's version asks (sequence numbers, row ids).
pub fn check_list_version(table: &Table, list: &ManifestList) -> Result<(), IcebergError> {
    let v = table.format_version();
    let rs = avro::record_schema(&list.file.schema);
    let lacks = |id| rs.is_none_or(|rs| avro::field_by_id(rs, id).is_none());
    if (v >= 2 && lacks(list_id::SEQUENCE)) || (v >= 3 && lacks(list_id::FIRST_ROW_ID)) {
        return Err(IcebergError::Table {
            table: table.dir.clone(),
            problem: format!(
                "the current manifest list was written before the table's upgrade to format version {v}: compactd \
                 commits once another writer has (any append, or Java's rewrite_manifests)"
            ),
        });
    }
    Ok(())
}

/// Reads a manifest, its inherited fields made explicit from `m`.
pub async fn read_manifest(store: &Store, table: &Table, m: &ManifestRef) -> Result<Manifest, IcebergError> {
    let mut file = read_avro(store, table, &m.path).await?;
    let broken =
        |problem: String| IcebergError::Table { table: table.dir.clone(), problem: format!("{}: {problem}", m.path) };
    let v2 = table.format_version() >= 2;
    if v2 {
        // Maybe written before the table's upgrade.
        super::upgraded::to_version(&mut file, table.format_version()).map_err(broken)?;
    }
    let rs = avro::record_schema(&file.schema).ok_or_else(|| broken("not a manifest".into()))?;
    let df = sub_schema(rs, entry_id::DATA_FILE).map_err(broken)?;
    let mut entries = vec![];
    let mut next_row_id = m.first_row_id;
    for r in &file.records {
        let status = avro::get(rs, r, entry_id::STATUS).and_then(avro::as_i64).unwrap_or(-1) as i32;
        let d = avro::get(rs, r, entry_id::DATA_FILE).ok_or_else(|| broken("an entry without data_file".into()))?;
        let path = avro::get(df, d, entry_id::FILE_PATH).and_then(avro::as_str);
        let Some(path) = path else { return Err(broken("an entry without file_path".into())) };
        if avro::get(df, d, entry_id::KEY_METADATA).is_some() {
            return Err(broken(format!("{path} is encrypted (key_metadata)")));
        }
        // Inherited: an entry's snapshot id from its manifest; sequence
        // numbers of an added entry from its manifest (v1: all 0).
        let inherit = |id: i64| -> i64 {
            match avro::get(rs, r, id).and_then(avro::as_i64) {
                Some(n) => n,
                None if v2 && status == ADDED => m.sequence_number,
                None => 0,
            }
        };
        entries.push(Entry {
            status,
            snapshot_id: avro::get(rs, r, entry_id::SNAPSHOT).and_then(avro::as_i64).unwrap_or(m.added_snapshot_id),
            sequence_number: inherit(entry_id::SEQUENCE),
            file_sequence_number: inherit(entry_id::FILE_SEQUENCE),
            file_path: path.to_string(),
            content: avro::get(df, d, entry_id::CONTENT).and_then(avro::as_i64).unwrap_or(0) as i32,
            file_format: avro::get(df, d, entry_id::FILE_FORMAT).and_then(avro::as_str).unwrap_or("").to_string(),
            record_count: avro::get(df, d, entry_id::RECORD_COUNT).and_then(avro::as_i64).unwrap_or(0),
            file_size: avro::get(df, d, entry_id::FILE_SIZE).and_then(avro::as_i64).unwrap_or(0),
            partition: avro::get(df, d, entry_id::PARTITION).cloned().unwrap_or(Value::Record(vec![])),
            spec_id: m.spec_id,
            equality_ids: match avro::get(df, d, entry_id::EQUALITY_IDS) {
                Some(Value::Array(ids)) => ids.iter().filter_map(avro::as_i64).map(|i| i as i32).collect(),
                _ => vec![],
            },
            referenced_data_file: avro::get(df, d, entry_id::REFERENCED_DATA_FILE)
                .and_then(avro::as_str)
                .map(String::from),
            content_offset: avro::get(df, d, entry_id::CONTENT_OFFSET).and_then(avro::as_i64),
            content_size: avro::get(df, d, entry_id::CONTENT_SIZE).and_then(avro::as_i64),
            first_row_id: None,
            record: r.clone(),
        });
        let e = entries.last_mut().expect("pushed");
        if e.content == 0 {
            e.first_row_id = match (avro::get(df, d, entry_id::FIRST_ROW_ID).and_then(avro::as_i64), next_row_id) {
                (Some(stored), _) => Some(stored),
                (None, Some(next)) if status != DELETED => {
                    next_row_id = Some(next + e.record_count);
                    Some(next)
                }
                _ => None,
            };
        }
    }
    Ok(Manifest { file, entries })
}

/// A partition tuple's value as unit names show it: numbers as they are,
/// strings quoted with `%`-escapes, bytes in hexadecimal, `null`.
fn show_value(v: &Value) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match avro::unwrap(v) {
        Value::Null => "null".into(),
        Value::Boolean(b) => b.to_string(),
        Value::String(s) => {
            let mut out = String::from("\"");
            for b in s.bytes() {
                if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b' ' | b':') {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            out.push('"');
            out
        }
        Value::Bytes(b) | Value::Fixed(_, b) => format!("0x{}", hex(b)),
        Value::Decimal(d) => format!("0x{}", hex(&Vec::<u8>::try_from(d).unwrap_or_default())),
        Value::Uuid(u) => u.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Double(f) => f.to_string(),
        other => avro::as_i64(other).map(|n| n.to_string()).unwrap_or_else(|| format!("{other:?}")),
    }
}

/// FNV-1a, 64 bits.
pub fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The unit name of a partition: `spec<id>` and each `field=value`
/// (`spec0,day=19000,region="eu"`); a long one is cut and keeps a hash of
/// the whole.
pub fn unit_key(spec_id: i32, partition: &Value) -> String {
    let mut key = format!("spec{spec_id}");
    if let Value::Record(fields) = avro::unwrap(partition) {
        for (name, v) in fields {
            key.push_str(&format!(",{name}={}", show_value(v)));
        }
    }
    if key.len() > 200 {
        let mut cut = 180;
        while !key.is_char_boundary(cut) {
            cut -= 1;
        }
        key = format!("{}~{:016x}", &key[..cut], fnv64(&key));
    }
    key
}

/// A partition value's order key and binary form (Appendix D), when its
/// type has a sure order (no bounds for floats, UUIDs and unknown types).
fn bound_of(v: &Value) -> Option<(BoundKey, Vec<u8>)> {
    Some(match avro::unwrap(v) {
        Value::Int(n) | Value::Date(n) => (BoundKey::Int(*n as i128), n.to_le_bytes().to_vec()),
        Value::Long(n) | Value::TimestampMicros(n) | Value::LocalTimestampMicros(n) | Value::TimeMicros(n) => {
            (BoundKey::Int(*n as i128), n.to_le_bytes().to_vec())
        }
        Value::Boolean(b) => (BoundKey::Int(*b as i128), vec![*b as u8]),
        Value::String(s) => (BoundKey::Bytes(s.as_bytes().to_vec()), s.as_bytes().to_vec()),
        Value::Bytes(b) | Value::Fixed(_, b) => (BoundKey::Bytes(b.clone()), b.clone()),
        Value::Decimal(d) => {
            let b = Vec::<u8>::try_from(d).ok()?;
            if b.is_empty() || b.len() > 16 {
                return None;
            }
            let mut n: i128 = if b[0] & 0x80 != 0 { -1 } else { 0 };
            for x in &b {
                n = (n << 8) | *x as i128;
            }
            (BoundKey::Int(n), min_be_bytes(n))
        }
        _ => return None,
    })
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum BoundKey {
    Int(i128),
    Bytes(Vec<u8>),
}

/// One partition field's summary over a manifest's entries.
#[derive(Debug, Default, Clone)]
struct FieldSummary {
    contains_null: bool,
    contains_nan: bool,
    /// Some value has no sure order: no bounds.
    unordered: bool,
    lower: Option<(BoundKey, Vec<u8>)>,
    upper: Option<(BoundKey, Vec<u8>)>,
}

fn summarize(partitions: &[&Value]) -> Vec<FieldSummary> {
    let mut out: Vec<FieldSummary> = vec![];
    for p in partitions {
        let Value::Record(fields) = avro::unwrap(p) else { continue };
        if out.len() < fields.len() {
            out.resize(fields.len(), FieldSummary::default());
        }
        for (i, (_, v)) in fields.iter().enumerate() {
            let s = &mut out[i];
            match avro::unwrap(v) {
                Value::Null => s.contains_null = true,
                Value::Float(f) if f.is_nan() => s.contains_nan = true,
                Value::Double(f) if f.is_nan() => s.contains_nan = true,
                v => match bound_of(v) {
                    Some(b) => {
                        if s.lower.as_ref().is_none_or(|l| b.0 < l.0) {
                            s.lower = Some(b.clone());
                        }
                        if s.upper.as_ref().is_none_or(|u| b.0 > u.0) {
                            s.upper = Some(b);
                        }
                    }
                    None => s.unordered = true,
                },
            }
        }
    }
    out
}

/// The `partitions` value of a manifest-list record.
fn summaries_value(list: &RecordSchema, partitions: &[&Value]) -> Result<Value, String> {
    let f = avro::field_by_id(list, list_id::PARTITIONS).ok_or("the manifest list has no partitions field")?;
    let item = match avro::strip_null(&f.schema) {
        apache_avro::Schema::Array(a) => avro::record_schema(&a.items).ok_or("partition summaries are not records")?,
        _ => return Err("partitions is not an array".into()),
    };
    let mut out = vec![];
    for s in summarize(partitions) {
        let mut r = Value::Record(vec![]);
        avro::set(item, &mut r, 509, Value::Boolean(s.contains_null))?;
        avro::set_if_present(item, &mut r, 518, Value::Boolean(s.contains_nan))?;
        let (lo, hi) = if s.unordered { (None, None) } else { (s.lower, s.upper) };
        avro::set(item, &mut r, 510, lo.map(|b| Value::Bytes(b.1)).unwrap_or(Value::Null))?;
        avro::set(item, &mut r, 511, hi.map(|b| Value::Bytes(b.1)).unwrap_or(Value::Null))?;
        out.push(r);
    }
    Ok(Value::Array(out))
}

/// A manifest written for a commit, and its record for the manifest list.
#[derive(Debug, Clone)]
pub struct Written {
    pub bytes: Vec<u8>,
    /// Store path.
    pub path: String,
    pub uri: String,
    pub record: Value,
}

/// What a new snapshot writes into its manifests.
pub struct Commit<'a> {
    pub table: &'a Table,
    pub snapshot_id: i64,
    pub sequence_number: i64,
    /// The manifest list the new one derives from (schema, metadata).
    pub list: &'a ManifestList,
    pub sync: [u8; 16],
}

impl Commit<'_> {
    fn list_schema(&self) -> Result<&RecordSchema, String> {
        avro::record_schema(&self.list.file.schema).ok_or_else(|| "the manifest list's schema is not a record".into())
    }

    /// A manifest holding `entries` (full entry records in `m`'s schema)
    /// at `path`, and its list record derived from `template`.
    fn manifest(
        &self,
        m: &Manifest,
        entries: Vec<(i32, i64, i64, Value)>,
        template: &Value,
        path: &str,
    ) -> Result<Written, String> {
        let v2 = self.table.format_version() >= 2;
        let (mut counts, mut rows) = ([0i64; 3], [0i64; 3]);
        let mut min_seq: Option<i64> = None;
        let mut parts = vec![];
        let rs = m.entry_schema()?;
        let df = sub_schema(rs, entry_id::DATA_FILE)?;
        for (status, seq, records, r) in entries.iter() {
            let i = match *status {
                ADDED => 0,
                EXISTING => 1,
                _ => 2,
            };
            counts[i] += 1;
            rows[i] += records;
            if *status != DELETED {
                min_seq = Some(min_seq.map_or(*seq, |m| m.min(*seq)));
            }
            parts.push(
                avro::get(rs, r, entry_id::DATA_FILE).and_then(|d| avro::get(df, d, entry_id::PARTITION)).cloned(),
            );
        }
        let records: Vec<Value> = entries.into_iter().map(|e| e.3).collect();
        let bytes = avro::write(&m.file.schema_json, &m.file.schema, &m.file.meta, &records, self.sync)?;
        let uri = self.table.file_uri(path);
        let ls = self.list_schema()?;
        let mut rec = template.clone();
        avro::set(ls, &mut rec, list_id::PATH, Value::String(uri.clone()))?;
        avro::set(ls, &mut rec, list_id::LENGTH, Value::Long(bytes.len() as i64))?;
        avro::set(ls, &mut rec, list_id::ADDED_SNAPSHOT, Value::Long(self.snapshot_id))?;
        for (id, v) in [
            (list_id::ADDED_FILES, counts[0]),
            (list_id::EXISTING_FILES, counts[1]),
            (list_id::DELETED_FILES, counts[2]),
        ] {
            // v1 lists hold these as ints, v2 as ints too; some as longs.
            let field = avro::field_by_id(ls, id).ok_or_else(|| format!("the manifest list has no field id {id}"))?;
            let value = match avro::strip_null(&field.schema) {
                apache_avro::Schema::Long => Value::Long(v),
                _ => Value::Int(v as i32),
            };
            avro::set(ls, &mut rec, id, value)?;
        }
        for (id, v) in
            [(list_id::ADDED_ROWS, rows[0]), (list_id::EXISTING_ROWS, rows[1]), (list_id::DELETED_ROWS, rows[2])]
        {
            avro::set_if_present(ls, &mut rec, id, Value::Long(v))?;
        }
        let present: Vec<&Value> = parts.iter().flatten().collect();
        avro::set_if_present(ls, &mut rec, list_id::PARTITIONS, summaries_value(ls, &present)?)?;
        if v2 {
            avro::set(ls, &mut rec, list_id::SEQUENCE, Value::Long(self.sequence_number))?;
            avro::set(ls, &mut rec, list_id::MIN_SEQUENCE, Value::Long(min_seq.unwrap_or(self.sequence_number)))?;
        }
        avro::set_if_present(ls, &mut rec, list_id::KEY_METADATA, Value::Null)?;
        Ok(Written { bytes, path: path.to_string(), uri, record: rec })
    }

    /// v3 row lineage, as Java's `ManifestListWriter` assigns it: each data
    /// manifest this commit wrote (`new`) takes the next range of row ids,
    /// as long as its existing and added rows; the others keep theirs.
    /// Returns the next row id after them.
    pub fn assign_row_ids(&self, records: &mut [Value], new: &[bool], mut next: i64) -> Result<i64, String> {
        let ls = self.list_schema()?;
        for (r, new) in records.iter_mut().zip(new) {
            let content = avro::get(ls, r, list_id::CONTENT).and_then(avro::as_i64).unwrap_or(0);
            if !*new || content != 0 {
                continue;
            }
            let rows = |id| avro::get(ls, r, id).and_then(avro::as_i64).unwrap_or(0);
            let count = rows(list_id::EXISTING_ROWS) + rows(list_id::ADDED_ROWS);
            avro::set(ls, r, list_id::FIRST_ROW_ID, Value::Long(next))?;
            next += count;
        }
        Ok(next)
    }

    /// `m`'s live entries, those whose path is in `deleted` marked deleted
    /// by this snapshot, the others existing; written at `path`.
    pub fn rewrite(
        &self,
        m: &Manifest,
        mref: &ManifestRef,
        deleted: &HashSet<String>,
        path: &str,
    ) -> Result<Written, String> {
        let rs = m.entry_schema()?;
        let mut out = vec![];
        for e in m.entries.iter().filter(|e| e.is_live()) {
            let mut r = e.record.clone();
            let status = if deleted.contains(&e.key()) { DELETED } else { EXISTING };
            if let Some(id) = e.first_row_id {
                // The inherited id is written out: this manifest gets a new
                // range of its own from the manifest list.
                set_in_data_file(rs, &mut r, entry_id::FIRST_ROW_ID, Value::Long(id))?;
            }
            avro::set(rs, &mut r, entry_id::STATUS, Value::Int(status))?;
            let snapshot = if status == DELETED { self.snapshot_id } else { e.snapshot_id };
            avro::set(rs, &mut r, entry_id::SNAPSHOT, Value::Long(snapshot))?;
            avro::set_if_present(rs, &mut r, entry_id::SEQUENCE, Value::Long(e.sequence_number))?;
            avro::set_if_present(rs, &mut r, entry_id::FILE_SEQUENCE, Value::Long(e.file_sequence_number))?;
            out.push((status, e.sequence_number, e.record_count, r));
        }
        self.manifest(m, out, &mref.record, path)
    }

    /// A manifest of new files (`outputs`: their URIs, sizes and metrics,
    /// and the data sequence number each keeps), their entries made from
    /// `template` (an input's entry of `m`, which holds its partition).
    pub fn added(
        &self,
        m: &Manifest,
        mref: &ManifestRef,
        outputs: &[(String, u64, &FileMetrics, i64, &Entry)],
        path: &str,
    ) -> Result<Written, String> {
        let rs = m.entry_schema()?;
        let df = sub_schema(rs, entry_id::DATA_FILE)?;
        let mut out = vec![];
        for (uri, size, metrics, seq, template) in outputs {
            let mut d = Value::Record(vec![]);
            for f in &df.fields {
                let id = avro::field_id(f).unwrap_or(-1);
                if id == entry_id::PARTITION {
                    d = with(&d, &f.name, avro::fit(&f.schema, template.partition.clone())?);
                } else if !entry_id::SET.contains(&id) {
                    // Everything else is the input's business: emptied.
                    if !matches!(f.schema, apache_avro::Schema::Union(_)) {
                        return Err(format!(
                            "data_file field {} (id {id}) is required and compactd cannot fill it",
                            f.name
                        ));
                    }
                    d = with(&d, &f.name, avro::fit(&f.schema, Value::Null)?);
                }
            }
            avro::set_if_present(df, &mut d, entry_id::CONTENT, Value::Int(0))?;
            avro::set(df, &mut d, entry_id::FILE_PATH, Value::String(uri.clone()))?;
            avro::set(df, &mut d, entry_id::FILE_FORMAT, Value::String("PARQUET".into()))?;
            avro::set(df, &mut d, entry_id::RECORD_COUNT, Value::Long(metrics.record_count as i64))?;
            avro::set(df, &mut d, entry_id::FILE_SIZE, Value::Long(*size as i64))?;
            // v1's deprecated block size: Java writes 64 MiB.
            avro::set_if_present(df, &mut d, entry_id::BLOCK_SIZE, Value::Long(64 << 20))?;
            let longs = |m: &BTreeMap<i32, i64>| m.iter().map(|(k, v)| (*k, Value::Long(*v))).collect();
            let bytes = |m: &BTreeMap<i32, Vec<u8>>| m.iter().map(|(k, v)| (*k, Value::Bytes(v.clone()))).collect();
            for (id, map) in [
                (entry_id::COLUMN_SIZES, longs(&metrics.column_sizes)),
                (entry_id::VALUE_COUNTS, longs(&metrics.value_counts)),
                (entry_id::NULL_COUNTS, longs(&metrics.null_value_counts)),
                (entry_id::LOWER_BOUNDS, bytes(&metrics.lower_bounds)),
                (entry_id::UPPER_BOUNDS, bytes(&metrics.upper_bounds)),
            ] {
                if avro::field_by_id(df, id).is_some() {
                    let v = avro::int_map(df, id, &map)?;
                    avro::set(df, &mut d, id, v)?;
                }
            }
            if avro::field_by_id(df, entry_id::SPLIT_OFFSETS).is_some() {
                let offsets = Value::Array(metrics.split_offsets.iter().map(|o| Value::Long(*o)).collect());
                avro::set(df, &mut d, entry_id::SPLIT_OFFSETS, offsets)?;
            }
            let mut r = Value::Record(vec![]);
            avro::set(rs, &mut r, entry_id::STATUS, Value::Int(ADDED))?;
            avro::set(rs, &mut r, entry_id::SNAPSHOT, Value::Long(self.snapshot_id))?;
            // The data sequence number of the snapshot the unit read (as
            // Spark's rewrite keeps it): equality deletes committed since
            // still apply to the rewritten rows. The file sequence number
            // is this snapshot's, inherited.
            avro::set_if_present(rs, &mut r, entry_id::SEQUENCE, Value::Long(*seq))?;
            avro::set_if_present(rs, &mut r, entry_id::FILE_SEQUENCE, Value::Null)?;
            avro::set(rs, &mut r, entry_id::DATA_FILE, d)?;
            out.push((ADDED, *seq, metrics.record_count as i64, r));
        }
        self.manifest(m, out, &mref.record, path)
    }

    /// The manifest list of the new snapshot: `records` in order, with the
    /// current list's schema and its metadata, this snapshot's ids.
    pub fn list(&self, parent: i64, records: &[Value]) -> Result<Vec<u8>, String> {
        let mut meta = vec![];
        let mut seen = HashSet::new();
        for (k, v) in &self.list.file.meta {
            let v = match k.as_str() {
                "snapshot-id" => self.snapshot_id.to_string().into_bytes(),
                "parent-snapshot-id" => parent.to_string().into_bytes(),
                "sequence-number" => self.sequence_number.to_string().into_bytes(),
                _ => v.clone(),
            };
            seen.insert(k.clone());
            meta.push((k.clone(), v));
        }
        for (k, v) in [("snapshot-id", self.snapshot_id.to_string()), ("parent-snapshot-id", parent.to_string())] {
            if !seen.contains(k) {
                meta.push((k.to_string(), v.into_bytes()));
            }
        }
        avro::write(&self.list.file.schema_json, &self.list.file.schema, &meta, records, self.sync)
    }
}

/// `record` with its field `name` set to `value`.
/// Sets field `id` of an entry's `data_file`, if its schema has it.
fn set_in_data_file(rs: &RecordSchema, entry: &mut Value, id: i64, value: Value) -> Result<(), String> {
    let df = sub_schema(rs, entry_id::DATA_FILE)?;
    if avro::field_by_id(df, id).is_none() {
        return Ok(());
    }
    let name = &avro::field_by_id(rs, entry_id::DATA_FILE).ok_or("an entry schema without data_file")?.name;
    let Value::Record(fields) = entry else { return Err("an entry that is not a record".into()) };
    let slot = fields.iter_mut().find(|(n, _)| n == name).ok_or("an entry without data_file")?;
    avro::set(df, &mut slot.1, id, value)
}

fn with(record: &Value, name: &str, value: Value) -> Value {
    let Value::Record(fields) = record else { return Value::Record(vec![(name.to_string(), value)]) };
    let mut fields = fields.clone();
    match fields.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value,
        None => fields.push((name.to_string(), value)),
    }
    Value::Record(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_keys_show_the_partition_and_stay_names() {
        let p = Value::Record(vec![
            ("day".into(), Value::Union(1, Box::new(Value::Date(19000)))),
            ("region".into(), Value::Union(1, Box::new(Value::String("eu/west 1".into())))),
            ("b".into(), Value::Union(0, Box::new(Value::Null))),
        ]);
        assert_eq!(unit_key(0, &p), "spec0,day=19000,region=\"eu%2Fwest 1\",b=null");
        assert_eq!(unit_key(3, &Value::Record(vec![])), "spec3");
        let long = Value::Record(vec![("s".into(), Value::String("x".repeat(400)))]);
        let k = unit_key(0, &long);
        assert!(k.len() < 210 && !k.contains('/'), "{k}");
    }

    #[test]
    fn summaries_bound_the_values_and_note_nulls() {
        let p = |v: Value| Value::Record(vec![("x".into(), v)]);
        let vals = [p(Value::Int(5)), p(Value::Int(-2)), p(Value::Null)];
        let refs: Vec<&Value> = vals.iter().collect();
        let s = summarize(&refs);
        assert!(s[0].contains_null && !s[0].contains_nan);
        assert_eq!(s[0].lower.as_ref().unwrap().1, (-2i32).to_le_bytes().to_vec());
        assert_eq!(s[0].upper.as_ref().unwrap().1, 5i32.to_le_bytes().to_vec());
    }
}
