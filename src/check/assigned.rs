//! `check` of `TaskAssigned/`: manage pointers, ended markers, layout 2
//! subtask folders and layout 3 batches (layouts/src/v3.rs).
//!
//! A folder of a task that is finished (or gone) and that is incomplete
//! (no info, no state marker: what a create cut short by an outage or a
//! kill leaves) is not an anomaly: nothing runs from it, and the monitor's
//! next sweep removes it with the rest of the task's folders. It is
//! reported apart, as pending that sweep, and `check` exits 0 for it; so
//! `check` agrees with the cluster whenever a task is Done. What is bad in
//! it (a file that does not parse, a name that is not one) stays an
//! anomaly.

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
            if fates.over(store, Some(task)).await? {
                pending.extend(missing.into_iter().map(|a| {
                    let problem =
                        format!("{}; its task {task} is finished: the monitor's next sweep removes it", a.problem);
                    Anomaly::new(&a.path, problem)
                }));
            } else {
                out.extend(missing);
            }
        }
    }
    Ok(())
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
        missing.push(Anomaly::new(&dir.path, "no Info (an interrupted create, or foreign data)"));
    }
    Ok(())
}
