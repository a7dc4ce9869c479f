//! The integration tests, one binary: one link of the crate, and one of
//! each shared server for all of them (the loopback S3 server, the
//! MiniDFSCluster, each judge's JVM; `common`). Topics are modules; run one
//! with a filter, e.g. `cargo test --all-features --test all tasks::` or
//! `… --test all formats::delta::`.
//!
//! Tests run two at a time (cargo's default on this 2-core machine) across
//! topics; the few that load the machine for minutes, or fail when starved
//! that long, take [`common::heavy`] and never run beside each other.
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
