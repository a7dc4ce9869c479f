//! Units that record when they run: a command executor's command that
//! stamps its start, a sign of life every 50 ms and its end into files named
//! by node, unit and attempt, and the after-the-fact check that no unit ran
//! on two nodes at once (a later attempt starts after the earlier one's last
//! sign of life).

use std::collections::BTreeMap;
use std::path::Path;

/// A unit's run as its command recorded it: start, the last "alive" stamp
/// (every 50 ms while it sleeps) and, if it was not killed, its end.
#[derive(Debug)]
pub struct Run {
    pub node: String,
    pub attempt: u64,
    pub start_ns: u128,
    pub last_ns: u128,
    pub ended: bool,
}

/// Runs `sleep` seconds, stamping a file every 50 ms; the file is named by
/// node, unit and attempt.
pub fn recording_command(dir: &Path, node: &str, secs: u32) -> String {
    format!(
        "cd /; f={dir}/{node}.$COMPACTD_SHARD_INDEX.$COMPACTD_ATTEMPT; date +%s%N > \"$f.start\"; \
         i=0; while [ $i -lt {n} ]; do date +%s%N > \"$f.alive\"; sleep 0.05; i=$((i+1)); done; \
         date +%s%N > \"$f.end\"",
        dir = dir.display(),
        n = secs * 20,
    )
}

/// [`recording_command`] into a folder per task (`<dir>/<task id>/`): for
/// tests that run several tasks on one set of nodes.
pub fn recording_command_per_task(dir: &Path, node: &str, secs: u32) -> String {
    let task_dir = format!("{}/$COMPACTD_TASK", dir.display());
    format!("mkdir -p \"{task_dir}\"; {}", recording_command(Path::new(&task_dir), node, secs))
}

pub fn read_runs(dir: &Path) -> BTreeMap<u64, Vec<Run>> {
    let ns = |p: &Path| std::fs::read_to_string(p).ok().and_then(|t| t.trim().parse::<u128>().ok());
    let mut out: BTreeMap<u64, Vec<Run>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".start") else { continue };
        let parts: Vec<&str> = stem.split('.').collect();
        let (node, unit, attempt) = (parts[0].to_string(), parts[1].parse().unwrap(), parts[2].parse().unwrap());
        // Empty: the command was killed (or is) between creating the file
        // and writing it.
        let Some(start_ns) = ns(&e.path()) else { continue };
        let last_ns = ns(&dir.join(format!("{stem}.alive"))).unwrap_or(start_ns);
        let end = ns(&dir.join(format!("{stem}.end")));
        out.entry(unit).or_default().push(Run {
            node,
            attempt,
            start_ns,
            last_ns: end.unwrap_or(last_ns),
            ended: end.is_some(),
        });
    }
    out
}

/// Panics if a later attempt of a unit started before an earlier attempt's
/// last sign of life; returns the number of runs that were cut short.
pub fn assert_no_overlap(runs: &BTreeMap<u64, Vec<Run>>) -> usize {
    let mut killed = 0;
    for (unit, list) in runs {
        for a in list {
            killed += usize::from(!a.ended);
            for b in list.iter().filter(|b| b.attempt > a.attempt) {
                assert!(
                    b.start_ns > a.last_ns,
                    "unit {unit}: attempt {} on {} started {} ms before attempt {} on {} stopped: {list:?}",
                    b.attempt,
                    b.node,
                    (a.last_ns - b.start_ns) / 1_000_000,
                    a.attempt,
                    a.node
                );
            }
        }
    }
    killed
}

/// The time between an earlier attempt's last sign of life and a later
/// attempt's start, of one unit: the margin the protocol left (negative
/// would be an overlap, which [`assert_no_overlap`] refuses).
#[derive(Debug, Clone)]
pub struct Gap {
    pub unit: u64,
    /// The earlier run: node, attempt, and whether it ran to its end (false:
    /// it was killed, by its node's session guard or a rejoin).
    pub before: (String, u64, bool),
    pub after: (String, u64),
    pub ms: f64,
}

/// For each run after a unit's first: the gap to the latest sign of life
/// of the unit's earlier attempts.
pub fn gaps(runs: &BTreeMap<u64, Vec<Run>>) -> Vec<Gap> {
    let mut out = vec![];
    for (unit, list) in runs {
        for b in list {
            let Some(a) = list.iter().filter(|a| a.attempt < b.attempt).max_by_key(|a| a.last_ns) else { continue };
            out.push(Gap {
                unit: *unit,
                before: (a.node.clone(), a.attempt, a.ended),
                after: (b.node.clone(), b.attempt),
                ms: (b.start_ns as f64 - a.last_ns as f64) / 1e6,
            });
        }
    }
    out
}

/// Every unit ran once, to its end. `moved`: a unit given to a node by
/// `reassign`, which cuts short a run it may have begun where it was first
/// placed; that run is allowed once, ended before the unit's run on the
/// node it was given to began.
pub fn assert_each_ran_once(runs: &BTreeMap<u64, Vec<Run>>, moved: Option<(u64, &str)>) {
    for (unit, list) in runs {
        let list: Vec<&Run> = match moved {
            Some((u, to)) if u == *unit => {
                let (cut, rest): (Vec<&Run>, Vec<&Run>) = list.iter().partition(|r| !r.ended && r.node != to);
                assert!(cut.len() <= 1, "unit {unit} was cut short more than once: {list:?}");
                for c in &cut {
                    assert!(rest.iter().all(|r| r.start_ns > c.last_ns), "unit {unit} ran twice at once: {list:?}");
                }
                rest
            }
            _ => list.iter().collect(),
        };
        assert_eq!(list.len(), 1, "unit {unit} ran more than once: {list:?}");
        assert!(list[0].ended, "unit {unit} did not finish: {list:?}");
    }
}

/// A duration field of a log line (`late=12.5ms`), in ms.
pub fn field_ms(line: &str, key: &str) -> Option<f64> {
    let v = line.split(key).nth(1)?.split_whitespace().next()?;
    let num: String = v.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let x: f64 = num.parse().ok()?;
    Some(match &v[num.len()..] {
        "ns" => x / 1e6,
        "µs" | "us" => x / 1e3,
        "ms" => x,
        "s" => x * 1e3,
        _ => return None,
    })
}

/// The smallest gap, overall and after a run that was killed.
pub fn smallest(g: &[Gap]) -> (Option<&Gap>, Option<&Gap>) {
    let by = |a: &&Gap, b: &&Gap| a.ms.total_cmp(&b.ms);
    (g.iter().min_by(by), g.iter().filter(|g| !g.before.2).min_by(by))
}
