//! The integration tests, one binary: one link of the crate, and one of
//! each shared server for all of them (the loopback S3 server, the
//! MiniDFSCluster, each judge's JVM; `common`). Topics are modules; run one
//! with a filter, e.g. `cargo test --all-features --test all tasks::` or
//! `… --test all formats::delta::`.
//!
//! Every test first takes its turn (`common::turns`): it says how it loads
//! the machine (it mostly waits, it keeps a core busy, or it needs the
//! machine to itself) and which tests it must not overlap; the turns, not
//! libtest's threads, decide how many run at once.
//! Apart, in `tests/process_env/`: the tests that set this process's own
//! environment.

mod common;

mod backends;
mod cluster;
mod formats;
mod hostile;
mod ops;
mod simulation;
mod tasks;
