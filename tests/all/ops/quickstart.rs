//! The README's first commands, as written: copy the sample table, run one
//! node, `submit --wait`, and count the files before and after. (A fresh
//! clone once had no table at the path the README compacted, so the first
//! command a new user ran did nothing visible.)
// A real process: real time.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "_compactd" && p.file_name().unwrap() != ".compactd-tmp" {
                files(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

fn lines(dir: &Path) -> (usize, Vec<String>) {
    let mut f = vec![];
    files(dir, &mut f);
    let mut l: Vec<String> = f
        .iter()
        .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    l.sort();
    (f.len(), l)
}

fn copy(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if p.is_dir() {
            copy(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}

#[test]
fn the_readme_quickstart_compacts_the_sample_table() {
    let _turn = crate::common::turns::waits();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    for cmd in [
        "cp -r fixtures/sample data",
        "$B run --node-id n1 &",
        "$B submit --db db --schema public --table events --wait",
    ] {
        assert!(readme.contains(cmd), "the README's quickstart runs `{cmd}` (keep this test in step with it)");
    }
    let dir = tempfile::tempdir().unwrap();
    copy(&repo.join("fixtures/sample"), &dir.path().join("data"));
    let (before, want) = lines(&dir.path().join("data"));
    assert_eq!((before, want.len()), (12, 60), "the sample table: 12 files, 60 lines");
    // The README's commands run in a fresh directory with the defaults
    // (./cluster.compact, ./data, port 7471), except a free port here.
    let mut node = Command::new(BIN)
        .args(["run", "--node-id", "n1", "--listen", "127.0.0.1:0", "--allow-root"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The README sleeps 2 s; here: until the node is a member.
    let start = Instant::now();
    loop {
        let out = Command::new(BIN).args(["nodes", "--json"]).current_dir(dir.path()).output().unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if rows.as_array().is_some_and(|r| r.iter().any(|n| n["alive"] == true)) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the node did not join");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("joined {:?} after start", start.elapsed());
    let out = Command::new(BIN)
        .args(["submit", "--db", "db", "--schema", "public", "--table", "events", "--wait"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let _ = node.kill();
    let _ = node.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "submit --wait: {err}");
    assert!(err.contains("Done") && err.contains("success 3 failed 0"), "{err}");
    let (after, got) = lines(&dir.path().join("data"));
    assert_eq!(after, 3, "one file per partition after the merge");
    assert_eq!(got, want, "the same 60 lines");
}
