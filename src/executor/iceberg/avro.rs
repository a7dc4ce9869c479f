//! Avro object container files, as Iceberg's manifests and manifest lists
//! are: read with the `apache-avro` crate, written here.
//!
//! Invariants:
//! - A file compactd writes carries, byte for byte, the schema text of the
//!   file it was derived from (the manifest it rewrites, a manifest of the
//!   same partition spec, the current manifest list): the `field-id`
//!   attributes and `logicalType: map` readers resolve fields by survive
//!   whatever this crate models, and no schema is ever made up here.
//! - Records are looked up and filled by Iceberg field id (the schema's
//!   `field-id` attribute), never by position: v1 and v2 name some fields
//!   differently.
//! - Written files hold one deflate block (Iceberg's default codec); every
//!   datum is validated against the schema by the encoder.

use std::collections::BTreeMap;
use std::io::Write;

use apache_avro::schema::{RecordField, RecordSchema};
use apache_avro::types::Value;
use apache_avro::Schema;

/// What a file holds: its schema (as written and parsed), its user
/// metadata (in file order) and its records.
#[derive(Debug, Clone)]
pub struct AvroFile {
    pub schema_json: String,
    pub schema: Schema,
    pub meta: Meta,
    pub records: Vec<Value>,
}

impl AvroFile {
    /// A user metadata value as text (`format-version`, `partition-spec-id`).
    pub fn meta_str(&self, key: &str) -> Option<String> {
        self.meta.iter().find(|(k, _)| k == key).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Reads a container file; `Err` says what is wrong with it.
pub fn read(bytes: &[u8]) -> Result<AvroFile, String> {
    let (schema_json, meta) = header(bytes)?;
    let reader = apache_avro::Reader::new(bytes).map_err(|e| format!("not an Avro container file: {e}"))?;
    let schema = reader.writer_schema().clone();
    let mut records = vec![];
    for r in reader {
        records.push(r.map_err(|e| format!("a record does not decode: {e}"))?);
    }
    Ok(AvroFile { schema_json, schema, meta, records })
}

fn varint(b: &[u8], at: &mut usize) -> Result<i64, String> {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = *b.get(*at).ok_or("truncated header")?;
        *at += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err("a varint of the header is too long".into());
        }
    }
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

fn put_varint(out: &mut Vec<u8>, n: i64) {
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// User metadata of a container file, in file order.
pub type Meta = Vec<(String, Vec<u8>)>;

/// The schema text and the user metadata (every key but `avro.*`).
fn header(b: &[u8]) -> Result<(String, Meta), String> {
    if b.get(..4) != Some(b"Obj\x01") {
        return Err("not an Avro container file (no Obj\\x01 magic)".into());
    }
    let mut at = 4;
    let (mut schema, mut meta) = (None, vec![]);
    loop {
        let mut n = varint(b, &mut at)?;
        if n == 0 {
            break;
        }
        if n < 0 {
            n = -n;
            varint(b, &mut at)?; // the block's byte size
        }
        for _ in 0..n {
            let mut field = || -> Result<Vec<u8>, String> {
                let len = usize::try_from(varint(b, &mut at)?).map_err(|_| "a negative length in the header")?;
                let v = b.get(at..at + len).ok_or("truncated header")?.to_vec();
                at += len;
                Ok(v)
            };
            let (k, v) = (field()?, field()?);
            let k = String::from_utf8(k).map_err(|_| "a header key is not UTF-8")?;
            if k == "avro.schema" {
                schema = Some(String::from_utf8(v).map_err(|_| "the schema is not UTF-8")?);
            } else if !k.starts_with("avro.") {
                meta.push((k, v));
            }
        }
    }
    Ok((schema.ok_or("no avro.schema in the header")?, meta))
}

/// A container file of `records` in `schema` (its text `schema_json`),
/// with `meta` as user metadata, deflate-compressed in one block; the sync
/// marker is `sync` (any 16 bytes: readers only compare it).
pub fn write(
    schema_json: &str,
    schema: &Schema,
    meta: &[(String, Vec<u8>)],
    records: &[Value],
    sync: [u8; 16],
) -> Result<Vec<u8>, String> {
    let mut out = b"Obj\x01".to_vec();
    put_varint(&mut out, meta.len() as i64 + 2);
    put_bytes(&mut out, b"avro.schema");
    put_bytes(&mut out, schema_json.as_bytes());
    put_bytes(&mut out, b"avro.codec");
    put_bytes(&mut out, b"deflate");
    for (k, v) in meta {
        put_bytes(&mut out, k.as_bytes());
        put_bytes(&mut out, v);
    }
    put_varint(&mut out, 0);
    out.extend_from_slice(&sync);
    if records.is_empty() {
        return Ok(out);
    }
    let mut data = vec![];
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(schema).build().map_err(|e| e.to_string())?;
    for r in records {
        writer.write_value_ref(&mut data, r).map_err(|e| format!("a record does not encode: {e}"))?;
    }
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&data).map_err(|e| e.to_string())?;
    let block = z.finish().map_err(|e| e.to_string())?;
    put_varint(&mut out, records.len() as i64);
    put_bytes(&mut out, &block);
    out.extend_from_slice(&sync);
    Ok(out)
}

/// The record schema of `schema` (through an optional union).
pub fn record_schema(schema: &Schema) -> Option<&RecordSchema> {
    match schema {
        Schema::Record(r) => Some(r),
        Schema::Union(u) => u.variants().iter().find_map(record_schema),
        _ => None,
    }
}

/// The Iceberg field id of a record field (its `field-id` attribute).
pub fn field_id(f: &RecordField) -> Option<i64> {
    f.custom_attributes.get("field-id").and_then(|v| v.as_i64())
}

/// The field of `record` whose field id is `id`.
pub fn field_by_id(record: &RecordSchema, id: i64) -> Option<&RecordField> {
    record.fields.iter().find(|f| field_id(f) == Some(id))
}

/// The value of a field by its id in a decoded record (unions unwrapped;
/// `None` for a missing field or a null).
pub fn get<'v>(schema: &RecordSchema, value: &'v Value, id: i64) -> Option<&'v Value> {
    let name = &field_by_id(schema, id)?.name;
    let Value::Record(fields) = value else { return None };
    let v = &fields.iter().find(|(n, _)| n == name)?.1;
    match unwrap(v) {
        Value::Null => None,
        v => Some(v),
    }
}

/// A value without its union wrapper.
pub fn unwrap(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap(inner),
        v => v,
    }
}

pub fn as_i64(v: &Value) -> Option<i64> {
    match unwrap(v) {
        Value::Long(n) | Value::TimestampMicros(n) | Value::TimeMicros(n) | Value::LocalTimestampMicros(n) => Some(*n),
        Value::Int(n) | Value::Date(n) => Some(*n as i64),
        _ => None,
    }
}

pub fn as_str(v: &Value) -> Option<&str> {
    match unwrap(v) {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// `value` as the field's schema holds it: wrapped in the union's variant
/// that fits (null in the null variant).
pub fn fit(schema: &Schema, value: Value) -> Result<Value, String> {
    let Schema::Union(u) = schema else { return Ok(value) };
    let want_null = matches!(value, Value::Null);
    for (i, s) in u.variants().iter().enumerate() {
        if matches!(s, Schema::Null) == want_null {
            return Ok(Value::Union(i as u32, Box::new(value)));
        }
    }
    Err(format!("no union variant of {schema:?} for {value:?}"))
}

/// Sets the field with id `id` of a decoded record to `value` (fitted to
/// the field's schema); `Err` if the schema has no such field.
pub fn set(schema: &RecordSchema, record: &mut Value, id: i64, value: Value) -> Result<(), String> {
    let f = field_by_id(schema, id).ok_or_else(|| format!("the schema has no field id {id}"))?;
    let fitted = fit(&f.schema, value)?;
    let Value::Record(fields) = record else { return Err("not a record".into()) };
    match fields.iter_mut().find(|(n, _)| *n == f.name) {
        Some(slot) => slot.1 = fitted,
        None => fields.push((f.name.clone(), fitted)),
    }
    Ok(())
}

/// Sets a field to `value` if the schema has it (fields of one format
/// version only, such as v2's sequence numbers).
pub fn set_if_present(schema: &RecordSchema, record: &mut Value, id: i64, value: Value) -> Result<(), String> {
    match field_by_id(schema, id) {
        Some(_) => set(schema, record, id, value),
        None => Ok(()),
    }
}

/// An Iceberg `map<int, V>` as Avro holds it (an array of key-value
/// records, `logicalType: map`) for the field `id` of `schema`.
pub fn int_map(schema: &RecordSchema, id: i64, entries: &BTreeMap<i32, Value>) -> Result<Value, String> {
    let f = field_by_id(schema, id).ok_or_else(|| format!("the schema has no field id {id}"))?;
    let items = match strip_null(&f.schema) {
        Schema::Array(a) => &*a.items,
        other => return Err(format!("field {} is not an array: {other:?}", f.name)),
    };
    let kv = record_schema(items).ok_or_else(|| format!("field {}'s items are not records", f.name))?;
    let (k, v) = match kv.fields.as_slice() {
        [k, v] => (k, v),
        _ => return Err(format!("field {}'s items are not key-value records", f.name)),
    };
    let mut out = vec![];
    for (key, value) in entries {
        out.push(Value::Record(vec![
            (k.name.clone(), fit(&k.schema, Value::Int(*key))?),
            (v.name.clone(), fit(&v.schema, value.clone())?),
        ]));
    }
    Ok(Value::Array(out))
}

/// The non-null variant of an optional schema.
pub fn strip_null(schema: &Schema) -> &Schema {
    match schema {
        Schema::Union(u) => u.variants().iter().find(|s| !matches!(s, Schema::Null)).unwrap_or(schema),
        s => s,
    }
}

/// The entries of an Iceberg `map<int, V>` field of a decoded record.
pub fn get_int_map(schema: &RecordSchema, value: &Value, id: i64) -> BTreeMap<i32, Value> {
    let mut out = BTreeMap::new();
    if let Some(Value::Array(items)) = get(schema, value, id) {
        for item in items {
            if let Value::Record(kv) = unwrap(item) {
                if let [(_, k), (_, v)] = kv.as_slice() {
                    if let Some(k) = as_i64(k) {
                        out.insert(k as i32, unwrap(v).clone());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type":"record","name":"manifest_entry","fields":[
        {"name":"status","type":"int","field-id":0},
        {"name":"snapshot_id","type":["null","long"],"default":null,"field-id":1},
        {"name":"sizes","type":["null",{"type":"array","logicalType":"map","items":{"type":"record","name":"k1_v2",
          "fields":[{"name":"key","type":"int","field-id":1},{"name":"value","type":"long","field-id":2}]}}],
          "default":null,"field-id":108}]}"#;

    #[test]
    fn a_written_file_keeps_its_schema_text_and_reads_back() {
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let rs = record_schema(&schema).unwrap();
        let mut rec = Value::Record(vec![]);
        set(rs, &mut rec, 0, Value::Int(1)).unwrap();
        set(rs, &mut rec, 1, Value::Long(42)).unwrap();
        let sizes = int_map(rs, 108, &BTreeMap::from([(3, Value::Long(7))])).unwrap();
        set(rs, &mut rec, 108, sizes).unwrap();
        let bytes = write(SCHEMA, &schema, &[("format-version".into(), b"2".to_vec())], &[rec], [7; 16]).unwrap();
        let back = read(&bytes).unwrap();
        assert_eq!(back.schema_json, SCHEMA);
        assert_eq!(back.meta_str("format-version").as_deref(), Some("2"));
        let r = &back.records[0];
        assert_eq!(get(rs, r, 1).and_then(as_i64), Some(42));
        assert_eq!(get_int_map(rs, r, 108), BTreeMap::from([(3, Value::Long(7))]));
        assert!(read(b"PAR1").is_err());
    }
}
