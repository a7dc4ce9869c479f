//! Wake-ups between nodes: pokes are hints, files stay the truth.
//!
//! Whoever writes a file another node must act on pokes that node right
//! after the write (a `POST /v1/poke` to the `addr` its heartbeat
//! advertises, see [`crate::http`]). A poke carries no state beyond a
//! [`Scope`]: the receiver re-reads the tree exactly as in a poll. So a lost,
//! late, duplicated, reordered or forged poke costs at most one extra tick
//! (one listing of the node's folder, or one job drive on the monitor), never
//! a wrong decision; a lost one costs the wait for the next poll.
//!
//! This module owns both ends:
//! - [`Wakeup`], the receiving side: pokes (from the listener, or from this
//!   node's own executors when one ends) set scope bits and notify the
//!   daemon loop, which coalesces any burst into one tick and spaces woken
//!   ticks at least [`MIN_WOKEN_GAP`] apart. That spacing is the flood
//!   bound: whatever arrives, a node runs at most one woken tick per gap.
//! - [`Poker`], the sending side: fire-and-forget requests with a short
//!   timeout and a bounded number in flight; a poke that cannot be sent at
//!   once is dropped (and counted), never queued, so it never delays the
//!   sender's tick.
//! - [`Pokes`]: the set of nodes a tick decided to poke, sent after the tick.
//! - [`stamp`]: the wake-up of last resort. A `work` poke that cannot be
//!   delivered (the target has no listener, is not in the view yet, the
//!   poke failed or was dropped) is replaced by a rewrite of the target's
//!   `Registry/Inbox/<node>`. An idle node reads that one small file per poll
//!   and lists its folder only when it changed (or it was poked, or every
//!   [`crate::node::FULL_LIST_EVERY`] polls): on S3 a GET costs a twelfth of
//!   the LIST it replaces. Every write into a node's folder is followed by
//!   an acknowledged poke (the receiver then lists after the ack) or by a
//!   stamp (the receiver lists at its next poll), so a lost poke still costs
//!   one poll, never more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use layouts::formats::{self, InboxStamp, Lease};
use layouts::{v2, NodeId};
use tokio::sync::{Notify, Semaphore};

use crate::clock::SharedClock;

/// Woken ticks of one node are at least this far apart (from start to
/// start), however many pokes arrive: a flood of `N` pokes in `T` costs at
/// most `T / MIN_WOKEN_GAP + 1` woken ticks.
pub const MIN_WOKEN_GAP: Duration = Duration::from_millis(20);

/// How long a poke may take before it is given up (it is only a hint).
pub const POKE_TIMEOUT: Duration = Duration::from_millis(500);

/// Pokes a node has in flight at most; more are dropped.
pub const MAX_IN_FLIGHT: usize = 64;

/// What a poke asks the receiver to look at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The node's own folder `TaskAssigned/<node>/`: subtasks to start or
    /// stop, tasks it manages.
    Work,
    /// The monitor's duties that wait for others: job instances to drive.
    /// Ignored by a node that is not the monitor.
    Monitor,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Work => "work",
            Scope::Monitor => "monitor",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "work" => Some(Scope::Work),
            "monitor" => Some(Scope::Monitor),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Work => 1,
            Scope::Monitor => 2,
        }
    }
}

/// The scopes a woken tick should look at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Woken(u8);

impl Woken {
    pub const ALL: Woken = Woken(3);

    pub fn has(self, s: Scope) -> bool {
        self.0 & s.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Counters of the receiving side, for `/v1/status` and the flood bound.
#[derive(Debug, Default)]
pub struct WakeCounters {
    /// Pokes accepted (from the listener or from this node's executors).
    pub received: AtomicU64,
    /// Ticks run because of pokes (not of the poll interval).
    pub woken_ticks: AtomicU64,
    /// Pokes this node sent.
    pub sent: AtomicU64,
    /// Pokes this node did not send: too many in flight, or no address.
    pub dropped: AtomicU64,
    /// Pokes that failed (refused, timed out, not 2xx).
    pub failed: AtomicU64,
}

/// The receiving side, shared by the listener, the executors and the
/// daemon loop.
#[derive(Debug, Default)]
pub struct Wakeup {
    scopes: AtomicU8,
    notify: Notify,
    pub counters: WakeCounters,
}

impl Wakeup {
    pub fn new() -> Arc<Wakeup> {
        Arc::new(Wakeup::default())
    }

    /// Records a poke; O(1), never blocks, never allocates.
    pub fn poke(&self, scope: Scope) {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        self.scopes.fetch_or(scope.bit(), Ordering::AcqRel);
        // One stored permit at most: a burst wakes the loop once.
        self.notify.notify_one();
    }

    /// Takes the scopes poked since the last call.
    pub fn take(&self) -> Woken {
        Woken(self.scopes.swap(0, Ordering::AcqRel))
    }

    /// Resolves when a poke arrived since the last [`Wakeup::take`] (or
    /// since the last time this resolved).
    pub async fn notified(&self) {
        self.notify.notified().await
    }
}

/// The nodes a tick decided to poke, by scope; sent after the tick, each
/// node once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pokes(BTreeSet<(Scope, Target)>);

/// Whom a poke is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Node(NodeId),
    /// A node that reads what the poke announces at its next poll even if
    /// the poke is lost ([`Pokes::hint`]): never stamped.
    Reading(NodeId),
    /// Whoever holds the lease when the poke is sent.
    Monitor,
}

impl Pokes {
    /// `node` has new work in its folder (or work taken away).
    pub fn work(&mut self, node: &NodeId) {
        self.0.insert((Scope::Work, Target::Node(node.clone())));
    }

    /// A `work` poke that is not stamped when it cannot be delivered, for a
    /// node that reads what it announces at its next poll anyway: a manager
    /// told of a result in its worker's folder (a node that manages a task
    /// reads its workers' folders at every poll), or a worker given a
    /// subtask while its folder holds an earlier, announced one of the same
    /// manager (a node lists its folder at every poll while the folder is
    /// not empty, and the earlier one stays until the manager collects it).
    pub fn hint(&mut self, node: &NodeId) {
        self.0.insert((Scope::Work, Target::Reading(node.clone())));
    }

    /// The monitor (whoever holds the lease when sent) has something to do.
    pub fn monitor(&mut self) {
        self.0.insert((Scope::Monitor, Target::Monitor));
    }

    pub fn extend(&mut self, other: Pokes) {
        self.0.extend(other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes the `work` poke of `me` (served in process); true if there
    /// was one.
    pub fn take_own(&mut self, me: &NodeId) -> bool {
        let result = self.0.remove(&(Scope::Work, Target::Reading(me.clone())));
        self.0.remove(&(Scope::Work, Target::Node(me.clone()))) | result
    }

    pub fn take(&mut self) -> Pokes {
        std::mem::take(self)
    }

    /// The nodes with a `work` poke that is stamped when it cannot be
    /// delivered (not those of [`Pokes::hint`]).
    pub fn work_nodes(&self) -> Vec<NodeId> {
        self.0
            .iter()
            .filter_map(|(scope, t)| match (scope, t) {
                (Scope::Work, Target::Node(n)) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    /// Where each poke goes in `view`: the pokes to send, and the `work`
    /// targets that cannot be poked (not listed, or listening nowhere).
    pub fn resolve(&self, view: Option<&Lease>) -> Resolved {
        let addrs: BTreeMap<&NodeId, Option<&str>> =
            view.map(|v| v.members.iter().map(|m| (&m.node, m.addr.as_deref())).collect()).unwrap_or_default();
        let mut r = Resolved::default();
        for (scope, target) in &self.0 {
            let (node, work) = match target {
                Target::Node(n) => (Some(n), Some(n)),
                Target::Reading(n) => (Some(n), None),
                Target::Monitor => (view.map(|v| &v.holder), None),
            };
            match node.and_then(|n| addrs.get(n)) {
                Some(Some(a)) => r.sends.push(Outgoing { scope: *scope, addr: a.to_string(), work: work.cloned() }),
                found => {
                    r.unknown += usize::from(found.is_none());
                    r.unreachable.extend(work.cloned());
                }
            }
        }
        r.sends.sort();
        // One poke per node and scope; a `work` poke that stamps on failure
        // outranks a hint's, which does not.
        r.sends.dedup_by(|later, kept| {
            let same = later.scope == kept.scope && later.addr == kept.addr;
            if same && kept.work.is_none() {
                kept.work = later.work.take();
            }
            same
        });
        r
    }
}

/// One poke to send (not `Send`, the marker trait).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Outgoing {
    pub scope: Scope,
    pub addr: String,
    /// The node of a `work` poke: stamped if the poke fails.
    pub work: Option<NodeId>,
}

/// [`Pokes::resolve`]'s answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub sends: Vec<Outgoing>,
    /// `work` targets without an address in the view: stamped instead.
    pub unreachable: Vec<NodeId>,
    /// Targets the view does not list at all (a newer view may).
    pub unknown: usize,
}

/// Where a failed `work` poke leaves its [`stamp`].
#[derive(Debug, Clone)]
pub struct Inbox {
    pub store: store::Store,
    /// Who stamps: a node id, or `cli`.
    pub from: String,
    pub clock: SharedClock,
}

static STAMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Rewrites `Registry/Inbox/<node>`: `node` lists its folder at its next
/// poll. Written after the write it announces.
pub async fn stamp(inbox: &Inbox, node: &NodeId) -> store::Result<()> {
    stamp_at(&inbox.store, &inbox.from, node, inbox.clock.wall_ms()).await
}

/// [`stamp`] for writers without an [`Inbox`] (library calls that write a
/// task's manage pointer: `submit`, hand-overs).
pub async fn stamp_at(store: &store::Store, from: &str, node: &NodeId, wall_ms: u64) -> store::Result<()> {
    let s = InboxStamp {
        from: from.to_string(),
        wall_ms,
        seq: STAMP_SEQ.fetch_add(1, Ordering::Relaxed),
        pid: std::process::id(),
    };
    store.put(&v2::inbox(node), formats::encode(&s)).await
}

/// Stamps every node in `nodes`, logging (not failing on) errors: a stamp
/// that cannot be written leaves the node to its full listing.
pub async fn stamp_all(inbox: &Inbox, nodes: &[NodeId]) {
    for n in nodes {
        if let Err(e) = stamp(inbox, n).await {
            tracing::warn!(node = %n, "writing the inbox stamp failed (the node finds the work at its next full listing): {e}");
        }
    }
}

/// The sending side: fire-and-forget pokes over HTTP.
#[derive(Debug, Clone)]
pub struct Poker {
    client: reqwest::Client,
    in_flight: Arc<Semaphore>,
    wake: Arc<Wakeup>,
    /// Failed `work` pokes stamp here (none in unit tests).
    inbox: Option<Inbox>,
}

impl Poker {
    pub fn new(wake: Arc<Wakeup>, inbox: Option<Inbox>) -> Poker {
        let client = reqwest::Client::builder()
            .timeout(POKE_TIMEOUT)
            .connect_timeout(POKE_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .no_proxy()
            .build()
            .expect("a plain HTTP client builds");
        Poker { client, in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)), wake, inbox }
    }

    /// Sends `pokes` to the addresses `view` gives; returns at once, with
    /// the nodes whose `work` poke could not be sent (no address, not in
    /// `view`, or beyond [`MAX_IN_FLIGHT`]): the caller [`stamp`]s those. A
    /// `work` poke that fails later stamps its target itself, holding its
    /// in-flight slot until the stamp is written.
    pub fn send(&self, pokes: &Pokes, view: Option<&Lease>) -> Vec<NodeId> {
        let Resolved { sends, mut unreachable, unknown } = pokes.resolve(view);
        let c = &self.wake.counters;
        c.dropped.fetch_add(unknown as u64, Ordering::Relaxed);
        for Outgoing { scope, addr, work } in sends {
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                unreachable.extend(work);
                continue;
            };
            c.sent.fetch_add(1, Ordering::Relaxed);
            let client = self.client.clone();
            let wake = self.wake.clone();
            let inbox = self.inbox.clone();
            tokio::spawn(async move {
                if let Err(e) = poke(&client, &addr, scope).await {
                    wake.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%addr, "poke failed (the receiver will poll): {e}");
                    if let (Some(inbox), Some(node)) = (inbox, work) {
                        stamp_all(&inbox, &[node]).await;
                    }
                }
                drop(permit);
            });
        }
        unreachable
    }
}

/// One poke; the error says why it was not taken.
pub async fn poke(client: &reqwest::Client, addr: &str, scope: Scope) -> Result<(), String> {
    let url = format!("http://{addr}/v1/poke?scope={}", scope.as_str());
    let resp = client.post(&url).send().await.map_err(|e| e.to_string())?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("{url}: {}", resp.status()))
    }
}

/// For one-shot commands (`submit`, `stop`, `trigger` …): pokes the
/// targets the newest lease gives addresses for and waits for the replies
/// (at most [`POKE_TIMEOUT`]), since the process exits right after; a `work`
/// poke that is not taken becomes a [`stamp`]. Failures are only logged:
/// the receivers poll anyway.
pub async fn poke_now(store: &store::Store, pokes: &Pokes, clock: SharedClock) {
    match crate::cluster::election::newest_lease(store).await {
        Ok(view) => poke_in_view(store, view.as_ref(), pokes, clock).await,
        Err(e) => {
            tracing::debug!("no wake-up sent, the lease is unreadable: {e}");
            let inbox = Inbox { store: store.clone(), from: "cli".into(), clock };
            stamp_all(&inbox, &pokes.work_nodes()).await;
        }
    }
}

/// [`poke_now`] with a view the caller has just read.
pub async fn poke_in_view(store: &store::Store, view: Option<&Lease>, pokes: &Pokes, clock: SharedClock) {
    let inbox = Inbox { store: store.clone(), from: "cli".into(), clock };
    let Resolved { sends, mut unreachable, .. } = pokes.resolve(view);
    let client = match reqwest::Client::builder().timeout(POKE_TIMEOUT).no_proxy().build() {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::debug!("no wake-up sent: {e}");
            None
        }
    };
    let attempts = sends.into_iter().map(|Outgoing { scope, addr, work }| {
        let client = &client;
        async move {
            let Some(client) = client else { return work };
            match poke(client, &addr, scope).await {
                Ok(()) => None,
                Err(e) => {
                    tracing::debug!(%addr, "poke failed (the receiver will poll): {e}");
                    work
                }
            }
        }
    });
    unreachable.extend(futures::future::join_all(attempts).await.into_iter().flatten());
    stamp_all(&inbox, &unreachable).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::formats::Member;

    fn member(n: &str, addr: Option<&str>) -> Member {
        Member {
            node: NodeId::parse(n).unwrap(),
            incarnation: 1,
            session_timeout_ms: 1,
            commands: vec![],
            addr: addr.map(String::from),
        }
    }

    /// Members a (listening), b (the holder, listening) and c (listener off).
    fn view() -> Lease {
        Lease {
            epoch: 1,
            holder: NodeId::parse("b").unwrap(),
            holder_incarnation: 1,
            renewal: 1,
            lease_ms: 1,
            wall_ms: 1,
            members: vec![member("a", Some("h:1")), member("b", Some("h:2")), member("c", None)],
            offline: vec![],
            last_event: 0,
            released: false,
        }
    }

    #[test]
    fn pokes_resolve_through_the_view_and_the_monitor_is_the_holder() {
        let view = view();
        let mut p = Pokes::default();
        p.work(&NodeId::parse("a").unwrap());
        p.work(&NodeId::parse("a").unwrap());
        p.work(&NodeId::parse("c").unwrap());
        p.work(&NodeId::parse("gone").unwrap());
        p.monitor();
        let r = p.resolve(Some(&view));
        let sends: Vec<(Scope, &str)> = r.sends.iter().map(|s| (s.scope, s.addr.as_str())).collect();
        assert_eq!(sends, vec![(Scope::Work, "h:1"), (Scope::Monitor, "h:2")]);
        assert_eq!(r.sends[0].work.as_ref().map(|n| n.as_str()), Some("a"), "a work poke names its node");
        assert_eq!(r.sends[1].work, None);
        assert_eq!(r.unknown, 1, "gone is not a member (c is, with its listener off)");
        let unreachable: Vec<&str> = r.unreachable.iter().map(|n| n.as_str()).collect();
        assert_eq!(unreachable, vec!["c", "gone"], "work pokes without an address are stamped");
        let none = p.resolve(None);
        assert_eq!((none.sends.len(), none.unknown, none.unreachable.len()), (0, 4, 3), "no view: nobody can be found");
    }

    #[test]
    fn a_hint_is_sent_like_a_work_poke_and_never_stamped() {
        let view = view();
        let n = |s: &str| NodeId::parse(s).unwrap();
        let mut p = Pokes::default();
        p.hint(&n("a"));
        p.hint(&n("b"));
        p.work(&n("b"));
        p.hint(&n("c"));
        p.hint(&n("gone"));
        let r = p.resolve(Some(&view));
        let sends: Vec<(Scope, &str, Option<&str>)> =
            r.sends.iter().map(|s| (s.scope, s.addr.as_str(), s.work.as_ref().map(|n| n.as_str()))).collect();
        assert_eq!(
            sends,
            vec![(Scope::Work, "h:1", None), (Scope::Work, "h:2", Some("b"))],
            "one poke per node; a work poke's stamp wins over a hint's none"
        );
        assert!(r.unreachable.is_empty(), "hints are never stamped: {:?}", r.unreachable);
        assert_eq!(p.work_nodes(), vec![n("b")]);
        assert!(p.take_own(&n("a")), "a hint for this node is served in process");
        assert!(!p.take_own(&n("a")));
    }

    #[test]
    fn a_burst_of_pokes_is_one_wake_up_with_the_union_of_scopes() {
        let w = Wakeup::new();
        for _ in 0..1000 {
            w.poke(Scope::Work);
        }
        w.poke(Scope::Monitor);
        let woken = w.take();
        assert!(woken.has(Scope::Work) && woken.has(Scope::Monitor));
        assert!(w.take().is_empty());
        assert_eq!(w.counters.received.load(Ordering::Relaxed), 1001);
    }
}
