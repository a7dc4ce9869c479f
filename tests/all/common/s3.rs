//! A real S3-protocol server on loopback for integration tests: moto, served
//! one request at a time by `tests/support/s3_server.py`, from the venv that
//! `.ci/install-s3-server.sh` makes at `.venv-s3/` (or the python named by
//! `COMPACTD_TEST_PYTHON`).
//!
//! The child's stdin is a pipe held by [`S3Server`]: the server exits when it
//! is dropped, and also when the test process dies for any reason (the kernel
//! closes the pipe). Data lives in the server's memory only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

/// Dummy credentials: the server accepts any.
pub const ACCESS_KEY_ID: &str = "compactd-test";
pub const SECRET_ACCESS_KEY: &str = "compactd-test-secret";
pub const REGION: &str = "us-east-1";

const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct S3Server {
    child: Child,
    /// Held open: the server exits when this pipe closes.
    stdin: Option<ChildStdin>,
    _stdout: ChildStdout,
    port: u16,
    buckets: AtomicUsize,
    /// The address clients use (`127.0.0.1`, or the storage host's in a
    /// test's own network).
    host: String,
    /// The network namespace it serves in (None: the test's own).
    netns: Option<String>,
}

impl S3Server {
    /// The interpreter that runs the server: `$COMPACTD_TEST_PYTHON`, else
    /// `<repo>/.venv-s3/bin/python`.
    pub fn python() -> PathBuf {
        match std::env::var_os("COMPACTD_TEST_PYTHON") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-s3/bin/python"),
        }
    }

    /// Starts a fresh server on a free loopback port and waits until it
    /// listens. Panics (never skips) when the venv is missing.
    pub fn start() -> S3Server {
        Self::start_on(None)
    }

    /// Starts a server inside network namespace `ns`, listening on all of
    /// its addresses; clients reach it at [`super::netns::STORAGE_IP`].
    pub fn start_in(ns: &str) -> S3Server {
        Self::start_on(Some(ns))
    }

    fn start_on(ns: Option<&str>) -> S3Server {
        let python = Self::python();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/s3_server.py");
        if !python.exists() {
            panic!(
                "the loopback S3 server's python {} does not exist: run `bash .ci/install-s3-server.sh` \
                 from the repository root (it makes .venv-s3 with moto), or set COMPACTD_TEST_PYTHON \
                 to a python that has moto[server]==5.2.5 installed",
                python.display()
            );
        }
        let mut cmd = Command::new(&python);
        cmd.arg(&script);
        if let Some(ns) = ns {
            cmd.args(["--host", "0.0.0.0"]);
            super::netns::Net::enter(&mut cmd, ns);
        }
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap_or_else(|e| {
                panic!(
                    "cannot start the loopback S3 server ({} {}): {e}; run `bash .ci/install-s3-server.sh`",
                    python.display(),
                    script.display()
                )
            });
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");

        // Read the `PORT <n>` line on a helper thread so that a hung server
        // fails the test after START_TIMEOUT instead of blocking it forever.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let res = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send((res, reader.into_inner()));
        });
        let (line, stdout) = match rx.recv_timeout(START_TIMEOUT) {
            Ok((Ok(line), stdout)) => (line, stdout),
            Ok((Err(e), _)) => {
                let _ = child.kill();
                panic!("loopback S3 server: reading its PORT line failed: {e}");
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "loopback S3 server did not print its PORT line within {START_TIMEOUT:?} \
                     ({} {})",
                    python.display(),
                    script.display()
                );
            }
        };
        let port = match line.trim().strip_prefix("PORT ").map(str::parse::<u16>) {
            Some(Ok(p)) => p,
            _ => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "loopback S3 server did not start: expected `PORT <n>` on its stdout, got {line:?} \
                     (exit status {status:?}; its stderr is above). Is moto installed in {}? \
                     Run `bash .ci/install-s3-server.sh`.",
                    python.display()
                );
            }
        };
        let host = if ns.is_some() { super::netns::STORAGE_IP } else { "127.0.0.1" }.to_string();
        S3Server {
            child,
            stdin,
            _stdout: stdout,
            port,
            buckets: AtomicUsize::new(0),
            host,
            netns: ns.map(String::from),
        }
    }

    /// A server shared by the test binary, started on first use: one of
    /// [`SHARED_SERVERS`], taken in turn. A server answers one request at a
    /// time, and the tests run many at once: a cluster's heartbeats beside
    /// several other clusters' on one server missed their sessions. Never
    /// dropped; each exits when the test process does (its stdin pipe
    /// closes). Use [`S3Server::new_bucket`] per test for isolation, and
    /// the returned server for the whole test.
    pub fn shared() -> &'static S3Server {
        static SHARED: [OnceLock<S3Server>; SHARED_SERVERS] = [const { OnceLock::new() }; SHARED_SERVERS];
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        SHARED[NEXT.fetch_add(1, Ordering::Relaxed) % SHARED_SERVERS].get_or_init(S3Server::start)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>` (or the storage host's address)
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// Creates a fresh bucket whose name starts with `name` (a unique
    /// `-<n>` suffix is added, so tests sharing a server never collide) and
    /// returns the root URI `s3://<bucket>/<prefix>?endpoint=…&region=us-east-1`
    /// for `RootUri::parse` or a `--root` argument.
    pub fn new_bucket(&self, name: &str) -> String {
        let n = self.buckets.fetch_add(1, Ordering::Relaxed);
        let base: String = name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
            .collect();
        let base = base.trim_matches('-');
        let base = if base.is_empty() { "bucket" } else { base };
        let suffix = format!("-{n}");
        let bucket = format!("{}{suffix}", &base[..base.len().min(63 - suffix.len())]);
        let bucket = if bucket.len() < 3 { format!("b{bucket}") } else { bucket };
        self.create_bucket(&bucket);
        format!("s3://{bucket}/compactd?endpoint={}&region={REGION}", self.endpoint())
    }

    /// Creates `bucket` with a plain `PUT /<bucket>`; panics unless 200.
    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = self.http("PUT", &format!("/{bucket}"));
        assert_eq!(status, 200, "loopback S3 server: PUT /{bucket} answered {status}: {body}");
    }

    /// The keys under `prefix` in `bucket` (one ListObjectsV2 page: tests
    /// list small folders).
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = self.http("GET", &format!("/{bucket}?list-type=2&prefix={prefix}"));
        assert_eq!(status, 200, "loopback S3 server: listing {bucket}/{prefix}: {body}");
        body.split("<Key>").skip(1).filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_string())).collect()
    }

    /// One minimal HTTP/1.1 request without a body; returns (status, body).
    fn http(&self, method: &str, path: &str) -> (u16, String) {
        match &self.netns {
            Some(ns) => super::netns::Net::in_ns(ns, || self.http_here(method, path)),
            None => self.http_here(method, path),
        }
    }

    fn http_here(&self, method: &str, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("loopback S3 server on port {}: connect: {e}", self.port));
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .and_then(|_| s.flush())
        .unwrap_or_else(|e| panic!("loopback S3 server: {method} {path}: {e}"));
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)
            .unwrap_or_else(|e| panic!("loopback S3 server: {method} {path}: reading the answer: {e}"));
        let resp = String::from_utf8_lossy(&resp).into_owned();
        let status = resp
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("loopback S3 server: {method} {path}: bad answer {resp:?}"));
        let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    /// Variables for child processes (`Command::envs`): dummy credentials.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET_ACCESS_KEY.into()),
        ]
    }

    /// Sets [`S3Server::env`] in this process, for in-process `Store::open`
    /// on an `s3://` URI (the store reads the credentials from the
    /// environment). Every test sets the same values, so concurrent calls
    /// are harmless.
    pub fn set_env(&self) {
        for (k, v) in self.env() {
            std::env::set_var(k, v);
        }
    }
}

/// How many servers [`S3Server::shared`] hands out in turn.
pub const SHARED_SERVERS: usize = 3;

impl Drop for S3Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
