//! Membership: heartbeat files and the liveness judge.
//!
//! Each node rewrites `Registry/Nodes/<node>` every heartbeat interval with an
//! increasing `beat`. The monitor reads them and judges liveness with a
//! [`Tracker`] on its own monotonic clock: an incarnation is alive while its
//! `beat` changed within its own session timeout (each node declares its
//! timeout in its heartbeat). Wall clocks are never compared across nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use layouts::formats::{self, Heartbeat, Member};
use layouts::{v2, NodeId};
use store::Store;

use crate::Anomaly;

/// What the monitor knows about one incarnation's heartbeat.
#[derive(Debug, Clone)]
struct Seen {
    incarnation: u64,
    beat: u64,
    session_timeout: Duration,
    /// Local monotonic time at which `beat` was last seen to change (or the
    /// incarnation first seen).
    changed_at: Duration,
    /// Whether `beat` has been seen to change at least once: a heartbeat file
    /// that never changes under our eyes may be a dead node's leftover.
    seen_alive: bool,
}

/// Liveness judge over observed heartbeats. Pure: time comes in as arguments.
#[derive(Debug, Default)]
pub struct Tracker {
    seen: BTreeMap<NodeId, Seen>,
}

/// Result of observing one heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// First sighting of this incarnation.
    New,
    /// `beat` advanced; `first` is true the first time it does.
    Beat {
        first: bool,
    },
    Unchanged,
}

impl Tracker {
    pub fn observe(&mut self, hb: &Heartbeat, now: Duration) -> Observed {
        let timeout = Duration::from_millis(hb.session_timeout_ms);
        match self.seen.get_mut(&hb.node) {
            Some(s) if s.incarnation == hb.incarnation => {
                s.session_timeout = timeout;
                if hb.beat != s.beat {
                    s.beat = hb.beat;
                    s.changed_at = now;
                    let first = !s.seen_alive;
                    s.seen_alive = true;
                    Observed::Beat { first }
                } else {
                    Observed::Unchanged
                }
            }
            _ => {
                let seen = Seen {
                    incarnation: hb.incarnation,
                    beat: hb.beat,
                    session_timeout: timeout,
                    changed_at: now,
                    seen_alive: false,
                };
                self.seen.insert(hb.node.clone(), seen);
                Observed::New
            }
        }
    }

    /// Incarnations whose heartbeat has not changed for longer than their
    /// session timeout.
    pub fn expired(&self, now: Duration) -> Vec<Member> {
        self.seen
            .iter()
            .filter(|(_, s)| now.saturating_sub(s.changed_at) > s.session_timeout)
            .map(|(node, s)| Member {
                node: node.clone(),
                incarnation: s.incarnation,
                session_timeout_ms: s.session_timeout.as_millis() as u64,
                commands: vec![],
                addr: None,
            })
            .collect()
    }

    /// Forgets nodes that have no heartbeat file any more; returns them.
    pub fn retain_present(&mut self, present: &BTreeMap<NodeId, Heartbeat>) -> Vec<Member> {
        let gone: Vec<Member> = self
            .seen
            .iter()
            .filter(|(n, s)| present.get(*n).is_none_or(|hb| hb.incarnation != s.incarnation))
            .map(|(n, s)| Member {
                node: n.clone(),
                incarnation: s.incarnation,
                session_timeout_ms: s.session_timeout.as_millis() as u64,
                commands: vec![],
                addr: None,
            })
            .collect();
        for m in &gone {
            if present.get(&m.node).is_none() {
                self.seen.remove(&m.node);
            }
        }
        gone
    }

    pub fn forget(&mut self, node: &NodeId, incarnation: u64) {
        if self.seen.get(node).is_some_and(|s| s.incarnation == incarnation) {
            self.seen.remove(node);
        }
    }
}

/// Reads every heartbeat file. Files that are not valid heartbeats (bad
/// name, malformed, not matching their name) are returned as anomalies and
/// otherwise skipped.
pub async fn read_heartbeats(store: &Store) -> store::Result<(BTreeMap<NodeId, Heartbeat>, Vec<Anomaly>)> {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for e in store.list(v2::NODES).await? {
        if e.is_dir {
            bad.push(Anomaly::new(&e.path, "a folder stands where a heartbeat file is expected"));
            continue;
        }
        let Ok(node) = NodeId::parse(e.name()) else {
            bad.push(Anomaly::new(&e.path, "file name is not a valid node id"));
            continue;
        };
        let Some(bytes) = store.read(&e.path).await? else {
            continue;
        };
        match formats::decode::<Heartbeat>(&bytes) {
            Ok(hb) if hb.node == node => {
                out.insert(node, hb);
            }
            Ok(hb) => bad
                .push(Anomaly::new(&e.path, format!("heartbeat names node {:?}, not its file name", hb.node.as_str()))),
            Err(err) => bad.push(Anomaly::new(&e.path, format!("not a heartbeat: {err}"))),
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(node: &str, inc: u64, beat: u64, timeout_ms: u64) -> Heartbeat {
        Heartbeat {
            node: NodeId::parse(node).unwrap(),
            incarnation: inc,
            beat,
            session_timeout_ms: timeout_ms,
            heartbeat_ms: 100,
            wall_ms: 0,
            pid: 1,
            version: "t".into(),
            monitor_epoch: None,
            fenced_actions: 0,
            event_cursor: 0,
            commands: vec![],
            addr: None,
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn expiry_uses_each_nodes_own_timeout_on_the_local_clock() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(&hb("a", 1, 1, 1000), Duration::ZERO), Observed::New);
        assert_eq!(t.observe(&hb("b", 1, 1, 3000), Duration::ZERO), Observed::New);
        assert_eq!(t.observe(&hb("a", 1, 2, 1000), 500 * MS), Observed::Beat { first: true });
        assert_eq!(t.observe(&hb("a", 1, 3, 1000), 900 * MS), Observed::Beat { first: false });
        // the heartbeat's wall clock is irrelevant; only local observation counts
        assert!(t.expired(1900 * MS).is_empty());
        let e = t.expired(1901 * MS);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].node.as_str(), "a");
        assert_eq!(t.expired(3001 * MS).len(), 2);
    }

    #[test]
    fn a_new_incarnation_resets_the_judgement() {
        let mut t = Tracker::default();
        t.observe(&hb("a", 1, 5, 1000), Duration::ZERO);
        assert_eq!(t.observe(&hb("a", 2, 0, 1000), 1500 * MS), Observed::New);
        assert!(t.expired(2000 * MS).is_empty());
        t.forget(&NodeId::parse("a").unwrap(), 1); // old incarnation: no effect
        assert!(!t.expired(2600 * MS).is_empty());
    }

    #[test]
    fn vanished_heartbeats_are_reported() {
        let mut t = Tracker::default();
        t.observe(&hb("a", 1, 1, 1000), Duration::ZERO);
        t.observe(&hb("b", 1, 1, 1000), Duration::ZERO);
        let mut present = BTreeMap::new();
        present.insert(NodeId::parse("a").unwrap(), hb("a", 1, 2, 1000));
        let gone = t.retain_present(&present);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].node.as_str(), "b");
        assert!(t.retain_present(&present).is_empty());
    }
}
