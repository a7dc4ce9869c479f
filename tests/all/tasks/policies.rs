//! Compaction that runs itself (policies), with real processes: three
//! `compactd` nodes, one policy, and a writer process that keeps adding
//! small files to 20 tables, on fs and on the loopback S3 server.
//!
//! Checked: every partition's small-file count stays under the policy's
//! threshold plus one writer batch (sampled while the writer runs); every
//! line written is there exactly once at the end (nothing lost, nothing
//! merged twice); each decision has exactly one task (markers `#1..#n`,
//! contiguous); pausing the policy stops new submissions within one
//! planner round, resuming starts them again. On fs the first monitor is
//! SIGKILLed in the middle of its first planning pass, exactly between a
//! decision's submit and its `.Task` record (the LD_PRELOAD shim), and its
//! successor neither loses nor doubles that decision.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::s3::S3Server;
use futures::TryStreamExt;
use serde_json::Value;
use store::{RootUri, Store};

const TABLES: usize = 20;
const PARTITIONS: usize = 2;
const THRESHOLD: usize = 4;
/// Writer files are 36 bytes; outputs are merges of 4 or more, so over the
/// small-file size, as a real table's outputs would be.
const SMALL: u64 = 100;
const POLICY: &str = "name = \"warehouse\"\ntables = [\"db/public/*\"]\nexecutor = \"merge\"\nmin-small-files = 4\nmin-interval = \"0s\"\ntarget-size = 1024\nsmall-file-size = 100\nmin-file-age = \"0s\"\n";

struct Lake {
    /// `--data` for the nodes.
    data: String,
    /// The writer's target arguments.
    writer: Vec<String>,
    python: std::path::PathBuf,
    env: Vec<(String, String)>,
    /// Seconds between two writer rounds (a round is one file per
    /// partition): what the backend lets three nodes keep up with here.
    every: f64,
    /// Writer rounds a partition may gain past the threshold before its
    /// compaction lands: the planner's pass, the merge and its commit.
    slack: usize,
    /// `run --plan-interval`, and how often the test samples the counts.
    plan_interval: &'static str,
    sample: Duration,
}

fn writer(lake: &Lake, first: u32, rounds: u32, every: f64, stop: &Path) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/writer.py");
    Command::new(&lake.python)
        .arg(script)
        .args(&lake.writer)
        .args(["--tables", &TABLES.to_string(), "--partitions", &PARTITIONS.to_string()])
        .args(["--first", &first.to_string(), "--rounds", &rounds.to_string(), "--every", &every.to_string(), "--stop"])
        .arg(stop)
        .envs(lake.env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the writer")
}

/// Data files per partition (`t00/p0` → names), `_compactd/` and hidden
/// names left out.
fn files(rt: &tokio::runtime::Runtime, data: &Store) -> BTreeMap<String, Vec<String>> {
    listed(rt, data).into_iter().map(|(p, f)| (p, f.into_iter().map(|(name, _)| name).collect())).collect()
}

/// Small data files per partition.
fn small(rt: &tokio::runtime::Runtime, data: &Store) -> BTreeMap<String, usize> {
    listed(rt, data).into_iter().map(|(p, f)| (p, f.iter().filter(|(_, len)| *len < SMALL).count())).collect()
}

fn listed(rt: &tokio::runtime::Runtime, data: &Store) -> BTreeMap<String, Vec<(String, u64)>> {
    rt.block_on(async {
        let all: Vec<store::Entry> = data.list_stream("db/public/", true).try_collect().await.unwrap();
        let mut out: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
        for e in all {
            let rel = e.path.strip_prefix("db/public/").unwrap();
            let parts: Vec<&str> = rel.split('/').collect();
            if parts.len() == 3 && !parts[2].starts_with(['.', '_']) {
                let len = e.len.expect("a data listing carries sizes");
                out.entry(format!("{}/{}", parts[0], parts[1])).or_default().push((e.path.clone(), len));
            }
        }
        out
    })
}

/// Watches that no partition is compacted by two tasks at once: each call
/// lists the units running now (a subtask folder with `Status.Running` and
/// no final marker) and maps them to their tasks' partitions (each task's
/// info read once). Two tasks running on one partition fail the test
/// unless one of them has ended meanwhile (a stale marker of a killed
/// node's unit, which its task re-dispatched, is not a run).
struct Overlap {
    partition_of: BTreeMap<String, String>,
    samples: usize,
    /// Samples that saw a unit running.
    busy: usize,
}

impl Overlap {
    fn check(&mut self, rt: &tokio::runtime::Runtime, tree: &Store) {
        use compactd::tasks;
        rt.block_on(async {
            let all: Vec<store::Entry> =
                tree.list_stream("Compaction_V2/TaskAssigned/", true).try_collect().await.unwrap();
            // Layout 2: a subtask folder's `Status.<State>` files; layout 3:
            // a batch's `u<unit>.a<attempt>.<Mark>` files, read as the same
            // names per unit attempt.
            let mut markers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for e in &all {
                let parts: Vec<&str> = e.path.split('/').collect();
                if let [_, _, _node, folder, file] = parts[..] {
                    if let Some((u, a, m)) = layouts::v3::parse_mark(file) {
                        let state = match m {
                            layouts::v3::Mark::Running(_) => "Status.Running",
                            layouts::v3::Mark::Success => "Status.Success",
                            layouts::v3::Mark::Failed => "Status.Failed",
                            layouts::v3::Mark::Cancel | layouts::v3::Mark::Released => "Status.Cancel",
                            layouts::v3::Mark::Output => continue,
                        };
                        markers.entry(format!("{folder}/u{u}.a{a}")).or_default().insert(state.to_string());
                    } else {
                        markers.entry(folder.to_string()).or_default().insert(file.to_string());
                    }
                }
            }
            let mut running: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (subtask, files) in markers {
                let ended = ["Status.Success", "Status.Failed", "Status.Cancel"].iter().any(|f| files.contains(*f));
                if !files.contains("Status.Running") || ended {
                    continue;
                }
                let task = subtask.split(".r").next().unwrap().to_string();
                if !self.partition_of.contains_key(&task) {
                    let Ok(id) = layouts::TaskId::parse(&task) else { continue };
                    let Ok(info) = tasks::read_info(tree, &id).await else { continue };
                    let Some(marker) = info.run.params.get(layouts::policies::MARKER_PARAM) else { continue };
                    let part = marker.split('#').next().unwrap_or_default().to_string();
                    self.partition_of.insert(task.clone(), part);
                }
                let Some(part) = self.partition_of.get(&task) else { continue };
                running.entry(part.clone()).or_default().insert(task);
            }
            self.busy += usize::from(!running.is_empty());
            for (part, ids) in running.into_iter().filter(|(_, ids)| ids.len() > 1) {
                let mut live = vec![];
                for t in &ids {
                    let id = layouts::TaskId::parse(t).unwrap();
                    let dir = tasks::read_dir(tree, &id).await.unwrap();
                    if !dir.state.is_some_and(|s| s.is_terminal()) {
                        live.push(t.clone());
                    }
                }
                assert!(live.len() <= 1, "partition {part} compacted by two tasks at once: {live:?}");
            }
        });
        self.samples += 1;
    }
}

/// Every planner task: marker → (task id, state).
fn planner_tasks(rt: &tokio::runtime::Runtime, tree: &Store) -> BTreeMap<String, Vec<(String, String)>> {
    rt.block_on(async {
        let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for id in compactd::tasks::list_ids(tree).await.unwrap() {
            let Ok(info) = compactd::tasks::read_info(tree, &id).await else { continue };
            if let Some(m) = info.run.params.get(layouts::policies::MARKER_PARAM) {
                let state = compactd::tasks::read_dir(tree, &id).await.unwrap().state.map(|s| s.to_string());
                out.entry(m.clone()).or_default().push((id.to_string(), state.unwrap_or_default()));
            }
        }
        out
    })
}

fn tables(c: &Cluster) -> Vec<Value> {
    let out = c.compactd(&["tables", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// Waits until no planner task runs and every partition is under the threshold.
fn settle(c: &Cluster, rt: &tokio::runtime::Runtime, data: &Store, what: &str) {
    let start = Instant::now();
    loop {
        let quiet = tables(c).iter().all(|t| t["inFlight"] == 0);
        let under = small(rt, data).values().all(|n| *n < THRESHOLD);
        if quiet && under {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{what}: not settled\n{:#?}\n{}", tables(c), c.logs_text());
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn scenario(mut c: Cluster, lake: Lake, tree: Store, data: Store, kill_first_monitor: bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let flags = ["--data", &lake.data, "--plan-interval", lake.plan_interval, "--max-running", "4"];
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("warehouse.toml");
    std::fs::write(&policy, POLICY).unwrap();
    // n1 first, so that it is the first monitor.
    let plain_env = c.env.clone();
    if kill_first_monitor {
        // Killed right before it records the 5th first decision's task: the
        // task is submitted, `.Task` is not written, the pass is half done.
        c.env.extend([
            ("LD_PRELOAD".to_string(), common::killat::shim().display().to_string()),
            ("COMPACTD_KILL_AT".into(), "link-before".into()),
            ("COMPACTD_KILL_PATH".into(), ".0000000001.Task".into()),
            ("COMPACTD_KILL_NTH".into(), "5".into()),
        ]);
    }
    c.start_with("n1", &flags);
    c.wait_nodes(Duration::from_secs(30), "n1 the monitor", |r| monitor_of(r).as_deref() == Some("n1"));
    c.env = plain_env;
    c.start_with("n2", &flags);
    c.start_with("n3", &flags);
    c.wait_nodes(Duration::from_secs(30), "three nodes", |r| alive(r).len() == 3);
    let out = c.compactd(&["policy", "apply", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The writer adds a batch every EVERY seconds; the counts are sampled.
    let stop = dir.path().join("stop");
    // Ten rounds: with no compaction a partition would reach 10 small
    // files, well past the bound.
    let rounds = 10;
    let mut w = writer(&lake, 0, rounds, lake.every, &stop);
    // Samples taken while a killed monitor's successor takes over (from
    // its death until two writer rounds after the nodes' view shows the
    // successor monitor and the dead node offline, however long a loaded
    // machine takes to get there) are kept apart.
    let mut worst: BTreeMap<String, usize> = BTreeMap::new();
    let mut failover_worst = 0;
    let mut died: Option<Instant> = None;
    let mut took_over: Option<Instant> = None;
    let started = Instant::now();
    let mut overlap = Overlap { partition_of: BTreeMap::new(), samples: 0, busy: 0 };
    while w.try_wait().unwrap().is_none() {
        overlap.check(&rt, &tree);
        if kill_first_monitor && died.is_none() && !c.is_running("n1") {
            died = Some(Instant::now());
        }
        if died.is_some() && took_over.is_none() {
            let rows = c.nodes();
            let successor = monitor_of(&rows).is_some_and(|m| m != "n1");
            if successor && !alive(&rows).iter().any(|n| n == "n1") {
                took_over = Some(Instant::now());
            }
        }
        let in_failover =
            kill_first_monitor && took_over.is_none_or(|t| t.elapsed() < Duration::from_secs_f64(2.0 * lake.every));
        for (p, count) in small(&rt, &data) {
            if in_failover {
                failover_worst = failover_worst.max(count);
            } else {
                let n = worst.entry(p).or_default();
                *n = (*n).max(count);
            }
        }
        assert!(started.elapsed() < Duration::from_secs(180), "the writer ran too long");
        std::thread::sleep(lake.sample);
    }
    assert!(w.wait().unwrap().success(), "the writer failed");
    if kill_first_monitor {
        let st = c.wait_exit("n1", Duration::from_secs(5));
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(libc::SIGKILL),
            "n1 was not killed at its 5th decision record: {st:?}\n{}",
            c.logs_text()
        );
    }
    settle(&c, &rt, &data, "after the writer");
    let max = worst.values().copied().max().unwrap_or(0);
    eprintln!("most small files seen in one partition: {max} (threshold {THRESHOLD}, a batch is 1 file); while the killed monitor's successor took over: {failover_worst}");
    if let (Some(d), Some(t)) = (died, took_over) {
        eprintln!("the successor took over {:?} after the first monitor's death", t - d);
    }
    eprintln!(
        "no partition compacted by two tasks at once: {} samples, {} of them with units running",
        overlap.samples, overlap.busy
    );
    assert!(max <= THRESHOLD + lake.slack, "a partition reached {max} small files: {worst:?}\n{}", c.logs_text());

    // Pause: nothing new is submitted once a planner round has passed.
    let out = c.compactd(&["policy", "pause", "warehouse"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(Duration::from_millis(700));
    let before = planner_tasks(&rt, &tree);
    // Quick: while paused nothing is timed.
    let mut w = writer(&lake, rounds, 4, 0.5, &dir.path().join("stop2"));
    assert!(w.wait().unwrap().success());
    std::thread::sleep(Duration::from_secs(3));
    let after = planner_tasks(&rt, &tree);
    assert_eq!(before, after, "submitted while paused");
    assert!(small(&rt, &data).values().all(|n| *n >= THRESHOLD), "every partition is due now");
    let out = c.compactd(&["policy", "resume", "warehouse"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    settle(&c, &rt, &data, "after resume");

    // Every line written, exactly once.
    let written_rounds = rounds as usize + 4;
    for t in 0..TABLES {
        for p in 0..PARTITIONS {
            let key = format!("t{t:02}/p{p}");
            let mut lines: Vec<String> = vec![];
            for f in files(&rt, &data).remove(&key).unwrap_or_default() {
                let b = rt.block_on(data.read(&f)).unwrap().unwrap();
                lines.extend(String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_string));
            }
            let k = key.as_str();
            let want: BTreeSet<String> =
                (0..written_rounds).flat_map(|r| (0..3).map(move |i| format!("{k}/{r}/{i}"))).collect();
            let got: BTreeSet<String> = lines.iter().cloned().collect();
            if lines.len() != got.len() {
                let names = files(&rt, &data).remove(&key).unwrap_or_default();
                let all: Vec<store::Entry> =
                    rt.block_on(data.list_stream(&format!("db/public/{key}/"), true).try_collect()).unwrap();
                let mut seen = BTreeSet::new();
                let dups: Vec<&String> = lines.iter().filter(|l| !seen.insert(*l)).collect();
                let missing: Vec<&String> = want.difference(&got).collect();
                let tasks: Vec<_> = planner_tasks(&rt, &tree).into_iter().filter(|(m, _)| m.contains(&key)).collect();
                panic!(
                    "{key}: a line is there twice: {} lines, {} distinct; dups {dups:?} missing {missing:?} tasks {tasks:?}; files {names:#?}\nall entries {:#?}\n{}",
                    lines.len(),
                    got.len(),
                    all.iter().map(|e| &e.path).collect::<Vec<_>>(),
                    c.logs_text()
                );
            }
            assert_eq!(got, want, "{key}: lines lost or foreign");
        }
    }
    // Each decision has exactly one live task, and no decision is missing.
    let tasks = planner_tasks(&rt, &tree);
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (marker, ts) in &tasks {
        let kept: Vec<_> = ts.iter().filter(|(_, s)| s != "Cancel").collect();
        assert_eq!(kept.len(), 1, "decision {marker}: tasks {ts:?}");
        let (part, seq) = marker.rsplit_once('#').unwrap();
        seqs.entry(part.to_string()).or_default().push(seq.parse().unwrap());
    }
    assert_eq!(seqs.len(), TABLES * PARTITIONS, "every partition was compacted: {seqs:?}");
    for (part, mut s) in seqs {
        s.sort_unstable();
        assert_eq!(s, (1..=s.len() as u64).collect::<Vec<_>>(), "{part}: decisions lost or doubled");
    }
    eprintln!("planner tasks: {}", tasks.len());
    let out = c.compactd(&["check"]);
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn fs_tables_stay_compact_and_a_monitor_killed_mid_pass_loses_and_doubles_no_decision() {
    let _turn = crate::common::turns::machine();
    let c = Cluster::fs();
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().to_str().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tree = rt.block_on(Store::open(&RootUri::parse(&c.root).unwrap())).unwrap();
    let data_store = rt.block_on(Store::open_data(&RootUri::parse(&data).unwrap())).unwrap();
    let lake = Lake {
        data: data.clone(),
        writer: vec!["--fs".into(), data],
        python: "python3".into(),
        env: vec![],
        every: 2.0,
        slack: 1,
        plan_interval: "500ms",
        sample: Duration::from_millis(200),
    };
    scenario(c, lake, tree, data_store, true);
}

#[test]
fn s3_tables_stay_compact() {
    let _turn = crate::common::turns::machine();
    let s3 = S3Server::start();
    s3.set_env();
    let root = s3.new_bucket("policies");
    let data = s3.new_bucket("policies-data");
    let mut c = Cluster::on(root.clone(), s3.env());
    c.timings = vec!["--heartbeat", "1s", "--session-timeout", "6s", "--lease", "6s"];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tree = rt.block_on(Store::open(&RootUri::parse(&root).unwrap())).unwrap();
    let data_store = rt.block_on(Store::open_data(&RootUri::parse(&data).unwrap())).unwrap();
    let bucket = data.strip_prefix("s3://").unwrap().split('/').next().unwrap().to_string();
    let lake = Lake {
        data: data.clone(),
        writer: vec!["--s3".into(), s3.endpoint(), bucket, "compactd".into()],
        python: S3Server::python(),
        env: s3.env(),
        // The loopback server answers one request at a time: slower
        // writes, passes and samples, and the S3 tests' usual timings. A
        // merge unit asks it 2 to 3 more requests than before one merge at
        // a time per partition (the partition's turns, the look at the
        // table and the inputs right before the commit): at a round every
        // 8 s a partition reached 6 small files in 3 of 6 runs here.
        every: 10.0,
        // One round more than on fs: beside other tests or CPU burners, a
        // pass and a merge through the one-at-a-time server can outlast a
        // round (6 small files, once in a loaded CI run). The bound still
        // shows what is claimed: the count stays bounded, it does not grow
        // with the writer.
        slack: 2,
        plan_interval: "2s",
        sample: Duration::from_secs(1),
    };
    scenario(c, lake, tree, data_store, false);
}

/// The policy commands as an operator types them: versions (an unchanged
/// apply logs nothing), `show` of the current and of a logged version,
/// `list`, pause and resume, and clear refusals of what does not exist.
#[test]
fn policy_versions_show_list_pause_and_resume_through_the_cli() {
    let _turn = crate::common::turns::machine();
    let mut c = Cluster::fs();
    c.start_with("n1", &[]);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r).len() == 1);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.toml");
    let run = |args: &[&str]| {
        let out = c.compactd(args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let apply = |text: &str| {
        std::fs::write(&file, text).unwrap();
        run(&["policy", "apply", file.to_str().unwrap()])
    };
    let v1 = "name = \"warehouse\"\ntables = [\"db/public/*\"]\nexecutor = \"merge\"\nmin-small-files = 4\n";
    let v2 = v1.replace("min-small-files = 4", "min-small-files = 6");
    assert_eq!(apply(v1), (Some(0), "policy warehouse version 1\n".into(), String::new()));
    let (code, out, _) = apply(v1);
    assert_eq!((code, out.as_str()), (Some(0), "policy warehouse unchanged (version 1)\n"));
    let (code, out, _) = apply(&v2);
    assert_eq!((code, out.as_str()), (Some(0), "policy warehouse version 2\n"));
    let show = |extra: &[&str]| {
        let mut args = vec!["policy", "show", "warehouse"];
        args.extend_from_slice(extra);
        let (code, out, err) = run(&args);
        assert_eq!(code, Some(0), "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let now = show(&[]);
    assert_eq!((now["version"].as_u64(), now["min-small-files"].as_u64()), (Some(2), Some(6)), "{now:#}");
    let first = show(&["--version", "1"]);
    assert_eq!((first["version"].as_u64(), first["min-small-files"].as_u64()), (Some(1), Some(4)), "{first:#}");
    let (code, _, err) = run(&["policy", "show", "warehouse", "--version", "3"]);
    assert!(code == Some(1) && err.contains("no logged version 3"), "{code:?} {err}");
    let (code, _, err) = run(&["policy", "show", "nosuch"]);
    assert!(code == Some(1) && err.contains("\"nosuch\" is not defined"), "{code:?} {err}");
    let paused = || {
        let (code, out, err) = run(&["policy", "list", "--json"]);
        assert_eq!(code, Some(0), "{err}");
        let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        rows[0]["paused"].as_bool().unwrap()
    };
    assert!(!paused());
    assert_eq!(run(&["policy", "pause", "warehouse"]).0, Some(0));
    assert!(paused() && show(&[])["paused"] == true);
    assert_eq!(run(&["policy", "resume", "warehouse"]).0, Some(0));
    assert!(!paused());
    let (code, _, err) = run(&["policy", "pause", "nosuch"]);
    assert!(code == Some(1) && err.contains("nosuch"), "{code:?} {err}");
}

/// A policy takes no file younger than its minimum age (10 minutes unless
/// it says otherwise): a writer may still be at it, as a Delta or Iceberg
/// writer is between putting its data files down and committing them. Old
/// files beside young ones are compacted; the young ones keep every byte.
#[test]
fn a_policy_leaves_files_younger_than_its_minimum_age_alone() {
    let _turn = crate::common::turns::machine();
    let mut c = Cluster::fs();
    let data_dir = c.fs_path().with_file_name("data");
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let mut young = BTreeMap::new();
    for (part, old) in [("p=old", true), ("p=new", false)] {
        let dir = data_dir.join("db/public/events").join(part);
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..4 {
            let path = dir.join(format!("part-{f}.txt"));
            std::fs::write(&path, format!("{part}-line{f}\n")).unwrap();
            if old {
                std::fs::File::options().write(true).open(&path).unwrap().set_modified(hour_ago).unwrap();
            } else {
                young.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    let policy = c.fs_path().with_file_name("young.toml");
    std::fs::write(
        &policy,
        "name = \"young\"\ntables = [\"db/public/*\"]\nmin-small-files = 4\nmin-interval = \"0s\"\n",
    )
    .unwrap();
    let out = c.compactd(&["policy", "apply", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = format!("fs://{}", data_dir.display());
    c.start_with("n1", &["--data", &data, "--plan-interval", "1s"]);
    let count = |part: &str| {
        std::fs::read_dir(data_dir.join("db/public/events").join(part))
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_file())
            .count()
    };
    let start = Instant::now();
    while count("p=old") != 1 {
        assert!(start.elapsed() < Duration::from_secs(60), "the old files were not compacted\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    // A few more planner rounds: the young files are still not due.
    std::thread::sleep(Duration::from_secs(4));
    for (path, bytes) in &young {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{} changed", path.display());
    }
    assert_eq!(count("p=new"), 4);
    let row = tables(&c).into_iter().find(|t| t["table"] == "events").expect("the table's row");
    assert_eq!(row["smallFiles"], 0, "young files are not counted as small: {row:#}");
    c.terminate("n1");
}
