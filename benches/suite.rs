//! In-process parts of the benchmark suite (not a test; run by
//! `bash bench/run.sh`, or `cargo bench --bench suite -- <part>`). Each part
//! prints one JSON object per line, prefixed `RESULT `, which the script
//! collects into `bench/results.json`.
//!
//! - `limit <dir>`: the backend's own limit. The operations one subtask
//!   lifecycle costs (1 create, 1 read, 2 puts, 1 recursive delete and a
//!   share of folder listings, as counted by `cost`) done directly through
//!   `store::Store` on an fs root in a tight loop, without any scheduling:
//!   one loop (one node's sequential tick) and three concurrent loops (three
//!   nodes), reported as subtasks/s.
//! - `cost`: backend operations, counted by `CountingLayer`.
//!   (a) one subtask lifecycle: 3 in-process nodes on an fs root, a task of
//!   `COMPACTD_BENCH_COST_SHARDS` shards with a no-op command executor (`true`),
//!   default timings, the idle cluster's share over the same polls
//!   subtracted (the method of `benches/ops.rs`); (b) an idle 100-node cluster
//!   (99 members, 1 monitor) on the memory backend with the default timings
//!   (heartbeat 10 s, lease 30 s, session 30 s), one simulated hour after a
//!   warm-up, operations per node per hour by kind.
//! - `scale`: one task of `COMPACTD_BENCH_SCALE_SHARDS` (10,000) shards over 10
//!   in-process nodes on ONE memory store (counting layer around it), a
//!   manual clock advanced one poll per round, command executor `true`
//!   (real processes): wall time to finish, polls needed, operations per
//!   subtask, and the process's resident memory (VmRSS/VmHWM) before and
//!   after.
// A benchmark measures real time.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use compactd::clock::Clock;
use compactd::node::{Node, NodeConfig};
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, TaskSpec};
use layouts::formats::{ExecutorKind, ExecutorSpec};
use layouts::{Name, NodeId, TaskState};
use serde_json::{json, Value};
use store::layers::{CountingLayer, OpCounter, OpCounts};
use store::{RootUri, Store};

fn emit(part: &str, v: Value) {
    let mut v = v;
    v["part"] = json!(part);
    println!("RESULT {v}");
}

fn counts_json(c: &OpCounts, d: f64) -> Value {
    let f = |x: u64| (x as f64 / d * 1000.0).round() / 1000.0;
    json!({
        "create": f(c.create), "put": f(c.put), "read": f(c.read), "stat": f(c.stat),
        "list": f(c.list), "list_pages_est": f(c.list_pages_est), "list_entries": f(c.list_entries),
        "delete": f(c.delete), "other": f(c.other), "total": f(c.total()),
    })
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse().ok()))
        })
        .unwrap_or(0)
}

fn env_u64(name: &str, default: u64) -> u64 {
    store::testing::env_u64(name).unwrap_or(default)
}

async fn counted(uri: &RootUri, counter: &OpCounter) -> Store {
    let c = counter.clone();
    Store::open_with(uri, move |op| op.layer(CountingLayer::new(c.clone()))).await.unwrap()
}

fn noop_spec(shards: u32) -> TaskSpec {
    let mut spec =
        TaskSpec::table(Name::parse("bench").unwrap(), Name::parse("jobs").unwrap(), Name::parse("noop").unwrap());
    spec.shards = Some(shards);
    spec.executor = Some(ExecutorSpec {
        kind: ExecutorKind::Command,
        command: Some("true".into()),
        command_name: None,
        timeout_ms: None,
    });
    spec
}

// ---------------------------------------------------------------------------
// limit
// ---------------------------------------------------------------------------

/// A subtask info file of realistic size (the manager writes ~700 bytes).
fn info_bytes(i: u64) -> Vec<u8> {
    let v = json!({
        "CompactTaskId": format!("0735e0b9.17952999.67345000.0.r1.u{i}.a1"),
        "CompactTaskState": "Init", "repeat_flag": false, "sub_task_flag": true,
        "RepeatInfo": {"repeatCount": 0, "repeatInterval": 0}, "ResultInfo": {"successCount": 0, "failedCount": 0},
        "db_name": "bench", "schema_name": "s", "table_name": "t",
        "run": {"executor": {"kind": "Command", "command": "true"}, "round": 1,
                "subtask": {"parent": "0735e0b9.17952999.67345000.0", "index": i, "round": 1, "attempt": 1, "term": 1,
                            "node": "n1", "shard": {"index": i, "total": 2000}}},
    });
    serde_json::to_vec_pretty(&v).unwrap()
}

/// One loop: `n` subtask lifecycles in node folder `node`, listing the folder
/// once every `list_every` subtasks. The same requests as the scheduler's
/// lifecycle (see `cargo bench --bench ops`): dispatch create, worker read
/// and two status puts, the manager's create-once outcome file, the delete.
async fn limit_loop(store: Store, node: String, n: u64, list_every: u64) -> store::Result<()> {
    let mark = br#"{ "incarnation": 1, "wall_ms": 1795299909511, "exit_code": null, "error": null }"#.to_vec();
    let ok = br#"{ "incarnation": 1, "wall_ms": 1795299909511, "exit_code": 0, "error": null }"#.to_vec();
    let base = format!("Compaction_V2/TaskAssigned/{node}/");
    let task = format!("Compaction_V2/Scheduler/0735e0b9.17952999.67345000.{}/", &node[1..]);
    for i in 0..n {
        let dir = format!("{base}0735e0b9.17952999.67345000.0.r1.u{i}.a1/");
        store.create(&format!("{dir}TaskInfo.pc.db"), info_bytes(i)).await?; // manager: dispatch
        if i % list_every == 0 {
            store.list(&base).await?; // worker/manager polls
        }
        store.read(&format!("{dir}TaskInfo.pc.db")).await?; // worker: start
        store.put(&format!("{dir}Status.Running"), mark.clone()).await?;
        store.put(&format!("{dir}Status.Success"), ok.clone()).await?; // worker: finish
        store.create(&format!("{task}Outcomes/Done.r1.u{i}"), Vec::new()).await?; // manager: record the outcome
        store.delete_all(&dir).await?; // manager: collect
    }
    Ok(())
}

async fn limit(dir: &str) {
    let n = env_u64("COMPACTD_BENCH_LIMIT_SUBTASKS", 2000);
    let list_every = 8;
    // `COMPACTD_BENCH_LIMIT_LOOPS=1,3,16`: the concurrencies to measure.
    let loops_list: Vec<u64> = std::env::var("COMPACTD_BENCH_LIMIT_LOOPS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 3]);
    for loops in loops_list {
        // A folder, or a backend URI (`hdfs://…`: the same loops on HDFS).
        let root = format!("{dir}/limit-{loops}");
        let text = if dir.contains("://") { root.clone() } else { format!("fs://{root}") };
        let uri = RootUri::parse(&text).unwrap();
        let counter = OpCounter::new();
        let store = counted(&uri, &counter).await;
        let per = n / loops;
        let t = Instant::now();
        let handles: Vec<_> = (0..loops)
            .map(|l| tokio::spawn(limit_loop(store.clone(), format!("n{}", l + 1), per, list_every)))
            .collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
        let secs = t.elapsed().as_secs_f64();
        let done = per * loops;
        emit(
            "limit",
            json!({
                "backend": text, "loops": loops, "subtasks": done, "seconds": secs,
                "subtasks_per_s": done as f64 / secs, "ops_per_subtask": counts_json(&counter.snapshot(), done as f64),
            }),
        );
        if !dir.contains("://") {
            let _ = std::fs::remove_dir_all(&root);
        }
    }
}

// ---------------------------------------------------------------------------
// cost
// ---------------------------------------------------------------------------

struct Cluster {
    sim: sim::Cluster,
    counters: Vec<OpCounter>,
    admin: Store,
    shared: bool,
}

impl Cluster {
    /// `n` nodes; `shared`: one store (and one counter) for all of them.
    async fn new(uri: &RootUri, data: &Store, n: usize, max_running: usize, shared: bool) -> Cluster {
        let tick = NodeConfig::new(NodeId::parse("x").unwrap()).tick_interval();
        let mut sim = sim::Cluster::new(tick);
        let mut counters = vec![];
        let shared_counter = OpCounter::new();
        let shared_store = counted(uri, &shared_counter).await;
        for i in 1..=n {
            let (store, counter) = if shared {
                (shared_store.clone(), shared_counter.clone())
            } else {
                let c = OpCounter::new();
                (counted(uri, &c).await, c)
            };
            let cfg = NodeConfig::new(NodeId::parse(&format!("n{i:03}")).unwrap());
            let work = WorkConfig { max_running, allow_inline: true, ..WorkConfig::default() };
            sim.push(Node::new(cfg, store, sim.shared_clock()).with_work(work, data.clone()), ());
            counters.push(counter);
        }
        let admin = if shared { shared_store } else { Store::open(uri).await.unwrap() };
        Cluster { sim, counters, admin, shared }
    }

    async fn round(&mut self) {
        self.sim.round().await;
    }

    fn rounds_for(&self, d: Duration) -> usize {
        self.sim.rounds_for(d)
    }

    fn total(&self) -> OpCounts {
        if self.shared {
            return self.counters.first().map(|c| c.snapshot()).unwrap_or_default();
        }
        self.counters.iter().map(|c| c.snapshot()).sum()
    }

    fn reset(&self) {
        for c in &self.counters {
            c.reset();
        }
    }

    /// Runs `warm` of idle polls, then counts 10 idle minutes: the share of
    /// a task's counts that the idle cluster would have made anyway.
    /// Counters are reset afterwards.
    async fn idle_baseline(&mut self, warm: Duration) -> IdleBaseline {
        for _ in 0..self.rounds_for(warm) {
            self.round().await;
        }
        self.reset();
        let rounds = self.rounds_for(Duration::from_secs(600));
        for _ in 0..rounds {
            self.round().await;
        }
        let ops = self.total();
        self.reset();
        IdleBaseline { ops, rounds }
    }

    async fn run_task(&mut self, shards: u32, sleep: Duration) -> (tasks::TaskDir, usize, f64) {
        let id = tasks::submit(&self.admin, noop_spec(shards), self.sim.clock.wall_ms()).await.unwrap();
        let t = Instant::now();
        let mut rounds = 0;
        loop {
            self.round().await;
            rounds += 1;
            // let the `true` processes exit in real time
            tokio::time::sleep(sleep).await;
            let dir = tasks::read_dir(&self.admin, &id).await.unwrap();
            if dir.state.is_some_and(|s| s.is_terminal()) {
                assert_eq!(dir.state, Some(TaskState::Done));
                return (dir, rounds, t.elapsed().as_secs_f64());
            }
            assert!(rounds < 100_000, "task did not finish");
        }
    }
}

struct IdleBaseline {
    ops: OpCounts,
    rounds: usize,
}

impl IdleBaseline {
    /// The idle cluster's operations over `rounds` polls.
    fn over(&self, rounds: usize) -> OpCounts {
        self.ops.scaled(rounds as f64 / self.rounds as f64)
    }
}

async fn cost(dir: &str) {
    // (a) lifecycle on fs, 3 nodes, own counters.
    let shards = env_u64("COMPACTD_BENCH_COST_SHARDS", 300) as u32;
    let uri = RootUri::parse(&format!("fs://{dir}/cost-root")).unwrap();
    let data = Store::open(&RootUri::parse(&format!("fs://{dir}/cost-data")).unwrap()).await.unwrap();
    let mut c = Cluster::new(&uri, &data, 3, 1000, false).await;
    let idle = c.idle_baseline(Duration::from_secs(120)).await;
    let (_, rounds, secs) = c.run_task(shards, Duration::from_millis(30)).await;
    let all = c.total();
    let task_only = all - idle.over(rounds);
    emit(
        "cost_lifecycle",
        json!({
            "backend": "fs", "nodes": 3, "shards": shards, "polls": rounds, "seconds": secs,
            "all_ops_per_subtask": counts_json(&all, shards as f64),
            "ops_per_subtask": counts_json(&task_only, shards as f64),
        }),
    );
    drop(c);
    let _ = std::fs::remove_dir_all(format!("{dir}/cost-root"));

    // (b) idle 100-node cluster, one counter per node. Every node opens its
    // own store over one fs root on tmpfs (a memory store cannot be shared
    // by stores with different counting layers); the counts are logical
    // operations and do not depend on the backend.
    let n = env_u64("COMPACTD_BENCH_IDLE_NODES", 100) as usize;
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".to_string() } else { dir.to_string() };
    let idle_dir = tempfile::tempdir_in(&base).unwrap();
    let uri = RootUri::parse(&format!("fs://{}/root", idle_dir.path().display())).unwrap();
    let data =
        Store::open(&RootUri::parse(&format!("fs://{}/data", idle_dir.path().display())).unwrap()).await.unwrap();
    let mut c = Cluster::new(&uri, &data, n, 2, false).await;
    let t = Instant::now();
    for _ in 0..c.rounds_for(Duration::from_secs(120)) {
        c.round().await;
    }
    c.reset();
    // Simulated minutes, scaled to an hour (the idle load is periodic).
    let minutes = env_u64("COMPACTD_BENCH_IDLE_MINUTES", 10);
    let measured = c.rounds_for(Duration::from_secs(60 * minutes));
    let per_hour = 60.0 / minutes as f64;
    let hour = (measured as f64 * per_hour) as usize;
    for _ in 0..measured {
        c.round().await;
    }
    let monitors: Vec<usize> =
        (0..n).filter(|&i| c.sim.slots[i].node.as_ref().is_some_and(|n| n.is_monitor())).collect();
    assert_eq!(monitors.len(), 1, "one monitor");
    let m = monitors[0];
    let snaps: Vec<OpCounts> = c.counters.iter().map(|x| x.snapshot().scaled(per_hour)).collect();
    let members: Vec<&OpCounts> = snaps.iter().enumerate().filter(|(i, _)| *i != m).map(|(_, s)| s).collect();
    let member_sum = members.iter().map(|s| **s).sum::<OpCounts>();
    let heartbeat_puts_per_hour =
        hour as f64 * c.sim.step.as_secs_f64() / NodeConfig::new(NodeId::parse("x").unwrap()).heartbeat.as_secs_f64();
    emit(
        "cost_idle",
        json!({
            "backend": format!("fs on {base} (a counting layer per node)"), "nodes": n,
            "heartbeat_s": 10, "lease_s": 30, "simulated_minutes": minutes, "session_s": 30, "polls_per_hour": hour,
            "heartbeat_puts_per_node_hour": heartbeat_puts_per_hour,
            "monitor_per_hour": counts_json(&snaps[m], 1.0),
            "member_per_hour_mean": counts_json(&member_sum, members.len() as f64),
            "member_per_hour_max_total": members.iter().map(|s| s.total()).max(),
            "cluster_per_hour": counts_json(&(member_sum + snaps[m]), 1.0),
            "seconds": t.elapsed().as_secs_f64(),
        }),
    );
}

// ---------------------------------------------------------------------------
// scale
// ---------------------------------------------------------------------------

async fn scale() {
    let shards = env_u64("COMPACTD_BENCH_SCALE_SHARDS", 10_000) as u32;
    let nodes = env_u64("COMPACTD_BENCH_SCALE_NODES", 10) as usize;
    let max_running = env_u64("COMPACTD_BENCH_SCALE_MAX_RUNNING", 200) as usize;
    let rss0 = status_kib("VmRSS:");
    let hwm0 = status_kib("VmHWM:");
    let data = Store::memory().await;
    let mut c = Cluster::new(&RootUri::Memory, &data, nodes, max_running, true).await;
    let idle = c.idle_baseline(Duration::from_secs(60)).await;
    let rss1 = status_kib("VmRSS:");
    let hwm1 = status_kib("VmHWM:");
    let (_, rounds, secs) = c.run_task(shards, Duration::from_millis(20)).await;
    let all = c.total();
    let task_only = all - idle.over(rounds);
    let rss2 = status_kib("VmRSS:");
    let hwm2 = status_kib("VmHWM:");
    emit(
        "scale",
        json!({
            "backend": "memory (one store shared by all nodes)", "nodes": nodes, "shards": shards,
            "max_running_per_node": max_running, "polls": rounds, "seconds": secs,
            "subtasks_per_s": shards as f64 / secs,
            "simulated_minutes_at_10s_polls": rounds as f64 * c.sim.step.as_secs_f64() / 60.0,
            "all_ops_per_subtask": counts_json(&all, shards as f64),
            "ops_per_subtask": counts_json(&task_only, shards as f64),
            "rss_kib": {"start": rss0, "idle_cluster": rss1, "after_task": rss2},
            "hwm_kib": {"start": hwm0, "idle_cluster": hwm1, "after_task": hwm2},
        }),
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; ignore flags.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let dir = args.get(1).cloned().unwrap_or_else(|| std::env::temp_dir().display().to_string());
    match args.first().map(String::as_str) {
        Some("limit") => limit(&dir).await,
        Some("cost") => cost(&dir).await,
        Some("scale") => scale().await,
        _ => {
            eprintln!("usage: suite limit|cost|scale [dir]");
            std::process::exit(2);
        }
    }
}
