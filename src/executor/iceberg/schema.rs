//! An Iceberg schema as the outputs' Arrow schema, and each input's columns
//! found in it by field id, as Java's readers resolve them: the outputs of
//! a rewrite are in the table's current schema whatever schema each input
//! was written in.
//!
//! Invariants:
//! - A column is matched by its field id (`PARQUET:field_id`), never by
//!   name: a renamed column follows its id, a dropped one is left out, a
//!   column dropped and added again under one name is two columns. Files
//!   written without ids (imported from Hive) are matched through the
//!   table's `schema.name-mapping.default`; without one they are refused by
//!   name, as guessing by position could pair the wrong columns.
//! - A column the table has and an input lacks reads as its v3
//!   `initial-default` ([`super::defaults`]), else as null; a required one
//!   without a default refuses the input.
//! - Values change type only by the promotions the spec allows (int to
//!   long, float to double, a decimal's precision widened, date to
//!   timestamp) and by encodings of one type (string views, dictionaries,
//!   timestamp units coarser than the table's); anything else refuses the
//!   input naming the column, its id and both types.

use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, ListArray, MapArray, RecordBatch, RecordBatchOptions, StructArray};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};
use serde_json::Value as Json;

use super::defaults::Defaults;

pub(crate) use crate::executor::merge::parquet::schema::FIELD_ID;

/// v3 row lineage: the metadata columns a rewrite writes, and their ids.
pub const ROW_ID: &str = "_row_id";
pub const ROW_ID_FIELD: i64 = 2147483540;
pub const LAST_UPDATED: &str = "_last_updated_sequence_number";
pub const LAST_UPDATED_FIELD: i64 = 2147483539;

/// The extension name Arrow gives a `uuid` column, which the Parquet writer
/// turns into the UUID logical type.
const UUID_EXTENSION: &str = "arrow.uuid";

fn with_id(f: Field, id: i64) -> Field {
    let mut m = f.metadata().clone();
    m.insert(FIELD_ID.to_string(), id.to_string());
    f.with_metadata(m)
}

/// The Arrow type of an Iceberg type (`ty` as the metadata writes it).
fn arrow_type(ty: &Json) -> Result<(DataType, Option<&'static str>), String> {
    use DataType::*;
    if let Some(s) = ty.as_str() {
        let t = match s {
            "boolean" => Boolean,
            "int" => Int32,
            "long" => Int64,
            "float" => Float32,
            "double" => Float64,
            "date" => Date32,
            "time" => Time64(TimeUnit::Microsecond),
            "timestamp" => Timestamp(TimeUnit::Microsecond, None),
            "timestamptz" => Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            "timestamp_ns" => Timestamp(TimeUnit::Nanosecond, None),
            "timestamptz_ns" => Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
            "string" => Utf8,
            "binary" => Binary,
            "uuid" => return Ok((FixedSizeBinary(16), Some(UUID_EXTENSION))),
            s if s.starts_with("fixed[") && s.ends_with(']') => {
                let n: i32 = s[6..s.len() - 1].trim().parse().map_err(|_| format!("type {s:?}: not a fixed length"))?;
                FixedSizeBinary(n)
            }
            s if s.starts_with("decimal(") && s.ends_with(')') => {
                let (p, sc) = s[8..s.len() - 1].split_once(',').ok_or_else(|| format!("type {s:?}"))?;
                let p: u8 = p.trim().parse().map_err(|_| format!("type {s:?}: not a precision"))?;
                let sc: i8 = sc.trim().parse().map_err(|_| format!("type {s:?}: not a scale"))?;
                if p > 38 {
                    return Err(format!("type {s:?}: Iceberg decimals have at most 38 digits"));
                }
                Decimal128(p, sc)
            }
            other => return Err(format!("type {other:?}, which compactd does not rewrite")),
        };
        return Ok((t, None));
    }
    match ty["type"].as_str() {
        Some("struct") => Ok((Struct(fields(ty)?), None)),
        Some("list") => {
            let id = ty["element-id"].as_i64().ok_or("a list without element-id")?;
            let (t, ext) = arrow_type(&ty["element"])?;
            let e = extension(Field::new("element", t, !ty["element-required"].as_bool().unwrap_or(false)), ext);
            Ok((List(Arc::new(with_id(e, id))), None))
        }
        Some("map") => {
            let (kid, vid) = (ty["key-id"].as_i64(), ty["value-id"].as_i64());
            let (Some(kid), Some(vid)) = (kid, vid) else { return Err("a map without key-id or value-id".into()) };
            let (kt, kext) = arrow_type(&ty["key"])?;
            let (vt, vext) = arrow_type(&ty["value"])?;
            let key = with_id(extension(Field::new("key", kt, false), kext), kid);
            let value = extension(Field::new("value", vt, !ty["value-required"].as_bool().unwrap_or(false)), vext);
            let entries = Field::new("key_value", Struct(vec![key, with_id(value, vid)].into()), false);
            Ok((Map(Arc::new(entries), false), None))
        }
        _ => Err(format!("type {ty}, which compactd does not rewrite")),
    }
}

fn extension(f: Field, ext: Option<&str>) -> Field {
    match ext {
        Some(name) => {
            let mut m = f.metadata().clone();
            m.insert("ARROW:extension:name".to_string(), name.to_string());
            f.with_metadata(m)
        }
        None => f,
    }
}

/// The Arrow fields of a struct type (or a schema) `ty`.
fn fields(ty: &Json) -> Result<Fields, String> {
    let mut out = vec![];
    for f in ty["fields"].as_array().ok_or("a struct without fields")? {
        let name = f["name"].as_str().ok_or("a field without a name")?;
        let id = f["id"].as_i64().ok_or_else(|| format!("field {name:?} has no id"))?;
        let (t, ext) = arrow_type(&f["type"]).map_err(|e| format!("field {name:?} (id {id}): {e}"))?;
        let required = f["required"].as_bool().unwrap_or(false);
        out.push(with_id(extension(Field::new(name, t, !required), ext), id));
    }
    Ok(out.into())
}

/// The Arrow schema of an Iceberg schema, every field carrying its id.
pub fn arrow_schema(schema: &Json) -> Result<Schema, String> {
    Ok(Schema::new(fields(schema)?))
}

/// One field of the table's name mapping (`schema.name-mapping.default`).
#[derive(Debug, Clone, Default)]
pub struct Mapped {
    id: Option<i64>,
    names: Vec<String>,
    fields: Vec<Mapped>,
}

/// A table's name mapping, read from its JSON.
pub fn name_mapping(json: &str) -> Result<Vec<Mapped>, String> {
    fn parse(v: &Json) -> Result<Vec<Mapped>, String> {
        let mut out = vec![];
        for m in v.as_array().ok_or("not a list of fields")? {
            out.push(Mapped {
                id: m["field-id"].as_i64(),
                names: m["names"]
                    .as_array()
                    .map(|n| n.iter().filter_map(|n| n.as_str().map(String::from)).collect())
                    .unwrap_or_default(),
                fields: if m["fields"].is_array() { parse(&m["fields"])? } else { vec![] },
            });
        }
        Ok(out)
    }
    let v: Json = serde_json::from_str(json).map_err(|e| format!("schema.name-mapping.default is not JSON: {e}"))?;
    parse(&v).map_err(|e| format!("schema.name-mapping.default: {e}"))
}

/// How to find an input's field ids (its own, or the name mapping's), and
/// the table's defaults for the columns it lacks.
#[derive(Debug, Clone, Copy)]
struct Ids<'a> {
    how: How<'a>,
    defaults: &'a Defaults,
}

#[derive(Debug, Clone, Copy)]
enum How<'a> {
    Own,
    Mapped(&'a [Mapped]),
}

impl<'a> Ids<'a> {
    /// The id of `f` at this level, and how to find its children's.
    fn of(self, f: &Field) -> (Option<i64>, Ids<'a>) {
        let (id, how) = self.how.of(f);
        (id, Ids { how, defaults: self.defaults })
    }
}

impl<'a> How<'a> {
    fn of(self, f: &Field) -> (Option<i64>, How<'a>) {
        match self {
            How::Own => (f.metadata().get(FIELD_ID).and_then(|v| v.parse().ok()), How::Own),
            How::Mapped(level) => {
                match level.iter().find(|m| m.names.iter().any(|n| n == f.name())).or(match level {
                    // A list's element or a map's entries may be named as
                    // the writer chose: one mapped child is that one.
                    [only] => Some(only),
                    _ => None,
                }) {
                    Some(m) => (m.id, How::Mapped(&m.fields)),
                    None => (None, How::Mapped(&[])),
                }
            }
        }
    }
}

fn has_ids(fields: &Fields) -> bool {
    fields.iter().any(|f| f.metadata().contains_key(FIELD_ID))
}

fn id_of(f: &Field) -> Option<i64> {
    f.metadata().get(FIELD_ID).and_then(|v| v.parse().ok())
}

fn show(t: &DataType) -> String {
    format!("{t}")
}

/// Whether a value of type `from` may be read as `to` (both Arrow, the
/// table's `to`): one type's encodings, or a promotion the spec allows.
fn promotes(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let unit = |u: &TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    };
    match (from, to) {
        (a, b) if a == b => true,
        (Null, _) => true,
        (Dictionary(_, v), t) => promotes(v, t),
        (Utf8 | LargeUtf8 | Utf8View, Utf8) => true,
        (Binary | LargeBinary | BinaryView, Binary) => true,
        (Int8 | Int16 | Int32, Int32 | Int64) | (Int64, Int64) => true,
        (UInt8 | UInt16, Int32 | Int64) | (UInt32, Int64) => true,
        (Float16 | Float32, Float32 | Float64) => true,
        (Decimal32(p, s) | Decimal64(p, s) | Decimal128(p, s) | Decimal256(p, s), Decimal128(q, t)) => s == t && p <= q,
        (Date32 | Date64, Date32) => true,
        (Date32 | Date64, Timestamp(_, None)) => true,
        (Timestamp(a, za), Timestamp(b, zb)) => za.is_some() == zb.is_some() && unit(a) <= unit(b),
        (Time32(_) | Time64(_), Time64(_)) => true,
        _ => false,
    }
}

/// Why `file`'s field `from` (found by id) cannot be read as the table's
/// `to`, if it cannot.
fn check_field(from: &Field, to: &Field, ids: Ids, at: &str) -> Result<(), String> {
    use DataType::*;
    let (f, t) = (plain(from.data_type()), to.data_type());
    let nested = |fs: &Fields, ts: &Fields, ids: Ids| check_fields(fs, ts, ids, at);
    match (f, t) {
        (Struct(fs), Struct(ts)) => nested(fs, ts, ids),
        (List(fe) | LargeList(fe) | ListView(fe) | LargeListView(fe) | FixedSizeList(fe, _), List(te)) => {
            let (_, child) = ids.of(fe);
            check_field(fe, te, child, &format!("{at}.element"))
        }
        (Map(fe, _), Map(te, _)) => {
            let (_, child) = ids.of(fe);
            let (Struct(fk), Struct(tk)) = (fe.data_type(), te.data_type()) else {
                return Err(format!("{at}: a map without key and value"));
            };
            for i in 0..2 {
                let (_, grand) = child.of(&fk[i]);
                check_field(&fk[i], &tk[i], grand, &format!("{at}.{}", tk[i].name()))?;
            }
            Ok(())
        }
        (f, t) if promotes(f, t) => Ok(()),
        (f, t) => Err(format!(
            "column {at:?} (field id {}) is {} in the file but {} in the table's schema, not a promotion Iceberg \
             allows",
            id_of(to).unwrap_or(-1),
            show(f),
            show(t)
        )),
    }
}

fn plain(t: &DataType) -> &DataType {
    match t {
        DataType::Dictionary(_, v) => plain(v),
        t => t,
    }
}

/// The index of the child of `fields` whose id is `id`, and how to find its
/// children's ids.
fn find<'a>(fields: &Fields, id: i64, ids: Ids<'a>) -> Option<(usize, Ids<'a>)> {
    fields.iter().enumerate().find_map(|(i, f)| match ids.of(f) {
        (Some(x), child) if x == id => Some((i, child)),
        _ => None,
    })
}

fn check_fields(from: &Fields, to: &Fields, ids: Ids, at: &str) -> Result<(), String> {
    for t in to {
        let id = id_of(t).expect("the table's fields carry ids");
        let name = if at.is_empty() { t.name().to_string() } else { format!("{at}.{}", t.name()) };
        match find(from, id, ids) {
            Some((i, child)) => check_field(&from[i], t, child, &name)?,
            None if ids.defaults.has(id).map_err(|e| format!("the file lacks column {name:?}, and {e}"))? => {}
            None if t.is_nullable() => {}
            None => {
                return Err(format!(
                    "the table's required column {name:?} (field id {id}) is not in the file, and no default fills it"
                ))
            }
        }
    }
    Ok(())
}

/// Reads inputs into a table's schema by field id.
#[derive(Debug, Clone)]
pub struct ById {
    pub schema: SchemaRef,
    mapping: Option<Vec<Mapped>>,
    defaults: Defaults,
}

impl ById {
    /// The table's current `schema` (JSON) and its properties (for the
    /// name mapping).
    pub fn new(schema: &Json, properties: &std::collections::BTreeMap<String, String>) -> Result<ById, String> {
        let mapping = match properties.get("schema.name-mapping.default") {
            Some(m) => Some(name_mapping(m)?),
            None => None,
        };
        let defaults = Defaults::of(schema, |t| arrow_type(t).map(|(t, _)| t))?;
        Ok(ById { schema: Arc::new(arrow_schema(schema)?), mapping, defaults })
    }

    /// The same, with v3's row lineage columns last (`_row_id` and
    /// `_last_updated_sequence_number`, optional longs of reserved ids):
    /// a rewrite keeps each row's, as the spec requires.
    pub fn with_lineage(mut self) -> ById {
        let mut fields: Vec<FieldRef> = self.schema.fields().iter().cloned().collect();
        fields.push(Arc::new(with_id(Field::new(ROW_ID, DataType::Int64, true), ROW_ID_FIELD)));
        fields.push(Arc::new(with_id(Field::new(LAST_UPDATED, DataType::Int64, true), LAST_UPDATED_FIELD)));
        self.schema = Arc::new(Schema::new(fields));
        self
    }

    /// Reads into `schema` (Arrow, its fields carrying ids), for files
    /// with ids of their own.
    pub fn of_arrow(schema: SchemaRef) -> ById {
        ById { schema, mapping: None, defaults: Defaults::default() }
    }

    fn ids<'a>(&'a self, file: &Fields) -> Result<Ids<'a>, String> {
        let defaults = &self.defaults;
        if has_ids(file) {
            return Ok(Ids { how: How::Own, defaults });
        }
        match &self.mapping {
            Some(m) => Ok(Ids { how: How::Mapped(m), defaults }),
            None => Err("the file's columns carry no field ids and the table has no schema.name-mapping.default \
                         to find them by; compactd does not pair columns by position"
                .into()),
        }
    }

    /// Why the file of schema `file` cannot be read into the table's
    /// schema, if it cannot.
    pub fn check(&self, file: &Schema) -> Result<(), String> {
        let ids = self.ids(file.fields())?;
        check_fields(file.fields(), self.schema.fields(), ids, "")
    }

    /// `batch` in the table's schema.
    pub fn project(&self, batch: &RecordBatch) -> Result<RecordBatch, String> {
        let schema = batch.schema();
        let ids = self.ids(schema.fields())?;
        let rows = batch.num_rows();
        let columns = project_children(schema.fields(), batch.columns(), self.schema.fields(), ids, rows)?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options).map_err(|e| e.to_string())
    }
}

fn project_children(
    from: &Fields,
    arrays: &[ArrayRef],
    to: &Fields,
    ids: Ids,
    rows: usize,
) -> Result<Vec<ArrayRef>, String> {
    let mut out = Vec::with_capacity(to.len());
    for t in to {
        let id = id_of(t).expect("the table's fields carry ids");
        out.push(match find(from, id, ids) {
            Some((i, child)) => project_array(&arrays[i], t, child)?,
            None => match ids.defaults.column(id, rows) {
                Some(d) => d?,
                None => new_null_array(t.data_type(), rows),
            },
        });
    }
    Ok(out)
}

fn project_array(a: &ArrayRef, to: &FieldRef, ids: Ids) -> Result<ArrayRef, String> {
    use DataType::*;
    let a = match a.data_type() {
        Dictionary(_, v) => cast(a, v)?,
        _ => a.clone(),
    };
    match (a.data_type(), to.data_type()) {
        (Null, t) => Ok(new_null_array(t, a.len())),
        (Struct(fs), Struct(ts)) => {
            let s = a.as_any().downcast_ref::<StructArray>().expect("a struct type");
            let children = project_children(fs, s.columns(), ts, ids, s.len())?;
            Ok(Arc::new(StructArray::try_new(ts.clone(), children, s.nulls().cloned()).map_err(|e| e.to_string())?))
        }
        (LargeList(e) | ListView(e) | LargeListView(e) | FixedSizeList(e, _), List(_)) => {
            let as_list = cast(&a, &List(e.clone()))?;
            project_array(&as_list, to, ids)
        }
        (List(fe), List(te)) => {
            let l = a.as_any().downcast_ref::<ListArray>().expect("a list type");
            let (_, child) = ids.of(fe);
            let values = project_array(l.values(), te, child)?;
            let l = ListArray::try_new(te.clone(), l.offsets().clone(), values, l.nulls().cloned());
            Ok(Arc::new(l.map_err(|e| e.to_string())?))
        }
        (Map(fe, _), Map(te, sorted)) => {
            let m = a.as_any().downcast_ref::<MapArray>().expect("a map type");
            let (_, child) = ids.of(fe);
            let (Struct(fk), Struct(tk)) = (fe.data_type(), te.data_type()) else {
                return Err("a map without key and value".into());
            };
            let e = m.entries();
            let mut children = vec![];
            for i in 0..2 {
                let (_, grand) = child.of(&fk[i]);
                children.push(project_array(e.column(i), &tk[i], grand)?);
            }
            let e = StructArray::try_new(tk.clone(), children, e.nulls().cloned()).map_err(|e| e.to_string())?;
            let m = MapArray::try_new(te.clone(), m.offsets().clone(), e, m.nulls().cloned(), *sorted);
            Ok(Arc::new(m.map_err(|e| e.to_string())?))
        }
        (f, t) if f == t => Ok(a),
        (_, t) => cast(&a, t),
    }
}

/// The `parquet` rewrite's cast: a value that does not fit fails, never
/// turns null.
fn cast(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, String> {
    crate::executor::merge::parquet::schema::cast(a, to).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int32Array, StringArray};
    use serde_json::json;
    use std::collections::HashMap;

    /// The ids of a schema's fields by name path (`a.b`), for messages.
    fn ids_by_name(schema: &Schema) -> HashMap<String, i64> {
        fn walk(fields: &Fields, at: &str, out: &mut HashMap<String, i64>) {
            for f in fields {
                let name = if at.is_empty() { f.name().clone() } else { format!("{at}.{}", f.name()) };
                if let Some(id) = id_of(f) {
                    out.insert(name.clone(), id);
                }
                if let DataType::Struct(c) = f.data_type() {
                    walk(c, &name, out);
                }
            }
        }
        let mut out = HashMap::new();
        walk(schema.fields(), "", &mut out);
        out
    }

    fn field(name: &str, t: DataType, id: i64) -> Field {
        with_id(Field::new(name, t, true), id)
    }

    #[test]
    fn columns_are_found_by_id_renamed_dropped_added_and_promoted() {
        // The table: id (1) now long, b (2) renamed from a, note (4) added;
        // c (3) was dropped.
        let table = json!({"type": "struct", "schema-id": 3, "fields": [
            {"id": 4, "name": "note", "required": false, "type": "string"},
            {"id": 2, "name": "b", "required": false, "type": "string"},
            {"id": 1, "name": "id", "required": true, "type": "long"},
        ]});
        let by_id = ById::new(&table, &Default::default()).unwrap();
        let file = Arc::new(Schema::new(vec![
            with_id(Field::new("id", DataType::Int32, false), 1),
            field("a", DataType::Utf8, 2),
            field("c", DataType::Utf8, 3),
        ]));
        by_id.check(&file).unwrap();
        let batch = RecordBatch::try_new(
            file,
            vec![
                Arc::new(Int32Array::from(vec![7, 8])),
                Arc::new(StringArray::from(vec!["x", "y"])),
                Arc::new(StringArray::from(vec!["dropped", "dropped"])),
            ],
        )
        .unwrap();
        let out = by_id.project(&batch).unwrap();
        assert_eq!(out.schema(), by_id.schema);
        assert_eq!(out.column(0).null_count(), 2, "an added column reads as null");
        assert_eq!(out.column(1).as_string::<i32>(), &StringArray::from(vec!["x", "y"]), "renamed: by id");
        assert_eq!(out.column(2).as_primitive::<Int64Type>().values(), &[7, 8], "int read as long");
    }

    #[test]
    fn a_reused_name_with_another_id_is_another_column() {
        let table = json!({"type": "struct", "fields": [
            {"id": 5, "name": "x", "required": false, "type": "string"},
        ]});
        let by_id = ById::new(&table, &Default::default()).unwrap();
        let file = Arc::new(Schema::new(vec![field("x", DataType::Utf8, 2)]));
        let batch = RecordBatch::try_new(file, vec![Arc::new(StringArray::from(vec!["old"]))]).unwrap();
        let out = by_id.project(&batch).unwrap();
        assert_eq!(out.column(0).null_count(), 1, "the dropped x's values must not fill the new x");
    }

    #[test]
    fn what_is_not_a_promotion_or_has_no_ids_is_refused_by_name() {
        let table = json!({"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": false, "type": "int"},
            {"id": 2, "name": "r", "required": true, "type": "string"},
        ]});
        let by_id = ById::new(&table, &Default::default()).unwrap();
        let narrowed = Schema::new(vec![field("id", DataType::Int64, 1), field("r", DataType::Utf8, 2)]);
        let e = by_id.check(&narrowed).unwrap_err();
        assert!(e.contains("\"id\"") && e.contains("field id 1") && e.contains("promotion"), "{e}");
        let missing = Schema::new(vec![field("id", DataType::Int32, 1)]);
        let e = by_id.check(&missing).unwrap_err();
        assert!(e.contains("required column \"r\""), "{e}");
        let no_ids = Schema::new(vec![Field::new("id", DataType::Int32, true), Field::new("r", DataType::Utf8, true)]);
        let e = by_id.check(&no_ids).unwrap_err();
        assert!(e.contains("name-mapping"), "{e}");
        // With a name mapping, the same file is read by the names it maps.
        let props = [(
            "schema.name-mapping.default".to_string(),
            r#"[{"field-id": 1, "names": ["id", "ident"]}, {"field-id": 2, "names": ["r"]}]"#.to_string(),
        )]
        .into();
        ById::new(&table, &props).unwrap().check(&no_ids).unwrap();
    }

    #[test]
    fn nested_types_carry_their_ids() {
        let table = json!({"type": "struct", "fields": [
            {"id": 1, "name": "s", "required": false, "type": {"type": "struct", "fields": [
                {"id": 2, "name": "y", "required": false, "type": "decimal(10, 2)"}]}},
            {"id": 3, "name": "l", "required": false, "type": {"type": "list", "element-id": 4,
                "element": "uuid", "element-required": true}},
            {"id": 5, "name": "m", "required": false, "type": {"type": "map", "key-id": 6, "key": "string",
                "value-id": 7, "value": "fixed[3]", "value-required": false}},
        ]});
        let s = arrow_schema(&table).unwrap();
        let ids = ids_by_name(&s);
        assert_eq!((ids["s"], ids["s.y"], ids["l"], ids["m"]), (1, 2, 3, 5));
        let DataType::List(e) = s.field(1).data_type() else { panic!() };
        assert_eq!((id_of(e), e.data_type(), e.is_nullable()), (Some(4), &DataType::FixedSizeBinary(16), false));
        assert_eq!(e.metadata()["ARROW:extension:name"], "arrow.uuid");
        assert!(promotes(&DataType::Decimal128(9, 2), &DataType::Decimal128(10, 2)));
        assert!(!promotes(&DataType::Decimal128(9, 3), &DataType::Decimal128(10, 2)));
        assert!(!promotes(&DataType::Float64, &DataType::Float32));
    }
}
