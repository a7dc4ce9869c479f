//! Monitor election by atomic create, with leases, epochs and fencing.
//!
//! Protocol (see `layouts/PROTOCOL.md` for the crash and pause analysis):
//! - The monitor of epoch `E` is whoever created `Election/Lease.<E>` (atomic
//!   create: exactly one winner). Its holder rewrites the file every
//!   `lease / 3` with an incremented `renewal`.
//! - A follower watches the newest lease and notes, on its own monotonic
//!   clock, when `(epoch, renewal)` last changed. Only when it has not
//!   changed for the lease's duration (or the holder released it) does the
//!   follower try to create `Lease.<E+1>`.
//! - The holder considers its lease valid only until `LOCAL_VALIDITY` of the
//!   lease has passed since the start of its last successful renewal, which
//!   is earlier than any follower can have seen it expire. Before every
//!   destructive action it re-checks that, and checks that no newer lease
//!   exists: [`Election::fence`], a stat of `Lease.<E+1>` (a listing of the
//!   election folder at most once per lease). A holder that fails the check
//!   steps down.

use std::time::Duration;

use layouts::formats::{self, Lease, Member};
use layouts::{v2, NodeId};
use store::{Created, Store};

/// Fraction of the lease during which a holder trusts its own lease after a
/// successful renewal. The rest is margin for clock-rate differences and for
/// the time a renewal write takes to land.
const LOCAL_VALIDITY: f64 = 0.8;

#[derive(Debug, Clone)]
struct Watched {
    epoch: u64,
    renewal: Option<u64>,
    changed_at: Duration,
    lease_len: Duration,
    released: bool,
}

#[derive(Debug, Clone)]
pub struct Leadership {
    pub lease: Lease,
    /// Local time at which the last successful renewal (or the creation)
    /// started.
    renewed_at: Duration,
}

#[derive(Debug)]
enum Role {
    Follower { watched: Option<Watched> },
    Leader(Leadership),
}

/// Why a holder is no longer allowed to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fenced {
    /// Its last successful renewal is too old (e.g. it was paused).
    Lapsed { epoch: u64, since: Duration },
    /// A newer epoch exists.
    Superseded { epoch: u64 },
}

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fenced::Lapsed { epoch, since } => {
                write!(f, "lease of epoch {epoch} lapsed ({since:?} since its last renewal)")
            }
            Fenced::Superseded { epoch } => write!(f, "a newer epoch than {epoch} exists"),
        }
    }
}

/// What a call to [`Election::step`] changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Nothing,
    /// This node became monitor. `previous` is the last lease it could read
    /// (its member view seeds the new monitor's).
    Elected {
        epoch: u64,
        previous: Option<Lease>,
    },
    SteppedDown(Fenced),
}

#[derive(Debug)]
pub struct Election {
    me: NodeId,
    incarnation: u64,
    lease_len: Duration,
    role: Role,
    /// Newest epoch known; `None` until the first listing.
    known_epoch: Option<u64>,
    /// Last lease read successfully (any holder): the member view, its
    /// layout never below `layout_floor`.
    view: Option<Lease>,
    /// The highest layout seen in force (in a lease, or listed by the node
    /// from `Registry/`): sticky, so that a lease of an older monitor, which
    /// omits it, never takes this node back to writing or placing for an
    /// older layout.
    layout_floor: u32,
    next_renew_at: Duration,
    /// When the fence last listed the election folder (a leader).
    fence_listed_at: Option<Duration>,
    /// Read again after each backend request whose timing a decision rests
    /// on ([`Election::fresh`]); without it, the `now` a caller passes.
    clock: Option<crate::clock::SharedClock>,
}

impl Election {
    pub fn new(me: NodeId, incarnation: u64, lease_len: Duration) -> Self {
        Election {
            me,
            incarnation,
            lease_len,
            role: Role::Follower { watched: None },
            known_epoch: None,
            view: None,
            layout_floor: 0,
            next_renew_at: Duration::ZERO,
            fence_listed_at: None,
            clock: None,
        }
    }

    /// Reads `clock` whenever a decision rests on the time a request
    /// returned, not on the `now` of the caller's tick (which may be a whole
    /// heartbeat write and more behind).
    pub fn with_clock(mut self, clock: crate::clock::SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The time now: the clock's, never before `now`.
    pub fn fresh(&self, now: Duration) -> Duration {
        self.clock.as_ref().map_or(now, |c| c.mono().max(now))
    }

    pub fn set_incarnation(&mut self, incarnation: u64) {
        self.incarnation = incarnation;
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    pub fn epoch(&self) -> Option<u64> {
        match &self.role {
            Role::Leader(l) => Some(l.lease.epoch),
            Role::Follower { .. } => None,
        }
    }

    /// A leader's epoch and the monotonic instant until which it may act
    /// on its lease without renewing (what [`Election::fence`] checks
    /// locally): a task that acts for the monitor beside its tick (the
    /// policy planner) holds to it, and stats the next epoch's lease file
    /// before it acts, as the fence does.
    pub fn acting_until(&self) -> Option<(u64, Duration)> {
        match &self.role {
            Role::Leader(l) => Some((l.lease.epoch, l.renewed_at + self.lease_len.mul_f64(LOCAL_VALIDITY))),
            Role::Follower { .. } => None,
        }
    }

    /// The newest lease read or written: who is monitor and who is alive.
    pub fn view(&self) -> Option<&Lease> {
        match &self.role {
            Role::Leader(l) => Some(&l.lease),
            Role::Follower { .. } => self.view.as_ref(),
        }
    }

    /// A layout found in force (`Registry/Layout.<n>`): the view's layout
    /// is never below it from now on.
    pub fn raise_layout_floor(&mut self, n: u32) {
        self.layout_floor = self.layout_floor.max(n);
        let floor = self.layout_floor;
        if let Some(v) = self.view.as_mut() {
            v.keep_layout_at_least(floor);
        }
        if let Role::Leader(l) = &mut self.role {
            l.lease.keep_layout_at_least(floor);
        }
    }

    /// The leader's lease body, to update its member view before renewal.
    pub fn leadership_mut(&mut self) -> Option<&mut Leadership> {
        match &mut self.role {
            Role::Leader(l) => Some(l),
            Role::Follower { .. } => None,
        }
    }

    /// Makes the next [`Election::step`] of a leader renew (and so publish
    /// its member view) without waiting for the renewal interval.
    pub fn renew_soon(&mut self) {
        self.next_renew_at = Duration::ZERO;
    }

    /// One round: a follower watches and maybe takes over; a leader renews.
    pub async fn step(&mut self, store: &Store, now: Duration, wall_ms: u64) -> store::Result<Step> {
        match &self.role {
            Role::Leader(_) => self.renew(store, now, wall_ms).await,
            Role::Follower { .. } => self.follow(store, now, wall_ms).await,
        }
    }

    /// Checks, right before a destructive action, that this node may still
    /// act as monitor. Costs one stat of `Lease.<E+1>`, and a listing of the
    /// election folder once per lease. On failure the node steps down.
    ///
    /// Why the stat is enough (layouts/PROTOCOL.md, "Fencing"): a lease
    /// `E+k` is only ever created as `newest + 1` after a listing showed
    /// `newest`, so any newer epoch implies that `Lease.<E+1>` was created;
    /// it is deleted only by the winner of epoch `E+4` or later, which takes
    /// three more full leases without renewal on followers' clocks, far
    /// beyond the `LOCAL_VALIDITY` of a lease this holder acts within. The
    /// listing once per lease also catches trees edited by hand (a newer
    /// lease file whose predecessor was removed).
    pub async fn fence(&mut self, store: &Store, now: Duration) -> store::Result<Result<u64, Fenced>> {
        let Role::Leader(l) = &self.role else {
            return Ok(Err(Fenced::Superseded { epoch: self.known_epoch.unwrap_or(0) }));
        };
        let epoch = l.lease.epoch;
        // The trust window is judged right before the action, not at the
        // start of a tick that may have spent seconds on requests since.
        let since = self.fresh(now).saturating_sub(l.renewed_at);
        let verdict = if since >= self.lease_len.mul_f64(LOCAL_VALIDITY) {
            Err(Fenced::Lapsed { epoch, since })
        } else if self.newer_lease_exists(store, epoch, now).await? {
            // Any newer lease file, even one this node cannot read (or a
            // folder of that name), ends this epoch.
            Err(Fenced::Superseded { epoch })
        } else {
            Ok(epoch)
        };
        if verdict.is_err() {
            self.step_down(now);
        }
        Ok(verdict)
    }

    async fn newer_lease_exists(&mut self, store: &Store, epoch: u64, now: Duration) -> store::Result<bool> {
        let list_due = self.fence_listed_at.is_none_or(|at| now.saturating_sub(at) >= self.lease_len);
        if list_due {
            self.fence_listed_at = Some(now);
            return Ok(Self::newest_epoch(store).await? > epoch);
        }
        Ok(store.stat(&v2::lease(epoch + 1)).await?.is_some())
    }

    fn step_down(&mut self, now: Duration) {
        if let Role::Leader(l) = &self.role {
            let epoch = l.lease.epoch;
            // Watch our own old lease as if from outside: it stops changing,
            // so we take part in the next election like anyone else.
            self.view = Some(l.lease.clone());
            self.role = Role::Follower {
                watched: Some(Watched {
                    epoch,
                    renewal: Some(l.lease.renewal),
                    changed_at: now,
                    lease_len: self.lease_len,
                    released: false,
                }),
            };
        }
    }

    async fn renew(&mut self, store: &Store, now: Duration, wall_ms: u64) -> store::Result<Step> {
        if now < self.next_renew_at {
            return Ok(Step::Nothing);
        }
        if let Err(f) = self.fence(store, now).await? {
            return Ok(Step::SteppedDown(f));
        }
        let Role::Leader(l) = &mut self.role else { unreachable!("fence keeps the role") };
        let mut next = l.lease.clone();
        next.renewal += 1;
        next.wall_ms = wall_ms;
        store.put(&v2::lease(next.epoch), formats::encode(&next)).await?;
        l.lease = next;
        l.renewed_at = now;
        self.next_renew_at = now + self.lease_len / 3;
        Ok(Step::Nothing)
    }

    /// Gives up leadership cleanly (SIGTERM): followers take over at once.
    pub async fn release(&mut self, store: &Store, wall_ms: u64) -> store::Result<()> {
        if let Role::Leader(l) = &self.role {
            let mut last = l.lease.clone();
            last.released = true;
            last.renewal += 1;
            last.wall_ms = wall_ms;
            // Only release a lease that is still ours to release.
            if !store.exists(&v2::lease(last.epoch + 1)).await? {
                store.put(&v2::lease(last.epoch), formats::encode(&last)).await?;
            }
            self.role = Role::Follower { watched: None };
        }
        Ok(())
    }

    async fn delete_old_leases(store: &Store, epoch: u64) {
        let listed = match store.list(v2::ELECTION).await {
            Ok(l) => l,
            Err(e) => return tracing::warn!("listing old leases failed: {e}"),
        };
        for e in listed.iter().filter(|e| !e.is_dir) {
            if let Some(old) = v2::parse_lease_name(e.name()).filter(|old| old + 2 < epoch) {
                if let Err(err) = store.delete(&v2::lease(old)).await {
                    tracing::warn!("deleting old lease {old} failed: {err}");
                }
            }
        }
    }

    /// The newest epoch named in `Election/`. A folder or an unreadable file
    /// named like a lease counts too: it is superseded like a dead lease
    /// instead of blocking the election.
    async fn newest_epoch(store: &Store) -> store::Result<u64> {
        Ok(store.list(v2::ELECTION).await?.iter().filter_map(|e| v2::parse_lease_name(e.name())).max().unwrap_or(0))
    }

    async fn follow(&mut self, store: &Store, now: Duration, wall_ms: u64) -> store::Result<Step> {
        let epoch = match self.known_epoch {
            Some(e) => e,
            None => {
                let e = Self::newest_epoch(store).await?;
                self.known_epoch = Some(e);
                e
            }
        };
        if epoch == 0 {
            return self.try_take(store, 1, now, wall_ms).await;
        }
        // A lease that cannot be read (garbage, a folder, a FIFO, oversize)
        // is watched like one that stopped changing: it expires and the
        // next epoch is taken, so one bad file costs one lease, not the
        // election.
        let read = match store.read(&v2::lease(epoch)).await {
            Ok(Some(bytes)) => formats::decode::<Lease>(&bytes).ok().filter(|l| l.epoch == epoch),
            Ok(None) => None,
            Err(e) if e.is_bad_file() => None,
            Err(e) => return Err(e),
        };
        // Changes are stamped once the read returned: the renewal it shows
        // may have been written after this tick began. (Expiry is judged on
        // `now`, from before the read: that errs the safe way.)
        let seen_at = self.fresh(now);
        let Role::Follower { watched } = &mut self.role else { unreachable!() };
        let w = watched.get_or_insert_with(|| Watched {
            epoch,
            renewal: None,
            changed_at: seen_at,
            lease_len: self.lease_len,
            released: false,
        });
        if w.epoch != epoch {
            *w = Watched { epoch, renewal: None, changed_at: seen_at, lease_len: self.lease_len, released: false };
        }
        if let Some(mut lease) = read {
            self.layout_floor = lease.keep_layout_at_least(self.layout_floor);
            if w.renewal != Some(lease.renewal) {
                w.renewal = Some(lease.renewal);
                w.changed_at = seen_at;
            }
            w.lease_len = Duration::from_millis(lease.lease_ms.max(1));
            w.released = lease.released;
            self.view = Some(lease);
        }
        let expired = w.released || now.saturating_sub(w.changed_at) > w.lease_len;
        if expired {
            // Someone may have moved on past the epoch we watch (or left an
            // unreadable lease file there): watch the newest one first, so
            // that we never create an epoch that is already superseded.
            let newest = Self::newest_epoch(store).await?;
            if newest > epoch {
                self.known_epoch = Some(newest);
                if let Role::Follower { watched } = &mut self.role {
                    *watched = None;
                }
                return Ok(Step::Nothing);
            }
            return self.try_take(store, epoch + 1, now, wall_ms).await;
        }
        Ok(Step::Nothing)
    }

    async fn try_take(&mut self, store: &Store, epoch: u64, now: Duration, wall_ms: u64) -> store::Result<Step> {
        let previous = self.view.clone();
        let lease = Lease {
            epoch,
            holder: self.me.clone(),
            holder_incarnation: self.incarnation,
            renewal: 0,
            lease_ms: self.lease_len.as_millis() as u64,
            wall_ms,
            members: previous.as_ref().map(|p| p.members.clone()).unwrap_or_default(),
            offline: previous.as_ref().map(|p| p.offline.clone()).unwrap_or_default(),
            last_event: previous.as_ref().map(|p| p.last_event).unwrap_or(0),
            released: false,
            layout: previous.as_ref().and_then(|p| p.layout),
        };
        match store.create(&v2::lease(epoch), formats::encode(&lease)).await? {
            Created::Created => {
                self.known_epoch = Some(epoch);
                self.role = Role::Leader(Leadership { lease, renewed_at: now });
                self.next_renew_at = now + self.lease_len / 3;
                // Old leases are history; keep the two before ours for ops.
                // Best effort: the election is won whatever happens here.
                Self::delete_old_leases(store, epoch).await;
                Ok(Step::Elected { epoch, previous })
            }
            Created::Exists => {
                // Someone else won this epoch: watch it from now on.
                self.known_epoch = Some(epoch);
                if let Role::Follower { watched } = &mut self.role {
                    *watched = None;
                }
                Ok(Step::Nothing)
            }
        }
    }
}

/// Members of a view, for placing work and for `compactd nodes`.
pub fn members(view: Option<&Lease>) -> &[Member] {
    view.map(|l| l.members.as_slice()).unwrap_or(&[])
}

/// The newest readable lease (the monitor's member view). Folders and
/// unreadable files named like leases are skipped.
pub async fn newest_lease(store: &Store) -> store::Result<Option<formats::Lease>> {
    newest_lease_noting(store, &mut Vec::new()).await
}

/// [`newest_lease`], noting in `skipped` each entry named like a lease that
/// it passed over: a folder, or a file it read that is not a lease (bad,
/// malformed, unreadable). Only entries newer than the lease it returns are
/// looked at; `compactd nodes` names them.
pub async fn newest_lease_noting(
    store: &Store,
    skipped: &mut Vec<layouts::Anomaly>,
) -> store::Result<Option<formats::Lease>> {
    let mut epochs: Vec<(u64, bool)> = store
        .list(v2::ELECTION)
        .await?
        .iter()
        .filter_map(|e| v2::parse_lease_name(e.name()).map(|epoch| (epoch, e.is_dir)))
        .collect();
    epochs.sort_unstable();
    for (epoch, is_dir) in epochs.into_iter().rev() {
        let path = v2::lease(epoch);
        if is_dir {
            skipped.push(layouts::Anomaly::new(&path, "a folder stands where a lease file is expected"));
            continue;
        }
        match store.read(&path).await {
            Ok(Some(b)) => match formats::decode::<formats::Lease>(&b) {
                Ok(l) => return Ok(Some(l)),
                Err(e) => skipped.push(layouts::Anomaly::new(&path, format!("not a lease: {e}"))),
            },
            Ok(None) => {}
            Err(e) => skipped.push(layouts::Anomaly::new(&path, format!("not a lease: {e}"))),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const LEASE: Duration = Duration::from_millis(1500);

    fn node(n: &str) -> NodeId {
        NodeId::parse(n).unwrap()
    }

    #[tokio::test]
    async fn first_node_wins_epoch_one_and_others_follow() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        assert!(matches!(a.step(&store, Duration::ZERO, 0).await.unwrap(), Step::Elected { epoch: 1, .. }));
        assert_eq!(b.step(&store, Duration::ZERO, 0).await.unwrap(), Step::Nothing);
        assert!(a.is_leader() && !b.is_leader());
        assert_eq!(b.view().unwrap().holder, node("a"));
    }

    #[tokio::test]
    async fn takeover_only_after_a_full_lease_without_renewal_on_the_followers_clock() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        // a renews every 500 ms; b polls every 200 ms and never takes over
        for t in (0..6000).step_by(100) {
            if t % 500 == 0 {
                a.step(&store, t * MS, 0).await.unwrap();
            }
            if t % 200 == 0 {
                assert_eq!(b.step(&store, t * MS, 0).await.unwrap(), Step::Nothing, "at {t} ms");
            }
        }
        // a stops renewing at 5500 ms (its last renewal started at 5500)
        let mut t = 5600;
        loop {
            let step = b.step(&store, t * MS, 0).await.unwrap();
            if let Step::Elected { epoch, previous } = step {
                assert_eq!(epoch, 2);
                assert_eq!(previous.unwrap().holder, node("a"));
                break;
            }
            t += 200;
            assert!(t < 10_000);
        }
        assert!(t > 5500 + 1500, "took over at {t} ms, before the lease ran out");
        assert!(t <= 5500 + 1500 + 400, "took over at {t} ms, later than a lease plus one poll");
    }

    #[tokio::test]
    async fn a_paused_leader_is_fenced_on_resume() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        b.step(&store, Duration::ZERO, 0).await.unwrap();
        // a is paused; b takes over after the lease
        b.step(&store, 1600 * MS, 0).await.unwrap();
        assert!(b.is_leader());
        // a resumes at 1700 ms: its own clock says its lease lapsed
        let verdict = a.fence(&store, 1700 * MS).await.unwrap();
        assert!(matches!(verdict, Err(Fenced::Lapsed { epoch: 1, .. })), "{verdict:?}");
        assert!(!a.is_leader());
    }

    #[tokio::test]
    async fn a_leader_that_sees_a_newer_epoch_steps_down_even_within_its_lease() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        // a newer epoch appears (e.g. a follower with a faster clock)
        let mut c = Election::new(node("c"), 1, LEASE);
        c.known_epoch = Some(1);
        c.try_take(&store, 2, Duration::ZERO, 0).await.unwrap();
        assert_eq!(a.fence(&store, 100 * MS).await.unwrap(), Err(Fenced::Superseded { epoch: 1 }));
        assert!(!a.is_leader());
    }

    #[tokio::test]
    async fn the_fence_is_a_stat_of_the_next_lease_with_a_listing_once_per_lease() {
        use store::layers::{CountingLayer, OpCounter};
        let counter = OpCounter::new();
        let c2 = counter.clone();
        let store = Store::memory().await.layered(move |op| op.layer(CountingLayer::new(c2.clone())));
        let mut a = Election::new(node("a"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        assert_eq!(a.fence(&store, MS).await.unwrap(), Ok(1), "the first fence lists");
        let before = counter.snapshot();
        for i in 2..10 {
            assert_eq!(a.fence(&store, i * MS).await.unwrap(), Ok(1));
        }
        let spent = counter.snapshot() - before;
        assert_eq!((spent.stat, spent.list), (8, 0), "within a lease: one stat per fence, no listing: {spent}");
        // A newer epoch is seen by the stat at once.
        let mut c = Election::new(node("c"), 1, LEASE);
        c.known_epoch = Some(1);
        c.try_take(&store, 2, Duration::ZERO, 0).await.unwrap();
        assert_eq!(a.fence(&store, 20 * MS).await.unwrap(), Err(Fenced::Superseded { epoch: 1 }));

        // A lease edited by hand (epoch 3 without 2: no election makes
        // that) is caught by the listing within one lease.
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        assert_eq!(a.fence(&store, MS).await.unwrap(), Ok(1));
        store.put(&v2::lease(3), b"{}".to_vec()).await.unwrap();
        assert_eq!(a.fence(&store, 2 * MS).await.unwrap(), Ok(1), "the stat looks at epoch 2 only");
        a.renew_soon();
        assert!(matches!(a.step(&store, LEASE / 2, 0).await.unwrap(), Step::Nothing));
        a.renew_soon();
        assert!(matches!(a.step(&store, LEASE + MS, 0).await.unwrap(), Step::SteppedDown(Fenced::Superseded { .. })));
    }

    #[tokio::test]
    async fn a_released_lease_is_taken_over_at_once() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        b.step(&store, Duration::ZERO, 0).await.unwrap();
        a.release(&store, 0).await.unwrap();
        assert!(matches!(b.step(&store, 10 * MS, 0).await.unwrap(), Step::Elected { epoch: 2, .. }));
    }

    #[tokio::test]
    async fn a_malformed_lease_file_counts_as_unrenewed_not_as_an_error() {
        let store = Store::memory().await;
        store.put(&v2::lease(1), b"{ not json".to_vec()).await.unwrap();
        let mut b = Election::new(node("b"), 1, LEASE);
        assert_eq!(b.step(&store, Duration::ZERO, 0).await.unwrap(), Step::Nothing);
        assert!(matches!(b.step(&store, 1501 * MS, 0).await.unwrap(), Step::Elected { epoch: 2, .. }));
    }

    /// An empty folder at the next lease name once stopped election for
    /// good ("Is a directory" every round). Now it costs one lease: the
    /// holder steps down on seeing a newer name, and the followers take the
    /// epoch after it once it has not changed for a lease.
    #[tokio::test]
    async fn a_folder_at_the_next_lease_name_costs_one_lease_not_the_election() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&store::RootUri::Fs { root: dir.path().to_path_buf() }).await.unwrap();
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        assert!(matches!(a.step(&store, Duration::ZERO, 0).await.unwrap(), Step::Elected { epoch: 1, .. }));
        assert_eq!(b.step(&store, Duration::ZERO, 0).await.unwrap(), Step::Nothing);
        std::fs::create_dir_all(dir.path().join(v2::lease(2))).unwrap();
        let mut elected = None;
        for t in (100..20_000).step_by(100) {
            for e in [&mut a, &mut b] {
                if let Step::Elected { epoch, .. } = e.step(&store, t * MS, 0).await.unwrap() {
                    elected = Some((epoch, t));
                }
            }
            if elected.is_some() {
                break;
            }
        }
        let (epoch, t) = elected.expect("nobody was elected past the folder");
        assert_eq!(epoch, 3);
        assert!(t <= 2 * 1500 + 500, "elected at {t} ms");
        assert!(a.is_leader() != b.is_leader());
    }

    /// The layout in force never goes down in a node's view: not when a
    /// lease of an older monitor (which knows no layout field) follows one
    /// that said 3, nor when the node listed `Registry/Layout.3` itself.
    #[tokio::test]
    async fn the_layout_in_force_is_sticky_in_a_view() {
        let store = Store::memory().await;
        let mut a = Election::new(node("a"), 1, LEASE);
        let mut b = Election::new(node("b"), 1, LEASE);
        let mut c = Election::new(node("c"), 1, LEASE);
        a.step(&store, Duration::ZERO, 0).await.unwrap();
        b.step(&store, Duration::ZERO, 0).await.unwrap();
        assert_eq!(b.view().unwrap().layout(), 2);
        b.raise_layout_floor(3);
        assert_eq!(b.view().unwrap().layout(), 3, "raised by a listing");
        a.leadership_mut().unwrap().lease.layout = Some(3);
        a.step(&store, 600 * MS, 0).await.unwrap();
        c.step(&store, 700 * MS, 0).await.unwrap();
        assert_eq!(c.view().unwrap().layout(), 3);
        // An older monitor's lease: no layout.
        a.leadership_mut().unwrap().lease.layout = None;
        a.step(&store, 1200 * MS, 0).await.unwrap();
        for e in [&mut b, &mut c] {
            e.step(&store, 1300 * MS, 0).await.unwrap();
            assert_eq!(e.view().unwrap().renewal, 2, "the older lease was read");
            assert_eq!(e.view().unwrap().layout(), 3, "never lowered");
        }
    }
}
