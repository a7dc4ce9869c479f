//! The column metrics of a data file compactd wrote, from its Parquet
//! footer, as Iceberg's own writer derives them from a footer
//! (`ParquetUtil.fileMetrics`) under the table's metrics settings
//! (`MetricsConfig.forTable`): `column_sizes`, `value_counts`,
//! `null_value_counts`, `lower_bounds` and `upper_bounds` in the spec's
//! binary form (Appendix D), and `split_offsets`.
//!
//! Invariants:
//! - A metric compactd is not sure of is omitted, never guessed: a wrong
//!   bound makes scans skip a file that holds matching rows. So: no
//!   counts or bounds for columns inside lists and maps, none at all for a
//!   column one of whose column chunks has no statistics, no bounds from
//!   statistics the writer cut short (inexact), no bounds for a float or
//!   double column a chunk of which has a NaN bound (all its values NaN),
//!   INT96,
//!   millisecond times and timestamps, unsigned integers and nanosecond
//!   timestamps, and no NaN counts (a footer does not hold them).
//! - Modes follow the table's properties: `write.metadata.metrics.default`,
//!   `write.metadata.metrics.column.<name>`, the first 100 columns only
//!   for wider tables (`write.metadata.metrics.max-inferred-column-defaults`)
//!   and at least `truncate(16)` for the columns the sort order keeps in
//!   order; `truncate(N)` cuts string and binary bounds (the upper one
//!   incremented, or omitted when it cannot be).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use parquet::basic::{ConvertedType, LogicalType, TimeUnit, Type as Physical};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// How much of a column's metrics are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    None,
    Counts,
    Truncate(usize),
    Full,
}

impl Mode {
    /// `none`, `counts`, `full`, `truncate(N)` (N > 0), any case.
    pub fn parse(s: &str) -> Option<Mode> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "none" => Some(Mode::None),
            "counts" => Some(Mode::Counts),
            "full" => Some(Mode::Full),
            _ => {
                let n = s.strip_prefix("truncate(")?.strip_suffix(')')?.trim().parse::<usize>().ok()?;
                (n > 0).then_some(Mode::Truncate(n))
            }
        }
    }
}

const DEFAULT_MODE: Mode = Mode::Truncate(16);
const MAX_INFERRED: usize = 100;

/// The table's metrics settings, by column name.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    default: Mode,
    columns: HashMap<String, Mode>,
    /// Field id -> the column's full name in the table schema.
    names: HashMap<i32, String>,
}

/// A field of the table schema, flattened: its id and full name.
#[derive(Debug, Clone)]
struct Field {
    id: i32,
    name: String,
}

/// The schema's fields as Java's `TypeUtil` visits them: `all` (every
/// field with its full name) and `projected` (`GetProjectedIds`: primitive
/// fields, and the element, key and value of lists and maps of
/// primitives).
fn flatten(fields: &[Json], prefix: &str, all: &mut Vec<Field>, projected: &mut Vec<i32>) {
    for f in fields {
        let (Some(id), Some(name)) = (f["id"].as_i64(), f["name"].as_str()) else { continue };
        let full = if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
        nested(id as i32, &full, &f["type"], all, projected);
    }
}

fn nested(id: i32, name: &str, ty: &Json, all: &mut Vec<Field>, projected: &mut Vec<i32>) {
    all.push(Field { id, name: name.to_string() });
    if ty.is_string() {
        projected.push(id);
        return;
    }
    match ty["type"].as_str() {
        Some("struct") => flatten(ty["fields"].as_array().map(Vec::as_slice).unwrap_or_default(), name, all, projected),
        Some("list") => {
            if let Some(eid) = ty["element-id"].as_i64() {
                let element = &ty["element"];
                if element.is_string() {
                    projected.push(eid as i32);
                    all.push(Field { id: eid as i32, name: format!("{name}.element") });
                } else {
                    nested(eid as i32, &format!("{name}.element"), element, all, projected);
                }
            }
        }
        Some("map") => {
            let (kid, vid) = (ty["key-id"].as_i64(), ty["value-id"].as_i64());
            if let (Some(kid), Some(vid)) = (kid, vid) {
                let (k, v) = (&ty["key"], &ty["value"]);
                if v.is_string() {
                    projected.extend([kid as i32, vid as i32]);
                }
                for (fid, t, n) in [(kid, k, "key"), (vid, v, "value")] {
                    if t.is_string() {
                        all.push(Field { id: fid as i32, name: format!("{name}.{n}") });
                    } else {
                        nested(fid as i32, &format!("{name}.{n}"), t, all, projected);
                    }
                }
            }
        }
        _ => {}
    }
}

/// `limitFieldIds`: the first `limit` metrics-eligible ids, a struct's own
/// primitive fields before those of its nested types.
fn limit_ids(fields: &[Json], limit: usize, out: &mut Vec<i32>) {
    for f in fields {
        if out.len() >= limit {
            return;
        }
        if f["type"].is_string() {
            if let Some(id) = f["id"].as_i64() {
                out.push(id as i32);
            }
        }
    }
    for f in fields {
        if out.len() >= limit {
            return;
        }
        limit_type(&f["type"], limit, out);
    }
}

fn limit_type(ty: &Json, limit: usize, out: &mut Vec<i32>) {
    match ty["type"].as_str() {
        Some("struct") => limit_ids(ty["fields"].as_array().map(Vec::as_slice).unwrap_or_default(), limit, out),
        Some("list") => {
            if out.len() < limit && ty["element"].is_string() {
                if let Some(id) = ty["element-id"].as_i64() {
                    out.push(id as i32);
                }
            }
            limit_type(&ty["element"], limit, out);
        }
        Some("map") => {
            for (k, id) in [("key", "key-id"), ("value", "value-id")] {
                if out.len() < limit && ty[k].is_string() {
                    if let Some(id) = ty[id].as_i64() {
                        out.push(id as i32);
                    }
                }
            }
            limit_type(&ty["key"], limit, out);
            limit_type(&ty["value"], limit, out);
        }
        _ => {}
    }
}

impl MetricsConfig {
    /// From the table's `properties`, current `schema` and default sort
    /// order (`sort_fields`: its fields, as the metadata holds them).
    pub fn new(properties: &BTreeMap<String, String>, schema: &Json, sort_fields: &[Json]) -> MetricsConfig {
        let fields = schema["fields"].as_array().map(Vec::as_slice).unwrap_or_default();
        let (mut all, mut projected) = (vec![], vec![]);
        flatten(fields, "", &mut all, &mut projected);
        let names: HashMap<i32, String> = all.iter().map(|f| (f.id, f.name.clone())).collect();
        let mut columns = HashMap::new();
        let max = properties
            .get("write.metadata.metrics.max-inferred-column-defaults")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .map(|n| n as usize)
            .unwrap_or(MAX_INFERRED);
        let default = match properties.get("write.metadata.metrics.default") {
            Some(m) => Mode::parse(m).unwrap_or(DEFAULT_MODE),
            None if projected.iter().collect::<BTreeSet<_>>().len() <= max => DEFAULT_MODE,
            None => {
                let mut limited = vec![];
                limit_ids(fields, max, &mut limited);
                for id in limited {
                    if let Some(n) = names.get(&id) {
                        columns.insert(n.clone(), DEFAULT_MODE);
                    }
                }
                Mode::None
            }
        };
        let sorted_default = match default {
            Mode::None | Mode::Counts => Mode::Truncate(16),
            m => m,
        };
        for f in sort_fields {
            let t = f["transform"].as_str().unwrap_or("");
            let keeps_order = matches!(t, "identity" | "year" | "month" | "day" | "hour") || t.starts_with("truncate[");
            if let (true, Some(name)) = (keeps_order, f["source-id"].as_i64().and_then(|id| names.get(&(id as i32)))) {
                columns.insert(name.clone(), sorted_default);
            }
        }
        for (k, v) in properties {
            if let Some(col) = k.strip_prefix("write.metadata.metrics.column.") {
                columns.insert(col.to_string(), Mode::parse(v).unwrap_or(default));
            }
        }
        MetricsConfig { default, columns, names }
    }

    /// The mode of the column with field id `id` (by the name the table
    /// schema gives it).
    pub fn mode(&self, id: i32) -> Mode {
        match self.names.get(&id) {
            Some(n) => self.columns.get(n).copied().unwrap_or(self.default),
            None => self.default,
        }
    }
}

/// A data file's metrics, as its manifest entry holds them (bounds in
/// the spec's binary form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMetrics {
    pub record_count: u64,
    pub column_sizes: BTreeMap<i32, i64>,
    pub value_counts: BTreeMap<i32, i64>,
    pub null_value_counts: BTreeMap<i32, i64>,
    #[serde(with = "hex_map")]
    pub lower_bounds: BTreeMap<i32, Vec<u8>>,
    #[serde(with = "hex_map")]
    pub upper_bounds: BTreeMap<i32, Vec<u8>>,
    pub split_offsets: Vec<i64>,
}

/// Bounds as hexadecimal text in a staged record.
mod hex_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<i32, Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        let hex: BTreeMap<i32, String> =
            m.iter().map(|(k, v)| (*k, v.iter().map(|b| format!("{b:02x}")).collect())).collect();
        hex.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<i32, Vec<u8>>, D::Error> {
        let hex = BTreeMap::<i32, String>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (k, v) in hex {
            let bytes = (0..v.len())
                .step_by(2)
                .map(|i| v.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| serde::de::Error::custom(format!("bound of field {k} is not hexadecimal")))?;
            out.insert(k, bytes);
        }
        Ok(out)
    }
}

/// The Iceberg type of a Parquet leaf column, for its bounds: how to read
/// and order its statistics, and whether it takes bounds at all.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Boolean,
    Int,
    Long,
    /// UTF-8 text: truncated by code points.
    String,
    /// Binary: truncated by bytes.
    Binary,
    /// Fixed-length bytes (and UUIDs): never truncated.
    Fixed,
    /// Decimal: stored as an int, a long or big-endian bytes.
    Decimal,
    /// IEEE 754 single and double precision.
    Float,
    Double,
    /// Counts only.
    NoBounds,
}

fn kind_of(descr: &parquet::schema::types::ColumnDescriptor) -> Kind {
    let physical = descr.physical_type();
    if let Some(lt) = descr.logical_type_ref() {
        return match lt {
            LogicalType::String | LogicalType::Enum | LogicalType::Json => Kind::String,
            LogicalType::Decimal(_) => Kind::Decimal,
            LogicalType::Date => Kind::Int,
            LogicalType::Time(t) => match t.unit {
                TimeUnit::MICROS if physical == Physical::INT64 => Kind::Long,
                _ => Kind::NoBounds,
            },
            LogicalType::Timestamp(t) => match t.unit {
                TimeUnit::MICROS if physical == Physical::INT64 => Kind::Long,
                _ => Kind::NoBounds,
            },
            LogicalType::Integer(i) => match (i.bit_width, i.is_signed, physical) {
                (_, true, Physical::INT32) => Kind::Int,
                (64, true, Physical::INT64) => Kind::Long,
                (8 | 16, false, Physical::INT32) => Kind::Int,
                _ => Kind::NoBounds,
            },
            LogicalType::Bson => Kind::Binary,
            LogicalType::Uuid | LogicalType::Float16 if physical == Physical::FIXED_LEN_BYTE_ARRAY => Kind::Fixed,
            _ => Kind::NoBounds,
        };
    }
    match descr.converted_type() {
        ConvertedType::UTF8 | ConvertedType::ENUM | ConvertedType::JSON => return Kind::String,
        ConvertedType::DECIMAL => return Kind::Decimal,
        ConvertedType::DATE | ConvertedType::INT_8 | ConvertedType::INT_16 | ConvertedType::INT_32 => return Kind::Int,
        ConvertedType::INT_64 | ConvertedType::TIME_MICROS | ConvertedType::TIMESTAMP_MICROS => return Kind::Long,
        ConvertedType::BSON => return Kind::Binary,
        ConvertedType::NONE => {}
        _ => return Kind::NoBounds,
    }
    match physical {
        Physical::BOOLEAN => Kind::Boolean,
        Physical::INT32 => Kind::Int,
        Physical::INT64 => Kind::Long,
        Physical::FLOAT => Kind::Float,
        Physical::DOUBLE => Kind::Double,
        Physical::BYTE_ARRAY => Kind::Binary,
        Physical::FIXED_LEN_BYTE_ARRAY => Kind::Fixed,
        Physical::INT96 => Kind::NoBounds,
    }
}

/// A chunk's min or max as a comparable value.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Bool(bool),
    Int(i64),
    /// Strings and binaries: unsigned byte order (UTF-8's is code point order).
    Bytes(Vec<u8>),
    /// A decimal's unscaled value.
    Decimal(i128),
    /// A float or double, never NaN; -0.0 below 0.0, as Java compares.
    Float(f64),
}

impl Bound {
    fn cmp(&self, other: &Bound) -> Ordering {
        match (self, other) {
            (Bound::Bool(a), Bound::Bool(b)) => a.cmp(b),
            (Bound::Int(a), Bound::Int(b)) => a.cmp(b),
            (Bound::Bytes(a), Bound::Bytes(b)) => a.cmp(b),
            (Bound::Decimal(a), Bound::Decimal(b)) => a.cmp(b),
            (Bound::Float(a), Bound::Float(b)) => a.total_cmp(b),
            _ => Ordering::Equal,
        }
    }
}

/// Big-endian two's complement bytes as a number (at most 16 bytes).
fn be_int(b: &[u8]) -> Option<i128> {
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    let mut v: i128 = if b[0] & 0x80 != 0 { -1 } else { 0 };
    for &x in b {
        v = (v << 8) | x as i128;
    }
    Some(v)
}

/// The shortest big-endian two's complement form of `v` (Java's
/// `BigInteger.toByteArray`).
pub fn min_be_bytes(v: i128) -> Vec<u8> {
    let full = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (full[start], full[start + 1]);
        if (b == 0x00 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    full[start..].to_vec()
}

/// A chunk's (min, max), if its statistics hold them.
fn chunk_bounds(kind: Kind, stats: &Statistics) -> Option<(Bound, Bound)> {
    if !stats.min_is_exact() || !stats.max_is_exact() {
        // Cut short by the writer: not the values Java's readers see.
        return None;
    }
    let pair = |a: Option<Bound>, b: Option<Bound>| a.zip(b);
    // As Java's Parquet reader takes a float chunk's bounds: none if one is
    // NaN (a chunk of NaNs only), a zero minimum as -0.0 and a zero
    // maximum as 0.0 (the chunk may hold either zero).
    let floats = |min: f64, max: f64| {
        if min.is_nan() || max.is_nan() {
            return None;
        }
        let min = if min == 0.0 { -0.0 } else { min };
        let max = if max == 0.0 { 0.0 } else { max };
        Some((Bound::Float(min), Bound::Float(max)))
    };
    match (kind, stats) {
        (Kind::Float, Statistics::Float(s)) => floats(*s.min_opt()? as f64, *s.max_opt()? as f64),
        (Kind::Double, Statistics::Double(s)) => floats(*s.min_opt()?, *s.max_opt()?),
        (Kind::Boolean, Statistics::Boolean(s)) => {
            pair(s.min_opt().map(|v| Bound::Bool(*v)), s.max_opt().map(|v| Bound::Bool(*v)))
        }
        (Kind::Int | Kind::Decimal, Statistics::Int32(s)) => {
            let f = |v: &i32| if kind == Kind::Decimal { Bound::Decimal(*v as i128) } else { Bound::Int(*v as i64) };
            pair(s.min_opt().map(f), s.max_opt().map(f))
        }
        (Kind::Long | Kind::Decimal, Statistics::Int64(s)) => {
            let f = |v: &i64| if kind == Kind::Decimal { Bound::Decimal(*v as i128) } else { Bound::Int(*v) };
            pair(s.min_opt().map(f), s.max_opt().map(f))
        }
        (Kind::Decimal, _) => {
            let (min, max) = (stats.min_bytes_opt()?, stats.max_bytes_opt()?);
            Some((Bound::Decimal(be_int(min)?), Bound::Decimal(be_int(max)?)))
        }
        (Kind::String | Kind::Binary | Kind::Fixed, Statistics::ByteArray(_) | Statistics::FixedLenByteArray(_)) => {
            Some((Bound::Bytes(stats.min_bytes_opt()?.to_vec()), Bound::Bytes(stats.max_bytes_opt()?.to_vec())))
        }
        _ => None,
    }
}

/// The binary form of a bound (Appendix D).
fn serialize(kind: Kind, b: &Bound) -> Vec<u8> {
    match (kind, b) {
        (_, Bound::Bool(v)) => vec![*v as u8],
        (Kind::Int, Bound::Int(v)) => (*v as i32).to_le_bytes().to_vec(),
        (_, Bound::Int(v)) => v.to_le_bytes().to_vec(),
        (_, Bound::Bytes(v)) => v.clone(),
        (_, Bound::Decimal(v)) => min_be_bytes(*v),
        (Kind::Float, Bound::Float(v)) => (*v as f32).to_le_bytes().to_vec(),
        (_, Bound::Float(v)) => v.to_le_bytes().to_vec(),
    }
}

/// The first `n` code points of a UTF-8 string (all of it if shorter);
/// `None` if it is not UTF-8.
fn truncate_str(b: &[u8], n: usize) -> Option<&str> {
    let s = std::str::from_utf8(b).ok()?;
    Some(match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    })
}

/// An upper bound of every string starting with `b`'s first `n` code
/// points: those, the last one incremented (past the surrogates); `None`
/// when every code point is the last one.
fn truncate_str_max(b: &[u8], n: usize) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(b).ok()?;
    let t = truncate_str(b, n)?;
    if t.len() == s.len() {
        return Some(b.to_vec());
    }
    let mut chars: Vec<char> = t.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            0x10FFFF => None,
            c => char::from_u32(c + 1),
        };
        if let Some(c) = next {
            chars.push(c);
            return Some(chars.into_iter().collect::<String>().into_bytes());
        }
    }
    None
}

fn truncate_bytes_max(b: &[u8], n: usize) -> Option<Vec<u8>> {
    if n >= b.len() {
        return Some(b.to_vec());
    }
    let mut t = b[..n].to_vec();
    while let Some(last) = t.pop() {
        if last != 0xff {
            t.push(last + 1);
            return Some(t);
        }
    }
    None
}

/// The metrics of a file from its footer under `config`.
pub fn file_metrics(meta: &ParquetMetaData, config: &MetricsConfig) -> FileMetrics {
    let mut m = FileMetrics { record_count: meta.file_metadata().num_rows().max(0) as u64, ..Default::default() };
    let schema = meta.file_metadata().schema_descr();
    for (c, descr) in schema.columns().iter().enumerate() {
        let info = descr.self_type().get_basic_info();
        if !info.has_id() {
            continue;
        }
        let id = info.id();
        let mode = config.mode(id);
        if mode == Mode::None {
            continue;
        }
        let chunks: Vec<_> = meta.row_groups().iter().map(|rg| rg.column(c)).collect();
        *m.column_sizes.entry(id).or_default() += chunks.iter().map(|ch| ch.compressed_size()).sum::<i64>();
        // Inside a list or a map: Java keeps no counts nor bounds.
        if descr.max_rep_level() > 0 || descr.physical_type() == Physical::INT96 {
            continue;
        }
        let kind = kind_of(descr);
        let (mut values, mut nulls) = (0i64, 0i64);
        let mut bounds: Option<(Bound, Bound)> = None;
        let mut complete = true;
        for ch in &chunks {
            let Some(stats) = ch.statistics() else {
                complete = false;
                break;
            };
            let min_max = chunk_bounds(kind, stats);
            // Without a null count no count is sure.
            let Some(n) = stats.null_count_opt() else {
                complete = false;
                break;
            };
            nulls += n as i64;
            values += ch.num_values();
            if let Some((lo, hi)) = min_max {
                bounds = Some(match bounds {
                    None => (lo, hi),
                    Some((a, b)) => (
                        if lo.cmp(&a) == Ordering::Less { lo } else { a },
                        if hi.cmp(&b) == Ordering::Greater { hi } else { b },
                    ),
                });
            }
        }
        if !complete {
            continue;
        }
        m.value_counts.insert(id, values);
        m.null_value_counts.insert(id, nulls);
        let n = match mode {
            Mode::Counts | Mode::None => continue,
            Mode::Truncate(n) => n,
            Mode::Full => usize::MAX,
        };
        let (Some((lo, hi)), false) = (bounds, kind == Kind::NoBounds) else { continue };
        let (lo, hi) = (serialize(kind, &lo), serialize(kind, &hi));
        let (lo, hi) = match kind {
            Kind::String => match (truncate_str(&lo, n), truncate_str_max(&hi, n)) {
                (Some(l), h) => (Some(l.as_bytes().to_vec()), h),
                // Not UTF-8: no bound is sure.
                (None, _) => (None, None),
            },
            Kind::Binary => (Some(lo[..lo.len().min(n)].to_vec()), truncate_bytes_max(&hi, n)),
            _ => (Some(lo), Some(hi)),
        };
        if let Some(l) = lo {
            m.lower_bounds.insert(id, l);
        }
        if let Some(h) = hi {
            m.upper_bounds.insert(id, h);
        }
    }
    let mut offsets: Vec<i64> = meta
        .row_groups()
        .iter()
        .filter_map(|rg| {
            let first = rg.columns().first()?;
            let data = first.data_page_offset();
            Some(match first.dictionary_page_offset() {
                Some(d) if d > 0 && d < data => d,
                _ => data,
            })
        })
        .collect();
    offsets.sort_unstable();
    m.split_offsets = offsets;
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modes_parse_as_java_reads_them() {
        assert_eq!(Mode::parse("Truncate(8)"), Some(Mode::Truncate(8)));
        assert_eq!(Mode::parse("full"), Some(Mode::Full));
        assert_eq!(Mode::parse("truncate(0)"), None);
        assert_eq!(Mode::parse("bogus"), None);
    }

    #[test]
    fn strings_truncate_by_code_points_and_the_upper_bound_is_incremented() {
        assert_eq!(truncate_str("héllo".as_bytes(), 2), Some("hé"));
        assert_eq!(truncate_str_max("héllo".as_bytes(), 2).unwrap(), "hê".as_bytes());
        assert_eq!(truncate_str_max("ab".as_bytes(), 2).unwrap(), b"ab");
        assert_eq!(truncate_str_max("a\u{10FFFF}\u{10FFFF}z".as_bytes(), 3).unwrap(), b"b");
        assert_eq!(truncate_str_max("\u{D7FF}x".as_bytes(), 1).unwrap(), "\u{E000}".as_bytes());
        assert_eq!(truncate_bytes_max(&[1, 0xff, 0xff, 3], 3).unwrap(), vec![2]);
        assert_eq!(truncate_bytes_max(&[0xff, 0xff], 1), None);
    }

    #[test]
    fn decimals_serialize_as_java_big_integers() {
        assert_eq!(min_be_bytes(0), vec![0]);
        assert_eq!(min_be_bytes(127), vec![0x7f]);
        assert_eq!(min_be_bytes(128), vec![0x00, 0x80]);
        assert_eq!(min_be_bytes(-1), vec![0xff]);
        assert_eq!(min_be_bytes(-129), vec![0xff, 0x7f]);
        assert_eq!(be_int(&[0xff, 0x7f]), Some(-129));
    }

    #[test]
    fn wide_tables_keep_metrics_for_their_first_hundred_columns_and_sorted_ones() {
        let fields: Vec<Json> = (1..=120).map(|i| json!({"id": i, "name": format!("c{i}"), "type": "long"})).collect();
        let schema = json!({"fields": fields});
        let sort = [json!({"source-id": 110, "transform": "identity"})];
        let c = MetricsConfig::new(&BTreeMap::new(), &schema, &sort);
        assert_eq!(c.mode(1), Mode::Truncate(16));
        assert_eq!(c.mode(100), Mode::Truncate(16));
        assert_eq!(c.mode(101), Mode::None);
        assert_eq!(c.mode(110), Mode::Truncate(16));
        let props = BTreeMap::from([
            ("write.metadata.metrics.default".to_string(), "counts".to_string()),
            ("write.metadata.metrics.column.c3".to_string(), "full".to_string()),
        ]);
        let c = MetricsConfig::new(&props, &schema, &[]);
        assert_eq!((c.mode(1), c.mode(3)), (Mode::Counts, Mode::Full));
    }
}
