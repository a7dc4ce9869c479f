//! Directed tests of the rule that a unit runs on one node at a time
//! (layouts/PROTOCOL.md, "The session guard" and "Tasks"): every path by
//! which a unit could run twice at once, replayed in process, on a memory
//! store (behind a `FaultLayer` where a request must fail, lose its reply or
//! take time) and a `ManualClock`.
//!
//! - `guard/manager.rs`: a manager gives a unit to another node only once
//!   its attempt can no longer run: not on a view that omits the runner or
//!   names another incarnation, not on a lost create reply, a vanished
//!   folder or a reassign request alone.
//! - `guard/worker.rs`: a worker claims and starts a subtask only under an
//!   open guard of its incarnation: not on a stale listing, not with a
//!   claim whose reply comes after the guard's deadline.
//! - `guard/node.rs`: the guard of a node: closed before the first counted
//!   heartbeat, a heartbeat whose reply comes after the deadline ends the
//!   incarnation, one that landed but was counted as failed does not move
//!   it, and the monitor stamps a beat when its listing returned.
//! - `guard/process.rs`: the reaper kills at the deadline on its own (a
//!   stopped daemon), and a daemon's guard kills between ticks.
// Real child processes are started and waited for on real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use compactd::clock::{Clock, Deadline, ManualClock, SharedClock};
use compactd::serve::wake::Pokes;
use compactd::tasks::manager::{Ctx, Flow, FolderCache, TaskManager};
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, TaskSpec};
use futures::TryStreamExt;
use layouts::formats::{self, ExecutorKind, ExecutorSpec, Lease, Member, StatusMark};
use layouts::{v2, Name, NodeId, SubtaskState, TaskId};
use store::layers::{FaultConfig, FaultHandle, FaultLayer};
use store::Store;

#[path = "guard/manager.rs"]
mod manager;
#[path = "guard/node.rs"]
mod node;
#[path = "guard/process.rs"]
mod process;
#[path = "guard/worker.rs"]
mod worker;

fn n(id: &str) -> NodeId {
    NodeId::parse(id).unwrap()
}

/// One memory tree, seen without faults (`store`) and through a fault
/// layer (`faulty`), a `ManualClock`, and a folder for the runs' records.
struct Lab {
    clock: Arc<ManualClock>,
    store: Store,
    faulty: Store,
    faults: FaultHandle,
    data: Store,
    records: tempfile::TempDir,
    work: WorkConfig,
}

impl Lab {
    /// n1, n2, n3 members (incarnation 1) in the lease.
    async fn new() -> Lab {
        let store = Store::memory().await;
        let layer = FaultLayer::new(FaultConfig { seed: 3, ..FaultConfig::default() });
        let faults = layer.handle();
        let faulty = store.layered(move |op| op.layer(layer.clone()));
        let lab = Lab {
            clock: ManualClock::new(),
            store,
            faulty,
            faults,
            data: Store::memory().await,
            records: tempfile::tempdir().unwrap(),
            work: WorkConfig {
                executor: ExecutorKind::Command,
                allow_inline: true,
                max_running: 8,
                retries: 10,
                ..WorkConfig::default()
            },
        };
        let members = ["n1", "n2", "n3"].iter().map(|m| Member::bare(n(m), 1, 4000)).collect();
        let lease = Lease {
            epoch: 1,
            holder: n("n1"),
            holder_incarnation: 1,
            renewal: 0,
            lease_ms: 4000,
            wall_ms: 0,
            members,
            offline: vec![],
            last_event: 0,
            released: false,
        };
        lab.store.create(&v2::lease(1), formats::encode(&lease)).await.unwrap();
        lab
    }

    fn shared_clock(&self) -> SharedClock {
        self.clock.clone()
    }

    /// A task of `shards` units managed by n1, each unit a command that
    /// stamps its start into the records and then sleeps `secs` seconds.
    async fn submit(&self, shards: u32, secs: u32) -> TaskId {
        let mut spec =
            TaskSpec::table(Name::parse("db").unwrap(), Name::parse("s").unwrap(), Name::parse("t").unwrap());
        spec.shards = Some(shards);
        spec.manager = Some(n("n1"));
        let dir = self.records.path().display();
        let command = format!("touch '{dir}'/$COMPACTD_SUBTASK.start; sleep {secs}");
        spec.executor = Some(ExecutorSpec {
            kind: ExecutorKind::Command,
            command: Some(command),
            command_name: None,
            timeout_ms: None,
        });
        tasks::submit(&self.store, spec, self.clock.wall_ms()).await.unwrap()
    }

    /// Subtasks whose executor started (from the records).
    fn started(&self) -> BTreeSet<String> {
        std::fs::read_dir(self.records.path())
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".start").map(str::to_string))
            .collect()
    }

    /// Every subtask folder of `task`'s unit `unit`: (node, attempt), with
    /// the folder's files.
    async fn attempts(&self, task: &TaskId, unit: u32) -> BTreeMap<(String, u32), Vec<String>> {
        let mut out: BTreeMap<(String, u32), Vec<String>> = BTreeMap::new();
        let mut entries = self.store.list_stream(v2::TASK_ASSIGNED, true);
        while let Some(e) = entries.try_next().await.unwrap() {
            let rel = &e.path[v2::TASK_ASSIGNED.len()..];
            let mut parts = rel.splitn(3, '/');
            let (Some(node), Some(sub), Some(file)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if let Some((t, _, u, a)) = v2::parse_subtask_name(sub) {
                if t == *task && u == unit {
                    out.entry((node.to_string(), a)).or_default().push(file.to_string());
                }
            }
        }
        out
    }

    /// One manager round of `m` (on n1, through the faulty store), with the
    /// given member view and offline list.
    async fn manage(&self, m: &mut TaskManager, members: &[(&str, u64)], offline: &[(&str, u64)]) -> Flow {
        let members: BTreeMap<NodeId, u64> = members.iter().map(|(m, i)| (n(m), *i)).collect();
        let offline: BTreeSet<(NodeId, u64)> = offline.iter().map(|(m, i)| (n(m), *i)).collect();
        let commands = BTreeMap::new();
        let executors = BTreeMap::new();
        let mut folders = FolderCache::default();
        let deadline = Deadline::new(self.shared_clock(), self.clock.mono() + Duration::from_secs(60));
        let mut pokes = Pokes::default();
        let me = n("n1");
        let mut ctx = Ctx {
            store: &self.faulty,
            data: &self.data,
            me: &me,
            members: &members,
            offline: &offline,
            commands: &commands,
            executors: &executors,
            cfg: &self.work,
            wall_ms: self.clock.wall_ms(),
            folders: &mut folders,
            deadline: &deadline,
            pokes: &mut pokes,
        };
        match m.round(&mut ctx).await {
            Ok(f) => f,
            Err(e) => {
                eprintln!("manager round failed: {e}");
                Flow::Continue
            }
        }
    }

    /// The node and attempt that hold unit `unit` of `task` now (exactly one).
    async fn only_attempt(&self, task: &TaskId, unit: u32) -> (String, u32) {
        let a = self.attempts(task, unit).await;
        assert_eq!(a.len(), 1, "unit {unit}: {a:?}");
        a.into_keys().next().unwrap()
    }

    /// Writes what a worker of `node`'s incarnation `inc` writes to claim
    /// unit `unit`'s current attempt.
    async fn claim(&self, task: &TaskId, unit: u32, inc: u64) -> (String, u32) {
        let (node, attempt) = self.only_attempt(task, unit).await;
        let name = v2::subtask_name(task, 1, unit, attempt);
        let mark = StatusMark { incarnation: inc, ..Default::default() };
        let path = v2::subtask_status(&n(&node), &name, SubtaskState::Running);
        self.store.create(&path, formats::encode(&mark)).await.unwrap();
        (node, attempt)
    }

    /// A terminal mark of `node`'s incarnation `inc` in an attempt's folder.
    async fn report(&self, task: &TaskId, unit: u32, node: &str, attempt: u32, state: SubtaskState, inc: u64) {
        let name = v2::subtask_name(task, 1, unit, attempt);
        let mark = StatusMark { incarnation: inc, ..Default::default() };
        self.store.put(&v2::subtask_status(&n(node), &name, state), formats::encode(&mark)).await.unwrap();
    }
}

/// Makes `faults` act on `kinds` of requests whose path passes `pick`
/// only: every one of them fails, `lost` of them after it landed.
fn fail_only(faults: &FaultHandle, pick: impl Fn(&str) -> bool + Send + Sync + 'static, lost: f64) {
    faults.set_only(Some(Arc::new(pick)));
    faults.set_lost_reply(lost);
    faults.set_error_rate(1.0);
}

/// Every request through `faults` passes again.
fn heal(faults: &FaultHandle) {
    faults.set_error_rate(0.0);
    faults.set_lost_reply(0.0);
    faults.set_only(None);
    faults.set_on_op(None);
}
