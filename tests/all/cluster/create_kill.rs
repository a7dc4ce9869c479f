//! fs creates are complete-or-absent: a real `compactd` process is SIGKILLed
//! at an exact point of the create of each kind of create-once file, and the
//! next process completes the work.
//!
//! The crash is placed by `tests/support/killat.c`, an LD_PRELOAD shim that
//! interposes `write(2)`, `linkat(2)` and `openat(2)`: `write` kills the
//! process at its first write to the file being created (the file exists
//! and is empty: the moment that used to leave a torn file), `link-after`
//! right after the name was published (before the temp name is removed and
//! the folder synced); an empty marker, made at its name by one exclusive
//! `openat`, dies right before or right after it (`create-before`,
//! `create-after`).
//! Deterministic: no sleep decides where the process dies.
//!
//! Kinds: job trigger instance, merge commit, submit's task files (TaskInfo,
//! manager term, manage pointer, status marker), lease, offline marker,
//! change event, upgrade TaskInfo and lock; and one removal, a finished
//! batch's folder (the manager killed in the middle of it). Plus files
//! torn by an older version: `check` names them and the daemon and CLI get
//! past them.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster, BIN, TEST_TIMINGS};
use serde_json::Value;

const MODES: [&str; 2] = ["write", "link-after"];
/// The crash points of an empty marker's create (an exclusive create at its
/// name, no temp file): right before it, and right after it, before the
/// file and its folder are synced.
const EMPTY_MODES: [&str; 2] = ["create-before", "create-after"];

fn preload(cmd: &mut Command, at: &str, pattern: &str) {
    cmd.env("LD_PRELOAD", common::killat::shim()).env("COMPACTD_KILL_AT", at).env("COMPACTD_KILL_PATH", pattern);
}

fn assert_sigkilled(st: ExitStatus, what: &str) {
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{what} was not killed at the crash point: {st:?}");
}

/// Runs one CLI command on the cluster's root with the crash shim.
fn killed_cli(c: &Cluster, args: &[&str], at: &str, pattern: &str) {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", &c.root]).args(args).stdout(Stdio::null()).stderr(Stdio::null());
    preload(&mut cmd, at, pattern);
    assert_sigkilled(cmd.status().unwrap(), &format!("compactd {args:?} ({at} {pattern})"));
}

/// Starts `compactd run` with the crash shim; the caller waits for its death.
fn spawn_daemon(c: &Cluster, node: &str, extra: &[&str], at: &str, pattern: &str) -> std::process::Child {
    let log = std::fs::File::create(c.log_path(&format!("{node}-shim"))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", &c.root, "run", "--node-id", node])
        .args(TEST_TIMINGS)
        .args(extra)
        .env("COMPACTD_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    preload(&mut cmd, at, pattern);
    cmd.spawn().unwrap()
}

fn wait_death(child: &mut std::process::Child, timeout: Duration, what: &str) {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert_sigkilled(st, what);
            return;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("{what}: not killed at its crash point within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every regular file below `dir`, relative, sorted.
fn files_below(dir: &Path) -> Vec<String> {
    store::testing::local_files(dir).into_iter().map(|(p, _)| p).collect()
}

/// A create's or put's temp file beside its target: never listed by
/// compactd, left only by a crash.
fn is_temp(name: &str) -> bool {
    name.starts_with(".compactd-create.") || name.starts_with(".compactd-put.")
}

/// No file of the tree is torn: every file with content parses as JSON, and
/// the only empty ones are the markers that are empty by design. Temp files
/// of killed writes are not files of the tree (compactd never lists them).
fn assert_no_torn_file(root: &Path) {
    for f in files_below(&root.join("Compaction_V2")) {
        let name = f.rsplit('/').next().unwrap();
        if is_temp(name) {
            continue;
        }
        let b = std::fs::read(root.join("Compaction_V2").join(&f)).unwrap();
        let empty_by_design = name.starts_with("Status.")
            || name.starts_with("Done.")
            || name.starts_with("Failed.")
            || name.ends_with(".lock")
            || f.contains("Registry/Joins/")
            // Layout 3: the switch, and a batch's markers (a `Success`
            // without counters is empty too; an `Output` never is).
            || layouts::v3::parse_layout_marker(name).is_some()
            || name == layouts::v3::RELEASED
            || layouts::v3::parse_mark(name).is_some_and(|(_, _, m)| m != layouts::v3::Mark::Output);
        if b.is_empty() {
            assert!(empty_by_design, "{f} is empty (torn)");
        } else {
            assert!(serde_json::from_slice::<Value>(&b).is_ok(), "{f} does not parse (torn)");
        }
    }
}

/// The newest lease of the cluster's tree (`null` while there is none).
fn newest_lease(c: &Cluster) -> Value {
    let dir = c.fs_path().join("Compaction_V2/Election");
    let newest = files_below(&dir).iter().filter_map(|f| layouts::v2::parse_lease_name(f)).max();
    let read = newest.and_then(|e| std::fs::read(dir.join(format!("Lease.{e:020}"))).ok());
    read.and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null)
}

fn ok_json(out: &std::process::Output, what: &str) -> Value {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: not JSON ({e})"))
}

fn assert_check_clean(c: &Cluster) {
    let out = c.compactd(&["check"]);
    assert!(out.status.success(), "check: {}{}", String::from_utf8_lossy(&out.stdout), c.logs_text());
}

fn define_job(c: &Cluster, out_file: &Path) {
    let def = serde_json::json!({
        "jobName": "nightly",
        "steps": [{ "stepName": "A", "kind": "command",
                    "command": format!("echo {{param.trigger}} >> {}", out_file.display()) }]
    });
    let f = c.fs_path().parent().unwrap().join("nightly.json");
    std::fs::write(&f, def.to_string()).unwrap();
    let out = c.compactd(&["define", "apply", f.to_str().unwrap()]);
    assert!(out.status.success(), "define: {}", String::from_utf8_lossy(&out.stderr));
}

fn wait_job_end(c: &Cluster, key: &str) -> Value {
    let start = Instant::now();
    loop {
        let v = ok_json(&c.compactd(&["job", "nightly", key, "--json"]), "job");
        if v["state"] != "Running" {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "nightly/{key} still running: {v:#}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_trigger_killed_inside_its_create_runs_its_job_exactly_once() {
    let _turn = crate::common::turns::waits();
    for at in MODES {
        let mut c = Cluster::fs();
        let out_file = c.fs_path().parent().unwrap().join("job-runs.txt");
        define_job(&c, &out_file);
        let job_file = c.fs_path().join("Compaction_V2/Jobs/Instances/nightly/k1/Job");
        killed_cli(&c, &["trigger", "nightly", "--trigger", "k1"], at, "k1_Job");
        match at {
            "write" => assert!(!job_file.exists(), "a create killed before its content left {}", job_file.display()),
            _ => {
                let v: Value = serde_json::from_slice(&std::fs::read(&job_file).unwrap()).unwrap();
                assert_eq!(v["trigger"], "k1");
            }
        }
        let again = c.compactd(&["trigger", "nightly", "--trigger", "k1"]);
        assert!(again.status.success(), "{at}: {}", String::from_utf8_lossy(&again.stderr));
        c.start_with("n1", &["--allow-inline-commands"]);
        let end = wait_job_end(&c, "k1");
        assert_eq!(end["state"], "Succeeded", "{at}: {end:#}");
        // A third request finds the instance; the job ran exactly once.
        assert!(c.compactd(&["trigger", "nightly", "--trigger", "k1"]).status.success());
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "k1\n", "{at}: the job ran exactly once");
        assert_no_torn_file(&c.fs_path());
        assert_check_clean(&c);
    }
}

fn write_partition(dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut lines = vec![];
    for f in 0..20 {
        let text: String = (0..10).map(|l| format!("f{f}-l{l}\n")).collect();
        lines.extend(text.lines().map(str::to_string));
        std::fs::write(dir.join(format!("part-{f:04}")), text).unwrap();
    }
    lines.sort();
    lines
}

fn table_state(dir: &Path) -> (Vec<String>, Vec<String>) {
    let mut names = vec![];
    let mut lines = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_file() && !n.starts_with('_') {
            lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(str::to_string));
            names.push(n);
        }
    }
    names.sort();
    lines.sort();
    (names, lines)
}

#[test]
fn a_merge_killed_inside_its_commit_create_commits_exactly_once_on_the_rerun() {
    let _turn = crate::common::turns::waits();
    for at in MODES {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db/s/t/p1");
        let want = write_partition(&dir);
        let (old_names, _) = table_state(&dir);
        let merge = |attempt: &str| {
            let mut cmd = Command::new(BIN);
            cmd.args(["--root", &format!("fs://{}", tmp.path().display()), "__merge", "--dir", "db/s/t/p1/"])
                .args(["--task", "aaaaffff.16176931.56000000.0", "--round", "1", "--attempt", attempt])
                .args(["--target-size", "1MiB"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            cmd
        };
        let mut first = merge("1");
        // The commit is the create of the partition's first turn, which
        // the data store stages as `.compactd-put.<pid>.<seq>.turn.1`.
        preload(&mut first, at, "turn.1");
        assert_sigkilled(first.status().unwrap(), "__merge");
        let commit = dir.join("_compactd/turn.1");
        match at {
            "write" => {
                assert!(!commit.exists(), "killed before its content, the commit must be absent");
                assert_eq!(table_state(&dir), (old_names.clone(), want.clone()), "inputs untouched");
            }
            _ => {
                let v: Value = serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
                assert_eq!((v["attempt"].as_u64(), v["done"].as_bool()), (Some(1), Some(false)));
            }
        }
        assert!(merge("2").status().unwrap().success(), "{at}: the rerun failed");
        let (names, lines) = table_state(&dir);
        assert!(names.iter().all(|n| n.starts_with("compacted-")), "{at}: {names:?}");
        assert_eq!(lines, want, "{at}: every line exactly once");
        let v: Value = serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
        assert_eq!(v["done"], true);
        // The round's one commit is by attempt 1 when it was published
        // before the kill, else by the rerun.
        assert_eq!(v["attempt"], if at == "write" { 2 } else { 1 }, "{at}");
    }
}

#[test]
fn a_submit_killed_inside_any_of_its_creates_leaves_no_torn_file_and_work_runs() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let part = data.join("db/s/t/p1");
    let want = write_partition(&part);
    let data_uri = format!("fs://{}", data.display());
    c.start_with("n1", &["--data", &data_uri, "--sweep", "1s"]);
    c.wait_nodes(Duration::from_secs(20), "n1 monitor and member", |r| {
        monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
    });
    let submit = ["submit", "--db", "db", "--schema", "s", "--table", "t", "--manager", "n1"];
    // Every create of a submission, in its order. An empty marker is made
    // at its name by one exclusive create: its crash points are around it.
    for pattern in ["_TaskInfo.pc.db", "_Manager.", "n1_Manage.", "/Status.Init"] {
        let modes = if pattern == "/Status.Init" { EMPTY_MODES } else { MODES };
        for at in modes {
            killed_cli(&c, &submit, at, pattern);
            assert_no_torn_file(&c.fs_path());
        }
    }
    // A submission killed after its last create is complete: it runs.
    let tasks = ok_json(&c.compactd(&["list", "--json"]), "list");
    let complete: Vec<String> = tasks
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"].is_string())
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!complete.is_empty(), "the submission killed after publishing Status.Init is a task: {tasks:#}");
    for id in &complete {
        let s = c.wait_status(id, Duration::from_secs(30), "the task to end", |s| {
            s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
        });
        assert_eq!(s["state"], "Done", "{s:#}");
    }
    // And a new submission runs as on any tree.
    let out = ok_json(&c.compactd(&[&submit[..], &["--json"]].concat()), "submit");
    let s = c.wait_status(out["id"].as_str().unwrap(), Duration::from_secs(30), "Done", |s| s["state"] == "Done");
    assert_eq!(s["state"], "Done");
    assert_eq!(table_state(&part).1, want, "every line exactly once");
    assert_no_torn_file(&c.fs_path());
    // The killed submissions that never reached their status marker are
    // reported by `check` (a task folder without a status), never as torn.
    let report = String::from_utf8_lossy(&c.compactd(&["check"]).stdout).into_owned();
    assert!(!report.contains("not a valid") && !report.contains("malformed"), "{report}");
}

#[test]
fn a_daemon_killed_inside_its_lease_create_is_followed_by_a_monitor() {
    let _turn = crate::common::turns::waits();
    for at in MODES {
        let mut c = Cluster::fs();
        let mut n1 = spawn_daemon(&c, "n1", &[], at, "Election_Lease.");
        wait_death(&mut n1, Duration::from_secs(20), "n1 at its lease create");
        let election = c.fs_path().join("Compaction_V2/Election");
        let leases: Vec<String> = files_below(&election).into_iter().filter(|f| f.starts_with("Lease.")).collect();
        match at {
            "write" => assert!(leases.is_empty(), "{leases:?}"),
            _ => assert_eq!(leases.len(), 1, "{leases:?}"),
        }
        // The killed create left its temp beside the lease.
        let temps = || files_below(&election).into_iter().filter(|f| is_temp(f)).collect::<Vec<_>>();
        assert_eq!(temps().len(), 1, "{at}: {:?}", files_below(&election));
        assert_no_torn_file(&c.fs_path());
        c.start("n2");
        c.wait_nodes(Duration::from_secs(20), "n2 monitor", |r| monitor_of(r).as_deref() == Some("n2"));
        assert_no_torn_file(&c.fs_path());
        // n2 lists `Election/` before it renews: the dead process's temp goes.
        let start = Instant::now();
        while !temps().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(20), "{at}: a dead create's temp stays: {:?}", temps());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_monitor_killed_inside_an_offline_declaration_or_an_event_is_finished_by_the_next() {
    let _turn = crate::common::turns::waits();
    for (pattern, at) in
        [("Offline_n2.", "write"), ("Offline_n2.", "link-after"), ("Events_", "write"), ("Events_", "link-after")]
    {
        let mut c = Cluster::fs();
        let events_kill = pattern == "Events_";
        // For events the monitor dies at its first event (n1 joining); for
        // the declaration it dies declaring n2 offline.
        let mut n1 = spawn_daemon(&c, "n1", &[], at, pattern);
        if !events_kill {
            c.wait_nodes(Duration::from_secs(20), "n1 monitor and member", |r| {
                monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
            });
            c.start("n2");
            c.wait_nodes(Duration::from_secs(20), "n2 alive", |r| alive(r).contains(&"n2".to_string()));
            c.kill("n2");
        }
        wait_death(&mut n1, Duration::from_secs(20), &format!("n1 at {pattern} ({at})"));
        assert_no_torn_file(&c.fs_path());
        c.start("n3");
        if events_kill {
            c.wait_nodes(Duration::from_secs(20), "n3 monitor, n1 gone", |r| {
                monitor_of(r).as_deref() == Some("n3") && !alive(r).contains(&"n1".to_string())
            });
        } else {
            c.wait_nodes(Duration::from_secs(20), "n3 monitor, n2 declared", |r| {
                monitor_of(r).as_deref() == Some("n3") && !alive(r).iter().any(|n| n == "n1" || n == "n2")
            });
            let markers: Vec<String> = files_below(&c.fs_path().join("Compaction_V2/Registry/Offline"))
                .into_iter()
                .filter(|f| f.starts_with("n2."))
                .collect();
            assert_eq!(markers.len(), 1, "{at}: one declaration of n2: {markers:?}");
        }
        // Events are numbered without holes or torn files.
        let seqs: Vec<u64> = files_below(&c.fs_path().join("Compaction_V2/Registry/Events"))
            .iter()
            .map(|f| f.parse().unwrap())
            .collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{pattern} {at}: {seqs:?}");
        assert_no_torn_file(&c.fs_path());
        let start = Instant::now();
        loop {
            let out = c.compactd(&["check"]);
            if out.status.success() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "check: {}", String::from_utf8_lossy(&out.stdout));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn an_upgrade_killed_inside_its_creates_completes_on_the_rerun() {
    let _turn = crate::common::turns::waits();
    // The lock is empty: made at its name by one exclusive create, its
    // crash points are around that create.
    for (pattern, at) in [
        ("TaskUpgradeLock/", "create-before"),
        ("TaskUpgradeLock/", "create-after"),
        ("/Status.Init", "create-after"),
        ("_TaskInfo.pc.db", "write"),
        ("_UpgradeState.json", "write"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap();
        let run = |args: &[&str]| {
            Command::new(BIN)
                .args(["--root", root, "upgrade"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
        };
        assert!(run(&["--generate-fixture", "50", "--seed", "7"]).success());
        let mut cmd = Command::new(BIN);
        cmd.args(["--root", root, "upgrade", "--concurrency", "1"]).stdout(Stdio::null()).stderr(Stdio::null());
        preload(&mut cmd, at, pattern);
        assert_sigkilled(cmd.status().unwrap(), "upgrade");
        assert_no_torn_file(tmp.path());
        assert!(run(&[]).success(), "{pattern} {at}: the rerun failed");
        assert!(run(&["--verify"]).success(), "{pattern} {at}: verify failed");
        assert_no_torn_file(tmp.path());
        // Nothing of the killed run is left, not even its hidden temp: an
        // upgraded tree is clean before any daemon lists its folders.
        let temps: Vec<String> = files_below(&tmp.path().join("Compaction_V2"))
            .into_iter()
            .filter(|f| is_temp(f.rsplit('/').next().unwrap()))
            .collect();
        assert!(temps.is_empty(), "{pattern} {at}: the killed run's temps are left: {temps:?}");
    }
}

/// Files torn by an older compactd (which wrote created files in place):
/// `check` names each, and neither the daemon nor the CLI stalls on them.
#[test]
fn files_torn_by_an_older_version_are_reported_and_do_not_stall_the_cluster() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let root = c.fs_path();
    let out_file = root.parent().unwrap().join("job-runs.txt");
    define_job(&c, &out_file);
    let job = root.join("Compaction_V2/Jobs/Instances/nightly/k9/Job");
    let event = root.join("Compaction_V2/Registry/Events/00000000000000000999");
    for f in [&job, &event] {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"").unwrap();
        // Written long ago by a process that is gone.
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(f).unwrap().set_modified(old).unwrap();
    }
    let report = String::from_utf8_lossy(&c.compactd(&["check"]).stdout).into_owned();
    for f in ["Jobs/Instances/nightly/k9/Job", "Registry/Events/00000000000000000999"] {
        assert!(report.contains(f), "check does not name {f}: {report}");
    }
    c.start_with("n1", &["--allow-inline-commands"]);
    c.wait_nodes(Duration::from_secs(20), "n1 monitor and member", |r| {
        monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
    });
    // The trigger that the torn file made never-once runs exactly once.
    let out = c.compactd(&["trigger", "nightly", "--trigger", "k9"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wait_job_end(&c, "k9")["state"], "Succeeded");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "k9\n");
    // The daemon went on past the torn event (new events were logged).
    let seqs: Vec<u64> =
        files_below(&root.join("Compaction_V2/Registry/Events")).iter().map(|f| f.parse().unwrap()).collect();
    assert!(seqs.iter().any(|s| *s > 999), "{seqs:?}");
    std::fs::remove_file(&event).unwrap();
    assert_check_clean(&c);
}

/// A manager killed while it removes a finished batch's folder leaves no
/// unit that a worker would run again. The kill comes right before the
/// recursive delete reaches the `Info`, after whatever the listing put
/// first: some units' claim and end may be gone, and those units, beside
/// the `Info`, look unstarted. The batch was released before the delete
/// began, so none starts (before, a shard ran twice in 2 of 3 runs); the
/// batch is recorded, and whoever manages next removes the rest.
#[test]
fn a_manager_killed_while_removing_a_finished_batch_runs_no_unit_again() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let runs = tempfile::tempdir().unwrap();
    let d = runs.path().display();
    // n2 alone has the command, so it runs every unit; n1 manages and is
    // killed at its first removal of a batch's info.
    let shim = common::killat::shim().display().to_string();
    c.node_env.insert(
        "n1".into(),
        vec![
            ("LD_PRELOAD".into(), shim),
            ("COMPACTD_KILL_AT".into(), "unlink-before".into()),
            ("COMPACTD_KILL_BASENAME".into(), layouts::v3::INFO.into()),
        ],
    );
    c.start_with("n1", &["--executor", "command", "--command", "true"]);
    let cmd = format!("run=echo x >> {d}/runs.{{shard_index}}");
    c.start_with("n2", &["--executor", "command", "--command", "true", "--command", &cmd, "--max-running", "16"]);
    c.wait_nodes(Duration::from_secs(60), "n1 and n2 alive, layout 4 in force", |r| {
        alive(r).len() == 2 && r.iter().all(|x| x["layout_in_force"] == 4)
    });
    // n1 reads the lease, where the layout in force is, at its polls (every
    // 200 ms), not when a submit pokes it: it must have seen layout 4
    // before it dispatches (else it writes layout 2 subtask folders, which
    // have no `Info` and no release, and the test is about batches). A
    // fixed wait is no proof on a loaded machine; three of n1's own beats
    // after the lease says so span one of its polls however slow it runs.
    let start = Instant::now();
    while newest_lease(&c)["layout"] != 4 {
        assert!(start.elapsed() < Duration::from_secs(60), "the lease never said layout 4: {}", newest_lease(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    let beat = |r: &[Value]| r.iter().find(|x| x["id"] == "n1").and_then(|x| x["beat"].as_u64());
    let seen = beat(&c.nodes()).expect("n1's beat");
    c.wait_nodes(Duration::from_secs(30), "three beats of n1 since the lease said layout 4", |r| {
        beat(r).is_some_and(|b| b >= seen + 3)
    });
    let shards = 12;
    let id = c.submit(&["--shards", &shards.to_string(), "--command-name", "run", "--manager", "n1"]);
    assert_sigkilled(c.wait_exit("n1", Duration::from_secs(60)), "n1 (at a batch's removal)");
    // n2 polls its folder meanwhile: whatever looks unstarted there runs.
    std::thread::sleep(Duration::from_millis(1500));
    c.node_env.remove("n1");
    c.start_with("n1", &["--executor", "command", "--command", "true"]);
    let st = c.wait_status(&id, Duration::from_secs(60), "the task to end", |s| s["state"] == "Done");
    assert_eq!(st["state"], "Done", "{st:#}");
    std::thread::sleep(Duration::from_millis(1000));
    for i in 0..shards {
        let n = std::fs::read_to_string(runs.path().join(format!("runs.{i}"))).map_or(0, |s| s.lines().count());
        assert_eq!(n, 1, "shard {i} ran {n} times\n{}", c.logs_text());
    }
    assert_check_clean(&c);
}
