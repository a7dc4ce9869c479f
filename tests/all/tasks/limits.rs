//! Limits with clear errors, with real `compactd`
//! processes on an fs root:
//!
//! - `submit` refuses, before writing anything, a task over a limit of
//!   `layouts::limits` (shards, partitions, params, template), a reserved
//!   partition name (`_compactd`), `--interval` or `--cron` without
//!   `--repeat` (or both), a bad cron pattern or zone, and,
//!   when it is given the data backend, a `--partition` whose folder is not
//!   there, each with the limit or the folder in the message;
//! - a manager that reads a task info over a limit written by another
//!   writer fails the task with the limit as its error, without expanding
//!   its units (its memory stays small), and a merge of a named partition
//!   that does not exist fails naming the folder instead of ending Done.
// Real processes: waits on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster, BIN};
use serde_json::Value;

/// `compactd --root <root> <args>` without COMPACTD_DATA from the test's
/// environment, killed (and the test failed) if it runs past `limit`.
fn compactd(c: &Cluster, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(["--root", &c.root])
        .args(args)
        .env_remove("COMPACTD_DATA")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "compactd {args:?} still running after {limit:?}\n{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                c.logs_text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file below `Compaction_V2/Scheduler/` (where tasks are written).
fn scheduler_files(c: &Cluster) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![c.fs_path().join("Compaction_V2/Scheduler")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

const SUBMIT: [&str; 7] = ["submit", "--db", "db", "--schema", "s", "--table", "t"];

#[test]
fn submit_refuses_what_is_over_a_limit_naming_the_limit() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let data = c.fs_path().with_file_name("data");
    let data_uri = format!("fs://{}", data.display());
    common::table::make_table(&data_uri, 1);
    let big_template = "x".repeat(layouts::limits::MAX_TEMPLATE_BYTES + 1);
    let big_value = format!("k={}", "v".repeat(layouts::limits::MAX_PARAM_VALUE_BYTES + 1));
    let many: Vec<String> = (0..=layouts::limits::MAX_PARAMS).map(|i| format!("k{i}=v")).collect();
    let mut many_params: Vec<&str> = vec![];
    for p in &many {
        many_params.extend(["--param", p]);
    }
    // (extra arguments, exit code, words the message must hold)
    let cases: Vec<(Vec<&str>, i32, Vec<&str>)> = vec![
        (vec!["--shards", "100000000"], 1, vec!["100000000 shards", "100000 units"]),
        (vec!["--partition", "_compactd"], 1, vec!["\"_compactd\"", "reserved"]),
        (vec!["--partition", ".hidden"], 1, vec!["\".hidden\"", "reserved"]),
        (vec!["--command", &big_template], 1, vec!["template", "65536 bytes"]),
        (vec!["--command-name", "x", "--param", &big_value], 1, vec!["param \"k\"", "4096 bytes"]),
        (many_params.clone(), 1, vec!["101 params", "limit of 100"]),
        (vec!["--repeat", "1000001", "--interval", "1s"], 2, vec!["--repeat", "0..=1000000"]),
        (vec!["--interval", "1s"], 2, vec!["--repeat"]),
        (vec!["--cron", "0 2 * * *"], 2, vec!["--repeat"]),
        (vec!["--repeat", "1", "--cron", "0 2 * * *", "--interval", "1s"], 2, vec!["--cron", "--interval"]),
        (vec!["--repeat", "1", "--cron", "0 2 * *"], 2, vec!["\"0 2 * *\"", "5"]),
        (vec!["--repeat", "1", "--cron", "0 2 * * *", "--tz", "Mars/Olympus"], 2, vec!["\"Mars/Olympus\""]),
        (vec!["--partition", "nosuch", "--data", &data_uri], 1, vec!["db/s/t/nosuch/", "data backend"]),
        (vec!["--partition", "dt=0", "--partition", "nosuch2", "--data", &data_uri], 1, vec!["db/s/t/nosuch2/"]),
    ];
    let mut problems = vec![];
    for (extra, code, words) in &cases {
        let mut args = SUBMIT.to_vec();
        args.extend(extra);
        let out = compactd(&c, &args, Duration::from_secs(20));
        let err = stderr(&out);
        let shown: Vec<&str> = extra.iter().map(|a| if a.len() > 40 { "<long>" } else { a }).collect();
        if out.status.code() != Some(*code) {
            problems.push(format!("{shown:?}: exit {:?}, want {code}: {err}", out.status.code()));
        }
        for w in words {
            if !err.contains(w) {
                problems.push(format!("{shown:?}: the message does not hold {w:?}: {err}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(scheduler_files(&c).is_empty(), "a refused submit wrote: {:?}", scheduler_files(&c));
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A task info over the limit, written by another writer (here: a task
/// submitted while its manager was stopped, then rewritten with one shard
/// over the limit, so that a regression costs this test little memory):
/// the manager fails the task naming the limit before expanding its units. And a merge of a named partition that
/// is not on the data backend fails naming the folder, where it used to
/// end Done having merged nothing.
#[test]
fn a_manager_refuses_a_task_over_a_limit_and_a_missing_partition() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    // The default timings: a node stopped for a few seconds stays a member.
    c.timings = vec![];
    let data = c.fs_path().with_file_name("data");
    let data_uri = format!("fs://{}", data.display());
    common::table::make_table(&data_uri, 1);
    c.start_with("n1", &["--data", &data_uri]);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"]);

    c.pause("n1");
    let out = compactd(&c, &["submit", "--db", "d", "--schema", "s", "--table", "t", "--shards", "1", "--json"], {
        Duration::from_secs(20)
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let info_path = scheduler_files(&c).into_iter().find(|p| p.contains(&id) && p.contains("TaskInfo")).unwrap();
    let mut info: Value = serde_json::from_str(&std::fs::read_to_string(&info_path).unwrap()).unwrap();
    let over = layouts::limits::MAX_UNITS + 1;
    info["shards"] = over.into();
    std::fs::write(&info_path, info.to_string()).unwrap();
    c.resume("n1");
    let s = c.wait_status(&id, Duration::from_secs(30), "the forged task to end", |s| {
        s["state"].as_str().is_some_and(|s| ["Done", "Failed", "Cancel"].contains(&s))
    });
    assert_eq!(s["state"], "Failed", "{s:#}");
    let e = s["error"].as_str().unwrap_or_default();
    assert!(e.contains(&format!("{over} shards")) && e.contains("100000 units"), "{s:#}");
    assert!(s["subtasks"].as_array().is_some_and(|a| a.is_empty()), "{s:#}");
    let rss = rss_kib(c.pid("n1"));
    eprintln!("n1 after refusing {over} shards: VmRSS {rss} KiB");
    assert!(rss < 200 * 1024, "the manager grew to {rss} KiB");

    // Without the data backend submit cannot check: the manager does.
    let mut args = SUBMIT.to_vec();
    args.extend(["--partition", "dt=0", "--partition", "nosuch", "--wait", "--json"]);
    let out = compactd(&c, &args, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let s = c.status(&id);
    assert_eq!(s["state"], "Failed", "{s:#}");
    assert!(s["error"].as_str().is_some_and(|e| e.contains("db/s/t/nosuch/")), "{s:#}");
    // The partition that is there merges as before.
    args = SUBMIT.to_vec();
    args.extend(["--partition", "dt=0", "--wait", "--data", &data_uri]);
    let out = compactd(&c, &args, Duration::from_secs(60));
    assert!(out.status.success(), "{}\n{}", stderr(&out), c.logs_text());
}
