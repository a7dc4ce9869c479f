//! Spark with Delta Lake, the reference implementation of Delta, as a judge:
//! one long-lived `tests/support/spark_tool.py` session per test binary (a
//! session takes 10-20 s to start), from the venv `.ci/install-spark.sh`
//! makes at `.venv-spark/` with its Delta jars resolved into `.spark-ivy/`
//! (or the python named by `COMPACTD_TEST_SPARK_PYTHON`).
//!
//! Commands are JSON lines (see the tool's doc); each has a time limit, past
//! which the session is killed and the test fails with the tool's log: a
//! hung Spark never hangs the suite. Tests share the session, one command at
//! a time.
//!
//! Where the judge is not installed, [`Spark::shared`] prints `SKIP` and
//! returns `None`; with `COMPACTD_REQUIRE_SPARK=1` (`.ci/run`) it fails the
//! test instead, so CI never passes without the judge.
//!
//! [`Spark::iceberg`] is the same for Spark with Iceberg's runtime
//! (`tests/support/spark_iceberg_tool.py`, the venv and Ivy cache
//! `.ci/install-spark-iceberg.sh` makes).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

/// A session start resolves the Delta jars from the project's Ivy cache and
/// starts a JVM: 10-20 s on 2 cores, more when the machine is busy.
const START_LIMIT: Duration = Duration::from_secs(240);
/// The limit of one command unless the caller gives one.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(240);

pub struct Spark {
    io: Mutex<Session>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Why the session is unusable (killed past a limit, exited).
    dead: Option<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Which Spark: its venv, Ivy cache, tool and install script.
struct Flavour {
    venv: &'static str,
    ivy: &'static str,
    tool: &'static str,
    install: &'static str,
}

const DELTA: Flavour =
    Flavour { venv: ".venv-spark", ivy: ".spark-ivy", tool: "spark_tool.py", install: "install-spark.sh" };
const ICEBERG: Flavour = Flavour {
    venv: ".venv-spark-iceberg",
    ivy: ".spark-iceberg-ivy",
    tool: "spark_iceberg_tool.py",
    install: "install-spark-iceberg.sh",
};

/// The judge's python, or why it is not there.
fn python(f: &Flavour) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("COMPACTD_TEST_SPARK_PYTHON").filter(|p| !p.is_empty() && f.venv == DELTA.venv) {
        return Ok(PathBuf::from(p));
    }
    let p = repo().join(f.venv).join("bin/python");
    if !p.exists() {
        return Err(format!("{} does not exist", p.display()));
    }
    let stamp = repo().join(f.ivy).join(".compactd-resolved");
    if !stamp.exists() {
        return Err(format!("its jars are not resolved ({} is missing)", stamp.display()));
    }
    Ok(p)
}

fn started(f: &'static Flavour) -> Option<Spark> {
    match python(f) {
        Ok(p) => Some(Spark::start(p, f.tool)),
        Err(why) => {
            let fix = format!("run `bash .ci/{}` from the repository root", f.install);
            if std::env::var_os("COMPACTD_REQUIRE_SPARK").is_some_and(|v| v == "1") {
                panic!("the Spark judge is required here (COMPACTD_REQUIRE_SPARK=1) but {why}: {fix}");
            }
            eprintln!("SKIP: the Spark judge is not installed ({why}): {fix}");
            None
        }
    }
}

impl Spark {
    /// The session of this test binary, started on first use; `None` (after
    /// printing `SKIP`) where the judge is not installed, unless
    /// `COMPACTD_REQUIRE_SPARK=1`, which makes that a failure.
    pub fn shared() -> Option<&'static Spark> {
        static SHARED: OnceLock<Option<Spark>> = OnceLock::new();
        SHARED.get_or_init(|| started(&DELTA)).as_ref()
    }

    /// Spark with Iceberg's runtime, as [`Spark::shared`].
    pub fn iceberg() -> Option<&'static Spark> {
        static SHARED: OnceLock<Option<Spark>> = OnceLock::new();
        SHARED.get_or_init(|| started(&ICEBERG)).as_ref()
    }

    fn start(python: PathBuf, tool: &str) -> Spark {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("spark.log");
        let mut child = Command::new(&python)
            .arg(repo().join("tests/support").join(tool))
            // Spark leaves its warehouse and scratch folders in its cwd.
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Spark judge ({}): {e}", python.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let spark = Spark { io: Mutex::new(Session { child, stdin, lines, dead: None }), log, _dir: dir };
        let ready = spark.answer(START_LIMIT, "the session start");
        if ready["ready"] != true {
            panic!("the Spark judge did not start: {ready}\n{}", spark.log_tail());
        }
        eprintln!("spark: session started in {} ms", ready["session_start_ms"]);
        spark
    }

    /// The last lines of the tool's stderr (Spark's log and tracebacks).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("at ")).collect();
        tail[tail.len().saturating_sub(40)..].join("\n")
    }

    /// Waits for the next answer line; past `limit` the session is killed.
    fn answer(&self, limit: Duration, what: &str) -> Value {
        let mut s = self.io.lock().unwrap_or_else(|p| p.into_inner());
        self.answer_locked(&mut s, limit, what)
    }

    fn answer_locked(&self, s: &mut Session, limit: Duration, what: &str) -> Value {
        if let Some(why) = &s.dead {
            panic!("the Spark judge is gone ({why}); {what} cannot run");
        }
        match s.lines.recv_timeout(limit) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("the Spark judge answered {what} with a line that is not JSON ({e}): {line}")
            }),
            Err(e) => {
                let _ = s.child.kill();
                let _ = s.child.wait();
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => format!("{what} ran past {limit:?}: killed"),
                    mpsc::RecvTimeoutError::Disconnected => format!("it exited during {what}"),
                };
                s.dead = Some(why.clone());
                panic!("the Spark judge: {why}\n{}", self.log_tail());
            }
        }
    }

    /// Sends one command; its answer, `ok` or not.
    pub fn call_within(&self, cmd: &Value, limit: Duration) -> Value {
        let what = format!("`{}`", cmd["cmd"].as_str().unwrap_or("?"));
        let mut s = self.io.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &s.dead {
            panic!("the Spark judge is gone ({why}); {what} cannot run");
        }
        let line = cmd.to_string() + "\n";
        let sent = s.stdin.as_mut().expect("stdin open").write_all(line.as_bytes()).and_then(|_| {
            let stdin = s.stdin.as_mut().expect("stdin open");
            stdin.flush()
        });
        if let Err(e) = sent {
            s.dead = Some(format!("its stdin: {e}"));
            panic!("the Spark judge: writing {what}: {e}\n{}", self.log_tail());
        }
        self.answer_locked(&mut s, limit, &what)
    }

    pub fn call(&self, cmd: &Value) -> Value {
        self.call_within(cmd, COMMAND_LIMIT)
    }

    /// [`Spark::call`], asserting the command succeeded.
    pub fn run(&self, cmd: &Value) -> Value {
        let out = self.call(cmd);
        assert!(out["ok"] == true, "Spark `{}` failed: {}\n{}", cmd["cmd"], out["error"], self.log_tail());
        out
    }
}

/// Spark SQL settings that make Spark 3+ write dates and timestamps the way
/// Spark 2 did (rebased to the hybrid Julian calendar) and mark the files so.
pub fn legacy_write() -> Value {
    json!({
        "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
        "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY",
    })
}

/// Settings of a reader that refuses to guess: a file holding dates before
/// 1582-10-15 (or timestamps before 1900) without a footer saying which
/// calendar wrote them fails the read instead of being read either way.
pub fn exception_read() -> Value {
    json!({
        "spark.sql.parquet.datetimeRebaseModeInRead": "EXCEPTION",
        "spark.sql.parquet.int96RebaseModeInRead": "EXCEPTION",
    })
}
