use super::*;

const DAY: i64 = 86_400_000;
const NOW: i64 = 100 * DAY;

fn at(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)
}

/// A table whose snapshots are `(id, parent, days before NOW)`, `main` at
/// the last, plus `refs`.
fn table(snaps: &[(i64, Option<i64>, i64)], refs: Json, props: Json) -> Table {
    let snapshots: Vec<Json> = snaps
        .iter()
        .map(|&(id, parent, days)| {
            let mut s = json!({"snapshot-id": id, "timestamp-ms": NOW - days * DAY, "manifest-list": format!("/w/t/metadata/snap-{id}.avro")});
            if let Some(p) = parent {
                s["parent-snapshot-id"] = json!(p);
            }
            s
        })
        .collect();
    let current = snaps.last().map(|s| s.0).unwrap_or(-1);
    let mut refs = refs;
    refs["main"] = json!({"type": "branch", "snapshot-id": current});
    let log: Vec<Json> =
        snaps.iter().map(|&(id, _, days)| json!({"snapshot-id": id, "timestamp-ms": NOW - days * DAY})).collect();
    Table {
        dir: "db/s/t/".into(),
        version: 7,
        meta: json!({
            "format-version": 2, "location": "/w/t", "current-snapshot-id": current, "snapshots": snapshots,
            "refs": refs, "snapshot-log": log, "properties": props, "last-updated-ms": NOW - DAY,
            "metadata-log": [],
        }),
    }
}

fn forced(age_days: Option<i64>, retain_last: Option<u64>) -> Retention {
    Retention {
        older_than: age_days.map(|d| Duration::from_millis((d * DAY) as u64)),
        retain_last,
        force: true,
        ..Retention::default()
    }
}

fn kept(t: &Table, r: &Retention) -> Vec<i64> {
    plan(t, &settings(t, r, at(NOW)).unwrap()).kept.into_iter().collect()
}

/// 1 ← 2 ← 3 ← 4 ← 5, ten, eight, six, four and two days old.
fn line() -> Table {
    table(&[(1, None, 10), (2, Some(1), 8), (3, Some(2), 6), (4, Some(3), 4), (5, Some(4), 2)], json!({}), json!({}))
}

#[test]
fn a_branch_keeps_its_ancestors_younger_than_the_age_and_at_least_its_newest_few() {
    let t = line();
    // The table's default age, five days.
    assert_eq!(kept(&t, &Retention::default()), vec![4, 5]);
    assert_eq!(kept(&t, &forced(Some(0), None)), vec![5]);
    assert_eq!(kept(&t, &forced(Some(0), Some(3))), vec![3, 4, 5]);
    // Past an old snapshot the walk stops: younger ones behind it do not
    // come back.
    assert_eq!(kept(&t, &forced(Some(7), Some(1))), vec![3, 4, 5]);
    let mut own = line();
    own.meta["properties"] = json!({"history.expire.min-snapshots-to-keep": "4"});
    assert_eq!(kept(&own, &Retention::default()), vec![2, 3, 4, 5]);
}

#[test]
fn tags_keep_their_snapshot_until_their_own_age_and_branches_follow_their_own_settings() {
    let t = table(
        &[(1, None, 10), (2, Some(1), 8), (6, Some(2), 9), (3, Some(2), 6), (4, Some(3), 4), (5, Some(4), 2)],
        json!({
            "release": {"type": "tag", "snapshot-id": 1},
            "old-tag": {"type": "tag", "snapshot-id": 2, "max-ref-age-ms": 3 * DAY},
            "audit": {"type": "branch", "snapshot-id": 6, "min-snapshots-to-keep": 2},
        }),
        json!({}),
    );
    let p = plan(&t, &settings(&t, &forced(Some(0), None), at(NOW)).unwrap());
    // main 5; the tag `release` 1; `audit` its head 6 and its parent 2.
    assert_eq!(p.kept.iter().copied().collect::<Vec<_>>(), vec![1, 2, 5, 6]);
    assert_eq!(p.refs_removed, vec!["old-tag".to_string()]);
    assert_eq!(p.refs.keys().cloned().collect::<Vec<_>>(), vec!["audit", "main", "release"]);
    assert_eq!(p.expired.iter().copied().collect::<Vec<_>>(), vec![3, 4]);
    // The refs' default age from the table: `audit`'s head is nine days old.
    let mut aged = t.clone();
    aged.meta["properties"] = json!({"history.expire.max-ref-age-ms": (5 * DAY).to_string()});
    let p = plan(&aged, &settings(&aged, &forced(Some(0), None), at(NOW)).unwrap());
    assert_eq!(p.refs.keys().cloned().collect::<Vec<_>>(), vec!["main"]);
    assert_eq!(p.kept.iter().copied().collect::<Vec<_>>(), vec![5]);
}

#[test]
fn a_snapshot_no_ref_reaches_stays_while_young() {
    // 9 was staged (a write-audit-publish) and never published; 8 is old.
    let t = table(&[(1, None, 10), (8, Some(1), 9), (9, Some(1), 1), (2, Some(1), 2)], json!({}), json!({}));
    assert_eq!(kept(&t, &forced(Some(5), None)), vec![2, 9]);
    assert_eq!(kept(&t, &forced(Some(0), None)), vec![2]);
}

#[test]
fn the_new_metadata_drops_expired_snapshots_their_log_and_statistics_and_logs_the_version_before() {
    let mut t = line();
    t.meta["statistics"] = json!([
        {"snapshot-id": 2, "statistics-path": "/w/t/metadata/2.stats"},
        {"snapshot-id": 5, "statistics-path": "/w/t/metadata/5.stats"},
    ]);
    // A log entry of a snapshot already gone clears the history before it.
    t.meta["snapshot-log"].as_array_mut().unwrap().insert(3, json!({"snapshot-id": 77, "timestamp-ms": 0}));
    let s = settings(&t, &forced(Some(0), Some(2)), at(NOW)).unwrap();
    let m = expired_metadata(&t, &plan(&t, &s), NOW);
    let ids =
        |key: &str| m[key].as_array().unwrap().iter().map(|e| e["snapshot-id"].as_i64().unwrap()).collect::<Vec<_>>();
    assert_eq!(ids("snapshots"), vec![4, 5]);
    assert_eq!(ids("snapshot-log"), vec![4, 5]);
    assert_eq!(ids("statistics"), vec![5]);
    assert_eq!(m["current-snapshot-id"], json!(5));
    assert_eq!(m["refs"]["main"]["snapshot-id"], json!(5));
    assert_eq!(
        m["metadata-log"],
        json!([{"timestamp-ms": NOW - DAY, "metadata-file": "/w/t/metadata/v7.metadata.json"}])
    );
    assert_eq!(m["last-updated-ms"], json!(NOW));
}

#[test]
fn retentions_shorter_than_the_tables_and_tables_that_forbid_deletes_are_refused_by_name() {
    let t = line();
    let short = Retention { older_than: Some(Duration::from_secs(3600)), ..Retention::default() };
    let why = settings(&t, &short, at(NOW)).unwrap_err();
    assert!(why.contains("1h is shorter than the table's history.expire.max-snapshot-age-ms (5d)"), "{why}");
    assert!(why.contains("expire.force=true"), "{why}");
    assert!(settings(&t, &Retention { force: true, ..short.clone() }, at(NOW)).is_ok());
    let mut longer = t.clone();
    longer.meta["properties"] =
        json!({"history.expire.max-snapshot-age-ms": "60000", "history.expire.min-snapshots-to-keep": "3"});
    assert!(settings(&longer, &short, at(NOW)).is_ok(), "an hour is longer than this table's minute");
    let few = Retention { retain_last: Some(2), ..Retention::default() };
    assert!(settings(&longer, &few, at(NOW)).unwrap_err().contains("fewer than the table's"));
    let mut gc = t.clone();
    gc.meta["properties"] = json!({"gc.enabled": "false"});
    assert!(settings(&gc, &forced(Some(0), None), at(NOW)).unwrap_err().contains("gc.enabled is false"));
    let log = Retention { log_older_than: Some(Duration::ZERO), ..forced(Some(0), None) };
    assert!(settings(&t, &log, at(NOW)).unwrap_err().contains("expire.log-older-than is a Delta table's setting"));
    let mut bad = t.clone();
    bad.meta["properties"] = json!({"history.expire.max-snapshot-age-ms": "5 days"});
    assert!(settings(&bad, &Retention::default(), at(NOW)).unwrap_err().contains("not a number"));
    let mut v4 = t;
    v4.meta["format-version"] = json!(4);
    assert!(settings(&v4, &Retention::default(), at(NOW)).unwrap_err().contains("format version 4"));
}
