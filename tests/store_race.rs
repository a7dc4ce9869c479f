//! Atomic create under contention: of N concurrent creators of one key,
//! exactly one gets `Created::Created`, every other gets `Created::Exists`,
//! none errors, and the winner's bytes are what is read back. Run on fs
//! (tokio tasks and separate OS threads with their own runtimes and stores),
//! memory, and a real S3-protocol server on loopback (moto, see
//! tests/common/s3.rs; needs `bash .ci/install-s3-server.sh`).

mod common;

use std::sync::{Arc, Barrier};

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
    let dir = tempfile::tempdir().unwrap();
    let uri = fs_uri(&dir);
    race_tasks("fs", 20, || async { Store::open(&uri).await.unwrap() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_race_has_one_winner() {
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
    let server = S3Server::start();
    server.set_env();
    let uri = RootUri::parse(&server.new_bucket("race")).unwrap();
    race_tasks("s3", 10, || async { Store::open(&uri).await.unwrap() }).await;
}

#[tokio::test]
async fn probe_atomic_create_passes_on_fs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&fs_uri(&dir)).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    // The probe cleans up after itself and can run again.
    store.probe_atomic_create("probe", RACERS).await.unwrap();
}

#[tokio::test]
async fn probe_atomic_create_passes_on_memory() {
    let store = Store::memory().await;
    store.probe_atomic_create("probe", RACERS).await.unwrap();
    store.probe_atomic_create("probe", RACERS).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_atomic_create_passes_on_s3() {
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
    for (text, backend) in [("webhdfs://127.0.0.1:1/x", "webhdfs"), ("hdfs://x/y", "hdfs")] {
        let uri = RootUri::parse(text).unwrap();
        let err = match Store::open(&uri).await {
            Ok(_) => panic!("Store::open({text}) accepted a backend without atomic create"),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Unsafe { .. }), "{text}: expected StoreError::Unsafe, got {err:?}");
        assert!(msg.contains(backend), "{text}: message does not name {backend}: {msg}");
        assert!(msg.contains("atomic create"), "{text}: message does not mention atomic create: {msg}");
    }
}

/// Conditional overwrite: on S3 a replace with the current etag wins and one
/// with a stale etag loses; fs and memory refuse it (no silent fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_overwrite_where_the_backend_has_it() {
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
