//! Which inputs may share an output, and how their rows are made to fit the
//! output's schema: as strict as the readers of a table, no stricter.
//!
//! The output's schema is the union of the inputs' (fields in the order they
//! first appear). Two inputs may differ in what readers resolve anyway:
//! - a column, or a struct's field, missing from some inputs, if it is
//!   nullable where present: its rows from those inputs are null (Delta:
//!   "Columns present in the schema of the table MAY be missing from data
//!   files");
//! - nullability (the output's field is nullable if any input's is);
//! - the names of list and map children (`item` / `element`, `entries` /
//!   `key_value`), which readers resolve by position;
//! - field order (resolved by name) and field metadata other than
//!   `PARQUET:field_id`;
//! - Arrow encodings of one Parquet type (`Utf8` / `LargeUtf8` / views /
//!   dictionaries, binary likewise, `List` / `LargeList`, `Date32` /
//!   `Date64`, `Decimal128` / `Decimal256` of one precision and scale, the
//!   zone name of a UTC-adjusted timestamp), timestamp units (the output
//!   takes the finest, a lossless cast) and a column of Arrow's `Null` type
//!   (all nulls).
//!
//! Anything else is a conflict naming the field and both files: another
//! type, another field id, or a missing field that is not nullable.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

/// The field metadata key holding a Parquet field id.
pub(crate) use parquet::arrow::PARQUET_FIELD_ID_META_KEY as FIELD_ID;

/// The union of the schemas seen so far.
#[derive(Debug, Default)]
pub struct Union {
    fields: Vec<FieldRef>,
    origin: Seen,
    files: usize,
}

/// What the union has seen: field path -> the first file holding the field
/// (named in conflicts), and whether the table lets a column's type widen.
#[derive(Debug, Default)]
struct Seen {
    files: BTreeMap<String, String>,
    widen: bool,
}

impl std::ops::Deref for Seen {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.files
    }
}

impl std::ops::DerefMut for Seen {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.files
    }
}

impl Union {
    /// A union of files of a table whose columns' types may have widened
    /// (Delta's type widening): a column typed narrower in some files and
    /// wider in others takes the wider type, to which its values are cast.
    /// The widenings are Delta's: integers to wider integers, to doubles
    /// and to decimals with room for them, floats to doubles, dates to
    /// timestamps without a zone, decimals to ones of as many integer and
    /// fraction digits or more.
    pub fn widening() -> Self {
        Union { origin: Seen { widen: true, ..Seen::default() }, ..Union::default() }
    }

    /// Folds in `schema`, read from `file`; a conflict is an error naming
    /// the field and both files (the union is not to be used after it).
    pub fn add(&mut self, file: &str, schema: &Schema) -> Result<(), String> {
        let first = self.files == 0;
        self.files += 1;
        // The common case: another file of the same schema.
        if !first && schema.fields().iter().eq(self.fields.iter()) {
            return Ok(());
        }
        self.fields = merge_fields(&self.fields, schema.fields(), "", file, first, &mut self.origin)?;
        Ok(())
    }

    /// The union's fields.
    pub fn fields(&self) -> Fields {
        self.fields.clone().into()
    }
}

fn path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// The union of `have` (from earlier files) and `new` (from `file`), matched
/// by name.
fn merge_fields(
    have: &[FieldRef],
    new: &Fields,
    parent: &str,
    file: &str,
    first: bool,
    origin: &mut Seen,
) -> Result<Vec<FieldRef>, String> {
    let mut out: Vec<FieldRef> = Vec::with_capacity(have.len().max(new.len()));
    for h in have {
        let at = path(parent, h.name());
        match new.iter().find(|n| n.name() == h.name()) {
            Some(n) => out.push(Arc::new(merge_field(h, n, &at, file, origin)?)),
            None if h.is_nullable() => out.push(h.clone()),
            None => {
                return Err(format!(
                    "field {at:?} is missing from {file} but not nullable in {}",
                    origin.get(&at).map(String::as_str).unwrap_or("an earlier file")
                ))
            }
        }
    }
    for n in new.iter().filter(|n| !have.iter().any(|h| h.name() == n.name())) {
        let at = path(parent, n.name());
        // Spark and Hive resolve columns case-insensitively: `ID` beside
        // `id` would be two columns here and an ambiguous one there.
        if let Some(h) = out.iter().find(|h| h.name().eq_ignore_ascii_case(n.name())) {
            return Err(format!(
                "field {at:?} of {file} and field {:?} differ only in case, which readers resolving columns \
                 case-insensitively (Spark, Hive) cannot tell apart",
                path(parent, h.name())
            ));
        }
        if !first && !n.is_nullable() {
            let before = origin.get(parent).map(String::as_str).unwrap_or("the files before it");
            return Err(format!("field {at:?} of {file} is not nullable and is missing from {before}"));
        }
        record_origins(n, &at, file, origin);
        out.push(n.clone());
    }
    Ok(out)
}

fn record_origins(f: &Field, at: &str, file: &str, origin: &mut Seen) {
    origin.entry(at.to_string()).or_insert_with(|| file.to_string());
    if let DataType::Struct(children) = f.data_type() {
        for c in children {
            record_origins(c, &path(at, c.name()), file, origin);
        }
    }
}

/// Two files' versions of the field at `at`.
fn merge_field(a: &Field, b: &Field, at: &str, file: &str, origin: &mut Seen) -> Result<Field, String> {
    let other = origin.get(at).cloned().unwrap_or_else(|| "an earlier file".into());
    if let (Some(x), Some(y)) = (a.metadata().get(FIELD_ID), b.metadata().get(FIELD_ID)) {
        if x != y {
            return Err(format!("field {at:?} has field id {y} in {file} but {x} in {other}"));
        }
    }
    let t = merge_type(a.data_type(), b.data_type(), at, file, origin).map_err(|e| {
        e.unwrap_or_else(|| {
            format!("field {at:?} has type {} in {file} but {} in {other}", b.data_type(), a.data_type())
        })
    })?;
    let mut f = a.clone().with_data_type(t).with_nullable(a.is_nullable() || b.is_nullable());
    if !a.metadata().contains_key(FIELD_ID) {
        if let Some(id) = b.metadata().get(FIELD_ID) {
            let mut m = a.metadata().clone();
            m.insert(FIELD_ID, id.clone());
            f = f.with_metadata(m);
        }
    }
    Ok(f)
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

fn finer(a: TimeUnit, b: TimeUnit) -> TimeUnit {
    let rank = |u: &TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    };
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}

/// The output type for a field typed `a` in earlier files and `b` in
/// `file`. `Err(None)`: a plain conflict of the two types (the caller words
/// it); `Err(Some(_))`: a conflict deeper down, already worded.
fn merge_type(a: &DataType, b: &DataType, at: &str, file: &str, origin: &mut Seen) -> Result<DataType, Option<String>> {
    use DataType::*;
    if a == b {
        return Ok(a.clone());
    }
    Ok(match (a, b) {
        (Null, x) | (x, Null) => x.clone(),
        (Dictionary(_, v), x) | (x, Dictionary(_, v)) => merge_type(&plain(v), &plain(x), at, file, origin)?,
        (x, y) if is_string(x) && is_string(y) => x.clone(),
        (x, y) if is_binary(x) && is_binary(y) => x.clone(),
        (Date32, Date64) | (Date64, Date32) => a.clone(),
        (Timestamp(ua, za), Timestamp(ub, zb)) if za.is_some() == zb.is_some() => {
            Timestamp(finer(*ua, *ub), za.clone())
        }
        (Decimal128(p, s), Decimal256(q, t)) | (Decimal256(p, s), Decimal128(q, t)) if p == q && s == t => a.clone(),
        (x, y) if origin.widen && widens(x, y) => y.clone(),
        (x, y) if origin.widen && widens(y, x) => x.clone(),
        (Struct(fa), Struct(fb)) => {
            let fields = merge_fields(fa.iter().cloned().collect::<Vec<_>>().as_slice(), fb, at, file, false, origin)
                .map_err(Some)?;
            Struct(fields.into())
        }
        (
            List(ea) | LargeList(ea) | ListView(ea) | LargeListView(ea) | FixedSizeList(ea, _),
            List(eb) | LargeList(eb) | ListView(eb) | LargeListView(eb) | FixedSizeList(eb, _),
        ) => {
            let e = Arc::new(merge_child(ea, eb, &path(at, "element"), file, origin)?);
            match (a, b) {
                (FixedSizeList(_, n), FixedSizeList(_, m)) if n == m => FixedSizeList(e, *n),
                (LargeList(_), _) => LargeList(e),
                _ => List(e),
            }
        }
        (Map(ea, sorted), Map(eb, _)) => {
            // Entries are matched by position: their names do not matter.
            let (Struct(ka), Struct(kb)) = (ea.data_type(), eb.data_type()) else {
                return Err(None);
            };
            if ka.len() != 2 || kb.len() != 2 {
                return Err(None);
            }
            let key = merge_child(&ka[0], &kb[0], &path(at, "key"), file, origin)?;
            let value = merge_child(&ka[1], &kb[1], &path(at, "value"), file, origin)?;
            let entries = ea.as_ref().clone().with_data_type(Struct(vec![key, value].into()));
            Map(Arc::new(entries), *sorted)
        }
        _ => return Err(None),
    })
}

/// Whether a value of type `from` may be read as `to` by Delta's type
/// widening (PROTOCOL.md "Type Widening").
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let int_bits = |t: &DataType| match t {
        Int8 => Some(8),
        Int16 => Some(16),
        Int32 => Some(32),
        Int64 => Some(64),
        _ => None,
    };
    // Decimal digits an integer type needs.
    let int_digits = |t: &DataType| match t {
        Int8 => Some(3),
        Int16 => Some(5),
        Int32 => Some(10),
        Int64 => Some(20),
        _ => None,
    };
    match (from, to) {
        (x, y) if int_bits(x).is_some() && int_bits(y).is_some() => int_bits(x) < int_bits(y),
        (Int8 | Int16 | Int32 | Float32, Float64) => true,
        (Date32, Timestamp(TimeUnit::Microsecond, None)) => true,
        (x, Decimal128(p, s)) if int_digits(x).is_some() => (*p as i32 - *s as i32) >= int_digits(x).unwrap(),
        (Decimal128(p, s), Decimal128(q, t)) => t >= s && (*q as i32 - *t as i32) >= (*p as i32 - *s as i32),
        _ => false,
    }
}

/// A list element or a map key or value: named as in `a`, whatever `b`
/// calls it.
fn merge_child(a: &Field, b: &Field, at: &str, file: &str, origin: &mut Seen) -> Result<Field, Option<String>> {
    let renamed = b.clone().with_name(a.name());
    merge_field(a, &renamed, at, file, origin).map_err(Some)
}

fn plain(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, v) => plain(v),
        t => t.clone(),
    }
}

/// `batch` with the output's schema: columns matched by name, missing ones
/// null, each array rebuilt or cast where its type differs.
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if batch.schema().fields() == schema.fields() {
        return RecordBatch::try_new(schema.clone(), batch.columns().to_vec());
    }
    let rows = batch.num_rows();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        columns.push(match batch.column_by_name(f.name()) {
            Some(c) => conform_array(c, f.data_type())?,
            None => new_null_array(f.data_type(), rows),
        });
    }
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
}

fn conform_array(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    use DataType::*;
    if a.data_type() == to {
        return Ok(a.clone());
    }
    if a.data_type() == &Null {
        return Ok(new_null_array(to, a.len()));
    }
    match to {
        Struct(fields) if matches!(a.data_type(), Struct(_)) => {
            let s = a.as_any().downcast_ref::<StructArray>().expect("a struct type");
            let mut children = Vec::with_capacity(fields.len());
            for f in fields {
                children.push(match s.column_by_name(f.name()) {
                    Some(c) => conform_array(c, f.data_type())?,
                    None => new_null_array(f.data_type(), s.len()),
                });
            }
            Ok(Arc::new(StructArray::try_new(fields.clone(), children, s.nulls().cloned())?))
        }
        List(element) => {
            let list = match a.data_type() {
                List(_) => a.clone(),
                // Another list encoding: to a `List` of its own element first.
                LargeList(e) | ListView(e) | LargeListView(e) | FixedSizeList(e, _) => cast(a, &List(e.clone()))?,
                _ => return cast(a, to),
            };
            let l = list.as_any().downcast_ref::<ListArray>().expect("a list type");
            let values = conform_array(l.values(), element.data_type())?;
            Ok(Arc::new(ListArray::try_new(element.clone(), l.offsets().clone(), values, l.nulls().cloned())?))
        }
        Map(entries, sorted) if matches!(a.data_type(), Map(..)) => {
            let m = a.as_any().downcast_ref::<MapArray>().expect("a map type");
            let Struct(want) = entries.data_type() else {
                return cast(a, to);
            };
            let e = m.entries();
            // By position: the entries' names may differ.
            let children = vec![
                conform_array(e.column(0), want[0].data_type())?,
                conform_array(e.column(1), want[1].data_type())?,
            ];
            let e = StructArray::try_new(want.clone(), children, e.nulls().cloned())?;
            Ok(Arc::new(MapArray::try_new(entries.clone(), m.offsets().clone(), e, m.nulls().cloned(), *sorted)?))
        }
        _ => cast(a, to),
    }
}

/// Arrow's cast, failing where a value does not fit the target type (a
/// timestamp past the range of a finer unit): by default a cast turns such
/// a value into null, which would change a row silently.
pub(crate) fn cast(a: &ArrayRef, to: &DataType) -> Result<ArrayRef, arrow_schema::ArrowError> {
    let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
    arrow_cast::cast_with_options(a, to, &options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, LargeStringArray, StringArray};

    impl Union {
        fn widening_of(schemas: &[&Schema]) -> Fields {
            let mut u = Union::widening();
            for (i, s) in schemas.iter().enumerate() {
                u.add(&format!("f{i}"), s).unwrap();
            }
            u.fields()
        }
    }

    fn union(schemas: &[(&str, Schema)]) -> Result<Schema, String> {
        let mut u = Union::default();
        for (file, s) in schemas {
            u.add(file, s)?;
        }
        Ok(Schema::new(u.fields()))
    }

    fn list(child: &str) -> DataType {
        DataType::List(Arc::new(Field::new(child, DataType::Int32, true)))
    }

    #[test]
    fn list_child_names_added_columns_and_nullability_are_not_conflicts() {
        let a = Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("l", list("item"), true)]);
        let b = Schema::new(vec![
            Field::new("l", list("element"), true),
            Field::new("id", DataType::Int64, true),
            Field::new("added", DataType::Utf8, true),
        ]);
        let u = union(&[("a", a), ("b", b)]).unwrap();
        let names: Vec<&str> = u.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "l", "added"]);
        assert!(u.field(0).is_nullable(), "nullable in one input: nullable");
        assert_eq!(u.field(1).data_type(), &list("item"), "the first file's child name");
    }

    #[test]
    fn a_widened_column_takes_its_wider_type_only_where_the_table_widens_types() {
        use arrow_array::{Date32Array, Int32Array};
        let narrow = Schema::new(vec![Field::new("x", DataType::Int32, true), Field::new("d", DataType::Date32, true)]);
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        let wide = Schema::new(vec![Field::new("x", DataType::Int64, true), Field::new("d", ts.clone(), true)]);
        assert!(union(&[("f1", narrow.clone()), ("f2", wide.clone())]).unwrap_err().contains("\"x\""));
        for order in [[&narrow, &wide], [&wide, &narrow]] {
            let mut u = Union::widening();
            for (i, s) in order.iter().enumerate() {
                u.add(&format!("f{i}"), s).unwrap();
            }
            let types: Vec<DataType> = u.fields().iter().map(|f| f.data_type().clone()).collect();
            assert_eq!(types, vec![DataType::Int64, ts.clone()]);
        }
        let out = Arc::new(Schema::new(Union::widening_of(&[&narrow, &wide])));
        let batch = RecordBatch::try_new(
            Arc::new(narrow.clone()),
            vec![Arc::new(Int32Array::from(vec![7])), Arc::new(Date32Array::from(vec![1]))],
        )
        .unwrap();
        let conformed = conform(batch, &out).unwrap();
        assert_eq!(conformed.column(0).as_primitive::<Int64Type>().value(0), 7);
        // Never narrower, nor to another kind.
        assert!(!widens(&DataType::Int64, &DataType::Int32));
        assert!(!widens(&DataType::Float64, &DataType::Float32));
        assert!(!widens(&DataType::Int64, &DataType::Float64), "a long does not fit a double");
        assert!(!widens(&DataType::Decimal128(10, 2), &DataType::Decimal128(10, 3)), "an integer digit lost");
        assert!(widens(&DataType::Decimal128(10, 2), &DataType::Decimal128(12, 4)));
        assert!(widens(&DataType::Int32, &DataType::Decimal128(12, 2)));
        assert!(!widens(&DataType::Int32, &DataType::Decimal128(10, 2)));
    }

    #[test]
    fn real_conflicts_name_the_field_and_both_files() {
        let a = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let b = Schema::new(vec![Field::new("x", DataType::Utf8, true)]);
        let e = union(&[("f1", a.clone()), ("f2", b)]).unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("f1") && e.contains("f2"), "{e}");
        let required = Schema::new(vec![Field::new("x", DataType::Int64, false)]);
        let empty = Schema::empty();
        let e = union(&[("f1", required.clone()), ("f2", empty.clone())]).unwrap_err();
        assert!(e.contains("missing from f2") && e.contains("f1"), "{e}");
        let e = union(&[("f1", empty), ("f2", required)]).unwrap_err();
        assert!(e.contains("f2") && e.contains("not nullable"), "{e}");
        let id = |n: &str| {
            Field::new("x", DataType::Int64, true)
                .with_metadata(std::collections::HashMap::from([(FIELD_ID.to_string(), n.to_string())]))
        };
        let e = union(&[("f1", Schema::new(vec![id("1")])), ("f2", Schema::new(vec![id("2")]))]).unwrap_err();
        assert!(e.contains("field id"), "{e}");
        let nested = |t: DataType| {
            Schema::new(vec![Field::new("s", DataType::Struct(vec![Field::new("y", t, true)].into()), true)])
        };
        let e = union(&[("f1", nested(DataType::Int32)), ("f2", nested(DataType::Float64))]).unwrap_err();
        assert!(e.contains("\"s.y\"") && e.contains("f1") && e.contains("f2"), "{e}");
    }

    #[test]
    fn rows_are_conformed_by_name_with_nulls_for_missing_columns() {
        let out = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("added", DataType::Int64, true),
        ]));
        let input =
            Schema::new(vec![Field::new("s", DataType::LargeUtf8, true), Field::new("id", DataType::Int64, false)]);
        let batch = RecordBatch::try_new(
            Arc::new(input),
            vec![Arc::new(LargeStringArray::from(vec!["a", "b"])), Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let got = conform(batch, &out).unwrap();
        assert_eq!(got.schema(), out);
        assert_eq!(got.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
        assert_eq!(got.column(1).as_string::<i32>(), &StringArray::from(vec!["a", "b"]));
        assert_eq!(got.column(2).null_count(), 2);
    }
}
