//! `compactd check`: verifies the v2 tree and reports every anomaly with its
//! path. Read-only. The daemon uses the same rules to skip what it cannot
//! read.

use layouts::formats::{self, Event, Lease, OfflineRecord, TaskInfo};
use layouts::{v2, NodeId, SubtaskState, TaskId, TaskState};
use serde::Serialize;
use store::{Entry, Store};

/// Something in the tree that compactd did not expect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub path: String,
    pub problem: String,
}

impl Anomaly {
    pub fn new(path: &str, problem: impl Into<String>) -> Self {
        Anomaly { path: path.to_string(), problem: problem.into() }
    }
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

/// Walks the whole v2 tree.
pub async fn check_tree(store: &Store) -> store::Result<Vec<Anomaly>> {
    let mut out = Vec::new();
    for e in store.list(v2::ROOT).await? {
        let rel = &e.path[v2::ROOT.len()..];
        if !v2::TOP_LEVEL.contains(&rel) && rel != "Upgrade" {
            out.push(Anomaly::new(&e.path, "unexpected entry at the top of the v2 tree"));
        }
    }
    check_registry(store, &mut out).await?;
    check_election(store, &mut out).await?;
    check_scheduler(store, &mut out).await?;
    check_assigned(store, &mut out).await?;
    check_job_instances(store, &mut out).await?;
    Ok(out)
}

/// Job instances: every `Job` and `End` file of an instance, and every step
/// file, must parse. A torn `Job` (an older compactd on fs killed inside its
/// create) is reported here; `trigger` of the same key repairs it.
async fn check_job_instances(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use layouts::jobs::{self as paths, JobEnd, JobInstance, StepClaim, StepEnd, StepTask};
    for job in store.list(paths::INSTANCES).await? {
        if !job.is_dir {
            out.push(Anomaly::new(&job.path, "a file stands where a job's instances folder is expected"));
            continue;
        }
        for inst in store.list(&job.path).await? {
            if !inst.is_dir {
                out.push(Anomaly::new(&inst.path, "a file stands where an instance folder is expected"));
                continue;
            }
            let files = store.list(&inst.path).await?;
            if !files.iter().any(|f| f.name() == paths::JOB_FILE) {
                out.push(Anomaly::new(&inst.path, "no Job file (an interrupted trigger, or foreign data)"));
            }
            for f in files {
                match f.name() {
                    paths::JOB_FILE => {
                        read_json::<JobInstance>(store, &f, "job instance (Job)", out).await?;
                    }
                    paths::END => {
                        read_json::<JobEnd>(store, &f, "job end record", out).await?;
                    }
                    paths::STEPS => {
                        for sf in store.list(&f.path).await? {
                            let n = sf.name();
                            if n.ends_with(paths::CLAIM_SUFFIX) {
                                read_json::<StepClaim>(store, &sf, "step claim", out).await?;
                            } else if n.ends_with(paths::TASK_SUFFIX) {
                                read_json::<StepTask>(store, &sf, "step task link", out).await?;
                            } else if n.ends_with(paths::END_SUFFIX) {
                                read_json::<StepEnd>(store, &sf, "step end record", out).await?;
                            } else {
                                out.push(Anomaly::new(&sf.path, "unexpected entry in an instance's Steps/"));
                            }
                        }
                    }
                    _ => out.push(Anomaly::new(&f.path, "unexpected entry in a job instance folder")),
                }
            }
        }
    }
    Ok(())
}

async fn read_json<T: for<'de> serde::Deserialize<'de>>(
    store: &Store,
    e: &Entry,
    what: &str,
    out: &mut Vec<Anomaly>,
) -> store::Result<Option<T>> {
    if e.is_dir {
        out.push(Anomaly::new(&e.path, format!("a folder stands where a {what} file is expected")));
        return Ok(None);
    }
    let bytes = match store.read_or_bad(&e.path).await? {
        None => return Ok(None),
        Some(Ok(bytes)) => bytes,
        Some(Err(bad)) => {
            out.push(Anomaly::new(&e.path, format!("not a valid {what}: {bad}")));
            return Ok(None);
        }
    };
    match formats::decode::<T>(&bytes) {
        Ok(v) => Ok(Some(v)),
        Err(err) => {
            out.push(Anomaly::new(&e.path, format!("not a valid {what}: {err}")));
            Ok(None)
        }
    }
}

async fn check_registry(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for e in store.list(v2::REGISTRY).await? {
        if !["Nodes/", "Offline/", "Events/", "Probe/", "Inbox/", "Joins/", "Owners/"]
            .iter()
            .any(|d| e.path.ends_with(&format!("Registry/{d}")))
        {
            out.push(Anomaly::new(&e.path, "unexpected entry in Registry/"));
        }
    }
    let (_, bad) = crate::cluster::liveness::read_heartbeats(store).await?;
    out.extend(bad);
    for e in store.list(v2::JOINS).await? {
        if e.is_dir || v2::parse_offline_marker(e.name()).is_none() {
            out.push(Anomaly::new(&e.path, "a join marker must be a file named <node>.<incarnation>"));
        }
    }
    for e in store.list(v2::OWNERS).await? {
        match v2::parse_owner_claim(e.name()) {
            None => out.push(Anomaly::new(&e.path, "an owner claim must be a file named <node>.<20-digit generation>")),
            Some((node, _)) => {
                if let Some(c) = read_json::<formats::OwnerClaim>(store, &e, "owner claim", out).await? {
                    if c.node != node {
                        out.push(Anomaly::new(&e.path, "claim names another node than its file name"));
                    }
                }
            }
        }
    }
    for e in store.list(v2::INBOX).await? {
        if e.is_dir || NodeId::parse(e.name()).is_err() {
            out.push(Anomaly::new(&e.path, "an inbox stamp must be a file named by a node id"));
        } else {
            read_json::<formats::InboxStamp>(store, &e, "inbox stamp", out).await?;
        }
    }
    for e in store.list(v2::OFFLINE).await? {
        match v2::parse_offline_marker(e.name()) {
            None => out.push(Anomaly::new(&e.path, "name is not <node>.<incarnation>")),
            Some((node, inc)) => {
                if let Some(rec) = read_json::<OfflineRecord>(store, &e, "offline record", out).await? {
                    if rec.node != node || rec.incarnation != inc {
                        out.push(Anomaly::new(&e.path, "record does not match its file name"));
                    }
                }
            }
        }
    }
    for e in store.list(v2::EVENTS).await? {
        match v2::parse_event_name(e.name()) {
            None => out.push(Anomaly::new(&e.path, "name is not a 20-digit sequence number")),
            Some(seq) => {
                if let Some(ev) = read_json::<Event>(store, &e, "change event", out).await? {
                    if ev.seq != seq {
                        out.push(Anomaly::new(&e.path, format!("event says seq {} but is named {seq}", ev.seq)));
                    }
                }
            }
        }
    }
    Ok(())
}

async fn check_election(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for e in store.list(v2::ELECTION).await? {
        match v2::parse_lease_name(e.name()) {
            None => out.push(Anomaly::new(&e.path, "name is not Lease.<20-digit epoch>")),
            Some(epoch) => {
                if let Some(l) = read_json::<Lease>(store, &e, "lease", out).await? {
                    if l.epoch != epoch {
                        out.push(Anomaly::new(&e.path, format!("lease says epoch {} but is named {epoch}", l.epoch)));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks one task or subtask folder: exactly one valid `Status.<State>`
/// (two are tolerated as the trace of an interrupted transition), a valid
/// `TaskInfo.pc.db`, nothing else.
async fn check_task_dir(store: &Store, dir: &Entry, subtask: bool, out: &mut Vec<Anomaly>) -> store::Result<()> {
    let mut states = Vec::new();
    let mut has_info = false;
    for f in store.list(&dir.path).await? {
        let name = f.name();
        if name == v2::TASK_INFO {
            has_info = true;
            read_json::<TaskInfo>(store, &f, "task info", out).await?;
        } else if name.starts_with(layouts::state::STATUS_PREFIX) {
            let parsed = if subtask {
                SubtaskState::from_file_name(name).map(|s| s.as_str())
            } else {
                TaskState::from_file_name(name).map(|s| s.as_str())
            };
            match parsed {
                Ok(s) => states.push(s),
                Err(e) => out.push(Anomaly::new(&f.path, e.to_string())),
            }
        } else if !f.is_dir
            && !subtask
            && (v2::parse_manager_term(name).is_some()
                || name == v2::STOP
                || v2::parse_reassign_request(name).is_some()
                || v2::parse_unit_outcome(name).is_some())
        {
            // manager terms, stop and reassign requests, unit outcomes
        } else if !f.is_dir && subtask && name == v2::OUTPUT {
            // the command executor's output tail
        } else {
            out.push(Anomaly::new(&f.path, "unexpected entry in a task folder"));
        }
    }
    if !has_info {
        out.push(Anomaly::new(&dir.path, "no TaskInfo.pc.db (an interrupted create, or foreign data)"));
    }
    match states.len() {
        0 => out.push(Anomaly::new(&dir.path, "no Status.<State> marker")),
        1 | 2 => {}
        n => out.push(Anomaly::new(&dir.path, format!("{n} Status markers ({})", states.join(", ")))),
    }
    Ok(())
}

async fn check_scheduler(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for e in store.list(v2::SCHEDULER).await? {
        if e.name() == v2::COMPRESS_DIR && e.is_dir {
            continue;
        }
        if !e.is_dir {
            out.push(Anomaly::new(&e.path, "a file stands where a task folder is expected"));
        } else if let Err(err) = TaskId::parse(e.name()) {
            out.push(Anomaly::new(&e.path, err.to_string()));
        } else {
            check_task_dir(store, &e, false, out).await?;
        }
    }
    Ok(())
}

async fn check_assigned(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for node_dir in store.list(v2::TASK_ASSIGNED).await? {
        if !node_dir.is_dir {
            out.push(Anomaly::new(&node_dir.path, "a file stands where a node folder is expected"));
            continue;
        }
        if let Err(err) = NodeId::parse(node_dir.name()) {
            out.push(Anomaly::new(&node_dir.path, err.to_string()));
            continue;
        }
        for sub in store.list(&node_dir.path).await? {
            if !sub.is_dir && v2::parse_manage_pointer(sub.name()).is_some() {
                read_json::<formats::ManagePointer>(store, &sub, "manager pointer", out).await?;
            } else if !sub.is_dir {
                out.push(Anomaly::new(&sub.path, "a file stands where a subtask folder is expected"));
            } else if v2::parse_subtask_name(sub.name()).is_none() {
                out.push(Anomaly::new(&sub.path, "not a subtask folder name (<task>.r<round>.u<unit>.a<attempt>)"));
            } else {
                check_task_dir(store, &sub, true, out).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::formats::Heartbeat;

    #[tokio::test]
    async fn reports_garbage_with_paths() {
        let store = Store::memory().await;
        let hb = Heartbeat {
            node: NodeId::parse("n1").unwrap(),
            incarnation: 1,
            beat: 1,
            session_timeout_ms: 1,
            heartbeat_ms: 1,
            wall_ms: 1,
            pid: 1,
            version: "t".into(),
            monitor_epoch: None,
            fenced_actions: 0,
            event_cursor: 0,
            commands: vec![],
            addr: None,
        };
        store.put(&v2::heartbeat(&hb.node), formats::encode(&hb)).await.unwrap();
        crate::wake::stamp_at(&store, "cli", &hb.node, 1).await.unwrap();
        assert!(check_tree(&store).await.unwrap().is_empty(), "a heartbeat and an inbox stamp are fine");
        store.put("Compaction_V2/Registry/Inbox/n3", b"garbage".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Nodes/n2", b"{\"node\":".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Nodes/bad name", b"{}".to_vec()).await.unwrap();
        store.put("Compaction_V2/Election/Lease.x", b"{}".to_vec()).await.unwrap();
        store.put("Compaction_V2/Junk", b"".to_vec()).await.unwrap();
        store.put("Compaction_V2/Scheduler/not-a-task/Status.Init", b"".to_vec()).await.unwrap();
        store.put("Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Status.Bogus", b"".to_vec()).await.unwrap();
        let found = check_tree(&store).await.unwrap();
        let paths: Vec<&str> = found.iter().map(|a| a.path.as_str()).collect();
        for p in [
            "Compaction_V2/Registry/Inbox/n3",
            "Compaction_V2/Registry/Nodes/n2",
            "Compaction_V2/Registry/Nodes/bad name",
            "Compaction_V2/Election/Lease.x",
            "Compaction_V2/Junk",
            "Compaction_V2/Scheduler/not-a-task/",
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Status.Bogus",
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/",
        ] {
            assert!(paths.contains(&p), "{p} not reported in {found:#?}");
        }
    }
}
