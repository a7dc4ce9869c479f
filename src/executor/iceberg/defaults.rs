//! Format v3's `initial-default`: the value a column reads as in data
//! files written before it was added (Java's readers fill it in; a rewrite
//! must write it, or the rows it carries would change from the default to
//! null). Parsed from the schema's JSON single-value form (the spec's
//! Appendix D: numbers and booleans as JSON, dates, times, timestamps and
//! decimals as text, uuids as text, binary and fixed as hex).
//!
//! A default of a type compactd cannot build (a struct's) refuses the
//! table's schema by name: never guessed, never null.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, BooleanArray, FixedSizeBinaryArray, StringArray, UInt32Array};
use arrow_schema::DataType;
use serde_json::Value as Json;

/// Per field id, the field's initial default as a one-row array of its
/// Arrow type, and the fields whose default compactd cannot build (a
/// struct's): an input that lacks one of those is refused, naming it.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    values: HashMap<i64, ArrayRef>,
    unbuilt: HashMap<i64, String>,
}

impl Defaults {
    /// Every field of `schema` (the table's, at any depth: struct fields,
    /// list elements, map keys and values) that has an `initial-default`;
    /// `arrow_type` is the schema module's.
    pub fn of(
        schema: &Json,
        arrow_type: impl Fn(&Json) -> Result<DataType, String> + Copy,
    ) -> Result<Defaults, String> {
        let mut out = Defaults::default();
        walk(schema, arrow_type, &mut out)?;
        Ok(out)
    }

    /// Field `id`'s default, `rows` times.
    pub fn column(&self, id: i64, rows: usize) -> Option<Result<ArrayRef, String>> {
        let one = self.values.get(&id)?;
        let zeros = UInt32Array::from(vec![0u32; rows]);
        Some(arrow_select::take::take(one.as_ref(), &zeros, None).map_err(|e| e.to_string()))
    }

    /// Whether a file lacking field `id` reads it as a default: `Err` when
    /// it has one compactd cannot build.
    pub fn has(&self, id: i64) -> Result<bool, String> {
        match self.unbuilt.get(&id) {
            Some(why) => Err(why.clone()),
            None => Ok(self.values.contains_key(&id)),
        }
    }
}

/// The fields of the struct type `ty`, and of the structs nested in them.
fn walk(
    ty: &Json,
    arrow_type: impl Fn(&Json) -> Result<DataType, String> + Copy,
    out: &mut Defaults,
) -> Result<(), String> {
    match ty["type"].as_str() {
        Some("list") => return walk(&ty["element"], arrow_type, out),
        Some("map") => {
            walk(&ty["key"], arrow_type, out)?;
            return walk(&ty["value"], arrow_type, out);
        }
        _ => {}
    }
    let Some(fields) = ty["fields"].as_array() else { return Ok(()) };
    for f in fields {
        let name = f["name"].as_str().unwrap_or_default();
        let id = f["id"].as_i64().ok_or_else(|| format!("field {name:?} has no id"))?;
        if let Some(d) = f.get("initial-default").filter(|d| !d.is_null()) {
            let t = arrow_type(&f["type"])?;
            match parse(d, &t) {
                Ok(value) => {
                    out.values.insert(id, value);
                }
                Err(e) if matches!(t, DataType::Struct(_)) => {
                    out.unbuilt.insert(id, format!("field {name:?} (id {id}): initial-default {d}: {e}"));
                }
                Err(e) => return Err(format!("field {name:?} (id {id}): initial-default {d}: {e}")),
            }
        }
        walk(&f["type"], arrow_type, out)?;
    }
    Ok(())
}

/// A one-row array of type `t` holding `v`.
fn parse(v: &Json, t: &DataType) -> Result<ArrayRef, String> {
    use DataType::*;
    let text = || match v {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) => Ok(n.to_string()),
        other => Err(format!("{other} is not a value of type {t}")),
    };
    let hex = |s: &str| -> Result<Vec<u8>, String> {
        let digit = |b: u8| (b as char).to_digit(16).ok_or_else(|| format!("{s:?} is not hex"));
        let b = s.as_bytes();
        if !b.len().is_multiple_of(2) {
            return Err("odd-length hex".into());
        }
        b.chunks(2).map(|p| Ok((digit(p[0])? * 16 + digit(p[1])?) as u8)).collect()
    };
    Ok(match t {
        Boolean => Arc::new(BooleanArray::from(vec![v.as_bool().ok_or("not a boolean")?])),
        FixedSizeBinary(16) if v.as_str().is_some_and(|s| s.len() == 36) => {
            let s = v.as_str().expect("checked").replace('-', "");
            Arc::new(FixedSizeBinaryArray::try_from_iter(std::iter::once(hex(&s)?)).map_err(|e| e.to_string())?)
        }
        FixedSizeBinary(_) => {
            Arc::new(FixedSizeBinaryArray::try_from_iter(std::iter::once(hex(&text()?)?)).map_err(|e| e.to_string())?)
        }
        Binary => Arc::new(BinaryArray::from_vec(vec![hex(&text()?)?.as_slice()])),
        Decimal128(_, scale) if text()?.split_once('.').is_some_and(|(_, f)| f.len() > *scale as usize) => {
            return Err(format!("more digits after the point than the scale {scale}"));
        }
        Int32 | Int64 | Float32 | Float64 | Utf8 | Date32 | Time64(_) | Timestamp(_, _) | Decimal128(_, _) => {
            let s: ArrayRef = Arc::new(StringArray::from(vec![text()?]));
            let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
            arrow_cast::cast_with_options(&s, t, &options).map_err(|e| e.to_string())?
        }
        other => return Err(format!("a default of type {other}, which compactd does not fill")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, TimestampMicrosecondType};
    use arrow_array::Array;
    use arrow_schema::TimeUnit;
    use serde_json::json;

    #[test]
    fn defaults_of_each_form_parse_and_repeat() {
        let one = |v: Json, t: DataType| parse(&v, &t).unwrap();
        assert_eq!(one(json!(5), DataType::Int32).as_primitive::<Int32Type>().value(0), 5);
        assert_eq!(one(json!("2017-11-16"), DataType::Date32).as_primitive::<Date32Type>().value(0), 17486);
        let ts = one(json!("2017-11-16T22:31:08.000001"), DataType::Timestamp(TimeUnit::Microsecond, None));
        assert_eq!(ts.as_primitive::<TimestampMicrosecondType>().value(0), 1_510_871_468_000_001);
        let d = one(json!("14.20"), DataType::Decimal128(9, 2));
        assert_eq!(d.as_primitive::<Decimal128Type>().value(0), 1420);
        let u = one(json!("f79c3e09-677c-4a30-8f10-e4d3d2a52d2d"), DataType::FixedSizeBinary(16));
        assert_eq!(u.as_fixed_size_binary().value(0)[..2], [0xf7, 0x9c]);
        assert_eq!(one(json!("00ff"), DataType::Binary).as_binary::<i32>().value(0), [0, 255]);
        assert!(parse(&json!("x"), &DataType::Int32).is_err(), "a value that does not parse is an error");
        assert!(parse(&json!("aé0"), &DataType::Binary).is_err(), "not hex, not a panic");
        assert!(parse(&json!("14.205"), &DataType::Decimal128(9, 2)).is_err(), "never rounded");
        assert!(parse(&json!({}), &DataType::Struct(Default::default())).is_err());
        let schema = json!({"type": "struct", "fields": [
            {"id": 1, "name": "a", "required": false, "type": "int"},
            {"id": 2, "name": "b", "required": true, "type": "string", "initial-default": "x"},
            {"id": 3, "name": "s", "required": false, "type": {"type": "struct", "fields": [
                {"id": 4, "name": "c", "required": false, "type": "long", "initial-default": 7}]}},
            {"id": 5, "name": "l", "required": false, "type": {"type": "list", "element-id": 6,
                "element": {"type": "struct", "fields": [
                    {"id": 7, "name": "e", "required": false, "type": "long", "initial-default": 8}]}}},
            {"id": 9, "name": "t", "required": false, "initial-default": {},
                "type": {"type": "struct", "fields": []}}]});
        let d = Defaults::of(&schema, |t| match t.as_str() {
            Some("string") => Ok(DataType::Utf8),
            Some("long") => Ok(DataType::Int64),
            None if t["type"] == "struct" => Ok(DataType::Struct(Default::default())),
            _ => Ok(DataType::Int32),
        })
        .unwrap();
        assert_eq!((d.has(1), d.has(2), d.has(4), d.has(7)), (Ok(false), Ok(true), Ok(true), Ok(true)));
        assert!(d.has(9).unwrap_err().contains("\"t\""), "a struct's default refuses only inputs that lack it");
        let b = d.column(2, 3).unwrap().unwrap();
        assert_eq!((b.len(), b.as_string::<i32>().value(2)), (3, "x"));
    }
}
