//! Hostile HTTP clients cannot slow the cluster (issue 29): a node at
//! default timings, whose work is started by pokes, runs a trivial task as
//! fast while 300 idle and 100 slow (a byte a second) connections are held
//! against its port, reopened whenever the node closes them; its open files
//! stay bounded; an oversized head gets 431 and an oversized body 413, and
//! neither changes anything.
// Real processes on real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};

/// Wall time of `submit --shards 1 --wait` of a task whose one unit runs
/// `true`, median of five.
fn trivial_task(c: &Cluster) -> Duration {
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let out = c.compactd(&["submit", "--db", "d", "--schema", "s", "--table", "t", "--shards", "1", "--wait"]);
            assert!(out.status.success(), "submit --wait: {}", String::from_utf8_lossy(&out.stderr));
            t.elapsed()
        })
        .collect();
    times.sort();
    times[2]
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Holds `idle` connections that send nothing and `slow` ones that send a
/// request head a byte a second, each reopened when the node closes it,
/// until `stop`. Returns how many times the node closed one.
fn attack(addr: String, idle: usize, slow: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let connect = || {
            let s = TcpStream::connect(&addr).ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        };
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        let mut idle_conns: Vec<Option<TcpStream>> = (0..idle).map(|_| connect()).collect();
        let mut slow_conns: Vec<(Option<TcpStream>, usize)> = (0..slow).map(|_| (connect(), 0)).collect();
        let mut closed = 0;
        let mut last_byte = Instant::now();
        // Open while a non-blocking read would block; anything the node
        // sent (a 408) is drained, end of stream or an error is closed.
        let alive = |s: &mut TcpStream| {
            let mut b = [0u8; 1024];
            loop {
                match s.read(&mut b) {
                    Ok(0) => return false,
                    Ok(_) => continue,
                    Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                }
            }
        };
        while !stop.load(Ordering::Relaxed) {
            for c in idle_conns.iter_mut() {
                if c.as_mut().is_none_or(|s| !alive(s)) {
                    closed += 1;
                    *c = connect();
                }
            }
            let byte_due = last_byte.elapsed() >= Duration::from_secs(1);
            if byte_due {
                last_byte = Instant::now();
            }
            for (c, sent) in slow_conns.iter_mut() {
                let ok = match c.as_mut() {
                    Some(s) => alive(s) && (!byte_due || s.write_all(&head[*sent % head.len()..][..1]).is_ok()),
                    None => false,
                };
                if ok && byte_due {
                    *sent += 1;
                }
                if !ok {
                    closed += 1;
                    *c = connect();
                    *sent = 0;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        closed
    })
}

/// Sends `request` and returns the response's status code.
fn status_of(addr: &str, request: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The node may answer before it has read everything (and close).
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {text:?}"))
}

fn pokes_received(addr: &str) -> u64 {
    let (code, body) = common::http::get(addr, "/v1/status").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["wake"]["pokes_received"].as_u64().unwrap()
}

#[test]
fn idle_and_slow_connections_do_not_slow_pokes_and_oversized_requests_are_refused() {
    let mut c = Cluster::fs();
    // Default timings: a 10 s poll, so only a poke makes a task start at once.
    c.timings = vec![];
    c.start_with("n1", &["--executor", "command", "--command", "true"]);
    let rows = c.wait_nodes(Duration::from_secs(40), "n1 monitor and member", |r| {
        monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
    });
    let addr = rows[0]["addr"].as_str().expect("n1 advertises its listener").to_string();
    let pid = c.pid("n1") as u32;
    let quiet = trivial_task(&c);
    let files_before = open_files(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let attacker = attack(addr.clone(), 300, 100, stop.clone());
    std::thread::sleep(Duration::from_secs(3));
    let files_under_attack = open_files(pid);
    let hostile = trivial_task(&c);
    let (code, _) = common::http::get(&addr, "/healthz").unwrap();
    assert_eq!(code, 200);
    // Held past the head timeout: the node closed and the attacker reopened.
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let closed = attacker.join().unwrap();
    eprintln!(
        "trivial task: {quiet:?} quiet, {hostile:?} under 300 idle + 100 slow connections; \
         open files {files_before} → {files_under_attack}; the node closed {closed} connections"
    );
    assert!(
        hostile <= quiet * 2 + Duration::from_millis(100),
        "a trivial task took {hostile:?} under attack, {quiet:?} without"
    );
    assert!(files_under_attack < files_before + 400 + 64, "{files_under_attack} open files");
    assert!(closed >= 300, "the node closed only {closed} idle or slow connections in 7 s");
    std::thread::sleep(Duration::from_secs(1));
    assert!(open_files(pid) < files_before + 32, "connections left open: {} files", open_files(pid));

    // Oversized head: 431; oversized or unknown-length body: 413. Nothing
    // reaches a handler: the poke counter does not move.
    let before = pokes_received(&addr);
    let big = "x".repeat(64 * 1024);
    let head = format!("POST /v1/poke HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status_of(&addr, head.as_bytes()), 431);
    let body = "POST /v1/poke HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\nxxxx";
    assert_eq!(status_of(&addr, body.as_bytes()), 413);
    let chunked = "POST /v1/poke HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nxxxx\r\n0\r\n\r\n";
    assert_eq!(status_of(&addr, chunked.as_bytes()), 413);
    assert_eq!(status_of(&addr, b"DELETE /v1/poke HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"), 405);
    assert_eq!(pokes_received(&addr), before, "a refused request counted as a poke");
    // A well-formed poke still counts.
    assert_eq!(
        status_of(&addr, b"POST /v1/poke HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        202
    );
    assert_eq!(pokes_received(&addr), before + 1);
}
