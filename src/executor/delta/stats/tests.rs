use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit as ArrowUnit};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde_json::json;

use super::*;

fn names(columns: &[Column]) -> Vec<String> {
    let mut out = vec![];
    for c in columns {
        match c {
            Column::Struct { name, fields } => out.extend(names(fields).into_iter().map(|n| format!("{name}.{n}"))),
            c => out.push(c.name().to_string()),
        }
    }
    out
}

/// A file of four rows in two row groups, written as the rewrite writes
/// (arrow-rs, chunk statistics), with `kv` in its footer.
fn footer(kv: &[(&str, &str)]) -> ParquetMetaData {
    let st =
        DataType::Struct(vec![Field::new("x", DataType::Int64, true), Field::new("y", DataType::Utf8, true)].into());
    let l = DataType::List(Arc::new(Field::new("element", DataType::Int64, true)));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("i", DataType::Int32, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("dt", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(ArrowUnit::Microsecond, Some("UTC".into())), true),
        Field::new("ntz", DataType::Timestamp(ArrowUnit::Microsecond, None), true),
        Field::new("dec", DataType::Decimal128(12, 2), true),
        Field::new("b", DataType::Boolean, true),
        Field::new("f", DataType::Float64, true),
        Field::new("st", st.clone(), true),
        Field::new("l", l, true),
    ]));
    let long = "a".repeat(40);
    let mut lists = ListBuilder::new(Int64Builder::new()).with_field(Field::new("element", DataType::Int64, true));
    for v in [Some(vec![Some(1)]), None, Some(vec![]), Some(vec![None])] {
        lists.append_option(v);
    }
    let DataType::Struct(st_fields) = st else { unreachable!() };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
        Arc::new(Int32Array::from(vec![Some(5), None, Some(-7), Some(0)])),
        Arc::new(StringArray::from(vec![Some(long.as_str()), Some("b"), None, Some("ab")])),
        // 0001-01-01, 2020-05-06
        Arc::new(Date32Array::from(vec![Some(-719_162), Some(18_388), None, None])),
        // 2020-01-01T00:00:00.123456Z, 1500-01-01T00:00:00Z
        Arc::new(
            TimestampMicrosecondArray::from(vec![
                Some(1_577_836_800_123_456),
                Some(-14_831_769_600_000_000),
                None,
                None,
            ])
            .with_timezone("UTC"),
        ),
        Arc::new(TimestampMicrosecondArray::from(vec![Some(1_577_836_800_123_456), None, None, Some(1_000)])),
        Arc::new(
            Decimal128Array::from(vec![Some(123), Some(-10_050), None, Some(5)])
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ),
        Arc::new(BooleanArray::from(vec![Some(true), Some(false), None, None])),
        Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), None, None])),
        Arc::new(
            StructArray::try_new(
                st_fields,
                vec![
                    Arc::new(Int64Array::from(vec![Some(1), None, None, Some(9)])),
                    Arc::new(StringArray::from(vec![Some("q"), None, Some("r"), None])),
                ],
                Some(vec![true, false, true, true].into()),
            )
            .unwrap(),
        ),
        Arc::new(lists.finish()),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let props = WriterProperties::builder()
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(2))
        .set_key_value_metadata(Some(
            kv.iter().map(|(k, v)| KeyValue { key: k.to_string(), value: Some(v.to_string()) }).collect(),
        ))
        .build();
    let mut out = vec![];
    let mut w = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap()
}

fn metadata(configuration: &[(&str, &str)], partition_columns: &[&str], extra: &[(&str, &str)]) -> Metadata {
    let mut fields = vec![
        json!({"name": "id", "type": "long", "nullable": false, "metadata": {}}),
        json!({"name": "i", "type": "integer", "nullable": true, "metadata": {}}),
        json!({"name": "s", "type": "string", "nullable": true, "metadata": {}}),
        json!({"name": "dt", "type": "date", "nullable": true, "metadata": {}}),
        json!({"name": "ts", "type": "timestamp", "nullable": true, "metadata": {}}),
        json!({"name": "ntz", "type": "timestamp_ntz", "nullable": true, "metadata": {}}),
        json!({"name": "dec", "type": "decimal(12,2)", "nullable": true, "metadata": {}}),
        json!({"name": "b", "type": "boolean", "nullable": true, "metadata": {}}),
        json!({"name": "f", "type": "double", "nullable": true, "metadata": {}}),
        json!({"name": "st", "type": {"type": "struct", "fields": [
            {"name": "x", "type": "long", "nullable": true, "metadata": {}},
            {"name": "y", "type": "string", "nullable": true, "metadata": {}}]}, "nullable": true, "metadata": {}}),
        json!({"name": "l", "type": {"type": "array", "elementType": "long", "containsNull": true},
            "nullable": true, "metadata": {}}),
    ];
    for (name, ty) in extra {
        fields.push(json!({"name": name, "type": ty, "nullable": true, "metadata": {}}));
    }
    let configuration: BTreeMap<String, Option<String>> =
        configuration.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect();
    Metadata {
        id: "t".into(),
        partition_columns: partition_columns.iter().map(|s| s.to_string()).collect(),
        configuration,
        schema_string: json!({"type": "struct", "fields": fields}).to_string(),
    }
}

fn stats(meta: &Metadata, file: &ParquetMetaData) -> Value {
    serde_json::from_str(&Collector::new(meta).file_stats(file)).unwrap()
}

#[test]
fn bounds_and_null_counts_come_from_the_footer_and_are_omitted_where_unsure() {
    let got = stats(&metadata(&[], &[], &[("added", "long")]), &footer(&[]));
    let want = json!({
        "numRecords": 4,
        "minValues": {"id": 1, "i": -7, "s": "a".repeat(32), "dt": "0001-01-01", "ts": "1500-01-01T00:00:00.000Z",
            "ntz": "1970-01-01T00:00:00.001", "dec": -100.5, "st": {"x": 1, "y": "q"}},
        "maxValues": {"id": 4, "i": 5, "s": "b", "dt": "2020-05-06", "ts": "2020-01-01T00:00:00.124Z",
            "ntz": "2020-01-01T00:00:00.124", "dec": 1.23, "st": {"x": 9, "y": "r"}},
        // A struct's field counts the rows where the struct is null too; a
        // column the file lacks is null in every row.
        "nullCount": {"id": 0, "i": 1, "s": 1, "dt": 2, "ts": 2, "ntz": 2, "dec": 1, "b": 2, "f": 2,
            "st": {"x": 2, "y": 2}, "added": 4},
    });
    assert_eq!(got, want, "{got:#}");
    // Decimals are written as exact JSON numbers.
    let text = Collector::new(&metadata(&[], &[], &[])).file_stats(&footer(&[]));
    assert!(text.contains("\"dec\":-100.50") && text.contains("\"dec\":1.23"), "{text}");
}

#[test]
fn partition_columns_are_left_out_and_the_indexed_columns_follow_the_table_settings() {
    let file = footer(&[]);
    // Partition columns are not data columns (the file holds `i` here, the
    // table says it is a partition column).
    let got = stats(&metadata(&[], &["i"], &[]), &file);
    assert!(got["nullCount"].get("i").is_none() && got["minValues"].get("i").is_none(), "{got}");
    // The first 10 leaves: id..f are 9, then st.x.
    let c = Collector::new(&metadata(&[("delta.dataSkippingNumIndexedCols", "10")], &[], &[]));
    assert_eq!(names(c.columns.as_ref().unwrap()), ["id", "i", "s", "dt", "ts", "ntz", "dec", "b", "f", "st.x"]);
    let got = stats(&metadata(&[("delta.dataSkippingNumIndexedCols", "2")], &[], &[]), &file);
    assert_eq!(got["nullCount"], json!({"id": 0, "i": 1}), "{got}");
    // Named columns win over the count; names are case-insensitive and a
    // struct's field can be named alone.
    let named = [("delta.dataSkippingStatsColumns", "ID, `St`.y"), ("delta.dataSkippingNumIndexedCols", "1")];
    let got = stats(&metadata(&named, &[], &[]), &file);
    assert_eq!(got["nullCount"], json!({"id": 0, "st": {"y": 2}}), "{got}");
    assert_eq!(got["maxValues"], json!({"id": 4, "st": {"y": "r"}}), "{got}");
    // A shorter string prefix.
    let got = stats(&metadata(&[("delta.dataSkippingStringPrefixLength", "3")], &[], &[]), &file);
    assert_eq!((got["minValues"]["s"].as_str(), got["maxValues"]["s"].as_str()), (Some("aaa"), Some("b")));
    // Settings that do not parse: numRecords only.
    let got = stats(&metadata(&[("delta.dataSkippingNumIndexedCols", "many")], &[], &[]), &file);
    assert_eq!(got, json!({"numRecords": 4}));
    let got = stats(&Metadata { schema_string: "not json".into(), ..metadata(&[], &[], &[]) }, &file);
    assert_eq!(got, json!({"numRecords": 4}));
}

#[test]
fn a_file_spark_reads_in_legacy_mode_has_no_date_or_timestamp_bounds() {
    let legacy = footer(&[(spark::VERSION_KEY, "3.5.1"), (spark::LEGACY_DATETIME_KEY, "")]);
    let got = stats(&metadata(&[], &[], &[]), &legacy);
    for c in ["dt", "ts", "ntz"] {
        assert!(got["minValues"].get(c).is_none() && got["maxValues"].get(c).is_none(), "{c}: {got}");
        assert_eq!(got["nullCount"][c], 2, "{got}");
    }
    assert_eq!(got["minValues"]["id"], 1);
    let corrected = footer(&[(spark::VERSION_KEY, "3.5.1")]);
    assert_eq!(stats(&metadata(&[], &[], &[]), &corrected)["minValues"]["dt"], "0001-01-01");
}

#[test]
fn string_bounds_are_cut_as_delta_cuts_them() {
    assert_eq!(truncate_min("abcdef", 3), "abc");
    assert_eq!(truncate_min("ab", 3), "ab");
    // A surrogate pair is not split: one unit more.
    assert_eq!(truncate_min("ab\u{1F600}c", 3), "ab\u{1F600}");
    assert_eq!(truncate_max("abcdef", 3).as_deref(), Some("abc\u{7f}"));
    assert_eq!(truncate_max("abc\u{e9}f", 3).as_deref(), Some("abc\u{10FFFF}"));
    assert_eq!(truncate_max("abc", 3).as_deref(), Some("abc"));
    // U+10FFFF after the prefix is kept, and the next character decides.
    assert_eq!(truncate_max("abc\u{10FFFF}de", 3).as_deref(), Some("abc\u{10FFFF}\u{7f}"));
    // Nothing can be appended within twice the prefix: no bound.
    assert_eq!(truncate_max(&format!("a{}b", "\u{10FFFF}".repeat(4)), 1), None);
    for s in ["abcdef", "abc\u{e9}f", "zz\u{10FFFF}\u{10FFFF}x", "\u{7f}\u{7f}\u{7f}\u{7f}"] {
        if let Some(m) = truncate_max(s, 2) {
            assert!(m.as_bytes() >= s.as_bytes(), "{s:?} -> {m:?} is below it");
        }
    }
}

#[test]
fn dates_and_times_are_formatted_over_years_1_to_9999_only() {
    assert_eq!(civil_date(0).as_deref(), Some("1970-01-01"));
    assert_eq!(civil_date(-719_162).as_deref(), Some("0001-01-01"));
    assert_eq!(civil_date(2_932_896).as_deref(), Some("9999-12-31"));
    assert_eq!(civil_date(-719_163), None);
    assert_eq!(civil_date(2_932_897), None);
    assert_eq!(timestamp(-1).as_deref(), Some("1969-12-31T23:59:59.999"));
    assert_eq!(decimal(-5, 2).as_deref(), Some("-0.05"));
    assert_eq!(decimal(12345, 0).as_deref(), Some("12345"));
    assert_eq!(be_signed(&[0xff, 0x9c]), Some(-100));
}
