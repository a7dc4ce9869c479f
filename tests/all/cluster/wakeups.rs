//! Wake-ups with real `compactd` processes at the **default**
//! timings (10 s heartbeat, 30 s session and lease), on fs and on the
//! loopback S3 server: work starts when it is written, not at the next
//! poll. Then the same scenarios with every listener off (`--listen off`,
//! test timings so that polling alone finishes in seconds): only slower,
//! never wrong. And a flood of forged pokes: heartbeats stay on time, the
//! node's listings stay under the bound that the wake-up rate
//! ([`WOKEN_PER_SECOND`], [`WOKEN_BURST`]) gives.
// Real processes and their latencies: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster};
use common::hdfs::HdfsCluster;
use common::s3::S3Server;
use serde_json::Value;

const PARTITIONS: usize = 3;

/// The rate bound on woken ticks.
const WOKEN_PER_SECOND: u32 = compactd::cluster::wake::WOKEN_PER_SECOND;
const WOKEN_BURST: u32 = compactd::cluster::wake::WOKEN_BURST;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/jobs/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn json(out: &std::process::Output, what: &str) -> Value {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Three nodes, each defining the commands `ok` (true) and `slow` (sleeps).
fn start3(c: &mut Cluster, data: &str, listen: bool) {
    for n in ["n1", "n2", "n3"] {
        let mut extra = vec!["--data", data, "--command", "ok=true", "--command", "slow=sleep 60"];
        if !listen {
            extra.extend(["--listen", "off"]);
        }
        c.start_with(n, &extra);
    }
    // At the default timings the monitor sees a new heartbeat within one
    // heartbeat (10 s): membership is polled, only work is poked.
    c.wait_nodes(Duration::from_secs(40), "3 alive nodes and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
}

/// A 3-partition merge through `submit --wait`: returns how long it took.
fn merge(c: &Cluster, data: &str) -> Duration {
    let want = common::table::make_table(data, PARTITIONS);
    let t0 = Instant::now();
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--wait", "--json"]);
    let took = t0.elapsed();
    assert!(out.status.success(), "submit --wait: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text());
    let (lines, commits) = common::table::read_table(data, PARTITIONS);
    assert_eq!(lines, want, "every line once");
    assert_eq!(commits.len(), PARTITIONS, "{commits:?}");
    took
}

/// How often the test looks: each look is a `compactd` process and a
/// listing, which a loaded loopback S3 server answers one at a time, so
/// looking faster slows what is watched.
const LOOK: Duration = Duration::from_millis(200);

/// Past this the work is taken as hung (polls alone, on a loaded machine,
/// take a minute or two).
const HANG: Duration = Duration::from_secs(300);

/// A 3-step job chain from `trigger` to Succeeded.
fn chain(c: &Cluster, key: &str) -> Duration {
    json(&c.compactd(&["define", "apply", &fixture("chain.json"), "--json"]), "define apply");
    let t0 = Instant::now();
    json(&c.compactd(&["trigger", "chain", "--trigger", key, "--json"]), "trigger");
    loop {
        let v = json(&c.compactd(&["job", "chain", key, "--json"]), "job");
        if v["state"] != "Running" {
            let took = t0.elapsed();
            assert_eq!(v["state"], "Succeeded", "{v:#}\n{}", c.logs_text());
            for s in v["steps"].as_array().unwrap() {
                assert_eq!(s["state"], "Succeeded", "{v:#}\n{}", c.logs_text());
            }
            return took;
        }
        assert!(t0.elapsed() < HANG, "the chain did not end: {v:#}\n{}", c.logs_text());
        std::thread::sleep(LOOK);
    }
}

/// `stop` of a running task until it is Cancel.
fn stop(c: &Cluster) -> Duration {
    let out = c.compactd(&["submit", "--db", "j", "--schema", "s", "--table", "slow", "--command-name", "slow"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let task = String::from_utf8_lossy(&out.stdout).trim().to_string();
    c.wait_status(&task, Duration::from_secs(60), "the slow subtask running", |s| {
        s["subtasks"].as_array().is_some_and(|a| a.iter().any(|t| t["state"] == "Running"))
    });
    let t0 = Instant::now();
    let out = c.compactd(&["stop", &task]);
    assert!(out.status.success(), "stop: {}", String::from_utf8_lossy(&out.stderr));
    loop {
        let s = c.status(&task);
        if s["state"] == "Cancel" {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < HANG, "not cancelled: {s:#}\n{}", c.logs_text());
        std::thread::sleep(LOOK);
    }
}

/// How often a node polls its folder at the default timings (`run
/// --heartbeat`).
const POLL: Duration = Duration::from_secs(10);

fn scenarios(mut c: Cluster, data: &str, listen: bool) {
    if listen {
        c.timings = vec![];
    } else {
        // Without pokes an idle job waits for the monitor's sweep.
        c.timings.extend(["--sweep", "1s"]);
    }
    start3(&mut c, data, listen);
    let woken = |c: &Cluster| -> u64 {
        c.nodes().iter().map(|r| status_json(r)["wake"]["woken_ticks"].as_u64().unwrap_or(0)).sum()
    };
    let woken_before = if listen { woken(&c) } else { 0 };
    let m = merge(&c, data);
    let j = chain(&c, "k1");
    let s = stop(&c);
    eprintln!(
        "listen={listen} root={}: merge submit --wait {m:?}, chain trigger→Succeeded {j:?}, stop→Cancel {s:?}",
        c.root
    );
    if listen {
        // Each of the three was carried by pokes: ticks woken by them, and
        // each done in less than one poll at the default timings (10 s),
        // where polls alone need one poll or more for each of its hops
        // (the manager's split, the nodes' runs, the end). How much less
        // depends on the machine's load, which is not what is measured.
        let woken = woken(&c) - woken_before;
        if m.max(j) >= Duration::from_secs(3) || s >= Duration::from_secs(2) {
            for row in c.nodes() {
                eprintln!("{}: {}", row["id"], node_status(&row));
            }
        }
        assert!(woken >= 3, "{woken} ticks woken by pokes for a merge, a chain and a stop\n{}", c.logs_text());
        assert!(m < POLL, "merge took {m:?}\n{}", c.logs_text());
        assert!(j < POLL, "chain took {j:?}\n{}", c.logs_text());
        assert!(s < POLL, "stop took {s:?}\n{}", c.logs_text());
    }
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

/// `GET /v1/status` of a node (`nodes --json` row), as text.
fn node_status(row: &Value) -> String {
    use std::io::{Read, Write};
    let Some(addr) = row["addr"].as_str() else { return "no address".into() };
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return format!("{addr}: refused") };
    let _ = write!(s, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

fn status_json(row: &Value) -> Value {
    serde_json::from_str(&node_status(row)).unwrap_or_else(|e| panic!("status of {}: {e}", row["id"]))
}

/// Sends `n` pokes to `addr` over `conns` pipelined keep-alive connections
/// (every 100th with a bad scope); returns (202s, 400s).
fn flood(addr: &str, n: usize, conns: usize) -> (usize, usize) {
    use std::io::{Read, Write};
    let threads: Vec<_> = (0..conns)
        .map(|t| {
            let addr = addr.to_string();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                let mine = n / conns;
                let mut w = s.try_clone().unwrap();
                // Spread over a second: ten bursts, 100 ms apart.
                let writer = std::thread::spawn(move || {
                    for burst in 0..10 {
                        let mut reqs = String::new();
                        for i in (burst * mine / 10)..((burst + 1) * mine / 10) {
                            let scope = match (t * mine + i) % 100 {
                                0 => "nonsense",
                                k if k % 2 == 0 => "monitor",
                                _ => "work",
                            };
                            reqs += &format!(
                                "POST /v1/poke?scope={scope} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                            );
                        }
                        w.write_all(reqs.as_bytes()).unwrap();
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
                let (mut ok, mut bad, mut buf, mut text) = (0, 0, [0u8; 65536], String::new());
                while ok + bad < mine {
                    let k = s.read(&mut buf).unwrap();
                    assert!(k > 0, "the node closed the connection after {} replies", ok + bad);
                    text.push_str(&String::from_utf8_lossy(&buf[..k]));
                    // Count complete status lines only.
                    let cut = text.rfind("HTTP/1.1 ").unwrap_or(0);
                    ok += text[..cut].matches("HTTP/1.1 202").count();
                    bad += text[..cut].matches("HTTP/1.1 400").count();
                    text.drain(..cut);
                    if text.contains("\r\n\r\n") && ok + bad + 1 == mine {
                        ok += text.matches("HTTP/1.1 202").count();
                        bad += text.matches("HTTP/1.1 400").count();
                    }
                }
                writer.join().unwrap();
                (ok, bad)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// 20,000 forged pokes in three seconds at the monitor (the node with
/// the most to lose: its lease and its membership scans; such a flood
/// cost ~47 LISTs/s when only `MIN_WOKEN_GAP` spaced woken ticks): every node keeps its incarnation (no offline declaration, no
/// rejoin), the monitor keeps its lease, and the pokes cost at most
/// [`WOKEN_BURST`] + [`WOKEN_PER_SECOND`] a second woken ticks, each listing
/// at most [`LISTS_PER_WOKEN_TICK`] times.
#[test]
fn a_flood_of_forged_pokes_costs_a_bounded_number_of_listings() {
    let _turn = crate::common::turns::waits();
    let (mut c, data) = fs_cluster();
    start3(&mut c, &data, true);
    let rows = c.nodes();
    let monitor = monitor_of(&rows).unwrap();
    let row = rows.iter().find(|r| r["id"] == monitor.as_str()).unwrap().clone();
    let addr = row["addr"].as_str().unwrap().to_string();
    let incarnations: Vec<(Value, Value)> = rows.iter().map(|r| (r["id"].clone(), r["incarnation"].clone())).collect();
    let before = status_json(&row);
    let t0 = Instant::now();
    // Three floods of about a second each.
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..3 {
        let (o, b) = flood(&addr, 6_800, 8);
        (ok, bad) = (ok + o, bad + b);
    }
    let took = t0.elapsed();
    let after = status_json(&row);
    assert_eq!((ok, bad), (20_196, 204), "every poke answered: 202, or 400 for a bad scope");
    let d = |k: &str, sub: &str| after[k][sub].as_u64().unwrap() - before[k][sub].as_u64().unwrap();
    let woken = d("wake", "woken_ticks");
    let lists = d("backend", "list");
    // Polls in the same time (200 ms heartbeat in the test timings) list
    // too: the monitor's scan, its fence, its folder, the job drive.
    let polls = (took.as_millis() / 200 + 2) as u64;
    let woken_bound = u64::from(WOKEN_BURST) + (took.as_secs_f64() * f64::from(WOKEN_PER_SECOND)).ceil() as u64 + 1;
    let list_bound = woken_bound * LISTS_PER_WOKEN_TICK + polls * LISTS_PER_POLL;
    eprintln!(
        "flood: 20,400 pokes in {took:?}; woken ticks {woken} (bound {woken_bound}), listings {lists} \
         ({:.1}/s, bound {list_bound}), coalesced {}, rate-limited wake-ups {}",
        lists as f64 / took.as_secs_f64(),
        d("wake", "pokes_coalesced"),
        d("wake", "wakeups_rate_limited"),
    );
    assert!(d("wake", "pokes_received") >= 20_196);
    // Only the first poke after each tick's take starts a wake-up.
    assert!(d("wake", "pokes_coalesced") >= 19_000, "most pokes joined a pending wake-up");
    assert!(woken <= woken_bound, "{woken} woken ticks in {took:?}");
    assert!(lists <= list_bound, "{lists} listings in {took:?}");
    // Heartbeats stayed on time: two sessions later nobody was declared
    // offline or rejoined, and the monitor is the same.
    std::thread::sleep(Duration::from_secs(3));
    let rows = c.nodes();
    assert_eq!(monitor_of(&rows).as_deref(), Some(monitor.as_str()), "{rows:#?}");
    let now: Vec<(Value, Value)> = rows.iter().map(|r| (r["id"].clone(), r["incarnation"].clone())).collect();
    assert_eq!(now, incarnations, "a node rejoined or was declared offline: {rows:#?}\n{}", c.logs_text());
    assert!(rows.iter().all(|r| r["alive"] == true && r["declared_offline"] == false), "{rows:#?}");
    assert!(!c.logs_text().contains("declared offline"), "{}", c.logs_text());
}

/// Listings of one woken tick at most: the node's folder, and on the
/// monitor the fence (`Election/`) and the job instances.
const LISTS_PER_WOKEN_TICK: u64 = 3;
/// Listings of one poll at most, on an idle monitor: the heartbeat scan,
/// the fence before renewing, its folder, the fence and job listing of a
/// drive, the change log.
const LISTS_PER_POLL: u64 = 7;

fn fs_cluster() -> (Cluster, String) {
    let c = Cluster::fs();
    let data = format!("fs://{}", c.fs_path().with_file_name("data").display());
    (c, data)
}

fn s3_cluster(s3: &S3Server, name: &str) -> (Cluster, String) {
    s3.set_env();
    let root = s3.new_bucket(name);
    let data = s3.new_bucket(&format!("{name}-data"));
    (Cluster::on(root, s3.env()), data)
}

#[test]
fn fs_work_starts_when_written_at_the_default_timings() {
    let _turn = crate::common::turns::waits();
    let (c, data) = fs_cluster();
    scenarios(c, &data, true);
}

#[test]
fn s3_work_starts_when_written_at_the_default_timings() {
    let _turn = crate::common::turns::waits();
    // A server of its own: the loopback server answers one request at a
    // time, and this test times its requests.
    let s3 = S3Server::start();
    let (c, data) = s3_cluster(&s3, "wake");
    scenarios(c, &data, true);
}

#[test]
fn hdfs_work_starts_when_written_at_the_default_timings() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let c = Cluster::on(hdfs.new_root("wake"), vec![]);
    scenarios(c, &hdfs.new_root("wake-data"), true);
}

#[test]
fn fs_without_listeners_the_same_work_only_polls() {
    let _turn = crate::common::turns::waits();
    let (c, data) = fs_cluster();
    scenarios(c, &data, false);
}

#[test]
fn s3_without_listeners_the_same_work_only_polls() {
    let _turn = crate::common::turns::waits();
    let (c, data) = s3_cluster(S3Server::shared(), "nowake");
    scenarios(c, &data, false);
}

/// The listener keeps at most `MAX_CONNECTIONS` connections open: one more
/// is answered only when one of them closes (it waits in the kernel's
/// accept queue, not in the node's memory).
///
/// The idle connections hold their slots only until their header timeout
/// (`HEADER_TIMEOUT`, counted from their accept, which is after `start`):
/// an answer to the extra connection before `start + HEADER_TIMEOUT` breaks
/// the bound; one after it may be a slot freed by that timeout, so the
/// round is run again (a loaded machine can be that slow).
#[test]
fn the_listener_holds_a_bounded_number_of_connections() {
    let _turn = crate::common::turns::waits();
    use compactd::serve::http::{raise_fd_limit, HEADER_TIMEOUT, MAX_CONNECTIONS};
    use std::io::{Read, Write};
    use std::time::Instant;
    // This process opens MAX_CONNECTIONS + 1 sockets: a fresh shell's soft
    // limit of open files (1024 on Debian) would fail them with EMFILE.
    raise_fd_limit(u64::MAX);
    let (mut c, data) = fs_cluster();
    c.start_with("n1", &["--data", &data]);
    let rows = c.wait_nodes(Duration::from_secs(20), "n1 alive", |r| alive(r).len() == 1);
    // Resolved once: a name looked up per connect made the 1024 connects
    // take seconds, most of the header timeout.
    let addr: std::net::SocketAddr = {
        use std::net::ToSocketAddrs;
        let named = rows[0]["addr"].as_str().unwrap();
        named.to_socket_addrs().unwrap().next().unwrap_or_else(|| panic!("{named} resolves to nothing"))
    };
    let poke = b"POST /v1/poke?scope=work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    let mut buf = [0u8; 256];
    for round in 1..=3 {
        let start = Instant::now();
        let mut idle: Vec<std::net::TcpStream> =
            (0..MAX_CONNECTIONS).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        // Every slot is taken once the node has accepted them all; until
        // then the extra one queues behind them anyway.
        std::thread::sleep(Duration::from_millis(300));
        let mut extra = std::net::TcpStream::connect(addr).unwrap();
        extra.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        extra.write_all(poke).unwrap();
        let early = extra.read(&mut buf);
        if early.is_ok() {
            let at = start.elapsed();
            assert!(at >= HEADER_TIMEOUT, "answered beyond the connection bound after {at:?}: {early:?}");
            eprintln!("round {round}: answered after {at:?}, past the idle connections' header timeout; again");
            drop(idle);
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        drop(idle.pop());
        extra.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = extra.read(&mut buf).expect("answered once a slot was free");
        assert!(
            String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 202"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        return;
    }
    panic!("three rounds took longer than the header timeout: the bound could not be observed on this machine");
}

/// `POST` to `addr`'s poke route; returns the status line.
fn poke_raw(addr: &str, query: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "POST /v1/poke?{query} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

/// A node's advertised address that reaches another node (a loopback
/// address seen from another host, where the default `--listen` binds; a
/// port another node took after a restart): the receiver refuses a poke
/// meant for someone else (`421`), so its sender writes the meant node's
/// inbox, and that node starts the work at its next poll instead of after
/// `FULL_LIST_EVERY` polls (60 s here).
#[test]
fn a_poke_that_reaches_another_node_is_refused_and_the_meant_node_takes_its_work_at_its_next_poll() {
    let _turn = crate::common::turns::waits();
    let (mut c, data) = fs_cluster();
    c.timings = vec!["--heartbeat", "1s", "--session-timeout", "5s", "--lease", "5s"];
    // n1 manages, n2 alone defines the command: every unit is dispatched
    // into n2's folder, and n2 is poked at the address it advertises.
    c.start_with("n1", &["--data", &data]);
    let rows = c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"]);
    let n1_addr = rows[0]["addr"].as_str().expect("n1 advertises its listener").to_string();
    // n2 listens elsewhere but advertises n1's address.
    c.start_with("n2", &["--data", &data, "--command", "ok=true", "--advertise", &n1_addr]);
    c.wait_nodes(Duration::from_secs(30), "n1 and n2 alive", |r| alive(r).len() == 2);

    assert!(poke_raw(&n1_addr, "scope=work&node=n2").contains(" 421 "), "a poke for n2 reaching n1");
    assert!(poke_raw(&n1_addr, "scope=work&node=n1").contains(" 202 "));
    assert!(poke_raw(&n1_addr, "scope=work").contains(" 202 "), "pokes of older versions name no node");

    let t0 = Instant::now();
    let out = c.compactd(
        &["submit", "--db", "d", "--schema", "s", "--table", "t", "--shards", "2"]
            .into_iter()
            .chain(["--command-name", "ok", "--manager", "n1", "--wait"])
            .collect::<Vec<_>>(),
    );
    let took = t0.elapsed();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text());
    eprintln!("a task managed by a node whose address reaches another one: done in {took:?}");
    assert!(took < Duration::from_secs(20), "took {took:?}: the misdirected pokes were taken as delivered");
}

/// A client waiting on a task (`submit --wait`) asks the manager's listener
/// to answer when the manager has seen the task end
/// (`GET /v1/tasks/{id}/ended?wait_ms=N`): a waiting request is answered at
/// the end, not after its wait; an end seen before the request counts; a
/// task this node did not see end is `false` once the wait is over; a bad
/// id is refused. `submit --wait` ends with the task, Done, either way.
#[test]
fn a_waiting_client_hears_the_end_of_its_task_from_the_manager() {
    let _turn = crate::common::turns::waits();
    let (mut c, data) = fs_cluster();
    c.start_with("n1", &["--data", &data, "--command", "nap=sleep 1"]);
    let rows = c.wait_nodes(Duration::from_secs(40), "n1 alive", |r| alive(r).len() == 1);
    let addr = rows[0]["addr"].as_str().expect("n1 advertises its listener").to_string();
    let submit = |table: &str, wait: bool| {
        let mut args =
            vec!["submit", "--db", "d", "--schema", "s", "--table", table, "--command-name", "nap", "--json"];
        if wait {
            args.push("--wait");
        }
        json(&c.compactd(&args), "submit")["id"].as_str().unwrap().to_string()
    };
    let id = submit("t1", false);
    let t0 = Instant::now();
    let (code, body) = common::http::get(&addr, &format!("/v1/tasks/{id}/ended?wait_ms=10000")).unwrap();
    let took = t0.elapsed();
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["ended"].as_bool(), v["task"].as_str()), (Some(true), Some(id.as_str())), "{body}");
    assert!(took < Duration::from_secs(9), "answered at the end of a 1 s task, not after the wait: {took:?}");
    let st = json(&c.compactd(&["status", &id, "--json"]), "status");
    assert_eq!(st["state"], "Done", "the end was heard once the task's files said so: {st}");
    let (_, again) = common::http::get(&addr, &format!("/v1/tasks/{id}/ended?wait_ms=0")).unwrap();
    assert!(again.contains("\"ended\":true"), "an end seen before the request counts: {again}");
    let other = "0123abcd.17000000.00000000.0";
    let (code, body) = common::http::get(&addr, &format!("/v1/tasks/{other}/ended?wait_ms=100")).unwrap();
    assert_eq!((code, body.contains("\"ended\":false")), (200, true), "{body}");
    let (code, _) = common::http::get(&addr, "/v1/tasks/..%2F..%2Fetc/ended").unwrap();
    assert_eq!(code, 400);
    let told = |what: &str| -> u64 {
        let (_, body) = common::http::get(&addr, "/v1/status").unwrap();
        serde_json::from_str::<Value>(&body).unwrap()["wake"][what].as_u64().unwrap()
    };
    let (asked, ended) = (told("task_end_waits"), told("task_end_waits_told_ended"));
    let waited = submit("t2", true);
    let st = json(&c.compactd(&["status", &waited, "--json"]), "status");
    assert_eq!(st["state"], "Done", "{st}");
    // The 1 s task outlasts the first looks (25 ms, then 1.5 times longer
    // each): `submit --wait` asked the manager between them, and kept
    // asking after a "not yet" (an answer it could not use would have
    // stopped it). Told "ended" once at most: then it only looks.
    assert!(told("task_end_waits") >= asked + 2, "submit --wait asked its manager between looks");
    assert!(told("task_end_waits_told_ended") <= ended + 1);
}
