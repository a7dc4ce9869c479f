//! Atomic create under contention: of N concurrent creators of one key,
//! exactly one gets `Created::Created`, every other gets `Created::Exists`,
//! none errors, and the winner's bytes are what is read back. Run on fs
//! (tokio tasks and separate OS threads with their own runtimes and stores),
//! memory, a real S3-protocol server on loopback (moto, see
//! tests/all/common/s3.rs; needs `bash .ci/install-s3-server.sh`), and a real
//! HDFS (tests/all/common/hdfs.rs; `bash .ci/install-hdfs.sh`), where the racers
//! are also separate processes, and a creator SIGKILLed mid-write leaves the
//! name absent or whole.

use crate::common;

use std::sync::{Arc, Barrier};

use common::hdfs::HdfsCluster;
use common::s3::S3Server;
use store::{Created, RootUri, Store, StoreError};

const RACERS: usize = 16;

fn content(round: usize, racer: usize) -> Vec<u8> {
    format!("{{\"round\":{round},\"racer\":{racer}}}").into_bytes()
}

/// Checks one finished race on `key` and returns the winner's index.
async fn check_race(
    what: &str,
    store: &Store,
    round: usize,
    key: &str,
    results: Vec<Result<Created, StoreError>>,
) -> usize {
    let mut winners = Vec::new();
    for (racer, r) in results.into_iter().enumerate() {
        match r {
            Ok(Created::Created) => winners.push(racer),
            Ok(Created::Exists) => {}
            Err(e) => panic!("{what} round {round}: racer {racer} on {key} errored: {e}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "{what} round {round}: {} of {RACERS} racers won {key} (winners {winners:?}); expected exactly 1",
        winners.len()
    );
    let winner = winners[0];
    let read = store
        .read(key)
        .await
        .unwrap_or_else(|e| panic!("{what} round {round}: reading {key}: {e}"))
        .unwrap_or_else(|| panic!("{what} round {round}: {key} missing after the race"));
    assert_eq!(
        String::from_utf8_lossy(&read),
        String::from_utf8_lossy(&content(round, winner)),
        "{what} round {round}: {key} does not hold the winner's content"
    );
    winner
}

/// `rounds` races of `RACERS` creates of a fresh key each, as tokio tasks;
/// every racer has its own `Store` from `open` (like separate nodes).
async fn race_tasks<F, Fut>(what: &str, rounds: usize, open: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Store>,
{
    let mut stores = Vec::new();
    for _ in 0..RACERS {
        stores.push(open().await);
    }
    for round in 0..rounds {
        let key = format!("race/{round}/claim");
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(racer, s)| {
                let s = s.clone();
                let key = key.clone();
                tokio::spawn(async move { s.create(&key, content(round, racer)).await })
            })
            .collect();
        let mut results = Vec::new();
        for h in handles {
            results.push(h.await.expect("racer task panicked"));
        }
        check_race(what, &stores[0], round, &key, results).await;
        // A later create of the same key still loses.
        assert_eq!(
            stores[RACERS - 1].create(&key, b"{}".to_vec()).await.unwrap(),
            Created::Exists,
            "{what} round {round}: a late create of {key} won"
        );
    }
}

fn fs_uri(dir: &tempfile::TempDir) -> RootUri {
    RootUri::Fs { root: dir.path().to_path_buf() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_race_has_one_winner() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let uri = fs_uri(&dir);
    race_tasks("fs", 20, || async { Store::open(&uri).await.unwrap() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_race_has_one_winner() {
    let _turn = crate::common::turns::waits();
    // Memory is one process only: racers share one store (its clones share
    // the map).
    let store = Store::memory().await;
    race_tasks("memory", 20, || {
        let s = store.clone();
        async move { s }
    })
    .await;
}

/// Racers on separate OS threads, each with its own current-thread runtime
/// and its own `Store`, released together by a barrier each round: true
/// parallelism on the O_EXCL path.
#[test]
fn fs_race_across_os_threads_has_one_winner() {
    let _turn = crate::common::turns::waits();
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let uri = fs_uri(&dir);
    let barrier = Arc::new(Barrier::new(RACERS));
    let threads: Vec<_> = (0..RACERS)
        .map(|racer| {
            let uri = uri.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(async {
                    let store = Store::open(&uri).await.unwrap();
                    let mut out = Vec::new();
                    for round in 0..ROUNDS {
                        barrier.wait();
                        out.push(store.create(&format!("threads/{round}/claim"), content(round, racer)).await);
                    }
                    out
                })
            })
        })
        .collect();
    let per_racer: Vec<Vec<_>> = threads.into_iter().map(|t| t.join().expect("racer thread panicked")).collect();
    let mut per_round: Vec<Vec<Result<Created, StoreError>>> = (0..ROUNDS).map(|_| Vec::new()).collect();
    for results in per_racer {
        for (round, r) in results.into_iter().enumerate() {
            per_round[round].push(r);
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(&uri).await.unwrap();
        for (round, results) in per_round.into_iter().enumerate() {
            check_race("fs (threads)", &store, round, &format!("threads/{round}/claim"), results).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_race_has_one_winner() {
    let _turn = crate::common::turns::waits();
    let server = S3Server::start();
    server.set_env();
    let uri = RootUri::parse(&server.new_bucket("race")).unwrap();
    race_tasks("s3", 10, || async { Store::open(&uri).await.unwrap() }).await;
}

#[tokio::test]
async fn probe_atomic_create_passes_on_fs() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&fs_uri(&dir)).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    // The probe cleans up after itself and can run again.
    store.probe_atomic_create("probe", RACERS).await.unwrap();
}

#[tokio::test]
async fn probe_atomic_create_passes_on_memory() {
    let _turn = crate::common::turns::waits();
    let store = Store::memory().await;
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_atomic_create_passes_on_s3() {
    let _turn = crate::common::turns::waits();
    let server = S3Server::start();
    server.set_env();
    let uri = RootUri::parse(&server.new_bucket("probe")).unwrap();
    let store = Store::open(&uri).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    assert!(store.read("probe/a").await.unwrap().is_none(), "the probe left its scratch object");
}

#[tokio::test]
async fn open_refuses_backends_without_atomic_create() {
    let _turn = crate::common::turns::waits();
    for (text, backend) in [("webhdfs://127.0.0.1:1/x", "webhdfs")] {
        let uri = RootUri::parse(text).unwrap();
        let err = match Store::open(&uri).await {
            Ok(_) => panic!("Store::open({text}) accepted a backend without atomic create"),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Unsafe { .. }), "{text}: expected StoreError::Unsafe, got {err:?}");
        assert!(msg.contains(backend), "{text}: message does not name {backend}: {msg}");
        assert!(msg.contains("atomic create"), "{text}: message does not mention atomic create: {msg}");
        assert!(msg.contains("hdfs://"), "{text}: message does not point to hdfs://: {msg}");
    }
}

/// Conditional overwrite: on S3 a replace with the current etag wins and one
/// with a stale etag loses; fs and memory refuse it (no silent fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_overwrite_where_the_backend_has_it() {
    let _turn = crate::common::turns::waits();
    let s3 = S3Server::shared();
    s3.set_env();
    let store = Store::open(&RootUri::parse(&s3.new_bucket("ifmatch")).unwrap()).await.unwrap();
    assert!(store.supports_conditional_put());
    store.put("k", b"{\"v\":1}".to_vec()).await.unwrap();
    let etag = store.stat("k").await.unwrap().unwrap().etag.expect("S3 gives an etag");
    assert_eq!(store.put_if_match("k", b"{\"v\":2}".to_vec(), &etag).await.unwrap(), store::Replaced::Replaced);
    assert_eq!(store.put_if_match("k", b"{\"v\":3}".to_vec(), &etag).await.unwrap(), store::Replaced::Conflict);
    assert_eq!(&store.read("k").await.unwrap().unwrap()[..], b"{\"v\":2}");
    for local in [Store::memory().await, {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&RootUri::parse(&format!("fs://{}", dir.path().display())).unwrap()).await.unwrap();
        std::mem::forget(dir);
        s
    }] {
        assert!(!local.supports_conditional_put());
        let err = local.put_if_match("k", b"x".to_vec(), "etag").await.unwrap_err().to_string();
        assert!(err.contains("conditional overwrite"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hdfs_race_has_one_winner() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let uri = RootUri::parse(&hdfs.new_root("race")).unwrap();
    // Each racer has its own store, so its own client and NameNode connection.
    race_tasks("hdfs", 10, || async { Store::open(&uri).await.unwrap() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_atomic_create_passes_on_hdfs() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let store = Store::open(&RootUri::parse(&hdfs.new_root("probe")).unwrap()).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    assert!(store.read("probe/a").await.unwrap().is_none(), "the probe left its scratch object");
}

/// Child mode of the process tests below: this test binary re-run with
/// `COMPACTD_RACE_CHILD` set (and ignored otherwise).
#[test]
#[ignore = "run by hdfs_race_across_processes and hdfs_create_killed_mid_write"]
fn race_child() {
    let _turn = crate::common::turns::waits();
    let Ok(mode) = std::env::var("COMPACTD_RACE_CHILD") else { return };
    let uri = RootUri::parse(&std::env::var("COMPACTD_RACE_URI").unwrap()).unwrap();
    let racer: usize = std::env::var("COMPACTD_RACE_RACER").unwrap().parse().unwrap();
    let rounds: usize = std::env::var("COMPACTD_RACE_ROUNDS").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let store = Store::open(&uri).await.unwrap();
        match mode.as_str() {
            "race" => {
                for round in 0..rounds {
                    // Every racer waits for the round's go file, then creates.
                    while !store.exists(&format!("race/{round}/go")).await.unwrap_or(false) {
                        // A short poll, not a spin: six spinning processes
                        // would saturate the test NameNode with stats.
                        #[allow(clippy::disallowed_methods)]
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    }
                    let outcome = match store.create(&format!("race/{round}/claim"), content(round, racer)).await {
                        Ok(Created::Created) => "won".to_string(),
                        Ok(Created::Exists) => "lost".to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    // Reporting is not what is tested: retried through a
                    // loaded machine's hiccups.
                    let report = format!("race/{round}/r{racer}");
                    let mut tries = 0;
                    while let Err(e) = store.put(&report, outcome.clone().into_bytes()).await {
                        tries += 1;
                        assert!(tries < 20, "reporting {report}: {e}");
                    }
                }
            }
            "big" => {
                // Creates of several blocks each (the test cluster's blocks
                // are 1 MiB), one after another until killed.
                for round in 0.. {
                    let _ = store.create(&format!("big/{round}"), big(round)).await;
                    println!("created {round}");
                }
            }
            other => panic!("unknown child mode {other}"),
        }
    });
}

fn big(round: usize) -> Vec<u8> {
    (0..3 * 1024 * 1024 + 17).map(|i| ((i * 31 + round * 7) % 251) as u8).collect()
}

fn child(mode: &str, uri: &str, racer: usize, rounds: usize) -> std::process::Child {
    // The test's full name in this binary: its module path less the crate's.
    let name = format!("{}::race_child", module_path!().split_once("::").map_or(module_path!(), |(_, m)| m));
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--ignored", "--nocapture", "--test-threads", "1"])
        .env("COMPACTD_RACE_CHILD", mode)
        .env("COMPACTD_RACE_URI", uri)
        .env("COMPACTD_RACE_RACER", racer.to_string())
        .env("COMPACTD_RACE_ROUNDS", rounds.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Racers in separate processes (separate clients, leases and connections):
/// exactly one winner per round, and the name holds the winner's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdfs_race_across_processes() {
    let _turn = crate::common::turns::waits();
    const PROCS: usize = 6;
    const ROUNDS: usize = 8;
    let hdfs = HdfsCluster::shared();
    let text = hdfs.new_root("race-procs");
    let store = Store::open(&RootUri::parse(&text).unwrap()).await.unwrap();
    let mut kids: Vec<_> = (0..PROCS).map(|r| child("race", &text, r, ROUNDS)).collect();
    for round in 0..ROUNDS {
        store.put(&format!("race/{round}/go"), b"go".to_vec()).await.unwrap();
        let mut results = Vec::new();
        for racer in 0..PROCS {
            let key = format!("race/{round}/r{racer}");
            let got = loop {
                if let Some(b) = store.read(&key).await.unwrap() {
                    break String::from_utf8_lossy(&b).into_owned();
                }
                // A racer that finished its rounds exits 0; one that failed
                // does not.
                assert!(
                    kids.iter_mut().all(|k| k.try_wait().unwrap().is_none_or(|st| st.success())),
                    "a racer process failed"
                );
                tokio::task::yield_now().await;
            };
            results.push(match got.as_str() {
                "won" => Ok(Created::Created),
                "lost" => Ok(Created::Exists),
                other => panic!("hdfs processes round {round}: racer {racer}: {other}"),
            });
        }
        let winner = check_race_across(&store, round, results).await;
        eprintln!("round {round}: process {winner} won");
    }
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
}

async fn check_race_across(store: &Store, round: usize, results: Vec<Result<Created, StoreError>>) -> usize {
    let winners: Vec<usize> =
        results.iter().enumerate().filter(|(_, r)| matches!(r, Ok(Created::Created))).map(|(i, _)| i).collect();
    assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
    let read = store.read(&format!("race/{round}/claim")).await.unwrap().unwrap();
    assert_eq!(read, content(round, winners[0]), "round {round}: the claim holds another racer's bytes");
    winners[0]
}

/// A creator SIGKILLed at many points of multi-block creates: every name is
/// absent or whole, never partial or under construction, and a later create
/// of a killed name succeeds (nothing blocks it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdfs_create_killed_mid_write() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let text = hdfs.new_root("create-kill");
    let store = Store::open(&RootUri::parse(&text).unwrap()).await.unwrap();
    let mut checked = 0;
    for kill in 0..6u64 {
        let mut kid = child("big", &text, 0, 0);
        // Its first create finished: a fixed wait from its start could end
        // before that on a loaded machine (a process of this binary and a
        // client of its own to start), and then no kill lands in a write.
        #[allow(clippy::disallowed_methods)] // a real process, waited for on real time
        let start = std::time::Instant::now();
        while store.list("big/").await.unwrap().is_empty() {
            assert!(start.elapsed() < std::time::Duration::from_secs(60), "the child created nothing in 60 s");
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Then kill at a different point of a later write each time (the
        // child writes a 3 MiB file in about 50-200 ms).
        #[allow(clippy::disallowed_methods)] // a real process, killed on real time
        std::thread::sleep(std::time::Duration::from_millis(kill * 137));
        kid.kill().unwrap();
        kid.wait().unwrap();
        for e in store.list("big/").await.unwrap() {
            let round: usize = e.name().parse().expect("only final names are listed");
            let got = store.read(&e.path).await.unwrap().expect("listed");
            assert_eq!(got.len(), big(round).len(), "{}: partial after SIGKILL", e.path);
            assert!(got == big(round), "{}: wrong bytes after SIGKILL", e.path);
            checked += 1;
        }
        store.delete_all("big/").await.unwrap();
    }
    assert!(checked > 0, "no create finished before a kill: the test proves nothing");
    // The names a killed child was writing can be created afresh.
    assert_eq!(store.create("big/0", big(0)).await.unwrap(), Created::Created);
}

/// The loopback server takes one request at a time into moto (so that the
/// races above have one winner), but a client that stops in the middle of
/// its request (a node SIGSTOPped, or its link cut) holds only its own
/// connection: everyone else is answered meanwhile, as by a real endpoint,
/// and the stalled request still lands when its client goes on. Before, it
/// held the server's one thread until it timed out, and a cut-off node's
/// half-sent requests cost the other nodes their sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loopback_s3_server_answers_others_while_a_client_stalls_mid_request() {
    let _turn = crate::common::turns::waits();
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    let s3 = S3Server::shared();
    s3.set_env();
    let root = s3.new_bucket("stall");
    let bucket = root.strip_prefix("s3://").unwrap().split('/').next().unwrap().to_string();
    let store = Store::open(&RootUri::parse(&root).unwrap()).await.unwrap();
    let body = b"sent a byte at a time, then the rest".to_vec();
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", s3.port())).unwrap();
    let head = format!(
        "PUT /{bucket}/compactd/stalled HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n",
        s3.port(),
        body.len()
    );
    stalled.write_all(head.as_bytes()).unwrap();
    // A byte every 200 ms keeps the stalled request inside the server's
    // idle timeout for as long as the others take.
    let done = Arc::new(AtomicBool::new(false));
    let trickle = {
        let (done, mut conn, body) = (done.clone(), stalled.try_clone().unwrap(), body.clone());
        std::thread::spawn(move || {
            let mut sent = 0;
            while !done.load(Ordering::Relaxed) && sent < body.len() - 1 {
                conn.write_all(&body[sent..sent + 1]).unwrap();
                sent += 1;
                // A real client's pace against a real server: real time.
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            sent
        })
    };
    let others = async {
        for i in 0..5 {
            let key = format!("other-{i}");
            assert_eq!(store.create(&key, vec![i as u8]).await.unwrap(), Created::Created);
            assert_eq!(&store.read(&key).await.unwrap().unwrap()[..], &[i as u8]);
        }
    };
    let answered = tokio::time::timeout(std::time::Duration::from_secs(30), others).await;
    done.store(true, Ordering::Relaxed);
    let sent = trickle.join().unwrap();
    assert!(answered.is_ok(), "the others were not answered while one request stalled ({sent} bytes of its body sent)");
    assert!(sent < body.len() - 1, "the stalled client sent its whole body before the others were answered");
    stalled.write_all(&body[sent..]).unwrap();
    let mut answer = String::new();
    stalled.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(store.read("stalled").await.unwrap().unwrap(), body);
}
