//! `check` of `TaskAssigned/`: manage pointers, ended markers, layout 2
//! subtask folders and layout 3 batches (layouts/src/v3.rs).
//!
//! A folder of a task that is finished (or gone) and that is incomplete
//! (no info, no state marker: what a create cut short by an outage or a
//! kill leaves) is not an anomaly: nothing runs from it, and the monitor's
//! next sweep removes it with the rest of the task's folders. It is
//! reported apart, as pending that sweep, and `check` exits 0 for it; so
//! `check` agrees with the cluster whenever a task is Done. While its task
//! runs, a subtask folder with its info but no state marker awaits its
//! claim (normal, not reported), and one without its info is pending too
//! ([`running_subtask`] says why). A batch folder
//! without `Info` is pending that sweep while its task runs too: nothing
//! starts from it (a worker needs the `Info`), and it is what markers
//! created after the batch was recorded and deleted leave (a worker's late
//! claim, which it removes once its listing shows no `Info`, and the
//! folder that stays on fs and HDFS; its manager's `Cancel` of a vanished
//! batch and the worker's acknowledgement). What is bad in it (a file that
//! does not parse, a name that is not one) stays an anomaly.

use std::collections::BTreeMap;

use layouts::formats::{self, StatusMark};
use layouts::v3::{self, Mark};
use layouts::{v2, NodeId, SubtaskState, TaskId};
use store::{Entry, Store};

use super::{check_task_dir, list, read_bytes, read_empty, read_json, Anomaly};

/// Whether a task is finished or gone (its leftovers await the sweep),
/// each task's folder listed once.
#[derive(Default)]
struct Fates(BTreeMap<TaskId, bool>);

impl Fates {
    async fn over(&mut self, store: &Store, task: Option<TaskId>) -> store::Result<bool> {
        let Some(task) = task else { return Ok(false) };
        if let Some(v) = self.0.get(&task) {
            return Ok(*v);
        }
        let dir = crate::tasks::read_dir(store, &task).await?;
        let gone = !dir.has_info && dir.markers.is_empty() && dir.terms.is_empty();
        let over = gone || dir.state.is_some_and(|s| s.is_terminal());
        self.0.insert(task, over);
        Ok(over)
    }
}

pub(super) async fn check_assigned(
    store: &Store,
    out: &mut Vec<Anomaly>,
    pending: &mut Vec<Anomaly>,
) -> store::Result<()> {
    let mut fates = Fates::default();
    // Folders of running tasks holding a live claim and no info, to look
    // at again once the grace has passed.
    let mut again: Vec<(String, u64, Vec<Anomaly>)> = vec![];
    for node_dir in list(store, v2::TASK_ASSIGNED, out).await? {
        if !node_dir.is_dir {
            out.push(Anomaly::new(&node_dir.path, "a file stands where a node folder is expected"));
            continue;
        }
        if let Err(err) = NodeId::parse(node_dir.name()) {
            out.push(Anomaly::new(&node_dir.path, err.to_string()));
            continue;
        }
        for sub in list(store, &node_dir.path, out).await? {
            let mut missing = vec![];
            let task = if !sub.is_dir && v2::parse_manage_pointer(sub.name()).is_some() {
                read_json::<formats::ManagePointer>(store, &sub, "manager pointer", out).await?;
                continue;
            } else if !sub.is_dir && v2::parse_ended_marker(sub.name()).is_some() {
                read_json::<formats::EndedMark>(store, &sub, "ended incarnation marker", out).await?;
                continue;
            } else if !sub.is_dir {
                out.push(Anomaly::new(&sub.path, "a file stands where a subtask folder is expected"));
                continue;
            } else if let Some((task, ..)) = v2::parse_subtask_name(sub.name()) {
                check_task_dir(store, &sub, true, out, &mut missing).await?;
                if !missing.is_empty() && !fates.over(store, Some(task)).await? {
                    match live_claim_without_info(store, &sub.path, &missing).await? {
                        Some(inc) => again.push((sub.path.clone(), inc, missing)),
                        None => running_subtask(task, missing, pending),
                    }
                    continue;
                }
                task
            } else if let Some((task, ..)) = v3::parse_batch_name(sub.name()) {
                check_batch(store, &sub, out, &mut missing).await?;
                task
            } else {
                out.push(Anomaly::new(
                    &sub.path,
                    "not a subtask folder name (<task>.r<round>.u<unit>.a<attempt>) or a batch folder name \
                     (<task>.r<round>.t<term>.b<batch>, or <task>.r<round>.b<batch>)",
                ));
                continue;
            };
            if missing.is_empty() {
                continue;
            }
            let why = if fates.over(store, Some(task)).await? {
                format!("its task {task} is finished: the monitor's next sweep removes it")
            } else {
                format!("nothing starts from it; the monitor's sweep removes it once its task {task} is finished")
            };
            pending.extend(missing.into_iter().map(|a| Anomaly::new(&a.path, format!("{}; {why}", a.problem))));
        }
    }
    if !again.is_empty() {
        // A real wait of the CLI's, taken once for all such folders and
        // only when there are some.
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(CLAIM_GRACE).await;
        for (dir, inc, missing) in again {
            if live_claim_without_info(store, &dir, &missing).await? == Some(inc) {
                out.extend(missing.into_iter().map(|a| {
                    let why = format!(
                        "a claim of incarnation {inc} without its info, unchanged after {CLAIM_GRACE:?}: a removal \
                         cut short, on which its manager waits"
                    );
                    Anomaly::new(&a.path, format!("{}; {why}", a.problem))
                }));
            }
        }
    }
    Ok(())
}

/// How long a live claim without its info may stand before `check` calls
/// it an anomaly: a worker's claim that lost the race with its manager's
/// removal is removed by that worker within milliseconds, and a removal in
/// progress ends as fast.
const CLAIM_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The incarnation of a layout 2 subtask folder's claim, when the folder
/// lacks its info (per `missing`) and holds a claim of a real incarnation
/// and no end: what a removal cut short part way leaves (its manager,
/// which sees the claim, waits on it), or, for a moment, a worker's claim
/// made after its manager removed the folder, or a removal in progress.
async fn live_claim_without_info(store: &Store, dir: &str, missing: &[Anomaly]) -> store::Result<Option<u64>> {
    if !missing.iter().any(|a| a.problem.starts_with(super::NO_TASK_INFO)) {
        return Ok(None);
    }
    let names: Vec<String> = match store.list(dir).await {
        Ok(entries) => entries.iter().map(|e| e.name().to_string()).collect(),
        Err(_) => return Ok(None),
    };
    let has = |s: SubtaskState| names.iter().any(|n| *n == s.file_name());
    if names.iter().any(|n| n == v2::TASK_INFO) || has(SubtaskState::Success) || has(SubtaskState::Failed) {
        return Ok(None);
    }
    if !has(SubtaskState::Running) {
        return Ok(None);
    }
    let path = format!("{dir}{}", SubtaskState::Running.file_name());
    let mark = store.read_or_bad(&path).await?.and_then(Result::ok);
    Ok(mark.and_then(|b| formats::decode::<StatusMark>(&b).ok()).map(|m| m.incarnation).filter(|i| *i != 0))
}

/// What a layout 2 subtask folder of a running task lacks, unless it holds
/// a live claim ([`live_claim_without_info`]: an anomaly if it stays). Its
/// info and no state marker is an attempt awaiting its claim: the normal
/// state of a dispatched unit, not worth a line. No info is a create or a
/// removal caught half way (on fs and HDFS the folder exists before its
/// first file and after its last), a create cut short (its manager, whose
/// listing shows no file there, creates it again under the same name or
/// claims it as revoked), or a vanished folder its manager marked
/// `Cancel`: nothing starts from it (a worker needs the info), and the
/// sweep removes what is left once the task is finished. So it is pending,
/// not an anomaly, and `check` agrees with the cluster while the task runs
/// as well as once it ends.
fn running_subtask(task: TaskId, missing: Vec<Anomaly>, pending: &mut Vec<Anomaly>) {
    let no_info = missing.iter().any(|a| a.problem.starts_with(super::NO_TASK_INFO));
    if !no_info {
        return;
    }
    let why = format!(
        "nothing starts from it: a create or removal in progress, or a create cut short that its manager settles; \
         the monitor's sweep removes it once its task {task} is finished"
    );
    pending.extend(missing.into_iter().map(|a| Anomaly::new(&a.path, format!("{}; {why}", a.problem))));
}

/// One layout 3 batch folder: its `Info`, its `Released`, and the unit
/// markers (empty ones empty, `Success` and `Failed` empty or a status
/// mark, `Output` anything); a missing `Info` goes to `missing`.
async fn check_batch(
    store: &Store,
    dir: &Entry,
    out: &mut Vec<Anomaly>,
    missing: &mut Vec<Anomaly>,
) -> store::Result<()> {
    let (mut has_info, mut released) = (false, false);
    for f in list(store, &dir.path, out).await? {
        let name = f.name();
        if name == v3::INFO {
            has_info = true;
            read_json::<v3::BatchInfo>(store, &f, "batch info", out).await?;
        } else if name == v3::RELEASED {
            released = true;
            read_empty(store, &f, "batch release", out).await?;
        } else {
            match v3::parse_mark(name) {
                Some((.., m)) if m.always_empty() => read_empty(store, &f, "unit marker", out).await?,
                Some((.., Mark::Output)) => {
                    read_bytes(store, &f, "executor output", out).await?;
                }
                Some(_) => {
                    if let Some(b) = read_bytes(store, &f, "unit end", out).await?.filter(|b| !b.is_empty()) {
                        if let Err(e) = formats::decode::<StatusMark>(&b) {
                            out.push(Anomaly::new(&f.path, format!("not a valid unit end: {e}")));
                        }
                    }
                }
                None => out.push(Anomaly::new(&f.path, "unexpected entry in a batch folder")),
            }
        }
    }
    // Released without an `Info`: a create its manager could not confirm,
    // fenced so that it starts nothing if it lands late (kept until its
    // task is swept).
    if !has_info && !released {
        missing.push(Anomaly::new(
            &dir.path,
            "no Info (markers created after the batch was recorded, an interrupted create, or foreign data)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::formats::{ExecutorKind, ExecutorSpec, Lease, Member};
    use layouts::Name;

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    /// A task of 2 shards managed by n1, not finished.
    async fn unfinished_task(store: &Store) -> TaskId {
        let n1 = NodeId::parse("n1").unwrap();
        let lease = Lease {
            epoch: 1,
            holder: n1.clone(),
            holder_incarnation: 1,
            renewal: 0,
            lease_ms: 4000,
            wall_ms: 0,
            members: vec![Member { layouts: Some(vec![2, 3, 4]), ..Member::bare(n1.clone(), 1, 4000) }],
            offline: vec![],
            last_event: 0,
            released: false,
            layout: Some(4),
        };
        store.create(&v2::lease(1), formats::encode(&lease)).await.unwrap();
        let mut spec = crate::tasks::TaskSpec::table(name("db"), name("s"), name("t"));
        spec.shards = Some(2);
        spec.manager = Some(n1);
        spec.executor = Some(ExecutorSpec {
            kind: ExecutorKind::Command,
            command: Some("true".into()),
            command_name: None,
            timeout_ms: None,
        });
        crate::tasks::submit(store, spec, 0).await.unwrap()
    }

    #[tokio::test]
    async fn batch_folders_without_info_of_a_running_task_are_pending_and_their_bad_files_anomalies() {
        let store = Store::memory().await;
        let id = unfinished_task(&store).await;
        let n2 = NodeId::parse("n2").unwrap();
        let b = |n| v3::batch_name(&id, 1, v3::BatchNo::new(1, n));
        // A worker's late claim in a batch recorded and deleted meanwhile.
        store.create(&v3::unit_mark(&n2, &b(1), 0, 1, Mark::Running(7)), vec![]).await.unwrap();
        // A manager's `Cancel` of a vanished batch, and the worker's answer.
        store.create(&v3::unit_mark(&n2, &b(2), 1, 1, Mark::Cancel), vec![]).await.unwrap();
        let ack = StatusMark { incarnation: 7, error: Some("cancelled".into()), ..Default::default() };
        store.create(&v3::unit_mark(&n2, &b(2), 1, 1, Mark::Failed), formats::encode(&ack)).await.unwrap();
        // A claim with content: bad, wherever it is.
        let bad = v3::unit_mark(&n2, &b(3), 0, 2, Mark::Running(7));
        store.create(&bad, b"x".to_vec()).await.unwrap();
        let report = crate::check::check_tree_report(&store).await.unwrap();
        let anomalies: Vec<&str> = report.anomalies.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(anomalies, [bad.as_str()], "{:#?}", report.anomalies);
        let mut pending: Vec<&str> = report.pending_sweep.iter().map(|a| a.path.as_str()).collect();
        pending.sort();
        let want: Vec<String> = (1..=3).map(|n| v3::batch_dir(&n2, &b(n))).collect();
        assert_eq!(pending, want, "{:#?}", report.pending_sweep);
        assert!(report.pending_sweep[0].problem.contains("once its task"), "{:#?}", report.pending_sweep);
    }

    #[tokio::test]
    // The grace is real time.
    #[allow(clippy::disallowed_methods)]
    async fn layout_2_subtasks_of_a_running_task_awaiting_a_claim_or_their_info_are_not_anomalies() {
        let store = Store::memory().await;
        let id = unfinished_task(&store).await;
        let n2 = NodeId::parse("n2").unwrap();
        // Dispatched, not yet claimed: its info alone.
        let waiting = v2::subtask_name(&id, 1, 0, 1);
        let info = store.read(&v2::task_info(&id)).await.unwrap().unwrap();
        store.create(&v2::subtask_info(&n2, &waiting), info).await.unwrap();
        // Its manager's revoke of a create cut short, and a vanished folder
        // marked `Cancel`: no info, nothing starts, pending.
        let claim_of = |incarnation| formats::encode(&StatusMark { incarnation, ..Default::default() });
        let revoked = v2::subtask_name(&id, 1, 1, 1);
        store.create(&v2::subtask_status(&n2, &revoked, SubtaskState::Running), claim_of(0)).await.unwrap();
        let vanished = v2::subtask_name(&id, 1, 2, 1);
        store.create(&v2::subtask_status(&n2, &vanished, SubtaskState::Cancel), claim_of(1)).await.unwrap();
        // A live claim without its info: a removal cut short, which its
        // manager waits on; and one that its worker removes within the
        // grace (it lost the race with its manager's removal).
        let stuck = v2::subtask_name(&id, 1, 3, 1);
        store.create(&v2::subtask_status(&n2, &stuck, SubtaskState::Running), claim_of(7)).await.unwrap();
        let litter = v2::subtask_status(&n2, &v2::subtask_name(&id, 1, 4, 1), SubtaskState::Running);
        store.create(&litter, claim_of(7)).await.unwrap();
        let report = {
            let check = crate::check::check_tree_report(&store);
            let removal = async {
                tokio::time::sleep(CLAIM_GRACE / 4).await;
                store.delete(&litter).await.unwrap();
            };
            tokio::join!(check, removal).0.unwrap()
        };
        let anomalies: Vec<&str> = report.anomalies.iter().map(|a| a.path.as_str()).collect();
        let stuck_dir = v2::subtask_dir(&n2, &stuck);
        assert_eq!(anomalies, [stuck_dir.as_str()], "{:#?}", report.anomalies);
        assert!(report.anomalies[0].problem.contains("a claim of incarnation 7"), "{:#?}", report.anomalies);
        let mut pending: Vec<&str> = report.pending_sweep.iter().map(|a| a.path.as_str()).collect();
        pending.dedup();
        let want = [v2::subtask_dir(&n2, &revoked), v2::subtask_dir(&n2, &vanished)];
        assert_eq!(pending, want.iter().map(String::as_str).collect::<Vec<_>>(), "{:#?}", report.pending_sweep);
        assert!(report.pending_sweep[0].problem.contains("nothing starts from it"), "{:#?}", report.pending_sweep);
    }
}
