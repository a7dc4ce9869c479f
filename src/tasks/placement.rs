//! Consistent hashing of work onto live nodes (the `hashring` crate, with
//! virtual nodes for balance). Deterministic across processes: every node
//! that sees the same member list places a key on the same node. And
//! whether any live node can run a named command at all.

use hashring::HashRing;
use layouts::NodeId;

/// Why no live node would run command `name`: none of the members in
/// `view` advertises it (their heartbeats name the commands they define).
/// `None` when one does, or when there is no view to judge by.
pub fn undefined_command(view: Option<&layouts::formats::Lease>, name: &str) -> Option<String> {
    let view = view?;
    if view.members.iter().any(|m| m.commands.iter().any(|c| c == name)) {
        return None;
    }
    let defined: std::collections::BTreeSet<&str> =
        view.members.iter().flat_map(|m| m.commands.iter().map(String::as_str)).collect();
    let defined =
        if defined.is_empty() { "none".to_string() } else { defined.into_iter().collect::<Vec<_>>().join(", ") };
    Some(format!(
        "no live node defines command {name:?} (the live nodes define: {defined}); define it with `run --command \
         {name}=TEMPLATE`"
    ))
}

/// Virtual nodes per member: enough for an even spread of a few thousand
/// keys over tens of nodes.
const VNODES: u32 = 64;

#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct VNode {
    node: NodeId,
    replica: u32,
}

#[derive(Debug, Clone)]
pub struct Ring {
    ring: HashRing<VNode>,
    members: Vec<NodeId>,
}

impl Ring {
    pub fn new<'a>(members: impl IntoIterator<Item = &'a NodeId>) -> Ring {
        let mut ring = HashRing::new();
        let mut list: Vec<NodeId> = members.into_iter().cloned().collect();
        list.sort();
        list.dedup();
        for node in &list {
            for replica in 0..VNODES {
                ring.add(VNode { node: node.clone(), replica });
            }
        }
        Ring { ring, members: list }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The node responsible for `key`.
    pub fn node_for(&self, key: &str) -> Option<NodeId> {
        self.ring.get(&key).map(|v| v.node.clone())
    }

    /// The first node for `key` that is not in `avoid` (the next live node on
    /// the ring after failed ones); falls back to the owner when every node
    /// is to be avoided.
    pub fn node_avoiding(&self, key: &str, avoid: &[NodeId]) -> Option<NodeId> {
        if avoid.is_empty() {
            // The owner, without listing every virtual node after it.
            return self.node_for(key);
        }
        let all = self.ring.get_with_replicas(&key, self.members.len() * VNODES as usize)?;
        all.iter().map(|v| &v.node).find(|n| !avoid.contains(n)).cloned().or_else(|| self.node_for(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<NodeId> {
        (1..=n).map(|i| NodeId::parse(&format!("n{i}")).unwrap()).collect()
    }

    #[test]
    fn placement_is_stable_and_balanced() {
        let nodes = ids(3);
        let a = Ring::new(&nodes);
        let b = Ring::new(nodes.iter().rev());
        let mut count = std::collections::BTreeMap::new();
        for k in 0..3000 {
            let key = format!("task/{k}");
            assert_eq!(a.node_for(&key), b.node_for(&key));
            *count.entry(a.node_for(&key).unwrap()).or_insert(0) += 1;
        }
        for (n, c) in count {
            assert!((600..=1400).contains(&c), "{n} got {c} of 3000");
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let nodes = ids(4);
        let full = Ring::new(&nodes);
        let less = Ring::new(&nodes[..3]);
        for k in 0..1000 {
            let key = format!("k{k}");
            let before = full.node_for(&key).unwrap();
            if before != nodes[3] {
                assert_eq!(less.node_for(&key).unwrap(), before);
            }
        }
    }

    #[test]
    fn avoiding_no_node_is_the_owner_as_the_full_walk_has_it() {
        let nodes = ids(5);
        let r = Ring::new(&nodes);
        for k in 0..2000 {
            let key = format!("task/{k}");
            let walk = r.ring.get_with_replicas(&key.as_str(), nodes.len() * VNODES as usize).unwrap();
            assert_eq!(r.node_avoiding(&key, &[]), Some(walk[0].node.clone()), "{key}");
        }
    }

    #[test]
    fn avoiding_failed_nodes_picks_the_next_live_one() {
        let nodes = ids(3);
        let r = Ring::new(&nodes);
        let owner = r.node_for("x").unwrap();
        let next = r.node_avoiding("x", std::slice::from_ref(&owner)).unwrap();
        assert_ne!(next, owner);
        assert_eq!(r.node_avoiding("x", &nodes).unwrap(), owner);
        assert!(Ring::new(&[]).node_for("x").is_none());
    }
}
