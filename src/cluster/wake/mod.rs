//! Wake-ups between nodes: pokes are hints, files stay the truth.
//!
//! Whoever writes a file another node must act on pokes that node right
//! after the write (a `POST /v1/poke` to the `addr` its heartbeat
//! advertises, see [`crate::serve::http`]). A poke carries no state beyond a
//! [`Scope`]: the receiver re-reads the tree exactly as in a poll. So a lost,
//! late, duplicated, reordered or forged poke costs at most one extra tick
//! (one listing of the node's folder, or one job drive on the monitor), never
//! a wrong decision; a lost one costs the wait for the next poll.
//!
//! This module owns both ends:
//! - [`Wakeup`], the receiving side: pokes (from the listener, or from this
//!   node's own executors when one ends) set scope bits and notify the
//!   daemon loop, which coalesces any burst into one tick and spaces woken
//!   ticks at least [`MIN_WOKEN_GAP`] apart. The flood bound is a rate:
//!   whatever arrives, a node with a listener runs at most
//!   [`WOKEN_BURST`] woken ticks at once and [`WOKEN_PER_SECOND`] a second
//!   after that ([`RateBound`], on the node's clock); pokes beyond it wait
//!   in the pending bits and are served together by the next woken tick or
//!   poll (counted as coalesced). On S3 every woken tick is a LIST, so this
//!   is also a bound on what forged pokes can cost. The node's own pokes
//!   (its executors' ends, its writes for itself) are not held to it: each
//!   lets one woken tick through ([`Wakeup::poke`]).
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

pub mod ended;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use layouts::formats::{self, InboxStamp, Lease};
use layouts::{v2, NodeId};
use tokio::sync::{Notify, Semaphore};

use crate::clock::SharedClock;

/// Woken ticks of one node are at least this far apart (from start to
/// start), however many pokes arrive; the rate bound ([`WOKEN_PER_SECOND`])
/// is what limits a sustained flood.
pub const MIN_WOKEN_GAP: Duration = Duration::from_millis(20);

/// Woken ticks a node runs per second at most, sustained, however many
/// pokes arrive (on top of its polls). A legitimate node is poked a few
/// times per task step; 5 looks a second keep work prompt (at most 200 ms
/// late under load, since one look serves every poke before it) while a
/// flood costs at most 5 LIST rounds a second.
pub const WOKEN_PER_SECOND: u32 = 5;

/// Woken ticks that may run back to back (still [`MIN_WOKEN_GAP`] apart)
/// after a quiet spell (it refills at [`WOKEN_PER_SECOND`]): a job chain
/// pokes each of its nodes about ten times within a few hundred
/// milliseconds (submit, dispatch, result, step end, next step), and must
/// not wait on the rate (with a burst of 5 a 3-step chain took 1.5 s
/// instead of 0.3 s).
pub const WOKEN_BURST: u32 = 20;

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
    /// The monitor's policy planner: one of its tasks ended. Each such
    /// poke is counted ([`Wakeup::take_planner_pokes`]): the planner looks
    /// for that many ended tasks before it stops looking. Ignored by a node
    /// that is not the monitor.
    Plan,
    /// The monitor's policy planner: a policy was applied or resumed (a
    /// pass starts at once). Ignored by a node that is not the monitor.
    Policy,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Work => "work",
            Scope::Monitor => "monitor",
            Scope::Plan => "plan",
            Scope::Policy => "policy",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "work" => Some(Scope::Work),
            "monitor" => Some(Scope::Monitor),
            "plan" => Some(Scope::Plan),
            "policy" => Some(Scope::Policy),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Work => 1,
            Scope::Monitor => 2,
            Scope::Plan => 4,
            Scope::Policy => 8,
        }
    }
}

/// The scopes a woken tick should look at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Woken(u8);

impl Woken {
    pub const ALL: Woken = Woken(15);

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
    /// Pokes received while a wake-up was already pending: served by the
    /// same woken tick (or poll) as the one before them.
    pub coalesced: AtomicU64,
    /// Wake-ups that waited for [`RateBound`] (a poke rate over
    /// [`WOKEN_PER_SECOND`]).
    pub rate_limited: AtomicU64,
    /// Pokes being sent now (a gauge): at most [`MAX_IN_FLIGHT`], whatever
    /// the receivers do. A poke to an unreachable node gives up after
    /// [`POKE_TIMEOUT`]; a failed `work` poke then stamps its target's
    /// inbox (one write, bounded by the store's timeout) before it frees
    /// its slot.
    pub in_flight: AtomicU64,
}

/// A token bucket over an injected clock, as a GCRA (one instant instead of
/// a token count and a refill time): `burst` admissions at once, then one
/// per `1 s / per_second`. A few lines rather than a rate-limiter crate, so
/// that it reads the node's [`crate::clock::Clock`] and tests move a
/// `ManualClock` instead of sleeping.
#[derive(Debug)]
pub struct RateBound {
    interval: Duration,
    /// How far ahead of now the next admission may be scheduled.
    tolerance: Duration,
    /// When the next admission would be due at the sustained rate.
    next: Mutex<Duration>,
}

impl RateBound {
    pub fn new(per_second: u32, burst: u32) -> RateBound {
        let interval = Duration::from_secs(1) / per_second.max(1);
        RateBound { interval, tolerance: interval * burst.max(1).saturating_sub(1), next: Mutex::new(Duration::ZERO) }
    }

    /// Admits one wake-up at monotonic time `now`, or says how long until
    /// one would be admitted.
    pub fn admit(&self, now: Duration) -> Result<(), Duration> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let due = (*next).max(now);
        if due > now + self.tolerance {
            return Err(due - self.tolerance - now);
        }
        *next = due + self.interval;
        Ok(())
    }
}

/// The receiving side, shared by the listener, the executors and the
/// daemon loop.
#[derive(Debug, Default)]
pub struct Wakeup {
    scopes: AtomicU8,
    /// `plan` and `policy` pokes since the planner last took them.
    plan_pokes: AtomicU64,
    policy_pokes: AtomicU64,
    notify: Notify,
    /// A poke of this process's own is pending: the next wake-up is not
    /// held to the rate bound ([`Wakeup::poke`]).
    own: AtomicBool,
    /// Woken by this process's own pokes: cuts a wait for the rate short.
    own_notify: Notify,
    /// The rate bound and the clock it reads; none: unbounded (pokes from
    /// this process only, see [`Wakeup::new`]).
    bound: Option<(RateBound, SharedClock)>,
    pub counters: WakeCounters,
    /// The tasks this node saw end as their manager, for clients waiting
    /// on one ([`ended`]).
    pub ends: ended::TaskEnds,
}

impl Wakeup {
    /// Without a rate bound: for a node without a listener, whose only
    /// pokes are its own executors' (one per executor that ends).
    pub fn new() -> Arc<Wakeup> {
        Arc::new(Wakeup::default())
    }

    /// With the rate bound ([`WOKEN_PER_SECOND`], [`WOKEN_BURST`]) on
    /// `clock`: for a node whose listener takes pokes from anyone.
    pub fn bounded(clock: SharedClock) -> Arc<Wakeup> {
        Arc::new(Wakeup { bound: Some((RateBound::new(WOKEN_PER_SECOND, WOKEN_BURST), clock)), ..Wakeup::default() })
    }

    /// Records a poke of this process's own (an executor that ended, a
    /// write of this node for itself); O(1), never blocks, never allocates.
    /// Its wake-up is not held to the rate bound, which is there for what
    /// the listener takes from anyone: a busy node learns of its own
    /// executors' ends at once, however many peers poked it before. The
    /// bound still holds for peers: each wake-up outside it is paid for by
    /// one of this process's own pokes, and those come from work it does
    /// (an executor that ended, a write of its own, a drain it began),
    /// while woken ticks stay [`MIN_WOKEN_GAP`] apart whatever their cause.
    pub fn poke(&self, scope: Scope) {
        self.record(scope);
        self.own.store(true, Ordering::Release);
        self.own_notify.notify_one();
    }

    /// Records a poke the listener took from a peer (or anyone): its
    /// wake-up waits for the rate bound.
    pub fn poke_from_peer(&self, scope: Scope) {
        self.record(scope);
    }

    fn record(&self, scope: Scope) {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        match scope {
            Scope::Plan => self.plan_pokes.fetch_add(1, Ordering::Relaxed),
            Scope::Policy => self.policy_pokes.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if self.scopes.fetch_or(scope.bit(), Ordering::AcqRel) != 0 {
            self.counters.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        // One stored permit at most: a burst wakes the loop once.
        self.notify.notify_one();
    }

    /// Takes the numbers of `plan` and `policy` pokes since the last call:
    /// hints of how many planner tasks ended and whether a policy changed
    /// (a forged poke costs the planner a look, or a pass).
    pub fn take_planner_pokes(&self) -> (u64, u64) {
        (self.plan_pokes.swap(0, Ordering::AcqRel), self.policy_pokes.swap(0, Ordering::AcqRel))
    }

    /// Takes the scopes poked since the last call. An own poke taken here
    /// (by a poll) is served: it lets no later peer's poke past the bound.
    pub fn take(&self) -> Woken {
        self.own.store(false, Ordering::Release);
        Woken(self.scopes.swap(0, Ordering::AcqRel))
    }

    /// Resolves when a poke arrived since the last [`Wakeup::take`] (or
    /// since the last time this resolved) and the rate bound admits a
    /// woken tick. Cancel-safe: dropped while it waits for the rate (the
    /// poll came first), the pending scopes stay for the poll to take.
    pub async fn notified(&self) {
        loop {
            self.notify.notified().await;
            // A poll took the scopes after this permit was stored: nothing
            // is left to look at.
            if self.scopes.load(Ordering::Acquire) == 0 {
                continue;
            }
            let Some((bound, clock)) = &self.bound else { return };
            let mut counted = false;
            loop {
                if self.own.swap(false, Ordering::AcqRel) {
                    return;
                }
                match bound.admit(clock.mono()) {
                    Ok(()) => return,
                    Err(wait) => {
                        if !counted {
                            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                            counted = true;
                        }
                        // The daemon loop's wait, in the future it awaits.
                        #[allow(clippy::disallowed_methods)]
                        let sleep = tokio::time::sleep(wait);
                        tokio::select! {
                            _ = sleep => {}
                            _ = self.own_notify.notified() => {}
                        }
                    }
                }
            }
        }
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

    /// The monitor's planner (whoever holds the lease when sent): one of
    /// its tasks ended, or a policy changed.
    pub fn plan(&mut self) {
        self.0.insert((Scope::Plan, Target::Monitor));
    }

    /// A policy was applied or resumed: the monitor's planner starts a pass.
    pub fn policy(&mut self) {
        self.0.insert((Scope::Policy, Target::Monitor));
    }

    /// Removes the `plan` poke (served in process by the monitor itself);
    /// true if there was one.
    pub fn take_plan(&mut self) -> bool {
        self.0.remove(&(Scope::Plan, Target::Monitor))
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
            match node.and_then(|n| addrs.get(n).map(|a| (n, a))) {
                Some((n, Some(a))) => {
                    r.sends.push(Outgoing { scope: *scope, addr: a.to_string(), node: n.clone(), work: work.cloned() })
                }
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
            let same = later.scope == kept.scope && later.addr == kept.addr && later.node == kept.node;
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
    /// The node the address is this poke's for: the receiver refuses a poke
    /// meant for another node (then this one fails and stamps).
    pub node: NodeId,
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
        for Outgoing { scope, addr, node, work } in sends {
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                unreachable.extend(work);
                continue;
            };
            c.sent.fetch_add(1, Ordering::Relaxed);
            c.in_flight.fetch_add(1, Ordering::Relaxed);
            let client = self.client.clone();
            let wake = self.wake.clone();
            let inbox = self.inbox.clone();
            tokio::spawn(async move {
                if let Err(e) = poke(&client, &addr, scope, &node).await {
                    wake.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%addr, "poke failed (the receiver will poll): {e}");
                    if let (Some(inbox), Some(node)) = (inbox, work) {
                        stamp_all(&inbox, &[node]).await;
                    }
                }
                wake.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
                drop(permit);
            });
        }
        unreachable
    }
}

/// One poke; the error says why it was not taken.
pub async fn poke(client: &reqwest::Client, addr: &str, scope: Scope, node: &NodeId) -> Result<(), String> {
    // Node ids are letters, digits, `_`, `-` and `.`: nothing to escape.
    let url = format!("http://{addr}/v1/poke?scope={}&node={node}", scope.as_str());
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
    let attempts = sends.into_iter().map(|Outgoing { scope, addr, node, work }| {
        let client = &client;
        async move {
            let Some(client) = client else { return work };
            match poke(client, &addr, scope, &node).await {
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
mod tests;
