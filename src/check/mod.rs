//! `compactd check`: verifies the v2 tree and reports every anomaly with its
//! path. Read-only. The daemon uses the same rules to skip what it cannot
//! read.

mod assigned;

use bytes::Bytes;
use layouts::formats::{self, Event, Lease, OfflineRecord, TaskInfo};
pub use layouts::Anomaly;
use layouts::{v2, NodeId, SubtaskState, TaskId, TaskState};
use store::{Entry, Store};

/// Lists a folder of the tree; a folder that cannot be listed (a file or a
/// link loop where it is expected, a permission) is an anomaly and lists as
/// empty, so that one bad entry never hides the rest of the report. Only the
/// root's listing (the backend itself) stops `check`.
async fn list(store: &Store, dir: &str, out: &mut Vec<Anomaly>) -> store::Result<Vec<Entry>> {
    match store.list(dir).await {
        Ok(entries) => Ok(entries),
        Err(e) => {
            out.push(Anomaly::new(dir, format!("cannot be listed: {e}")));
            Ok(vec![])
        }
    }
}

/// The bytes of a file `check` reads; `None` if it is gone, or if a folder
/// or a bad file stands there (reported).
async fn read_bytes(store: &Store, e: &Entry, what: &str, out: &mut Vec<Anomaly>) -> store::Result<Option<Bytes>> {
    if e.is_dir {
        out.push(Anomaly::new(&e.path, format!("a folder stands where a {what} file is expected")));
        return Ok(None);
    }
    match store.read_or_bad(&e.path).await? {
        Some(Err(bad)) => {
            out.push(Anomaly::new(&e.path, format!("not a valid {what}: {bad}")));
            Ok(None)
        }
        found => Ok(found.and_then(Result::ok)),
    }
}

/// Reads a file that must be empty (a marker, a lock).
async fn read_empty(store: &Store, e: &Entry, what: &str, out: &mut Vec<Anomaly>) -> store::Result<()> {
    if let Some(b) = read_bytes(store, e, what, out).await?.filter(|b| !b.is_empty()) {
        out.push(Anomaly::new(&e.path, format!("a {what} is an empty file; this one holds {} bytes", b.len())));
    }
    Ok(())
}

/// Reads a file that is empty or holds `T` (unit outcomes: empty from older
/// writers or without stats).
async fn read_empty_or<T: for<'de> serde::Deserialize<'de>>(
    store: &Store,
    e: &Entry,
    what: &str,
    out: &mut Vec<Anomaly>,
) -> store::Result<()> {
    if let Some(b) = read_bytes(store, e, what, out).await?.filter(|b| !b.is_empty()) {
        if let Err(err) = formats::decode::<T>(&b) {
            out.push(Anomaly::new(&e.path, format!("not a valid {what}: {err}")));
        }
    }
    Ok(())
}

/// What `check` found: anomalies (exit 1), and leftovers of finished
/// tasks that the monitor's sweep removes (reported, exit 0).
#[derive(Debug, Default)]
pub struct Report {
    pub anomalies: Vec<Anomaly>,
    /// Subtask and batch folders of finished (or gone) tasks that are
    /// incomplete: what a create cut short left (an outage, a killed
    /// process). Nothing runs from them; the monitor's next sweep removes
    /// them with the rest of their task's folders.
    pub pending_sweep: Vec<Anomaly>,
}

/// Walks the whole v2 tree.
pub async fn check_tree(store: &Store) -> store::Result<Vec<Anomaly>> {
    Ok(check_tree_report(store).await?.anomalies)
}

/// [`check_tree`], with the leftovers pending a sweep apart.
pub async fn check_tree_report(store: &Store) -> store::Result<Report> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for e in store.list(v2::ROOT).await? {
        let rel = &e.path[v2::ROOT.len()..];
        if !v2::TOP_LEVEL.contains(&rel) && rel != "Upgrade" {
            out.push(Anomaly::new(&e.path, "unexpected entry at the top of the v2 tree"));
        }
    }
    check_registry(store, &mut out).await?;
    check_election(store, &mut out).await?;
    check_scheduler(store, &mut out).await?;
    assigned::check_assigned(store, &mut out, &mut pending).await?;
    check_job_instances(store, &mut out).await?;
    check_job_definitions(store, &mut out).await?;
    check_archives(store, &mut out).await?;
    check_upgrade(store, &mut out).await?;
    check_policies(store, &mut out).await?;
    check_tables(store, &mut out).await?;
    Ok(Report { anomalies: out, pending_sweep: pending })
}

/// Policies: every main copy, logged version, pause and pass record parses.
async fn check_policies(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use layouts::policies::{self as paths, LastPass, PolicyDefinition, PolicyPause};
    for p in list(store, paths::POLICIES, out).await? {
        if !p.is_dir {
            out.push(Anomaly::new(&p.path, "a file stands where a policy's folder is expected"));
            continue;
        }
        for f in list(store, &p.path, out).await? {
            match (f.name(), f.is_dir) {
                (paths::POLICY_FILE, false) => {
                    read_json::<PolicyDefinition>(store, &f, "policy definition", out).await?;
                }
                (paths::PAUSED, false) => {
                    read_json::<PolicyPause>(store, &f, "policy pause record", out).await?;
                }
                (paths::LAST_PASS, false) => {
                    read_json::<LastPass>(store, &f, "planner pass record", out).await?;
                }
                (paths::POLICY_LOG, true) => {
                    for v in list(store, &f.path, out).await? {
                        if paths::parse_version(v.name()).is_none() || v.is_dir {
                            out.push(Anomaly::new(&v.path, "not a logged policy version (20 digits)"));
                        } else {
                            read_json::<PolicyDefinition>(store, &v, "logged policy definition", out).await?;
                        }
                    }
                }
                _ => out.push(Anomaly::new(&f.path, "unexpected entry in a policy folder")),
            }
        }
    }
    Ok(())
}

/// The planner's per-table files: `Summary` and `Decisions/`.
async fn check_tables(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use layouts::policies::{self as paths, DecisionClaim, DecisionFile, DecisionTask, TableSummary};
    for db in list(store, paths::TABLES, out).await? {
        for schema in if db.is_dir { list(store, &db.path, out).await? } else { vec![] } {
            for table in if schema.is_dir { list(store, &schema.path, out).await? } else { vec![] } {
                if !table.is_dir {
                    out.push(Anomaly::new(&table.path, "a file stands where a table's folder is expected"));
                    continue;
                }
                for f in list(store, &table.path, out).await? {
                    match (f.name(), f.is_dir) {
                        (paths::SUMMARY, false) => {
                            read_json::<TableSummary>(store, &f, "table summary", out).await?;
                        }
                        (paths::DECISIONS, true) => {
                            for d in list(store, &f.path, out).await? {
                                match paths::parse_decision(d.name()) {
                                    Some((_, _, DecisionFile::Claim)) if !d.is_dir => {
                                        read_json::<DecisionClaim>(store, &d, "planner decision", out).await?;
                                    }
                                    Some((_, _, DecisionFile::Task)) if !d.is_dir => {
                                        read_json::<DecisionTask>(store, &d, "planner decision's task", out).await?;
                                    }
                                    _ => out.push(Anomaly::new(&d.path, "not a planner decision file")),
                                }
                            }
                        }
                        _ => out.push(Anomaly::new(&f.path, "unexpected entry in a table's planner folder")),
                    }
                }
            }
            if !schema.is_dir {
                out.push(Anomaly::new(&schema.path, "a file stands where a schema's folder is expected"));
            }
        }
        if !db.is_dir {
            out.push(Anomaly::new(&db.path, "a file stands where a database's folder is expected"));
        }
    }
    Ok(())
}

/// Job definitions: the main copies and every logged version must parse.
async fn check_job_definitions(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use layouts::jobs::{self as paths, JobDefinition, Relations, StepDefinition};
    for job in list(store, paths::DEFINITIONS, out).await? {
        if !job.is_dir {
            out.push(Anomaly::new(&job.path, "a file stands where a job's definition folder is expected"));
            continue;
        }
        for f in list(store, &job.path, out).await? {
            let logged = |dir: &Entry| !dir.is_dir;
            match f.name() {
                paths::JOB_FILE => {
                    let def = read_json::<JobDefinition>(store, &f, "job definition", out).await?;
                    if let Some(Err(e)) = def.as_ref().and_then(crate::jobs::cron::cron_of) {
                        out.push(Anomaly::new(&f.path, format!("the job's schedule: {e}")));
                    }
                }
                paths::RELATIONS => {
                    read_json::<Relations>(store, &f, "relations definition", out).await?;
                }
                paths::JOB_LOG | paths::STEPS | paths::STEP_LOG | paths::RELATION_LOG if logged(&f) => {
                    out.push(Anomaly::new(&f.path, "a file stands where a folder is expected"));
                }
                paths::JOB_LOG => {
                    for v in list(store, &f.path, out).await? {
                        read_json::<JobDefinition>(store, &v, "logged job definition", out).await?;
                    }
                }
                paths::RELATION_LOG => {
                    for v in list(store, &f.path, out).await? {
                        read_json::<Relations>(store, &v, "logged relations definition", out).await?;
                    }
                }
                paths::STEPS | paths::STEP_LOG => {
                    for v in list(store, &f.path, out).await? {
                        read_json::<StepDefinition>(store, &v, "step definition", out).await?;
                    }
                }
                _ => out.push(Anomaly::new(&f.path, "unexpected entry in a job definition folder")),
            }
        }
    }
    Ok(())
}

/// Archives of finished tasks: each a gzip'd file of JSON lines, decoded as
/// a stream (a gzip bomb costs a line's worth of memory, not its size).
async fn check_archives(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use std::io::BufRead;
    for e in list(store, v2::COMPRESS, out).await? {
        if e.is_dir {
            out.push(Anomaly::new(&e.path, "a folder stands where an archive file is expected"));
            continue;
        }
        let bytes = match store.read_or_bad(&e.path).await? {
            Some(Ok(b)) => b,
            Some(Err(bad)) => {
                out.push(Anomaly::new(&e.path, format!("not a valid archive: {bad}")));
                continue;
            }
            None => continue,
        };
        let mut lines = std::io::BufReader::new(flate2::read::GzDecoder::new(&bytes[..]));
        let mut line = Vec::new();
        for n in 1.. {
            line.clear();
            let limit = store::MAX_STATE_BYTES + 1;
            match std::io::Read::take(&mut lines, limit).read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) if line.len() as u64 >= limit => {
                    out.push(Anomaly::new(&e.path, format!("line {n} is longer than {} bytes", limit - 1)));
                    break;
                }
                Ok(_) => {
                    if let Err(err) = serde_json::from_slice::<crate::monitor::tasks::ArchivedTask>(&line) {
                        out.push(Anomaly::new(&e.path, format!("line {n}: {err}")));
                        break;
                    }
                }
                Err(err) => {
                    out.push(Anomaly::new(&e.path, format!("not a gzip'd JSON-lines archive: {err}")));
                    break;
                }
            }
        }
    }
    Ok(())
}

/// The v1 upgrade's locks (empty files) and state.
async fn check_upgrade(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for e in list(store, v2::UPGRADE_LOCKS, out).await? {
        if e.path == v2::UPGRADE_STATE {
            read_json::<formats::UpgradeState>(store, &e, "upgrade state", out).await?;
        } else if e.name().ends_with(v2::UPGRADE_LOCK_SUFFIX) {
            read_empty(store, &e, "upgrade lock", out).await?;
        } else {
            out.push(Anomaly::new(&e.path, "unexpected entry in TaskUpgradeLock/"));
        }
    }
    Ok(())
}

/// Job instances: every `Job` and `End` file of an instance, and every step
/// file, must parse. A torn `Job` (an older compactd on fs killed inside its
/// create) is reported here; `trigger` of the same key repairs it.
async fn check_job_instances(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    use layouts::jobs::{self as paths, JobEnd, JobInstance, StepClaim, StepEnd, StepTask};
    for job in list(store, paths::INSTANCES, out).await? {
        if !job.is_dir {
            out.push(Anomaly::new(&job.path, "a file stands where a job's instances folder is expected"));
            continue;
        }
        for inst in list(store, &job.path, out).await? {
            if !inst.is_dir {
                out.push(Anomaly::new(&inst.path, "a file stands where an instance folder is expected"));
                continue;
            }
            let files = list(store, &inst.path, out).await?;
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
                        for sf in list(store, &f.path, out).await? {
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
    let Some(bytes) = read_bytes(store, e, what, out).await? else {
        return Ok(None);
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
    for e in list(store, v2::REGISTRY, out).await? {
        if let Some(n) = layouts::v3::parse_layout_marker(e.name()).filter(|_| !e.is_dir) {
            if let Some(b) = read_bytes(store, &e, "layout switch", out).await? {
                if let Err(why) = layouts::v3::switch_holds(n, &b) {
                    out.push(Anomaly::new(&e.path, format!("puts nothing in force: {why}")));
                }
            }
        } else if !["Nodes/", "Offline/", "Events/", "Probe/", "Inbox/", "Joins/", "Owners/"]
            .iter()
            .any(|d| e.path.ends_with(&format!("Registry/{d}")))
        {
            out.push(Anomaly::new(&e.path, "unexpected entry in Registry/"));
        }
    }
    let (_, bad) = crate::cluster::liveness::read_heartbeats(store).await?;
    out.extend(bad);
    for e in list(store, v2::JOINS, out).await? {
        if e.is_dir || v2::parse_offline_marker(e.name()).is_none() {
            out.push(Anomaly::new(&e.path, "a join marker must be a file named <node>.<incarnation>"));
        } else {
            read_empty(store, &e, "join marker", out).await?;
        }
    }
    for e in list(store, v2::OWNERS, out).await? {
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
    for e in list(store, v2::INBOX, out).await? {
        if e.is_dir || NodeId::parse(e.name()).is_err() {
            out.push(Anomaly::new(&e.path, "an inbox stamp must be a file named by a node id"));
        } else {
            read_json::<formats::InboxStamp>(store, &e, "inbox stamp", out).await?;
        }
    }
    for e in list(store, v2::OFFLINE, out).await? {
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
    for e in list(store, v2::EVENTS, out).await? {
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
    for e in list(store, v2::ELECTION, out).await? {
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

const NO_TASK_INFO: &str = "no TaskInfo.pc.db (an interrupted create, or foreign data)";

/// Checks one task or subtask folder: exactly one valid `Status.<State>`
/// (two are tolerated as the trace of an interrupted transition), a valid
/// `TaskInfo.pc.db`, nothing else. What is missing goes to `missing` (for a
/// subtask of a finished task, a leftover pending the sweep), the rest to
/// `out`.
async fn check_task_dir(
    store: &Store,
    dir: &Entry,
    subtask: bool,
    out: &mut Vec<Anomaly>,
    missing: &mut Vec<Anomaly>,
) -> store::Result<()> {
    let mut states = Vec::new();
    let mut has_info = false;
    for f in list(store, &dir.path, out).await? {
        let name = f.name();
        if name == v2::TASK_INFO {
            has_info = true;
            let info = read_json::<TaskInfo>(store, &f, "task info", out).await?;
            if let Some(Err(e)) = info.map(|i| crate::tasks::repeat::stored_cron(&i)) {
                out.push(Anomaly::new(&f.path, e.to_string()));
            }
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
            if subtask {
                read_json::<formats::StatusMark>(store, &f, "subtask status marker", out).await?;
            } else {
                read_empty(store, &f, "task status marker", out).await?;
            }
        } else if !subtask && v2::parse_manager_term(name).is_some() {
            read_json::<formats::ManagerTerm>(store, &f, "manager term", out).await?;
        } else if !subtask && name == v2::STOP {
            read_json::<formats::StopRequest>(store, &f, "stop request", out).await?;
        } else if !subtask && v2::parse_reassign_request(name).is_some() {
            read_json::<formats::ReassignRequest>(store, &f, "reassign request", out).await?;
        } else if !subtask && v2::parse_unit_outcome(name).is_some() {
            // Written here by versions before `Outcomes/`.
            read_empty_or::<formats::UnitOutcome>(store, &f, "unit outcome", out).await?;
        } else if !subtask && f.is_dir && name == v2::OUTCOMES_DIR {
            for o in list(store, &f.path, out).await? {
                if v2::parse_unit_outcome(o.name()).is_some() {
                    read_empty_or::<formats::UnitOutcome>(store, &o, "unit outcome", out).await?;
                } else if layouts::v3::parse_batch_record(o.name()).is_some() {
                    read_json::<layouts::v3::BatchRecord>(store, &o, "batch record", out).await?;
                } else {
                    out.push(Anomaly::new(&o.path, "unexpected entry in a task's Outcomes/"));
                }
            }
        } else if !subtask && f.is_dir && name == v2::STAGED_DIR {
            for o in list(store, &f.path, out).await? {
                if v2::parse_staged_unit(o.name()).is_some() {
                    read_json::<serde_json::Value>(store, &o, "staged unit", out).await?;
                } else {
                    out.push(Anomaly::new(&o.path, "unexpected entry in a task's Staged/"));
                }
            }
        } else if subtask && name == v2::OUTPUT {
            read_bytes(store, &f, "executor output", out).await?;
        } else {
            out.push(Anomaly::new(&f.path, "unexpected entry in a task folder"));
        }
    }
    if !has_info {
        missing.push(Anomaly::new(&dir.path, NO_TASK_INFO));
    }
    match states.len() {
        0 => missing.push(Anomaly::new(&dir.path, "no Status.<State> marker")),
        1 | 2 => {}
        n => out.push(Anomaly::new(&dir.path, format!("{n} Status markers ({})", states.join(", ")))),
    }
    Ok(())
}

async fn check_scheduler(store: &Store, out: &mut Vec<Anomaly>) -> store::Result<()> {
    for e in list(store, v2::SCHEDULER, out).await? {
        if e.name() == v2::COMPRESS_DIR && e.is_dir {
            continue; // check_archives
        }
        if !e.is_dir {
            out.push(Anomaly::new(&e.path, "a file stands where a task folder is expected"));
        } else if let Err(err) = TaskId::parse(e.name()) {
            out.push(Anomaly::new(&e.path, err.to_string()));
        } else {
            let mut missing = vec![];
            check_task_dir(store, &e, false, out, &mut missing).await?;
            out.extend(missing);
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
            executor: None,
            executors: None,
            slots: None,
            layouts: None,
            draining: false,
        };
        store.put(&v2::heartbeat(&hb.node), formats::encode(&hb)).await.unwrap();
        crate::cluster::wake::stamp_at(&store, "cli", &hb.node, 1).await.unwrap();
        assert!(check_tree(&store).await.unwrap().is_empty(), "a heartbeat and an inbox stamp are fine");
        store.put("Compaction_V2/Registry/Inbox/n3", b"garbage".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Nodes/n2", b"{\"node\":".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Nodes/bad name", b"{}".to_vec()).await.unwrap();
        store.put("Compaction_V2/Election/Lease.x", b"{}".to_vec()).await.unwrap();
        store.put("Compaction_V2/Junk", b"".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Layout.3", b"".to_vec()).await.unwrap();
        store.put("Compaction_V2/Registry/Layout.4", b"".to_vec()).await.unwrap();
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
            "Compaction_V2/Registry/Layout.4",
            "Compaction_V2/Scheduler/not-a-task/",
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/Status.Bogus",
            "Compaction_V2/Scheduler/aaaaffff.16176931.56000000.0/",
        ] {
            assert!(paths.contains(&p), "{p} not reported in {found:#?}");
        }
        assert!(!paths.contains(&"Compaction_V2/Registry/Layout.3"), "the form before layout 4: {found:#?}");
    }
}
