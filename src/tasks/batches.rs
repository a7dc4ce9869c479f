//! What a manager knows of one layout 3 batch it dispatched: its node, its
//! unit attempts, which of them ended and how, and whether its create is
//! settled. The manager records a batch once every unit attempt in it
//! ended (`Outcomes/Batch.r<round>.t<term>.b<batch>`), then deletes its folder.

use std::collections::BTreeMap;

use bytes::Bytes;
use layouts::v3::{BatchRecord, RecordedUnit};
use layouts::NodeId;

/// How one unit attempt of a batch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum End {
    /// It succeeded: the unit is done (with its executor's counters).
    Done(BTreeMap<String, u64>),
    /// It failed, and the unit failed for good with it.
    Failed(String),
    /// It ended without finishing the unit (a failure that is retried, a
    /// release, a newer attempt elsewhere): the unit goes on elsewhere.
    Released(String),
}

#[derive(Debug, Clone)]
pub(super) struct BatchRun {
    pub(super) node: NodeId,
    /// Unit → its attempt in this batch.
    pub(super) units: BTreeMap<u32, u32>,
    pub(super) ended: BTreeMap<u32, End>,
    /// The create of its `Info` failed (it may have landed, or land late):
    /// the bytes to create again under the same name, until settled.
    pub(super) unsure: Option<Bytes>,
    /// Released whole because its create may still land: its folder (with
    /// that `Released`) stays when it is recorded, so that a late `Info`
    /// starts nothing; the monitor's sweep removes it with its finished task.
    pub(super) keep: bool,
}

impl BatchRun {
    pub(super) fn new(node: NodeId) -> BatchRun {
        BatchRun { node, units: BTreeMap::new(), ended: BTreeMap::new(), unsure: None, keep: false }
    }

    /// Every unit attempt in it ended: it can be recorded.
    pub(super) fn complete(&self) -> bool {
        !self.units.is_empty() && self.units.keys().all(|u| self.ended.contains_key(u))
    }

    /// Notes that its attempt of `unit` ended (a first end stands).
    pub(super) fn end(&mut self, unit: u32, end: End) {
        if self.units.contains_key(&unit) {
            self.ended.entry(unit).or_insert(end);
        }
    }

    /// Its record.
    pub(super) fn record(&self) -> BatchRecord {
        let mut r = BatchRecord { node: Some(self.node.clone()), ..Default::default() };
        for (unit, end) in &self.ended {
            let attempt = self.units.get(unit).copied().unwrap_or(0);
            match end {
                End::Done(stats) => {
                    r.done.push(RecordedUnit { unit: *unit, attempt, stats: stats.clone(), error: None })
                }
                End::Failed(why) => r.failed.push(RecordedUnit {
                    unit: *unit,
                    attempt,
                    stats: Default::default(),
                    error: Some(why.clone()),
                }),
                End::Released(why) => r.released.push(RecordedUnit {
                    unit: *unit,
                    attempt,
                    stats: Default::default(),
                    error: Some(why.clone()),
                }),
            }
        }
        r
    }
}
