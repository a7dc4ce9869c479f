//! One bad entry must not exhaust memory, hang a node or stop election.
//! The names come from the documentation, not from a list kept
//! here: every file name of the tree listings in `layouts/README.md` and
//! `layouts/JOBS.md`, with its placeholders filled in ([`names`]), gets each
//! kind of bad entry ([`Kind`]): garbage bytes, a 2 GiB sparse file, a
//! folder, a FIFO, a link to `/dev/zero`, a link loop; and every folder the
//! listings imply below a name from data (a task's, its `Outcomes/`, a
//! subtask's, a node's, a job's, a policy's, a table's `Decisions/`…) gets a
//! file in its place ([`folders`]). On each such tree, on the fs backend:
//!
//! - `check`, `nodes`, `list` and `status` exit within 20 s with a peak RSS
//!   under 100 MiB, without a panic; `check` exits 1 and names every bad
//!   path; `nodes`, `list` and `status` name on stderr each bad entry they
//!   read (see [`hostile`] for which names those are) and keep their exit
//!   codes (0, 0, and 1 for a task whose info is unreadable);
//! - three daemons keep electing a monitor (past a bad lease, a new epoch),
//!   all three are seen alive, and an unrelated task runs to `Done`.
// Real processes on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster, BIN};
use serde_json::Value;

/// The task every bad task file belongs to (the folder cases use tasks of
/// their own, [`folders`]).
const TASK: &str = "aaaaffff.16176931.56000000.0";
const NODES: [&str; 3] = ["h1", "h2", "h3"];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Garbage,
    Sparse,
    Folder,
    Fifo,
    DevZero,
    LinkLoop,
}

/// Fills a listing line's placeholders. A node's own folder in
/// `TaskAssigned/` is a live node's (its worker and manager read what is
/// there); the registry's names are of a node that does not run, so that
/// a bad heartbeat name costs that node's meaning, not a live one's.
fn fill(line: &str) -> String {
    let node = if line.starts_with("TaskAssigned/") { NODES[0] } else { "ghost" };
    let subs: &[(&str, String)] = &[
        ("<SubtaskId>", format!("{TASK}.r1.u0.a1")),
        ("<BatchId>", format!("{TASK}.r1.b1")),
        ("<batch>", "1".into()),
        ("<Mark>", "Success".into()),
        ("<layout>", "3".into()),
        ("<TaskId>", TASK.into()),
        ("<NodeId>", node.into()),
        ("<TaskState>", "Running".into()),
        ("<SubtaskState>", "Running".into()),
        ("<term>", format!("{:020}", 1)),
        ("<round>", "1".into()),
        ("<unit>", "0".into()),
        ("<attempt>", "1".into()),
        ("<v1-task-file>", "v1task".into()),
        ("<incarnation>", "1".into()),
        ("<seq: 20 digits>", format!("{:020}", 1)),
        ("<epoch: 20 digits>", format!("{:020}", 1)),
        ("<generation>", format!("{:020}", 1)),
        ("<ms>", "1617693156000".into()),
        ("<epoch>", "1".into()),
        ("<n>", "0".into()),
        ("<job>", "ghostjob".into()),
        ("<trigger>", "t1".into()),
        ("<step>", "s1".into()),
        ("<version: 20 digits>", format!("{:020}", 1)),
        ("<version>", format!("{:020}", 1)),
        ("<policy>", "ghostpolicy".into()),
        ("<db>", "db".into()),
        ("<schema>", "public".into()),
        ("<table>", "ghosttable".into()),
        ("<partition>", "p1".into()),
        ("<seq: 10 digits>", format!("{:010}", 1)),
    ];
    let mut s = line.to_string();
    for (from, to) in subs {
        s = s.replace(from, to);
    }
    assert!(!s.contains('<'), "a placeholder of the layouts listing is not known here: {line}");
    s
}

/// Fills the placeholders of the `k`-th folder case with names of its own,
/// so that no folder case lies inside another or inside the file cases'
/// folders: task `…56000000.<k+1>`, other names `folder<k>`. A node folder
/// is a node that does not run; a subtask's is in a live node's folder (its
/// worker meets the file).
fn fill_folder(line: &str, k: usize) -> String {
    let task = format!("aaaaffff.16176931.56000000.{}", k + 1);
    let node = if line.ends_with("<NodeId>") { format!("ghostnode{k}") } else { NODES[1].to_string() };
    let mut s = line
        .replace("<SubtaskId>", &format!("{task}.r1.u0.a1"))
        .replace("<BatchId>", &format!("{task}.r1.b1"))
        .replace("<TaskId>", &task);
    s = s.replace("<NodeId>", &node);
    while let Some(start) = s.find('<') {
        let end = s[start..].find('>').map(|e| start + e + 1).expect("a closed placeholder");
        s.replace_range(start..end, &format!("folder{k}"));
    }
    s
}

/// The first fenced `text` block of a document: its tree listing.
fn listing(doc: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
    let block = text.split("```text\n").nth(1).expect("a text block").split("```").next().unwrap();
    // The name is the line's first word, where a `<placeholder>` may hold
    // spaces; lines without a `/` continue a description.
    let first_word = |line: &str| {
        let mut depth = 0;
        let end = line
            .char_indices()
            .find(|(_, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                c.is_whitespace() && depth == 0
            })
            .map_or(line.len(), |(i, _)| i);
        line[..end].to_string()
    };
    block.lines().map(|l| first_word(l.trim_start())).filter(|n| n.contains('/')).collect()
}

/// Every file name of the documented tree (relative to `Compaction_V2/`),
/// with its placeholders, and the folders those names imply below a name
/// from data ([`folders`]).
fn names() -> (Vec<String>, Vec<String>) {
    let mut lines = BTreeSet::new();
    for line in listing("layouts/README.md") {
        // The root, the v2 folder itself, fs-only temp names, `Jobs/…`
        // (listed in JOBS.md) and folders.
        if line.ends_with('/') || line.starts_with('…') || line.starts_with("Jobs/") || line.starts_with('.') {
            continue;
        }
        lines.insert(line);
    }
    for line in listing("layouts/JOBS.md") {
        if !line.ends_with('/') && !line.starts_with("Jobs") {
            lines.insert(format!("Jobs/{line}"));
        }
    }
    let files: BTreeSet<String> = lines.iter().map(|l| fill(l)).collect();
    assert!(files.len() >= 25, "the listings gave only {files:?}");
    let folders = folders(&lines);
    assert!(folders.len() >= 15, "the listings gave only the folders {folders:?}");
    (files.into_iter().collect(), folders)
}

/// Every folder that a listed file name implies and whose path holds a
/// name from data (`Scheduler/<TaskId>`, `Scheduler/<TaskId>/Outcomes`,
/// `TaskAssigned/<NodeId>`, `Policies/<policy>/Log`, …), each filled by
/// [`fill_folder`]. The fixed folders above them (`Scheduler/`,
/// `Registry/Nodes/`, `Election/`, …) are not: the file cases need them, and
/// a cluster whose `Election/` is a file cannot elect at all (`check` names
/// such a file like any folder it cannot list).
fn folders(lines: &BTreeSet<String>) -> Vec<String> {
    let mut folders = BTreeSet::new();
    for line in lines {
        let segs: Vec<&str> = line.split('/').collect();
        for i in 1..segs.len() {
            let folder = segs[..i].join("/");
            if folder.contains('<') {
                folders.insert(folder);
            }
        }
    }
    folders.iter().enumerate().map(|(k, f)| fill_folder(f, k)).collect()
}

fn place(path: &Path, kind: Kind) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    match kind {
        Kind::Garbage => std::fs::write(path, b"\xff\xfe{ not json \x00").unwrap(),
        Kind::Sparse => std::fs::File::create(path).unwrap().set_len(2 << 30).unwrap(),
        Kind::Folder => std::fs::create_dir_all(path).unwrap(),
        Kind::Fifo => {
            let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
        }
        Kind::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Kind::LinkLoop => std::os::unix::fs::symlink(path, path).unwrap(),
    }
}

/// Runs a command to its end within `limit`; returns its exit code, output
/// and peak RSS in KiB. Failed past the limit.
fn measured(root: &str, args: &[&str], limit: Duration) -> (Option<i32>, String, u64) {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", root]).args(args);
    let m = common::rss::peak_rss(&cmd, limit);
    assert!(!m.killed, "compactd {args:?} ran past {limit:?}:\n{}", m.text());
    (m.output.status.code(), m.text(), m.peak_kib)
}

fn hostile(kind: Kind) {
    let mut cluster = Cluster::fs();
    let root = cluster.fs_path();
    let v2 = root.join("Compaction_V2");
    let (files, folders) = names();
    for f in &files {
        place(&v2.join(f), kind);
    }
    for f in &folders {
        place(&v2.join(f), Kind::Garbage);
    }

    // The commands an operator types first.
    let limit = Duration::from_secs(20);
    let (code, out, rss) = measured(&cluster.root, &["check"], limit);
    assert_eq!(code, Some(1), "{kind:?}: check\n{out}");
    eprintln!("{kind:?}: check peak RSS {rss} KiB");
    assert!(rss < 100 * 1024, "{kind:?}: check peaked at {rss} KiB");
    // An executor's output is free-form: garbage there is its content.
    let free_form = |f: &str| matches!(kind, Kind::Garbage) && f.ends_with("/Output");
    let missed: Vec<&String> = files
        .iter()
        .chain(&folders)
        .filter(|f| !free_form(f) && !out.contains(&format!("Compaction_V2/{f}")))
        .collect();
    assert!(missed.is_empty(), "{kind:?}: check does not name {missed:#?}\n{out}");
    // What each command reads of the bad names, and so must name:
    // - `nodes`: the leases (`Election/Lease.*`, newest first until one
    //   reads) and every heartbeat (`Registry/Nodes/*`); nothing else.
    // - `list`: each task's `TaskInfo.pc.db` (the task is then skipped, so
    //   its manager term is not read); the task folders that are files are
    //   not folders, so not tasks, and are never read.
    // - `status TASK`: the task's `TaskInfo.pc.db`, and it stops there (exit
    //   1): its terms, outcomes and subtask infos are not read.
    let info = format!("Scheduler/{TASK}/TaskInfo.pc.db");
    let lease = format!("Election/Lease.{:020}", 1);
    let reads: [(&[&str], i32, Vec<&str>); 3] = [
        (&["nodes"], 0, vec![lease.as_str(), "Registry/Nodes/ghost"]),
        (&["list"], 0, vec![info.as_str()]),
        (&["status", TASK], 1, vec![info.as_str()]),
    ];
    for (args, want, named) in reads {
        let (code, out, rss) = measured(&cluster.root, args, limit);
        assert_eq!(code, Some(want), "{kind:?}: {args:?}\n{out}");
        assert!(!out.contains("panicked"), "{kind:?}: {args:?}\n{out}");
        eprintln!("{kind:?}: {args:?} peak RSS {rss} KiB");
        assert!(rss < 100 * 1024, "{kind:?}: {args:?} peaked at {rss} KiB");
        for f in named {
            assert!(files.iter().any(|x| x == f), "{f} is not a name of the listing");
            assert!(out.contains(&format!("Compaction_V2/{f}")), "{kind:?}: {args:?} does not name {f}\n{out}");
        }
        // A skipped task is named, not blamed on the limit.
        assert!(!out.contains("showing the newest"), "{kind:?}: {args:?}\n{out}");
    }

    // Three daemons: election, heartbeats and an unrelated task go on.
    for n in NODES {
        cluster.start_with(n, &["--executor", "command", "--command", "true", "--sweep", "1s"]);
    }
    let rows = cluster.wait_nodes(Duration::from_secs(30), "a monitor and three live nodes", |r| {
        monitor_of(r).is_some() && NODES.iter().all(|n| alive(r).contains(&n.to_string()))
    });
    let out = cluster.compactd(&["submit", "--db", "d", "--schema", "s", "--table", "t", "--shards", "2", "--json"]);
    assert!(out.status.success(), "{kind:?}: submit: {}", String::from_utf8_lossy(&out.stderr));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let s = cluster.wait_status(&id, Duration::from_secs(40), "the unrelated task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{kind:?}: {s:#}\n{}", cluster.logs_text());
    // Still electing: the monitor's lease is renewed and newer than any bad
    // lease name.
    let monitor = monitor_of(&rows).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let rows = cluster.nodes();
    assert_eq!(alive(&rows).len(), 3, "{kind:?}: {rows:#?}\n{}", cluster.logs_text());
    assert!(monitor_of(&rows).is_some(), "{kind:?}: no monitor any more (was {monitor})");
    for n in NODES {
        assert!(cluster.is_running(n), "{kind:?}: {n} exited\n{}", cluster.logs_text());
        let log = std::fs::read_to_string(cluster.log_path(n)).unwrap();
        assert!(!log.contains("panicked"), "{kind:?}: {n} panicked\n{log}");
    }
    for n in NODES {
        assert_eq!(cluster.terminate(n), Some(0), "{kind:?}: {n} did not leave cleanly");
    }
}

#[test]
fn garbage_at_every_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::Garbage);
}

#[test]
fn a_2_gib_sparse_file_at_every_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::Sparse);
}

#[test]
fn a_folder_at_every_file_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::Folder);
}

#[test]
fn a_fifo_at_every_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::Fifo);
}

#[test]
fn a_link_to_dev_zero_at_every_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::DevZero);
}

#[test]
fn a_link_loop_at_every_name() {
    let _turn = crate::common::turns::waits();
    hostile(Kind::LinkLoop);
}
