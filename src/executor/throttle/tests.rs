//! The daemon's and the child's sides over a real socketpair, on real time
//! (the limit is bytes per real second).
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use super::*;

const MIB: u64 = 1 << 20;

/// Two children asking at once share the node's limit: together they wait
/// at least (bytes − burst) / rate, and every byte is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_share_one_limit() {
    let rate = 8 * MIB;
    let mut limit = IoLimit::new(rate, crate::clock::SystemClock::shared());
    let stats = std::sync::Arc::new(IoStats::default());
    limit.count_into(stats.clone());
    let (a, b) = (served(&limit), served(&limit));
    let started = Instant::now();
    let (ra, rb) = tokio::join!(a.take(5 * MIB + 17), b.take(5 * MIB));
    ra.unwrap();
    rb.unwrap();
    let took = started.elapsed();
    let burst = bucket::Bucket::burst_for(rate);
    let least = Duration::from_secs_f64((10 * MIB + 17 - burst) as f64 / rate as f64);
    assert!(took >= least, "granted 10 MiB in {took:?}, at least {least:?} expected");
    assert_eq!(stats.bytes(), 10 * MIB + 17);
    assert!(stats.waited() > Duration::ZERO);
}

#[tokio::test]
async fn no_limit_asks_nothing() {
    let t = Throttle::none();
    assert!(!t.is_limited());
    t.take(u64::MAX).await.unwrap();
}

/// A child whose daemon is gone fails its next ask instead of running on
/// without a limit.
#[tokio::test]
async fn a_child_whose_daemon_is_gone_fails() {
    let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
    drop(ours);
    let err = Throttle::over(theirs).take(10).await.unwrap_err();
    assert!(matches!(err, ThrottleError::Gone(_)), "{err}");
}

/// An ask cancelled while it waits (an aborted task) leaves its grant on
/// the socket: the next ask waits for that grant and then for its own.
#[tokio::test]
async fn a_cancelled_ask_does_not_hand_its_grant_to_the_next() {
    let rate = 4 * MIB;
    let limit = IoLimit::new(rate, crate::clock::SystemClock::shared());
    let t = served(&limit);
    // The burst (1 MiB) goes at once; the next chunk waits 250 ms.
    t.take(MIB).await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(20), t.take(MIB)).await;
    assert!(cancelled.is_err(), "the second chunk was granted within the burst");
    let started = Instant::now();
    t.take(MIB).await.unwrap();
    // The cancelled chunk's grant at 250 ms, then this one's at 500 ms.
    assert!(started.elapsed() >= Duration::from_millis(400), "granted after {:?}", started.elapsed());
}
