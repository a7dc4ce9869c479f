//! The merge protocol on the memory and fs backends: crash and rerun,
//! planted commits, fences, and several tasks on one partition at once.

use super::*;

fn job(attempt: u32) -> MergeJob {
    MergeJob {
        dir: "db/s/t/p1/".into(),
        task: "aaaaffff.16176931.56000000.0".into(),
        round: 1,
        attempt,
        target_size: 1000,
        delay_before_commit: std::time::Duration::ZERO,
        min_age: std::time::Duration::ZERO,
        fence: None,
        now: std::time::UNIX_EPOCH,
        format: Format::Lines,
        io: Default::default(),
    }
}

/// What attempt 1 of `j`'s round stages and commits (`turn`: as which
/// turn; none: a commit of a version before turns), staged by hand: the
/// small files concatenated into one output named `name`.
async fn staged_by_hand(store: &Store, j: &MergeJob, name: &str, turn: Option<u64>) -> Commit {
    let staging = j.staging_dir(1);
    let mut buf = vec![];
    let mut inputs = vec![];
    for (p, len) in data_files(store, &j.dir).await.unwrap() {
        if len < 1000 {
            let b = store.read(&p).await.unwrap().unwrap();
            buf.extend_from_slice(&b);
            if !b.ends_with(b"\n") {
                buf.push(b'\n');
            }
            inputs.push(p);
        }
    }
    store.put(&format!("{staging}0"), buf).await.unwrap();
    let final_path = format!("{}{name}", j.dir);
    Commit {
        task: j.task.clone(),
        round: j.round,
        attempt: 1,
        outputs: vec![Output { staged: format!("{staging}0"), final_path, inputs }],
        done: false,
        stats: BTreeMap::new(),
        turn,
    }
}

/// The round's record, where versions before turns kept the commit.
fn record(j: &MergeJob) -> String {
    format!("{}{META_DIR}commit.{}.r{}", j.dir, j.task, j.round)
}

async fn lines(store: &Store, dir: &str) -> Vec<String> {
    let mut all = vec![];
    for (p, _) in data_files(store, dir).await.unwrap() {
        let b = store.read(&p).await.unwrap().unwrap();
        all.extend(String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_string));
    }
    all.sort();
    all
}

async fn seed(store: &Store) -> Vec<String> {
    let mut want = vec![];
    for f in 0..10 {
        let mut text = String::new();
        for l in 0..5 {
            let line = format!("file{f}-line{l}");
            text += &line;
            want.push(line);
            if !(f == 3 && l == 4) {
                text.push('\n'); // file 3 has no final newline
            }
        }
        store.put(&format!("db/s/t/p1/part-{f:03}"), text.into_bytes()).await.unwrap();
    }
    store.put("db/s/t/p1/big", vec![b'x'; 2000]).await.unwrap();
    want.push("x".repeat(2000));
    want.sort();
    want
}

#[tokio::test]
async fn a_torn_commit_of_an_older_version_is_replaced_once_its_writer_is_surely_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
    let want = seed(&store).await;
    let j = job(2);
    // An older compactd created the commit and was killed before writing it.
    let commit = dir.path().join(record(&j));
    std::fs::create_dir_all(commit.parent().unwrap()).unwrap();
    std::fs::write(&commit, b"").unwrap();
    let written = std::fs::metadata(&commit).unwrap().modified().unwrap();
    let before = data_files(&store, "db/s/t/p1/").await.unwrap();
    let young = MergeJob { now: written + std::time::Duration::from_secs(5), ..j.clone() };
    let err = run(&store, &young).await.unwrap_err().to_string();
    assert!(err.contains("does not parse") && err.contains(&record(&j)), "{err}");
    assert_eq!(data_files(&store, "db/s/t/p1/").await.unwrap(), before, "inputs untouched");
    let old = MergeJob { now: written + std::time::Duration::from_secs(61), ..j.clone() };
    assert!(matches!(run(&store, &old).await.unwrap(), Outcome::Merged { inputs: 10, .. }));
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    let c: Commit = serde_json::from_slice(&std::fs::read(&commit).unwrap()).unwrap();
    assert!(c.done && c.attempt == 2);
}

#[tokio::test]
async fn a_planted_commit_naming_files_outside_the_partition_is_refused() {
    let store = Store::memory().await;
    seed(&store).await;
    store.put("db/s/other/p9/secret", b"other table".to_vec()).await.unwrap();
    let j = job(1);
    let staged = format!("{}{META_DIR}staging/{}.r1.a9/0", j.dir, j.task);
    for (final_path, staged, input) in [
        (format!("{}x", j.dir), staged.clone(), "db/s/other/p9/secret".to_string()),
        ("db/s/other/p9/secret".to_string(), staged.clone(), format!("{}part-000", j.dir)),
        (format!("{}x", j.dir), "db/s/other/p9/secret".to_string(), format!("{}part-000", j.dir)),
    ] {
        let c = Commit {
            task: j.task.clone(),
            round: 1,
            attempt: 9,
            outputs: vec![Output { staged, final_path, inputs: vec![input] }],
            done: false,
            stats: BTreeMap::new(),
            turn: None,
        };
        store.put(&record(&j), serde_json::to_vec(&c).unwrap()).await.unwrap();
        let err = run(&store, &j).await.unwrap_err().to_string();
        assert!(err.contains("refused"), "{err}");
        assert_eq!(&store.read("db/s/other/p9/secret").await.unwrap().unwrap()[..], b"other table");
        assert!(store.exists(&format!("{}part-000", j.dir)).await.unwrap(), "an input was deleted");
    }
}

#[tokio::test]
async fn merges_small_files_and_keeps_every_line() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    let out = run(&store, &job(1)).await.unwrap();
    assert!(matches!(out, Outcome::Merged { inputs: 10, .. }), "{out:?}");
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    let files = data_files(&store, "db/s/t/p1/").await.unwrap();
    assert!(files.len() < 11, "{files:?}");
    assert!(files.iter().any(|f| f.0.ends_with("/big")));
    // a rerun of the round changes nothing
    assert!(matches!(run(&store, &job(2)).await.unwrap(), Outcome::RolledForward { by_attempt: 1 }));
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    assert!(store.list("db/s/t/p1/_compactd/staging/").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_late_attempt_rolls_the_committed_plan_forward_instead_of_merging_again() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    // attempt 1 committed but crashed before rolling forward
    let j1 = job(1);
    let c = staged_by_hand(&store, &j1, "compacted-x", None).await;
    store.create(&record(&j1), serde_json::to_vec(&c).unwrap()).await.unwrap();
    assert_eq!(run(&store, &job(2)).await.unwrap(), Outcome::RolledForward { by_attempt: 1 });
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    assert_eq!(data_files(&store, "db/s/t/p1/").await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_attempt_whose_subtask_folder_is_gone_does_not_commit() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    let sched = Store::memory().await;
    let folder = "Compaction_V2/TaskAssigned/n1/x.r1.u0.a1/".to_string();
    let mut j = job(1);
    j.fence = Some((sched.clone(), folder.clone()));
    // folder gone: the manager gave the subtask away
    let err = run(&store, &j).await.unwrap_err().to_string();
    assert!(err.contains("superseded"), "{err}");
    assert!(!store.exists(&record(&j)).await.unwrap());
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    assert!(store.list("db/s/t/p1/_compactd/staging/").await.unwrap().iter().all(|e| !e.name().contains(".a1")));
    // folder present: commits
    sched.put(&format!("{folder}TaskInfo.pc.db"), b"{}".to_vec()).await.unwrap();
    assert!(matches!(run(&store, &j).await.unwrap(), Outcome::Merged { .. }));
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
}

#[tokio::test]
async fn one_small_file_is_left_alone() {
    let store = Store::memory().await;
    store.put("db/s/t/p1/a", b"1\n".to_vec()).await.unwrap();
    assert_eq!(run(&store, &job(1)).await.unwrap(), Outcome::NothingToDo);
    assert_eq!(run(&Store::memory().await, &job(1)).await.unwrap(), Outcome::NothingToDo);
}

/// A job of another task (`n`), as a second `submit` of the table makes.
fn task(n: u32, delay_ms: u64) -> MergeJob {
    MergeJob {
        task: format!("bbbb{n:04}.16176931.56000000.0"),
        delay_before_commit: std::time::Duration::from_millis(delay_ms),
        ..job(1)
    }
}

#[tokio::test]
async fn two_tasks_on_one_partition_merge_each_line_once() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    // Both plan from the same ten files; the slow one commits second.
    let (slow, fast) = (task(1, 300), task(2, 0));
    let (slow, fast) = tokio::join!(run(&store, &slow), run(&store, &fast));
    assert!(matches!(fast.unwrap(), Outcome::Merged { inputs: 10, .. }));
    // The slow one found its inputs gone with the other's commit, planned
    // again from what that left (one output and the big file): nothing to do.
    assert_eq!(slow.unwrap(), Outcome::NothingToDo);
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    let meta: Vec<String> =
        store.list("db/s/t/p1/_compactd/").await.unwrap().into_iter().map(|e| e.name().to_string()).collect();
    assert!(meta.contains(&"turn.1".to_string()) && !meta.contains(&"turn.2".to_string()), "{meta:?}");
}

#[tokio::test]
async fn five_tasks_racing_on_one_partition_keep_every_line_once() {
    let store = Store::memory().await;
    let mut want = seed(&store).await;
    for round in 0..4u32 {
        // More files between rounds, as a writer adds them.
        for f in 0..6 {
            let line = format!("round{round}-file{f}");
            store.put(&format!("db/s/t/p1/new-{round}-{f}"), format!("{line}\n").into_bytes()).await.unwrap();
            want.push(line);
        }
        want.sort();
        let runs = (0..5).map(|n| {
            let j = MergeJob { round: round + 1, ..task(n, u64::from((n * 37 + round * 11) % 60)) };
            let store = store.clone();
            async move { run(&store, &j).await }
        });
        let outs: Vec<Outcome> = futures::future::join_all(runs).await.into_iter().map(Result::unwrap).collect();
        assert!(outs.iter().any(|o| matches!(o, Outcome::Merged { .. })), "round {round}: {outs:?}");
        assert_eq!(lines(&store, "db/s/t/p1/").await, want, "round {round}");
    }
}

#[tokio::test]
async fn a_turn_whose_roll_forward_was_cut_short_is_finished_by_the_next_task() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    // Task 1 committed its turn and died before rolling it forward.
    let j1 = task(1, 0);
    let c = staged_by_hand(&store, &j1, "compacted-y", Some(1)).await;
    store.create("db/s/t/p1/_compactd/turn.1", serde_json::to_vec(&c).unwrap()).await.unwrap();
    // Task 2 finishes task 1's change before it plans; then nothing is due.
    assert_eq!(run(&store, &task(2, 0)).await.unwrap(), Outcome::NothingToDo);
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    let record: Commit = serde_json::from_slice(&store.read(&record(&j1)).await.unwrap().unwrap()).unwrap();
    assert!(record.done && record.turn == Some(1));
    // Task 1's next attempt finds its round done.
    let again = MergeJob { attempt: 2, ..j1 };
    assert_eq!(run(&store, &again).await.unwrap(), Outcome::RolledForward { by_attempt: 1 });
}

#[tokio::test]
async fn a_planted_turn_of_another_task_is_refused_and_nothing_moves() {
    let store = Store::memory().await;
    let want = seed(&store).await;
    let c = Commit {
        task: "../../other".into(),
        round: 1,
        attempt: 1,
        outputs: vec![],
        done: false,
        stats: BTreeMap::new(),
        turn: Some(1),
    };
    store.create("db/s/t/p1/_compactd/turn.1", serde_json::to_vec(&c).unwrap()).await.unwrap();
    let err = run(&store, &task(2, 0)).await.unwrap_err().to_string();
    assert!(err.contains("turn.1 refused") && err.contains("not a task id"), "{err}");
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
    assert_eq!(data_files(&store, "db/s/t/p1/").await.unwrap().len(), 11);
}

async fn fs_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_data(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
    (dir, store)
}

/// What every file of the partition holds, by name (compactd's own apart).
fn bytes_by_name(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir.join("db/s/t/p1"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

// A writer beside the unit on a real file system, whose times are the
// wall clock's: real time.
#[allow(clippy::disallowed_methods)]
#[tokio::test]
async fn an_input_that_grows_while_it_is_merged_aborts_the_unit_and_keeps_every_byte() {
    let (dir, store) = fs_store().await;
    seed(&store).await;
    let j = MergeJob { now: std::time::SystemTime::now(), ..task(1, 400) };
    let grow = async {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(dir.path().join("db/s/t/p1/part-004")).unwrap();
        f.write_all(b"appended-while-merging\n").unwrap();
        bytes_by_name(dir.path())
    };
    let (out, after_append) = tokio::join!(run(&store, &j), grow);
    let err = out.unwrap_err().to_string();
    assert!(err.contains("part-004 changed while it was merged"), "{err}");
    assert_eq!(bytes_by_name(dir.path()), after_append, "a byte changed");
    assert!(store.list("db/s/t/p1/_compactd/").await.unwrap().iter().all(|e| !e.name().starts_with("turn.")));
}

// A writer beside the unit on a real file system, whose times are the
// wall clock's: real time.
#[allow(clippy::disallowed_methods)]
#[tokio::test]
async fn files_younger_than_the_minimum_age_are_no_inputs() {
    let (dir, store) = fs_store().await;
    let want = seed(&store).await;
    let now = std::time::SystemTime::now();
    let hour_ago = now - std::time::Duration::from_secs(3600);
    // Four files were written an hour ago; the rest just now.
    for f in 0..4 {
        let file =
            std::fs::File::options().write(true).open(dir.path().join(format!("db/s/t/p1/part-{f:03}"))).unwrap();
        file.set_modified(hour_ago).unwrap();
    }
    let j = MergeJob { now, min_age: std::time::Duration::from_secs(600), ..task(1, 0) };
    assert!(matches!(run(&store, &j).await.unwrap(), Outcome::Merged { inputs: 4, .. }));
    let names: Vec<String> = bytes_by_name(dir.path()).into_keys().collect();
    for f in 4..10 {
        assert!(names.contains(&format!("part-{f:03}")), "a young file was merged: {names:?}");
    }
    assert_eq!(lines(&store, "db/s/t/p1/").await, want);
}

// A writer beside the unit on a real file system, whose times are the
// wall clock's: real time.
#[allow(clippy::disallowed_methods)]
#[tokio::test]
async fn a_write_in_progress_in_the_table_stops_the_merge() {
    let (dir, store) = fs_store().await;
    seed(&store).await;
    let before = bytes_by_name(dir.path());
    // A Hadoop job's committer at work in the partition.
    std::fs::create_dir_all(dir.path().join("db/s/t/p1/_temporary/0")).unwrap();
    std::fs::write(dir.path().join("db/s/t/p1/_temporary/0/part-9"), b"x\n").unwrap();
    let j = MergeJob { now: std::time::SystemTime::now(), ..task(1, 0) };
    let err = run(&store, &j).await.unwrap_err().to_string();
    assert!(err.contains("a write is in progress") && err.contains("_temporary/"), "{err}");
    assert_eq!(bytes_by_name(dir.path()), before);
    // One a job left behind long ago does not hold the table for ever.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    std::fs::File::options()
        .write(true)
        .open(dir.path().join("db/s/t/p1/_temporary/0/part-9"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(matches!(run(&store, &j).await.unwrap(), Outcome::Merged { .. }));
}
