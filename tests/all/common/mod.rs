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

/// The machine's cores, shared out among the tests that keep them busy.
///
/// The tests run many at a time (`RUST_TEST_THREADS` in
/// `.cargo/config.toml`): most of them wait on processes, servers and
/// leases, and the machine sat idle three quarters of the time when they ran
/// two at a time. The few that keep a core busy for most of their run (the
/// thousand-node simulation, the scale tests, the 239 MB Delta commit) take
/// one with [`cpu`], so that no more of them run at once than there are
/// cores; those that load the whole machine (the two-thread schedule
/// simulation) or fail when starved beside anything busy (the process chaos
/// runs, the policies' bound on small files at a writer's pace) take them
/// all with [`heavy`]. A test
/// waiting for all of them is served before any new one. The Spark and Java
/// judges take none: their requests queue on one JVM each.
struct Cores {
    /// (free cores, tests waiting for all of them)
    state: std::sync::Mutex<(usize, usize)>,
    freed: std::sync::Condvar,
}

fn cores() -> &'static (Cores, usize) {
    static CORES: std::sync::OnceLock<(Cores, usize)> = std::sync::OnceLock::new();
    CORES.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        (Cores { state: std::sync::Mutex::new((n, 0)), freed: std::sync::Condvar::new() }, n)
    })
}

/// Cores taken from [`cores`], given back on drop.
pub struct CoreGuard(usize);

impl Drop for CoreGuard {
    fn drop(&mut self) {
        let (c, _) = cores();
        c.state.lock().unwrap_or_else(|e| e.into_inner()).0 += self.0;
        c.freed.notify_all();
    }
}

fn take(want: usize, all: bool) -> CoreGuard {
    let (c, _) = cores();
    let mut st = c.state.lock().unwrap_or_else(|e| e.into_inner());
    if all {
        st.1 += 1;
    }
    while st.0 < want || (!all && st.1 > 0) {
        st = c.freed.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.0 -= want;
    if all {
        st.1 -= 1;
    }
    CoreGuard(want)
}

/// One core, for a test that keeps one busy for most of its run.
pub fn cpu() -> CoreGuard {
    take(1, false)
}

/// Every core, for a test that loads the whole machine for minutes or fails
/// when starved that long; no two of them, and no [`cpu`] test, run beside it.
pub fn heavy() -> CoreGuard {
    take(cores().1, true)
}
