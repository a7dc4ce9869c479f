//! File groups: how one large partition is shared by the cluster, as
//! Spark's `rewrite_data_files` splits a partition by
//! `max-file-group-size-bytes`.
//!
//! A partition whose files to rewrite weigh more than the group size is
//! planned as `n` units named `<partition key>#g<k>of<n>` (`#` never occurs
//! in a partition key: [`super::manifest::unit_key`] escapes it). A data
//! file belongs to group `fnv64(path) mod n`: the planner and every unit
//! compute it alone from the file's path, so groups never share a file
//! whatever is appended or rewritten between the plan and a unit's read,
//! and a file committed after the plan joins exactly one group. All groups
//! of a task commit in its one snapshot; a group that fails leaves its
//! files for the next task while the others commit (Spark's
//! `partial-progress.enabled`).

use std::collections::BTreeMap;

use super::manifest::fnv64;

/// The task parameter that sets the group size (bytes, or a size such as
/// `10GiB`).
pub const GROUP_BYTES_PARAM: &str = "iceberg.max-file-group-size-bytes";

/// Set in a task's parameters once its named partitions were split into
/// groups: a later manager plans the same units, never splits again (the
/// partitions may have grown since; units are matched by index, and a
/// shifted list would run a partition twice).
pub const SPLIT_PARAM: &str = "compactd_iceberg_groups";

/// The group size when the task sets none: a tenth of Spark's 100 GB, so
/// a partition of tens of gigabytes keeps several nodes busy; each group
/// ends with at most one output under the target size.
pub const DEFAULT_GROUP_BYTES: u64 = 10 << 30;

/// Groups of fewer files than this are not planned: a group of one small
/// file rewrites nothing.
const MIN_FILES_PER_GROUP: usize = 4;

/// The unit of group `k` of `n` of `partition` (the partition's own key
/// when it is not split).
pub fn unit_name(partition: &str, k: u32, n: u32) -> String {
    if n <= 1 {
        partition.to_string()
    } else {
        format!("{partition}#g{k}of{n}")
    }
}

/// A unit's partition key and its group (`k`, `n`), if it is one.
pub fn parse(unit: &str) -> (&str, Option<(u32, u32)>) {
    let Some((partition, group)) = unit.rsplit_once("#g") else { return (unit, None) };
    let Some((k, n)) = group.split_once("of") else { return (unit, None) };
    match (k.parse::<u32>(), n.parse::<u32>()) {
        (Ok(k), Ok(n)) if k < n && n > 1 => (partition, Some((k, n))),
        _ => (unit, None),
    }
}

/// The group of `n` a data file (its path as manifests name it) is in.
pub fn of(path: &str, n: u32) -> u32 {
    (fnv64(path) % n.max(1) as u64) as u32
}

/// Whether the data file at `path`, of the partition keyed `partition`,
/// is one of `unit`'s.
pub fn holds(unit: &str, partition: &str, path: &str) -> bool {
    match parse(unit) {
        (p, None) => p == partition,
        (p, Some((k, n))) => p == partition && of(path, n) == k,
    }
}

/// A file the planner may rewrite: its path, size, and whether deletes
/// remove many of its rows (rewritten alone if need be).
pub struct Candidate<'a> {
    pub path: &'a str,
    pub size: u64,
    pub heavy: bool,
}

/// The units of one partition's candidates: as many groups as its bytes
/// need (at least [`MIN_FILES_PER_GROUP`] files each), keeping only the
/// groups with two or more files or one heavy file.
pub fn plan(partition: &str, files: &[Candidate<'_>], group_bytes: u64) -> Vec<String> {
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let by_bytes = bytes.div_ceil(group_bytes.max(1));
    let by_count = (files.len() / MIN_FILES_PER_GROUP).max(1) as u64;
    let n = by_bytes.min(by_count).clamp(1, u32::MAX as u64) as u32;
    let mut groups: BTreeMap<u32, (usize, bool)> = BTreeMap::new();
    for f in files {
        let g = groups.entry(of(f.path, n)).or_default();
        g.0 += 1;
        g.1 |= f.heavy;
    }
    groups
        .into_iter()
        .filter(|(_, (count, heavy))| *count >= 2 || *heavy)
        .map(|(k, _)| unit_name(partition, k, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_keys_that_only_look_like_groups_stay_partitions() {
        assert_eq!(parse(&unit_name("spec0,p=\"a\"", 2, 5)), ("spec0,p=\"a\"", Some((2, 5))));
        assert_eq!(unit_name("spec0", 0, 1), "spec0");
        assert_eq!(parse("spec0,p=1"), ("spec0,p=1", None));
        for odd in ["spec0#g5of5", "spec0#gxof2", "spec0#g1of1", "spec0#g1"] {
            assert_eq!(parse(odd), (odd, None));
        }
    }

    #[test]
    fn groups_split_by_bytes_share_no_file_and_cover_every_one() {
        let paths: Vec<String> = (0..200).map(|i| format!("s3://b/t/data/p=1/f-{i}.parquet")).collect();
        let files: Vec<Candidate> = paths.iter().map(|p| Candidate { path: p, size: 10 << 20, heavy: false }).collect();
        // 2,000 MiB in groups of at most 500 MiB: four groups.
        let units = plan("spec0,p=1", &files, 500 << 20);
        assert_eq!(units.len(), 4, "{units:?}");
        for f in &files {
            assert_eq!(units.iter().filter(|u| holds(u, "spec0,p=1", f.path)).count(), 1, "{}", f.path);
            assert!(!units.iter().any(|u| holds(u, "spec0,p=2", f.path)));
        }
        // Roughly even: no group holds more than twice its share.
        for u in &units {
            let n = files.iter().filter(|f| holds(u, "spec0,p=1", f.path)).count();
            assert!((25..=100).contains(&n), "{u}: {n}");
        }
        // Under the group size, or too few files to split: the partition.
        assert_eq!(plan("spec0,p=1", &files, 4 << 30), vec!["spec0,p=1".to_string()]);
        assert_eq!(plan("spec0,p=1", &files[..3], 1), vec!["spec0,p=1".to_string()]);
    }

    #[test]
    fn a_group_of_one_light_file_is_not_planned() {
        let files = [
            Candidate { path: "a", size: 10, heavy: false },
            Candidate { path: "b", size: 10, heavy: false },
            Candidate { path: "c", size: 10, heavy: false },
            Candidate { path: "d", size: 10, heavy: true },
            Candidate { path: "e", size: 10, heavy: false },
            Candidate { path: "f", size: 10, heavy: false },
            Candidate { path: "g", size: 10, heavy: false },
            Candidate { path: "h", size: 10, heavy: false },
        ];
        let units = plan("spec0", &files, 20);
        assert!(!units.is_empty());
        for u in &units {
            let mine: Vec<&Candidate> = files.iter().filter(|f| holds(u, "spec0", f.path)).collect();
            assert!(mine.len() >= 2 || mine.iter().any(|f| f.heavy), "{u}");
        }
    }
}
