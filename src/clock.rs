//! Time, injected: see the `compactd-clock` crate (shared with the upgrader).

pub use clock::*;
