//! A node's folder `TaskAssigned/<node>/` as one recursive listing shows
//! it, in both layouts: manage pointers, ended-incarnation markers, layout
//! 2 subtask folders and layout 3 batch folders (layouts/src/v3.rs). Every
//! state here comes from names alone; nothing is read.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt;
use layouts::v3::{self, Mark};
use layouts::{v2, NodeId, SubtaskState, TaskId};
use store::Store;

/// One layout 2 subtask folder as a listing shows it.
#[derive(Debug, Clone, Default)]
pub struct SubFolder {
    pub markers: Vec<SubtaskState>,
    pub has_info: bool,
    /// Every file name in the folder.
    pub files: Vec<String>,
}

impl SubFolder {
    /// The marker furthest along (two exist after an interrupted change).
    pub fn state(&self) -> SubtaskState {
        self.markers.iter().copied().max_by_key(|s| s.rank()).unwrap_or(SubtaskState::Init)
    }
}

/// The markers of one unit attempt of a layout 3 batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitMarks {
    /// Incarnations that claimed it (one, unless a claim of an ended
    /// incarnation landed late).
    pub running: Vec<u64>,
    pub released: bool,
    pub cancel: bool,
    pub success: bool,
    pub failed: bool,
    pub output: bool,
}

impl UnitMarks {
    pub fn terminal(&self) -> bool {
        self.success || self.failed
    }

    /// What `status` shows: the terminal mark, else a take-back, else the
    /// claim, else `Init`.
    pub fn state(&self) -> SubtaskState {
        if self.success {
            SubtaskState::Success
        } else if self.failed {
            SubtaskState::Failed
        } else if self.cancel || self.released {
            SubtaskState::Cancel
        } else if !self.running.is_empty() {
            SubtaskState::Running
        } else {
            SubtaskState::Init
        }
    }

    fn note(&mut self, mark: Mark) {
        match mark {
            Mark::Running(inc) => self.running.push(inc),
            Mark::Released => self.released = true,
            Mark::Cancel => self.cancel = true,
            Mark::Success => self.success = true,
            Mark::Failed => self.failed = true,
            Mark::Output => self.output = true,
        }
    }
}

/// One layout 3 batch folder as a listing shows it.
#[derive(Debug, Clone, Default)]
pub struct BatchFolder {
    pub has_info: bool,
    /// The batch's own `Released`.
    pub released: bool,
    /// Markers by (unit, attempt).
    pub units: BTreeMap<(u32, u32), UnitMarks>,
    /// Names that are none of the above (`check` reports them).
    pub other: Vec<String>,
}

impl BatchFolder {
    pub fn note(&mut self, file: &str) {
        if file == v3::INFO {
            self.has_info = true;
        } else if file == v3::RELEASED {
            self.released = true;
        } else if let Some((u, a, mark)) = v3::parse_mark(file) {
            self.units.entry((u, a)).or_default().note(mark);
        } else {
            self.other.push(file.to_string());
        }
    }

    /// The markers of one unit attempt (none: `Init`).
    pub fn marks(&self, unit: u32, attempt: u32) -> UnitMarks {
        self.units.get(&(unit, attempt)).cloned().unwrap_or_default()
    }
}

/// A node's folder: its manager pointers, its subtasks, and the
/// incarnations of the node that ended on its own account.
#[derive(Debug, Clone, Default)]
pub struct NodeFolder {
    pub manages: Vec<TaskId>,
    pub subtasks: BTreeMap<String, SubFolder>,
    /// Layout 3 batch folders by name.
    pub batches: BTreeMap<String, BatchFolder>,
    pub ended: BTreeSet<u64>,
}

impl NodeFolder {
    /// Notes one entry of the node's folder, `rel` below it.
    pub fn note(&mut self, rel: &str) {
        match rel.split_once('/') {
            None => {
                if let Some(t) = v2::parse_manage_pointer(rel) {
                    self.manages.push(t);
                } else if let Some(inc) = v2::parse_ended_marker(rel) {
                    self.ended.insert(inc);
                }
            }
            Some((sub, file)) if v3::parse_batch_name(sub).is_some() => {
                self.batches.entry(sub.to_string()).or_default().note(file);
            }
            Some((sub, file)) => {
                let f = self.subtasks.entry(sub.to_string()).or_default();
                f.files.push(file.to_string());
                if file == v2::TASK_INFO {
                    f.has_info = true;
                } else if let Ok(s) = SubtaskState::from_file_name(file) {
                    f.markers.push(s);
                }
            }
        }
    }

    /// Nothing to run or manage here.
    pub fn is_idle(&self) -> bool {
        self.subtasks.is_empty() && self.batches.is_empty() && self.manages.is_empty()
    }
}

/// Where one unit attempt lives in a node's folder: a layout 2 subtask
/// folder, or a unit of a layout 3 batch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    Sub(String),
    Unit { batch: String, unit: u32, attempt: u32 },
}

impl Slot {
    /// The task it belongs to (from its name).
    pub fn task(&self) -> Option<TaskId> {
        match self {
            Slot::Sub(name) => v2::parse_subtask_name(name).map(|(t, ..)| t),
            Slot::Unit { batch, .. } => v3::parse_batch_name(batch).map(|(t, ..)| t),
        }
    }

    /// Whether this attempt's place is gone from `folder` (its folder or
    /// batch removed, or its info): its run is killed and any report
    /// forgotten. A place marked `Cancel` and not ended stays (its end is
    /// reported: the acknowledgement its manager waits for).
    pub fn gone_from(&self, folder: &NodeFolder) -> bool {
        match self {
            Slot::Sub(name) => folder.subtasks.get(name).is_none_or(|f| !f.has_info && !sub_cancelled(f)),
            Slot::Unit { batch, unit, attempt } => folder.batches.get(batch).is_none_or(|b| {
                let m = b.marks(*unit, *attempt);
                !b.has_info && (!m.cancel || m.terminal())
            }),
        }
    }

    /// Whether its manager takes it back (`Cancel`, not ended).
    pub fn cancelled_in(&self, folder: &NodeFolder) -> bool {
        match self {
            Slot::Sub(name) => folder.subtasks.get(name).is_some_and(sub_cancelled),
            Slot::Unit { batch, unit, attempt } => folder.batches.get(batch).is_some_and(|b| {
                let m = b.marks(*unit, *attempt);
                m.cancel && !m.terminal()
            }),
        }
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Sub(name) => f.write_str(name),
            Slot::Unit { batch, unit, attempt } => write!(f, "{batch}/u{unit}.a{attempt}"),
        }
    }
}

/// A layout 2 subtask marked `Cancel` by its manager and not ended.
fn sub_cancelled(f: &SubFolder) -> bool {
    f.markers.contains(&SubtaskState::Cancel)
        && !f.markers.iter().any(|m| matches!(m, SubtaskState::Success | SubtaskState::Failed))
}

/// Reads `TaskAssigned/<node>/` with one recursive listing.
pub async fn list_node(store: &Store, node: &NodeId) -> store::Result<NodeFolder> {
    let dir = v2::node_assigned_dir(node);
    let mut out = NodeFolder::default();
    let mut entries = store.list_stream(&dir, true);
    while let Some(e) = entries.try_next().await? {
        out.note(&e.path[dir.len()..]);
    }
    Ok(out)
}

/// Reads one batch folder (the listing a worker makes after its claims, a
/// manager after a release).
pub async fn list_batch(store: &Store, node: &NodeId, batch: &layouts::Name) -> store::Result<BatchFolder> {
    let mut out = BatchFolder::default();
    for e in store.list(&v3::batch_dir(node, batch)).await? {
        if !e.is_dir {
            out.note(e.name());
        }
    }
    Ok(out)
}
