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

use std::time::Duration;

use layouts::formats::Member;
use layouts::v3;
use store::Store;

#[derive(Debug, Default)]
pub(crate) struct Switch {
    /// The highest `Registry/Layout.<n>` listed or created (0: none).
    in_force: u32,
    /// The layout every member reads, above the one in force, and since
    /// when (this monitor's clock) they all do.
    since: Option<(u32, Duration)>,
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
        Ok(())
    }
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
}
