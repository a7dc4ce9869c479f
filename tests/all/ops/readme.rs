//! Every shell block of README.md, pasted in order into one shell, as a
//! newcomer does in a fresh clone: a README that drifts
//! from the binary, or whose sections step on each other, fails CI.
//!
//! The blocks run one after the other in one `bash -euo pipefail` (the
//! shell's variables, jobs and working folder carry over from block to
//! block, so a section that leaves a node running or reuses another's
//! folders fails here), in a scratch folder that holds what a fresh clone
//! does for them: a copy of `fixtures/`, and `target/release/compactd` (a
//! link to the binary under test, so `cargo build --release` is replaced by
//! a no-op: the test already built it). Nothing else: no `compactd` on
//! `PATH`, no `COMPACTD_*` in the environment. The whole run must exit 0,
//! and what each block's comments promise is checked against its output
//! ([`expect`]). A block is left out only behind an explicit marker on the
//! line before it, `<!-- readme-test: skip (reason) -->`, for what needs a
//! remote service or rebuilds compactd; every skip is printed with its
//! reason.
// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
/// The whole README, all its blocks in one shell (30 s here).
const LIMIT: Duration = Duration::from_secs(300);

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

/// The line that starts each block's output in the one shell's stdout.
const MARK: &str = "@@readme-block ";

/// Runs `blocks` in order in one shell in `dir`; returns (exit code,
/// stdout, stderr, processes of the shell's session still running when it
/// ended: what a section started and did not stop).
fn run(blocks: &[&Block], dir: &Path) -> (Option<i32>, String, String, Vec<String>) {
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(BIN, dir.join("target/release/compactd")).unwrap();
    // As pasted: the blocks one after the other, a marker line between
    // them on stdout (to tell their outputs apart) and on stderr.
    let mut script = String::new();
    for b in blocks {
        script += &format!("echo '{MARK}{0}'; echo '{MARK}{0}' >&2\n", b.line);
        script += &b.text.replace("cargo build --release", "true");
    }
    let (out_path, err_path) = (dir.join(".stdout"), dir.join(".stderr"));
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("COMPACTD_") {
            cmd.env_remove(k);
        }
    }
    // A session of its own: whatever the blocks leave running is found,
    // and killed, by it.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let sid = child.id() as i32;
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > LIMIT {
            unsafe { libc::kill(-sid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // A node told to stop takes a moment to leave the cluster.
    let mut left = session(sid);
    let t = Instant::now();
    while !left.is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        left = session(sid);
    }
    for p in &left {
        if let Some(pid) = p.split_whitespace().next().and_then(|p| p.parse::<i32>().ok()) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    (code, read(out_path), read(err_path), left)
}

/// The processes of session `sid`: `<pid> <command line>`.
fn session(sid: i32) -> Vec<String> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        // SAFETY: getsid of any pid is a plain query.
        if unsafe { libc::getsid(pid) } == sid {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmdline: String = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            out.push(format!("{pid} {}", cmdline.trim()));
        }
    }
    out
}

/// Each block's part of the one shell's stdout.
fn outputs(out: &str) -> std::collections::BTreeMap<usize, String> {
    let mut parts = std::collections::BTreeMap::new();
    for part in out.split(MARK).skip(1) {
        let (line, rest) = part.split_once('\n').unwrap_or((part, ""));
        parts.insert(line.trim().parse().unwrap(), rest.to_string());
    }
    parts
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
        // Keep tables compact: all 3 submissions judged (one node's slots
        // assumed before any ran), then every partition merged.
        assert_eq!(out.matches("would submit").count(), 3, "line {}: the dry run\n{out}", block.line);
        assert!(out.contains("(no node has run yet"), "line {}: the dry run's assumed slots\n{out}", block.line);
        assert!(out.contains("db/public/events") && out.contains("nothing due"), "line {}: tables\n{out}", block.line);
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["3"], "line {}: 3 files after\n{out}", block.line);
        let lines: usize =
            walk(&dir.join("warehouse")).iter().map(|e| std::fs::read_to_string(e).unwrap().lines().count()).sum();
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
            tables[1].iter().any(|r| r.0 == first && r.1 == "OFFLN"),
            "line {}: the killed monitor is not shown declared offline\n{out}",
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
fn the_readme_pasted_top_to_bottom_into_one_shell_ends_with_every_documented_result() {
    let all = blocks();
    assert!(all.len() >= 5, "README.md has only {} shell blocks: is the parser right?", all.len());
    let mut runs = vec![];
    for b in &all {
        match &b.skip {
            Some(why) => {
                eprintln!("README.md line {}: skipped {why}", b.line);
                assert!(why.starts_with('(') && why.len() > 4, "line {}: a skip marker must give its reason", b.line);
            }
            None => runs.push(b),
        }
    }
    assert!(runs.len() >= 5, "only {} blocks run", runs.len());
    let scratch = tempfile::tempdir().unwrap();
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"), scratch.path());
    let t = Instant::now();
    let (code, out, err, left) = run(&runs, scratch.path());
    eprintln!("README.md: {} blocks in one shell, exit {code:?} in {:?}", runs.len(), t.elapsed());
    let parts = outputs(&out);
    // The block that failed is the last one that started.
    let last = parts.keys().next_back().copied().unwrap_or(0);
    assert_eq!(
        code,
        Some(0),
        "README.md: the shell failed in the block at line {last}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(left.is_empty(), "README.md: the blocks left processes running: {left:?}");
    for b in &runs {
        let got = parts.get(&b.line).unwrap_or_else(|| panic!("line {}: no output part\n{out}", b.line));
        expect(b, got, scratch.path());
    }
}

/// The README shows `fixtures/jobs/nightly.json` as it is, and states how
/// long the first build takes here.
#[test]
fn the_readme_shows_the_job_fixture_as_it_is_and_the_build_time() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("```json\n{\n  \"jobName\": \"nightly\"").expect("the nightly job in the README");
    let body = &readme[start + 8..];
    let shown: serde_json::Value = serde_json::from_str(&body[..body.find("```").unwrap()]).unwrap();
    let file =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jobs/nightly.json")).unwrap();
    assert_eq!(shown, serde_json::from_str::<serde_json::Value>(&file).unwrap());
    let first = blocks().into_iter().find(|b| b.skip.is_none()).unwrap();
    let build = first.text.lines().next().unwrap();
    assert!(build.starts_with("cargo build --release") && build.contains(" min"), "{build}");
}
