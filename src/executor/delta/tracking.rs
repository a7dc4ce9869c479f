//! Row tracking (PROTOCOL.md "Row Tracking"): what a rewrite keeps of each
//! row's identity, and what its commit assigns.
//!
//! A row's stable id is its file's materialized row id where the file has
//! one for it (a hidden column the table's configuration names), else the
//! file's `baseRowId` plus the row's physical position in the file (before
//! any deletion vector); its stable commit version likewise, from the
//! file's `defaultRowCommitVersion`. Moving a row to another file changes
//! what it would default to, so where tracking is enabled the rewrite
//! writes both into the outputs' hidden columns ([`Materialize`]), as
//! Delta's `OPTIMIZE` does; readers then see every row with the id and
//! version it had.
//!
//! Where the feature is supported and not suspended, every `add` of a
//! commit gets fresh ids: a `baseRowId` above the table's high-water mark
//! and the commit's own version as `defaultRowCommitVersion`, and the
//! commit raises the mark in a `domainMetadata` action ([`Fresh`]). Both
//! depend on the version the commit lands at, so they are assigned for
//! each version tried, from the mark the winners of the versions stepped
//! over left.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef};
use serde_json::{json, Value};

use super::log::{Action, Add, Snapshot, ROW_TRACKING_DOMAIN};

/// The table property that enables row tracking, and the one that
/// suspends the assignment of fresh ids.
const ENABLED: &str = "delta.enableRowTracking";
const SUSPENDED: &str = "delta.rowTrackingSuspended";
/// The configuration keys naming the hidden columns.
const ROW_ID_COLUMN: &str = "delta.rowTracking.materializedRowIdColumnName";
const COMMIT_VERSION_COLUMN: &str = "delta.rowTracking.materializedRowCommitVersionColumnName";

/// What row tracking asks of a unit of this table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tracking {
    /// The feature is not supported, or suspended: nothing.
    Off,
    /// Supported, not enabled: fresh ids for the outputs; the rows' ids
    /// are not relied on, so none is kept.
    Fresh,
    /// Enabled: fresh ids, and every row keeps its id and commit version
    /// in the named hidden columns.
    Preserve { row_id: String, commit_version: String },
}

impl Tracking {
    /// What `snap` asks, or why compactd cannot honour it.
    pub fn of(snap: &Snapshot) -> Result<Tracking, String> {
        let supported = snap.protocol.writer_features.iter().flatten().any(|f| f == "rowTracking");
        let conf = |k: &str| snap.metadata.configuration.get(k).cloned().flatten();
        let is_true = |k: &str| conf(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !supported || is_true(SUSPENDED) {
            return Ok(Tracking::Off);
        }
        if !is_true(ENABLED) {
            return Ok(Tracking::Fresh);
        }
        match (conf(ROW_ID_COLUMN), conf(COMMIT_VERSION_COLUMN)) {
            (Some(row_id), Some(commit_version)) => Ok(Tracking::Preserve { row_id, commit_version }),
            _ => Err(format!(
                "row tracking is enabled but the table's configuration does not name its materialized columns \
                 ({ROW_ID_COLUMN}, {COMMIT_VERSION_COLUMN}): the rows' ids could not be kept"
            )),
        }
    }

    pub fn assigns(&self) -> bool {
        *self != Tracking::Off
    }
}

/// The hidden columns a rewrite fills, and each input's defaults.
pub struct Materialize {
    row_id: String,
    commit_version: String,
    /// By the input's store path: its `baseRowId` and
    /// `defaultRowCommitVersion`.
    defaults: HashMap<String, (i64, i64)>,
}

impl Materialize {
    /// For `inputs` (store path, file) where `tracking` preserves rows;
    /// `None` otherwise. An input without the defaults its rows' ids come
    /// from is refused by name: the protocol requires them of every file
    /// once tracking is enabled.
    pub fn new(tracking: &Tracking, inputs: &[(String, &Add)]) -> Result<Option<Materialize>, String> {
        let Tracking::Preserve { row_id, commit_version } = tracking else { return Ok(None) };
        let mut defaults = HashMap::new();
        for (path, f) in inputs {
            let (Some(base), Some(version)) = (f.base_row_id, f.default_row_commit_version) else {
                return Err(format!(
                    "{}: row tracking is enabled but its add action has no baseRowId or defaultRowCommitVersion, \
                     so its rows' ids are unknown",
                    f.path
                ));
            };
            defaults.insert(path.clone(), (base, version));
        }
        Ok(Some(Materialize { row_id: row_id.clone(), commit_version: commit_version.clone(), defaults }))
    }

    /// The hidden columns, in every output whether or not an input has them.
    pub fn fields(&self) -> Vec<FieldRef> {
        [&self.row_id, &self.commit_version]
            .into_iter()
            .map(|n| Arc::new(Field::new(n.as_str(), DataType::Int64, true)))
            .collect()
    }

    /// `batch` (rows of the input `path` from its physical row `first_row`
    /// on, in a schema holding both hidden columns) with every row's id and
    /// commit version materialized: a value the file holds is kept, a null
    /// becomes the file's default.
    pub fn apply(&self, path: &str, first_row: u64, batch: RecordBatch) -> Result<RecordBatch, String> {
        let &(base, version) =
            self.defaults.get(path).ok_or_else(|| format!("{path}: no row tracking defaults for this input"))?;
        let schema = batch.schema();
        let mut columns = batch.columns().to_vec();
        for (name, default) in [(&self.row_id, Fill::RowId(base)), (&self.commit_version, Fill::Version(version))] {
            let i = schema.index_of(name).map_err(|_| format!("{path}: no column {name} in the outputs' schema"))?;
            let have = columns[i].as_any().downcast_ref::<Int64Array>().ok_or_else(|| {
                format!("{path}: its row tracking column {name} is {}, not a long", columns[i].data_type())
            })?;
            let filled: Int64Array = (0..have.len())
                .map(|k| {
                    Some(if have.is_valid(k) {
                        have.value(k)
                    } else {
                        match default {
                            Fill::RowId(base) => base + (first_row + k as u64) as i64,
                            Fill::Version(v) => v,
                        }
                    })
                })
                .collect();
            columns[i] = Arc::new(filled) as ArrayRef;
        }
        RecordBatch::try_new(schema, columns).map_err(|e| format!("{path}: {e}"))
    }
}

#[derive(Clone, Copy)]
enum Fill {
    RowId(i64),
    Version(i64),
}

/// The fresh ids of a commit's `add`s, assigned for the version it lands at.
#[derive(Debug, Clone)]
pub struct Fresh {
    /// The highest row id assigned before this commit (`-1`: none).
    high_water: i64,
}

impl Fresh {
    /// From the mark of the snapshot the unit read.
    pub fn after(snap: &Snapshot) -> Fresh {
        Fresh { high_water: snap.row_id_high_water.unwrap_or(-1) }
    }

    /// Takes the mark a commit that won a version before this one left.
    pub fn step_over(&mut self, winner: &[Action]) {
        for d in winner.iter().filter_map(|a| a.domain_metadata.as_ref()) {
            if let Some(mark) = d.row_id_high_water() {
                self.high_water = self.high_water.max(mark);
            }
        }
    }

    /// Sets each `add` (with the rows it holds) its `baseRowId` and
    /// `defaultRowCommitVersion` for a commit at `version`; the
    /// `domainMetadata` action raising the mark past them.
    pub fn assign(&self, adds: &mut [(Value, u64)], version: u64) -> Value {
        let mut next = self.high_water + 1;
        for (add, rows) in adds.iter_mut() {
            add["baseRowId"] = json!(next);
            add["defaultRowCommitVersion"] = json!(version);
            next += *rows as i64;
        }
        let mark = (next - 1).max(self.high_water);
        json!({"domainMetadata": {
            "domain": ROW_TRACKING_DOMAIN,
            "configuration": json!({"rowIdHighWaterMark": mark}).to_string(),
            "removed": false,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(writer: &[&str], conf: &[(&str, &str)]) -> Snapshot {
        let mut s = Snapshot::default();
        s.protocol.writer_features = Some(writer.iter().map(|f| f.to_string()).collect());
        s.metadata.configuration = conf.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect();
        s
    }

    #[test]
    fn what_a_table_asks_follows_its_feature_and_properties() {
        assert_eq!(Tracking::of(&snap(&["appendOnly"], &[(ENABLED, "true")])), Ok(Tracking::Off));
        assert_eq!(Tracking::of(&snap(&["rowTracking"], &[])), Ok(Tracking::Fresh));
        assert_eq!(Tracking::of(&snap(&["rowTracking"], &[(ENABLED, "true"), (SUSPENDED, "true")])), Ok(Tracking::Off));
        let named = [(ENABLED, "true"), (ROW_ID_COLUMN, "_r"), (COMMIT_VERSION_COLUMN, "_v")];
        assert_eq!(
            Tracking::of(&snap(&["rowTracking"], &named)),
            Ok(Tracking::Preserve { row_id: "_r".into(), commit_version: "_v".into() })
        );
        let err = Tracking::of(&snap(&["rowTracking"], &[(ENABLED, "true")])).unwrap_err();
        assert!(err.contains(ROW_ID_COLUMN), "{err}");
    }

    #[test]
    fn a_null_becomes_the_files_default_by_physical_position_and_a_value_is_kept() {
        let add = Add {
            path: "a.parquet".into(),
            base_row_id: Some(100),
            default_row_commit_version: Some(3),
            ..Add::default()
        };
        let tracking = Tracking::Preserve { row_id: "_r".into(), commit_version: "_v".into() };
        let m = Materialize::new(&tracking, &[("t/a.parquet".into(), &add)]).unwrap().unwrap();
        let schema = Arc::new(arrow_schema::Schema::new(m.fields()));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![None, Some(7), None])),
                Arc::new(Int64Array::from(vec![Some(1), None, None])),
            ],
        )
        .unwrap();
        let out = m.apply("t/a.parquet", 10, batch).unwrap();
        let col = |i: usize| out.column(i).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec();
        assert_eq!(col(0), vec![110, 7, 112]);
        assert_eq!(col(1), vec![1, 3, 3]);
        let mut bare = add.clone();
        bare.base_row_id = None;
        let err = Materialize::new(&tracking, &[("t/a.parquet".into(), &bare)]).err().unwrap();
        assert!(err.contains("a.parquet") && err.contains("baseRowId"), "{err}");
    }

    #[test]
    fn fresh_ids_start_above_the_newest_mark_and_the_commit_raises_it() {
        let mut s = Snapshot::default();
        s.row_id_high_water = Some(49);
        let mut fresh = Fresh::after(&s);
        let winner: Action = serde_json::from_value(json!({"domainMetadata": {
            "domain": ROW_TRACKING_DOMAIN, "configuration": "{\"rowIdHighWaterMark\":99}", "removed": false}}))
        .unwrap();
        fresh.step_over(&[winner]);
        let mut adds = vec![(json!({"path": "x"}), 10), (json!({"path": "y"}), 5)];
        let domain = fresh.assign(&mut adds, 12);
        assert_eq!(adds[0].0["baseRowId"], 100);
        assert_eq!(adds[1].0["baseRowId"], 110);
        assert_eq!(adds[1].0["defaultRowCommitVersion"], 12);
        assert_eq!(domain["domainMetadata"]["configuration"], "{\"rowIdHighWaterMark\":114}");
    }
}
