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

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use compactd::clock::{Clock, Deadline, ManualClock, SharedClock};
use compactd::cluster::wake::Pokes;
use compactd::tasks::manager::{Ctx, Flow, FolderCache, Placement, TaskManager};
use compactd::tasks::worker::WorkConfig;
use compactd::tasks::{self, TaskSpec};
use futures::TryStreamExt;
use layouts::formats::{self, ExecutorKind, ExecutorSpec, Lease, Member, StatusMark};
use layouts::{v2, v3, Name, NodeId, SubtaskState, TaskId};
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

/// The layouts every directed test runs in: a subtask folder per attempt
/// (2), batches of empty markers (3), named by their term too (4).
const LAYOUTS: [u32; 3] = [2, 3, 4];

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
    /// The layout in force: what managers write.
    layout: u32,
}

impl Lab {
    /// n1, n2, n3 members (incarnation 1) in the lease, layout 2 in force.
    async fn new() -> Lab {
        Lab::new_in(2).await
    }

    /// The same with `layout` in force (every member reads both).
    async fn new_in(layout: u32) -> Lab {
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
            layout,
        };
        let members = ["n1", "n2", "n3"]
            .iter()
            .map(|m| Member { layouts: Some(vec![2, 3, 4]), ..Member::bare(n(m), 1, 4000) })
            .collect();
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
            layout: (layout > 2).then_some(layout),
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

    /// Every attempt of `task`'s unit `unit`: (node, attempt), with its
    /// files as layout 2 names them (a subtask folder's files; a batch
    /// unit's markers as `Status.<State>`, `Output`, `Released`, and its
    /// batch's `Info` as `TaskInfo.pc.db`).
    async fn attempts(&self, task: &TaskId, unit: u32) -> BTreeMap<(String, u32), Vec<String>> {
        let mut out: BTreeMap<(String, u32), Vec<String>> = BTreeMap::new();
        let mut batches: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        let mut entries = self.store.list_stream(v2::TASK_ASSIGNED, true);
        while let Some(e) = entries.try_next().await.unwrap() {
            let rel = &e.path[v2::TASK_ASSIGNED.len()..];
            let mut parts = rel.splitn(3, '/');
            let (Some(node), Some(sub), Some(file)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if let Some((t, _, u, a)) = v2::parse_subtask_name(sub) {
                if t == *task && u == unit {
                    out.entry((node.to_string(), a)).or_default().push(file.to_string());
                }
            } else if v3::parse_batch_name(sub).is_some_and(|(t, ..)| t == *task) {
                batches.entry((node.to_string(), sub.to_string())).or_default().push(file.to_string());
            }
        }
        for ((node, batch), files) in batches {
            let info = self.store.read(&v3::batch_info(&n(&node), &Name::parse(&batch).unwrap())).await.unwrap();
            let mut listed: Vec<u32> = info
                .map(|b| formats::decode::<v3::BatchInfo>(&b).unwrap().units)
                .unwrap_or_default()
                .into_iter()
                .filter(|u| u.unit == unit)
                .map(|u| u.attempt)
                .collect();
            let has_info = files.iter().any(|f| f == v3::INFO);
            let released = files.iter().any(|f| f == v3::RELEASED);
            for f in &files {
                if let Some((u, a, _)) = v3::parse_mark(f).filter(|(u, ..)| *u == unit) {
                    listed.push(a);
                    let _ = u;
                }
            }
            listed.sort();
            listed.dedup();
            for a in listed {
                let e = out.entry((node.clone(), a)).or_default();
                if has_info {
                    e.push(v2::TASK_INFO.into());
                }
                if released {
                    e.push(v3::RELEASED.into());
                }
                for f in &files {
                    let Some((_, _, m)) = v3::parse_mark(f).filter(|(u, x, _)| *u == unit && *x == a) else { continue };
                    e.push(match m {
                        v3::Mark::Running(_) => SubtaskState::Running.file_name(),
                        v3::Mark::Cancel => SubtaskState::Cancel.file_name(),
                        v3::Mark::Success => SubtaskState::Success.file_name(),
                        v3::Mark::Failed => SubtaskState::Failed.file_name(),
                        v3::Mark::Output => v2::OUTPUT.into(),
                        v3::Mark::Released => v3::RELEASED.into(),
                    });
                }
            }
        }
        out
    }

    /// The batch that holds `task`'s unit `unit` attempt `attempt` on
    /// `node` (layout 3).
    async fn batch_of(&self, task: &TaskId, node: &str, unit: u32, attempt: u32) -> Name {
        for e in self.store.list(&v2::node_assigned_dir(&n(node))).await.unwrap() {
            let Some((t, ..)) = v3::parse_batch_name(e.name()).filter(|(t, ..)| t == task) else { continue };
            let name = Name::parse(e.name()).unwrap();
            let marked = self
                .store
                .list(&v3::batch_dir(&n(node), &name))
                .await
                .unwrap()
                .iter()
                .any(|f| v3::parse_mark(f.name()).is_some_and(|(u, a, _)| u == unit && a == attempt));
            let Some(info) = self.store.read(&v3::batch_info(&n(node), &name)).await.unwrap() else {
                if marked {
                    return name;
                }
                continue;
            };
            let info: v3::BatchInfo = formats::decode(&info).unwrap();
            if t == *task && info.units.iter().any(|u| u.unit == unit && u.attempt == attempt) {
                return name;
            }
        }
        panic!("no batch of {task} on {node} holds unit {unit} attempt {attempt}");
    }

    /// Removes the folder an attempt lives in (its subtask folder, or its
    /// whole batch), as a hand or a stale manager would.
    async fn remove_folder(&self, task: &TaskId, node: &str, unit: u32, attempt: u32) {
        let dir = if self.layout == 2 {
            v2::subtask_dir(&n(node), &v2::subtask_name(task, 1, unit, attempt))
        } else {
            v3::batch_dir(&n(node), &self.batch_of(task, node, unit, attempt).await)
        };
        self.store.delete_all(&dir).await.unwrap();
    }

    /// Whether a path is a manager's dispatch: a subtask's info or a
    /// batch's.
    fn is_dispatch(p: &str) -> bool {
        p.starts_with(v2::TASK_ASSIGNED) && (p.ends_with(v2::TASK_INFO) || p.ends_with(&format!("/{}", v3::INFO)))
    }

    /// One manager round of `m` (on n1, through the faulty store), with the
    /// given member view and offline list.
    async fn manage(&self, m: &mut TaskManager, members: &[(&str, u64)], offline: &[(&str, u64)]) -> Flow {
        let members: BTreeMap<NodeId, u64> = members.iter().map(|(m, i)| (n(m), *i)).collect();
        let offline: BTreeSet<(NodeId, u64)> = offline.iter().map(|(m, i)| (n(m), *i)).collect();
        let commands = BTreeMap::new();
        let executors = BTreeMap::new();
        let mut folders = FolderCache::default();
        let placement = Placement {
            layout: self.layout,
            readers: if self.layout > 2 { ["n1", "n2", "n3"].map(n).into() } else { Default::default() },
            draining: Default::default(),
        };
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
            placement: &placement,
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

    /// The node and attempt that hold unit `unit` of `task` now (exactly
    /// one; layout 3 keeps released attempts in their batch until it is
    /// recorded: those do not hold it).
    async fn only_attempt(&self, task: &TaskId, unit: u32) -> (String, u32) {
        let mut a = self.attempts(task, unit).await;
        a.retain(|_, files| !files.iter().any(|f| f == v3::RELEASED));
        assert_eq!(a.len(), 1, "unit {unit}: {a:?}");
        a.into_keys().next().unwrap()
    }

    /// Writes what a worker of `node`'s incarnation `inc` writes to claim
    /// unit `unit`'s current attempt.
    async fn claim(&self, task: &TaskId, unit: u32, inc: u64) -> (String, u32) {
        let (node, attempt) = self.only_attempt(task, unit).await;
        self.store.create(&self.claim_path(task, &node, unit, attempt, inc).await, self.claim_body(inc)).await.unwrap();
        (node, attempt)
    }

    /// Where a worker of incarnation `inc` claims an attempt.
    async fn claim_path(&self, task: &TaskId, node: &str, unit: u32, attempt: u32, inc: u64) -> String {
        if self.layout == 2 {
            v2::subtask_status(&n(node), &v2::subtask_name(task, 1, unit, attempt), SubtaskState::Running)
        } else {
            let b = self.batch_of(task, node, unit, attempt).await;
            v3::unit_mark(&n(node), &b, unit, attempt, v3::Mark::Running(inc))
        }
    }

    /// What a worker's claim holds (layout 3: nothing, the name says it).
    fn claim_body(&self, inc: u64) -> Vec<u8> {
        if self.layout == 2 {
            formats::encode(&StatusMark { incarnation: inc, ..Default::default() })
        } else {
            Vec::new()
        }
    }

    /// A terminal mark of `node`'s incarnation `inc` in an attempt's folder.
    async fn report(&self, task: &TaskId, unit: u32, node: &str, attempt: u32, state: SubtaskState, inc: u64) {
        let mark = formats::encode(&StatusMark { incarnation: inc, ..Default::default() });
        if self.layout == 2 {
            let name = v2::subtask_name(task, 1, unit, attempt);
            self.store.put(&v2::subtask_status(&n(node), &name, state), mark).await.unwrap();
            return;
        }
        let b = self.batch_of(task, node, unit, attempt).await;
        let m = if state == SubtaskState::Success { v3::Mark::Success } else { v3::Mark::Failed };
        self.store.create(&v3::unit_mark(&n(node), &b, unit, attempt, m), mark).await.unwrap();
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

/// Polls `done` on real time (executors are real processes).
async fn wait_for(mut done: impl FnMut() -> bool) {
    for _ in 0..250 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out");
}
