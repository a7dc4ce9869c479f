//! One version of an Iceberg table's metadata (`vN.metadata.json`), kept as
//! the JSON it is: a commit changes only the keys it owns, so fields this
//! version does not model survive.
//!
//! Invariants:
//! - What compactd does not handle is refused by name before anything is
//!   written ([`Table::check_supported`]): format version 3 and later (row
//!   lineage, deletion vectors), encrypted tables, gzip metadata, metadata
//!   relocated by `write.metadata.path`, a current snapshot without a
//!   manifest list.
//! - Files are found through the table's own `location`: a file path
//!   (`hdfs://nn/w/db/s/t/data/x.parquet`, `file:/w/…`, `/w/…`) is the
//!   store path of the table folder plus what follows the location; a file
//!   outside the location is not compactd's to touch.

use std::collections::BTreeMap;

use serde_json::Value as Json;

/// A table's metadata at one version.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table folder in the store, `<db>/<schema>/<table>/`.
    pub dir: String,
    /// `N` of `metadata/vN.metadata.json`.
    pub version: u64,
    pub meta: Json,
}

/// A snapshot, as the metadata lists it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: i64,
    pub sequence_number: i64,
    pub manifest_list: String,
    pub timestamp_ms: i64,
}

/// A location split into (scheme and authority, path): `hdfs://nn:8020`
/// and `/w/t` for `hdfs://nn:8020/w/t`; `file` and `/w/t` for
/// `file:/w/t`, `file:///w/t` and `/w/t`.
fn split_location(s: &str) -> (String, String) {
    if let Some(rest) = s.strip_prefix("file:") {
        let path = rest.trim_start_matches('/');
        return ("file".into(), format!("/{path}"));
    }
    if s.starts_with('/') {
        return ("file".into(), s.to_string());
    }
    match s.split_once("://") {
        Some((scheme, rest)) => {
            let (auth, path) = rest.split_once('/').unwrap_or((rest, ""));
            (format!("{}://{auth}", scheme.to_ascii_lowercase()), format!("/{path}"))
        }
        None => (String::new(), s.to_string()),
    }
}

impl Table {
    pub fn format_version(&self) -> u64 {
        self.meta["format-version"].as_u64().unwrap_or(1)
    }

    pub fn uuid(&self) -> &str {
        self.meta["table-uuid"].as_str().unwrap_or("")
    }

    /// The table's location without a trailing `/`.
    pub fn location(&self) -> &str {
        self.meta["location"].as_str().unwrap_or("").trim_end_matches('/')
    }

    pub fn properties(&self) -> BTreeMap<String, String> {
        self.meta["properties"]
            .as_object()
            .map(|o| o.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
            .unwrap_or_default()
    }

    pub fn last_sequence_number(&self) -> i64 {
        self.meta["last-sequence-number"].as_i64().unwrap_or(0)
    }

    pub fn current_snapshot_id(&self) -> Option<i64> {
        match self.meta["current-snapshot-id"].as_i64() {
            Some(-1) | None => None,
            some => some,
        }
    }

    /// The snapshot with `id`, if the metadata still lists it.
    pub fn snapshot(&self, id: i64) -> Option<Snapshot> {
        let s = self.meta["snapshots"].as_array()?.iter().find(|s| s["snapshot-id"].as_i64() == Some(id))?;
        Some(Snapshot {
            id,
            sequence_number: s["sequence-number"].as_i64().unwrap_or(0),
            manifest_list: s["manifest-list"].as_str()?.to_string(),
            timestamp_ms: s["timestamp-ms"].as_i64().unwrap_or(0),
        })
    }

    pub fn current_snapshot(&self) -> Option<Snapshot> {
        self.snapshot(self.current_snapshot_id()?)
    }

    /// Every snapshot the metadata lists, as JSON.
    pub fn snapshots(&self) -> &[Json] {
        self.meta["snapshots"].as_array().map(Vec::as_slice).unwrap_or_default()
    }

    /// The current schema, as JSON.
    pub fn current_schema(&self) -> &Json {
        let id = self.meta["current-schema-id"].as_i64();
        self.meta["schemas"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["schema-id"].as_i64() == id))
            .unwrap_or(&self.meta["schema"])
    }

    /// Whether the spec `spec_id` partitions nothing (no fields, or only
    /// `void` ones, as a v1 table's removed partition field): Java's
    /// `PartitionSpec.isUnpartitioned`. An equality delete written in such
    /// a spec applies to every partition.
    pub fn unpartitioned(&self, spec_id: i32) -> bool {
        let spec = self.meta["partition-specs"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["spec-id"].as_i64() == Some(spec_id as i64)));
        let fields = match spec {
            Some(s) => s["fields"].as_array(),
            // v1 metadata without partition-specs: the one spec.
            None if self.meta["partition-spec"].is_array() => self.meta["partition-spec"].as_array(),
            None => None,
        };
        fields.is_none_or(|f| f.iter().all(|f| f["transform"].as_str() == Some("void")))
    }

    /// The fields of the default sort order.
    pub fn sort_fields(&self) -> Vec<Json> {
        let id = self.meta["default-sort-order-id"].as_i64();
        self.meta["sort-orders"]
            .as_array()
            .and_then(|all| all.iter().find(|o| o["order-id"].as_i64() == id))
            .and_then(|o| o["fields"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Why compactd does not commit to this table, if it does not.
    pub fn check_supported(&self) -> Result<(), String> {
        let v = self.format_version();
        if v >= 4 {
            return Err(format!("format version {v}: compactd knows the spec up to version 3"));
        }
        if self.meta["encryption-keys"].as_array().is_some_and(|k| !k.is_empty())
            || self.properties().keys().any(|k| k.starts_with("encryption."))
        {
            return Err("the table is encrypted (encryption keys or `encryption.*` properties)".into());
        }
        let props = self.properties();
        if props.get("write.metadata.compression-codec").is_some_and(|c| c.eq_ignore_ascii_case("gzip")) {
            return Err("its metadata is gzip-compressed (`write.metadata.compression-codec=gzip`): a writer names \
                        such versions `vN.gz.metadata.json`, and two writers could both take version N"
                .into());
        }
        if props.contains_key("write.metadata.path") {
            return Err("its metadata is relocated (`write.metadata.path`): compactd commits only to \
                        `<table>/metadata/`"
                .into());
        }
        if self.location().is_empty() {
            return Err("its metadata has no `location`".into());
        }
        if let Some(id) = self.current_snapshot_id() {
            if self.snapshot(id).is_none() {
                return Err(format!(
                    "its current snapshot {id} has no manifest list (a v1 snapshot listing manifests inline)"
                ));
            }
        }
        if let Some(main) = self.meta["refs"]["main"]["snapshot-id"].as_i64() {
            if Some(main) != self.current_snapshot_id() {
                return Err(format!(
                    "branch `main` ({main}) is not the current snapshot ({:?})",
                    self.current_snapshot_id()
                ));
            }
        }
        Ok(())
    }

    /// The store path of a file the metadata names, if it lies inside the
    /// table's location.
    pub fn store_path(&self, file: &str) -> Result<String, String> {
        let (base_auth, base_path) = split_location(self.location());
        let (auth, path) = split_location(file);
        let rel = path.strip_prefix(base_path.as_str()).and_then(|r| r.strip_prefix('/'));
        match rel {
            Some(rel) if auth == base_auth && !rel.is_empty() && !rel.split('/').any(|s| s == ".." || s == ".") => {
                Ok(format!("{}{rel}", self.dir))
            }
            _ => Err(format!("{file} lies outside the table's location {}", self.location())),
        }
    }

    /// The path the metadata names a file of the table folder by
    /// (`store_path` inside the table folder).
    pub fn file_uri(&self, store_path: &str) -> String {
        let rel = store_path.strip_prefix(self.dir.as_str()).unwrap_or(store_path);
        format!("{}/{rel}", self.location())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn table(location: &str) -> Table {
        Table { dir: "db/s/t/".into(), version: 3, meta: json!({"location": location, "format-version": 2}) }
    }

    #[test]
    fn files_map_to_store_paths_through_the_location() {
        let t = table("hdfs://127.0.0.1:9000/w/db/s/t");
        assert_eq!(t.store_path("hdfs://127.0.0.1:9000/w/db/s/t/data/a.parquet").unwrap(), "db/s/t/data/a.parquet");
        assert!(t.store_path("hdfs://other:9000/w/db/s/t/data/a.parquet").is_err());
        assert!(t.store_path("hdfs://127.0.0.1:9000/w/db/s/t2/a.parquet").is_err());
        assert!(t.store_path("hdfs://127.0.0.1:9000/w/db/s/t/../x.parquet").is_err());
        assert_eq!(t.file_uri("db/s/t/data/b.parquet"), "hdfs://127.0.0.1:9000/w/db/s/t/data/b.parquet");
        let f = table("file:/tmp/w/db/s/t/");
        assert_eq!(f.store_path("file:///tmp/w/db/s/t/data/a.parquet").unwrap(), "db/s/t/data/a.parquet");
        assert_eq!(f.store_path("/tmp/w/db/s/t/data/a.parquet").unwrap(), "db/s/t/data/a.parquet");
        assert_eq!(f.file_uri("db/s/t/data/c.parquet"), "file:/tmp/w/db/s/t/data/c.parquet");
    }

    #[test]
    fn what_compactd_does_not_handle_is_refused_by_name() {
        let mut t = table("/w/t");
        assert!(t.check_supported().is_ok());
        t.meta["format-version"] = json!(4);
        assert!(t.check_supported().unwrap_err().contains("format version 4"));
        t.meta["format-version"] = json!(2);
        t.meta["properties"] = json!({"write.metadata.compression-codec": "GZIP"});
        assert!(t.check_supported().unwrap_err().contains("gzip"));
        t.meta["properties"] = json!({"write.metadata.path": "/elsewhere"});
        assert!(t.check_supported().unwrap_err().contains("relocated"));
        t.meta["properties"] = json!({});
        t.meta["encryption-keys"] = json!([{"key-id": "k"}]);
        assert!(t.check_supported().unwrap_err().contains("encrypted"));
    }
}
