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
