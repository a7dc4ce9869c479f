//! A backend that accepts connections and never answers: every CLI command
//! (and `run`) gives up within its request timeout and retries, exits 1, and
//! names the endpoint and the operation. Without timeouts one such request
//! stalled a command (or a node's tick) forever.
//!
//! And a daemon whose backend hangs for longer than its session: its
//! executors die before its session runs out, the rest of the cluster takes
//! its units over, it rejoins under a new incarnation when the backend
//! answers again, and no unit ever runs on two nodes at once.
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster};
use common::freezer::Freezer;
use common::runs::{assert_no_overlap, read_runs, recording_command};
use common::s3::S3Server;
use serde_json::Value;

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
    let _turn = crate::common::turns::waits();
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

fn incarnations(c: &Cluster) -> BTreeMap<String, u64> {
    c.nodes()
        .iter()
        .filter(|r| alive(std::slice::from_ref(r)).len() == 1)
        .map(|r| (r["id"].as_str().unwrap().to_string(), r["incarnation"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_node_whose_backend_hangs_past_its_session_kills_its_runs_and_rejoins() {
    let _turn = crate::common::turns::waits();
    const SHARDS: u32 = 6;
    let s3 = S3Server::shared();
    let proxy = Freezer::start(s3.port());
    let root = s3.new_bucket("hang");
    let timings = vec!["--heartbeat", "300ms", "--session-timeout", "3s", "--lease", "3s"];
    let mut c = Cluster::on(root.clone(), s3.env());
    c.timings = timings.clone();
    // n3 reaches the same bucket through the proxy that will stop answering.
    let mut c3 = Cluster::on(root.replace(&s3.endpoint(), &format!("http://127.0.0.1:{}", proxy.port)), s3.env());
    c3.timings = timings;
    let records = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let data_uri = format!("fs://{}", data.path().display());
    for n in ["n1", "n2", "n3"] {
        let cmd = recording_command(records.path(), n, 8);
        let mut args = vec!["--data", &data_uri, "--executor", "command", "--command", &cmd];
        if n == "n3" {
            // One request that never answers holds a tick for 2 × 4 s, past
            // the 3 s session: only the session guard can stop n3's runs in
            // time (without it they ran on while n1 and n2 ran them again).
            args.extend(["--backend-timeout", "4s", "--backend-retries", "1"]);
            c3.start_with(n, &args);
        } else {
            args.extend(["--backend-timeout", "300ms", "--backend-retries", "0"]);
            c.start_with(n, &args);
        }
    }
    c.wait_nodes(Duration::from_secs(30), "3 alive", |r| alive(r).len() == 3);
    let before = incarnations(&c);
    let task = c.submit(&["--shards", &SHARDS.to_string(), "--manager", "n1"]);
    // n3 must have a unit (the ring may have given it none).
    let s = c.wait_status(&task, Duration::from_secs(20), "every unit dispatched", |s| {
        s["subtasks"].as_array().is_some_and(|subs| subs.len() == SHARDS as usize)
    });
    let subs = s["subtasks"].as_array().unwrap();
    if !subs.iter().any(|t| t["node"] == "n3") {
        let id = subs[0]["id"].as_str().unwrap();
        let out = c.compactd(&["reassign", id, "--to", "n3"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // Until n3 runs something.
    let start = Instant::now();
    while !read_runs(records.path()).values().flatten().any(|r| r.node == "n3") {
        assert!(start.elapsed() < Duration::from_secs(20), "n3 never ran a unit\n{}", c3.logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.freeze(true);
    let frozen_at = Instant::now();
    // The others go on: n3 is declared offline and its units run elsewhere.
    c.wait_nodes(Duration::from_secs(20), "n3 offline", |r| alive(r) == ["n1", "n2"]);
    std::thread::sleep(Duration::from_secs(5).saturating_sub(frozen_at.elapsed()));
    proxy.freeze(false);
    // n3 comes back under a new incarnation.
    c.wait_nodes(Duration::from_secs(30), "n3 back", |r| alive(r).len() == 3);
    let after = incarnations(&c);
    assert_eq!(after["n1"], before["n1"], "n1 rejoined");
    assert_eq!(after["n2"], before["n2"], "n2 rejoined");
    assert_ne!(after["n3"], before["n3"], "n3 kept its incarnation through a hang longer than its session");
    // The task ends Done.
    let start = Instant::now();
    loop {
        let st: Value = serde_json::from_slice(&c.compactd(&["status", &task, "--json"]).stdout).unwrap_or(Value::Null);
        if st["state"] == "Done" {
            assert_eq!(st["result"]["success"], SHARDS as u64, "{st:#}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "not done: {st:#}\n{}{}", c.logs_text(), c3.logs_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    // No unit ran on two nodes at once: a later attempt started after the
    // earlier one's last sign of life.
    let runs = read_runs(records.path());
    let killed = assert_no_overlap(&runs);
    let n3_killed = runs.values().flatten().filter(|r| r.node == "n3" && !r.ended).count();
    eprintln!(
        "{} runs of {SHARDS} units, {killed} killed ({n3_killed} on n3)",
        runs.values().map(Vec::len).sum::<usize>()
    );
    assert!(n3_killed >= 1, "n3's runs were not cut short: {runs:?}");
}
