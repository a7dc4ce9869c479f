//! A backend that accepts connections and never answers: every CLI command
//! (and `run`) gives up within its request timeout and retries, exits 1, and
//! names the endpoint and the operation. Without timeouts one such request
//! stalled a command (or a node's tick) forever.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

/// Accepts connections and holds them open without a byte of reply.
fn silent_server() -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let mut held = vec![];
        let start = Instant::now();
        // Bounded: the test is over long before.
        while start.elapsed() < Duration::from_secs(120) {
            match l.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (port, h)
}

#[test]
fn every_command_gives_up_on_a_backend_that_never_answers() {
    let (port, _server) = silent_server();
    let root = format!("s3://bucket/prefix?endpoint=http://127.0.0.1:{port}&region=us-east-1");
    let id = "aaaaffff.16176931.56000000.0";
    let commands: Vec<Vec<&str>> = vec![
        vec!["nodes"],
        vec!["check"],
        vec!["list"],
        vec!["status", id],
        vec!["submit", "--db", "d", "--schema", "s", "--table", "t"],
        vec!["stop", id],
        vec!["history"],
        vec!["jobs"],
        vec!["job", "nightly", "k1"],
        vec!["trigger", "nightly", "--trigger", "k1"],
        vec!["define", "versions", "nightly"],
        vec!["upgrade", "--dry-run"],
        vec!["run", "--node-id", "n1"],
    ];
    for args in commands {
        let start = Instant::now();
        let out = Command::new(BIN)
            .args(["--root", &root, "--backend-timeout", "400ms", "--backend-retries", "1"])
            .args(&args)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(took < Duration::from_secs(15), "{args:?} took {took:?}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{args:?}: the endpoint is not named: {err}");
        assert!(
            ["list", "read", "stat", "create", "put", "delete", "probe"].iter().any(|op| err.contains(op)),
            "{args:?}: no operation named: {err}"
        );
        assert!(err.to_lowercase().contains("timeout") || err.contains("timed out"), "{args:?}: {err}");
        eprintln!("{args:?}: exit 1 after {took:?}");
    }
}
