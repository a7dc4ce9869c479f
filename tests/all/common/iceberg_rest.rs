//! Iceberg's REST catalog server (`RESTCatalogServer` of Iceberg's test
//! fixtures over a SQLite JDBC catalog, built by `.ci/install-iceberg.sh`
//! into `tests/support/iceberg-rest/target/lib`), one per test binary, its
//! catalog in a SQLite file, its warehouse `<data>/db` so that the catalog's `ns.t` is the folder
//! `db/ns/t` compactd compacts under `--data <data>`; and a proxy in front
//! of it that can lose the answer to a commit, send it twice, or let
//! another writer commit first, exactly once.
//!
//! The server's JVM ends with the test binary: it runs under a shell that
//! kills it when the binary's end closes its stdin.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub struct RestServer {
    /// `http://127.0.0.1:<port>`.
    pub uri: String,
    data: PathBuf,
    log: PathBuf,
    _child: Mutex<Child>,
    _dir: tempfile::TempDir,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RestServer {
    /// The server of this test binary, started on first use.
    pub fn shared() -> &'static RestServer {
        static SHARED: OnceLock<RestServer> = OnceLock::new();
        SHARED.get_or_init(RestServer::start)
    }

    fn start() -> RestServer {
        let lib = repo().join("tests/support/iceberg-rest/target/lib");
        if !lib.is_dir() {
            panic!(
                "Iceberg's REST catalog server is not built ({} missing): run `bash .ci/install-iceberg.sh`",
                lib.display()
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("db")).unwrap();
        let log = dir.path().join("rest.log");
        let port = free_port();
        let child = Command::new("sh")
            .args(["-c", "java -Xmx512m -XX:TieredStopAtLevel=1 -cp \"$0/*\" org.apache.iceberg.rest.RESTCatalogServer & pid=$!; cat >/dev/null; kill $pid"])
            .arg(&lib)
            .env("CATALOG_WAREHOUSE", data.join("db"))
            // The fixture's default, `jdbc:sqlite::memory:`, is one database
            // per pooled connection: a second connection sees no tables.
            .env("CATALOG_URI", format!("jdbc:sqlite:file:{}", dir.path().join("catalog.db").display()))
            .env("CATALOG_REST_PORT", port.to_string())
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("rest.err")).unwrap()))
            .spawn()
            .expect("sh starts the REST catalog server");
        let uri = format!("http://127.0.0.1:{port}");
        let server = RestServer { uri, data, log, _child: Mutex::new(child), _dir: dir };
        let started = Instant::now();
        while super::http::get(&format!("127.0.0.1:{port}"), "/v1/config").map(|(c, _)| c) != Ok(200) {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "the REST catalog server did not start:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("iceberg rest: server up in {:?}", started.elapsed());
        server
    }

    /// The data root whose `db/` is the warehouse.
    pub fn data(&self) -> &Path {
        &self.data
    }

    pub fn log(&self) -> String {
        let err = self._dir.path().join("rest.err");
        format!(
            "{}{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(err).unwrap_or_default()
        )
    }
}

/// What the proxy does to the next commit (a POST to a table) it sees.
pub enum Fault {
    /// Runs this first (another writer's commit), then forwards the commit.
    Before(Box<dyn FnOnce() + Send>),
    /// Forwards the commit, then answers 502 instead of the catalog.
    LoseAnswer,
    /// Answers 502 without forwarding it.
    Drop,
    /// Forwards the commit twice, as a proxy or client that sends it again
    /// (the first answer lost on the way) does, and answers with the
    /// catalog's second answer.
    Twice,
}

/// A proxy in front of a REST catalog, one request per connection.
pub struct Proxy {
    /// `http://127.0.0.1:<port>`.
    pub uri: String,
    fault: Arc<Mutex<Option<Fault>>>,
    /// The status of each commit the catalog answered (through the proxy).
    pub commits: Arc<Mutex<Vec<u16>>>,
}

impl Proxy {
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let fault: Arc<Mutex<Option<Fault>>> = Arc::new(Mutex::new(None));
        let commits = Arc::new(Mutex::new(vec![]));
        let (f, c) = (fault.clone(), commits.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (up, f, c) = (upstream.clone(), f.clone(), c.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &up, &f, &c);
                });
            }
        });
        Proxy { uri, fault, commits }
    }

    /// Arms `f` for the next commit.
    pub fn arm(&self, f: Fault) {
        *self.fault.lock().unwrap() = Some(f);
    }
}

fn serve(
    mut conn: TcpStream,
    upstream: &str,
    fault: &Mutex<Option<Fault>>,
    commits: &Mutex<Vec<u16>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut raw = vec![];
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    while raw.len() < head_end + length {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let request_line = head.lines().next().unwrap_or("").to_string();
    let is_commit = {
        let mut w = request_line.split_whitespace();
        let (method, path) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        method == "POST" && path.contains("/tables/") && !path.ends_with("/metrics")
    };
    let armed = if is_commit { fault.lock().unwrap().take() } else { None };
    let bad_gateway = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let lose_answer = matches!(armed, Some(Fault::LoseAnswer));
    let sends = if matches!(armed, Some(Fault::Twice)) { 2 } else { 1 };
    match armed {
        Some(Fault::Drop) => return conn.write_all(bad_gateway),
        Some(Fault::Before(f)) => f(),
        _ => {}
    }
    // Forwarded with `Connection: close`: the answer ends with the stream.
    let headers: Vec<&str> =
        head[..head.len() - 4].split("\r\n").filter(|l| !l.to_ascii_lowercase().starts_with("connection:")).collect();
    let mut answer = vec![];
    for _ in 0..sends {
        let mut up = TcpStream::connect(upstream)?;
        up.write_all(format!("{}\r\nConnection: close\r\n\r\n", headers.join("\r\n")).as_bytes())?;
        up.write_all(&raw[head_end..])?;
        answer.clear();
        up.read_to_end(&mut answer)?;
        if is_commit {
            let status = String::from_utf8_lossy(&answer).split_whitespace().nth(1).and_then(|s| s.parse().ok());
            commits.lock().unwrap().push(status.unwrap_or(0));
        }
    }
    if lose_answer {
        return conn.write_all(bad_gateway);
    }
    conn.write_all(&answer)
}
