#![allow(dead_code)]
// Real processes and servers: waits and timeouts on real time.
#![allow(clippy::disallowed_methods)]
pub mod chaos_support;
pub mod cluster;
pub mod freezer;
pub mod hdfs;
pub mod http;
pub mod iceberg;
pub mod iceberg_rest;
pub mod iceberg_table;
pub mod killat;
pub mod load;
pub mod netns;
pub mod parquet;
pub mod rss;
pub mod runs;
pub mod s3;
pub mod spark;
pub mod table;

/// Held by the tests that load the machine for minutes (the in-process
/// simulations of a thousand nodes or schedules) and by those that fail
/// when starved that long (the process chaos runs, the policies' bound on
/// small files at a writer's pace), so that no two of them run at once. Each was in a test binary of its own before the tests were
/// one binary, and never ran beside another.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}
