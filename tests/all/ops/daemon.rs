//! The ops face of real `compactd run` processes: `/metrics` parsed by a
//! Prometheus text parser and moving with a task, `/healthz` following a
//! backend that stops answering and comes back, systemd's notify protocol
//! on a socket the test binds, the unit file checked by `systemd-analyze`,
//! the configuration file's precedence, and the status page rendered by
//! headless Chromium (a screenshot is left under `target/`).
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster, BIN};
use common::freezer::Freezer;
use common::s3::S3Server;
use serde_json::Value;

fn addrs(c: &Cluster) -> BTreeMap<String, String> {
    c.nodes().iter().filter_map(|r| Some((r["id"].as_str()?.to_string(), r["addr"].as_str()?.to_string()))).collect()
}

fn start3(c: &mut Cluster, data: &str) -> BTreeMap<String, String> {
    for n in ["n1", "n2", "n3"] {
        // Two `slow` subtasks (a task and a job step) may hash to one node:
        // with the default two slots the job's quick `stats` step would then
        // queue behind them for a minute.
        c.start_with(
            n,
            &[
                "--data",
                data,
                "--command",
                "ok=true",
                "--command",
                "slow=sleep 60",
                "--sweep",
                "1s",
                "--max-running",
                "4",
            ],
        );
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive nodes with addresses and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some() && r.iter().all(|n| n["addr"].is_string())
    });
    addrs(c)
}

/// Every sample of a scrape: (name, labels) → value, parsed by
/// `prometheus-parse` (not by hand).
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn scrape(addr: &str) -> Samples {
    let (code, body) = common::http::get(addr, "/metrics").unwrap();
    assert_eq!(code, 200, "{body}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let mut out = Samples::new();
    for s in parsed.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        let labels: BTreeMap<String, String> = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        out.insert((s.metric, labels), v);
    }
    assert!(!parsed.docs.is_empty(), "HELP texts are present");
    out
}

/// Sum over every label set of `name` whose labels include `with`.
fn sum(s: &Samples, name: &str, with: &[(&str, &str)]) -> f64 {
    s.iter()
        .filter(|((n, l), _)| n == name && with.iter().all(|(k, v)| l.get(*k).map(|x| x.as_str()) == Some(*v)))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn metrics_move_with_a_task_and_health_answers_on_every_node() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data_dir = tempfile::tempdir().unwrap();
    let data = format!("fs://{}", data_dir.path().display());
    let nodes = start3(&mut c, &data);
    common::table::make_table(&data, 3);
    let before: BTreeMap<String, Samples> = nodes.iter().map(|(n, a)| (n.clone(), scrape(a))).collect();
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--wait"]);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text());
    // Workers report, then the manager counts: give the last tick a moment.
    std::thread::sleep(Duration::from_millis(500));
    let after: BTreeMap<String, Samples> = nodes.iter().map(|(n, a)| (n.clone(), scrape(a))).collect();
    let delta = |name: &str, with: &[(&str, &str)]| -> f64 {
        nodes.keys().map(|n| sum(&after[n], name, with) - sum(&before[n], name, with)).sum()
    };
    let started = delta("compactd_subtasks_started_total", &[("executor", "merge")]);
    let ok = delta("compactd_subtasks_finished_total", &[("executor", "merge"), ("outcome", "succeeded")]);
    assert!(started >= 3.0, "3 partitions: {started} merge executors started");
    assert_eq!(started, ok, "every started merge succeeded");
    assert_eq!(delta("compactd_executor_duration_seconds_count", &[("executor", "merge")]), ok);
    let monitors: Vec<&String> = nodes.keys().filter(|n| sum(&after[*n], "compactd_is_monitor", &[]) == 1.0).collect();
    assert_eq!(monitors.len(), 1, "exactly one node says it is the monitor");
    let m = &after[monitors[0]];
    assert_eq!(sum(m, "compactd_cluster_nodes", &[("state", "alive")]), 3.0);
    for (n, s) in &after {
        assert_eq!(sum(s, "compactd_up", &[]), 1.0);
        assert!(sum(s, "compactd_incarnation", &[]) > 0.0);
        let age = sum(s, "compactd_heartbeat_age_seconds", &[]);
        assert!(age < 1.5, "{n}: heartbeat age {age} within the session");
        let writes = sum(s, "opendal_operation_duration_seconds_count", &[("operation", "write")])
            - sum(&before[n], "opendal_operation_duration_seconds_count", &[("operation", "write")]);
        assert!(writes > 0.0, "{n}: backend writes are counted");
        assert!(sum(s, "compactd_ticks_total", &[]) > sum(&before[n], "compactd_ticks_total", &[]));
        for path in ["/healthz", "/readyz"] {
            let (code, body) = common::http::get(&nodes[n], path).unwrap();
            assert_eq!(code, 200, "{n}{path}: {body}");
        }
    }
    // The monitor's sweep (every second here) counts the finished task.
    let start = Instant::now();
    while sum(&scrape(&nodes[monitors[0]]), "compactd_cluster_tasks", &[("state", "Done")]) < 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the monitor's sweep did not count the Done task: {:?}",
            common::http::get(&nodes[monitors[0]], "/metrics")
                .unwrap()
                .1
                .lines()
                .filter(|l| l.contains("cluster"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = common::http::get(&nodes[monitors[0]], "/metrics").unwrap().1;
    assert!(text.contains("# TYPE compactd_ticks counter") && !text.contains(".."), "{text}");
    assert!(sum(&scrape(&nodes[monitors[0]]), "compactd_cluster_events", &[]) >= 0.0);
}

fn wait_health(addr: &str, want: u16, within: Duration, c: &Cluster) -> String {
    let start = Instant::now();
    loop {
        let (code, body) = common::http::get(addr, "/healthz").unwrap_or((0, "no answer".into()));
        if code == want {
            return body;
        }
        assert!(start.elapsed() < within, "/healthz still {code} ({body}) after {within:?}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn healthz_fails_while_the_backend_hangs_and_recovers_when_it_answers() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    let proxy = Freezer::start(s3.port());
    let root = s3.new_bucket("healthz").replace(&s3.endpoint(), &format!("http://127.0.0.1:{}", proxy.port));
    let mut c = Cluster::on(root, s3.env());
    let data = tempfile::tempdir().unwrap();
    let data_uri = format!("fs://{}", data.path().display());
    c.start_with("n1", &["--data", &data_uri, "--backend-timeout", "300ms", "--backend-retries", "0"]);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"]);
    let addr = addrs(&c)["n1"].clone();
    wait_health(&addr, 200, Duration::from_secs(10), &c);
    proxy.frozen.store(true, Ordering::Relaxed);
    let body = wait_health(&addr, 503, Duration::from_secs(15), &c);
    // Both are true while the backend hangs: the heartbeat write waits on
    // it, and the loop's tick waits on that write. Which of the two a
    // health check sees first is down to scheduling.
    assert!(
        body.contains("heartbeat") || body.contains("the daemon loop last ticked"),
        "the reason names the stuck heartbeat or the loop it holds up: {body}"
    );
    let (code, _) = common::http::get(&addr, "/readyz").unwrap();
    assert_eq!(code, 503, "not ready either");
    proxy.frozen.store(false, Ordering::Relaxed);
    wait_health(&addr, 200, Duration::from_secs(20), &c);
    assert!(c.is_running("n1"));
}

#[test]
fn run_tells_systemd_it_is_ready_pings_the_watchdog_and_says_it_stops() {
    let _turn = crate::common::turns::waits();
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut c = Cluster::fs();
    c.env.push(("NOTIFY_SOCKET".into(), sock_path.display().to_string()));
    c.env.push(("WATCHDOG_USEC".into(), "2000000".into()));
    c.start_with("n1", &["--data", &format!("fs://{}", dir.path().display())]);
    let mut got: Vec<String> = vec![];
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(n) = sock.recv(&mut buf) {
            got.extend(String::from_utf8_lossy(&buf[..n]).lines().map(str::to_string));
        }
        let ready = got.iter().position(|l| l == "READY=1");
        if ready.is_some_and(|r| got[r..].iter().filter(|l| *l == "WATCHDOG=1").count() >= 2) {
            break;
        }
    }
    let ready = got.iter().position(|l| l == "READY=1").unwrap_or_else(|| panic!("no READY=1: {got:?}"));
    let pings = got[ready..].iter().filter(|l| *l == "WATCHDOG=1").count();
    assert!(pings >= 2, "watchdog pings after READY=1: {got:?}");
    // READY=1 means joined: the member view lists the node.
    assert_eq!(alive(&c.nodes()), ["n1"]);
    assert_eq!(c.terminate("n1"), Some(0));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) && !got.iter().any(|l| l == "STOPPING=1") {
        if let Ok(n) = sock.recv(&mut buf) {
            got.extend(String::from_utf8_lossy(&buf[..n]).lines().map(str::to_string));
        }
    }
    assert!(got.iter().any(|l| l == "STOPPING=1"), "{got:?}");
}

#[test]
fn the_unit_file_passes_systemd_analyze_verify() {
    let _turn = crate::common::turns::waits();
    let Ok(which) = std::process::Command::new("sh").args(["-c", "command -v systemd-analyze"]).output() else {
        return;
    };
    if !which.status.success() {
        eprintln!("systemd-analyze is not installed here: the unit file is not verified");
        return;
    }
    let unit = std::fs::read_to_string(format!("{}/contrib/compactd.service", env!("CARGO_MANIFEST_DIR"))).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("WatchdogSec="), "{unit}");
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let path = dir.path().join("compactd.service");
        std::fs::write(&path, text.replace("ExecStart=compactd ", &format!("ExecStart={BIN} "))).unwrap();
        let out = std::process::Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        // Warnings about the unit name it by path; others (the host's own
        // units) are not ours.
        (out.status.success() && !err.contains(&path.display().to_string()), err)
    };
    let (ok, err) = check(&unit);
    assert!(ok, "systemd-analyze verify: {err}");
    let (ok, _) = check(&unit.replace("[Install]", "Bogus=1\n[Install]"));
    assert!(!ok, "the check sees a broken unit");
}

fn config(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(args)
        .env_remove("COMPACTD_DATA")
        .env_remove("COMPACTD_LISTEN")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn config_file_is_below_environment_below_flags_and_unknown_keys_are_named() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compactd.toml");
    std::fs::write(
        &file,
        "data = \"fs:///from-file\"\nheartbeat = \"250ms\"\nsession_timeout = \"2s\"\nlease = \"2s\"\n\
         max_running = 5\nallow_inline_commands = true\ncommand = [\"ok=true\"]\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let line = |out: &std::process::Output, key: &str| -> String {
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        text.lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .to_string()
    };
    let out = config(&["--config", f, "config"], &[]);
    assert!(line(&out, "data").contains("fs:///from-file") && line(&out, "data").ends_with("# file"));
    assert!(line(&out, "max_running").starts_with("max_running = 5"));
    assert!(line(&out, "listen").ends_with("# default"));
    let out = config(&["--config", f, "config"], &[("COMPACTD_DATA", "fs:///from-env")]);
    assert!(line(&out, "data").contains("fs:///from-env") && line(&out, "data").ends_with("# environment"));
    let out = config(&["--config", f, "config", "--data", "fs:///from-flag"], &[("COMPACTD_DATA", "fs:///from-env")]);
    assert!(line(&out, "data").contains("fs:///from-flag") && line(&out, "data").ends_with("# flag"));
    // The printed configuration loads again to the same values.
    let printed = String::from_utf8_lossy(&config(&["--config", f, "config"], &[]).stdout).to_string();
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &printed).unwrap();
    let out = config(&["--config", again.to_str().unwrap(), "config"], &[]);
    assert!(line(&out, "heartbeat").starts_with("heartbeat = \"250ms\""), "{printed}");

    std::fs::write(&file, "heartbeat = \"1s\"\nhartbeat = \"2s\"\n").unwrap();
    let out = config(&["--config", f, "nodes"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown key `hartbeat`") && err.contains(f), "{err}");
    std::fs::write(&file, "max_running = \"many\"\n").unwrap();
    let out = config(&["--config", f, "config"], &[]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("many"));
    // A bad value is the file's fault: named by the file and the key, not
    // by the flag it was turned into.
    for (text, key, value) in
        [("heartbeat = 10\n", "heartbeat", "10"), ("max-running = \"many\"\n", "max-running", "many")]
    {
        std::fs::write(&file, text).unwrap();
        let out = config(&["--config", f, "run"], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(f) && err.contains(&format!("key `{key}`")) && err.contains(value), "{text}: {err}");
        assert!(!err.contains("--"), "{text}: the message names a flag the user did not give: {err}");
    }
    let out = config(&["--config", f, "run", "--max-running", "x"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-running") && !err.contains(f), "a bad flag is the flag's fault: {err}");

    // `run` honours the file: the heartbeat it advertises is the file's.
    std::fs::write(&file, "heartbeat = \"250ms\"\nsession_timeout = \"2s\"\nlease = \"2s\"\n").unwrap();
    let mut c = Cluster::fs();
    c.timings = vec![];
    c.start_with("n1", &["--config", f, "--data", &format!("fs://{}", dir.path().display())]);
    let rows = c.wait_nodes(Duration::from_secs(20), "n1 alive", |r| alive(r) == ["n1"]);
    assert_eq!(rows[0]["heartbeat_ms"], 250, "{rows:?}");
}

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("COMPACTD_TEST_CHROMIUM") {
        return PathBuf::from(p);
    }
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = std::process::Command::new("sh").args(["-c", &format!("command -v {c}")]).output() {
            if o.status.success() {
                return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            }
        }
    }
    panic!("no Chromium found: `.ci/run` installs Debian's chromium (apt-get install chromium), or set COMPACTD_TEST_CHROMIUM");
}

fn browser(args: &[&str], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--window-size=1300,1000", "--virtual-time-budget=2000"])
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn target_dir() -> PathBuf {
    // target/tmp for integration tests; the screenshot goes next to it.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_status_page_shows_nodes_tasks_and_a_jobs_dag_in_a_real_browser() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data_dir = tempfile::tempdir().unwrap();
    let data = format!("fs://{}", data_dir.path().display());
    let nodes = start3(&mut c, &data);
    common::table::make_table(&data, 3);
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--wait"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let merged = String::from_utf8_lossy(&out.stdout).lines().next().unwrap().split(':').next().unwrap().to_string();
    let out = c.compactd(&["submit", "--db", "j", "--schema", "s", "--table", "slow", "--command-name", "slow"]);
    let slow = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let job = data_dir.path().join("diamond.json");
    std::fs::write(
        &job,
        r#"{"jobName": "nightly", "steps": [
            {"stepName": "extract", "kind": "command", "commandName": "ok"},
            {"stepName": "compact", "kind": "command", "commandName": "slow", "dependentSteps": ["extract"]},
            {"stepName": "stats", "kind": "command", "commandName": "ok", "dependentSteps": ["extract"]},
            {"stepName": "publish", "kind": "command", "commandName": "ok", "dependentSteps": ["compact", "stats"]}]}"#,
    )
    .unwrap();
    let out = c.compactd(&["define", "apply", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = c.compactd(&["trigger", "nightly", "--trigger", "k1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let start = Instant::now();
    loop {
        let out = c.compactd(&["job", "nightly", "k1", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let state = |s: &str| {
            v["steps"].as_array().and_then(|a| a.iter().find(|x| x["stepName"] == s)).map(|x| x["state"].clone())
        };
        if state("compact") == Some("Running".into()) && state("stats") == Some("Succeeded".into()) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "job not where the test wants it: {v:#}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    c.wait_status(&slow, Duration::from_secs(30), "the slow subtask running", |s| {
        s["subtasks"].as_array().is_some_and(|a| a.iter().any(|t| t["state"] == "Running"))
    });
    // Any node serves the whole cluster: ask one that is not the monitor.
    let rows = c.nodes();
    let monitor = monitor_of(&rows).unwrap();
    let (who, addr) = nodes.iter().find(|(n, _)| **n != monitor).unwrap();
    std::thread::sleep(compactd::serve::http::VIEW_TTL);
    let url = format!("http://{addr}/");
    let dom = browser(&["--dump-dom"], &url);
    for n in ["n1", "n2", "n3"] {
        let row = format!("<tr class=\"node\" data-node=\"{n}\">");
        let at = dom.find(&row).unwrap_or_else(|| panic!("node row {n} in {dom}"));
        let tr = &dom[at..at + dom[at..].find("</tr>").unwrap()];
        assert!(tr.contains("data-state=\"alive\""), "{n} alive: {tr}");
    }
    assert!(dom.contains(&format!("served by {who}")), "served by {who}");
    // The page names the monitor of the view it served: the one read
    // before, or, if an election happened meanwhile (a loaded machine),
    // the one after.
    let named = dom.split("<b id=\"monitor\">").nth(1).and_then(|r| r.split("</b>").next()).unwrap_or_default();
    let after = monitor_of(&c.nodes()).unwrap_or_default();
    assert!(
        named == monitor || named == after,
        "the page names {named:?} the monitor; `nodes` said {monitor:?} before and {after:?} after"
    );
    let task_row = |id: &str| {
        let at = dom.find(&format!("data-task=\"{id}\"")).unwrap_or_else(|| panic!("task {id} in {dom}"));
        dom[at..at + dom[at..].find("</tr>").unwrap()].to_string()
    };
    let m = task_row(&merged);
    assert!(m.contains("data-state=\"Done\"") && m.contains("aria-valuenow=\"3\"") && m.contains("3/3"), "{m}");
    let s = task_row(&slow);
    assert!(s.contains("data-state=\"Running\""), "the slow task runs, its subtask listed: {s}");
    let at = dom.find("data-job=\"nightly\"").expect("the job is shown");
    let job_html = &dom[at..];
    for (step, state) in
        [("extract", "Succeeded"), ("stats", "Succeeded"), ("compact", "Running"), ("publish", "Waiting")]
    {
        assert!(
            job_html.contains(&format!("<g class=\"step\" data-step=\"{step}\" data-state=\"{state}\">")),
            "step {step} drawn {state}: {job_html}"
        );
    }
    assert!(job_html.contains("data-from=\"compact\" data-to=\"publish\""), "the DAG's edges are drawn");
    let shot = target_dir().join("status-page.png");
    browser(&[&format!("--screenshot={}", shot.display())], &url);
    assert!(std::fs::metadata(&shot).map(|m| m.len() > 10_000).unwrap_or(false), "screenshot at {}", shot.display());
    let job_shot = target_dir().join("status-page-job.png");
    browser(&[&format!("--screenshot={}", job_shot.display())], &format!("http://{addr}/jobs/nightly/k1"));
    let task_dom = browser(&["--dump-dom"], &format!("http://{addr}/tasks/{slow}"));
    assert!(task_dom.contains("Outstanding subtasks") && task_dom.contains("data-state=\"Running\""), "{task_dom}");
    // A bad id is a clear 400, not a crash.
    let (code, body) = common::http::get(addr, "/tasks/..%2F..%2Fetc").unwrap();
    assert_eq!(code, 400, "{body}");
    eprintln!("screenshots: {} {}", shot.display(), job_shot.display());
}

#[test]
fn json_logs_completions_and_the_man_page() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let dir = tempfile::tempdir().unwrap();
    c.start_with("n1", &["--log-format", "json", "--data", &format!("fs://{}", dir.path().display())]);
    c.wait_nodes(Duration::from_secs(20), "n1 alive", |r| alive(r) == ["n1"]);
    assert_eq!(c.terminate("n1"), Some(0));
    let log = std::fs::read_to_string(c.log_path("n1")).unwrap();
    let mut messages = vec![];
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{line}");
        messages.push(v["fields"]["message"].as_str().unwrap_or_default().to_string());
    }
    assert!(messages.iter().any(|m| m == "compactd node starting"), "{messages:?}");
    assert!(messages.iter().any(|m| m == "leaving the cluster"), "{messages:?}");

    for (shell, marker) in [("bash", "_compactd()"), ("zsh", "#compdef compactd"), ("fish", "complete -c compactd")] {
        let out = std::process::Command::new(BIN).args(["completions", shell]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(marker) && text.contains("submit"), "{shell}: {text}");
    }
    let out = std::process::Command::new(BIN).arg("man").output().unwrap();
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && man.contains(".TH compactd 1") && man.contains("submit"), "{man}");
}
