//! Every shell block of README.md and of the book under `docs/`, pasted in
//! order into one shell, as a newcomer does in a fresh clone: a page that
//! drifts from the binary, or whose sections step on each other, fails CI.
//!
//! The pages are read in the order of [`PAGES`] (README.md first, then the
//! book's pages in the order their sections had in the README before it was
//! split), every page of `docs/` among them, each page's blocks top to
//! bottom. The blocks run one after the other in one `bash -euo pipefail` (the
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
//! reason. A failure names the page and the line of its block.
// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
/// The README and the book, all their blocks in one shell (30 s here).
const LIMIT: Duration = Duration::from_secs(300);

/// The pages whose blocks run, in this order, relative to the repository.
const PAGES: &[&str] = &[
    "README.md",
    "docs/formats/parquet.md",
    "docs/formats/delta.md",
    "docs/formats/iceberg.md",
    "docs/reliability.md",
    "docs/policies.md",
    "docs/concepts.md",
    "docs/operations.md",
    "docs/backends.md",
    "docs/cli.md",
    "docs/benchmarks.md",
    "docs/README.md",
];

struct Block {
    page: &'static str,
    line: usize,
    text: String,
    skip: Option<String>,
}

impl Block {
    /// Where the block starts: `docs/x.md line N`.
    fn at(&self) -> String {
        format!("{} line {}", self.page, self.line)
    }

    /// Its key in the one shell's output.
    fn key(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

fn read(page: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// The shell blocks of every page of [`PAGES`], in order.
fn blocks() -> Vec<Block> {
    PAGES.iter().flat_map(|page| page_blocks(page)).collect()
}

fn page_blocks(page: &'static str) -> Vec<Block> {
    let text = read(page);
    let lines: Vec<&str> = text.lines().collect();
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
                out.push(Block { page, line: start + 1, text, skip });
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
        script += &format!("echo '{MARK}{0}'; echo '{MARK}{0}' >&2\n", b.key());
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
/// Each block's part of the one shell's stdout, by [`Block::key`], in the
/// order they ran.
fn outputs(out: &str) -> Vec<(String, String)> {
    let mut parts = vec![];
    for part in out.split(MARK).skip(1) {
        let (key, rest) = part.split_once('\n').unwrap_or((part, ""));
        parts.push((key.trim().to_string(), rest.to_string()));
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
        assert_eq!(out.matches("would submit").count(), 3, "{}: the dry run\n{out}", block.at());
        assert!(out.contains("(no node has run yet"), "{}: the dry run's assumed slots\n{out}", block.at());
        assert!(out.contains("db/public/events") && out.contains("nothing due"), "{}: tables\n{out}", block.at());
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["3"], "{}: 3 files after\n{out}", block.at());
        let lines: usize =
            walk(&dir.join("warehouse")).iter().map(|e| std::fs::read_to_string(e).unwrap().lines().count()).sum();
        assert_eq!(lines, 60, "{}: the same 60 lines after the merges", block.at());
    } else if t.contains("cp -r fixtures/sample data") {
        // "12 small files" before, "3 files, the same 60 lines" after.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["12", "3"], "{}: the quickstart's counts\n{out}", block.at());
        let mut lines = 0;
        for e in walk(&dir.join("data")) {
            lines += std::fs::read_to_string(e).unwrap().lines().count();
        }
        assert_eq!(lines, 60, "{}: the same 60 lines after the merge", block.at());
    } else if t.contains("cp -r fixtures/delta lake") {
        // 12 versions before, 15 after (an OPTIMIZE per partition); per-unit
        // versions in `status`; no orphans.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["12", "15"], "{}: the Delta block's counts\n{out}", block.at());
        assert!(out.contains("COMMITTED") && out.contains("day=2026-11-25"), "{}: status\n{out}", block.at());
        assert!(out.contains("ok: no anomalies"), "{}: check --data\n{out}", block.at());
    } else if t.contains("--executor expire") && t.contains("$D/lake") {
        // The Iceberg table's retention: 18 data files before, the 2
        // compacted ones after a forced expiry; the short age refused.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["18", "2"], "{}: the Iceberg retention block's counts\n{out}", block.at());
        assert!(out.contains("history.expire.max-snapshot-age-ms (5d)"), "{}: the refusal\n{out}", block.at());
        assert!(
            out.contains("snapshots_expired") && out.contains("data_files_deleted"),
            "{}: status\n{out}",
            block.at()
        );
    } else if t.contains("--executor expire") {
        // 15 data files before and after the table's own retention, 3 after
        // a forced one; the short retention refused by name.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["15", "15", "3"], "{}: the retention block's counts\n{out}", block.at());
        assert!(out.contains("data_files_deleted"), "{}: status\n{out}", block.at());
    } else if t.contains("cp -r fixtures/iceberg/lake") {
        // 9 versions before, 10 after (one replace for the task); the commit
        // unit in `status`; no orphans.
        let counts: Vec<&str> = out.lines().map(str::trim).filter(|l| l.parse::<u32>().is_ok()).collect();
        assert_eq!(counts, ["9", "10"], "{}: the Iceberg block's counts\n{out}", block.at());
        assert!(out.contains("(commit)") && out.contains("16 files into 2"), "{}: status\n{out}", block.at());
        assert!(out.contains("ok: no anomalies"), "{}: check --data\n{out}", block.at());
    } else if t.contains("--cron") {
        // The repeat task waits for its calendar time, and stops when told.
        assert!(out.contains("next round") && out.contains("Europe/Berlin"), "{}: status\n{out}", block.at());
        assert!(out.contains("stop requested"), "{}: stop\n{out}", block.at());
    } else if t.contains("for n in n1 n2 n3") {
        let tables = node_tables(out);
        assert_eq!(tables.len(), 2, "{}: two `nodes` tables expected\n{out}", block.at());
        let alive = |rows: &[(String, String, bool)]| rows.iter().filter(|r| r.1 == "yes").count();
        let monitor = |rows: &[(String, String, bool)]| rows.iter().find(|r| r.2).map(|r| r.0.clone());
        assert_eq!(alive(&tables[0]), 3, "{}: three live nodes\n{out}", block.at());
        let first = monitor(&tables[0]).unwrap_or_else(|| panic!("{}: no monitor\n{out}", block.at()));
        assert_eq!(alive(&tables[1]), 2, "{}: two live nodes after the kill\n{out}", block.at());
        let second = monitor(&tables[1]).unwrap_or_else(|| panic!("{}: no new monitor\n{out}", block.at()));
        assert_ne!(first, second, "{}: the killed monitor is still the monitor\n{out}", block.at());
        assert!(
            tables[1].iter().any(|r| r.0 == first && r.1 == "OFFLN"),
            "{}: the killed monitor is not shown declared offline\n{out}",
            block.at()
        );
        assert!(out.contains("ok: no anomalies"), "{}: check\n{out}", block.at());
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
fn the_readme_and_the_book_pasted_top_to_bottom_into_one_shell_end_with_every_documented_result() {
    let _turn = crate::common::turns::waits();
    let all = blocks();
    assert!(all.len() >= 5, "the pages have only {} shell blocks: is the parser right?", all.len());
    let mut runs = vec![];
    for b in &all {
        match &b.skip {
            Some(why) => {
                eprintln!("{}: skipped {why}", b.at());
                assert!(why.starts_with('(') && why.len() > 4, "{}: a skip marker must give its reason", b.at());
            }
            None => runs.push(b),
        }
    }
    assert!(runs.len() >= 5, "only {} blocks run", runs.len());
    let scratch = tempfile::tempdir().unwrap();
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"), scratch.path());
    let t = Instant::now();
    let (code, out, err, left) = run(&runs, scratch.path());
    eprintln!(
        "{} pages: {} of {} shell blocks in one shell, exit {code:?} in {:?}",
        PAGES.len(),
        runs.len(),
        all.len(),
        t.elapsed()
    );
    let parts = outputs(&out);
    // The block that failed is the last one that started.
    let last = parts.last().and_then(|(k, _)| runs.iter().find(|b| &b.key() == k)).map(|b| b.at());
    let last = last.unwrap_or_else(|| "(none started)".into());
    assert_eq!(code, Some(0), "the shell failed in the block at {last}\nstdout:\n{out}\nstderr:\n{err}");
    assert!(left.is_empty(), "the blocks left processes running (the last: {last}): {left:?}");
    for b in &runs {
        let got = parts
            .iter()
            .find(|(k, _)| *k == b.key())
            .map(|(_, o)| o)
            .unwrap_or_else(|| panic!("{}: no output part\n{out}", b.at()));
        expect(b, got, scratch.path());
    }
}

/// Every page of the book runs: a page added under `docs/` and missing from
/// [`PAGES`] fails here, and so does a listed page that is gone.
#[test]
fn every_page_of_the_book_is_in_the_run() {
    let _turn = crate::common::turns::waits();
    fn md(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                md(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                let rel = p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut found = vec![];
    md(&Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"), &mut found);
    for page in &found {
        assert!(PAGES.contains(&page.as_str()), "{page} is not in readme.rs's PAGES: its blocks would not run");
    }
    for page in PAGES {
        assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(page).is_file(), "{page} (in PAGES) does not exist");
    }
    assert_eq!(PAGES.len(), found.len() + 1, "PAGES: README.md and each page of docs/ once");
}

/// The book shows `fixtures/jobs/nightly.json` as it is, and the README
/// states how long the first build takes here.
#[test]
fn the_readme_shows_the_job_fixture_as_it_is_and_the_build_time() {
    let _turn = crate::common::turns::waits();
    let pages: Vec<String> = PAGES.iter().map(|p| read(p)).collect();
    let (page, start) = pages
        .iter()
        .find_map(|p| p.find("```json\n{\n  \"jobName\": \"nightly\"").map(|s| (p, s)))
        .expect("the nightly job in the README or the book");
    let body = &page[start + 8..];
    let shown: serde_json::Value = serde_json::from_str(&body[..body.find("```").unwrap()]).unwrap();
    let file =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jobs/nightly.json")).unwrap();
    assert_eq!(shown, serde_json::from_str::<serde_json::Value>(&file).unwrap());
    let first = blocks().into_iter().find(|b| b.skip.is_none()).unwrap();
    assert_eq!(first.page, "README.md", "the first block that runs is the README's quick start");
    let build = first.text.lines().next().unwrap();
    assert!(build.starts_with("cargo build --release") && build.contains(" min"), "{build}");
}
