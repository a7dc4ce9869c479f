//! The tree's layouts by number: which a node reads and writes (its
//! heartbeat's `layouts`), and which is in force (`Registry/Layout.<n>`, see
//! [`crate::v3`]).

/// The layout of the tree before batches: one folder per subtask attempt.
pub const LAYOUT_2: u32 = 2;
/// Dispatch batches of empty markers ([`crate::v3`]), named
/// `<task>.r<round>.b<batch>`.
pub const LAYOUT_3: u32 = 3;
/// Layout 3 whose batches (and their records) carry their manager's term
/// in their names, `<task>.r<round>.t<term>.b<batch>`, so that two terms
/// acting at once never number a batch alike. A version that reads only
/// layout 3 takes such a name for no batch at all (it neither runs nor
/// rebuilds from it): they are written only once every member reads them.
pub const LAYOUT_4: u32 = 4;
/// The newest layout this version writes.
pub const NEWEST: u32 = LAYOUT_4;
/// The layouts this version reads and writes, as its heartbeat advertises
/// them. A heartbeat without the list is an older node's: layout 2 only.
pub const READS: [u32; 3] = [LAYOUT_2, LAYOUT_3, LAYOUT_4];
/// What a heartbeat without a `layouts` list advertises.
pub const LEGACY_READS: [u32; 1] = [LAYOUT_2];

/// Why a node of this version that advertises the layouts up to
/// `max_layout` (`run --max-layout`) can take no part in a cluster whose
/// layout in force is `in_force`, or `None` if it can. Managers give work
/// only to members that advertise the layout in force, and a layout in
/// force is never lowered, so such a node would idle for good: `run`
/// refuses to start, and a running node says so in its log.
pub fn cannot_take_part(in_force: u32, max_layout: u32) -> Option<String> {
    let marker = crate::v3::layout_marker(in_force);
    if in_force > NEWEST {
        return Some(format!(
            "layout {in_force} is in force in this tree ({marker}), and this release of compactd reads layouts \
             {LAYOUT_2} to {NEWEST}: it would be given no work and could not read what is dispatched in layout \
             {in_force}. A layout in force is never lowered: run a release that reads layout {in_force} on this node"
        ));
    }
    if in_force > max_layout {
        return Some(format!(
            "layout {in_force} is in force in this tree ({marker}), above this node's --max-layout {max_layout}: \
             managers give no work to a node that does not advertise the layout in force. --max-layout holds a \
             switch back while older releases may still join; it cannot undo one (a layout in force is never \
             lowered): start this node without --max-layout (or with --max-layout {in_force})"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_takes_part_only_where_it_reads_and_advertises_the_layout_in_force() {
        for (in_force, max) in [(2, 2), (2, 4), (3, 3), (4, 4), (3, 4)] {
            assert_eq!(cannot_take_part(in_force, max), None, "{in_force} {max}");
        }
        let newer = cannot_take_part(5, NEWEST).unwrap();
        for part in ["layout 5 is in force", "Registry/Layout.5", "reads layouts 2 to 4", "reads layout 5"] {
            assert!(newer.contains(part), "{part:?} in {newer}");
        }
        let pinned = cannot_take_part(4, 3).unwrap();
        for part in ["Registry/Layout.4", "--max-layout 3", "without --max-layout"] {
            assert!(pinned.contains(part), "{part:?} in {pinned}");
        }
        assert!(cannot_take_part(5, 3).unwrap().contains("a release that reads layout 5"), "the release first");
    }
}
