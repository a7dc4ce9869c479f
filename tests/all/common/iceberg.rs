//! Java Iceberg, the reference implementation, as a writer and judge: one
//! long-lived `compactd.IcebergTool` JVM per test binary (the Maven module
//! `tests/support/iceberg`, built by `.ci/install-iceberg.sh`), driven by
//! JSON lines (see the tool's doc), and pyiceberg through
//! `tests/support/iceberg_tool.py`.
//!
//! Each command has a time limit, past which the JVM is killed and the test
//! fails with its log: a hung judge never hangs the suite. Tests share the
//! JVM, one command at a time. The tool is required: a test panics (never
//! skips) when it is not built.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(300);

pub struct Java {
    io: Mutex<Session>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    dead: Option<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Java {
    /// The JVM of this test binary, started on first use.
    pub fn shared() -> &'static Java {
        static SHARED: OnceLock<Java> = OnceLock::new();
        SHARED.get_or_init(Java::start)
    }

    fn start() -> Java {
        let dir = repo().join("tests/support/iceberg/target");
        if !dir.join("lib").is_dir() || !dir.join("classes").is_dir() {
            panic!(
                "the Java Iceberg tool is not built ({} missing): run `bash .ci/install-iceberg.sh` from the \
                 repository root (needs Java 17 and Maven)",
                dir.display()
            );
        }
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("iceberg-java.log");
        let cp = format!("{0}/classes:{0}/lib/*", dir.display());
        let mut child = Command::new("java")
            // C1 only: far less JIT work on 2 cores for these short commands.
            .args(["-Xmx1g", "-XX:TieredStopAtLevel=1", "-cp", &cp, "compactd.IcebergTool"])
            .current_dir(tmp.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Java Iceberg tool (java): {e}"));
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
        let java = Java { io: Mutex::new(Session { child, stdin, lines, dead: None }), log, _dir: tmp };
        let ready = {
            let mut s = java.io.lock().unwrap();
            java.answer(&mut s, "the start")
        };
        assert_eq!(ready["ready"], true, "{ready}\n{}", java.log_tail());
        java
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("at ")).collect();
        tail[tail.len().saturating_sub(40)..].join("\n")
    }

    fn answer(&self, s: &mut Session, what: &str) -> Value {
        if let Some(why) = &s.dead {
            panic!("the Java Iceberg tool is gone ({why}); {what} cannot run");
        }
        match s.lines.recv_timeout(LIMIT) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}")),
            Err(e) => {
                let _ = s.child.kill();
                let _ = s.child.wait();
                s.dead = Some(format!("{what}: {e:?}"));
                panic!("the Java Iceberg tool: {what}: {e:?}\n{}", self.log_tail());
            }
        }
    }

    /// Sends one command; its answer, `ok` or not.
    pub fn call(&self, cmd: &Value) -> Value {
        let what = format!("`{}`", cmd["cmd"].as_str().unwrap_or("?"));
        let mut s = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let line = cmd.to_string() + "\n";
        let stdin = s.stdin.as_mut().expect("stdin open");
        if let Err(e) = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush()) {
            panic!("the Java Iceberg tool: writing {what}: {e}\n{}", self.log_tail());
        }
        self.answer(&mut s, &what)
    }

    /// [`Java::call`], asserting the command succeeded.
    pub fn run(&self, cmd: &Value) -> Value {
        let out = self.call(cmd);
        assert!(out["ok"] == true, "Java Iceberg `{}` failed: {}\n{}", cmd["cmd"], out["error"], self.log_tail());
        out
    }
}

/// pyiceberg's view of a table (see `tests/support/iceberg_tool.py read`).
pub fn pyiceberg_read(table: &str, key: &str) -> Value {
    let out = Command::new(super::parquet::python())
        .arg(repo().join("tests/support/iceberg_tool.py"))
        .args(["read", table, "--key", key])
        .output()
        .expect("the Parquet judges' python runs");
    assert!(out.status.success(), "pyiceberg read of {table}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// pyiceberg's catalog-made table at `location` (metastore-named metadata).
pub fn pyiceberg_catalog_table(root: &str, location: &str) -> Value {
    let out = Command::new(super::parquet::python())
        .arg(repo().join("tests/support/iceberg_tool.py"))
        .args(["catalog_table", root, location])
        .output()
        .expect("the Parquet judges' python runs");
    assert!(out.status.success(), "pyiceberg catalog table: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `tests/support/iceberg_tool.py <args>` (pyiceberg), its JSON answer.
pub fn pyiceberg(args: &[&str]) -> Value {
    pyiceberg_with(args, &[])
}

/// [`pyiceberg`] with `env` set (an S3 server's credentials).
pub fn pyiceberg_with(args: &[&str], env: &[(String, String)]) -> Value {
    let out = Command::new(super::parquet::python())
        .arg(repo().join("tests/support/iceberg_tool.py"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("the Parquet judges' python runs");
    assert!(out.status.success(), "pyiceberg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
