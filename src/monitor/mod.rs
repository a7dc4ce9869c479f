//! The monitor's duties: judge membership, declare expired incarnations
//! offline exactly once, clean their ephemeral state, log the changes, and
//! purge old events and offline records.
//!
//! Every destructive step is preceded by [`Election::fence`]; a fenced
//! monitor stops at once and the node counts the refused action. Steps are
//! also idempotent, so a stale monitor that slipped through the fence
//! between its check and its write could only repeat what is already done:
//! the offline declaration itself is an atomic create (one winner), events
//! take the next free sequence number, and cleanup deletes only state that
//! still belongs to the declared incarnation.

mod layout;
pub mod tasks;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use layouts::formats::{self, EventKind, Heartbeat, Lease, Member, OfflineRecord};
use layouts::{v2, NodeId};
use store::{Created, Store};

use crate::cluster::election::{Election, Fenced};
use crate::cluster::events::{EventError, EventLog};
use crate::cluster::liveness::{HeartbeatCache, Observed, Tracker};
use layouts::Anomaly;

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("fenced: {0}")]
    Fenced(Fenced),
}

type Result<T> = std::result::Result<T, MonitorError>;

/// What one scan did, for logs and tests.
#[derive(Debug, Default)]
pub struct ScanReport {
    pub joined: Vec<Member>,
    pub declared_offline: Vec<Member>,
    pub left: Vec<Member>,
    pub anomalies: Vec<Anomaly>,
    pub view_changed: bool,
}

#[derive(Debug)]
pub struct Monitor {
    me: NodeId,
    epoch: u64,
    tracker: Tracker,
    beats: HeartbeatCache,
    /// The member whose heartbeat the last scan re-read ([`Monitor::next_refresh`]).
    refresh_cursor: Option<NodeId>,
    log: EventLog,
    members: BTreeMap<NodeId, Member>,
    offline: BTreeMap<(NodeId, u64), OfflineRecord>,
    retention: Duration,
    next_purge_at: Duration,
    /// Events kept at the last purge, and the newest sequence number then.
    kept_at_purge: Option<(usize, u64)>,
    /// The layout in force (`Registry/Layout.<n>`) and, while a higher one
    /// is not, since when every member has read it (see [`layout`]).
    pub(crate) layout: layout::Switch,
}

impl Monitor {
    /// Takes up the duties of `epoch`: opens the event log, logs the
    /// election, and finishes offline declarations a previous monitor left
    /// half done.
    pub async fn start(
        store: &Store,
        election: &mut Election,
        me: NodeId,
        previous: Option<Lease>,
        now: Duration,
        wall_ms: u64,
        retention: Duration,
    ) -> Result<Monitor> {
        let epoch = election.epoch().ok_or(MonitorError::Fenced(Fenced::Superseded { epoch: 0 }))?;
        let floor = previous.as_ref().map(|p| p.last_event).unwrap_or(0);
        let log = EventLog::open(store, floor).await?;
        let members = previous.iter().flat_map(|p| p.members.iter()).map(|m| (m.node.clone(), m.clone())).collect();
        let mut monitor = Monitor {
            me: me.clone(),
            epoch,
            tracker: Tracker::default(),
            beats: HeartbeatCache::default(),
            refresh_cursor: None,
            log,
            members,
            offline: BTreeMap::new(),
            retention,
            next_purge_at: now,
            kept_at_purge: None,
            layout: layout::Switch::default(),
        };
        monitor.layout.load(store).await?;
        monitor.require_office(store, election, now).await?;
        let first = epoch == 1 && monitor.log.last_seq() == 0;
        monitor.log.append(store, epoch, &monitor.me.clone(), wall_ms, EventKind::MonitorElected { node: me }).await?;
        for e in store.list(v2::OFFLINE).await? {
            if e.is_dir {
                continue; // foreign data; `compactd check` reports it
            }
            let Some(Ok(bytes)) = store.read_or_bad(&e.path).await? else {
                continue;
            };
            let Ok(rec) = formats::decode::<OfflineRecord>(&bytes) else {
                continue;
            };
            monitor.offline.insert((rec.node.clone(), rec.incarnation), rec);
        }
        monitor.layout.first_monitor(first && monitor.offline.is_empty());
        monitor.finish_pending(store, election, now, wall_ms).await?;
        monitor.publish(election);
        Ok(monitor)
    }

    /// The monitor epoch fence ([`Election::fence`]) before a membership duty.
    async fn require_office(&self, store: &Store, election: &mut Election, now: Duration) -> Result<()> {
        election.fence(store, now).await?.map(|_| ()).map_err(MonitorError::Fenced)
    }

    /// One round of membership judgement.
    pub async fn scan(
        &mut self,
        store: &Store,
        election: &mut Election,
        now: Duration,
        wall_ms: u64,
    ) -> Result<ScanReport> {
        let mut report = ScanReport::default();
        // A member's beat is read off the listing; the content of any other
        // incarnation is read as soon as its file changes (a joining node,
        // one declared offline and rejoining, one whose join marker names a
        // newer incarnation), and one member's per scan in turn.
        let joins = read_joins(store, &mut report.anomalies).await?;
        // A join marker naming a member's own incarnation: the node changed
        // what its heartbeat says (it drains), read it whatever its listing.
        let mut refresh: Vec<NodeId> = joins
            .iter()
            .filter(|(n, inc)| self.members.get(n).is_some_and(|m| m.incarnation == *inc))
            .map(|(n, _)| n.clone())
            .collect();
        refresh.extend(self.next_refresh());
        let members = &self.members;
        let newest_join = |n: &NodeId| joins.iter().filter(|(j, _)| j == n).map(|(_, inc)| *inc).max();
        let (sightings, anomalies) = self
            .beats
            .scan(
                store,
                |hb| {
                    members.get(&hb.node).is_none_or(|m| m.incarnation != hb.incarnation)
                        || newest_join(&hb.node).is_some_and(|inc| inc > hb.incarnation)
                },
                &refresh,
            )
            .await?;
        report.anomalies.extend(anomalies);
        // A change is stamped once the listing that shows it returned, not
        // at the tick's start: the beat may have landed after that start
        // (this monitor's own beat and renewal come first), and a stamp
        // before the landing would declare the node early. Expiry below is
        // judged on `now`, from before the listing: the safe way too.
        let listed_at = election.fresh(now);

        // Every sighting is observed before anything is written: a write
        // that fails ends the scan, and a beat seen in the listing is
        // reported once, so it must reach the tracker first.
        let mut actions: Vec<(Option<Member>, Option<&Heartbeat>)> = vec![];
        for s in sightings.values() {
            let hb = &s.hb;
            if self.offline.contains_key(&(hb.node.clone(), hb.incarnation)) {
                continue; // a declared incarnation that is still writing: it will rejoin
            }
            let observed = self.tracker.observe(hb, s.moved, listed_at);
            let member = self.members.get(&hb.node);
            // The node restarted under the same id: its old incarnation is
            // gone for good, whatever the old one was doing.
            let replaced = member.filter(|m| m.incarnation != hb.incarnation).cloned();
            let is_member = member.is_some_and(|m| m.incarnation == hb.incarnation);
            // A member once its beat is seen to move, or at once if the
            // incarnation has just started or its file changed since the
            // last scan (a restart noticed at a content read; a dead
            // leftover that never beats again is declared offline after its
            // session timeout anyway).
            // A member's file now naming a newer incarnation is a restart:
            // the new one joins at once, as the old one is declared.
            let fresh = observed == Observed::New && (hb.beat <= 2 || s.moved || replaced.is_some());
            let joins = !is_member && (fresh || matches!(observed, Observed::Beat { .. }));
            if is_member && member.is_some_and(|m| *m != member_of(hb)) {
                // What the member advertises changed (it drains): no event,
                // the view shows it.
                self.members.insert(hb.node.clone(), member_of(hb));
            }
            if replaced.is_some() || joins {
                actions.push((replaced, joins.then_some(hb)));
            }
        }
        for (replaced, joins) in actions {
            if let Some(old) = replaced {
                self.declare_offline(store, election, &old, now, wall_ms).await?;
                report.declared_offline.push(old);
            }
            if let Some(hb) = joins {
                self.join(store, election, hb, now, wall_ms).await?;
                report.joined.push(member_of(hb));
            }
        }

        // A heartbeat listed but unreadable this time is not gone: judge
        // departures at a scan that read everything it listed.
        let complete = self.beats.unreadable().is_empty();
        for gone in
            if complete { self.tracker.retain_present(|n| sightings.get(n).map(|s| s.hb.incarnation)) } else { vec![] }
        {
            // Replaced by a new incarnation (handled above), or not a member.
            if !sightings.contains_key(&gone.node)
                && self.members.get(&gone.node).is_some_and(|m| m.incarnation == gone.incarnation)
            {
                self.leave(store, election, gone, now, wall_ms, &mut report).await?;
            }
        }
        // Members carried over from the previous monitor's view whose
        // heartbeat file is gone left while nobody watched.
        let absent: Vec<Member> =
            self.members.values().filter(|m| complete && !sightings.contains_key(&m.node)).cloned().collect();
        for m in absent {
            self.leave(store, election, m, now, wall_ms, &mut report).await?;
        }

        // A join marker has served once the heartbeat shows its incarnation
        // (or a newer one), or the file is gone (a new file is read anyway).
        let served: Vec<(NodeId, u64)> = joins
            .into_iter()
            .filter(|(node, inc)| sightings.get(node).is_none_or(|s| s.hb.incarnation >= *inc))
            .collect();
        if !served.is_empty() {
            self.require_office(store, election, now).await?;
        }
        for (node, inc) in served {
            store.delete(&v2::join_marker(&node, inc)).await?;
        }

        self.finish_pending(store, election, now, wall_ms).await?;
        for m in self.tracker.expired(now) {
            self.declare_offline(store, election, &m, now, wall_ms).await?;
            report.declared_offline.push(m);
        }

        if now >= self.next_purge_at {
            self.purge(store, election, now, wall_ms).await?;
            self.next_purge_at = now + Duration::from_secs(60);
            // A layout marker made by hand is found within a minute, and a
            // tripwire undone by hand is armed again.
            self.layout.load(store).await?;
            self.layout.look_again();
        }
        let members: Vec<&Member> = self.members.values().collect();
        self.layout.settle_fresh(store, &members).await?;
        if let Some(n) = self.layout.due(&members, now) {
            self.require_office(store, election, now).await?;
            let switch = layouts::v3::LayoutSwitch { layout: n, epoch: self.epoch, monitor: self.me.clone(), wall_ms };
            self.layout.raise(store, switch).await?;
            tracing::info!(layout = n, "every member reads layout {n}: it is in force");
        }
        self.layout.arm_tripwire(store, wall_ms, &self.me).await;
        report.view_changed = self.publish(election);
        Ok(report)
    }

    /// A member whose heartbeat file is gone left cleanly (SIGTERM).
    async fn leave(
        &mut self,
        store: &Store,
        election: &mut Election,
        m: Member,
        now: Duration,
        wall_ms: u64,
        report: &mut ScanReport,
    ) -> Result<()> {
        self.require_office(store, election, now).await?;
        self.members.remove(&m.node);
        let kind = EventKind::NodeLeft { node: m.node.clone(), incarnation: m.incarnation };
        self.log.append(store, self.epoch, &self.me, wall_ms, kind).await?;
        report.left.push(m);
        Ok(())
    }

    async fn join(
        &mut self,
        store: &Store,
        election: &mut Election,
        hb: &Heartbeat,
        now: Duration,
        wall_ms: u64,
    ) -> Result<()> {
        self.require_office(store, election, now).await?;
        self.members.insert(hb.node.clone(), member_of(hb));
        self.log
            .append(
                store,
                self.epoch,
                &self.me,
                wall_ms,
                EventKind::NodeJoined { node: hb.node.clone(), incarnation: hb.incarnation },
            )
            .await?;
        Ok(())
    }

    /// Declares `m` offline: once, by atomic create of its marker, then the
    /// follow-up steps (event, cleanup, marker update), each idempotent so a
    /// later monitor can finish them after a crash.
    async fn declare_offline(
        &mut self,
        store: &Store,
        election: &mut Election,
        m: &Member,
        now: Duration,
        wall_ms: u64,
    ) -> Result<()> {
        self.require_office(store, election, now).await?;
        let rec = OfflineRecord {
            node: m.node.clone(),
            incarnation: m.incarnation,
            epoch: self.epoch,
            declared_by: self.me.clone(),
            wall_ms,
            cleaned: false,
            event_seq: None,
        };
        // Decide in memory first: if the create below fails, or lands but
        // its reply is lost, `finish_pending` completes the declaration
        // instead of it being forgotten.
        if self.members.get(&m.node).is_some_and(|x| x.incarnation == m.incarnation) {
            self.members.remove(&m.node);
        }
        self.tracker.forget(&m.node, m.incarnation);
        self.offline.insert((m.node.clone(), m.incarnation), rec.clone());
        let rec = self.create_marker(store, rec).await?;
        tracing::warn!(node = %m.node, incarnation = m.incarnation, epoch = rec.epoch, "declared offline: no heartbeat for {} ms", m.session_timeout_ms);
        self.offline.insert((m.node.clone(), m.incarnation), rec.clone());
        if !rec.cleaned {
            let done = self.finish_offline(store, rec, wall_ms).await?;
            self.offline.insert((m.node.clone(), m.incarnation), done);
        }
        Ok(())
    }

    /// Creates the marker (the declaration itself); if it exists, returns
    /// what it says (a parse failure means it is being written by a monitor
    /// that crashed mid-create: ours is as good).
    async fn create_marker(&self, store: &Store, rec: OfflineRecord) -> Result<OfflineRecord> {
        let path = v2::offline_marker(&rec.node, rec.incarnation);
        Ok(match store.create(&path, formats::encode(&rec)).await? {
            Created::Created => rec,
            Created::Exists => {
                match store.read_or_bad(&path).await?.map(|b| b.ok().map(|b| formats::decode::<OfflineRecord>(&b))) {
                    Some(Some(Ok(existing))) => existing,
                    _ => rec,
                }
            }
        })
    }

    /// Finishes declarations whose follow-up steps failed earlier.
    async fn finish_pending(
        &mut self,
        store: &Store,
        election: &mut Election,
        now: Duration,
        wall_ms: u64,
    ) -> Result<()> {
        let pending: Vec<OfflineRecord> = self.offline.values().filter(|r| !r.cleaned).cloned().collect();
        for mut rec in pending {
            self.require_office(store, election, now).await?;
            let key = (rec.node.clone(), rec.incarnation);
            // A write whose reply was lost may have landed: continue from
            // what the marker says, never from an older copy in memory.
            let path = v2::offline_marker(&rec.node, rec.incarnation);
            match store.read_or_bad(&path).await?.map(|b| b.ok().map(|b| formats::decode::<OfflineRecord>(&b))) {
                Some(Some(Ok(on_disk))) => {
                    rec.cleaned |= on_disk.cleaned;
                    rec.event_seq = rec.event_seq.or(on_disk.event_seq);
                }
                Some(_) => {}
                None => rec = self.create_marker(store, rec).await?,
            }
            let done = if rec.cleaned { rec } else { self.finish_offline(store, rec, wall_ms).await? };
            self.offline.insert(key, done);
        }
        Ok(())
    }

    async fn finish_offline(&mut self, store: &Store, mut rec: OfflineRecord, wall_ms: u64) -> Result<OfflineRecord> {
        if rec.event_seq.is_none() {
            let seq = self
                .log
                .append(
                    store,
                    self.epoch,
                    &self.me,
                    wall_ms,
                    EventKind::NodeOffline { node: rec.node.clone(), incarnation: rec.incarnation },
                )
                .await?;
            rec.event_seq = Some(seq);
            // Remember the event, so that a retry does not log it twice.
            store.put(&v2::offline_marker(&rec.node, rec.incarnation), formats::encode(&rec)).await?;
        }
        // Ephemeral state of that incarnation: its heartbeat, unless the
        // node already came back under a new incarnation.
        let hb_path = v2::heartbeat(&rec.node);
        if let Some(Ok(bytes)) = store.read_or_bad(&hb_path).await? {
            if formats::decode::<Heartbeat>(&bytes).is_ok_and(|hb| hb.incarnation == rec.incarnation) {
                store.delete(&hb_path).await?;
                // Nobody reads an offline node's inbox stamp; a restart
                // under the id reads its folder in full anyway.
                store.delete(&v2::inbox(&rec.node)).await?;
            }
        }
        rec.cleaned = true;
        store.put(&v2::offline_marker(&rec.node, rec.incarnation), formats::encode(&rec)).await?;
        Ok(rec)
    }

    async fn purge(&mut self, store: &Store, election: &mut Election, now: Duration, wall_ms: u64) -> Result<()> {
        self.require_office(store, election, now).await?;
        let p = EventLog::purge(store, wall_ms, self.retention).await?;
        self.kept_at_purge = Some((p.kept, self.log.last_seq()));
        let horizon = wall_ms.saturating_sub(self.retention.as_millis() as u64);
        let old: Vec<(NodeId, u64)> =
            self.offline.iter().filter(|(_, r)| r.cleaned && r.wall_ms < horizon).map(|(k, _)| k.clone()).collect();
        for (node, inc) in old {
            store.delete(&v2::offline_marker(&node, inc)).await?;
            self.offline.remove(&(node, inc));
        }
        Ok(())
    }

    /// Change events in the log: counted at the last purge, plus those
    /// appended since. `None` before the first purge.
    pub fn events_kept(&self) -> Option<usize> {
        self.kept_at_purge.map(|(kept, seq)| kept + self.log.last_seq().saturating_sub(seq) as usize)
    }

    /// Writes the member view into the lease body; true if it changed.
    fn publish(&self, election: &mut Election) -> bool {
        let Some(l) = election.leadership_mut() else {
            return false;
        };
        let members: Vec<Member> = self.members.values().cloned().collect();
        let offline: Vec<Member> =
            self.offline.values().map(|r| Member::bare(r.node.clone(), r.incarnation, 0)).collect();
        let last_event = self.log.last_seq();
        let layout = self.layout.published();
        let changed = l.lease.members != members
            || l.lease.offline != offline
            || l.lease.last_event != last_event
            || l.lease.layout != layout;
        l.lease.layout = layout;
        l.lease.members = members;
        l.lease.offline = offline;
        l.lease.last_event = last_event;
        changed
    }

    /// The member whose heartbeat content this scan reads whatever its
    /// listing says: each in turn, one per scan.
    fn next_refresh(&mut self) -> Option<NodeId> {
        use std::ops::Bound::{Excluded, Unbounded};
        let after = self.refresh_cursor.take();
        let next = match &after {
            Some(a) => self.members.range((Excluded(a), Unbounded)).next().map(|(n, _)| n.clone()),
            None => None,
        }
        .or_else(|| self.members.keys().next().cloned());
        self.refresh_cursor = next.clone();
        next
    }

    pub fn members(&self) -> BTreeSet<NodeId> {
        self.members.keys().cloned().collect()
    }
}

/// The join markers in `Registry/Joins/` (one LIST, usually empty); names
/// that do not parse are anomalies and left alone.
async fn read_joins(store: &Store, bad: &mut Vec<Anomaly>) -> store::Result<Vec<(NodeId, u64)>> {
    let mut out = vec![];
    for e in store.list(v2::JOINS).await? {
        match v2::parse_offline_marker(e.name()).filter(|_| !e.is_dir) {
            Some(j) => out.push(j),
            None => bad.push(Anomaly::new(&e.path, "a join marker must be a file named <node>.<incarnation>")),
        }
    }
    Ok(out)
}

fn member_of(hb: &Heartbeat) -> Member {
    Member {
        node: hb.node.clone(),
        incarnation: hb.incarnation,
        session_timeout_ms: hb.session_timeout_ms,
        commands: hb.commands.clone(),
        addr: hb.addr.clone(),
        executor: hb.executor.clone(),
        executors: hb.executors.clone(),
        slots: hb.slots,
        layouts: hb.layouts.clone(),
        draining: hb.draining,
    }
}
