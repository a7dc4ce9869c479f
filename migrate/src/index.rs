//! The subtask index: v1 subtasks grouped by the main task they belong to.
//!
//! Built from one streamed recursive listing of `Compaction/TaskAssigned/`
//! plus one read of `TaskInfo` per *open* subtask (for its partition). Its
//! size is proportional to the subtasks present, not to the main tasks: v1
//! managers delete a task's subtasks once all are finished and collected, so
//! only in-flight tasks have any. Main tasks claim (remove) their group while
//! they are migrated; what is left at the end are orphans.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::{StreamExt, TryStreamExt};
use layouts::state::STATUS_PREFIX;
use layouts::v1::{self, SubtaskTally, V1Name};
use layouts::{Name, NodeId, SubtaskState};
use store::Store;

use crate::{Issue, MigrateError};

/// The subtasks of one main task.
#[derive(Debug, Default)]
pub struct Group {
    /// Finished subtasks counted; open ones are in `open_infos`.
    pub tally: SubtaskTally,
    /// `TaskInfo` paths of the open subtasks: read (for their partitions)
    /// only when the main task is actually migrated, so a rerun reads none.
    pub open_infos: Vec<String>,
    /// Subtasks whose state or partition could not be read (path: reason):
    /// the main task is not migrated while any exist, so nothing is lost.
    pub broken: Vec<Issue>,
    /// One subtask folder of the group, and how many there are (reports).
    pub first_path: String,
    pub folders: u64,
}

#[derive(Debug, Default)]
struct Folder {
    best: Option<SubtaskState>,
    has_info: bool,
    bad_status: Option<String>,
}

pub struct SubtaskIndex {
    groups: Mutex<HashMap<(NodeId, u64), Group>>,
    /// Entries that are not subtasks at all (path: reason), the first
    /// [`crate::MAX_LISTED`] of `problem_count`.
    pub problems: Vec<Issue>,
    pub problem_count: u64,
    pub subtasks: u64,
    pub open: u64,
    pub finished: u64,
}

impl SubtaskIndex {
    /// Lists `Compaction/TaskAssigned/` and reads open subtasks' task info
    /// (when `read_open`) with at most `concurrency` reads in flight.
    pub async fn build(store: &Store, concurrency: usize, read_open: bool) -> Result<SubtaskIndex, MigrateError> {
        let mut folders: HashMap<(String, String), Folder> = HashMap::new();
        let mut problems = Vec::new();
        let mut problem_count = 0u64;
        let mut problem = |issue: Issue| {
            problem_count += 1;
            if problems.len() < crate::MAX_LISTED {
                problems.push(issue);
            }
        };
        let mut listing = std::pin::pin!(store.list_stream(v1::TASK_ASSIGNED, true));
        while let Some(entry) = listing.try_next().await? {
            let rel = entry.path.strip_prefix(v1::TASK_ASSIGNED).unwrap_or(&entry.path);
            let parts: Vec<&str> = rel.split('/').collect();
            match parts.as_slice() {
                [worker, sub, file] => {
                    let f = folders.entry((worker.to_string(), sub.to_string())).or_default();
                    if *file == v1::TASK_INFO {
                        f.has_info = true;
                    } else if file.starts_with(STATUS_PREFIX) {
                        match SubtaskState::from_file_name(file) {
                            Ok(s) => {
                                if f.best.is_none_or(|b| s.rank() > b.rank()) {
                                    f.best = Some(s);
                                }
                            }
                            Err(e) => f.bad_status = Some(e.to_string()),
                        }
                    }
                    // Other files in a subtask folder are ignored.
                }
                [_] => problem(Issue::new(&entry.path, "a file where a worker folder is expected")),
                [_, _] => problem(Issue::new(&entry.path, "a file where a subtask folder is expected")),
                _ => problem(Issue::new(&entry.path, "unexpected nesting below a subtask folder")),
            }
        }

        let mut index = SubtaskIndex {
            groups: Mutex::new(HashMap::new()),
            problem_count,
            problems,
            subtasks: 0,
            open: 0,
            finished: 0,
        };
        // Resolve each folder (reading open ones' TaskInfo), bounded.
        let resolved = futures::stream::iter(folders)
            .map(|((worker, sub), folder)| resolve(worker, sub, folder, read_open))
            .buffer_unordered(concurrency.max(1));
        futures::pin_mut!(resolved);
        while let Some(r) = resolved.next().await {
            match r {
                Resolved::NotASubtask(issue) => index.problem(issue),
                Resolved::Subtask { key, path, state, partition, broken } => {
                    index.subtasks += 1;
                    let mut groups = index.groups.lock().unwrap();
                    let g = groups.entry(key).or_default();
                    if g.first_path.is_empty() || path < g.first_path {
                        g.first_path = path;
                    }
                    g.folders += 1;
                    match (broken, state) {
                        (Some(issue), _) => g.broken.push(issue),
                        (None, s) => {
                            if v1::subtask_is_open(s) {
                                index.open += 1;
                                g.open_infos.push(partition);
                            } else {
                                index.finished += 1;
                                g.tally.add(s, None);
                            }
                        }
                    }
                }
            }
        }
        Ok(index)
    }

    fn problem(&mut self, issue: Issue) {
        self.problem_count += 1;
        if self.problems.len() < crate::MAX_LISTED {
            self.problems.push(issue);
        }
    }

    /// Takes the group of main task `name` (node and timestamp), if any.
    pub fn claim(&self, name: &V1Name) -> Option<Group> {
        self.groups.lock().unwrap().remove(&name.main_key())
    }

    /// Groups no main task claimed: orphans.
    pub fn into_orphans(self) -> Vec<Group> {
        let mut v: Vec<Group> = self.groups.into_inner().unwrap().into_values().collect();
        v.sort_by(|a, b| a.first_path.cmp(&b.first_path));
        v
    }
}

enum Resolved {
    NotASubtask(Issue),
    Subtask {
        key: (NodeId, u64),
        path: String,
        state: SubtaskState,
        /// The TaskInfo path of an open subtask.
        partition: String,
        broken: Option<Issue>,
    },
}

async fn resolve(worker: String, sub: String, folder: Folder, read_open: bool) -> Resolved {
    let dir = format!("{}{worker}/{sub}/", v1::TASK_ASSIGNED);
    let worker = match NodeId::parse(&worker) {
        Ok(w) => w,
        Err(e) => return Resolved::NotASubtask(Issue::new(&dir, format!("bad worker folder: {e}"))),
    };
    let name = match v1::parse_subtask_dir(&sub) {
        Ok(n) => n,
        Err(e) => return Resolved::NotASubtask(Issue::new(&dir, e.to_string())),
    };
    let key = name.main_key();
    let subtask = |state, partition: String, broken| Resolved::Subtask {
        key: key.clone(),
        path: dir.clone(),
        state,
        partition,
        broken,
    };
    if let Some(reason) = folder.bad_status {
        return subtask(SubtaskState::Init, String::new(), Some(Issue::new(&dir, reason)));
    }
    // No marker: the subtask was never started; it is open.
    let state = folder.best.unwrap_or(SubtaskState::Init);
    let info_path = v1::subtask_info(&worker, &name);
    if v1::subtask_is_open(state) && read_open && !folder.has_info {
        return subtask(state, String::new(), Some(Issue::new(&info_path, "open subtask without TaskInfo")));
    }
    subtask(state, info_path, None)
}

/// The partition of an open subtask, from its `TaskInfo` (one read).
pub async fn read_partition(store: &Store, info_path: &str) -> Result<Option<Name>, Issue> {
    match store.read(info_path).await {
        Ok(Some(bytes)) => v1::parse_task_info(&bytes)
            .map(|info| info.partition_name)
            .map_err(|e| Issue::new(info_path, e.to_string())),
        Ok(None) => Err(Issue::new(info_path, "vanished during the upgrade")),
        Err(e) => Err(Issue::new(info_path, e.to_string())),
    }
}
