//! The `iceberg` executor under a policy, judged by Java Iceberg
//! (`tests/support/iceberg`): a table's due partitions go to one task, so
//! the policy commits one `replace` snapshot per task, not one per
//! partition; a partition that comes due while the table's task runs waits
//! for it; `compactd tables` shows what the last compaction changed as
//! `status` has it; a policy's retention (`expire-every`) runs as a task of
//! its own and `tables` shows what it freed.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster};
use common::iceberg::Java;
use common::iceberg_table::{before, live_in, make_table, rows};
use serde_json::{json, Value};

/// The row of `compactd tables --json` for `db/s/t`, if there is one.
fn table_row(c: &Cluster) -> Option<Value> {
    let out = c.compactd(&["tables", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).ok()?;
    rows.as_array()?.iter().find(|t| t["db"] == "db" && t["schema"] == "s" && t["table"] == "t").cloned()
}

/// A cluster on fs and, in its data folder, the table `db/s/t` Java wrote
/// with `appends` appends over `parts` partitions: the cluster, the data
/// folder and the table's location.
fn fs_table(java: &Java, appends: u64, parts: u64) -> (Cluster, std::path::PathBuf, String) {
    let c = Cluster::fs();
    let data = c.fs_path().parent().unwrap().join("data");
    let location = data.join("db/s/t").display().to_string();
    make_table(java, &location, appends, parts);
    (c, data, location)
}

/// Waits (two minutes at most) until each of `parts` has one live file.
fn wait_compacted(java: &Java, c: &Cluster, location: &str, parts: &[&str]) {
    let start = std::time::Instant::now();
    while parts.iter().any(|p| live_in(java, location, p).len() != 1) {
        assert!(start.elapsed() < Duration::from_secs(120), "not compacted: {:#?}\n{}", table_row(c), c.logs_text());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Starts one node over `data` planning every second, and applies the
/// policy `ice` over `db/s/*` with the iceberg executor and `extra` lines.
fn start_with_policy(c: &mut Cluster, data: &std::path::Path, extra: &str) {
    c.start_with("n1", &["--data", &format!("fs://{}", data.display()), "--plan-interval", "1s"]);
    c.wait_nodes(Duration::from_secs(30), "a node and a monitor", |r| alive(r).len() == 1 && monitor_of(r).is_some());
    apply_policy(c, extra);
}

/// Applies (a new version of) the policy `ice` of [`start_with_policy`].
fn apply_policy(c: &Cluster, extra: &str) {
    let policy = c.fs_path().parent().unwrap().join("ice.toml");
    std::fs::write(
        &policy,
        format!(
            "name = \"ice\"\ntables = [\"db/s/*\"]\nexecutor = \"iceberg\"\nsole-writer = true\n\
             target-size = \"8MiB\"\nmin-small-files = 2\n{extra}"
        ),
    )
    .unwrap();
    let out = c.compactd(&["policy", "apply", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_policy_commits_a_tables_due_partitions_as_one_snapshot_and_tables_shows_what_it_changed() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let (mut c, data, location) = fs_table(java, 4, 3);
    let old = before(java, &location);
    assert_eq!(old.live.len(), 24, "eight small files in each of three partitions");
    let old_read = &old.reads[&old.current];
    start_with_policy(&mut c, &data, "");
    // The three due partitions go to one task, whose commit is one
    // `replace` of them all.
    wait_compacted(java, &c, &location, &["p0", "p1", "p2"]);
    for p in ["p0", "p1", "p2"] {
        assert!(live_in(java, &location, p)[0].contains("/compactd-"), "{p}");
    }
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&old_read["count"], &old_read["digest"]));
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let ops: Vec<&str> =
        snaps["snapshots"].as_array().unwrap().iter().map(|s| s["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["append", "append", "append", "append", "replace"], "one snapshot for the policy: {snaps:#}");
    let new = snaps["current"].as_i64().unwrap();
    let diff = java.run(&json!({"cmd": "diff", "location": location, "snapshot": new}));
    let removed: BTreeSet<String> =
        diff["removed"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(removed, old.live, "every partition's inputs in the one snapshot");
    let added = diff["added"].as_array().unwrap();
    assert_eq!(added.len(), 3, "{diff:#}");
    // `tables` counts the live files of the current snapshot (the
    // replaced inputs still lie in the folders), and shows what the last
    // compaction changed as `status` has it: the snapshot read and
    // committed, files, bytes and rows in and out.
    let start = std::time::Instant::now();
    let row = loop {
        let row = table_row(&c);
        let settled = row.as_ref().is_some_and(|r| {
            r["files"] == 3 && r["inFlight"] == 0 && r["lastCompaction"]["snapshotCommitted"].as_i64() == Some(new)
        });
        if settled {
            break row.unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "tables: {row:#?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!((&row["policy"], &row["partitions"]), (&json!("ice"), &json!(3)), "{row:#}");
    assert!(row["lastCompactionWallMs"].as_u64().is_some(), "{row:#}");
    let last = &row["lastCompaction"];
    let task = last["task"].as_str().unwrap();
    assert_eq!(row["lastTask"].as_str(), Some(task), "{row:#}");
    let status = c.status(task);
    let commit = &status["table_versions"][0];
    assert_eq!(status["table_versions"].as_array().map(Vec::len), Some(1), "{status:#}");
    assert_eq!(last["state"], "Done", "{row:#}");
    assert_eq!(last["snapshotRead"].as_i64(), Some(old.current), "{row:#}");
    assert_eq!(last["versionRead"], commit["version_before"], "{row:#}\n{status:#}");
    assert_eq!(last["versionCommitted"], commit["version_after"], "{row:#}\n{status:#}");
    assert_eq!(last["filesIn"], 24, "{row:#}");
    assert_eq!(last["filesOut"], 3, "{row:#}");
    assert_eq!((&last["rowsIn"], &last["rowsOut"]), (&old_read["count"], &old_read["count"]), "{row:#}");
    let on_disk = |f: &String| std::fs::metadata(f.trim_start_matches("file:")).unwrap().len();
    assert_eq!(last["bytesIn"].as_u64(), Some(old.live.iter().map(on_disk).sum()), "{row:#}");
    let out_bytes: u64 = added.iter().map(|f| f["size"].as_u64().unwrap()).sum();
    assert_eq!(last["bytesOut"].as_u64(), Some(out_bytes), "{row:#}\n{diff:#}");
    for k in ["filesIn", "filesOut", "bytesIn", "bytesOut", "rowsIn", "rowsOut"] {
        let committed = format!("committed_{}", k.replace("In", "_in").replace("Out", "_out").to_lowercase());
        assert_eq!(last[k], commit["stats"][&committed], "{k} as status has it: {status:#}");
    }
    let text = String::from_utf8_lossy(&c.compactd(&["tables"]).stdout).to_string();
    assert!(text.lines().any(|l| l.contains("db/s/t") && l.contains("ice")), "{text}");
    assert!(text.contains(&format!("last compaction: task {task} Done: snapshot {} -> {new}", old.current)), "{text}");
    // So does the status page's tables view.
    let rows = c.nodes();
    let addr = rows.iter().find_map(|r| r["addr"].as_str()).expect("a node with an address");
    let (code, page) = common::http::get(addr, "/").unwrap();
    assert_eq!(code, 200, "{page}");
    assert!(page.contains(&format!("task {task} Done: snapshot {} -&gt; {new}", old.current)), "{page}");
}

/// The tasks of the cluster's tree, as `list --json` has them.
fn task_ids(c: &Cluster) -> Vec<String> {
    let out = c.compactd(&["list", "--limit", "0", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("list: {out:?}"));
    rows.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()).collect()
}

/// Waits for the commit unit of `task` on n1 to start and stops it
/// (SIGSTOP); returns its pid.
fn stopped_commit(c: &Cluster, task: &str) -> i32 {
    let start = std::time::Instant::now();
    loop {
        let commit = common::chaos_support::descendants(c.pid("n1")).into_iter().map(|p| p.pid).find(|pid| {
            let cmd = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
                .replace('\0', " ");
            cmd.contains(" __merge ") && cmd.contains(task) && cmd.contains(layouts::v2::COMMIT_UNIT)
        });
        if let Some(pid) = commit {
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            return pid;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no commit unit of {task}: {:#?}", table_row(c));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_partition_due_while_its_iceberg_tables_task_runs_waits_for_it_and_gets_a_task_of_its_own() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let (mut c, data, location) = fs_table(java, 2, 2);
    // The commit waits before it commits: long enough for this test to
    // find its process and stop it before it has committed.
    c.env = vec![("COMPACTD_TEST_MERGE_DELAY_MS".into(), "6000".into())];
    let first_inputs = before(java, &location).live;
    start_with_policy(&mut c, &data, "min-interval = \"1s\"\n");
    let start = std::time::Instant::now();
    let first = loop {
        if let Some(id) = task_ids(&c).first() {
            break id.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no task: {:#?}\n{}", table_row(&c), c.logs_text());
        std::thread::sleep(Duration::from_millis(100));
    };
    // Its commit unit is held stopped until the planner has been seen to
    // hold p9 back: the commit's delay alone raced this test's append, the
    // planner's next pass and this test's looks at both on a loaded machine.
    let commit = stopped_commit(&c, &first);
    // A new partition, p9, with two small files, while the task runs.
    let p9: Vec<Value> = rows(50, 40, 1)
        .into_iter()
        .map(|mut r| {
            r["part"] = json!("p9");
            r
        })
        .collect();
    java.run(&json!({"cmd": "append", "location": location, "rows": p9, "files": 2}));
    let want = java.run(&json!({"cmd": "read", "location": location}));
    // The planner sees it due and holds it for the running task.
    let start = std::time::Instant::now();
    loop {
        let row = table_row(&c);
        let reason = row.as_ref().and_then(|r| r["status"]["reason"].as_str()).unwrap_or_default().to_string();
        if reason.contains("waiting for the table's running task") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not held: {row:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(c.status(&first)["state"], "Running", "the first task is still running");
    assert_eq!(task_ids(&c), std::slice::from_ref(&first), "no second task on the table while its first runs");
    unsafe { libc::kill(commit, libc::SIGCONT) };
    // Once it ended, p9 gets a task (and a snapshot) of its own.
    let start = std::time::Instant::now();
    while live_in(java, &location, "p9").len() != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "p9 not compacted: {:#?}\n{}",
            table_row(&c),
            c.logs_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let ids = task_ids(&c);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let snaps = java.run(&json!({"cmd": "snapshots", "location": location}));
    let list = snaps["snapshots"].as_array().unwrap();
    let ops: Vec<&str> = list.iter().map(|s| s["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["append", "append", "append", "replace", "replace"], "{snaps:#}");
    let replaces: Vec<i64> =
        list.iter().filter(|s| s["operation"] == "replace").map(|s| s["id"].as_i64().unwrap()).collect();
    let removed = |snapshot: i64| -> BTreeSet<String> {
        let diff = java.run(&json!({"cmd": "diff", "location": location, "snapshot": snapshot}));
        diff["removed"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(removed(replaces[0]), first_inputs, "the first task: p0 and p1");
    assert!(removed(replaces[1]).iter().all(|f| f.contains("/part=p9/")), "the second: p9 alone");
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&want["count"], &want["digest"]));
}

#[test]
fn a_policys_retention_runs_as_a_task_of_its_own_and_tables_shows_what_it_freed() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let (mut c, data, location) = fs_table(java, 4, 3);
    // The table's own age: none (the retention keeps only what Iceberg's
    // minimum of one snapshot needs).
    java.run(&json!({"cmd": "set_properties", "location": location,
        "properties": {"history.expire.max-snapshot-age-ms": "0"}}));
    let inputs = before(java, &location).live;
    start_with_policy(&mut c, &data, "");
    wait_compacted(java, &c, &location, &["p0", "p1", "p2"]);
    assert!(inputs.iter().all(|f| std::path::Path::new(f.trim_start_matches("file:")).exists()), "kept for readers");
    let want = java.run(&json!({"cmd": "read", "location": location}));
    // The same policy with a retention: due at once (it never ran), its
    // own task, which deletes the replaced inputs.
    apply_policy(&c, "expire-every = \"1h\"\n");
    let start = std::time::Instant::now();
    let row = loop {
        let row = table_row(&c);
        if row.as_ref().is_some_and(|r| r["expiredFiles"].as_u64().is_some_and(|n| n > 0) && r["inFlight"] == 0) {
            break row.unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(120), "not expired: {row:#?}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(inputs.iter().all(|f| !std::path::Path::new(f.trim_start_matches("file:")).exists()), "{row:#}");
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&want["count"], &want["digest"]));
    // One retention task (the one whose figures are a retention's).
    let statuses: Vec<Value> = task_ids(&c).iter().map(|id| c.status(id)).collect();
    let expire: Vec<&Value> = statuses.iter().filter(|s| s["stats"].get("files_deleted").is_some()).collect();
    assert_eq!((statuses.len(), expire.len()), (2, 1), "a compaction and a retention: {statuses:#?}");
    let status = expire[0];
    assert_eq!(status["state"], "Done", "{status:#}");
    assert!(status["stats"]["data_files_deleted"].as_u64() >= Some(inputs.len() as u64), "{status:#}");
    assert_eq!(row["expiredFiles"], status["stats"]["files_deleted"], "tables sums what status has: {row:#}");
    assert_eq!(row["expiredBytes"], status["stats"]["bytes_freed"], "{row:#}");
    // Java's own expiry with the table's settings finds nothing more.
    let plan = java.run(&json!({"cmd": "expire_plan", "location": location,
        "older_than": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64,
        "retain_last": 1}));
    assert_eq!(plan["expired"], json!([]), "{plan}");
    // The next one waits an hour; `tables` and the status page say so.
    let retention = row["retention"].as_str().unwrap_or_default();
    assert!(retention.starts_with(&format!("freed {} files", row["expiredFiles"])), "{row:#}");
    assert!(retention.contains("retention every 1h: next at"), "{row:#}");
    let text = String::from_utf8_lossy(&c.compactd(&["tables"]).stdout).to_string();
    assert!(text.contains(&format!("  retention: {retention}")), "{text}");
    let rows = c.nodes();
    let addr = rows.iter().find_map(|r| r["addr"].as_str()).expect("a node with an address");
    let (code, page) = common::http::get(addr, "/").unwrap();
    assert_eq!(code, 200, "{page}");
    assert!(page.contains(&format!("freed {} files", row["expiredFiles"])), "{page}");
}

#[test]
fn an_iceberg_tables_retention_due_with_its_compaction_runs_alone_first() {
    let _turn = crate::common::turns::waits();
    let java = Java::shared();
    let (mut c, data, location) = fs_table(java, 3, 2);
    let want = java.run(&json!({"cmd": "read", "location": location}));
    start_with_policy(&mut c, &data, "expire-every = \"1h\"\n");
    let start = std::time::Instant::now();
    loop {
        let row = table_row(&c);
        let compacted = ["p0", "p1"].iter().all(|p| live_in(java, &location, p).len() == 1);
        if compacted && row.as_ref().is_some_and(|r| r["inFlight"] == 0 && r["expireCounted"].is_string()) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{row:#?}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(500));
    }
    // Both were due at the first visit: the retention went first, as a
    // task of its own, and the compaction only once it had ended (one task
    // of an Iceberg table at a time).
    let statuses: Vec<Value> = task_ids(&c).iter().map(|id| c.status(id)).collect();
    assert_eq!(statuses.len(), 2, "{statuses:#?}");
    let (retention, compaction): (Vec<&Value>, Vec<&Value>) =
        statuses.iter().partition(|s| s["stats"].get("files_deleted").is_some());
    assert_eq!((retention.len(), compaction.len()), (1, 1), "{statuses:#?}");
    let ended = retention[0]["finished_wall_ms"].as_u64().expect("the retention ended");
    let started = compaction[0]["started_wall_ms"].as_u64().expect("the compaction started");
    assert!(ended <= started, "the compaction started before the retention ended: {statuses:#?}");
    let now = java.run(&json!({"cmd": "read", "location": location}));
    assert_eq!((&now["count"], &now["digest"]), (&want["count"], &want["digest"]));
}
