//! Work-conserving fair share: how many of the cluster's free slots each
//! table with due partitions gets.
//!
//! - **Capacity** ([`Capacity`]): the live members' executor slots, as
//!   their heartbeats advertise them (`run --max-running`; a member that
//!   does not say counts as [`DEFAULT_SLOTS`]). The planner keeps at most
//!   [`Capacity::target`] units in flight: every slot busy and at least one
//!   unit waiting behind each, so that a worker starts its next unit the
//!   moment one ends instead of after the planner's round trip. Units
//!   shorter than that round trip (a decision, the manager's start, the
//!   worker's pick-up, the end seen by the manager and by the planner)
//!   need more waiting to keep the slots busy; the planner lets up to
//!   three wait behind each slot while its tasks' round trip is short
//!   enough that they all start within a monitor round
//!   (`super::planner::PlannerConfig::max_waiting_per_slot`): a small
//!   table's unit then waits behind at most a round of others' units.
//! - **In flight**: the planner's tasks that have not ended, as its last
//!   visits saw them plus what it submitted since, minus what it has seen
//!   end (see `super::planner`).
//! - **Fair share** ([`allocate`]): the free slots go one at a time to the
//!   table with due partitions whose in-flight count divided by its
//!   policy's `weight` is lowest (weighted max-min fairness); a tie goes to
//!   the table that has waited longest, then by name. So a table alone
//!   with a backlog takes every free slot, tables with backlogs share by
//!   weight, and a table with one due partition gets the next slot that
//!   frees up however big the others' backlogs: it waits at most one round
//!   behind them. A policy's `max-units-per-table`, if set, caps a table's
//!   share.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use layouts::formats::Lease;

/// Executor slots of a member whose heartbeat does not advertise them (an
/// older node): `run --max-running`'s default.
pub const DEFAULT_SLOTS: u64 = 2;

/// What the cluster can run, from the newest member view.
#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// The live members' executor slots.
    pub slots: u64,
    view: Option<Lease>,
}

impl Capacity {
    pub fn of(view: Option<&Lease>) -> Capacity {
        // A draining member takes no new work: its slots are not the cluster's.
        let slots = view
            .map(|v| v.members.iter().filter(|m| !m.draining).map(|m| m.slots.map_or(DEFAULT_SLOTS, u64::from)).sum())
            .unwrap_or(0);
        Capacity { slots, view: view.cloned() }
    }

    /// No member view (no node has run yet): one node of the default
    /// slots, what `plan --dry-run` shows before a cluster starts.
    pub fn assumed() -> Capacity {
        Capacity { slots: DEFAULT_SLOTS, view: None }
    }

    /// Without a member view: its slots are [`Capacity::assumed`].
    pub fn is_assumed(&self) -> bool {
        self.view.is_none()
    }

    /// Units the planner keeps in flight at most with `waiting` units
    /// waiting behind each slot (see the module doc).
    pub fn target(&self, waiting: u64) -> u64 {
        self.slots.saturating_mul(1 + waiting)
    }

    /// Why a task running command `name` would run nowhere now (no live
    /// member defines it); `None` when one does, or without a view.
    pub fn undefined_command(&self, name: &str) -> Option<String> {
        crate::tasks::placement::undefined_command(self.view.as_ref(), name)
    }
}

/// One table's claim on the free slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    pub weight: u32,
    pub in_flight: u64,
    /// Due partitions waiting.
    pub queued: u64,
    /// `max-units-per-table`, if the policy sets one.
    pub cap: Option<u32>,
    /// Since when (wall ms) its oldest waiting partition waits: ties go to
    /// the longest waiting.
    pub since: u64,
}

impl Demand {
    fn room(&self, granted: u64) -> u64 {
        let capped = self.cap.map_or(u64::MAX, |c| u64::from(c).saturating_sub(self.in_flight + granted));
        self.queued.saturating_sub(granted).min(capped)
    }
}

/// The next table in line: the lowest load per weight first.
#[derive(Debug, PartialEq, Eq)]
struct Next {
    load: u64,
    weight: u64,
    since: u64,
    idx: usize,
}

impl Ord for Next {
    fn cmp(&self, other: &Self) -> Ordering {
        // `BinaryHeap` pops the greatest: the greatest is the lowest
        // load / weight (compared without division), then the oldest wait,
        // then the first index.
        let a = u128::from(self.load) * u128::from(other.weight);
        let b = u128::from(other.load) * u128::from(self.weight);
        b.cmp(&a).then(other.since.cmp(&self.since)).then(other.idx.cmp(&self.idx))
    }
}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Hands `free` slots to `demands` (see the module doc); returns the slots
/// each gets, in their order, and the order in which they were handed out
/// (submit in that order: if a round stops early, it has been fair so far).
pub fn allocate(demands: &[Demand], free: u64) -> (Vec<u64>, Vec<usize>) {
    let mut grants = vec![0u64; demands.len()];
    let mut order = vec![];
    let mut heap: BinaryHeap<Next> = demands
        .iter()
        .enumerate()
        .filter(|(_, d)| d.room(0) > 0)
        .map(|(idx, d)| Next { load: d.in_flight, weight: u64::from(d.weight.max(1)), since: d.since, idx })
        .collect();
    while (order.len() as u64) < free {
        let Some(mut n) = heap.pop() else { break };
        grants[n.idx] += 1;
        order.push(n.idx);
        if demands[n.idx].room(grants[n.idx]) > 0 {
            n.load += 1;
            heap.push(n);
        }
    }
    (grants, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(weight: u32, in_flight: u64, queued: u64) -> Demand {
        Demand { weight, in_flight, queued, cap: None, since: 0 }
    }

    #[test]
    fn a_table_alone_takes_every_free_slot() {
        assert_eq!(allocate(&[d(1, 0, 1000)], 12).0, vec![12]);
        assert_eq!(allocate(&[d(1, 5, 1000)], 7).0, vec![7]);
        assert_eq!(allocate(&[d(1, 0, 3)], 12).0, vec![3], "no more than it has due");
    }

    #[test]
    fn tables_with_backlogs_share_by_weight_and_a_small_one_goes_first() {
        assert_eq!(allocate(&[d(1, 0, 100), d(1, 0, 100)], 10).0, vec![5, 5]);
        assert_eq!(allocate(&[d(1, 0, 100), d(3, 0, 100)], 12).0, vec![3, 9]);
        // A big table already holding every slot but one: the small one
        // gets the slot that frees.
        let (grants, order) = allocate(&[d(1, 11, 500), d(1, 0, 1)], 1);
        assert_eq!((grants, order), (vec![0, 1], vec![1]));
        // Caps hold, and what a capped table cannot take goes to the others.
        let capped = Demand { cap: Some(2), ..d(1, 1, 100) };
        assert_eq!(allocate(&[capped, d(1, 4, 100)], 6).0, vec![1, 5]);
    }

    #[test]
    fn ties_go_to_the_longest_waiting() {
        let old = Demand { since: 10, ..d(1, 0, 1) };
        let new = Demand { since: 20, ..d(1, 0, 1) };
        assert_eq!(allocate(&[new.clone(), old.clone()], 1).0, vec![0, 1]);
        assert_eq!(allocate(&[old, new], 1).0, vec![1, 0]);
    }
}
