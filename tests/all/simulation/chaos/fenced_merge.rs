//! The merge executor's commit must be fenced: a worker paused past its
//! session, whose subtask was given to another node, must not commit its
//! stale attempt when it resumes.

use super::*;

// ---------------------------------------------------------------------------
// The merge executor's commit must be fenced.

const MERGE_PARTITIONS: usize = 6;
const MERGE_DELAY: Duration = Duration::from_millis(5000);

fn make_table(data: &Path) -> Vec<String> {
    common::table::make_table(&format!("fs://{}", data.display()), MERGE_PARTITIONS)
}

/// Every data line (sorted) and the commits of every partition.
fn read_table(data: &Path) -> (Vec<String>, Commits) {
    common::table::read_table(&format!("fs://{}", data.display()), MERGE_PARTITIONS)
}

/// The merge child of `worker` for `partition`, if running.
fn merge_child(worker: i32, partition: &str) -> Option<i32> {
    let want = format!("db/s/t/{partition}/");
    cs::descendants(worker).into_iter().map(|p| p.pid).find(|pid| {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        cmd.contains("__merge") && cmd.contains(&want)
    })
}

/// A worker running a merge subtask is paused past its session (`kind`:
/// the daemon alone, or the whole machine), the subtask is given to another
/// node, then the worker resumes. The partition's commit must record the
/// new attempt: the stale one must not commit.
fn paused_worker_must_not_commit(kind: PauseKind) {
    let mut c = Cluster::fs();
    c.env = vec![("COMPACTD_TEST_MERGE_DELAY_MS".into(), MERGE_DELAY.as_millis().to_string())];
    let data = c.fs_path().with_file_name("data");
    let want = make_table(&data);
    let data_uri = format!("fs://{}", data.display());
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", &data_uri, "--sweep", "1s", "--max-running", "2", "--retries", "20"]);
    }
    c.wait_nodes(Duration::from_secs(20), "3 alive nodes and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
    let monitor = monitor_of(&c.nodes()).unwrap();
    // The monitor manages the task: the two other nodes are plain workers.
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--json", "--manager", &monitor]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let task = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    // A subtask running on a node that is neither the manager nor the
    // monitor, with its merge child started.
    let found = std::cell::RefCell::new(None);
    c.wait_status(&task, Duration::from_secs(20), "a merge running on a plain worker", |s| {
        let manager = s["manager"].as_str().unwrap_or("");
        let Some(subs) = s["subtasks"].as_array() else { return false };
        for t in subs {
            let node = t["node"].as_str().unwrap_or("");
            if t["state"] != "Running" || node == manager || node == monitor {
                continue;
            }
            let partition = t["partition"].as_str().unwrap_or("").to_string();
            let pid = c.pid(node);
            if let Some(child) = merge_child(pid, &partition) {
                *found.borrow_mut() = Some((node.to_string(), partition, t["attempt"].as_u64().unwrap(), child));
                return true;
            }
        }
        false
    });
    let (victim, partition, old_attempt, child) = found.into_inner().unwrap();
    let child_seen = Instant::now();
    let pid = c.pid(&victim);
    match kind {
        PauseKind::Daemon => c.pause(&victim),
        PauseKind::Machine => {
            let stopped = cs::stop_tree(pid);
            assert!(stopped.contains(&child), "the merge child {child} was not stopped: {stopped:?}");
        }
    }
    eprintln!("paused {victim} ({kind:?}) while it merges {partition} attempt {old_attempt} (child {child})");
    // Past its session the manager gives the subtask to another node.
    let s = c.wait_status(&task, Duration::from_secs(20), "the subtask re-dispatched", |s| {
        s["subtasks"].as_array().is_some_and(|subs| {
            subs.iter().any(|t| {
                t["partition"] == partition.as_str()
                    && t["attempt"].as_u64() > Some(old_attempt)
                    && t["state"] == "Running"
            })
        })
    });
    let new = s["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["partition"] == partition.as_str() && t["attempt"].as_u64() > Some(old_attempt))
        .unwrap()
        .clone();
    eprintln!("{partition} re-dispatched: attempt {} on {}", new["attempt"], new["node"]);
    // Stay paused until the stale child's delay is over: on resume it is at
    // its commit at once (the daemon-only pause never stopped it anyway).
    while child_seen.elapsed() < MERGE_DELAY + Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    match kind {
        PauseKind::Daemon => c.resume(&victim),
        // The worker's reaction comes last: a fence must not depend on the
        // daemon winning the race against its own child.
        PauseKind::Machine => cs::cont_tree(pid, Duration::from_millis(300)),
    }
    let s = c.wait_status(&task, Duration::from_secs(60), "the task to end", |s| {
        s["state"] != "Running" && s["state"] != "Init" && !s.is_null()
    });
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["result"]["success"], MERGE_PARTITIONS as u64, "{s:#}");
    let (got, commits) = read_table(&data);
    assert_eq!(got, want, "every line exactly once");
    assert!(commits.values().all(|c| c.len() == 1 && c[0].1), "one done commit per partition: {commits:?}");
    let committed = commits[&partition][0].0;
    assert!(
        committed > old_attempt,
        "{partition} was committed by the stale attempt {old_attempt} of the paused worker {victim}, after the \
         subtask had been given to {} as attempt {}: {commits:?}",
        new["node"],
        new["attempt"]
    );
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

#[test]
fn fs_merge_commit_of_a_paused_daemon_is_fenced() {
    let _turn = crate::common::turns::machine();
    paused_worker_must_not_commit(PauseKind::Daemon);
}

#[test]
fn fs_merge_commit_of_a_paused_machine_is_fenced() {
    let _turn = crate::common::turns::machine();
    paused_worker_must_not_commit(PauseKind::Machine);
}
