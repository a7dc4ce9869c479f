//! A Delta table's deletion vectors (PROTOCOL.md "Deletion Vectors"): where
//! each lives, read into the row positions it deletes, and applied while a
//! unit rewrites its inputs, so that the outputs hold only the rows readers
//! see and carry no vector.
//!
//! A descriptor's `storageType` says where its vector is:
//! - `u`: in a file of the table's folder, `pathOrInlineDv` being an
//!   optional folder prefix then the file's UUID in Z85 (20 characters):
//!   `<prefix>/deletion_vector_<uuid>.bin`;
//! - `i`: inline, `pathOrInlineDv` being the vector itself in Z85;
//! - `p`: at an absolute path, which compactd refuses by name (it reads
//!   only inside the table's folder, as for data files).
//!
//! A vector file starts with a version byte (1); a vector in it starts at
//! its `offset` (1 when absent) and is framed as
//! [`crate::executor::merge::parquet::deleted`] says: the frame's length is
//! `sizeInBytes`, its CRC-32 is checked, and its cardinality must be the
//! descriptor's.

use std::collections::HashMap;

use arrow_array::{BooleanArray, RecordBatch};
use serde_json::Value;
use store::Store;

use super::log::Add;
use crate::executor::merge::parquet::deleted;
use crate::executor::throttle::Throttle;

/// Which share of a file's rows its vector must delete for the file to be
/// due however large it is (Delta's `optimize.maxDeletedRowsRatio`):
/// rewriting it then saves readers more than it costs.
const DUE_DELETED_SHARE: f64 = 0.05;

/// Whether `f` is due for its deletion vector alone: the vector deletes
/// over [`DUE_DELETED_SHARE`] of its rows, or its statistics do not say
/// how many rows it has (a checkpoint's files, whose statistics a snapshot
/// does not read).
pub fn due(f: &Add) -> bool {
    let Some(dv) = &f.deletion_vector else { return false };
    let deleted = dv.get("cardinality").and_then(Value::as_i64).unwrap_or(0);
    match f.num_records {
        Some(rows) if rows > 0 => deleted as f64 > rows as f64 * DUE_DELETED_SHARE,
        _ => deleted > 0,
    }
}

/// The positions each input's vector deletes, by the input's store path.
#[derive(Default)]
pub struct Vectors {
    positions: HashMap<String, Vec<u64>>,
}

impl Vectors {
    /// Reads the vectors of `inputs` (store path, file) of the table at
    /// `table`: one ranged read per vector in a file.
    pub async fn load(store: &Store, table: &str, inputs: &[(String, &Add)], io: &Throttle) -> Result<Self, String> {
        let mut positions = HashMap::new();
        for (path, f) in inputs {
            let Some(dv) = &f.deletion_vector else { continue };
            let read = read(store, table, dv, io).await;
            let read = read.map_err(|why| format!("the deletion vector of {}: {why}", f.path))?;
            positions.insert(path.clone(), read);
        }
        Ok(Vectors { positions })
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// `batch`, the rows of the input `path` from its row `first_row` on,
    /// without those its vector deletes.
    pub fn apply(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        let Some(positions) = self.positions.get(path) else { return Ok(batch) };
        let mut keep = vec![true; batch.num_rows()];
        if !deleted::clear(positions, first_row, &mut keep) {
            return Ok(batch);
        }
        arrow_select::filter::filter_record_batch(&batch, &BooleanArray::from(keep)).map_err(|e| e.to_string())
    }

    /// Whether the input `path` has a vector that deletes rows.
    pub fn touches(&self, path: &str) -> bool {
        self.positions.get(path).is_some_and(|p| !p.is_empty())
    }
}

/// The positions the vector `dv` (a descriptor) deletes.
async fn read(store: &Store, table: &str, dv: &Value, io: &Throttle) -> Result<Vec<u64>, String> {
    let text = |k: &str| dv.get(k).and_then(Value::as_str).ok_or_else(|| format!("its descriptor has no {k}"));
    let number = |k: &str| dv.get(k).and_then(Value::as_i64).ok_or_else(|| format!("its descriptor has no {k}"));
    let cardinality = number("cardinality")?;
    let at = text("pathOrInlineDv")?;
    match text("storageType")? {
        "i" => {
            let bytes = z85::decode(at).map_err(|e| format!("its inline bytes are not Z85: {e:?}"))?;
            deleted::parse_bitmap(&bytes, cardinality)
        }
        "u" => {
            let path = format!("{table}{}", relative_file(at)?);
            let size = number("sizeInBytes")?;
            let offset = dv.get("offset").and_then(Value::as_i64).unwrap_or(1);
            if !(0..1 << 31).contains(&size) || !(1..1 << 31).contains(&offset) {
                return Err(format!("its offset {offset} or size {size} is out of range"));
            }
            let len = size as u64 + 8;
            io.take(len).await.map_err(|e| e.to_string())?;
            let frame = store.read_range(&path, offset as u64, len).await.map_err(|e| e.to_string())?;
            let frame = frame.ok_or_else(|| format!("its file {path} is missing"))?;
            if frame.len() as u64 != len {
                return Err(format!("its file {path} is shorter than its offset and size say"));
            }
            deleted::parse_frame(&frame, cardinality).map_err(|e| format!("{path}: {e}"))
        }
        "p" => Err(format!("it is stored at the absolute path {at}; compactd reads only inside the table's folder")),
        other => Err(format!("storage type {other:?} is not one the protocol defines")),
    }
}

/// The store path of the file holding the vector `dv` describes, if it is
/// in one (`u`) and its name decodes.
pub fn file_of(table: &str, dv: &Value) -> Option<String> {
    if dv.get("storageType")?.as_str()? != "u" {
        return None;
    }
    relative_file(dv.get("pathOrInlineDv")?.as_str()?).ok().map(|f| format!("{table}{f}"))
}

/// The file, relative to the table's folder, of a `u` vector whose
/// `pathOrInlineDv` is `at`.
fn relative_file(at: &str) -> Result<String, String> {
    let Some(split) = at.len().checked_sub(20).filter(|s| at.is_char_boundary(*s)) else {
        return Err(format!("{at:?} is shorter than a Z85 UUID"));
    };
    let (prefix, encoded) = at.split_at(split);
    let uuid = z85::decode(encoded).map_err(|e| format!("{at:?} does not end in a Z85 UUID: {e:?}"))?;
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() != 32 || prefix.contains("..") || prefix.starts_with('/') {
        return Err(format!("{at:?} does not name a deletion vector file"));
    }
    // The UUID's usual text form, as Delta's writers name the file.
    let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
    let folder = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
    Ok(format!("{folder}deletion_vector_{uuid}.bin"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The descriptor of an inline vector of `positions`.
    pub(crate) fn inline(positions: &[u64]) -> Value {
        let frame = deleted::tests::frame(positions);
        // The magic and the bitmap, in Z85 (padded to 4 bytes).
        let mut body = frame[4..frame.len() - 4].to_vec();
        body.resize(body.len().next_multiple_of(4), 0);
        json!({"storageType": "i", "pathOrInlineDv": z85::encode(&body), "sizeInBytes": frame.len() - 8,
            "cardinality": positions.len()})
    }

    #[test]
    fn a_relative_vector_file_is_named_by_its_prefix_and_uuid() {
        // The protocol's own example.
        assert_eq!(
            relative_file("ab^-aqEH.-t@S}K{vb[*k^").unwrap(),
            "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
        );
        assert_eq!(
            relative_file("^-aqEH.-t@S}K{vb[*k^").unwrap(),
            "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
        );
        assert!(relative_file("short").unwrap_err().contains("shorter"));
        assert!(relative_file("../^-aqEH.-t@S}K{vb[*k^").is_err());
    }

    fn add(dv: Option<Value>, rows: Option<i64>) -> Add {
        Add { path: "p".into(), size: 1, deletion_vector: dv, num_records: rows, ..Add::default() }
    }

    #[test]
    fn a_file_is_due_when_its_vector_deletes_over_a_twentieth_of_its_rows() {
        let dv = |n: i64| Some(json!({"storageType": "i", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": n}));
        assert!(!due(&add(None, Some(100))));
        assert!(!due(&add(dv(5), Some(100))));
        assert!(due(&add(dv(6), Some(100))));
        assert!(due(&add(dv(1), None)), "rows unknown: the vector is retired");
    }

    #[tokio::test]
    async fn inline_and_file_vectors_are_read_and_damaged_ones_refused() {
        let frame = deleted::tests::frame(&[2, 5]);
        let inline = inline(&[2, 5]);
        let store = Store::memory().await;
        let io = Throttle::none();
        assert_eq!(read(&store, "t/", &inline, &io).await.unwrap(), vec![2, 5]);
        // In a file: a version byte, another vector, then this one.
        let mut file = vec![1u8];
        file.extend_from_slice(&deleted::tests::frame(&[7]));
        let offset = file.len();
        file.extend_from_slice(&frame);
        store.put("t/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin", file).await.unwrap();
        let in_file = json!({"storageType": "u", "pathOrInlineDv": "^-aqEH.-t@S}K{vb[*k^", "offset": offset,
            "sizeInBytes": frame.len() - 8, "cardinality": 2});
        assert_eq!(read(&store, "t/", &in_file, &io).await.unwrap(), vec![2, 5]);
        let mut wrong = in_file.clone();
        wrong["cardinality"] = json!(3);
        assert!(read(&store, "t/", &wrong, &io).await.unwrap_err().contains("says 3"));
        let mut wrong = in_file.clone();
        wrong["offset"] = json!(1);
        assert!(read(&store, "t/", &wrong, &io).await.is_err(), "the other vector's frame is not this size");
        let missing = json!({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
            "sizeInBytes": 10, "cardinality": 1});
        assert!(read(&store, "t/", &missing, &io).await.unwrap_err().contains("missing"));
        let absolute = json!({"storageType": "p", "pathOrInlineDv": "s3://b/dv.bin", "sizeInBytes": 1,
            "cardinality": 1});
        assert!(read(&store, "t/", &absolute, &io).await.unwrap_err().contains("absolute"));
    }
}
