//! Membership and election with in-process nodes on the memory store and an
//! injected clock: crashes and pauses are simulated by not ticking a node,
//! so every timeout is exercised without sleeping.

use std::time::Duration;

use compactd::clock::Clock;
use compactd::node::{Node, NodeConfig};
use layouts::formats::{self, EventKind, OfflineRecord};
use layouts::{v2, NodeId};
use sim::Cluster;
use store::Store;

const TICK: Duration = Duration::from_millis(100);

fn cfg(id: &str) -> NodeConfig {
    let mut c = NodeConfig::new(NodeId::parse(id).unwrap());
    c.heartbeat = Duration::from_millis(200);
    c.session_timeout = Duration::from_millis(1500);
    c.lease = Duration::from_millis(1500);
    c
}

struct Sim {
    store: Store,
    cluster: Cluster,
}

impl Sim {
    async fn new(n: usize) -> Sim {
        let store = Store::memory().await;
        let mut cluster = Cluster::new(TICK);
        for i in 1..=n {
            cluster.push(Node::new(cfg(&format!("n{i}")), store.clone(), cluster.shared_clock()), ());
        }
        Sim { store, cluster }
    }

    async fn round(&mut self) {
        self.cluster.round().await;
    }

    async fn run(&mut self, d: Duration) {
        self.cluster.run_for(d).await;
    }

    fn node(&self, i: usize) -> &Node {
        self.cluster.slots[i].node.as_ref().expect("a running node")
    }

    /// Indices of the ticking nodes that believe they are monitor.
    fn monitors(&self) -> Vec<usize> {
        (0..self.cluster.slots.len())
            .filter(|i| self.cluster.slots[*i].ticking() && self.node(*i).is_monitor())
            .collect()
    }

    async fn offline_records(&self) -> Vec<OfflineRecord> {
        let mut out = vec![];
        for e in self.store.list(v2::OFFLINE).await.unwrap() {
            let b = self.store.read(&e.path).await.unwrap().unwrap();
            out.push(formats::decode::<OfflineRecord>(&b).unwrap());
        }
        out
    }

    async fn offline_events(&self, node: &str) -> usize {
        let mut n = 0;
        for seq in compactd::cluster::events::list_seqs(&self.store).await.unwrap() {
            let b = self.store.read(&v2::event(seq)).await.unwrap().unwrap();
            let e: layouts::formats::Event = formats::decode(&b).unwrap();
            if matches!(&e.kind, EventKind::NodeOffline { node: x, .. } if x.as_str() == node) {
                n += 1;
            }
        }
        n
    }
}

#[tokio::test]
async fn three_nodes_agree_on_one_monitor_and_all_members() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    assert_eq!(sim.monitors().len(), 1);
    for node in sim.cluster.nodes() {
        let view = node.view().expect("every node has read the lease");
        assert_eq!(view.members.len(), 3, "{:?} sees {:?}", node.id(), view.members);
    }
}

#[tokio::test]
async fn a_crashed_monitor_is_replaced_within_a_lease_and_declared_offline_once() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    let m = sim.monitors()[0];
    let crashed = sim.node(m).id().clone();
    sim.cluster.slots[m].paused = true;
    let crashed_at = sim.cluster.clock.mono();
    let mut took_over = None;
    for _ in 0..40 {
        sim.round().await;
        if sim.monitors().len() == 1 {
            took_over = Some(sim.cluster.clock.mono() - crashed_at);
            break;
        }
    }
    let took_over = took_over.expect("a new monitor was elected");
    assert!(took_over <= Duration::from_millis(1500) + 2 * TICK, "took {took_over:?}");
    // the new monitor waits a full session timeout of its own before declaring
    sim.run(Duration::from_secs(5)).await;
    let recs = sim.offline_records().await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].node, crashed);
    assert!(recs[0].cleaned);
    assert_eq!(sim.offline_events(crashed.as_str()).await, 1);
    assert!(sim.store.read(&v2::heartbeat(&crashed)).await.unwrap().is_none(), "heartbeat cleaned");
    let survivor = sim.monitors()[0];
    assert_eq!(sim.node(survivor).view().unwrap().members.len(), 2);
}

#[tokio::test]
async fn a_paused_monitor_steps_down_on_resume_without_declaring_anyone() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    let m = sim.monitors()[0];
    let old_epoch = sim.node(m).monitor_epoch().unwrap();
    sim.cluster.slots[m].paused = true;
    sim.run(Duration::from_secs(4)).await; // well past lease and session timeout
    assert_eq!(sim.monitors().len(), 1);
    sim.cluster.slots[m].paused = false;
    // On resume its clock has jumped: every heartbeat looks stale to it.
    // Its first tick ends its incarnation (its session guard's deadline is
    // long past) and does nothing else; the next one finds its lease lapsed.
    sim.round().await;
    assert!(sim.node(m).stats().rejoins >= 1, "a node paused past its session rejoins at once");
    sim.round().await;
    assert!(!sim.node(m).is_monitor());
    assert!(sim.node(m).stats().fenced_actions >= 1, "{:?}", sim.node(m).stats());
    assert!(sim.node(m).stats().rejoins >= 1, "a node paused past its session rejoins");
    sim.run(Duration::from_secs(3)).await;
    for r in sim.offline_records().await {
        assert!(r.epoch > old_epoch, "a record from the fenced epoch: {r:?}");
        assert_eq!(&r.node, sim.node(m).id(), "only the paused node's old incarnation is offline: {r:?}");
    }
    assert_eq!(sim.monitors().len(), 1);
    let mon = sim.monitors()[0];
    assert_eq!(sim.node(mon).view().unwrap().members.len(), 3, "the resumed node rejoined");
}

#[tokio::test]
async fn a_node_restarted_under_the_same_id_replaces_its_old_incarnation() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    let victim = (0..3).find(|i| !sim.node(*i).is_monitor()).unwrap();
    let id = sim.node(victim).id().clone();
    sim.cluster.clock.advance(Duration::from_millis(5)); // a new incarnation number
    sim.cluster.slots[victim].node = Some(Node::new(cfg(id.as_str()), sim.store.clone(), sim.cluster.shared_clock()));
    sim.run(Duration::from_secs(2)).await;
    let recs = sim.offline_records().await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].node, id);
    let mon = sim.monitors()[0];
    let view = sim.node(mon).view().unwrap();
    assert_eq!(view.members.len(), 3);
    assert!(view.members.iter().any(|m| m.node == id && m.incarnation == sim.node(victim).stats().incarnation));
}

#[tokio::test]
async fn a_node_restarted_on_a_clock_that_went_back_still_takes_a_larger_incarnation() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    let victim = (0..3).find(|i| !sim.node(*i).is_monitor()).unwrap();
    let id = sim.node(victim).id().clone();
    let old = sim.node(victim).stats().incarnation;
    // The host's wall clock is stepped back two minutes (NTP fixing a
    // skewed host) and the process restarts: its clock says an older
    // incarnation than the one its heartbeat names.
    sim.cluster.clock.set_wall_ms(sim.cluster.clock.wall_ms() - 120_000);
    sim.cluster.slots[victim].node = Some(Node::new(cfg(id.as_str()), sim.store.clone(), sim.cluster.shared_clock()));
    assert!(sim.node(victim).stats().incarnation < old, "the test's premise: the clock alone would go back");
    sim.run(Duration::from_secs(2)).await;
    let new = sim.node(victim).stats().incarnation;
    assert_eq!(new, old + 1, "incarnations of one node only grow");
    let mon = sim.monitors()[0];
    let view = sim.node(mon).view().unwrap();
    assert!(view.members.iter().any(|m| m.node == id && m.incarnation == new), "{view:?}");
    let recs = sim.offline_records().await;
    assert_eq!(recs.len(), 1, "only the old incarnation is declared offline: {recs:?}");
    assert_eq!(recs[0].incarnation, old);
}

#[tokio::test]
async fn garbage_in_the_registry_is_skipped() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.store.put("Compaction_V2/Registry/Nodes/n9", b"not json".to_vec()).await.unwrap();
    sim.store.put("Compaction_V2/Registry/Nodes/bad name", b"{}".to_vec()).await.unwrap();
    sim.store.put("Compaction_V2/Registry/Nodes/dir/x", b"{}".to_vec()).await.unwrap();
    sim.store.put("Compaction_V2/Registry/Events/junk", b"{}".to_vec()).await.unwrap();
    sim.run(Duration::from_secs(2)).await;
    assert_eq!(sim.monitors().len(), 1);
    let mon = sim.monitors()[0];
    assert_eq!(sim.node(mon).view().unwrap().members.len(), 3);
    let _ = sim.cluster.clock.wall_ms();
}

#[tokio::test]
async fn an_unreadable_newer_lease_cannot_make_two_monitors() {
    let _turn = crate::common::turns::waits();
    let mut sim = Sim::new(3).await;
    sim.run(Duration::from_secs(2)).await;
    let epoch = sim.node(sim.monitors()[0]).monitor_epoch().unwrap();
    sim.store.put(&v2::lease(epoch + 5), b"garbage".to_vec()).await.unwrap();
    for _ in 0..60 {
        sim.round().await;
        assert!(sim.monitors().len() <= 1, "two monitors at once");
    }
    assert_eq!(sim.monitors().len(), 1);
    assert!(sim.node(sim.monitors()[0]).monitor_epoch().unwrap() > epoch + 5);
}
