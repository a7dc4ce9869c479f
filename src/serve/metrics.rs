//! What a node tells Prometheus and its supervisor: the metrics registry
//! served at `/metrics`, and the health behind `/healthz`, `/readyz` and the
//! systemd watchdog.
//!
//! Owns: every metric family of a node (names, HELP, label sets) and the
//! [`Health`] record the daemon loop updates after each tick. Invariants:
//! label values come from small closed sets (executor kind, outcome, task
//! state, node state); no id, path or secret is ever a label value. Backend
//! requests are counted by OpenDAL's own Prometheus layer
//! ([`Metrics::backend_layer`], `opendal_*` families), applied once to the
//! node's tree store and once to its data store, so every request is counted
//! once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use store::layers::PrometheusClientLayer;

use crate::clock::SharedClock;
use crate::cluster::wake::Wakeup;
use crate::executor::throttle::IoStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabel {
    /// `merge`, `command` or `noop`.
    pub executor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishedLabels {
    pub executor: String,
    /// `succeeded` or `failed`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// When the daemon last did what `/healthz` and `/readyz` judge.
#[derive(Debug)]
pub struct Health {
    clock: SharedClock,
    session: Duration,
    started_ms: u64,
    /// Monotonic ms + 1 of the last tick's end; 0: none yet.
    last_tick_ms: AtomicU64,
    /// Monotonic ms + 1 of the start of the last heartbeat written; 0: none.
    last_beat_ms: AtomicU64,
    /// The newest member view lists this node's incarnation.
    joined: AtomicBool,
    /// The start-up backend probe passed.
    probed: AtomicBool,
}

/// A health verdict with its reason, for the response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    pub reason: String,
}

impl Health {
    pub fn new(clock: SharedClock, session: Duration) -> Health {
        let started_ms = clock.mono().as_millis() as u64;
        Health {
            clock,
            session,
            started_ms,
            last_tick_ms: AtomicU64::new(0),
            last_beat_ms: AtomicU64::new(0),
            joined: AtomicBool::new(false),
            probed: AtomicBool::new(false),
        }
    }

    pub fn set_probed(&self) {
        self.probed.store(true, Ordering::Relaxed);
    }

    /// After a tick: when it ended, the last successful heartbeat (monotonic),
    /// whether the view lists this node.
    pub fn ticked(&self, end: Duration, last_beat: Option<Duration>, joined: bool) {
        self.last_tick_ms.store(end.as_millis() as u64 + 1, Ordering::Relaxed);
        self.last_beat_ms.store(last_beat.map(|b| b.as_millis() as u64 + 1).unwrap_or(0), Ordering::Relaxed);
        self.joined.store(joined, Ordering::Relaxed);
    }

    fn age(&self, stamp: &AtomicU64) -> Option<Duration> {
        let now = self.clock.mono().as_millis() as u64;
        match stamp.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_millis(now.saturating_sub(t - 1))),
        }
    }

    /// Age of the last successful heartbeat write.
    pub fn heartbeat_age(&self) -> Option<Duration> {
        self.age(&self.last_beat_ms)
    }

    /// Live: the loop ticked and a heartbeat was written within one session
    /// timeout (a node whose backend stopped answering, or whose loop is
    /// stuck, is about to be declared offline: that is what a supervisor
    /// must see). During the first session after start, live while the
    /// loop has not ticked yet.
    pub fn live(&self) -> Verdict {
        let now = self.clock.mono().as_millis() as u64;
        let since_start = Duration::from_millis(now.saturating_sub(self.started_ms));
        let tick = self.age(&self.last_tick_ms);
        let beat = self.heartbeat_age();
        let s = self.session;
        let bad = |reason: String| Verdict { ok: false, reason };
        match (tick, beat) {
            (None, _) if since_start <= s => Verdict { ok: true, reason: "starting".into() },
            (None, _) => bad(format!("the daemon loop has not finished a tick in {since_start:?}")),
            (Some(t), _) if t > s => bad(format!("the daemon loop last ticked {t:?} ago (session timeout {s:?})")),
            (Some(_), None) if since_start <= s => Verdict { ok: true, reason: "no heartbeat written yet".into() },
            (Some(_), None) => bad(format!("no heartbeat written since start ({since_start:?} ago)")),
            (Some(_), Some(b)) if b > s => bad(format!(
                "the last heartbeat was written {b:?} ago, longer than the session timeout {s:?} (is the backend answering?)"
            )),
            (Some(t), Some(b)) => {
                Verdict { ok: true, reason: format!("ticked {}ms ago, heartbeat {}ms ago", t.as_millis(), b.as_millis()) }
            }
        }
    }

    /// Ready: live, the start-up backend probe passed, and the monitor's
    /// member view lists this node (it takes and gets work).
    pub fn ready(&self) -> Verdict {
        let live = self.live();
        if !live.ok {
            return live;
        }
        if !self.probed.load(Ordering::Relaxed) {
            return Verdict { ok: false, reason: "the backend probe has not passed yet".into() };
        }
        if !self.joined.load(Ordering::Relaxed) {
            return Verdict { ok: false, reason: "not yet in the monitor's member view".into() };
        }
        Verdict { ok: true, reason: "joined".into() }
    }
}

/// Values read on each scrape: the heartbeat age and the wake-up counters.
#[derive(Debug)]
struct OnScrape {
    health: Arc<Health>,
    wake: Option<Arc<Wakeup>>,
    /// On HDFS: the NameNode RPCs of the tree store and the data store.
    namenode: Vec<(&'static str, Arc<store::hdfs::NameNodeRpcs>)>,
    /// What the node's I/O limit granted (zeros without one).
    io: Arc<IoStats>,
}

impl Collector for OnScrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(age) = self.health.heartbeat_age() {
            let g = ConstGauge::new(age.as_secs_f64());
            let e = encoder.encode_descriptor(
                "compactd_heartbeat_age",
                "Time since the start of this node's last successful heartbeat write",
                Some(&Unit::Seconds),
                g.metric_type(),
            )?;
            g.encode(e)?;
        }
        let dropped = ConstCounter::new(crate::logging::dropped_lines());
        let e = encoder.encode_descriptor(
            "compactd_log_lines_dropped",
            "Log lines dropped because stderr refused them (full, closed) or stalled",
            None,
            dropped.metric_type(),
        )?;
        dropped.encode(e)?;
        if let Some(w) = &self.wake {
            let c = &w.counters;
            let pokes: [(&str, &str, &AtomicU64); 7] = [
                ("compactd_pokes_received", "Wake-up pokes this node accepted", &c.received),
                ("compactd_pokes_sent", "Wake-up pokes this node sent", &c.sent),
                (
                    "compactd_pokes_dropped",
                    "Wake-up pokes this node did not send (too many in flight, or no address)",
                    &c.dropped,
                ),
                ("compactd_pokes_failed", "Wake-up pokes sent that failed or timed out", &c.failed),
                ("compactd_woken_ticks", "Ticks run because of pokes rather than the poll interval", &c.woken_ticks),
                (
                    "compactd_pokes_coalesced",
                    "Pokes received while a wake-up was pending, served by the same woken tick or poll",
                    &c.coalesced,
                ),
                (
                    "compactd_wakeups_rate_limited",
                    "Wake-ups that waited for the rate bound on woken ticks (a poke flood)",
                    &c.rate_limited,
                ),
            ];
            for (name, help, a) in pokes {
                let v = ConstCounter::new(a.load(Ordering::Relaxed));
                let e = encoder.encode_descriptor(name, help, None, v.metric_type())?;
                v.encode(e)?;
            }
            let g = ConstGauge::new(c.in_flight.load(Ordering::Relaxed) as i64);
            let e = encoder.encode_descriptor(
                "compactd_pokes_in_flight",
                "Wake-up pokes being sent now (at most 64: a poke to an unreachable node gives up after 500 ms, then stamps its inbox)",
                None,
                g.metric_type(),
            )?;
            g.encode(e)?;
        }
        let granted = ConstCounter::new(self.io.bytes());
        let e = encoder.encode_descriptor(
            "compactd_io_limit_bytes",
            "Bytes the node's I/O limit (run --io-limit) granted its built-in executors, read and written",
            None,
            granted.metric_type(),
        )?;
        granted.encode(e)?;
        let waited = ConstCounter::new(self.io.waited().as_secs_f64());
        let e = encoder.encode_descriptor(
            "compactd_io_limit_wait",
            "Time the built-in executors waited for the node's I/O limit, summed over executors",
            Some(&Unit::Seconds),
            waited.metric_type(),
        )?;
        waited.encode(e)?;
        let mem = memory();
        for (name, help, bytes) in [
            ("compactd_resident_memory", "The daemon's resident memory now", mem.resident),
            ("compactd_resident_memory_peak", "The daemon's highest resident memory since it started", mem.peak),
            (
                "compactd_executor_resident_memory_peak",
                "The highest resident memory of any executor this daemon started and saw exit (what to size a \
                 node's memory for: the built-in executors hold one unit's row group and its table's log)",
                mem.children_peak,
            ),
        ] {
            if let Some(b) = bytes {
                let g = ConstGauge::new(b as i64);
                g.encode(encoder.encode_descriptor(name, help, Some(&Unit::Bytes), g.metric_type())?)?;
            }
        }
        if !self.namenode.is_empty() {
            let mut e = encoder.encode_descriptor(
                "compactd_namenode_rpcs",
                "NameNode RPCs this node issued through its stores, by store (tree or data) and ClientProtocol method",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (role, rpcs) in &self.namenode {
                for (method, n) in rpcs.snapshot() {
                    let labels = [("store", *role), ("method", method)];
                    ConstCounter::new(n).encode(e.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// Resident memory in bytes, where the kernel tells it.
struct Memory {
    resident: Option<u64>,
    peak: Option<u64>,
    children_peak: Option<u64>,
}

/// The daemon's `VmRSS` and `VmHWM`, and `ru_maxrss` of its waited-for
/// children (the largest child: executors, and the small reaper).
fn memory() -> Memory {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    // SAFETY: getrusage writes one rusage into the zeroed value it is given.
    let children_peak = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) == 0 && u.ru_maxrss > 0).then(|| u.ru_maxrss as u64 * 1024)
    };
    Memory { resident: kib("VmRSS:").map(|k| k * 1024), peak: kib("VmHWM:").map(|k| k * 1024), children_peak }
}

/// What a node reports after each tick: a plain value, so that the
/// registry never reads the node itself (the node builds it).
#[derive(Debug, Clone, Default)]
pub struct TickReport {
    pub incarnation: u64,
    pub fenced_actions: u64,
    pub rejoins: u64,
    pub is_monitor: bool,
    /// The newest epoch in the node's view (0: none yet).
    pub epoch: u64,
    pub running: usize,
    /// Monitor only: change events kept in the log.
    pub events_kept: Option<usize>,
    /// Monitor only: members alive and declared offline in its view.
    pub members: Option<(usize, usize)>,
    /// The policy planner: per policy, the last complete pass's figures
    /// and this node's decisions so far (monotonic).
    pub policies: Vec<(String, crate::policy::planner::PolicyCounts, u64)>,
}

/// Node-wide counters copied from [`crate::node::NodeStats`] (deltas).
#[derive(Debug, Default)]
struct Seen {
    fenced: u64,
    rejoins: u64,
    decisions: std::collections::BTreeMap<String, u64>,
}

/// Every metric of one node.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    backend: PrometheusClientLayer,
    pub health: Arc<Health>,
    incarnation: Gauge,
    is_monitor: Gauge,
    epoch: Gauge,
    fenced: Counter,
    rejoins: Counter,
    ticks: Counter,
    tick_seconds: Histogram,
    guard_kills: Counter,
    guard_late: Histogram,
    guard_margin: Histogram,
    started: Family<ExecutorLabel, Counter>,
    finished: Family<FinishedLabels, Counter>,
    running: Gauge,
    executor_seconds: Family<ExecutorLabel, Histogram>,
    cluster_nodes: Family<StateLabel, Gauge>,
    cluster_tasks: Family<StateLabel, Gauge>,
    cluster_events: Gauge,
    policy_decisions: Family<PolicyLabel, Counter>,
    policy_gauges: [(&'static str, Family<PolicyLabel, Gauge>); 4],
    io: Arc<IoStats>,
    seen: Mutex<Seen>,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0].into_iter()
}

impl Metrics {
    /// `namenode`: the NameNode RPC counters of the node's HDFS stores
    /// (`("tree", …)`, `("data", …)`), exported as `compactd_namenode_rpcs_total`.
    pub fn new(
        health: Arc<Health>,
        wake: Option<Arc<Wakeup>>,
        namenode: Vec<(&'static str, Arc<store::hdfs::NameNodeRpcs>)>,
    ) -> Arc<Metrics> {
        let mut r = Registry::default();
        let info = Family::<Vec<(String, String)>, Gauge>::default();
        info.get_or_create(&vec![("version".into(), env!("CARGO_PKG_VERSION").into())]).set(1);
        r.register("compactd_build_info", "The compactd version this node runs (always 1)", info);
        let up: Gauge = Gauge::default();
        up.set(1);
        r.register("compactd_up", "1 while the daemon runs", up);
        let incarnation = Gauge::default();
        r.register(
            "compactd_incarnation",
            "This node's incarnation (wall ms at its start or last rejoin)",
            incarnation.clone(),
        );
        let is_monitor = Gauge::default();
        r.register("compactd_is_monitor", "1 while this node holds the monitor lease", is_monitor.clone());
        let epoch = Gauge::default();
        r.register("compactd_monitor_epoch", "Epoch of the newest monitor lease this node has seen", epoch.clone());
        let fenced = Counter::default();
        r.register(
            "compactd_fenced_actions",
            "Monitor actions refused because this node no longer held the lease",
            fenced.clone(),
        );
        let rejoins = Counter::default();
        r.register("compactd_rejoins", "Times this node rejoined under a new incarnation", rejoins.clone());
        let ticks = Counter::default();
        r.register("compactd_ticks", "Rounds of the daemon loop (polls and woken ticks)", ticks.clone());
        let tick_seconds = Histogram::new(seconds_buckets());
        r.register_with_unit(
            "compactd_tick_duration",
            "Duration of one round of the daemon loop",
            Unit::Seconds,
            tick_seconds.clone(),
        );
        let guard_kills = Counter::default();
        r.register(
            "compactd_guard_kills",
            "Times the session guard killed this node's executors (no heartbeat counted for 0.8 of the session)",
            guard_kills.clone(),
        );
        let short = || Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]);
        let guard_late = short();
        r.register_with_unit(
            "compactd_guard_kill_lateness",
            "How long after the session guard's deadline its kill landed",
            Unit::Seconds,
            guard_late.clone(),
        );
        let guard_margin = short();
        r.register_with_unit(
            "compactd_guard_kill_margin",
            "What was left of the session when the guard's kill landed: the earliest moment another node can be \
             given this node's units, minus the kill (0: none left)",
            Unit::Seconds,
            guard_margin.clone(),
        );
        let started = Family::<ExecutorLabel, Counter>::default();
        r.register("compactd_subtasks_started", "Subtasks whose executor this node started", started.clone());
        let finished = Family::<FinishedLabels, Counter>::default();
        r.register(
            "compactd_subtasks_finished",
            "Subtasks this node ran to an end, by outcome (succeeded, failed)",
            finished.clone(),
        );
        let running = Gauge::default();
        r.register("compactd_subtasks_running", "Executors running on this node", running.clone());
        let executor_seconds =
            Family::<ExecutorLabel, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        r.register_with_unit(
            "compactd_executor_duration",
            "Wall time of one executor run, start to exit",
            Unit::Seconds,
            executor_seconds.clone(),
        );
        let cluster_nodes = Family::<StateLabel, Gauge>::default();
        r.register(
            "compactd_cluster_nodes",
            "Monitor only: nodes in the member view (state=alive) and declared offline (state=offline)",
            cluster_nodes.clone(),
        );
        let cluster_tasks = Family::<StateLabel, Gauge>::default();
        r.register(
            "compactd_cluster_tasks",
            "Monitor only: tasks under Scheduler/ by state, as of the last sweep",
            cluster_tasks.clone(),
        );
        let cluster_events = Gauge::default();
        r.register(
            "compactd_cluster_events",
            "Monitor only: change events kept in the event log, as of the last purge",
            cluster_events.clone(),
        );
        let policy_decisions = Family::<PolicyLabel, Counter>::default();
        r.register(
            "compactd_policy_decisions",
            "Partitions this node's planner submitted a compaction for, per policy",
            policy_decisions.clone(),
        );
        let policy_gauges = [
            ("tables", "Monitor only: tables the policy owns, as of the planner's last pass"),
            ("small_files", "Monitor only: small files in the policy's tables, as of the last pass"),
            ("due_partitions", "Monitor only: partitions due but not submitted (at a cap), as of the last pass"),
            ("in_flight", "Monitor only: the policy's partitions being compacted, as of the last pass"),
        ]
        .map(|(name, help)| {
            let f = Family::<PolicyLabel, Gauge>::default();
            r.register(format!("compactd_policy_{name}"), help, f.clone());
            (name, f)
        });
        let io = Arc::new(IoStats::default());
        r.register_collector(Box::new(OnScrape { health: health.clone(), wake, namenode, io: io.clone() }));
        // The backend layer registers the opendal_* families; it is applied
        // to the tree store and the data store. Its `root` label would be a
        // path (and a new set of series per root): off.
        let backend = PrometheusClientLayer::builder()
            .duration_seconds_buckets(vec![0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
            .disable_label_root(true)
            .register(&mut r);
        Arc::new(Metrics {
            registry: r,
            backend,
            health,
            incarnation,
            is_monitor,
            epoch,
            fenced,
            rejoins,
            ticks,
            tick_seconds,
            guard_kills,
            guard_late,
            guard_margin,
            started,
            finished,
            running,
            executor_seconds,
            cluster_nodes,
            cluster_tasks,
            cluster_events,
            policy_decisions,
            policy_gauges,
            io,
            seen: Mutex::new(Seen::default()),
        })
    }

    /// Where the node's I/O limit counts its grants
    /// (`compactd_io_limit_bytes_total`, `compactd_io_limit_wait_seconds_total`).
    pub fn io_stats(&self) -> Arc<IoStats> {
        self.io.clone()
    }

    /// The layer that counts backend requests (apply it to each store once).
    pub fn backend_layer(&self) -> PrometheusClientLayer {
        self.backend.clone()
    }

    /// The text exposition (OpenMetrics text, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }

    /// After each tick of the daemon loop.
    pub fn after_tick(&self, s: &TickReport, took: Duration) {
        self.ticks.inc();
        self.tick_seconds.observe(took.as_secs_f64());
        self.incarnation.set(s.incarnation as i64);
        self.is_monitor.set(s.is_monitor as i64);
        self.epoch.set(s.epoch as i64);
        self.running.set(s.running as i64);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            self.fenced.inc_by(s.fenced_actions.saturating_sub(seen.fenced));
            self.rejoins.inc_by(s.rejoins.saturating_sub(seen.rejoins));
            seen.fenced = s.fenced_actions;
            seen.rejoins = s.rejoins;
            for (policy, _, n) in &s.policies {
                let before = seen.decisions.insert(policy.clone(), *n).unwrap_or(0);
                self.policy_decisions
                    .get_or_create(&PolicyLabel { policy: policy.clone() })
                    .inc_by(n.saturating_sub(before));
            }
        }
        for (_, f) in &self.policy_gauges {
            f.clear();
        }
        if s.is_monitor {
            for (policy, c, _) in &s.policies {
                let label = PolicyLabel { policy: policy.clone() };
                for (name, f) in &self.policy_gauges {
                    let v = match *name {
                        "tables" => c.tables,
                        "small_files" => c.small_files,
                        "due_partitions" => c.due_partitions,
                        _ => c.in_flight,
                    };
                    f.get_or_create(&label).set(v as i64);
                }
            }
        }
        if s.is_monitor {
            if let Some(n) = s.events_kept {
                self.cluster_events.set(n as i64);
            }
            if let Some((alive, offline)) = s.members {
                self.cluster_nodes.get_or_create(&StateLabel { state: "alive".into() }).set(alive as i64);
                self.cluster_nodes.get_or_create(&StateLabel { state: "offline".into() }).set(offline as i64);
            }
        } else {
            // Only the monitor knows the cluster; others export nothing here
            // (and 0 events: a gauge has no absent value).
            self.cluster_nodes.clear();
            self.cluster_tasks.clear();
            self.cluster_events.set(0);
        }
    }

    /// The monitor's sweep counted the tasks under `Scheduler/` by state.
    pub fn tasks_by_state(&self, counts: &std::collections::BTreeMap<String, usize>) {
        self.cluster_tasks.clear();
        for (state, n) in counts {
            self.cluster_tasks.get_or_create(&StateLabel { state: state.clone() }).set(*n as i64);
        }
    }

    /// The session guard killed this node's executors `late` after its
    /// deadline, with `margin` of the session left.
    pub fn guard_tripped(&self, late: Duration, margin: Duration) {
        self.guard_kills.inc();
        self.guard_late.observe(late.as_secs_f64());
        self.guard_margin.observe(margin.as_secs_f64());
    }

    pub fn subtask_started(&self, executor: &str) {
        self.started.get_or_create(&ExecutorLabel { executor: executor.into() }).inc();
    }

    pub fn subtask_finished(&self, executor: &str, success: bool, took: Duration) {
        let outcome = if success { "succeeded" } else { "failed" };
        self.finished.get_or_create(&FinishedLabels { executor: executor.into(), outcome: outcome.into() }).inc();
        self.executor_seconds.get_or_create(&ExecutorLabel { executor: executor.into() }).observe(took.as_secs_f64());
    }
}

impl crate::tasks::worker::RunMetrics for Metrics {
    fn io_stats(&self) -> Arc<IoStats> {
        Metrics::io_stats(self)
    }

    fn subtask_started(&self, executor: &str) {
        Metrics::subtask_started(self, executor)
    }

    fn subtask_finished(&self, executor: &str, success: bool, took: Duration) {
        Metrics::subtask_finished(self, executor, success, took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/cli.md, "Metrics": label values are never ids, paths or secrets.
    #[tokio::test]
    async fn backend_series_carry_no_path() {
        let clock = clock::ManualClock::new();
        let m = Metrics::new(Arc::new(Health::new(clock, Duration::from_secs(30))), None, vec![]);
        let layer = m.backend_layer();
        let store = store::Store::memory().await.layered(|op| op.layer(layer.clone()));
        store.put("Compaction_V2/x", b"1".to_vec()).await.unwrap();
        let _ = store.list("Compaction_V2/").await.unwrap();
        let text = m.encode();
        assert!(text.contains("opendal_operation_duration_seconds_count{"), "{text}");
        assert!(!text.contains("root=\""), "a series is labelled with the root: {text}");
    }
}
