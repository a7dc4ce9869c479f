//! Every shell block of README.md, run as pasted (issue 29): a README that
//! drifts from the binary fails CI.
//!
//! Each ```` ```sh ```` block runs with `bash -euo pipefail` in a scratch
//! folder holding a copy of `fixtures/`, with `compactd` on `PATH` and
//! `target/release/compactd` pointing at the binary under test (`cargo
//! build --release` is a no-op here: the test already built it), and
//! `/tmp/cluster` moved into the scratch folder. A block must exit 0, and
//! what its comments promise is checked against its output ([`expect`]). A
//! block is skipped only behind an explicit marker on the line before it,
//! `<!-- readme-test: skip (reason) -->`, for what needs a remote service;
//! every skip is printed with its reason. Background processes a block
//! starts are killed with its session when it ends.
// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
const LIMIT: Duration = Duration::from_secs(120);

struct Block {
    line: usize,
    text: String,
    skip: Option<String>,
}

fn blocks() -> Vec<Block> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = vec![];
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if let Some(lang) = fence.strip_prefix("```") {
            let shell = matches!(lang.trim(), "sh" | "bash" | "shell" | "console");
            let start = i;
            i += 1;
            let mut text = String::new();
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                text.push_str(lines[i]);
                text.push('\n');
                i += 1;
            }
            if shell {
                let skip = start
                    .checked_sub(1)
                    .and_then(|p| lines[p].trim().strip_prefix("<!-- readme-test: skip"))
                    .map(|r| r.trim_end_matches("-->").trim().to_string());
                out.push(Block { line: start + 1, text, skip });
            }
        }
        i += 1;
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    let st = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(st.success(), "cp -a {} {}", from.display(), to.display());
}

/// Runs a block in `dir`; returns (exit code, stdout, stderr).
fn run(block: &Block, dir: &Path) -> (Option<i32>, String, String) {
    let bin_dir = dir.join(".bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("compactd")).unwrap();
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(BIN, dir.join("target/release/compactd")).unwrap();
    let script = block
        .text
        .replace("cargo build --release", "true")
        .replace("/tmp/cluster", &dir.join("cluster").display().to_string());
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let (out_path, err_path) = (dir.join(".stdout"), dir.join(".stderr"));
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("COMPACTD_LISTEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // A session of its own: whatever the block starts in the background is
    // killed with it.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let pgid = child.id() as i32;
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > LIMIT {
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    (code, read(out_path), read(err_path))
}

/// The rows of each `compactd nodes` table in `out`: (id, alive, monitor).
fn node_tables(out: &str) -> Vec<Vec<(String, String, bool)>> {
    let mut tables = vec![];
    for part in out.split("monitor: ").skip(1) {
        let rows = part
            .lines()
            .skip_while(|l| !l.starts_with("NODE"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty() && !l.starts_with("ok"))
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                let monitor = cols.get(2) == Some(&"yes");
                Some((cols.first()?.to_string(), cols.get(1)?.to_string(), monitor))
            })
            .collect();
        tables.push(rows);
    }
    tables
}

/// What the prose and comments of a block promise, checked on its output.
fn expect(block: &Block, out: &str, dir: &Path) {
    let t = &block.text;
    if t.contains("policy apply") {
        // Keep tables compact: 2 submissions judged, then every partition merged.
        assert_eq!(out.matches("would submit").count(), 2, "line {}: the dry run\n{out}", block.line);
        assert!(out.contains("db/public/events") && out.contains("nothing due"), "line {}: tables\n{out}", block.line);
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["3"], "line {}: 3 files after\n{out}", block.line);
        let lines: usize =
            walk(&dir.join("data")).iter().map(|e| std::fs::read_to_string(e).unwrap().lines().count()).sum();
        assert_eq!(lines, 60, "line {}: the same 60 lines after the merges", block.line);
    } else if t.contains("cp -r fixtures/sample data") {
        // "12 small files" before, "3 files, the same 60 lines" after.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["12", "3"], "line {}: the quickstart's counts\n{out}", block.line);
        let mut lines = 0;
        for e in walk(&dir.join("data")) {
            lines += std::fs::read_to_string(e).unwrap().lines().count();
        }
        assert_eq!(lines, 60, "line {}: the same 60 lines after the merge", block.line);
    } else if t.contains("cp -r fixtures/delta lake") {
        // 12 versions before, 15 after (an OPTIMIZE per partition); per-unit
        // versions in `status`; no orphans.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["12", "15"], "line {}: the Delta block's counts\n{out}", block.line);
        assert!(out.contains("COMMITTED") && out.contains("day=2026-11-25"), "line {}: status\n{out}", block.line);
        assert!(out.contains("ok: no anomalies"), "line {}: check --data\n{out}", block.line);
    } else if t.contains("cp -r fixtures/iceberg/lake") {
        // 9 versions before, 10 after (one replace for the task); the commit
        // unit in `status`; no orphans.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["9", "10"], "line {}: the Iceberg block's counts\n{out}", block.line);
        assert!(out.contains("(commit)") && out.contains("16 files into 2"), "line {}: status\n{out}", block.line);
        assert!(out.contains("ok: no anomalies"), "line {}: check --data\n{out}", block.line);
    } else if t.contains("--cron") {
        // The repeat task waits for its calendar time, and stops when told.
        assert!(out.contains("next round") && out.contains("Europe/Berlin"), "line {}: status\n{out}", block.line);
        assert!(out.contains("stop requested"), "line {}: stop\n{out}", block.line);
    } else if t.contains("for n in n1 n2 n3") {
        let tables = node_tables(out);
        assert_eq!(tables.len(), 2, "line {}: two `nodes` tables expected\n{out}", block.line);
        let alive = |rows: &[(String, String, bool)]| rows.iter().filter(|r| r.1 == "yes").count();
        let monitor = |rows: &[(String, String, bool)]| rows.iter().find(|r| r.2).map(|r| r.0.clone());
        assert_eq!(alive(&tables[0]), 3, "line {}: three live nodes\n{out}", block.line);
        let first = monitor(&tables[0]).unwrap_or_else(|| panic!("line {}: no monitor\n{out}", block.line));
        assert_eq!(alive(&tables[1]), 2, "line {}: two live nodes after the kill\n{out}", block.line);
        let second = monitor(&tables[1]).unwrap_or_else(|| panic!("line {}: no new monitor\n{out}", block.line));
        assert_ne!(first, second, "line {}: the killed monitor is still the monitor\n{out}", block.line);
        assert!(
            tables[1].iter().all(|r| r.0 != first || r.1 != "yes"),
            "line {}: the killed node is still alive\n{out}",
            block.line
        );
        assert!(out.contains("ok: no anomalies"), "line {}: check\n{out}", block.line);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "_compactd" {
                out.extend(walk(&p));
            }
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn every_shell_block_of_the_readme_runs_as_pasted() {
    let all = blocks();
    assert!(all.len() >= 5, "README.md has only {} shell blocks: is the parser right?", all.len());
    let mut ran = 0;
    for b in &all {
        if let Some(why) = &b.skip {
            eprintln!("README.md line {}: skipped {why}", b.line);
            assert!(why.starts_with('(') && why.len() > 4, "line {}: a skip marker must give its reason", b.line);
            continue;
        }
        let scratch = tempfile::tempdir().unwrap();
        copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"), scratch.path());
        let t = Instant::now();
        let (code, out, err) = run(b, scratch.path());
        eprintln!("README.md line {}: exit {code:?} in {:?}", b.line, t.elapsed());
        assert_eq!(code, Some(0), "README.md line {}:\n{}\nstdout:\n{out}\nstderr:\n{err}", b.line, b.text);
        expect(b, &out, scratch.path());
        ran += 1;
    }
    assert!(ran >= 2, "only {ran} blocks ran");
}
