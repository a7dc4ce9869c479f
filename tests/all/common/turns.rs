//! Which tests run at once: every test of this binary takes its turn here
//! first, saying how it loads the machine and which shared things it must
//! have to itself.
//!
//! libtest starts tests in the order of their names, each on a thread of its
//! own, `RUST_TEST_THREADS` at a time (16, in `.cargo/config.toml`), and
//! knows nothing of what they cost. So the threads are only how far ahead it
//! looks; how many tests actually run is decided here. The machine is cut
//! into half-core units, two per core: a test that mostly waits on its
//! processes, servers and leases ([`waits`]) takes one, a test that
//! keeps a core busy ([`core`]) two, and a test that loads the whole
//! machine or fails when starved beside anything busy ([`machine`]) all of
//! them. Tests that must not overlap (they share a namespace's
//! addresses, one JVM, or a catalog whose load they bound) name the same
//! [`Group`]: one of a group runs at a time, and a test waiting for its group
//! holds no unit, so the tests behind it in name order run meanwhile; that
//! is what two plain threads could not do (a test waiting on a lock held its
//! thread, and whole topics ran one at a time).
//!
//! Turns are served in the order they were asked for, except that a test
//! whose group is busy is passed over: a test that needs more units than are
//! free is not overtaken by later ones, so a [`machine`] test waits for
//! the running ones to end and is never starved.
//!
//! `COMPACTD_TEST_UNITS` sets the units (default: two per core);
//! `COMPACTD_TEST_TURNS=FILE` records each test's wait and run (JSON lines);
//! `--test-threads=1` still runs one test at a time.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

/// How a test loads the machine while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// Waits on its processes, servers and leases most of its run: one unit.
    Waits,
    /// Keeps a core busy for most of its run (a simulation, a JVM judge's
    /// queries, a scale test): two units.
    Core,
    /// Loads the whole machine, or bounds a timing that starves beside any
    /// busy test: every unit, with nothing beside it.
    Machine,
}

/// Tests that run one at a time among themselves, each with the group's load.
#[derive(Debug)]
pub struct Group {
    name: &'static str,
    load: Load,
}

struct Waiter {
    ticket: u64,
    units: usize,
    group: Option<&'static str>,
}

struct State {
    free: usize,
    busy: BTreeSet<&'static str>,
    queue: Vec<Waiter>,
    next: u64,
}

struct Turns {
    units: usize,
    state: Mutex<State>,
    changed: Condvar,
}

fn turns() -> &'static Turns {
    static TURNS: OnceLock<Turns> = OnceLock::new();
    TURNS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let units = store::testing::env_u64("COMPACTD_TEST_UNITS").map_or(2 * cores, |u| u.max(1) as usize);
        Turns {
            units,
            state: Mutex::new(State { free: units, busy: BTreeSet::new(), queue: vec![], next: 0 }),
            changed: Condvar::new(),
        }
    })
}

/// A test's turn: its units and its group are given back when it is dropped,
/// at the end of the test (also when it panics).
#[must_use = "a turn lasts while it is held: `let _turn = turns::waits();`"]
pub struct Turn {
    units: usize,
    group: Option<&'static str>,
    asked: Instant,
    started: Instant,
}

thread_local! {
    /// The group whose turn this test's thread holds.
    static HELD: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Whether this test holds `group`'s turn: what only one test of a group may
/// use (a namespace's fixed addresses, a cluster whose NameNode is stopped)
/// asks before it is handed out, so a test that forgot its group fails
/// instead of racing another.
pub fn held(group: &'static Group) -> bool {
    HELD.with(|h| h.get() == Some(group.name))
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.group.is_some() {
            HELD.with(|h| h.set(None));
        }
        let t = turns();
        let mut st = t.state.lock().unwrap_or_else(|e| e.into_inner());
        st.free += self.units;
        if let Some(g) = self.group {
            st.busy.remove(g);
        }
        drop(st);
        t.changed.notify_all();
        log(self);
    }
}

/// With `COMPACTD_TEST_TURNS=FILE`, each test appends a line to FILE when it
/// ends: how long it waited for its turn and how long it ran (libtest's own
/// times count both).
fn log(turn: &Turn) {
    let Some(path) = std::env::var_os("COMPACTD_TEST_TURNS") else { return };
    let line = serde_json::json!({
        "test": std::thread::current().name().unwrap_or("?"),
        "units": turn.units,
        "waited_s": (turn.started - turn.asked).as_secs_f64(),
        "ran_s": turn.started.elapsed().as_secs_f64(),
    });
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        use std::io::Write;
        let _ = writeln!(f, "{line}");
    }
}

/// The turn of a test that mostly waits on its processes, servers and
/// leases; the first line of most tests.
pub fn waits() -> Turn {
    take(Load::Waits, None)
}

/// The turn of a test that keeps a core busy for most of its run.
pub fn core() -> Turn {
    take(Load::Core, None)
}

/// The turn of a test that runs with nothing beside it.
pub fn machine() -> Turn {
    take(Load::Machine, None)
}

/// Tests that use the network namespaces' fixed names and addresses
/// (`common::netns`), each running three nodes, a server and a proxy whose
/// timings are what is tested: with nothing beside them. Beside the HDFS
/// tests (their JVMs, NameNodes stopped and restarted) a CI run saw a node
/// of the storage-cut test lose its 4 s session, and the monitor take 22 s
/// to declare a node it declares in 5 s alone or beside three busy-looping
/// processes.
pub static NETNS: Group = Group { name: "netns", load: Load::Machine };
/// Tests that stop the NameNode and DataNodes of their HDFS
/// (`HdfsCluster::faults`).
pub static HDFS_FAULTS: Group = Group { name: "hdfs faults", load: Load::Waits };
/// Tests whose judge is the one Spark session with Delta: its queries take
/// a core and queue on one JVM.
pub static SPARK_DELTA: Group = Group { name: "spark delta", load: Load::Core };
/// Tests whose judge is the one Spark session with Iceberg.
pub static SPARK_ICEBERG: Group = Group { name: "spark iceberg", load: Load::Core };
/// Tests that bound the load of the one REST catalog (SQLite serializes its
/// writers).
pub static ICEBERG_REST: Group = Group { name: "iceberg rest", load: Load::Waits };

impl Group {
    /// The turn of a test of this group: none of the group runs beside it.
    pub fn turn(&'static self) -> Turn {
        take(self.load, Some(self))
    }
}

fn take(load: Load, group: Option<&'static Group>) -> Turn {
    let t = turns();
    let units = match load {
        Load::Waits => 1,
        Load::Core => 2,
        Load::Machine => t.units,
    }
    .min(t.units);
    let asked = Instant::now();
    let mut st = t.state.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = st.next;
    st.next += 1;
    st.queue.push(Waiter { ticket, units, group: group.map(|g| g.name) });
    while !first_served(&st, ticket) {
        st = t.changed.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    st.queue.retain(|w| w.ticket != ticket);
    st.free -= units;
    if let Some(g) = group {
        st.busy.insert(g.name);
    }
    drop(st);
    // The ones behind it may now be first in the queue.
    t.changed.notify_all();
    if let Some(g) = group {
        HELD.with(|h| h.set(Some(g.name)));
    }
    Turn { units, group: group.map(|g| g.name), asked, started: Instant::now() }
}

/// Whether `ticket` is served now: the queue is walked in order, as if each
/// waiter before it that can start did; a waiter whose group is busy is
/// passed over, one that does not fit stops the walk.
fn first_served(st: &State, ticket: u64) -> bool {
    let mut free = st.free;
    let mut busy = st.busy.clone();
    for w in &st.queue {
        if w.group.is_some_and(|g| busy.contains(g)) {
            if w.ticket == ticket {
                return false;
            }
            continue;
        }
        if w.units > free {
            return false;
        }
        if w.ticket == ticket {
            return true;
        }
        free -= w.units;
        busy.extend(w.group);
    }
    false
}
