//! A policy file (TOML) as an operator writes it, checked into a
//! [`PolicyDefinition`]. Unknown keys, bad values, a bad cron or zone are
//! refused naming the file, the line and the key.
//!
//! ```toml
//! name = "warehouse"
//! tables = ["db/public/*"]      # <db>/<schema>/<table>, `*` and `?` within a segment
//! executor = "merge"            # merge | parquet | delta | iceberg | a command name nodes define
//! min-small-files = 4           # due at 4 small files (or min-small-bytes, max-small-age)
//! ```

use layouts::policies::PolicyDefinition;
use layouts::{units, Name};
use serde::Deserialize;

use super::PolicyError;
use crate::schedule::{Cron, Windows};

/// The file's keys; every one but `name` and `tables` has a default.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct PolicyFile {
    name: String,
    tables: Vec<String>,
    #[serde(default = "default_executor")]
    executor: String,
    #[serde(default)]
    sole_writer: bool,
    target_size: Option<Size>,
    small_file_size: Option<Size>,
    min_small_files: Option<u64>,
    min_small_bytes: Option<Size>,
    max_small_age: Option<String>,
    schedule: Option<String>,
    time_zone: Option<String>,
    #[serde(default)]
    windows: Vec<String>,
    min_interval: Option<String>,
    weight: Option<u32>,
    max_units_per_table: Option<u32>,
    min_file_age: Option<String>,
    file_group_size: Option<Size>,
    delete_file_threshold: Option<u64>,
    expire_every: Option<String>,
    expire_older_than: Option<String>,
    expire_retain_last: Option<u64>,
}

/// A size: bytes, or a string with a unit (`"128MiB"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

fn default_executor() -> String {
    "merge".into()
}

pub const DEFAULT_TARGET_SIZE: u64 = 128 << 20;
pub const DEFAULT_MIN_INTERVAL_MS: u64 = 10 * 60 * 1000;
/// The largest `min-small-files` (a billion small files in one partition).
pub const MAX_MIN_SMALL_FILES: u64 = 1_000_000_000;
/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 1_000_000;
/// The shortest `expire-every`: a retention lists the whole table and
/// reads its metadata, more often than this it would cost more than it
/// frees.
pub const MIN_EXPIRE_EVERY_MS: u64 = 60 * 1000;

/// Parses and checks a policy file; `path` names it in errors.
pub fn parse(path: &str, text: &str) -> Result<PolicyDefinition, PolicyError> {
    let bad = |problem: String| PolicyError::File { path: path.to_string(), problem };
    let f: PolicyFile = toml::from_str(text).map_err(|e| bad(e.to_string().trim_end().to_string()))?;
    // Errors found after parsing name the key and the line it is on.
    let at = |key: &str| line_of(text, key).map(|l| format!("line {l}, key `{key}`")).unwrap_or(format!("key `{key}`"));
    let name = Name::parse(&f.name).map_err(|e| bad(format!("{}: {e}", at("name"))))?;
    if f.tables.is_empty() {
        return Err(bad(format!("{}: name at least one `<db>/<schema>/<table>` pattern", at("tables"))));
    }
    for t in &f.tables {
        check_pattern(t).map_err(|p| bad(format!("{}: {t:?}: {p}", at("tables"))))?;
    }
    check_executor(&f.executor).map_err(|p| bad(format!("{}: {p}", at("executor"))))?;
    if f.sole_writer && f.executor != "iceberg" {
        return Err(bad(format!("{}: only the iceberg executor commits as a table's sole writer", at("sole-writer"))));
    }
    // Sizes, durations and counts each have a maximum (`layouts::units`),
    // named with the key.
    let size = |key: &str, v: &Option<Size>, max: u64| -> Result<Option<u64>, PolicyError> {
        let checked = match v {
            None => return Ok(None),
            Some(Size::Bytes(n)) => units::check_size(*n, max),
            Some(Size::Text(s)) => units::parse_size_max(s, max),
        };
        checked.map(Some).map_err(|p| bad(format!("{}: {p}", at(key))))
    };
    let duration = |key: &str, v: &Option<String>| -> Result<Option<u64>, PolicyError> {
        v.as_deref()
            .map(|s| units::parse_duration_or_zero(s).map(units::millis).map_err(|p| bad(format!("{}: {p}", at(key)))))
            .transpose()
    };
    let count = |key: &str, v: Option<u64>, min: u64, max: u64, why: &str| -> Result<Option<u64>, PolicyError> {
        match v {
            Some(n) if n < min => Err(bad(format!("{}: at least {min}{why}", at(key)))),
            Some(n) if n > max => Err(bad(format!("{}: {n} is over the maximum of {max}", at(key)))),
            other => Ok(other),
        }
    };
    let target_size = size("target-size", &f.target_size, units::MAX_TARGET_SIZE)?.unwrap_or(DEFAULT_TARGET_SIZE);
    let small_file_size =
        size("small-file-size", &f.small_file_size, units::MAX_TARGET_SIZE)?.unwrap_or(target_size / 2).max(1);
    if small_file_size > target_size {
        return Err(bad(format!("{}: over the target size ({target_size} bytes)", at("small-file-size"))));
    }
    let min_small_bytes = size("min-small-bytes", &f.min_small_bytes, units::MAX_SIZE)?;
    let max_small_age_ms = duration("max-small-age", &f.max_small_age)?;
    if f.min_small_files.is_none() && min_small_bytes.is_none() && max_small_age_ms.is_none() {
        return Err(bad("say when a partition is due: min-small-files, min-small-bytes or max-small-age".into()));
    }
    let min_small_files =
        count("min-small-files", f.min_small_files, 2, MAX_MIN_SMALL_FILES, " (one file is not merged)")?;
    let time_zone = f.time_zone.clone().unwrap_or_else(|| "UTC".into());
    if let Some(expr) = &f.schedule {
        Cron::parse(expr, &time_zone).map_err(|e| bad(format!("{}: {e}", at("schedule"))))?;
    } else if f.time_zone.is_some() {
        Cron::parse("0 0 * * *", &time_zone).map_err(|e| bad(format!("{}: {e}", at("time-zone"))))?;
    }
    Windows::parse(&f.windows, &time_zone).map_err(|e| bad(format!("{}: {e}", at("windows"))))?;
    let weight = count("weight", f.weight.map(u64::from), 1, MAX_WEIGHT.into(), "")?.unwrap_or(1) as u32;
    let max_units_per_table = count(
        "max-units-per-table",
        f.max_units_per_table.map(u64::from),
        1,
        layouts::limits::MAX_UNITS.into(),
        " (pause the policy to stop it)",
    )?
    .map(|n| n as u32);
    let min_file_age_ms = duration("min-file-age", &f.min_file_age)?;
    for (key, set) in
        [("file-group-size", f.file_group_size.is_some()), ("delete-file-threshold", f.delete_file_threshold.is_some())]
    {
        if set && f.executor != "iceberg" {
            return Err(bad(format!("{}: only the iceberg executor takes it", at(key))));
        }
    }
    let file_group_size = size("file-group-size", &f.file_group_size, units::MAX_SIZE)?;
    let delete_file_threshold =
        count("delete-file-threshold", f.delete_file_threshold, 1, u32::MAX.into(), " (delete files)")?;
    // `expire-every`: a duration, or else a cron expression in the
    // policy's zone.
    let (expire_every_ms, expire_schedule) = match f.expire_every.as_deref() {
        None => (None, None),
        Some(text) => match units::parse_duration_or_zero(text) {
            Ok(d) => (Some(units::millis(d)), None),
            Err(as_duration) => match Cron::parse(text, &time_zone) {
                Ok(_) => (None, Some(text.to_string())),
                Err(as_cron) => {
                    let why = format!("neither a duration ({as_duration}) nor a cron expression ({as_cron})");
                    return Err(bad(format!("{}: {why}", at("expire-every"))));
                }
            },
        },
    };
    let expire_older_than_ms = duration("expire-older-than", &f.expire_older_than)?;
    let expire_retain_last = count("expire-retain-last", f.expire_retain_last, 1, u32::MAX.into(), " (versions)")?;
    if let Some(ms) = expire_every_ms.filter(|ms| *ms < MIN_EXPIRE_EVERY_MS) {
        return Err(bad(format!("{}: {ms} ms is under the minimum of 1m", at("expire-every"))));
    }
    if f.expire_every.is_some() && !matches!(f.executor.as_str(), "delta" | "iceberg") {
        let why = "only delta and iceberg tables keep old versions to expire (a folder table's merge deletes what it replaces)";
        return Err(bad(format!("{}: {why}", at("expire-every"))));
    }
    for (key, set) in
        [("expire-older-than", expire_older_than_ms.is_some()), ("expire-retain-last", expire_retain_last.is_some())]
    {
        if set && f.expire_every.is_none() {
            return Err(bad(format!("{}: set with expire-every (how often the retention runs)", at(key))));
        }
    }
    Ok(PolicyDefinition {
        min_file_age_ms,
        file_group_size,
        delete_file_threshold,
        expire_every_ms,
        expire_schedule,
        expire_older_than_ms,
        expire_retain_last,
        name,
        version: 0,
        tables: f.tables,
        executor: f.executor,
        sole_writer: f.sole_writer,
        target_size,
        small_file_size,
        min_small_files,
        min_small_bytes,
        max_small_age_ms,
        schedule: f.schedule,
        time_zone,
        windows: f.windows,
        min_interval_ms: duration("min-interval", &f.min_interval)?.unwrap_or(DEFAULT_MIN_INTERVAL_MS),
        weight,
        max_units_per_table,
        wall_ms: 0,
        by: String::new(),
    })
}

/// The 1-based line where `key` is set at the top level of the file.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.trim_start().strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')))
        .map(|i| i + 1)
}

fn check_pattern(p: &str) -> Result<(), String> {
    let parts: Vec<&str> = p.split('/').collect();
    if parts.len() != 3 {
        return Err("a pattern is `<db>/<schema>/<table>` (three segments)".into());
    }
    for seg in parts {
        if seg.is_empty() || seg == "." || seg == ".." || seg.chars().any(|c| c.is_control() || c == '\\') {
            return Err(format!("segment {seg:?} is not a name or a glob of one"));
        }
    }
    Ok(())
}

fn check_executor(e: &str) -> Result<(), String> {
    if ["merge", "parquet", "delta", "iceberg"].contains(&e) || crate::tasks::valid_command_name(e) {
        Ok(())
    } else {
        Err(format!(
            "{e:?} is not an executor: merge, parquet, delta, iceberg, or the name of a command nodes define \
             (`run --command NAME=…`)"
        ))
    }
}

/// Does `pattern` (`*` any run, `?` one character, per segment) match
/// `<db>/<schema>/<table>`?
pub fn matches(pattern: &str, db: &str, schema: &str, table: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    p.len() == 3 && glob(p[0], db) && glob(p[1], schema) && glob(p[2], table)
}

/// How specific a pattern is: more literal characters win, then fewer
/// wildcards (`db/public/orders` > `db/public/ord*` > `db/public/*` > `*/*/*`).
pub fn specificity(pattern: &str) -> (usize, std::cmp::Reverse<usize>) {
    let wild = pattern.chars().filter(|c| *c == '*' || *c == '?').count();
    (pattern.chars().count() - wild - pattern.matches('/').count(), std::cmp::Reverse(wild))
}

/// One segment's glob: `*` any run, `?` one character. Allocates nothing
/// for ASCII names (the planner matches every table of a pass).
pub(crate) fn glob(p: &str, s: &str) -> bool {
    if p.is_ascii() && s.is_ascii() {
        return glob_in(p.as_bytes(), s.as_bytes(), b'*', b'?');
    }
    let (p, s): (Vec<char>, Vec<char>) = (p.chars().collect(), s.chars().collect());
    glob_in(&p, &s, '*', '?')
}

fn glob_in<T: PartialEq + Copy>(p: &[T], s: &[T], any: T, one: T) -> bool {
    // Iterative match with backtracking to the last `*`.
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == one || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == any {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == any)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimal_file_of_the_issue_is_accepted_with_defaults() {
        let text = "name = \"warehouse\"\ntables = [\"db/public/*\"]\nexecutor = \"merge\"\nmin-small-files = 4\n";
        let p = parse("w.toml", text).unwrap();
        assert_eq!(p.name.as_str(), "warehouse");
        assert_eq!(p.min_small_files, Some(4));
        assert_eq!((p.target_size, p.small_file_size), (DEFAULT_TARGET_SIZE, DEFAULT_TARGET_SIZE / 2));
        assert_eq!((p.weight, p.max_units_per_table, p.time_zone.as_str()), (1, None, "UTC"));
        assert_eq!((p.min_file_age_ms, p.min_file_age_ms()), (None, 10 * 60 * 1000));
        let p = parse("w.toml", &format!("{text}min-file-age = \"0s\"\n")).unwrap();
        assert_eq!((p.min_file_age_ms, p.min_file_age_ms()), (Some(0), 0));
        let e = parse("w.toml", &format!("{text}min-file-age = \"soon\"\n")).unwrap_err().to_string();
        assert!(e.contains("line 5, key `min-file-age`"), "{e}");
    }

    #[test]
    fn bad_files_are_refused_naming_the_file_line_and_key() {
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\nsmall-files = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.toml") && e.contains("line 4") && e.contains("small-files"), "{e}");
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\nschedule = \"0 25 * * *\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("w.toml") && e.contains("line 4, key `schedule`"), "{e}");
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\nexecutor = \"no such\"\nmin-small-files = 4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3, key `executor`"), "{e}");
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b\"]\nmin-small-files = 4\n").unwrap_err().to_string();
        assert!(e.contains("line 2, key `tables`"), "{e}");
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\n").unwrap_err().to_string();
        assert!(e.contains("say when a partition is due"), "{e}");
        let e =
            parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\ntime-zone = \"Mars/Olympus\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4, key `time-zone`"), "{e}");
    }

    #[test]
    fn sizes_durations_and_counts_are_refused_past_their_maximum_naming_the_key() {
        let base = "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\n";
        let cases = [
            ("min-interval = \"18446744073709552s\"", "line 4, key `min-interval`", "maximum of 3650d"),
            ("max-small-age = \"18446744073709552s\"", "line 4, key `max-small-age`", "maximum of 3650d"),
            ("target-size = \"17179869184GiB\"", "line 4, key `target-size`", "maximum of 64 GiB"),
            ("target-size = 9223372036854775807", "line 4, key `target-size`", "maximum of 64 GiB"),
            ("target-size = 0", "line 4, key `target-size`", "positive"),
            ("min-small-bytes = \"2TiB\"", "line 4, key `min-small-bytes`", "maximum of 1 TiB"),
            ("weight = 4000000000", "line 4, key `weight`", "maximum of 1000000"),
            ("max-units-per-table = 100001", "line 4, key `max-units-per-table`", "maximum of 100000"),
        ];
        for (line, at, says) in cases {
            let e = parse("w.toml", &format!("{base}{line}\n")).unwrap_err().to_string();
            assert!(e.contains("w.toml") && e.contains(at) && e.contains(says), "{line}: {e}");
        }
        let e = parse("w.toml", "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 2000000000\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3, key `min-small-files`") && e.contains("maximum"), "{e}");
        // At the maximum: taken, and stored without a wrap.
        let p = parse("w.toml", &format!("{base}min-interval = \"3650d\"\ntarget-size = \"64GiB\"\n")).unwrap();
        assert_eq!(p.min_interval_ms, 3650 * 86_400 * 1000);
        assert_eq!(p.target_size, 64 << 30);
    }

    #[test]
    fn only_the_iceberg_executor_takes_the_sole_writer_statement() {
        let base = "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\n";
        let p = parse("w.toml", &format!("{base}executor = \"iceberg\"\nsole-writer = true\n")).unwrap();
        assert!(p.sole_writer && p.executor == "iceberg");
        assert!(!parse("w.toml", &format!("{base}executor = \"iceberg\"\n")).unwrap().sole_writer);
        let p = parse(
            "w.toml",
            &format!("{base}executor = \"iceberg\"\nfile-group-size = \"2GiB\"\ndelete-file-threshold = 8\n"),
        )
        .unwrap();
        assert_eq!((p.file_group_size, p.delete_file_threshold), (Some(2 << 30), Some(8)));
        let e = parse("w.toml", &format!("{base}delete-file-threshold = 8\n")).unwrap_err().to_string();
        assert!(e.contains("delete-file-threshold") && e.contains("only the iceberg executor"), "{e}");
        let e =
            parse("w.toml", &format!("{base}executor = \"parquet\"\nsole-writer = true\n")).unwrap_err().to_string();
        assert!(e.contains("line 5, key `sole-writer`"), "{e}");
    }

    #[test]
    fn a_retention_is_for_delta_and_iceberg_tables_every_minute_or_more_or_on_a_cron() {
        let base = "name = \"w\"\ntables = [\"a/b/c\"]\nmin-small-files = 4\n";
        let p = parse("w.toml", &format!("{base}executor = \"delta\"\nexpire-every = \"1d\"\n")).unwrap();
        assert_eq!((p.expire_every_ms, p.expire_older_than_ms, p.expire_retain_last), (Some(86_400_000), None, None));
        let text = format!(
            "{base}executor = \"iceberg\"\nexpire-every = \"6h\"\nexpire-older-than = \"3d\"\nexpire-retain-last = 5\n"
        );
        let p = parse("w.toml", &text).unwrap();
        assert_eq!(
            (p.expire_every_ms, p.expire_older_than_ms, p.expire_retain_last),
            (Some(21_600_000), Some(259_200_000), Some(5))
        );
        let p = parse("w.toml", &format!("{base}executor = \"delta\"\nexpire-every = \"0 3 * * *\"\n")).unwrap();
        assert_eq!((p.expire_every_ms, p.expire_schedule.as_deref()), (None, Some("0 3 * * *")));
        let cases = [
            ("executor = \"delta\"\nexpire-every = \"soon\"\n", "line 5, key `expire-every`", "nor a cron expression"),
            ("expire-every = \"1d\"\n", "line 4, key `expire-every`", "only delta and iceberg"),
            ("executor = \"delta\"\nexpire-every = \"10s\"\n", "line 5, key `expire-every`", "minimum of 1m"),
            (
                "executor = \"delta\"\nexpire-older-than = \"1d\"\n",
                "line 5, key `expire-older-than`",
                "with expire-every",
            ),
            (
                "executor = \"delta\"\nexpire-every = \"1d\"\nexpire-retain-last = 0\n",
                "line 6, key `expire-retain-last`",
                "at least 1",
            ),
        ];
        for (lines, at, says) in cases {
            let e = parse("w.toml", &format!("{base}{lines}")).unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(says), "{lines}: {e}");
        }
    }

    #[test]
    fn patterns_match_per_segment_and_the_most_specific_wins() {
        assert!(matches("db/public/*", "db", "public", "orders"));
        assert!(!matches("db/public/*", "db", "private", "orders"));
        assert!(matches("*/*/ord?rs", "x", "y", "orders"));
        assert!(!matches("*/*/ord?rs", "x", "y", "ordrs"));
        assert!(matches("db/*/*_raw", "db", "s", "events_raw"));
        assert!(!matches("db/*/*_raw", "db", "s", "events_raw2"));
        let mut ps = ["*/*/*", "db/public/orders", "db/public/*", "db/public/ord*"];
        ps.sort_by_key(|p| std::cmp::Reverse(specificity(p)));
        assert_eq!(ps, ["db/public/orders", "db/public/ord*", "db/public/*", "*/*/*"]);
    }
}
