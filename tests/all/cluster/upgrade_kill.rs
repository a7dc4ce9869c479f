//! Kill test: SIGKILL `compactd upgrade` at random moments on a 5,000-task
//! v1 tree, rerunning each time; the end state must equal an uninterrupted
//! run's on a copy of the same tree, with exactly one v2 task per v1 task.
//!
//! The delays come from a seeded RNG; the seed is printed and can be set
//! with `COMPACTD_KILL_SEED`. Trees live in /dev/shm when it exists: OpenDAL's
//! fs backend syncs every file it writes, and a page-cache tree is what a
//! SIGKILL (not a power cut) leaves anyway.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

const TASKS: u64 = 5_000;
const KILLS: usize = 10;

fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new().prefix("compactd-kill").tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn upgrade(root: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_compactd"));
    c.arg("--root")
        .arg(root)
        .arg("upgrade")
        .args(extra)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Every file below `Compaction_V2/`, with a normalized content: JSON files
/// decoded (a torn-then-repaired file may differ in whitespace only), the
/// state marker reduced to its phase.
fn v2_tree(root: &Path) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for (rel, bytes) in store::testing::local_files(&root.join("Compaction_V2")) {
        let rel = format!("Compaction_V2/{rel}");
        let v = if rel.ends_with("UpgradeState.json") {
            let s: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            s["state"].clone()
        } else if rel.ends_with(".pc.db") {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{rel}: torn TaskInfo left behind: {e}"))
        } else {
            assert!(bytes.is_empty(), "{rel}: marker with content");
            serde_json::Value::Null
        };
        out.insert(rel, v);
    }
    out
}

#[test]
fn sigkill_at_random_moments_then_rerun_equals_uninterrupted_run() {
    let _turn = crate::common::turns::waits();
    let seed: u64 =
        std::env::var("COMPACTD_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random());
    println!("kill test seed: {seed} (set COMPACTD_KILL_SEED={seed} to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let killed_dir = tempdir();
    let killed: PathBuf = killed_dir.path().join("root");
    let reference: PathBuf = killed_dir.path().join("reference");
    let st =
        upgrade(&killed, &["--generate-fixture", &TASKS.to_string(), "--seed", &seed.to_string()]).status().unwrap();
    assert!(st.success());
    let st = Command::new("cp").arg("-a").arg(&killed).arg(&reference).status().unwrap();
    assert!(st.success());

    // The uninterrupted run.
    let t = Instant::now();
    let st = upgrade(&reference, &["--concurrency", "8"]).status().unwrap();
    let full = t.elapsed();
    assert_eq!(st.code(), Some(0));
    println!("uninterrupted run: {full:?}");

    // Kill runs: delays spread over the uninterrupted run's duration.
    // Once a run completes, later runs only find finished work and are
    // shorter: the delay bound follows the last complete run's duration.
    let mut bound = full.as_millis().max(50) as u64 * 2 / 3;
    let mut kills = 0;
    let mut attempts = 0;
    while kills < KILLS {
        attempts += 1;
        assert!(attempts < 60, "could not kill {KILLS} runs mid-flight");
        let delay = Duration::from_millis(rng.random_range(5..=bound.max(6)));
        let started = Instant::now();
        let mut child = upgrade(&killed, &["--concurrency", "8"]).spawn().unwrap();
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        let st = child.wait().unwrap();
        if st.success() {
            bound = bound.min(started.elapsed().as_millis() as u64 * 9 / 10);
        }
        println!("run {attempts}: delay {delay:?}, {st}");
    }

    // Run to completion, then compare.
    let st = upgrade(&killed, &["--concurrency", "8"]).status().unwrap();
    assert_eq!(st.code(), Some(0));
    let got = v2_tree(&killed);
    let want = v2_tree(&reference);
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(extra.is_empty() && missing.is_empty(), "extra files: {extra:?}; missing files: {missing:?}");
    for ((gp, gv), (wp, wv)) in got.iter().zip(want.iter()) {
        assert_eq!(gp, wp);
        assert_eq!(gv, wv, "{gp}");
    }
    // Exactly one v2 task per v1 task, each with its TaskInfo and one marker.
    let v1 = std::fs::read_dir(killed.join("Compaction/Scheduler")).unwrap().count();
    let tasks: Vec<_> =
        std::fs::read_dir(killed.join("Compaction_V2/Scheduler")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(v1 as u64, TASKS);
    assert_eq!(tasks.len(), v1);
    for t in &tasks {
        let mut names: Vec<String> =
            std::fs::read_dir(t).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names.len(), 2, "{t:?}: {names:?}");
        assert!(names[0].starts_with("Status.") && names[1] == "TaskInfo.pc.db", "{names:?}");
    }
    let locks = std::fs::read_dir(killed.join("Compaction_V2/TaskUpgradeLock"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".lock"))
        .count();
    assert_eq!(locks, v1);
    assert_eq!(upgrade(&killed, &["--verify"]).status().unwrap().code(), Some(0));
}
