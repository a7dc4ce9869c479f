//! `compactd check --data` and `vacuum-orphans` on Delta tables, and the
//! log reader on logs other writers leave, judged by `deltalake` (tables
//! written, optimized, checkpointed and read by it, through
//! `tests/support/delta_tool.py`): a whole classic checkpoint beside an
//! incomplete multi-part one of the same version and Hadoop's hidden `.crc`
//! files are read past; one unreadable table (symlinked `_delta_log`, a
//! corrupt checkpoint) is reported by name while the others are still
//! checked; every version whose active files are missing is named; and the
//! outputs of a unit still running are never removed, whatever
//! `--older-than` says.
// Real processes: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::cluster::BIN;
use common::parquet::{delta_tool, python};
use serde_json::Value;

/// A task id no tree below knows (a hand-run `__merge`'s, or one archived
/// and forgotten).
const UNKNOWN_TASK: &str = "aaaaffff.16176931.56000000.0";

fn py(code: &str) -> String {
    let out = Command::new(python()).args(["-c", code]).output().unwrap();
    assert!(out.status.success(), "{code}\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A table of `appends` deltalake appends (one file each) over `partitions`.
fn gen(table: &Path, appends: u32, partitions: u32) -> Value {
    std::fs::create_dir_all(table.parent().unwrap()).unwrap();
    let t = table.to_str().unwrap();
    let (a, p) = (appends.to_string(), partitions.to_string());
    delta_tool(&["gen", "--table", t, "--appends", &a, "--partitions", &p, "--rows", "50"], &[])
}

/// An empty scheduler tree (`check` and `vacuum-orphans` read one).
fn tree(dir: &Path) -> String {
    std::fs::create_dir_all(dir.join("Compaction_V2/Registry")).unwrap();
    format!("fs://{}", dir.display())
}

fn compactd(tree: &str, args: &[&str]) -> Output {
    Command::new(BIN).args(["--root", tree]).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The `add` paths of one commit of a table.
fn added(table: &Path, version: u64) -> Vec<String> {
    let commit = std::fs::read_to_string(table.join(format!("_delta_log/{version:020}.json"))).unwrap();
    commit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|a| a["add"]["path"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_whole_classic_checkpoint_is_read_beside_an_incomplete_multi_part_one_and_hidden_crc_files_are_ignored() {
    let _turn = crate::common::turns::waits();
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    let table = lake.join("db/s/t");
    let generated = gen(&table, 6, 2);
    assert_eq!(generated["version"], 5, "{generated}");
    let t = table.to_str().unwrap();
    py(&format!("import deltalake; deltalake.DeltaTable({t:?}).create_checkpoint()"));
    let log = table.join("_delta_log");
    let classic = log.join(format!("{:020}.checkpoint.parquet", 5));
    assert!(classic.exists());
    // Part 1 of 2 of a multi-part checkpoint of the same version, whose
    // part 2 never came: readers must ignore it, not the version.
    std::fs::copy(&classic, log.join(format!("{:020}.checkpoint.0000000001.0000000002.parquet", 5))).unwrap();
    // The commits it covers, cleaned up as a log cleanup does.
    for v in 0..5u64 {
        std::fs::remove_file(log.join(format!("{v:020}.json"))).unwrap();
    }
    // Hadoop's checksum files (Spark on a local file system writes them).
    std::fs::write(log.join(format!(".{:020}.checkpoint.parquet.crc", 5)), b"crc\0\0\0\x02\x00\x00\x01\x00").unwrap();
    std::fs::write(log.join(format!(".{:020}.json.crc", 5)), b"crc\0\0\0\x02\x00\x00\x01\x00").unwrap();
    let before = delta_tool(&["check", "--table", t, "--min-version", "5"], &[]);
    assert_eq!(before["rows"], generated["rows"], "deltalake reads the table: {before}");
    // compactd reads version 5 from the whole checkpoint and commits 6.
    let out = Command::new(BIN)
        .args(["--root", &format!("fs://{}", lake.display()), "__merge", "--format", "delta", "--dir", "db/s/t/"])
        .args(["--partition", "part=0", "--task", UNKNOWN_TASK, "--round", "1", "--attempt", "1"])
        .args(["--target-size", "8MiB"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("committed table version 6 (read version 5"), "{stdout}");
    let after = delta_tool(&["check", "--table", t, "--min-version", "5"], &[]);
    assert_eq!(after["rows"], generated["rows"], "{after}");
    assert_eq!(after["optimize_versions"], serde_json::json!([6]), "{after}");
    // check --data and vacuum-orphans read it too: nothing to report.
    let tree = tree(&tmp.path().join("tree"));
    let data = format!("fs://{}", lake.display());
    let check = compactd(&tree, &["check", "--data", &data]);
    assert!(check.status.success(), "{}", text(&check));
    let vac = compactd(&tree, &["vacuum-orphans", "--data", &data, "--older-than", "1ms", "--unknown-tasks-finished"]);
    assert!(vac.status.success(), "{}", text(&vac));
    assert!(String::from_utf8_lossy(&vac.stderr).contains("0 orphans removed"), "{}", text(&vac));
}

#[test]
fn check_data_goes_on_past_unreadable_tables_and_names_every_version_whose_files_are_missing() {
    let _turn = crate::common::turns::waits();
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    let s = lake.join("db/s");
    // A sound table, with an orphan of a task no tree knows.
    gen(&s.join("good"), 4, 2);
    let first = s.join("good").join(&added(&s.join("good"), 0)[0]);
    let orphan = first.with_file_name(format!("compactd-{UNKNOWN_TASK}-r1-u0123456789abcdef-a1-0.parquet"));
    std::fs::copy(&first, &orphan).unwrap();
    // A damaged one: the file appended at version 2 is gone; deltalake's
    // OPTIMIZE removed it from version 6 on, and version 7 appends.
    let damaged = s.join("damaged");
    gen(&damaged, 6, 2);
    let d = damaged.to_str().unwrap();
    py(&format!(
        "import deltalake, pyarrow as pa\n\
         deltalake.DeltaTable({d:?}).optimize.compact()\n\
         deltalake.write_deltalake({d:?}, pa.table({{'id': pa.array([999999], pa.int64()), \
         'part': pa.array([0], pa.int64()), 'payload': ['x'], 'value': [0.5]}}), mode='append', \
         partition_by=['part'])"
    ));
    let lost = added(&damaged, 2).remove(0);
    std::fs::remove_file(damaged.join(urlencoding_decode(&lost))).unwrap();
    // A table whose _delta_log is a symbolic link (compactd follows none).
    std::fs::create_dir_all(s.join("linked")).unwrap();
    std::os::unix::fs::symlink(s.join("good/_delta_log"), s.join("linked/_delta_log")).unwrap();
    // A table whose checkpoint is not Parquet.
    let corrupt = s.join("corrupt");
    gen(&corrupt, 3, 1);
    let c = corrupt.to_str().unwrap();
    py(&format!("import deltalake; deltalake.DeltaTable({c:?}).create_checkpoint()"));
    std::fs::write(corrupt.join(format!("_delta_log/{:020}.checkpoint.parquet", 2)), b"PAR1 torn PAR1").unwrap();

    let tree = tree(&tmp.path().join("tree"));
    let data = format!("fs://{}", lake.display());
    let check = compactd(&tree, &["check", "--data", &data, "--json"]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    let found: Vec<Value> = serde_json::from_slice(&check.stdout).unwrap();
    eprintln!("{found:#?}");
    let about = |path: &str| -> Vec<String> {
        found.iter().filter(|a| a["path"] == path).map(|a| a["problem"].as_str().unwrap().to_string()).collect()
    };
    let dmg = about("db/s/damaged/");
    assert_eq!(dmg.len(), 1, "{found:#?}");
    assert!(dmg[0].contains("versions 2-5 name active files that do not exist (1 missing"), "{}", dmg[0]);
    assert!(dmg[0].contains(&urlencoding_decode(&lost)), "{} does not name {lost}", dmg[0]);
    for t in ["db/s/linked/", "db/s/corrupt/"] {
        let p = about(t);
        assert!(p.len() == 1 && p[0].contains("not checked"), "{t}: {found:#?}");
    }
    let o = about(&format!("db/s/good/{}", orphan.strip_prefix(s.join("good")).unwrap().display()));
    assert!(o.len() == 1 && o[0].contains("orphan") && o[0].contains("neither under Scheduler/"), "{found:#?}");
    assert_eq!(found.len(), 4, "{found:#?}");
    // deltalake agrees on the damage: version 5 fails, 6 and 7 read.
    for (v, readable) in [(5, false), (6, true), (7, true)] {
        // os._exit: deltalake's threads can abort the interpreter's teardown.
        let code = format!(
            "import os, deltalake\ntry:\n    deltalake.DeltaTable({d:?}, version={v}).to_pyarrow_table(); print('ok')\n\
             except Exception as e:\n    print('fail', type(e).__name__)\nos.sys.stdout.flush(); os._exit(0)"
        );
        let got = py(&code);
        assert_eq!(got.trim() == "ok", readable, "version {v}: {got}");
    }
    // vacuum-orphans goes on past the unreadable tables too (exit 1); the
    // orphan of a task not known to be over stays until the operator says.
    let vac = compactd(&tree, &["vacuum-orphans", "--data", &data, "--older-than", "1ms"]);
    assert_eq!(vac.status.code(), Some(1), "{}", text(&vac));
    let stderr = String::from_utf8_lossy(&vac.stderr);
    assert!(
        stderr.contains("db/s/linked/: not vacuumed") && stderr.contains("db/s/corrupt/: not vacuumed"),
        "{stderr}"
    );
    assert!(orphan.exists(), "{}", text(&vac));
    let vac = compactd(&tree, &["vacuum-orphans", "--data", &data, "--older-than", "1ms", "--unknown-tasks-finished"]);
    assert_eq!(vac.status.code(), Some(1), "{}", text(&vac));
    assert!(!orphan.exists(), "{}", text(&vac));
    assert!(first.exists() && s.join("linked/_delta_log").exists(), "vacuum removed what is not an orphan");
}

/// A log path (URI-encoded) as a file path.
fn urlencoding_decode(p: &str) -> String {
    let b = p.as_bytes();
    let (mut out, mut i) = (vec![], 0);
    while i < b.len() {
        match (b[i], p.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Needs the `testing` build: the unit's pause before its commit.
#[cfg(feature = "testing")]
mod running {
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use super::*;
    use common::cluster::{alive, monitor_of, Cluster};

    fn compactd_outputs(dir: &Path) -> Vec<PathBuf> {
        let mut out = vec![];
        for d in std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.path().is_dir()) {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                if f.file_name().to_string_lossy().starts_with("compactd-") {
                    out.push(f.path());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn vacuum_orphans_never_removes_the_outputs_of_a_unit_still_running() {
        let _turn = crate::common::turns::waits();
        let mut c = Cluster::fs();
        // Each unit pauses between its outputs and its commit.
        c.env = vec![("COMPACTD_TEST_MERGE_DELAY_MS".into(), "6000".into())];
        let data = c.fs_path().parent().unwrap().join("data");
        let table = data.join("db/s/t");
        let generated = gen(&table, 20, 2);
        let data_uri = format!("fs://{}", data.display());
        c.start_with("n1", &["--data", &data_uri, "--target-size", "8MiB", "--executor", "delta"]);
        c.wait_nodes(Duration::from_secs(30), "a node and a monitor", |r| {
            alive(r).len() == 1 && monitor_of(r).is_some()
        });
        let out =
            c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", "delta", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
        let start = Instant::now();
        let outputs = loop {
            let o = compactd_outputs(&table);
            if !o.is_empty() {
                break o;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no output appeared\n{}", c.logs_text());
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(20));
        let vac = c.compactd(&["vacuum-orphans", "--data", &data_uri, "--older-than", "1ms"]);
        assert!(vac.status.success(), "{}", text(&vac));
        let stdout = String::from_utf8_lossy(&vac.stdout);
        assert!(stdout.contains(&format!("task {id} is Running: its unit may still commit it")), "{}", text(&vac));
        assert!(outputs.iter().all(|p| p.exists()), "removed a running unit's output: {}", text(&vac));
        // Not an anomaly either while the task runs.
        let check = c.compactd(&["check", "--data", &data_uri]);
        assert!(check.status.success(), "{}", text(&check));
        let st = c.wait_status(&id, Duration::from_secs(120), "the task to end", |s| {
            s["state"].as_str().is_some_and(|x| x == "Done" || x == "Failed")
        });
        assert_eq!(st["state"], "Done", "{st:#}");
        let units = st["table_versions"].as_array().expect("table_versions");
        assert!(units.iter().all(|u| u["version_after"].as_u64() > u["version_before"].as_u64()), "{st:#}");
        let checked = delta_tool(&["check", "--table", table.to_str().unwrap()], &[]);
        assert_eq!(checked["rows"], generated["rows"], "{checked}");
        assert_eq!(checked["optimize_versions"].as_array().unwrap().len(), 2, "{checked}");
        let check = c.compactd(&["check", "--data", &data_uri]);
        assert!(check.status.success(), "{}", text(&check));
    }
}

/// A task whose table can never be read ends Failed with the reason, at
/// once, instead of waiting in `Init` forever; and `stop` ends a task its
/// manager cannot even load (a damaged task info).
#[test]
fn a_task_whose_discovery_fails_for_good_fails_with_the_reason_and_stop_always_ends_a_task() {
    let _turn = crate::common::turns::waits();
    use common::cluster::{alive, monitor_of, Cluster};
    use std::time::Duration;
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let table = data.join("db/s/t");
    gen(&table, 4, 2);
    // The log moved elsewhere and linked back: the data root never follows
    // a link, so the table cannot be read.
    let moved = data.join("elsewhere");
    std::fs::rename(table.join("_delta_log"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, table.join("_delta_log")).unwrap();
    c.start_with("n1", &["--data", &format!("fs://{}", data.display())]);
    c.wait_nodes(Duration::from_secs(30), "a node", |r| alive(r).len() == 1 && monitor_of(r).is_some());
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", "delta"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let status = c
        .wait_status(&id, Duration::from_secs(30), "the task ends", |s| s["state"] == "Failed" || s["state"] == "Done");
    assert_eq!(status["state"], "Failed", "{status:#}");
    assert!(status.to_string().contains("_delta_log"), "the reason names the log: {status:#}");

    // A task whose info no manager can read: `stop` still ends it. The node
    // is paused while the task is written and damaged, so that its manager
    // first looks at it damaged.
    c.pause("n1");
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "u", "--executor", "delta"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let info = c.fs_path().join(format!("Compaction_V2/Scheduler/{id}/TaskInfo.pc.db"));
    std::fs::write(&info, b"{ not json").unwrap();
    let out = c.compactd(&["stop", &id]);
    assert!(out.status.success(), "{}", text(&out));
    c.resume("n1");
    let dir = c.fs_path().join(format!("Compaction_V2/Scheduler/{id}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !dir.join("Status.Cancel").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "a stopped task stayed in {:?}",
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.logs_text().contains("stopping a task that could not be loaded"), "{}", c.logs_text());
}
