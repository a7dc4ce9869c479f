//! The merge executor is crash-safe: SIGKILL `compactd __merge` at random
//! moments, rerun it (as the next attempt would), and the partition holds
//! the merged files with every line exactly once; right after a kill it
//! holds either exactly the old files (no commit yet) or a decided commit
//! that the rerun completes. Seeded: `COMPACTD_MERGE_KILL_SEED` replays.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

fn write_partition(dir: &Path, files: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut lines = vec![];
    for f in 0..files {
        let mut text = String::new();
        for l in 0..30 {
            let line = format!("{}-f{f}-l{l}-{}", dir.file_name().unwrap().to_string_lossy(), "x".repeat(40));
            text += &line;
            text.push('\n');
            lines.push(line);
        }
        std::fs::write(dir.join(format!("part-{f:04}")), text).unwrap();
    }
    lines.sort();
    lines
}

fn data_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_') && !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

fn lines(dir: &Path) -> Vec<String> {
    let mut all = vec![];
    for f in data_files(dir) {
        all.extend(std::fs::read_to_string(dir.join(f)).unwrap().lines().map(str::to_string));
    }
    all.sort();
    all
}

fn merge_cmd(root: &Path, part: &str, attempt: u32) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--root", &format!("fs://{}", root.display()), "__merge", "--dir", &format!("db/s/t/{part}/")])
        .args(["--task", "aaaaffff.16176931.56000000.0", "--round", "1", "--attempt", &attempt.to_string()])
        .args(["--target-size", "1MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

#[test]
fn a_merge_killed_at_any_point_and_rerun_leaves_old_or_merged_files() {
    let _turn = crate::common::turns::waits();
    let seed: u64 =
        std::env::var("COMPACTD_MERGE_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let rounds: usize = std::env::var("COMPACTD_MERGE_KILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    eprintln!("merge kill test: seed {seed} (replay with COMPACTD_MERGE_KILL_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut saw = [0usize; 3]; // killed before commit / after commit / finished before the kill
                               // Kill within the time an uninterrupted merge of the same partition
                               // takes here, so that kills land before, during and after the commit
                               // whatever the machine's speed.
    let warm = {
        write_partition(&root.join("db/s/t/warmup"), 400);
        let start = std::time::Instant::now();
        assert!(merge_cmd(root, "warmup", 1).status().unwrap().success());
        start.elapsed().as_millis().max(20) as u64
    };
    eprintln!("an uninterrupted merge takes {warm} ms: kills in 0..{warm} ms");
    for round in 0..rounds {
        let part = format!("dt={round}");
        let dir = root.join("db/s/t").join(&part);
        let want = write_partition(&dir, 400);
        let old_files = data_files(&dir);
        let mut child = merge_cmd(root, &part, 1).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(0..warm)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        // The commit is the create of the partition's first turn; the
        // round's record is written once the turn is carried out.
        let commit = dir.join("_compactd/turn.1");
        // Right after the kill: nothing decided and exactly the old files,
        // or a decided commit (then the roll-forward may be half done).
        if !commit.exists() {
            assert_eq!(data_files(&dir), old_files, "round {round} (seed {seed}): files changed without a commit");
            assert_eq!(lines(&dir), want);
            saw[0] += 1;
        } else if status.success() {
            saw[2] += 1;
        } else {
            saw[1] += 1;
        }
        // The next attempt completes whatever state it finds.
        let out = merge_cmd(root, &part, 2).status().unwrap();
        assert!(out.success(), "round {round} (seed {seed}): rerun failed");
        let files = data_files(&dir);
        assert!(
            files.iter().all(|f| f.starts_with("compacted-")),
            "round {round} (seed {seed}): old files left beside merged ones: {files:?}"
        );
        assert_eq!(lines(&dir), want, "round {round} (seed {seed}): lines lost or duplicated");
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
        assert_eq!(c["done"], true);
        // No temp file of a killed write is left behind.
        for d in [dir.clone(), dir.join("_compactd")] {
            let temps: Vec<String> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".compactd-put."))
                .collect();
            assert!(temps.is_empty(), "round {round} (seed {seed}): temp files left in {}: {temps:?}", d.display());
        }
        // A third run is a no-op.
        assert!(merge_cmd(root, &part, 3).status().unwrap().success());
        assert_eq!(data_files(&dir), files);
    }
    eprintln!("killed before commit {}, after commit {}, finished before the kill {}", saw[0], saw[1], saw[2]);
}
