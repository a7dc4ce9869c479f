//! The cluster-wide layout switch (layouts/README.md, "Layouts and the
//! switch"): the monitor puts a layout in force by creating
//! `Registry/Layout.<n>` once every member has advertised it for a whole
//! session (the newest such layout this version writes: from 2 straight
//! to 4 when every member reads 4), and publishes the layout in force in
//! its lease.
//!
//! Invariants:
//! - A marker is created once and never removed: the highest present is in
//!   force. Until it exists every manager writes layout 2, which every
//!   version reads; after, managers write the layout in force, and only to
//!   nodes that advertise it.
//! - It is raised only while every member advertises the layout (a node
//!   pinned with `run --max-layout` below it does not), continuously for the
//!   longest session among them on this monitor's clock: a node of an older
//!   version that was starting meanwhile has joined by then, and resets the
//!   wait.
//! - A fresh tree skips that wait (layouts/PROTOCOL.md, "A fresh tree
//!   starts at the newest layout"): its first monitor finds no trace of an
//!   older node, layout or task, and every node that claimed its id there
//!   is a member that advertises the newest layout. No member can then be
//!   an older node missing for a restart; one that starts later joins a
//!   tree whose newest layout is in force, as it would a session later.

use std::time::Duration;

use futures::TryStreamExt;
use layouts::formats::{self, Heartbeat, Member};
use layouts::{v1, v2, v3};
use store::Store;

#[derive(Debug, Default)]
pub(crate) struct Switch {
    /// The highest `Registry/Layout.<n>` listed or created (0: none).
    in_force: u32,
    /// The layout every member reads, above the one in force, and since
    /// when (this monitor's clock) they all do.
    since: Option<(u32, Duration)>,
    fresh: Fresh,
    /// The layout of the tripwire this monitor found or armed (0: none yet,
    /// or time to look again).
    tripwire: u32,
}

/// How far this monitor got in telling whether the tree is fresh.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// Not fresh, or not the tree's first monitor: the switch waits.
    #[default]
    No,
    /// The tree's first monitor (epoch 1, no event, no declaration), which
    /// has not looked at the tree yet.
    First,
    /// No trace of an older node, layout or task: waiting for the
    /// heartbeats of the nodes that claimed their id and have not beaten.
    Pending,
    /// Every node that started here advertises the newest layout.
    Yes,
}

impl Switch {
    /// Lists `Registry/` for layout markers (one LIST, a few entries).
    pub(crate) async fn load(&mut self, store: &Store) -> store::Result<()> {
        self.in_force = self.in_force.max(crate::tasks::listed_layout(store).await?);
        Ok(())
    }

    /// The layout in force.
    pub(crate) fn in_force(&self) -> u32 {
        self.in_force.max(v3::LAYOUT_2)
    }

    /// What the lease says of it (nothing for layout 2: older readers).
    pub(crate) fn published(&self) -> Option<u32> {
        (self.in_force() > v3::LAYOUT_2).then_some(self.in_force())
    }

    /// The layout to raise now, if its time came: every member has read it
    /// for the longest of their sessions.
    pub(crate) fn due(&mut self, members: &[&Member], now: Duration) -> Option<u32> {
        let in_force = self.in_force();
        let next = v3::READS
            .iter()
            .copied()
            .filter(|l| *l > in_force && !members.is_empty() && members.iter().all(|m| m.reads(*l)))
            .max();
        let Some(next) = next else {
            self.since = None;
            return None;
        };
        if self.fresh == Fresh::Yes && next == v3::NEWEST {
            return Some(next);
        }
        // A member that reads less than before (it restarted pinned, or
        // older) starts the wait over for what all read now.
        let since = match self.since {
            Some((l, t)) if l == next => t,
            _ => now,
        };
        self.since = Some((next, since));
        let session = Duration::from_millis(members.iter().map(|m| m.session_timeout_ms).max().unwrap_or(0));
        (now.saturating_sub(since) >= session).then_some(next)
    }

    /// Creates `Registry/Layout.<n>` with what put it in force (the caller
    /// ran the fence check); `Layout.3` empty, as the versions that read
    /// layout 3 but not 4 write it and their `check` expects it. Found
    /// there already and not holding (made by hand): it stays as it is, and
    /// `n` is in force on this monitor's word (its lease); `check` reports
    /// the file.
    pub(crate) async fn raise(&mut self, store: &Store, switch: v3::LayoutSwitch) -> store::Result<()> {
        let n = switch.layout;
        let path = v3::layout_marker(n);
        let content = if n == v3::LAYOUT_3 { Vec::new() } else { layouts::formats::encode(&switch) };
        if store.create(&path, content).await? == store::Created::Exists {
            if let Some(Ok(b)) = store.read_or_bad(&path).await? {
                if let Err(why) = v3::switch_holds(n, &b) {
                    tracing::warn!(%path, "a file no monitor wrote stands where the layout switch goes ({why}): \
                        layout {n} is in force on this monitor's lease only until it is removed (check reports it)");
                }
            }
        }
        self.in_force = self.in_force.max(n);
        self.since = None;
        self.fresh = Fresh::No;
        Ok(())
    }

    /// Arms the tripwire (`migrate::tripwire`) once the layout in force is
    /// one the releases before it cannot take part in: at the first scan
    /// after, and again after [`Switch::look_again`]. One read when it
    /// stands. A failure is logged and tried at the next scan: the tripwire
    /// only stops binaries that start later, never this monitor's work.
    pub(crate) async fn arm_tripwire(&mut self, store: &Store, wall_ms: u64, monitor: &layouts::NodeId) {
        let n = self.in_force();
        if n < v3::LAYOUT_3 || self.tripwire >= n {
            return;
        }
        match migrate::tripwire::arm(store, n, wall_ms, &monitor.to_string()).await {
            Ok(armed) => {
                if armed == migrate::tripwire::Armed::Now {
                    tracing::info!(
                        layout = n,
                        "armed the tripwire that stops the releases before layout {n}: {}",
                        v2::UPGRADE_STATE
                    );
                }
                self.tripwire = n;
            }
            Err(e) => {
                tracing::warn!("arming the tripwire {} failed: {e}; tried again at the next scan", v2::UPGRADE_STATE)
            }
        }
    }

    /// Forgets what was seen of files an operator may change by hand: the
    /// tripwire is looked at again (an older `compactd upgrade` run by hand
    /// overwrites it).
    pub(crate) fn look_again(&mut self) {
        self.tripwire = 0;
    }

    /// Notes whether this monitor is the tree's first: no monitor held an
    /// earlier epoch, so none admitted a member, logged an event or
    /// declared a node offline before it.
    pub(crate) fn first_monitor(&mut self, first: bool) {
        self.fresh = if first { Fresh::First } else { Fresh::No };
    }

    /// On a tree this monitor is the first of, and if this node may take
    /// the fast path (`NodeConfig::newest_on_fresh_tree`), looks for traces
    /// of older nodes or older work. Only reads; a failure costs the fast
    /// path, never the monitor.
    pub(crate) async fn look_fresh(&mut self, store: &Store, allowed: bool) {
        if std::mem::take(&mut self.fresh) != Fresh::First || !allowed {
            return;
        }
        match why_not_fresh(store).await {
            Ok(None) => self.fresh = Fresh::Pending,
            Ok(Some(why)) => tracing::debug!("not a fresh tree ({why}): a new layout waits a session"),
            Err(e) => tracing::warn!("looking whether the tree is fresh failed ({e}): a new layout waits a session"),
        }
    }

    /// Decides a pending fresh tree at a scan: not fresh once a member does
    /// not advertise the newest layout; fresh once every node that claimed
    /// its id (`Registry/Owners/`, created before a node's first heartbeat
    /// by every version since the claim, the release before layout 3
    /// included) is a member. One LIST while pending, which ends at the
    /// latest when the wait of a session puts the newest layout in force.
    pub(crate) async fn settle_fresh(&mut self, store: &Store, members: &[&Member]) -> store::Result<()> {
        if self.fresh != Fresh::Pending {
            return Ok(());
        }
        if self.in_force() >= v3::NEWEST || members.iter().any(|m| !m.reads(v3::NEWEST)) {
            self.fresh = Fresh::No;
            return Ok(());
        }
        let claimed = store.list(v2::OWNERS).await?;
        let starting = claimed
            .iter()
            .filter_map(|e| v2::parse_owner_claim(e.name()))
            .any(|(node, _)| !members.iter().any(|m| m.node == node));
        if !members.is_empty() && !starting {
            self.fresh = Fresh::Yes;
        }
        Ok(())
    }
}

/// What shows that an older node or older work was ever on a tree whose
/// first monitor this is, if anything: a layout marker of any content;
/// a task, archive or upgrade of any version; anything below
/// `TaskAssigned/` but node folders and their ended markers; a heartbeat
/// that does not advertise the newest layout (or cannot be read). Costs a
/// few LISTs and a read per heartbeat, once per tree.
async fn why_not_fresh(store: &Store) -> store::Result<Option<String>> {
    let is_marker = |e: &store::Entry| v3::parse_layout_marker(e.name()).is_some();
    if let Some(e) = store.list(v2::REGISTRY).await?.into_iter().find(is_marker) {
        return Ok(Some(format!("{} is there", e.path)));
    }
    for dir in [v2::SCHEDULER, v2::UPGRADE_LOCKS, v1::SCHEDULER] {
        if let Some(e) = store.list_stream(dir, false).try_next().await? {
            return Ok(Some(format!("{} is there", e.path)));
        }
    }
    let mut assigned = store.list_tree(v2::TASK_ASSIGNED);
    while let Some(e) = assigned.try_next().await? {
        let ok = match e.path[v2::TASK_ASSIGNED.len()..].trim_end_matches('/').split_once('/') {
            None => e.is_dir,
            Some((_, name)) => !e.is_dir && v2::parse_ended_marker(name).is_some(),
        };
        if !ok {
            return Ok(Some(format!("{} is there", e.path)));
        }
    }
    drop(assigned);
    for e in store.list(v2::NODES).await?.into_iter().filter(|e| !e.is_dir) {
        let reads = match store.read_or_bad(&e.path).await? {
            None => true,
            Some(Ok(b)) => formats::decode::<Heartbeat>(&b)
                .is_ok_and(|hb| formats::reads_layout(hb.layouts.as_deref(), v3::NEWEST)),
            Some(Err(_)) => false,
        };
        if !reads {
            return Ok(Some(format!("{} does not advertise layout {}", e.path, v3::NEWEST)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::NodeId;

    fn switch(layout: u32) -> v3::LayoutSwitch {
        v3::LayoutSwitch { layout, epoch: 1, monitor: NodeId::parse("m").unwrap(), wall_ms: 0 }
    }

    /// A file made by hand, or cut short, where a switch goes puts nothing
    /// in force: not in a listing, and not on a new monitor; a monitor's
    /// record (or the empty `Layout.3` of versions before layout 4) does.
    #[tokio::test]
    async fn a_layout_marker_no_monitor_wrote_switches_nothing() {
        let store = Store::memory().await;
        store.create(&v3::layout_marker(4), Vec::new()).await.unwrap();
        store.create(&v3::layout_marker(5), b"{\"layout\": 5, \"epo".to_vec()).await.unwrap();
        store.create(&v3::layout_marker(6), layouts::formats::encode(&switch(3))).await.unwrap();
        let mut s = Switch::default();
        s.load(&store).await.unwrap();
        assert_eq!(s.in_force(), 2);
        store.create(&v3::layout_marker(3), Vec::new()).await.unwrap();
        s.load(&store).await.unwrap();
        assert_eq!(s.in_force(), 3, "the empty Layout.3 of the versions before layout 4");
        let mut fresh = Switch::default();
        fresh.raise(&store, switch(4)).await.unwrap();
        assert_eq!(fresh.in_force(), 4, "in force on the raising monitor's word");
        let mut again = Switch::default();
        again.load(&store).await.unwrap();
        assert_eq!(again.in_force(), 3, "the hand-made Layout.4 stays, and still switches nothing");
    }

    fn member(id: &str, layouts: Option<Vec<u32>>) -> Member {
        let mut m = Member::bare(NodeId::parse(id).unwrap(), 1, 1000);
        m.layouts = layouts;
        m
    }

    #[tokio::test]
    async fn raised_after_a_whole_session_of_every_member_reading_it_and_never_lowered() {
        let store = Store::memory().await;
        let mut s = Switch::default();
        s.load(&store).await.unwrap();
        assert_eq!((s.in_force(), s.published()), (2, None));
        let new = member("a", Some(vec![2, 3]));
        let old = member("b", None);
        let pinned = member("c", Some(vec![2]));
        let sec = Duration::from_secs;
        for others in [&old, &pinned] {
            assert_eq!(s.due(&[&new, others], sec(0)), None);
            assert_eq!(s.due(&[&new, others], sec(100)), None, "a member that does not read it holds it back");
        }
        assert_eq!(s.due(&[&new], sec(200)), None);
        assert_eq!(s.due(&[&new], sec(200) + Duration::from_millis(999)), None, "a session not over yet");
        assert_eq!(s.due(&[&new, &old], sec(201)), None, "an older node joining resets the wait");
        assert_eq!(s.due(&[&new], sec(202)), None);
        assert_eq!(s.due(&[&new], sec(203)), Some(3));
        s.raise(&store, switch(3)).await.unwrap();
        assert_eq!((s.in_force(), s.published()), (3, Some(3)));
        assert_eq!(s.due(&[&new], sec(300)), None);
        let mut again = Switch::default();
        again.load(&store).await.unwrap();
        assert_eq!(again.in_force(), 3, "a new monitor finds it");
        assert_eq!(again.due(&[&old], sec(0)), None, "never lowered");
        assert_eq!(again.in_force(), 3);
    }

    #[tokio::test]
    async fn layout_4_waits_for_the_last_node_that_reads_only_layout_3() {
        let store = Store::memory().await;
        let sec = Duration::from_secs;
        let newest = member("a", Some(vec![2, 3, 4]));
        let three = member("b", Some(vec![2, 3]));
        // Straight from 2 to 4 when every member reads 4.
        let mut s = Switch::default();
        assert_eq!(s.due(&[&newest], sec(0)), None);
        assert_eq!(s.due(&[&newest], sec(1)), Some(4));
        // A layout 3 cluster: a node of the version before 4 holds it at 3,
        // and the wait for 4 starts once it is gone.
        let mut s = Switch::default();
        s.raise(&store, switch(3)).await.unwrap();
        assert_eq!(s.due(&[&newest, &three], sec(10)), None);
        assert_eq!(s.due(&[&newest, &three], sec(20)), None, "a layout 3 reader holds layout 4 back");
        assert_eq!(s.due(&[&newest], sec(21)), None);
        assert_eq!(s.due(&[&newest], sec(22)), Some(4));
        s.raise(&store, switch(4)).await.unwrap();
        assert_eq!((s.in_force(), s.published()), (4, Some(4)));
        let mut again = Switch::default();
        again.load(&store).await.unwrap();
        assert_eq!(again.in_force(), 4, "the highest marker is in force");
    }

    async fn claim(store: &Store, node: &str) {
        store.create(&v2::owner_claim(&NodeId::parse(node).unwrap(), 1), b"{}".to_vec()).await.unwrap();
    }

    /// The switch on a tree as its first monitor finds it, in the first
    /// scan's members, `now` 0: the layout it puts in force at once.
    async fn at_once(store: &Store, first: bool, allowed: bool, scans: &[&[&Member]]) -> Option<u32> {
        let mut s = Switch::default();
        s.load(store).await.unwrap();
        s.first_monitor(first);
        s.look_fresh(store, allowed).await;
        let mut due = None;
        for members in scans {
            s.settle_fresh(store, members).await.unwrap();
            due = s.due(members, Duration::ZERO);
        }
        due
    }

    /// A fresh tree goes to the newest layout at the first scan where every
    /// node that claimed its id is a member that advertises it, without a
    /// session's wait; any trace of an older node or of older work, a
    /// member that does not advertise it, or a monitor after the first
    /// keeps the wait.
    #[tokio::test]
    async fn a_fresh_tree_goes_to_the_newest_layout_without_a_session() {
        let (a, b) = (member("a", Some(vec![2, 3, 4])), member("b", Some(vec![2, 3, 4])));
        let store = Store::memory().await;
        claim(&store, "a").await;
        claim(&store, "b").await;
        assert_eq!(at_once(&store, true, true, &[&[&a]]).await, None, "b claimed its id and has not beaten yet");
        assert_eq!(at_once(&store, true, true, &[&[&a], &[&a, &b]]).await, Some(4));
        assert_eq!(at_once(&store, false, true, &[&[&a, &b]]).await, None, "a monitor after the first");
        assert_eq!(at_once(&store, true, false, &[&[&a, &b]]).await, None, "a node that may not take the fast path");
        for other in [member("c", None), member("c", Some(vec![2, 3]))] {
            let store = Store::memory().await;
            claim(&store, "a").await;
            claim(&store, "c").await;
            let scans: [&[&Member]; 2] = [&[&a, &other], &[&a]];
            assert_eq!(at_once(&store, true, true, &scans).await, None, "{other:?} was a member: for good");
        }
        let old_beat = br#"{"node": "o", "incarnation": 1, "beat": 9, "session_timeout_ms": 1000,
            "heartbeat_ms": 100, "wall_ms": 0, "pid": 1, "version": "0.1.0"}"#;
        let t = "aaaaffff.16176931.56000000.0";
        let traces: [(String, &[u8]); 7] = [
            (v3::layout_marker(4), b""),
            (format!("{}{t}/Status.Init", v2::SCHEDULER), b""),
            (format!("{}x.lock", v2::UPGRADE_LOCKS), b""),
            (format!("{}compct.n.0.1", v1::SCHEDULER), b"{}"),
            (format!("{}a/{t}.r1.u0.a1/TaskInfo.pc.db", v2::TASK_ASSIGNED), b"{}"),
            (format!("{}a/Manage.{t}", v2::TASK_ASSIGNED), b"{}"),
            (v2::heartbeat(&NodeId::parse("o").unwrap()), old_beat),
        ];
        for (path, content) in traces {
            let store = Store::memory().await;
            claim(&store, "a").await;
            store.create(&format!("{}a/Ended.7", v2::TASK_ASSIGNED), Vec::new()).await.unwrap();
            assert_eq!(at_once(&store, true, true, &[&[&a]]).await, Some(4), "an ended marker is no trace");
            store.create(&path, content.to_vec()).await.unwrap();
            assert_eq!(at_once(&store, true, true, &[&[&a]]).await, None, "{path}");
        }
    }
}
