//! Executors run one subtask each, as a child process of the worker: the
//! `command` executor is `sh -c <template>`; the built-in `merge` and
//! `parquet` executors are `compactd __merge [--format parquet] …` (see
//! [`merge`] and [`parquet`]). A child runs in its own process
//! group, which the worker kills as a whole on stop, timeout or when it
//! drops the work of an old incarnation. A daemon's executors also die with
//! it: its [`reaper`] kills their groups when it is gone, so a SIGKILLed
//! worker leaves nothing behind. Without a reaper (in-process nodes, or
//! none could start) a child gets `PR_SET_PDEATHSIG` instead, which reaches
//! only the child itself and costs a full fork of the daemon per executor.
//!
//! With `run --io-limit RATE` the built-in executors share one token
//! bucket of RATE bytes per second (read plus written) held by the daemon:
//! each gets a grant socket and asks before every read or write (see
//! [`throttle`]). Command executors are not limited (their I/O is theirs).
//!
//! Template placeholders `{db} {schema} {table} {partition} {task} {subtask}
//! {shard_index} {shard_total} {param.NAME}` are replaced by shell-quoted
//! values (write them unquoted in the template); the same values are in the
//! environment as `COMPACTD_DB`, …, `COMPACTD_PARAM_<NAME>`.

pub mod delta;

pub mod expire;

mod groups;
pub use groups::{Groups, Tripped};

pub mod iceberg;

pub mod merge;

pub mod reaper;

pub mod throttle;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use layouts::formats::ExecutorKind;
use tokio::io::AsyncReadExt;

/// Bytes of output kept (the tail) and stored beside the subtask status.
pub const TAIL_BYTES: usize = 4096;

/// Everything an executor needs to run one subtask.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub kind: ExecutorKind,
    pub command: Option<String>,
    pub timeout: Duration,
    /// `db`, `schema`, `table`, `partition`, `task`, `subtask`, `shard_index`,
    /// `shard_total`, `round`, `attempt`.
    pub vars: BTreeMap<&'static str, String>,
    pub params: BTreeMap<String, String>,
    /// For `merge`: the data backend URI and the target file size.
    pub data_uri: String,
    pub target_size: u64,
    /// For `parquet`: the outputs' codec ([`parquet::parse_compression`]).
    pub compression: String,
    /// For `merge`: the scheduler root URI and the subtask's folder, checked
    /// right before the commit (see [`merge::MergeJob::fence`]).
    pub fence: Option<(String, String)>,
    /// For `command`: the user the child runs as (`run --run-as`).
    pub run_as: Option<RunAs>,
}

/// A user to run command executors as, resolved once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// Looks `name` up in the user database (`getpwnam_r`).
    pub fn lookup(name: &str) -> std::io::Result<RunAs> {
        let c = std::ffi::CString::new(name).map_err(|_| std::io::Error::other("a user name holds no NUL"))?;
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: all pointers are valid for the call; buf outlives it.
        let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        if out.is_null() {
            return Err(std::io::Error::other(format!("no user {name:?} on this host")));
        }
        Ok(RunAs { name: name.to_string(), uid: pw.pw_uid, gid: pw.pw_gid })
    }
}

impl ExecRequest {
    fn var(&self, k: &str) -> &str {
        self.vars.get(k).map(String::as_str).unwrap_or("")
    }
}

/// Quotes a value for `sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Replaces the placeholders of a command template.
pub fn render(template: &str, vars: &BTreeMap<&'static str, String>, params: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let key = &after[..close];
        let value = match key.strip_prefix("param.") {
            Some(p) => params.get(p),
            None => vars.get(key),
        };
        match value {
            Some(v) => out.push_str(&shell_quote(v)),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A task parameter as a built-in executor's child process reads it: from
/// the `COMPACTD_PARAM_<NAME>` the worker set (`None`: not set).
pub fn param_from_env(name: &str) -> Option<String> {
    std::env::var(format!("COMPACTD_PARAM_{}", env_name(name))).ok()
}

fn env_name(key: &str) -> String {
    key.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub success: bool,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub tail: String,
}

/// A running executor.
#[derive(Debug)]
pub struct Running {
    /// How the child ended, from the task that waits for it; the child
    /// itself is owned by that task.
    exit: tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>,
    pgid: i32,
    /// On the worker's monotonic clock.
    deadline: Duration,
    tail: Arc<Mutex<Vec<u8>>>,
    ended: bool,
}

/// Called once when an executor's child has ended and its output is read:
/// the worker uses it to wake its node (see [`crate::cluster::wake`]).
pub type OnExit = Box<dyn FnOnce() + Send + 'static>;

/// How long the output may go on after the child ended (a process that
/// left the group may hold the pipe open).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

fn capture(
    mut r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    tail: Arc<Mutex<Vec<u8>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
            t.extend_from_slice(&buf[..n]);
            if t.len() > TAIL_BYTES {
                let cut = t.len() - TAIL_BYTES;
                t.drain(..cut);
            }
        }
    })
}

/// Starts an executor for `req`, listed in `groups` while it lives, if
/// their session guard lets `incarnation` start one at `now` (see
/// [`Groups`]); `on_exit` runs once it has ended. A built-in executor asks
/// `io` (the node's limit, if any) before its reads and writes.
pub fn spawn(
    req: &ExecRequest,
    now: Duration,
    groups: &Groups,
    incarnation: u64,
    io: Option<&throttle::IoLimit>,
    on_exit: Option<OnExit>,
) -> std::io::Result<Running> {
    let mut cmd = match req.kind {
        ExecutorKind::Noop => return Err(std::io::Error::other("the noop executor runs in process, not as a child")),
        ExecutorKind::Command => {
            let template = req
                .command
                .as_deref()
                .ok_or_else(|| std::io::Error::other("the command executor needs a command template (--command)"))?;
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(render(template, &req.vars, &req.params));
            c
        }
        ExecutorKind::Expire => {
            let mut c = tokio::process::Command::new(std::env::current_exe()?);
            let table = format!("{}/{}/{}/", req.var("db"), req.var("schema"), req.var("table"));
            c.args(["--root", &req.data_uri, "__expire", "--dir", &table]);
            if let Some((root, folder)) = &req.fence {
                c.args(["--fence-root", root, "--fence-dir", folder]);
            }
            c
        }
        ExecutorKind::Merge | ExecutorKind::Parquet | ExecutorKind::Delta | ExecutorKind::Iceberg => {
            let exe = std::env::current_exe()?;
            let mut c = tokio::process::Command::new(exe);
            let table = format!("{}/{}/{}/", req.var("db"), req.var("schema"), req.var("table"));
            // A Delta or Iceberg unit is a partition of the table's log or
            // manifests, not a folder.
            let dir = match req.kind {
                ExecutorKind::Delta | ExecutorKind::Iceberg => table,
                _ => format!("{table}{}/", req.var("partition")),
            };
            c.args(["--root", &req.data_uri, "__merge", "--dir", &dir, "--task", req.var("task")])
                .args(["--round", req.var("round"), "--attempt", req.var("attempt")])
                .args(["--target-size", &req.target_size.to_string()]);
            match req.kind {
                ExecutorKind::Parquet => {
                    c.args(["--format", "parquet", "--compression", &req.compression]);
                }
                ExecutorKind::Delta | ExecutorKind::Iceberg => {
                    c.args(["--format", req.kind.label(), "--compression", &req.compression])
                        .args(["--partition", req.var("partition")]);
                }
                _ => {}
            }
            if let Some((root, folder)) = &req.fence {
                c.args(["--fence-root", root, "--fence-dir", folder]);
            }
            c
        }
    };
    // The service manager's channel is the daemon's alone: a child that
    // wrote to it could declare the node ready or feed its watchdog.
    for k in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        cmd.env_remove(k);
    }
    for (k, v) in &req.vars {
        cmd.env(format!("COMPACTD_{}", env_name(k)), v);
    }
    for (k, v) in &req.params {
        cmd.env(format!("COMPACTD_PARAM_{}", env_name(k)), v);
    }
    // One pipe for stdout and stderr: the tail keeps both as they were
    // written, in their order, and each executor costs one pipe, one
    // registration with the reactor and one reading task instead of two.
    let (out, out_w) = std::io::pipe()?;
    let out = tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(out))?;
    cmd.stdin(Stdio::null()).stdout(out_w.try_clone()?).stderr(out_w).process_group(0).kill_on_drop(true);
    if let (Some(io), true) = (io, req.kind.is_builtin_merge()) {
        io.attach(&mut cmd)?;
    }
    // Drop to the configured user for commands: supplementary groups, then
    // the group, then the user (after setuid nothing else may change).
    let drop_to = match (req.kind, &req.run_as) {
        (ExecutorKind::Command, Some(u)) => Some((
            std::ffi::CString::new(u.name.as_str()).map_err(|_| std::io::Error::other("NUL in a user name"))?,
            u.uid,
            u.gid,
        )),
        _ => None,
    };
    // Code between fork and exec makes the standard library fork the whole
    // daemon instead of using posix_spawn: only when a user is to be set,
    // or when no reaper will kill this executor if the daemon dies.
    let death_signal = !groups.has_reaper();
    if drop_to.is_some() || death_signal {
        // SAFETY: prctl, initgroups, setgid and setuid are called between fork
        // and exec on values prepared before the fork; nothing else runs there.
        unsafe { pre_exec(&mut cmd, drop_to, death_signal) };
    }
    let (mut child, started) = groups.start_child(incarnation, now, || {
        let child = cmd.spawn()?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        Ok((child, pgid))
    })?;
    // The write ends are the child's alone now: the reader's end of file
    // is the child's (and its children's) last close.
    drop(cmd);
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let tail = Arc::new(Mutex::new(Vec::new()));
    let captures = [capture(out, tail.clone())];
    let (tx, exit) = tokio::sync::oneshot::channel();
    let groups = groups.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        // The child is gone; make sure nothing it started lingers (that also
        // closes the pipes they held), then let the output drain.
        groups::kill_group(pgid);
        groups.remove(started);
        let _ = tokio::time::timeout(OUTPUT_GRACE, futures::future::join_all(captures)).await;
        let _ = tx.send(status);
        if let Some(f) = on_exit {
            f();
        }
    });
    Ok(Running { exit, pgid, deadline: now + req.timeout, tail, ended: false })
}

/// # Safety
/// Runs its closure between fork and exec; see [`tokio::process::Command::pre_exec`].
unsafe fn pre_exec(
    cmd: &mut tokio::process::Command,
    drop_to: Option<(std::ffi::CString, u32, u32)>,
    death_signal: bool,
) {
    cmd.pre_exec(move || {
        if death_signal {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        if let Some((name, uid, gid)) = &drop_to {
            if libc::initgroups(name.as_ptr(), *gid as _) != 0 || libc::setgid(*gid) != 0 || libc::setuid(*uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    fn tail(&self) -> String {
        String::from_utf8_lossy(&self.tail.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Returns how the child ended, if it has; kills it past its timeout
    /// (`now` on the clock that [`spawn`] was given).
    pub fn try_finish(&mut self, now: Duration) -> Option<Finished> {
        use tokio::sync::oneshot::error::TryRecvError;
        let (success, exit_code, error) = match self.exit.try_recv() {
            Ok(Ok(status)) => {
                (status.success(), status.code(), (!status.success()).then(|| format!("executor exited with {status}")))
            }
            Ok(Err(e)) => (false, None, Some(format!("waiting for the executor failed: {e}"))),
            Err(TryRecvError::Empty) if now >= self.deadline => {
                self.kill();
                (false, None, Some("executor timed out and was killed".into()))
            }
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Closed) => (false, None, Some("the executor's waiter stopped".into())),
        };
        self.ended = true;
        Some(Finished { success, exit_code, error, tail: self.tail() })
    }

    /// Kills the executor and everything it started (the child leads its
    /// process group).
    pub fn kill(&mut self) {
        groups::kill_group(self.pgid);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            self.kill();
        }
    }
}

/// Prefix of the line in an executor's output that carries its counters
/// as a JSON object of unsigned integers (the built-in executors print one).
pub const STATS_PREFIX: &str = "compactd-stats: ";

/// The counters of the last well-formed stats line in `output`; empty if
/// there is none. Anything malformed is ignored (commands are free to print
/// what they like).
pub fn parse_stats(output: &str) -> std::collections::BTreeMap<String, u64> {
    output
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix(STATS_PREFIX))
        .find_map(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

#[cfg(test)]
// These tests wait for real child processes.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// Processes of a group that are not zombies (a zombie whose parent
    /// died may wait for a reaper that containers do not always have).
    pub(crate) fn live_in_group(pgid: i32) -> usize {
        let mut n = 0;
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let Some(after) = stat.rsplit_once(')').map(|x| x.1) else {
                continue;
            };
            let f: Vec<&str> = after.split_whitespace().collect();
            if f.len() > 3 && f[2] == pgid.to_string() && f[0] != "Z" {
                n += 1;
            }
        }
        n
    }

    #[test]
    fn templates_quote_values() {
        let mut vars = BTreeMap::new();
        vars.insert("partition", "dt=1; rm -rf /".to_string());
        vars.insert("db", "it's".to_string());
        let mut params = BTreeMap::new();
        params.insert("date".to_string(), "2024-01-01".to_string());
        let s = render("echo {partition} {db} {param.date} {unknown} {", &vars, &params);
        assert_eq!(s, "echo 'dt=1; rm -rf /' 'it'\\''s' '2024-01-01' {unknown} {");
    }

    #[test]
    fn stats_come_from_the_last_well_formed_line() {
        let out = "x\ncompactd-stats: {\"a\": 1}\ncompactd-stats: {\"skipped_special\": 3}\ncompactd-stats: nope\n";
        assert_eq!(parse_stats(out), [("skipped_special".to_string(), 3)].into());
        assert!(parse_stats("compactd-stats: {\"a\": -1}").is_empty());
        assert!(parse_stats("").is_empty());
    }

    /// A command request with no variables or parameters.
    fn command(cmd: &str, timeout: Duration) -> ExecRequest {
        ExecRequest {
            kind: ExecutorKind::Command,
            command: Some(cmd.into()),
            timeout,
            vars: BTreeMap::new(),
            params: BTreeMap::new(),
            data_uri: String::new(),
            target_size: 0,
            compression: String::new(),
            fence: None,
            run_as: None,
        }
    }

    async fn finished(r: &mut Running, clock: &crate::clock::SharedClock) -> Finished {
        loop {
            if let Some(f) = r.try_finish(clock.mono()) {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn runs_commands_with_env_and_captures_the_tail() {
        let mut vars = BTreeMap::new();
        vars.insert("table", "t1".to_string());
        let mut params = BTreeMap::new();
        params.insert("who".to_string(), "ops".to_string());
        let req = ExecRequest {
            kind: ExecutorKind::Command,
            command: Some("echo {table} $COMPACTD_TABLE $COMPACTD_PARAM_WHO; exit 3".into()),
            timeout: Duration::from_secs(10),
            vars,
            params,
            data_uri: String::new(),
            target_size: 0,
            compression: String::new(),
            fence: None,
            run_as: None,
        };
        let clock = crate::clock::SystemClock::shared();
        let mut r = spawn(&req, clock.mono(), &Groups::default(), 0, None, None).unwrap();
        let f = loop {
            if let Some(f) = r.try_finish(clock.mono()) {
                break f;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(f.exit_code, Some(3));
        assert!(!f.success);
        assert!(r.tail().contains("t1 t1 ops"), "{:?}", r.tail());
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let req = command("sleep 30 & sleep 30", Duration::from_millis(100));
        let clock = crate::clock::SystemClock::shared();
        let mut r = spawn(&req, clock.mono(), &Groups::default(), 0, None, None).unwrap();
        let pgid = r.pid();
        let f = finished(&mut r, &clock).await;
        assert!(f.error.unwrap().contains("timed out"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(live_in_group(pgid), 0, "the background sleep survived");
    }

    /// The session guard's kill: every live executor's whole group, and an
    /// executor that ended is no longer listed (its pgid may be reused).
    #[tokio::test]
    async fn groups_kill_every_live_executor_and_forget_ended_ones() {
        let req = |cmd: &str| command(cmd, Duration::from_secs(60));
        let clock = crate::clock::SystemClock::shared();
        let groups = Groups::default();
        let mut quick = spawn(&req("true"), clock.mono(), &groups, 0, None, None).unwrap();
        finished(&mut quick, &clock).await;
        let mut a = spawn(&req("sleep 30 & sleep 30"), clock.mono(), &groups, 0, None, None).unwrap();
        let mut b = spawn(&req("sleep 30"), clock.mono(), &groups, 0, None, None).unwrap();
        let (ga, gb) = (a.pid(), b.pid());
        assert_eq!(groups.kill_all(), 2, "the ended executor is not listed");
        assert!(!finished(&mut a, &clock).await.success);
        assert!(!finished(&mut b, &clock).await.success);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!((live_in_group(ga), live_in_group(gb)), (0, 0), "a killed group survived");
        assert_eq!(groups.kill_all(), 0, "ended executors are forgotten");
    }
}
