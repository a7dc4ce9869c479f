//! Manifests written in format v1 that a table keeps after its upgrade to
//! v2 (an upgrade rewrites no manifest): read as v2 manifests, so that a
//! commit that rewrites one writes a v2 manifest, as Java's writers do in
//! a v2 table.
//!
//! Per the spec's upgrade rules such an entry's data and file sequence
//! numbers are 0 (inherited through the manifest list, where the upgrade
//! left 0) and its file's content is data. The v1 fields v2 dropped
//! (`block_size_in_bytes`) are kept: readers project by field id.

use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::Schema;
use serde_json::json;

use super::avro::AvroFile;

const SNAPSHOT_ID: i64 = 1;
const DATA_FILE: i64 = 2;
const SEQUENCE: i64 = 3;

/// Makes `file`, a v1 manifest, a v2 one: `sequence_number` and
/// `file_sequence_number` (null: inherited) after `snapshot_id`, `content`
/// (0) first in `data_file`, and the header's `format-version` 2 and
/// `content` `data`. A manifest that has sequence numbers is left alone.
pub fn as_v2(file: &mut AvroFile) -> Result<(), String> {
    let bad = |what: &str| format!("a v1 manifest whose schema {what}");
    let mut schema: serde_json::Value =
        serde_json::from_str(&file.schema_json).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let fields = schema["fields"].as_array_mut().ok_or_else(|| bad("is not a record"))?;
    if by_id(fields, SEQUENCE).is_some() {
        return Ok(());
    }
    let after = by_id(fields, SNAPSHOT_ID).ok_or_else(|| bad("has no snapshot_id"))? + 1;
    for (i, (name, id)) in [("sequence_number", 3), ("file_sequence_number", 4)].into_iter().enumerate() {
        fields.insert(after + i, json!({"name": name, "type": ["null", "long"], "default": null, "field-id": id}));
    }
    let data_file = by_id(fields, DATA_FILE).ok_or_else(|| bad("has no data_file"))?;
    let df_fields = fields[data_file]["type"]["fields"].as_array_mut().ok_or_else(|| bad("has no data_file record"))?;
    df_fields.insert(
        0,
        json!({"name": "content", "type": "int", "field-id": 134,
            "doc": "Contents of the file: 0=data, 1=position deletes, 2=equality deletes"}),
    );
    let df_names = names(df_fields);
    let entry_names = names(fields);
    let data_file_name = entry_names[data_file].clone();
    let text = schema.to_string();
    let parsed = Schema::parse_str(&text).map_err(|e| bad(&format!("cannot take sequence numbers: {e}")))?;
    for r in &mut file.records {
        let mut old =
            into_fields(std::mem::replace(r, Value::Null)).ok_or("a v1 manifest entry that is not a record")?;
        let mut out = vec![];
        for name in &entry_names {
            let v = if *name == data_file_name {
                let mut d = old.remove(name).and_then(into_fields).ok_or("a v1 manifest entry without data_file")?;
                let mut record = vec![];
                for f in &df_names {
                    let v = match d.remove(f) {
                        Some(v) => v,
                        None if f == "content" => Value::Int(0),
                        None => return Err(format!("a v1 data_file without {f}")),
                    };
                    record.push((f.clone(), v));
                }
                Value::Record(record)
            } else {
                match old.remove(name) {
                    Some(v) => v,
                    None if name.ends_with("sequence_number") => Value::Union(0, Box::new(Value::Null)),
                    None => return Err(format!("a v1 manifest entry without {name}")),
                }
            };
            out.push((name.clone(), v));
        }
        *r = Value::Record(out);
    }
    file.schema_json = text;
    file.schema = parsed;
    set_meta(&mut file.meta, "format-version", "2");
    set_meta(&mut file.meta, "content", "data");
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
