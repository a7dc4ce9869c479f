//! The per-file statistics of a compacted file (its `add` action's
//! `stats`), built from the file's own footer: the row-group statistics the
//! rewrite wrote, never from a guess. Delta's PROTOCOL.md ("Per-file
//! Statistics") defines them; which columns and how values are written
//! follow Delta's Spark writer (`StatisticsCollection`):
//! - `numRecords`, and `minValues` / `maxValues` / `nullCount` nested as the
//!   table's schema nests structs, for the table's data columns (partition
//!   columns excluded): the first `delta.dataSkippingNumIndexedCols` leaf
//!   columns (default 32, -1 for all), or those `delta.dataSkippingStatsColumns`
//!   names;
//! - bounds for integers, decimals (JSON numbers), strings, dates
//!   (`YYYY-MM-DD`) and timestamps (ISO-8601 with milliseconds, `Z` for
//!   `timestamp`, none for `timestamp_ntz`); a column the file lacks counts
//!   every row as null.
//!
//! A metric is omitted rather than guessed, so that data skipping stays
//! conservative:
//! - floats and doubles (Parquet's bounds leave NaN out, Spark's order puts
//!   it above every number), booleans, binary, lists and maps (their
//!   `nullCount` too: a leaf's null count also counts null elements);
//! - a column chunk without statistics, or without bounds while it holds
//!   values;
//! - dates and timestamps of a file Spark reads in LEGACY mode (its raw
//!   values are Julian-rebased: the footer's `org.apache.spark.*` keys);
//! - a string bound that is not valid UTF-8, or whose rounding up would pass
//!   Delta's expansion limit.
//!
//! Bounds are rounded outwards: a timestamp's minimum down and its maximum up
//! to the millisecond; a string's minimum to a prefix of
//! `delta.dataSkippingStringPrefixLength` UTF-16 units (default 32) and its
//! maximum to such a prefix with a greater character appended (Delta's
//! `truncateMaxStringAgg`), which also covers the rewrite's own truncated
//! (inexact) string bounds: a prefix of the smallest value, and a value
//! above the largest.

use std::collections::HashMap;

use parquet::basic::{LogicalType, TimeUnit, Type as Physical};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use serde_json::Value;

use super::log::{Metadata, PHYSICAL_NAME};
use crate::executor::merge::parquet::spark;

/// Leaf columns indexed when the table does not say.
const DEFAULT_INDEXED_COLUMNS: i64 = 32;
/// String bounds are cut to this many UTF-16 units when the table does not
/// say.
const DEFAULT_STRING_PREFIX: usize = 32;

/// A column of the table's schema, as statistics see it.
#[derive(Debug, Clone)]
enum Column {
    Leaf {
        name: String,
        ty: String,
    },
    Struct {
        name: String,
        fields: Vec<Column>,
    },
    /// Arrays, maps and anything else: no statistics.
    Other {
        name: String,
    },
}

impl Column {
    fn name(&self) -> &str {
        match self {
            Column::Leaf { name, .. } | Column::Struct { name, .. } | Column::Other { name } => name,
        }
    }
}

/// The fields of a struct type `v`, named as data files name them: by their
/// physical names where the table maps columns (`mapped`).
fn parse_fields(v: &Value, mapped: bool) -> Option<Vec<Column>> {
    v.get("fields")?
        .as_array()?
        .iter()
        .map(|f| {
            let physical = f.pointer(&format!("/metadata/{PHYSICAL_NAME}")).and_then(Value::as_str);
            let name = match physical.filter(|_| mapped) {
                Some(p) => p.to_string(),
                None => f.get("name")?.as_str()?.to_string(),
            };
            Some(match f.get("type")? {
                Value::String(ty) => Column::Leaf { name, ty: ty.clone() },
                t if t.get("type").and_then(Value::as_str) == Some("struct") => {
                    Column::Struct { name, fields: parse_fields(t, mapped)? }
                }
                _ => Column::Other { name },
            })
        })
        .collect()
}

/// Builds the statistics of the files a unit adds, for one table.
#[derive(Debug)]
pub struct Collector {
    /// The indexed columns; `None` if the table's schema or settings could
    /// not be read (then only `numRecords` is written).
    columns: Option<Vec<Column>>,
    prefix: usize,
}

impl Collector {
    /// For the table whose metadata is `meta`.
    pub fn new(meta: &Metadata) -> Collector {
        let setting = |k: &str| meta.configuration.get(k).cloned().flatten();
        let prefix = match setting("delta.dataSkippingStringPrefixLength") {
            None => Some(DEFAULT_STRING_PREFIX),
            Some(s) => s.trim().parse().ok(),
        };
        // Statistics name columns as data files do (physical names where
        // the table maps columns).
        let partitions = meta.partition_keys();
        let schema: Option<Vec<Column>> = serde_json::from_str::<Value>(&meta.schema_string)
            .ok()
            .and_then(|v| parse_fields(&v, meta.maps_columns()))
            .map(|cols| cols.into_iter().filter(|c| !partitions.iter().any(|p| p == c.name())).collect());
        let columns = schema.and_then(|data| match setting("delta.dataSkippingStatsColumns") {
            Some(list) => parse_column_list(&list).map(|paths| filter(&data, &paths)),
            None => {
                let n = match setting("delta.dataSkippingNumIndexedCols") {
                    None => Some(DEFAULT_INDEXED_COLUMNS),
                    Some(s) => s.trim().parse::<i64>().ok().filter(|n| *n >= -1),
                };
                n.map(|n| if n < 0 { data } else { truncate(&data, n as usize).0 })
            }
        });
        if columns.is_none() || prefix.is_none() {
            tracing::warn!(
                table_id = meta.id,
                "the table's schema or data-skipping settings do not parse: its compacted files get numRecords only"
            );
        }
        Collector { columns: columns.filter(|_| prefix.is_some()), prefix: prefix.unwrap_or(DEFAULT_STRING_PREFIX) }
    }

    /// The `stats` JSON of the file whose footer is `meta`.
    pub fn file_stats(&self, meta: &ParquetMetaData) -> String {
        let rows = meta.file_metadata().num_rows();
        let mut out = format!("{{\"numRecords\":{rows}");
        if let Some(columns) = &self.columns {
            let kv: spark::KeyValues = meta
                .file_metadata()
                .key_value_metadata()
                .into_iter()
                .flatten()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect();
            let file = File {
                meta,
                rows,
                leaves: leaf_index(meta),
                legacy_dates: spark::Rebase::of(&kv).datetime == spark::Mode::Legacy,
                prefix: self.prefix,
            };
            let (mut min, mut max, mut nulls) = (Obj::default(), Obj::default(), Obj::default());
            file.collect(columns, &mut vec![], &mut min, &mut max, &mut nulls);
            for (key, obj) in [("minValues", min), ("maxValues", max), ("nullCount", nulls)] {
                if !obj.0.is_empty() {
                    out.push_str(&format!(",{}:{}", json_string(key), obj.render()));
                }
            }
        }
        out.push('}');
        out
    }
}

/// `a, b.c, `d.e`` into lower-cased name paths; `None` if it does not
/// parse.
fn parse_column_list(s: &str) -> Option<Vec<Vec<String>>> {
    let mut out = vec![];
    let (mut path, mut part, mut quoted) = (vec![], String::new(), false);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' if quoted && chars.peek() == Some(&'`') => {
                chars.next();
                part.push('`');
            }
            '`' => quoted = !quoted,
            '.' if !quoted => path.push(std::mem::take(&mut part)),
            ',' if !quoted => {
                path.push(std::mem::take(&mut part));
                out.push(std::mem::take(&mut path));
            }
            c if !quoted && c.is_whitespace() => {}
            c => part.push(c),
        }
    }
    if quoted {
        return None;
    }
    path.push(part);
    out.push(path);
    let out: Vec<Vec<String>> =
        out.into_iter().map(|p| p.into_iter().map(|n| n.to_lowercase()).collect::<Vec<_>>()).collect();
    if out.iter().any(|p| p.iter().any(String::is_empty)) {
        return None;
    }
    Some(out)
}

/// The columns `paths` names (Delta's `filterSchema`): a name alone takes the
/// whole column, `a.b` a struct's field.
fn filter(columns: &[Column], paths: &[Vec<String>]) -> Vec<Column> {
    let mut out = vec![];
    for c in columns {
        let wanted: Vec<&[String]> =
            paths.iter().filter(|p| p[0] == c.name().to_lowercase()).map(|p| &p[1..]).collect();
        if wanted.is_empty() {
            continue;
        }
        if wanted.iter().all(|p| p.is_empty()) {
            out.push(c.clone());
        } else if let Column::Struct { name, fields } = c {
            let deeper: Vec<Vec<String>> = wanted.iter().filter(|p| !p.is_empty()).map(|p| p.to_vec()).collect();
            out.push(Column::Struct { name: name.clone(), fields: filter(fields, &deeper) });
        }
    }
    out
}

/// The first `n` leaf columns (Delta's `truncateSchema`); and how many
/// leaves that is.
fn truncate(columns: &[Column], n: usize) -> (Vec<Column>, usize) {
    let (mut out, mut count) = (vec![], 0);
    for c in columns {
        if count >= n {
            break;
        }
        match c {
            Column::Struct { name, fields } => {
                let (fields, k) = truncate(fields, n - count);
                count += k;
                out.push(Column::Struct { name: name.clone(), fields });
            }
            c => {
                count += 1;
                out.push(c.clone());
            }
        }
    }
    (out, count)
}

/// Where each name path of the file's schema is: a leaf column's index, or
/// a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Leaf(usize),
    Group,
}

fn leaf_index(meta: &ParquetMetaData) -> HashMap<Vec<String>, Node> {
    let mut out = HashMap::new();
    for (i, c) in meta.file_metadata().schema_descr().columns().iter().enumerate() {
        let parts = c.path().parts();
        for k in 1..parts.len() {
            out.insert(parts[..k].to_vec(), Node::Group);
        }
        out.insert(parts.to_vec(), Node::Leaf(i));
    }
    out
}

/// A JSON object being built, keys in schema order; values are JSON text.
#[derive(Debug, Default)]
struct Obj(Vec<(String, Entry)>);

#[derive(Debug)]
enum Entry {
    Raw(String),
    Obj(Obj),
}

impl Obj {
    fn render(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Entry::Raw(s) => s.clone(),
                    Entry::Obj(o) => o.render(),
                };
                format!("{}:{v}", json_string(k))
            })
            .collect();
        format!("{{{}}}", parts.join(","))
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// One output file's footer, read for statistics.
struct File<'a> {
    meta: &'a ParquetMetaData,
    rows: i64,
    leaves: HashMap<Vec<String>, Node>,
    legacy_dates: bool,
    prefix: usize,
}

/// A column's bounds over the file, comparable across row groups.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
enum Bound {
    Int(i128),
    Bytes(Vec<u8>),
}

impl File<'_> {
    fn collect(&self, columns: &[Column], path: &mut Vec<String>, min: &mut Obj, max: &mut Obj, nulls: &mut Obj) {
        for c in columns {
            path.push(c.name().to_string());
            match c {
                Column::Struct { name, fields } => {
                    let (mut a, mut b, mut n) = (Obj::default(), Obj::default(), Obj::default());
                    self.collect(fields, path, &mut a, &mut b, &mut n);
                    for (o, x) in [(&mut *min, a), (&mut *max, b), (&mut *nulls, n)] {
                        if !x.0.is_empty() {
                            o.0.push((name.clone(), Entry::Obj(x)));
                        }
                    }
                }
                Column::Leaf { name, ty } => match self.leaves.get(path.as_slice()) {
                    Some(Node::Leaf(i)) => {
                        let (lo, hi, n) = self.leaf(*i, ty);
                        if let Some(n) = n {
                            nulls.0.push((name.clone(), Entry::Raw(n.to_string())));
                        }
                        if let (Some(lo), Some(hi)) = (lo, hi) {
                            min.0.push((name.clone(), Entry::Raw(lo)));
                            max.0.push((name.clone(), Entry::Raw(hi)));
                        }
                    }
                    // Not in the file (nor under another case): every row
                    // is null there.
                    None if !self.leaves.keys().any(|k| same_ignoring_case(k, path)) => {
                        nulls.0.push((name.clone(), Entry::Raw(self.rows.to_string())));
                    }
                    _ => {}
                },
                Column::Other { .. } => {}
            }
            path.pop();
        }
    }

    /// A leaf column's minimum and maximum (JSON text) and null count.
    fn leaf(&self, i: usize, ty: &str) -> (Option<String>, Option<String>, Option<i64>) {
        let descr = self.meta.file_metadata().schema_descr().column(i);
        let mut nulls = Some(0i64);
        let (mut lo, mut hi): (Option<Bound>, Option<Bound>) = (None, None);
        let (mut bounded, mut inexact) = (true, false);
        for rg in self.meta.row_groups() {
            let Some(s) = rg.column(i).statistics() else {
                return (None, None, None);
            };
            let n = s.null_count_opt().map(|n| n as i64);
            nulls = nulls.zip(n).map(|(a, b)| a + b);
            if n == Some(rg.num_rows()) {
                continue; // only nulls: no bounds, none needed
            }
            inexact |= !s.min_is_exact() || !s.max_is_exact();
            let decimal_bytes = matches!(descr.logical_type_ref(), Some(LogicalType::Decimal(_)));
            match (bound(s, true, decimal_bytes), bound(s, false, decimal_bytes)) {
                (Some(a), Some(b)) if !s.is_min_max_deprecated() => {
                    lo = Some(match lo {
                        Some(l) if l <= a => l,
                        _ => a,
                    });
                    hi = Some(match hi {
                        Some(h) if h >= b => h,
                        _ => b,
                    });
                }
                _ => bounded = false,
            }
        }
        if !bounded {
            return (None, None, nulls);
        }
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return (None, None, nulls);
        };
        let logical = descr.logical_type_ref();
        let physical = descr.physical_type();
        let render = |b: &Bound, upper: bool| -> Option<String> {
            match (ty, b) {
                ("byte" | "short" | "integer" | "long", Bound::Int(v)) => {
                    let signed = match logical {
                        None => true,
                        Some(LogicalType::Integer(t)) => t.is_signed,
                        Some(_) => false,
                    };
                    signed.then(|| v.to_string())
                }
                (t, v) if t.starts_with("decimal(") => {
                    let Some(LogicalType::Decimal(d)) = logical else { return None };
                    let Bound::Int(v) = v else { return None };
                    decimal(*v, d.scale)
                }
                ("date", Bound::Int(days)) if !self.legacy_dates => {
                    matches!(logical, Some(LogicalType::Date)).then_some(())?;
                    Some(json_string(&civil_date(i64::try_from(*days).ok()?)?))
                }
                ("timestamp" | "timestamp_ntz", Bound::Int(v)) if !self.legacy_dates => {
                    let Some(LogicalType::Timestamp(t)) = logical else { return None };
                    if t.is_adjusted_to_u_t_c != (ty == "timestamp") || physical != Physical::INT64 {
                        return None;
                    }
                    let per_ms: i128 = match t.unit {
                        TimeUnit::MILLIS => 1,
                        TimeUnit::MICROS => 1_000,
                        TimeUnit::NANOS => 1_000_000,
                    };
                    let ms = if upper {
                        v.div_euclid(per_ms) + i128::from(v.rem_euclid(per_ms) != 0)
                    } else {
                        v.div_euclid(per_ms)
                    };
                    let text = timestamp(i64::try_from(ms).ok()?)?;
                    Some(json_string(&if ty == "timestamp" { format!("{text}Z") } else { text }))
                }
                ("string", Bound::Bytes(b)) => {
                    if !matches!(logical, None | Some(LogicalType::String)) || physical != Physical::BYTE_ARRAY {
                        return None;
                    }
                    let s = std::str::from_utf8(b).ok()?;
                    let cut = if upper { truncate_max(s, self.prefix)? } else { truncate_min(s, self.prefix) };
                    Some(json_string(&cut))
                }
                _ => None,
            }
        };
        // An inexact bound is only understood for strings (a prefix of the
        // minimum, a value above the maximum).
        if inexact && ty != "string" {
            return (None, None, nulls);
        }
        match (render(&lo, false), render(&hi, true)) {
            (Some(a), Some(b)) => (Some(a), Some(b), nulls),
            _ => (None, None, nulls),
        }
    }
}

fn same_ignoring_case(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_lowercase() == y.to_lowercase())
}

/// A chunk's minimum (`min`) or maximum, comparable: integers of every
/// width and byte strings (UTF-8 order is byte order); decimals stored as
/// bytes (`decimal`) are compared as the numbers they are.
fn bound(s: &Statistics, min: bool, decimal: bool) -> Option<Bound> {
    fn pick<T>(s: &parquet::file::statistics::ValueStatistics<T>, min: bool) -> Option<&T> {
        if min {
            s.min_opt()
        } else {
            s.max_opt()
        }
    }
    Some(match s {
        Statistics::Int32(v) => Bound::Int(i128::from(*pick(v, min)?)),
        Statistics::Int64(v) => Bound::Int(i128::from(*pick(v, min)?)),
        Statistics::FixedLenByteArray(v) if decimal => Bound::Int(be_signed(pick(v, min)?.data())?),
        Statistics::ByteArray(v) if decimal => Bound::Int(be_signed(pick(v, min)?.data())?),
        Statistics::ByteArray(v) => Bound::Bytes(pick(v, min)?.data().to_vec()),
        _ => return None,
    })
}

/// A big-endian two's complement integer of at most 16 bytes.
fn be_signed(b: &[u8]) -> Option<i128> {
    if b.is_empty() || b.len() > 16 {
        return None;
    }
    let fill = if b[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut buf = [fill; 16];
    buf[16 - b.len()..].copy_from_slice(b);
    Some(i128::from_be_bytes(buf))
}

/// An unscaled decimal as JSON number text.
fn decimal(v: i128, scale: i32) -> Option<String> {
    if !(0..=38).contains(&scale) {
        return None;
    }
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return Some(format!("{sign}{digits}"));
    }
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    Some(format!("{sign}{int}.{frac}"))
}

/// Days since 1970-01-01 as `YYYY-MM-DD`, for years 1 to 9999 only.
fn civil_date(days: i64) -> Option<String> {
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (1..=9999).contains(&y).then(|| format!("{y:04}-{m:02}-{d:02}"))
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmm` (no zone).
fn timestamp(ms: i64) -> Option<String> {
    let day = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let date = civil_date(day)?;
    let (h, m, s, milli) = (rest / 3_600_000, rest / 60_000 % 60, rest / 1000 % 60, rest % 1000);
    Some(format!("{date}T{h:02}:{m:02}:{s:02}.{milli:03}"))
}

/// Delta's `truncateMinStringAgg`: a prefix of `prefix` UTF-16 units (one
/// more rather than split a surrogate pair).
fn truncate_min(s: &str, prefix: usize) -> String {
    let mut units = 0;
    let mut out = String::new();
    for c in s.chars() {
        if units >= prefix {
            break;
        }
        units += c.len_utf16();
        out.push(c);
    }
    out
}

/// Delta's `truncateMaxStringAgg`: `s` if short enough, else a prefix with a
/// character appended that sorts above what was cut (in UTF-8 byte order),
/// extending the prefix past U+10FFFF characters up to twice the prefix
/// length; `None` past that.
fn truncate_max(s: &str, prefix: usize) -> Option<String> {
    if s.encode_utf16().count() <= prefix {
        return Some(s.to_string());
    }
    let mut out = truncate_min(s, prefix);
    let mut units: usize = out.encode_utf16().count();
    let mut rest = s[out.len()..].chars();
    while units <= 2 * prefix {
        match rest.next() {
            None => return Some(s.to_string()),
            Some('\u{10FFFF}') => {
                out.push('\u{10FFFF}');
                units += 2;
            }
            Some(c) if (c as u32) < 0x7f => return Some(format!("{out}\u{7f}")),
            Some(_) => return Some(format!("{out}\u{10FFFF}")),
        }
    }
    None
}

#[cfg(test)]
mod tests;
