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
use layouts::{v2, NodeId, TaskId};
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
                    running_subtask(task, missing, pending);
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
    Ok(())
}

/// What a layout 2 subtask folder of a running task lacks. Its info and
/// no state marker is an attempt awaiting its claim: the normal state of a
/// dispatched unit, not worth a line. No info is a create or a removal
/// caught half way (on fs and HDFS the folder exists before its first
/// file and after its last), or a create cut short: nothing starts from
/// it (a worker needs the info), its manager, whose listing shows no info
/// either, creates it again under the same name or claims it as revoked,
/// and the sweep removes what is left once the task is finished. So it is
/// pending, never an anomaly, and `check` agrees with the cluster while
/// the task runs as well as once it ends.
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
    async fn layout_2_subtasks_of_a_running_task_awaiting_a_claim_or_their_info_are_not_anomalies() {
        let store = Store::memory().await;
        let id = unfinished_task(&store).await;
        let n2 = NodeId::parse("n2").unwrap();
        // Dispatched, not yet claimed: its info alone.
        let waiting = v2::subtask_name(&id, 1, 0, 1);
        let info = store.read(&v2::task_info(&id)).await.unwrap().unwrap();
        store.create(&v2::subtask_info(&n2, &waiting), info).await.unwrap();
        // A claim (a revoked one, or a removal half way) without the info.
        let bare = v2::subtask_name(&id, 1, 1, 1);
        let claim = StatusMark { incarnation: 7, ..Default::default() };
        let claim_path = v2::subtask_status(&n2, &bare, layouts::SubtaskState::Running);
        store.create(&claim_path, formats::encode(&claim)).await.unwrap();
        let report = crate::check::check_tree_report(&store).await.unwrap();
        assert!(report.anomalies.is_empty(), "{:#?}", report.anomalies);
        let pending: Vec<&str> = report.pending_sweep.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(pending, [v2::subtask_dir(&n2, &bare).as_str()], "{:#?}", report.pending_sweep);
        assert!(report.pending_sweep[0].problem.contains("its manager settles"), "{:#?}", report.pending_sweep);
    }
}
