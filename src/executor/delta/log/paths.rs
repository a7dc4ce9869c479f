//! How a Delta log names things compactd also names: a partition's unit
//! name (Hive-escaped `col=value` pairs), a file's key across actions (its
//! decoded path), and the store path of a file the log names (refused
//! outside the table's folder).

use std::collections::BTreeMap;

use crate::executor::delta::DeltaError;

/// The unit name of an unpartitioned table (a partitioned table's units
/// are named `col=value[,col=value…]`, see [`partition_key`]).
pub const WHOLE_TABLE: &str = "whole-table";

/// A null partition value in a unit name (Hive's name for it).
pub(super) const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// Characters escaped in a partition value of a unit name (Hive's set for
/// folder names, and `,` which separates columns in the name).
fn escaped(c: char) -> bool {
    c.is_control() || "\"#%'*/:=?\\\u{7f}{[]^,".contains(c)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if escaped(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The unit name of a partition: `col=value` for each partition column in
/// the table's order, joined by `,` (values escaped as Hive escapes folder
/// names; a null value is `__HIVE_DEFAULT_PARTITION__`); [`WHOLE_TABLE`] for
/// an unpartitioned table.
pub fn partition_key(columns: &[String], values: &BTreeMap<String, Option<String>>) -> String {
    if columns.is_empty() {
        return WHOLE_TABLE.to_string();
    }
    columns
        .iter()
        .map(|c| {
            // The protocol treats an empty partition value as null.
            let v = values.get(c).cloned().flatten().filter(|v| !v.is_empty());
            let v = match v {
                None => NULL_PARTITION.to_string(),
                // The literal string would read as null: its first `_` escaped.
                Some(v) if v == NULL_PARTITION => format!("%5F{}", &v[1..]),
                Some(v) => escape(&v),
            };
            format!("{}={v}", escape(c))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What identifies a file across actions: its path decoded (writers may
/// encode the same path differently in an `add` and its `remove`; readers
/// match them decoded, as Spark does).
pub fn path_key(path: &str) -> String {
    percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned()
}

/// The store path of a file the log names by `path` (relative to `table`).
pub fn data_path(table: &str, path: &str) -> Result<String, DeltaError> {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8().map_err(|_| DeltaError::Table {
        table: table.to_string(),
        problem: format!("file path {path:?} is not UTF-8 once decoded"),
    })?;
    if decoded.contains("://") || decoded.starts_with('/') || decoded.split('/').any(|p| p == ".." || p == ".") {
        return Err(DeltaError::Table {
            table: table.to_string(),
            problem: format!("file {path:?} is not inside the table's folder; compactd compacts only files there"),
        });
    }
    Ok(format!("{table}{decoded}"))
}
