//! The tree's layouts by number: which a node reads and writes (its
//! heartbeat's `layouts`), and which is in force (`Registry/Layout.<n>`, see
//! [`crate::v3`]).

/// The layout of the tree before batches: one folder per subtask attempt.
pub const LAYOUT_2: u32 = 2;
/// Dispatch batches of empty markers ([`crate::v3`]).
pub const LAYOUT_3: u32 = 3;
/// The layouts this version reads and writes, as its heartbeat advertises
/// them. A heartbeat without the list is an older node's: layout 2 only.
pub const READS: [u32; 2] = [LAYOUT_2, LAYOUT_3];
/// What a heartbeat without a `layouts` list advertises.
pub const LEGACY_READS: [u32; 1] = [LAYOUT_2];
