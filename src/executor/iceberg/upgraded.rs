//! Manifests a table wrote before its upgrade (an upgrade rewrites no
//! manifest), read in the table's format version, so that a commit that
//! rewrites one writes it as Java's writers would in that version:
//! - v1 in a v2 or v3 table: per the spec's upgrade rules an entry's data
//!   and file sequence numbers are 0 (inherited through the manifest list,
//!   where the upgrade left 0) and its file's content is data;
//! - v1 or v2 in a v3 table: `first_row_id`, so that the row ids a file
//!   inherits are written out when its manifest is rewritten (else its
//!   rows would take the rewritten manifest's new range).
//!
//! Fields a later version dropped (v1's `block_size_in_bytes`) are kept:
//! readers project by field id.

use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::Schema;
use serde_json::json;

use super::avro::AvroFile;

const SNAPSHOT_ID: i64 = 1;
const DATA_FILE: i64 = 2;
const SEQUENCE: i64 = 3;
const CONTENT: i64 = 134;
const FIRST_ROW_ID: i64 = 142;

/// Gives `file`, a manifest of a table of format `version`, the fields
/// that version's manifests have: `sequence_number` and
/// `file_sequence_number` (null: inherited) after `snapshot_id` and
/// `content` (0) first in `data_file` from v2, `first_row_id` (null) last
/// in `data_file` from v3; the header's `format-version` follows. A
/// manifest that has them is left alone.
pub fn to_version(file: &mut AvroFile, version: u64) -> Result<(), String> {
    let bad = |what: &str| format!("a manifest written before the table's upgrade whose schema {what}");
    let mut schema: serde_json::Value =
        serde_json::from_str(&file.schema_json).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let fields = schema["fields"].as_array_mut().ok_or_else(|| bad("is not a record"))?;
    let mut changed = false;
    if version >= 2 && by_id(fields, SEQUENCE).is_none() {
        let after = by_id(fields, SNAPSHOT_ID).ok_or_else(|| bad("has no snapshot_id"))? + 1;
        for (i, (name, id)) in [("sequence_number", 3), ("file_sequence_number", 4)].into_iter().enumerate() {
            fields.insert(after + i, json!({"name": name, "type": ["null", "long"], "default": null, "field-id": id}));
        }
        changed = true;
    }
    let data_file = by_id(fields, DATA_FILE).ok_or_else(|| bad("has no data_file"))?;
    let df_fields = fields[data_file]["type"]["fields"].as_array_mut().ok_or_else(|| bad("has no data_file record"))?;
    if version >= 2 && by_id(df_fields, CONTENT).is_none() {
        df_fields.insert(
            0,
            json!({"name": "content", "type": "int", "field-id": 134,
                "doc": "Contents of the file: 0=data, 1=position deletes, 2=equality deletes"}),
        );
        changed = true;
    }
    if version >= 3 && by_id(df_fields, FIRST_ROW_ID).is_none() {
        df_fields.push(json!({"name": "first_row_id", "type": ["null", "long"], "default": null, "field-id": 142}));
        changed = true;
    }
    if !changed {
        return Ok(());
    }
    let df_names = names(df_fields);
    let entry_names = names(fields);
    let data_file_name = entry_names[data_file].clone();
    let text = schema.to_string();
    let parsed = Schema::parse_str(&text).map_err(|e| bad(&format!("cannot take the new fields: {e}")))?;
    // A field the file lacks takes its value as the upgrade defines it.
    let added = |name: &str| match name {
        "content" => Some(Value::Int(0)),
        "sequence_number" | "file_sequence_number" | "first_row_id" => Some(Value::Union(0, Box::new(Value::Null))),
        _ => None,
    };
    for r in &mut file.records {
        let mut old = into_fields(std::mem::replace(r, Value::Null)).ok_or("a manifest entry that is not a record")?;
        let mut out = vec![];
        for name in &entry_names {
            let v = if *name == data_file_name {
                let mut d = old.remove(name).and_then(into_fields).ok_or("a manifest entry without data_file")?;
                let mut record = vec![];
                for f in &df_names {
                    let v = d.remove(f).or_else(|| added(f)).ok_or_else(|| format!("a data_file without {f}"))?;
                    record.push((f.clone(), v));
                }
                Value::Record(record)
            } else {
                old.remove(name).or_else(|| added(name)).ok_or_else(|| format!("a manifest entry without {name}"))?
            };
            out.push((name.clone(), v));
        }
        *r = Value::Record(out);
    }
    file.schema_json = text;
    file.schema = parsed;
    set_meta(&mut file.meta, "format-version", &version.to_string());
    if !file.meta.iter().any(|(k, _)| k == "content") {
        set_meta(&mut file.meta, "content", "data");
    }
    Ok(())
}

fn by_id(fields: &[serde_json::Value], id: i64) -> Option<usize> {
    fields.iter().position(|f| f["field-id"].as_i64() == Some(id))
}

fn names(fields: &[serde_json::Value]) -> Vec<String> {
    fields.iter().map(|f| f["name"].as_str().unwrap_or_default().to_string()).collect()
}

fn into_fields(v: Value) -> Option<HashMap<String, Value>> {
    match v {
        Value::Record(f) => Some(f.into_iter().collect()),
        _ => None,
    }
}

fn set_meta(meta: &mut super::avro::Meta, key: &str, value: &str) {
    match meta.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = value.as_bytes().to_vec(),
        None => meta.push((key.to_string(), value.as_bytes().to_vec())),
    }
}
