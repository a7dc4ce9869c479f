//! Real `compactd` processes on one root: start, SIGKILL, SIGSTOP/SIGCONT,
//! SIGTERM, and `compactd nodes --json` to observe them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_compactd");

/// Timings the acceptance tests use: 200ms heartbeat, 1.5s session and lease.
pub const TEST_TIMINGS: &[&str] = &["--heartbeat", "200ms", "--session-timeout", "1500ms", "--lease", "1500ms"];

/// The longest a one-shot command or a leaving node may take in a test: a
/// hang fails the test instead of stalling the suite.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// The longest a command that waits for the cluster's work (`submit
/// --wait`) may take before the test takes it as hung.
pub const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Waits for `child` until `limit`; on timeout it is killed (SIGKILL) and
/// reaped, and `None` returned.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cmd.output()` with a limit: past it the process is killed and the
/// test fails with what it printed so far.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let status = wait_within(&mut child, limit);
    let (stdout, stderr) = (reader.join().unwrap(), err_reader.join().unwrap());
    match status {
        Some(status) => Output { status, stdout, stderr },
        None => panic!(
            "{cmd:?} ran past {limit:?} and was killed\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
}

/// The pause between two looks of a wait: short at first (most waits end
/// within a poll or two), then longer, so that the many tests waiting at
/// once (each look is a `compactd` process and a listing) leave the machine
/// to the cluster they watch.
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(50))
    }
}

impl Backoff {
    pub fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 3 / 2).min(Duration::from_millis(300));
    }
}

pub struct Cluster {
    pub root: String,
    pub env: Vec<(String, String)>,
    /// Timing flags every node gets ([`TEST_TIMINGS`]; empty: the defaults).
    pub timings: Vec<&'static str>,
    logs: tempfile::TempDir,
    _fs_root: Option<tempfile::TempDir>,
    procs: BTreeMap<String, Child>,
    /// Network namespace per node (tests/all/common/netns.rs); absent: the
    /// test's own.
    pub netns_of: BTreeMap<String, String>,
    /// Where one-shot commands run (None: the test's own namespace).
    pub cli_netns: Option<String>,
    /// Extra environment per node (a skewed clock).
    pub node_env: BTreeMap<String, Vec<(String, String)>>,
}

impl Cluster {
    /// A cluster on a fresh temporary fs root.
    pub fn fs() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        // Created up front: read commands refuse a root that does not exist,
        // and they may run before the first `compactd run` creates it.
        std::fs::create_dir_all(dir.path().join("root")).unwrap();
        let root = format!("fs://{}", dir.path().join("root").display());
        let mut c = Cluster::on(root, vec![]);
        c._fs_root = Some(dir);
        c
    }

    /// A cluster on any root URI, with extra environment for the processes.
    pub fn on(root: String, env: Vec<(String, String)>) -> Cluster {
        Cluster {
            root,
            env,
            timings: TEST_TIMINGS.to_vec(),
            logs: tempfile::tempdir().unwrap(),
            _fs_root: None,
            procs: BTreeMap::new(),
            netns_of: BTreeMap::new(),
            cli_netns: None,
            node_env: BTreeMap::new(),
        }
    }

    pub fn fs_path(&self) -> PathBuf {
        PathBuf::from(self.root.strip_prefix("fs://").expect("an fs cluster"))
    }

    pub fn log_path(&self, node: &str) -> PathBuf {
        self.logs.path().join(format!("{node}.log"))
    }

    pub fn start(&mut self, node: &str) {
        self.start_with(node, &[]);
    }

    pub fn start_with(&mut self, node: &str, extra: &[&str]) {
        self.start_bin(BIN, node, extra);
    }

    /// Starts `node` from another build of compactd (a previous release).
    pub fn start_bin(&mut self, bin: &str, node: &str, extra: &[&str]) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path(node)).unwrap();
        let mut cmd = Command::new(bin);
        if let Some(ns) = self.netns_of.get(node) {
            super::netns::Net::enter(&mut cmd, ns);
        }
        let child = cmd
            .args(["--root", &self.root, "run", "--node-id", node])
            .args(&self.timings)
            // Tests run as root (CI): accept command executors running as root.
            .arg("--allow-root")
            .args(extra)
            .envs(self.env.iter().cloned())
            // Several nodes on one host: each listens on a free loopback port.
            .env("COMPACTD_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .envs(self.node_env.get(node).into_iter().flatten().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn compactd run");
        self.procs.insert(node.to_string(), child);
    }

    pub fn pid(&self, node: &str) -> i32 {
        self.procs[node].id() as i32
    }

    fn signal(&self, node: &str, sig: i32) {
        let rc = unsafe { libc::kill(self.pid(node), sig) };
        assert_eq!(rc, 0, "kill({node}, {sig})");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self, node: &str) {
        self.signal(node, libc::SIGKILL);
        let mut child = self.procs.remove(node).unwrap();
        child.wait().unwrap();
    }

    pub fn pause(&self, node: &str) {
        self.signal(node, libc::SIGSTOP);
    }

    pub fn resume(&self, node: &str) {
        self.signal(node, libc::SIGCONT);
    }

    /// SIGTERM; returns the exit status code. A node still running
    /// [`COMMAND_LIMIT`] later is killed and the test fails.
    pub fn terminate(&mut self, node: &str) -> Option<i32> {
        self.signal(node, libc::SIGTERM);
        let mut child = self.procs.remove(node).unwrap();
        match wait_within(&mut child, COMMAND_LIMIT) {
            Some(status) => status.code(),
            None => panic!("{node} did not leave within {COMMAND_LIMIT:?} of SIGTERM\n{}", self.logs_text()),
        }
    }

    /// Waits for a node that is expected to die on its own (a crash shim):
    /// its exit status; the test fails if it is still running after `limit`.
    #[allow(dead_code)]
    pub fn wait_exit(&mut self, node: &str, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.procs.remove(node).unwrap();
        match wait_within(&mut child, limit) {
            Some(status) => status,
            None => panic!("{node} still runs after {limit:?}\n{}", self.logs_text()),
        }
    }

    pub fn is_running(&mut self, node: &str) -> bool {
        self.procs.get_mut(node).is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Runs a one-shot compactd command on this root (killed, and the test
    /// failed, if it runs past [`COMMAND_LIMIT`]).
    /// A command that waits for the cluster's work (`--wait`) is given
    /// [`WAIT_LIMIT`]: how long the work takes on a loaded machine is not
    /// what such a test measures, and the limit only catches a hang.
    pub fn compactd(&self, args: &[&str]) -> Output {
        let limit = if args.contains(&"--wait") { WAIT_LIMIT } else { COMMAND_LIMIT };
        self.compactd_within(limit, args)
    }

    /// [`Cluster::compactd`] with a limit of its own.
    pub fn compactd_within(&self, limit: Duration, args: &[&str]) -> Output {
        let mut cmd = Command::new(BIN);
        if let Some(ns) = &self.cli_netns {
            super::netns::Net::enter(&mut cmd, ns);
        }
        cmd.args(["--root", &self.root]).args(args).envs(self.env.iter().cloned());
        output_within(&mut cmd, limit)
    }

    /// `submit --json` of table `d.s.t` (unless `extra` names `--db`,
    /// `--schema` or `--table`) with `extra`; returns the task's id, and
    /// fails the test if the submit fails.
    pub fn submit(&self, extra: &[&str]) -> String {
        let mut args = vec!["submit"];
        for (flag, default) in [("--db", "d"), ("--schema", "s"), ("--table", "t")] {
            if !extra.contains(&flag) {
                args.extend([flag, default]);
            }
        }
        args.extend_from_slice(extra);
        args.push("--json");
        let out = self.compactd(&args);
        assert!(out.status.success(), "submit {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string()
    }

    /// `nodes --json`. Before the first node made the tree (`nodes` refuses
    /// a root without one), no rows.
    pub fn nodes(&self) -> Vec<Value> {
        let out = self.compactd(&["nodes", "--json"]);
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no compactd tree") {
            return vec![];
        }
        assert!(out.status.success(), "nodes failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("nodes --json is a JSON array")
    }

    /// Polls `nodes --json` until `ok` holds or `timeout` passes.
    pub fn wait_nodes(&self, timeout: Duration, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        let mut pause = Backoff::default();
        loop {
            let rows = self.nodes();
            if ok(&rows) {
                return rows;
            }
            if start.elapsed() > timeout {
                panic!("timed out after {timeout:?} waiting for {what}; last view: {rows:#?}\n{}", self.logs_text());
            }
            pause.sleep();
        }
    }

    /// `status <task> --json`; panics if the command fails.
    pub fn status(&self, task: &str) -> Value {
        let out = self.compactd(&["status", task, "--json"]);
        assert!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Submits an `expire` task of `db.s.t` with `extra` added to the
    /// `submit` command as they are, waits; its `status --json`.
    pub fn expire(&self, extra: &[&str]) -> Value {
        let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", "expire"];
        args.extend_from_slice(extra);
        args.extend(["--wait", "--json"]);
        let out = self.compactd_within(WAIT_LIMIT, &args);
        let id: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("submit: {e}: {}\n{}", String::from_utf8_lossy(&out.stderr), self.logs_text()));
        self.status(id["id"].as_str().unwrap())
    }

    /// `submit` of an `expire` task of `db.s.t` with `--data` (which judges
    /// the table at once) and `params`, not waiting: its output.
    pub fn expire_with_data(&self, data: &str, params: &[&str]) -> Output {
        let mut args = vec!["submit", "--db", "db", "--schema", "s", "--table", "t", "--executor", "expire"];
        args.extend(["--data", data]);
        for p in params {
            args.extend(["--param", p]);
        }
        self.compactd(&args)
    }

    /// Polls `status <task> --json` until `ok` holds or `timeout` passes. A
    /// poll whose command fails counts as `null` (the next one retries).
    pub fn wait_status(&self, task: &str, timeout: Duration, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        let mut pause = Backoff::default();
        loop {
            let out = self.compactd(&["status", task, "--json"]);
            let s = if out.status.success() {
                serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
            } else {
                Value::Null
            };
            if ok(&s) {
                return s;
            }
            assert!(start.elapsed() < timeout, "timed out waiting for {what}: {s:#}\n{}", self.logs_text());
            pause.sleep();
        }
    }

    pub fn logs_text(&self) -> String {
        let mut s = String::new();
        for entry in std::fs::read_dir(self.logs.path()).unwrap() {
            let p = entry.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            s += &format!("--- {} (last lines)\n", p.display());
            for l in tail.into_iter().rev() {
                s += l;
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.procs) {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn monitor_of(rows: &[Value]) -> Option<String> {
    let m: Vec<&Value> = rows.iter().filter(|r| r["monitor"] == true).collect();
    (m.len() == 1).then(|| m[0]["id"].as_str().unwrap().to_string())
}

pub fn alive(rows: &[Value]) -> Vec<String> {
    rows.iter().filter(|r| r["alive"] == true).map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

/// `compactd __expire` of `db/s/t/` on the fs data root `root`, run by hand
/// as a unit of an `expire` task with the task parameters `params`
/// (`expire.force` …, given to the child as `COMPACTD_PARAM_EXPIRE_FORCE`).
pub fn expire_unit(root: &std::path::Path, params: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", &format!("fs://{}", root.display()), "__expire", "--dir", "db/s/t/"]);
    for (k, v) in params {
        let name: String =
            k.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        cmd.env(format!("COMPACTD_PARAM_{name}"), v);
    }
    cmd
}

/// Runs `work` (an `expire`, say) on a thread of its own while `read`
/// reads again and again from this one until `work` ended: `work`'s
/// result, and how many reads started while it ran (the first starts at
/// once, so there is always one). Each read asserts what it must see.
pub fn reading_during<T: Send>(work: impl FnOnce() -> T + Send, mut read: impl FnMut()) -> (T, usize) {
    std::thread::scope(|s| {
        let running = s.spawn(work);
        let mut reads = 0;
        while !running.is_finished() {
            read();
            reads += 1;
        }
        (running.join().expect("the work panicked"), reads)
    })
}
