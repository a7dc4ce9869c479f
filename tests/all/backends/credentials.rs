//! Credentials never leak: with distinctive secret values in the AWS
//! variables, daemons at `RUST_LOG=debug`, `compactd nodes`, `nodes --json`,
//! `check --json` and failing commands (an endpoint nobody listens on) must
//! not print them, and no object in the bucket may contain them.
//! Runs against the loopback S3 server (it accepts any credentials).
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{BIN, TEST_TIMINGS};
use common::s3::{S3Server, REGION};
use futures::TryStreamExt;
use store::{RootUri, Store};

const KEY_ID: &str = "AKIACOMPACTDLEAKK3Y1D";
const SECRET: &str = "s3cr3t-COMPACTD-LEAK-9f8e7d6c5b4a";
const TOKEN: &str = "t0ken-COMPACTD-LEAK-ffee0011";

/// The secrets, and pieces of them long enough to be recognisable (a log
/// that truncates or splits a value still leaks it).
fn needles() -> Vec<String> {
    let mut v = vec![];
    for s in [KEY_ID, SECRET, TOKEN] {
        v.push(s.to_string());
        v.push(s[..12].to_string());
        v.push(s[s.len() - 12..].to_string());
    }
    v
}

thread_local! {
    static RUST_LOG: std::cell::Cell<&'static str> = const { std::cell::Cell::new("info") };
}

fn secret_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", TOKEN),
        ("RUST_LOG", RUST_LOG.get()),
        ("RUST_BACKTRACE", "1"),
    ]
}

fn compactd(root: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["--root", root])
        .args(args)
        .envs(secret_env())
        .env_remove("COMPACTD_ROOT")
        .stdin(Stdio::null())
        .output()
        .expect("run compactd")
}

/// The daemons of one test: killed when it ends, so that a failed
/// assertion leaves none of them polling a server that is gone.
struct Daemons(Vec<(String, Child)>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_daemon(root: &str, node: &str, data: &str) -> Child {
    Command::new(BIN)
        .args(["--root", root, "run", "--node-id", node, "--data", data])
        .args(TEST_TIMINGS)
        .env("COMPACTD_LISTEN", "127.0.0.1:0")
        .envs(secret_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn compactd run")
}

/// Every (where, text) pair that contains a needle.
fn leaks<'a>(outputs: impl IntoIterator<Item = (String, &'a [u8])>) -> Vec<String> {
    let needles = needles();
    let mut found = vec![];
    for (what, bytes) in outputs {
        let text = String::from_utf8_lossy(bytes);
        for n in &needles {
            if let Some(i) = text.find(n.as_str()) {
                let from = text[..i].char_indices().rev().nth(80).map_or(0, |(j, _)| j);
                let to = (i + n.len() + 80).min(text.len());
                let to = (to..=text.len()).find(|j| text.is_char_boundary(*j)).unwrap();
                found.push(format!("{what} contains {n:?}: …{}…", &text[from..to]));
            }
        }
    }
    found
}

/// At the default log level (`info`), with warnings and errors.
#[test]
fn secrets_appear_in_no_output_and_no_object() {
    let _turn = crate::common::turns::waits();
    secrets_do_not_leak("info", 1_000);
}

/// At `RUST_LOG=debug` every process prints the AWS access key id, secret
/// key and session token in clear, on each request signing:
/// `DEBUG Trying credential provider: StaticCredentialProvider {
/// access_key_id: "…", secret_access_key: "…", session_token: Some("…") }`.
/// The line is `log::debug!("Trying credential provider: {provider:?}")` in
/// reqsign-core 3.3.2 `src/api.rs` (OpenDAL's S3 signer), forwarded by
/// tracing-subscriber's log bridge. Fix in `src/logging.rs`: always add the
/// directives `reqsign=info`, `reqsign_core=info`, `reqsign_aws_v4=info`
/// (after the user's `RUST_LOG`, so `RUST_LOG=debug` cannot re-enable them;
/// or drop those targets below `info` with a filter layer), and report the
/// derived `Debug` upstream.
#[test]
fn secrets_appear_in_no_output_and_no_object_at_debug() {
    let _turn = crate::common::turns::waits();
    secrets_do_not_leak("debug", 10_000);
}

fn secrets_do_not_leak(level: &'static str, min_output: usize) {
    RUST_LOG.set(level);
    let s3 = S3Server::shared();
    let root = s3.new_bucket("creds");
    let bucket = root.strip_prefix("s3://").and_then(|r| r.split('/').next()).unwrap().to_string();
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().display().to_string();

    let mut daemons =
        Daemons(["cred1", "cred2", "cred3"].iter().map(|n| (n.to_string(), spawn_daemon(&root, n, &data))).collect());

    // Wait until the cluster has formed (a monitor with all three members).
    let mut outputs: Vec<(String, Vec<u8>)> = vec![];
    let start = Instant::now();
    loop {
        let out = compactd(&root, &["nodes", "--json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let ready =
            rows.iter().filter(|r| r["alive"] == true).count() == 3 && rows.iter().any(|r| r["monitor"] == true);
        outputs.push(("nodes --json (stdout)".into(), out.stdout));
        outputs.push(("nodes --json (stderr)".into(), out.stderr));
        if ready {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the cluster did not form: {rows:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    for args in [&["nodes"][..], &["check", "--json"], &["check"]] {
        let out = compactd(&root, args);
        outputs.push((format!("{args:?} (stdout)"), out.stdout));
        outputs.push((format!("{args:?} (stderr)"), out.stderr));
    }

    // Errors: an endpoint nobody listens on (the request fails and the error
    // is printed, with the backend, the operation and the path).
    let dead = format!("s3://{bucket}/compactd?endpoint=http://127.0.0.1:9&region={REGION}");
    for args in [&["nodes"][..], &["check", "--json"], &["run", "--node-id", "lost"]] {
        let out = compactd_with_deadline(&dead, args, Duration::from_secs(60));
        assert!(!out.status.success(), "{args:?} on a dead endpoint succeeded");
        assert!(!out.stderr.is_empty(), "{args:?} on a dead endpoint printed no error");
        outputs.push((format!("{args:?} on a dead endpoint (stdout)"), out.stdout));
        outputs.push((format!("{args:?} on a dead endpoint (stderr)"), out.stderr));
    }

    // Every object while the daemons run (heartbeats included), and again
    // after they left.
    let mut objects = read_bucket(&bucket, s3.endpoint());
    assert!(
        objects.iter().any(|(p, _)| p.contains("Registry/Nodes/")),
        "the bucket holds no heartbeat: {:?}",
        objects.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );

    // Stop the daemons cleanly and collect their logs.
    for (name, child) in &mut daemons.0 {
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let out = wait_with_deadline(child, Duration::from_secs(30));
        outputs.push((format!("run {name} (stdout)"), out.stdout));
        outputs.push((format!("run {name} (stderr)"), out.stderr));
    }
    let log_bytes: usize = outputs.iter().map(|(_, b)| b.len()).sum();
    assert!(log_bytes > min_output, "suspiciously little output ({log_bytes} bytes): is RUST_LOG={level} honoured?");

    objects.extend(read_bucket(&bucket, s3.endpoint()));

    let found = leaks(
        outputs
            .iter()
            .map(|(w, b)| (w.clone(), b.as_slice()))
            .chain(objects.iter().map(|(p, b)| (format!("object {p}"), b.as_slice()))),
    );
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

fn compactd_with_deadline(root: &str, args: &[&str], deadline: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(["--root", root])
        .args(args)
        .envs(secret_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run compactd");
    wait_with_deadline(&mut child, deadline)
}

/// Waits for `child`, killing it after `deadline`; returns its output.
fn wait_with_deadline(child: &mut Child, deadline: Duration) -> Output {
    // Drain the pipes on threads so a chatty child never blocks on them.
    use std::io::Read;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = vec![];
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = vec![];
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() }
}

/// Lists the whole bucket recursively and reads every object.
fn read_bucket(bucket: &str, endpoint: String) -> Vec<(String, Vec<u8>)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The store reads its credentials from the environment; the server
    // accepts any.
    S3Server::shared().set_env();
    let uri = RootUri::parse(&format!("s3://{bucket}?endpoint={endpoint}&region={REGION}")).unwrap();
    rt.block_on(async {
        let store = Store::open(&uri).await.unwrap();
        let entries: Vec<store::Entry> = store.list_stream("", true).try_collect().await.unwrap();
        let mut out = vec![];
        for e in entries {
            if let Some(b) = store.read(&e.path).await.unwrap() {
                out.push((e.path, b.to_vec()));
            }
        }
        out
    })
}
