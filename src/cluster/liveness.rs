//! Membership: heartbeat files and the liveness judge.
//!
//! Each node rewrites `Registry/Nodes/<node>` every heartbeat interval with an
//! increasing `beat`. The monitor lists them and judges liveness with a
//! [`Tracker`] on its own monotonic clock: an incarnation is alive while its
//! heartbeat changed within its own session timeout (each node declares its
//! timeout in its heartbeat). Wall clocks are never compared across nodes.
//!
//! What changed is read off the listing ([`HeartbeatCache`]): every rewrite
//! changes the object's version (S3's ETag, fs's time and size), so a member's
//! beat costs the monitor no GET. Content is read only when the monitor needs
//! it: a file it has not read yet, a changed file whose incarnation is not a
//! member (joining, or declared offline and coming back), a node that left a
//! join marker (`Registry/Joins/<node>.<incarnation>`: a restart under the
//! same id, whose beats look like the old incarnation's in a listing), a
//! backend whose listing carries no version, and one member per scan in turn
//! (the net under nodes of older versions that leave no join marker). So a
//! scan costs one LIST per 1,000 nodes plus reads that follow changes, not
//! cluster size.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use layouts::formats::{self, Heartbeat, Member};
use layouts::{v2, NodeId};
use store::Store;

use layouts::Anomaly;

/// What the monitor knows about one incarnation's heartbeat.
#[derive(Debug, Clone)]
struct Seen {
    incarnation: u64,
    session_timeout: Duration,
    /// Local monotonic time at which the heartbeat was last seen to change
    /// (or the incarnation first seen).
    changed_at: Duration,
    /// Whether the heartbeat has been seen to change at least once: a file
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
    /// The heartbeat changed; `first` is true the first time it does.
    Beat {
        first: bool,
    },
    Unchanged,
}

impl Tracker {
    /// Records one sighting of `hb`; `moved` says whether the file changed
    /// since the previous sighting ([`Sighting::moved`]).
    pub fn observe(&mut self, hb: &Heartbeat, moved: bool, now: Duration) -> Observed {
        let timeout = Duration::from_millis(hb.session_timeout_ms);
        match self.seen.get_mut(&hb.node) {
            Some(s) if s.incarnation == hb.incarnation => {
                s.session_timeout = timeout;
                if moved {
                    s.changed_at = now;
                    let first = !s.seen_alive;
                    s.seen_alive = true;
                    Observed::Beat { first }
                } else {
                    Observed::Unchanged
                }
            }
            _ => {
                let seen =
                    Seen { incarnation: hb.incarnation, session_timeout: timeout, changed_at: now, seen_alive: false };
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
            .map(|(node, s)| Member::bare(node.clone(), s.incarnation, s.session_timeout.as_millis() as u64))
            .collect()
    }

    /// Forgets nodes that have no heartbeat file any more; returns them.
    /// `present` gives the incarnation each listed heartbeat holds.
    pub fn retain_present(&mut self, present: impl Fn(&NodeId) -> Option<u64>) -> Vec<Member> {
        let gone: Vec<Member> = self
            .seen
            .iter()
            .filter(|(n, s)| present(n) != Some(s.incarnation))
            .map(|(n, s)| Member::bare(n.clone(), s.incarnation, s.session_timeout.as_millis() as u64))
            .collect();
        for m in &gone {
            if present(&m.node).is_none() {
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

/// Heartbeat reads a scan has in flight at once.
const READ_CONCURRENCY: usize = 16;

/// One heartbeat as a scan saw it.
#[derive(Debug, Clone)]
pub struct Sighting {
    /// The content as last read (possibly at an earlier scan).
    pub hb: Heartbeat,
    /// The file changed since the previous scan: its listed version differs,
    /// or (where listings carry no version) its `beat` does.
    pub moved: bool,
}

#[derive(Debug, Clone)]
struct Cached {
    version: Option<String>,
    hb: Heartbeat,
}

/// The monitor's memory of the heartbeat files between scans: each file's
/// listed version and its content when last read (see the module docs for
/// when content is read).
#[derive(Debug, Default)]
pub struct HeartbeatCache {
    files: BTreeMap<NodeId, Cached>,
    reads: u64,
    /// Listed but unread at the last scan (the read failed, nothing cached).
    unreadable: Vec<NodeId>,
}

impl HeartbeatCache {
    /// One listing of `Registry/Nodes/`, and a read of each file whose
    /// content is needed: not cached yet, unversioned, changed while
    /// `must_read` says so of its cached content (an incarnation that is not
    /// a member, or one a join marker says was replaced), or in `refresh`
    /// (read whatever the listing says).
    /// Invalid files are anomalies and otherwise skipped, as in
    /// [`read_heartbeats`].
    pub async fn scan(
        &mut self,
        store: &Store,
        must_read: impl Fn(&Heartbeat) -> bool,
        refresh: &[NodeId],
    ) -> store::Result<(BTreeMap<NodeId, Sighting>, Vec<Anomaly>)> {
        let mut out = BTreeMap::new();
        let mut bad = Vec::new();
        self.unreadable.clear();
        let mut to_read = vec![];
        for e in store.list(v2::NODES).await? {
            let Some(node) = heartbeat_node(&e, &mut bad) else { continue };
            let cached = self.files.get(&node);
            let changed = cached.is_none_or(|c| c.version.is_none() || c.version != e.version);
            if let Some(c) = cached.filter(|_| e.version.is_some() && !refresh.contains(&node)) {
                if !changed || !must_read(&c.hb) {
                    let s = Sighting { hb: c.hb.clone(), moved: changed };
                    self.files.get_mut(&node).expect("cached").version = e.version;
                    out.insert(node, s);
                    continue;
                }
            }
            to_read.push((node, e, changed));
        }
        // A new monitor reads every heartbeat once: several at a time, so
        // that a thousand of them take a second on S3, not fifteen.
        self.reads += to_read.len() as u64;
        let fetched: Vec<_> = futures::stream::iter(to_read)
            .map(|(node, e, changed)| async move {
                let r = fetch_heartbeat(store, &e.path, &node).await;
                (node, e, changed, r)
            })
            .buffered(READ_CONCURRENCY)
            .collect()
            .await;
        for (node, e, changed, r) in fetched {
            let hb = match r {
                Ok(Some(Ok(hb))) => hb,
                Ok(found) => {
                    bad.extend(found.and_then(Result::err));
                    self.files.remove(&node);
                    continue;
                }
                Err(err) => {
                    // One failed GET must not fail the scan of a thousand
                    // nodes: go on with what is cached (the version is not
                    // updated, so the read is tried again next scan).
                    tracing::warn!(%node, "reading a heartbeat failed: {err}");
                    match self.files.get(&node) {
                        Some(c) => {
                            out.insert(node, Sighting { hb: c.hb.clone(), moved: changed });
                        }
                        None => self.unreadable.push(node),
                    }
                    continue;
                }
            };
            let moved = match self.files.get(&node) {
                Some(c) if c.version.is_some() && e.version.is_some() => c.version != e.version,
                Some(c) => c.hb.beat != hb.beat || c.hb.incarnation != hb.incarnation,
                None => false,
            };
            self.files.insert(node.clone(), Cached { version: e.version, hb: hb.clone() });
            out.insert(node, Sighting { hb, moved });
        }
        let unreadable = &self.unreadable;
        self.files.retain(|n, _| out.contains_key(n) || unreadable.contains(n));
        Ok((out, bad))
    }

    /// Heartbeats the last scan listed but could not read (and had not
    /// read before): present, though absent from its result.
    pub fn unreadable(&self) -> &[NodeId] {
        &self.unreadable
    }

    /// Heartbeat files read (GETs) so far.
    pub fn reads(&self) -> u64 {
        self.reads
    }
}

/// The node a listed heartbeat entry names, or an anomaly.
fn heartbeat_node(e: &store::Entry, bad: &mut Vec<Anomaly>) -> Option<NodeId> {
    if e.is_dir {
        bad.push(Anomaly::new(&e.path, "a folder stands where a heartbeat file is expected"));
        return None;
    }
    match NodeId::parse(e.name()) {
        Ok(node) => Some(node),
        Err(_) => {
            bad.push(Anomaly::new(&e.path, "file name is not a valid node id"));
            None
        }
    }
}

/// Reads and checks one heartbeat file: `None` if it is gone, an anomaly if
/// it is not a valid heartbeat of `node`.
async fn fetch_heartbeat(
    store: &Store,
    path: &str,
    node: &NodeId,
) -> store::Result<Option<Result<Heartbeat, Anomaly>>> {
    let bytes = match store.read_or_bad(path).await? {
        None => return Ok(None),
        Some(Ok(bytes)) => bytes,
        Some(Err(bad)) => return Ok(Some(Err(Anomaly::new(path, format!("not a heartbeat: {bad}"))))),
    };
    Ok(Some(match formats::decode::<Heartbeat>(&bytes) {
        Ok(hb) if hb.node == *node => Ok(hb),
        Ok(hb) => Err(Anomaly::new(path, format!("heartbeat names node {:?}, not its file name", hb.node.as_str()))),
        Err(err) => Err(Anomaly::new(path, format!("not a heartbeat: {err}"))),
    }))
}

/// Reads every heartbeat file (`status`, `check`). Files that are not valid
/// heartbeats (bad name, malformed, not matching their name) are returned as
/// anomalies and otherwise skipped.
pub async fn read_heartbeats(store: &Store) -> store::Result<(BTreeMap<NodeId, Heartbeat>, Vec<Anomaly>)> {
    let (dated, bad) = read_heartbeats_dated(store).await?;
    Ok((dated.into_iter().map(|(k, d)| (k, d.beat)).collect(), bad))
}

/// A heartbeat with the backend's timestamp of its file.
#[derive(Debug, Clone)]
pub struct DatedHeartbeat {
    pub beat: Heartbeat,
    /// The listing's modification time of the file (the backend's clock).
    pub modified_ms: Option<i64>,
}

impl DatedHeartbeat {
    /// The writer's wall clock minus the backend's, from one heartbeat:
    /// `wall_ms` is read just before the write, the backend stamps the
    /// write on arrival. Off by the write's latency (a few ms, S3's whole
    /// seconds) and, when the file was rewritten between the listing and
    /// the read, by up to one heartbeat interval.
    pub fn clock_skew_ms(&self) -> Option<i64> {
        self.modified_ms.map(|m| self.beat.wall_ms as i64 - m)
    }
}

/// [`read_heartbeats`] with each file's backend timestamp (no extra request:
/// the listing carries it).
pub async fn read_heartbeats_dated(store: &Store) -> store::Result<(BTreeMap<NodeId, DatedHeartbeat>, Vec<Anomaly>)> {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for e in store.list(v2::NODES).await? {
        let Some(node) = heartbeat_node(&e, &mut bad) else { continue };
        match fetch_heartbeat(store, &e.path, &node).await? {
            Some(Ok(hb)) => {
                out.insert(node, DatedHeartbeat { beat: hb, modified_ms: e.modified_ms });
            }
            Some(Err(a)) => bad.push(a),
            None => {}
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
            executor: None,
            executors: None,
            slots: None,
            layouts: None,
            draining: false,
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn expiry_uses_each_nodes_own_timeout_on_the_local_clock() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(&hb("a", 1, 1, 1000), false, Duration::ZERO), Observed::New);
        assert_eq!(t.observe(&hb("b", 1, 1, 3000), false, Duration::ZERO), Observed::New);
        assert_eq!(t.observe(&hb("a", 1, 2, 1000), true, 500 * MS), Observed::Beat { first: true });
        assert_eq!(t.observe(&hb("a", 1, 2, 1000), false, 700 * MS), Observed::Unchanged);
        assert_eq!(t.observe(&hb("a", 1, 3, 1000), true, 900 * MS), Observed::Beat { first: false });
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
        t.observe(&hb("a", 1, 5, 1000), false, Duration::ZERO);
        assert_eq!(t.observe(&hb("a", 2, 0, 1000), true, 1500 * MS), Observed::New);
        assert!(t.expired(2000 * MS).is_empty());
        t.forget(&NodeId::parse("a").unwrap(), 1); // old incarnation: no effect
        assert!(!t.expired(2600 * MS).is_empty());
    }

    #[tokio::test]
    async fn a_scan_reads_a_members_beat_off_the_listing_and_content_only_when_needed() {
        fn by_name(s: BTreeMap<NodeId, Sighting>) -> BTreeMap<String, Sighting> {
            s.into_iter().map(|(n, s)| (n.as_str().to_string(), s)).collect()
        }
        let store = Store::memory().await;
        let put = |hb: Heartbeat| {
            let store = store.clone();
            async move { store.put(&v2::heartbeat(&hb.node), formats::encode(&hb)).await.unwrap() }
        };
        for n in ["a", "b", "c"] {
            put(hb(n, 1, 1, 1000)).await;
        }
        let mut cache = HeartbeatCache::default();
        // a and b are members of incarnation 1; c is joining: read on change.
        let must = |hb: &Heartbeat| hb.node.as_str() == "c";
        let (s, bad) = cache.scan(&store, must, &[]).await.unwrap();
        assert!(bad.is_empty());
        assert_eq!((s.len(), cache.reads()), (3, 3), "first sighting: every file is read");
        assert!(s.values().all(|s| !s.moved));

        put(hb("a", 1, 2, 1000)).await;
        put(hb("c", 1, 2, 1000)).await;
        let s = by_name(cache.scan(&store, must, &[]).await.unwrap().0);
        assert!(s["a"].moved && !s["b"].moved && s["c"].moved);
        assert_eq!(s["a"].hb.beat, 1, "a's beat was read off the listing, not its content");
        assert_eq!(s["c"].hb.beat, 2, "c is not a member: its change is read");
        assert_eq!(cache.reads(), 4);

        for _ in 0..10 {
            cache.scan(&store, must, &[]).await.unwrap();
        }
        assert_eq!(cache.reads(), 4, "nothing changed, nothing read, however many scans");

        // A restart under the same id looks like a beat in the listing: read
        // when a join marker makes `must_read` say so, or when refreshed.
        put(hb("a", 2, 1, 1000)).await;
        let s = by_name(cache.scan(&store, must, &[]).await.unwrap().0);
        assert_eq!((s["a"].hb.incarnation, s["a"].moved, cache.reads()), (1, true, 4));
        put(hb("a", 2, 2, 1000)).await;
        let joined = |hb: &Heartbeat| hb.node.as_str() == "a" && hb.incarnation < 2;
        let s = by_name(cache.scan(&store, joined, &[]).await.unwrap().0);
        assert_eq!((s["a"].hb.incarnation, cache.reads()), (2, 5), "read because of the join marker");
        put(hb("b", 7, 1, 1000)).await;
        let b = NodeId::parse("b").unwrap();
        let s = by_name(cache.scan(&store, |_| false, std::slice::from_ref(&b)).await.unwrap().0);
        assert_eq!((s["b"].hb.incarnation, cache.reads()), (7, 6), "the refreshed node is read");

        // A vanished file is forgotten; garbage is an anomaly, not an error.
        store.delete(&v2::heartbeat(&b)).await.unwrap();
        store.put(&format!("{}{}", v2::NODES, "d"), b"{ not json".to_vec()).await.unwrap();
        let (s, bad) = cache.scan(&store, must, &[]).await.unwrap();
        let s = by_name(s);
        assert!(!s.contains_key("b") && !s.contains_key("d"));
        assert_eq!(bad.len(), 1, "{bad:?}");
    }

    #[test]
    fn vanished_heartbeats_are_reported() {
        let mut t = Tracker::default();
        t.observe(&hb("a", 1, 1, 1000), false, Duration::ZERO);
        t.observe(&hb("b", 1, 1, 1000), false, Duration::ZERO);
        let mut present = BTreeMap::new();
        present.insert(NodeId::parse("a").unwrap(), hb("a", 1, 2, 1000));
        let gone = t.retain_present(|n| present.get(n).map(|hb| hb.incarnation));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].node.as_str(), "b");
        assert!(t.retain_present(|n| present.get(n).map(|hb| hb.incarnation)).is_empty());
    }
}
