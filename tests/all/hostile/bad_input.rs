//! Hostile and broken input, with real `compactd` processes on an fs root:
//! garbage names, oversized and truncated files, files where folders are
//! expected and folders where files are expected, and bad command-line
//! arguments.
//!
//! - `compactd check` exits 1 and names every bad path;
//! - three daemons started on that root keep running (they log and skip),
//!   and elect a monitor whenever the layout allows it;
//! - bad arguments are refused with exit code 1 or 2 and a clear message,
//!   and write nothing: neither in the root nor beside it.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, BIN};

const NODES: [&str; 3] = ["bad1", "bad2", "bad3"];

fn v2(root: &Path) -> PathBuf {
    root.join("Compaction_V2")
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn heartbeat_json(node: &str) -> String {
    format!(
        r#"{{"node":"{node}","incarnation":1,"beat":1,"session_timeout_ms":1500,"heartbeat_ms":200,"wall_ms":1,"pid":1,"version":"x"}}"#
    )
}

/// Runs `compactd check` and returns (exit code, stdout, stderr).
fn check(cluster: &Cluster) -> (Option<i32>, String, String) {
    let out = cluster.compactd(&["check"]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts the three daemons with a data folder inside the temp dir.
fn start_all(cluster: &mut Cluster, data: &Path) {
    let data = data.display().to_string();
    for n in NODES {
        cluster.start_with(n, &["--data", &data]);
    }
}

fn assert_all_running(cluster: &mut Cluster) {
    for n in NODES {
        assert!(cluster.is_running(n), "{n} exited on bad input\n{}", cluster.logs_text());
    }
}

/// Waits until a lease file of one of our nodes is being renewed.
fn wait_for_lease_holder(root: &Path, timeout: Duration) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(dir) = std::fs::read_dir(v2(root).join("Election")) {
            let mut names: Vec<String> = dir
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("Lease.") && n.len() == 26)
                .collect();
            names.sort();
            for name in names.iter().rev() {
                let text = std::fs::read_to_string(v2(root).join("Election").join(name)).unwrap_or_default();
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    let holder = v["holder"].as_str().unwrap_or("").to_string();
                    if NODES.contains(&holder.as_str()) && v["renewal"].as_u64() > Some(0) {
                        return Some(holder);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Members of the newest readable lease.
fn newest_lease_members(root: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(v2(root).join("Election")) else {
        return vec![];
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 26 && n.starts_with("Lease.") && n[6..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    names.sort();
    for name in names.iter().rev() {
        let text = std::fs::read_to_string(v2(root).join("Election").join(name)).unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            return v["members"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["node"].as_str().map(str::to_string))
                .collect();
        }
    }
    vec![]
}

fn all_logs(cluster: &Cluster) -> String {
    NODES.iter().map(|n| std::fs::read_to_string(cluster.log_path(n)).unwrap_or_default()).collect()
}

/// Builds a tree with every kind of garbage that still lets a cluster form;
/// returns the paths `check` must name (relative to the root).
fn garbage_tree(root: &Path) -> Vec<String> {
    let mut expect = vec![];
    let mut put = |rel: &str, bytes: &[u8]| {
        write(&root.join(rel), bytes);
        expect.push(rel.to_string());
    };
    // Names that are not valid node ids, some of them dot-dot-like (fs cannot
    // hold `..` itself as a name).
    put("Compaction_V2/Registry/Nodes/...", heartbeat_json("x").as_bytes());
    put("Compaction_V2/Registry/Nodes/..x", heartbeat_json("x").as_bytes());
    put("Compaction_V2/Registry/Nodes/a\\..\\b", heartbeat_json("x").as_bytes());
    put("Compaction_V2/Registry/Nodes/bad name", heartbeat_json("x").as_bytes());
    put("Compaction_V2/Registry/Nodes/ctl\u{1}char", heartbeat_json("x").as_bytes());
    // A heartbeat of 10 MiB: over the 4 MiB limit, refused unread.
    let mut big = heartbeat_json("huge").into_bytes();
    big.pop();
    big.extend_from_slice(br#","pad":""#);
    big.resize(10 * 1024 * 1024, b'x');
    big.extend_from_slice(br#""}"#);
    put("Compaction_V2/Registry/Nodes/huge", &big);
    // Truncated JSON.
    let hb = heartbeat_json("cut");
    put("Compaction_V2/Registry/Nodes/cut", &hb.as_bytes()[..hb.len() / 2]);
    put(
        "Compaction_V2/Election/Lease.00000000000000000004",
        br#"{"epoch":4,"holder":"ghost","holder_incarnation":1,"renewal":3,"lea"#,
    );
    put(
        "Compaction_V2/Registry/Events/00000000000000000001",
        br#"{"seq":1,"epoch":1,"by":"ghost","wall_ms":1,"kind":"NodeJoi"#,
    );
    put("Compaction_V2/Registry/Offline/ghost.7", br#"{"node":"ghost","incarnation":7,"ep"#);
    // Names that do not parse.
    put("Compaction_V2/Election/Lease.x..y", b"{}");
    put("Compaction_V2/Registry/Events/..1", b"{}");
    put("Compaction_V2/Registry/Offline/...5", b"{}");
    // Folders where files are expected.
    for rel in ["Compaction_V2/Registry/Nodes/dirnode/x", "Compaction_V2/Registry/Events/00000000000000000002/x"] {
        write(&root.join(rel), b"{}");
        expect.push(rel.trim_end_matches("/x").to_string());
    }
    expect
}

#[test]
fn a_tree_full_of_garbage_is_reported_and_skipped() {
    let _turn = crate::common::turns::waits();
    garbage_scenario(false);
}

/// With folders `Election/Lease.00000000000000000002/` and
/// `Registry/Offline/ghost.8/` in the tree too, the winner of a new epoch is
/// left a leader without a monitor for good (the bug of `sim_chaos`'s
/// `leader_without_monitor_*` tests), two ways: the old-lease cleanup in
/// `Election::try_take` fails to delete the folder lease ("directory not
/// empty"), and `Monitor::start` fails to read the folder in
/// `Registry/Offline/` ("read path is a directory"). The node renews its
/// lease forever and never joins anyone. Fix: make the cleanup best-effort,
/// skip folder entries (`e.is_dir`) in both listings, and retry a failed
/// `Monitor::start`.
#[test]
fn a_folder_where_an_old_lease_is_expected_does_not_stop_the_monitor() {
    let _turn = crate::common::turns::waits();
    garbage_scenario(true);
}

fn garbage_scenario(folder_lease: bool) {
    let mut cluster = Cluster::fs();
    let root = cluster.fs_path();
    let mut expect = garbage_tree(&root);
    if folder_lease {
        write(&root.join("Compaction_V2/Election/Lease.00000000000000000002/x"), b"{}");
        expect.push("Compaction_V2/Election/Lease.00000000000000000002".into());
    }

    let (code, out, err) = check(&cluster);
    assert_eq!(code, Some(1), "check must fail\n{out}\n{err}");
    for p in &expect {
        // Text output shows control characters escaped.
        let p = layouts::name::shown(p);
        assert!(out.contains(&*p) || out.contains(&format!("{p}/")), "check does not name {p:?}:\n{out}\n{err}");
    }

    let data = root.parent().unwrap().join("data");
    start_all(&mut cluster, &data);
    let holder = wait_for_lease_holder(&root, Duration::from_secs(20));
    assert!(holder.is_some(), "no monitor elected\n{}", cluster.logs_text());
    // Every node joins the monitor's view (read from the lease file: `compactd
    // nodes` trips over the folder lease, see the ignored test below).
    let start = Instant::now();
    loop {
        let members = newest_lease_members(&root);
        if NODES.iter().all(|n| members.contains(&n.to_string())) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "members {members:?}\n{}", cluster.logs_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_all_running(&mut cluster);
    // The daemons said what they skipped.
    let logs = all_logs(&cluster);
    for p in ["Registry/Nodes/huge", "Registry/Nodes/cut", "Registry/Nodes/bad name"] {
        assert!(logs.contains(p), "no log line names {p}\n{logs}");
    }
    // Still reported afterwards (nothing was "repaired" or lost).
    let (code, out, _) = check(&cluster);
    assert_eq!(code, Some(1));
    assert!(out.contains("Compaction_V2/Registry/Nodes/huge"), "{out}");
}

/// With `Registry/Nodes` a file, every `compactd run` exits at start-up with
/// "read Compaction_V2/Registry/Nodes/<id> failed: not a directory": the
/// start-up check `check_node_id_free` (src/node/daemon.rs) propagates the store
/// error of reading its own heartbeat. Election is possible on that layout,
/// so the daemons should log the problem and go on (treat an unreadable
/// heartbeat as "not in use", and let `tick` log the failing heartbeat
/// writes).
#[test]
fn registry_nodes_as_a_file_is_reported_and_a_monitor_is_still_elected() {
    let _turn = crate::common::turns::waits();
    let mut cluster = Cluster::fs();
    let root = cluster.fs_path();
    write(&v2(&root).join("Registry/Nodes"), b"not a folder");

    let (code, out, err) = check(&cluster);
    assert_eq!(code, Some(1), "check must fail\n{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("Compaction_V2/Registry/Nodes"), "check does not name Registry/Nodes:\n{all}");

    let data = root.parent().unwrap().join("data");
    start_all(&mut cluster, &data);
    let holder = wait_for_lease_holder(&root, Duration::from_secs(20));
    assert!(holder.is_some(), "no monitor elected\n{}", cluster.logs_text());
    std::thread::sleep(Duration::from_secs(2));
    assert_all_running(&mut cluster);
    let logs = all_logs(&cluster);
    assert!(logs.contains("Registry/Nodes"), "no log line names Registry/Nodes\n{logs}");
}

#[test]
fn election_as_a_file_is_reported_and_the_daemons_keep_running() {
    let _turn = crate::common::turns::waits();
    let mut cluster = Cluster::fs();
    let root = cluster.fs_path();
    write(&v2(&root).join("Election"), b"not a folder");

    let (code, out, err) = check(&cluster);
    assert_eq!(code, Some(1), "check must fail\n{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("Compaction_V2/Election"), "check does not name Election:\n{all}");

    let data = root.parent().unwrap().join("data");
    start_all(&mut cluster, &data);
    // Until a daemon has met the file (how soon depends on how fast three
    // processes start here), then a while longer, 4 s in all at least:
    // they keep running.
    let start = Instant::now();
    while !all_logs(&cluster).contains("Election") {
        assert_all_running(&mut cluster);
        let logs = all_logs(&cluster);
        assert!(start.elapsed() < Duration::from_secs(30), "no log line names Compaction_V2/Election\n{logs}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(4).saturating_sub(start.elapsed()).max(Duration::from_secs(2)));
    assert_all_running(&mut cluster);
    // Still a file: nobody "repaired" it by deleting it.
    assert!(v2(&root).join("Election").is_file());
}

/// Every entry below `dir` (recursive) with its size, for before/after
/// snapshots.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<u64>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let md = e.metadata().unwrap();
            if md.is_dir() {
                out.insert(p.clone(), None);
                stack.push(p);
            } else {
                out.insert(p, Some(md.len()));
            }
        }
    }
    out
}

/// Runs `compactd <args>` in `cwd` with a deadline; returns (code, stderr).
fn run_refused(cwd: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env_remove("COMPACTD_ROOT")
        .env_remove("COMPACTD_NODE_ID")
        .env_remove("COMPACTD_DATA")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code(), err);
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("compactd {args:?} was not refused: still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_arguments_are_refused_with_a_clear_message() {
    let _turn = crate::common::turns::waits();
    bad_arguments(false);
}

/// `--node-id ../x` and `--node-id 'a b'` are refused (exit 1, clear
/// message), but only after `cli::dispatch` has opened the store, and the fs
/// backend's open creates the root folder and `<root>/.compactd-tmp`. Fix:
/// validate the node id at parse time (`value_parser = NodeId::parse` in
/// `RunArgs`) and/or create the fs root only in commands that write.
#[test]
fn bad_arguments_write_nothing() {
    let _turn = crate::common::turns::waits();
    bad_arguments(true);
}

fn bad_arguments(check_writes: bool) {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("root");
    // An existing, small tree: it must come out unchanged.
    write(&v2(&root).join("Registry/Nodes/keep"), heartbeat_json("keep").as_bytes());
    let root_uri = format!("fs://{}", root.display());
    let missing_root = parent.path().join("never-created");
    let missing_uri = format!("fs://{}", missing_root.display());
    let before = snapshot(parent.path());

    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (vec!["--root".into(), root_uri.clone(), "run".into(), "--node-id".into(), "../x".into()], &["../x"]),
        (vec!["--root".into(), root_uri.clone(), "run".into(), "--node-id".into(), "a b".into()], &["a b"]),
        (vec!["--root".into(), "gopher://x".into(), "run".into(), "--node-id".into(), "n1".into()], &["gopher"]),
        (
            vec![
                "--root".into(),
                root_uri.clone(),
                "run".into(),
                "--node-id".into(),
                "n1".into(),
                "--heartbeat".into(),
                "0s".into(),
            ],
            &["--heartbeat", "positive"],
        ),
        // The same refusals on a root that does not exist yet: they must not
        // create it.
        (vec!["--root".into(), missing_uri.clone(), "run".into(), "--node-id".into(), "../x".into()], &["../x"]),
        (vec!["--root".into(), missing_uri.clone(), "run".into(), "--node-id".into(), "a b".into()], &["a b"]),
    ];
    let mut problems = vec![];
    for (args, words) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = run_refused(parent.path(), &args);
        if !matches!(code, Some(1) | Some(2)) {
            problems.push(format!("{args:?}: exit code {code:?}, expected 1 or 2\n{err}"));
        }
        for w in *words {
            if !err.contains(w) {
                problems.push(format!("{args:?}: the message does not mention {w:?}: {err}"));
            }
        }
        let after = snapshot(parent.path());
        if check_writes && after != before {
            let new: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
            let gone: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
            problems.push(format!(
                "{args:?} wrote to the disk: new {new:?}, gone {gone:?}, changed {:?}",
                after
                    .iter()
                    .filter(|(k, v)| before.get(*k).is_some_and(|b| b != *v))
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>()
            ));
        }
        // Restore, so the next case is judged on its own.
        for p in after.keys().filter(|k| !before.contains_key(*k)).rev() {
            let _ = std::fs::remove_dir_all(p);
            let _ = std::fs::remove_file(p);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `compactd nodes` fails outright ("read ... Lease.<n> failed: is a
/// directory") when a folder stands where a lease file is expected, instead
/// of skipping it like the daemon and `check` do. In `src/cli/nodes.rs`
/// `newest_lease`, `store.read(...)?` propagates the error; it should skip
/// entries that are folders (`e.is_dir`) or that cannot be read, like
/// unparsable ones.
#[test]
fn nodes_skips_a_folder_where_a_lease_is_expected() {
    let _turn = crate::common::turns::waits();
    let cluster = Cluster::fs();
    let root = cluster.fs_path();
    write(&v2(&root).join("Election/Lease.00000000000000000002/x"), b"{}");
    let out = cluster.compactd(&["nodes", "--json"]);
    assert!(out.status.success(), "nodes failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// `compactd list | head -0`: a one-shot command whose stdout is closed
/// dies quietly (SIGPIPE, as Unix tools do) instead of panicking in
/// `println!`.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("Compaction_V2/Scheduler")).unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["--root", root.to_str().unwrap(), "list"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?} {err}", out.status);
}
