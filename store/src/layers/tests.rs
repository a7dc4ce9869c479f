//! Tests of the counting and fault layers, on memory and fs.

use super::counting::*;
use super::fault::*;
use super::*;
use crate::{Created, RootUri, Store};
use opendal::Operator;
use opendal::{Error, ErrorKind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn memory() -> Operator {
    Operator::new(opendal::services::Memory::default()).unwrap()
}

fn fs(dir: &tempfile::TempDir) -> Operator {
    let root = dir.path().to_string_lossy().into_owned();
    Operator::new(opendal::services::Fs::default().root(&root)).unwrap()
}

/// The same scripted sequence on any backend; returns the number of
/// entries the one list call returned.
async fn script(op: &Operator, counter: &OpCounter) -> usize {
    let expect = |counts: OpCounts| assert_eq!(counter.snapshot(), counts, "{}", counter.snapshot());
    let mut want = OpCounts::default();

    // Two creates of one path: the second loses.
    op.write_with("lock", "a").if_not_exists(true).await.unwrap();
    let lost = op.write_with("lock", "b").if_not_exists(true).await.unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::ConditionNotMatch);
    want.create = 2;
    expect(want);

    // Three puts, one overwriting.
    op.write("dir/x", "1").await.unwrap();
    op.write("dir/y", "2").await.unwrap();
    op.write("dir/x", "3").await.unwrap();
    want.put = 3;
    expect(want);

    // Four reads, one of a missing object.
    assert_eq!(op.read("lock").await.unwrap().to_vec(), b"a");
    assert_eq!(op.read("dir/x").await.unwrap().to_vec(), b"3");
    assert_eq!(op.read("dir/y").await.unwrap().to_vec(), b"2");
    let missing = op.read("dir/missing").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    want.read = 4;
    expect(want);

    op.stat("lock").await.unwrap();
    assert!(!op.exists("nope").await.unwrap());
    want.stat = 2;
    expect(want);

    let entries = op.list("dir/").await.unwrap();
    want.list = 1;
    want.list_entries = entries.len() as u64;
    want.list_pages_est = 1;
    expect(want);

    // Two paths in one deleter, plus one missing path on its own.
    op.delete_iter(["dir/x", "dir/y"]).await.unwrap();
    op.delete("dir/never-was").await.unwrap();
    want.delete = 3;
    expect(want);

    assert_eq!(want.total(), 2 + 3 + 4 + 2 + 1 + 3);
    entries.len()
}

#[tokio::test]
async fn counts_scripted_ops_on_memory() {
    let counter = OpCounter::new();
    let op = memory().layer(CountingLayer::new(counter.clone()));
    let listed = script(&op, &counter).await;
    // Memory lists only the two children…
    assert_eq!(listed, 2);
}

#[tokio::test]
async fn counts_scripted_ops_on_fs() {
    let dir = tempfile::TempDir::new().unwrap();
    let counter = OpCounter::new();
    let op = fs(&dir).layer(CountingLayer::new(counter.clone()));
    let listed = script(&op, &counter).await;
    // … fs lists the folder itself too.
    assert_eq!(listed, 3);
}

#[tokio::test]
async fn list_pages_are_estimated_per_thousand_entries() {
    let counter = OpCounter::new();
    let op = memory().layer(CountingLayer::new(counter.clone()));
    for i in 0..2500 {
        op.write(&format!("many/{i:04}"), "").await.unwrap();
    }
    counter.reset();
    let n = op.list_with("many/").recursive(true).await.unwrap().len() as u64;
    let _ = op.list("empty/").await.unwrap();
    let c = counter.snapshot();
    assert_eq!(c.list, 2);
    assert_eq!(c.list_entries, n);
    // ceil(n / 1000) for the big one, 1 for the empty one.
    assert_eq!(c.list_pages_est, n.div_ceil(1000) + 1);
}

#[tokio::test]
async fn counts_store_calls() {
    let counter = OpCounter::new();
    let store = Store::open_with(&RootUri::Memory, |op| op.layer(CountingLayer::new(counter.clone()))).await.unwrap();
    store_script(&store, &counter, 2).await;
}

#[tokio::test]
async fn counts_store_calls_on_fs() {
    let dir = tempfile::TempDir::new().unwrap();
    let uri = RootUri::Fs { root: dir.path().to_path_buf() };
    let counter = OpCounter::new();
    let store = Store::open_with(&uri, |op| op.layer(CountingLayer::new(counter.clone()))).await.unwrap();
    // Put's temp file and rename happen below the layer: one put.
    store_script(&store, &counter, 3).await;
}

async fn store_script(store: &Store, counter: &OpCounter, listed_entries: u64) {
    let step = |before: OpCounts| counter.snapshot() - before;
    let one = |kind: OpKind| {
        let mut c = OpCounts::default();
        match kind {
            OpKind::Create => c.create = 1,
            OpKind::Put => c.put = 1,
            OpKind::Read => c.read = 1,
            OpKind::Stat => c.stat = 1,
            OpKind::List => c.list = 1,
            OpKind::Delete => c.delete = 1,
            OpKind::Other => c.other = 1,
        }
        c
    };

    let s = counter.snapshot();
    assert_eq!(store.create("a/lock", "1").await.unwrap(), Created::Created);
    assert_eq!(step(s), one(OpKind::Create));

    let s = counter.snapshot();
    assert_eq!(store.create("a/lock", "2").await.unwrap(), Created::Exists);
    assert_eq!(step(s), one(OpKind::Create));

    let s = counter.snapshot();
    store.put("a/state", "x").await.unwrap();
    assert_eq!(step(s), one(OpKind::Put));

    let s = counter.snapshot();
    assert!(store.read("a/state").await.unwrap().is_some());
    assert_eq!(step(s), one(OpKind::Read));

    let s = counter.snapshot();
    assert!(store.read("a/none").await.unwrap().is_none());
    assert_eq!(step(s), one(OpKind::Read));

    let s = counter.snapshot();
    assert!(store.exists("a/lock").await.unwrap());
    assert_eq!(step(s), one(OpKind::Stat));

    let s = counter.snapshot();
    assert_eq!(store.list("a/").await.unwrap().len(), 2);
    let d = step(s);
    assert_eq!((d.list, d.total()), (1, 1));
    // fs also yields the folder's own entry, which the store drops.
    assert_eq!(d.list_entries, listed_entries);

    let s = counter.snapshot();
    store.delete("a/lock").await.unwrap();
    assert_eq!(step(s), one(OpKind::Delete));

    // A recursive delete is one call here, whatever OpenDAL does below
    // (memory: a list and one delete per object, invisible to layers).
    let s = counter.snapshot();
    store.delete_all("a/").await.unwrap();
    assert_eq!(step(s), one(OpKind::Delete));
    assert!(store.list("a/").await.unwrap().is_empty());
}

#[test]
fn counts_display_and_sub() {
    let a = OpCounts {
        create: 3,
        put: 2,
        read: 5,
        stat: 1,
        list: 2,
        list_entries: 40,
        list_pages_est: 2,
        delete: 1,
        other: 0,
    };
    assert_eq!(a.to_string(), "create=3 put=2 read=5 stat=1 list=2 list_entries=40 list_pages_est=2 delete=1 other=0");
    assert_eq!(a.total(), 14);
    let b = OpCounts { read: 2, list_entries: 10, ..a };
    assert_eq!(a - b, OpCounts { read: 3, list_entries: 30, ..Default::default() });
    assert_eq!(b - a, OpCounts { ..Default::default() });
}

fn is_injected(e: &Error) -> bool {
    e.kind() == ErrorKind::Unexpected && e.is_temporary() && e.to_string().contains("injected fault")
}

/// 200 operations of mixed kinds; true where the operation succeeded.
async fn run_200(op: &Operator) -> Vec<bool> {
    let mut out = Vec::with_capacity(200);
    for i in 0..200 {
        let path = format!("f/{}", i % 7);
        let r = match i % 4 {
            0 => op.write(&path, "x").await.map(|_| ()),
            1 => op.stat(&path).await.map(|_| ()),
            2 => op.read(&path).await.map(|_| ()),
            _ => op.list("f/").await.map(|_| ()),
        };
        match r {
            Ok(()) => out.push(true),
            // A read or stat of an object whose write was faulted.
            Err(e) if e.kind() == ErrorKind::NotFound => out.push(true),
            Err(e) => {
                assert!(is_injected(&e), "{e}");
                out.push(false)
            }
        }
    }
    out
}

fn faulty_memory(config: FaultConfig) -> (Operator, FaultHandle) {
    let layer = FaultLayer::new(config);
    let handle = layer.handle();
    (memory().layer(layer), handle)
}

#[tokio::test]
async fn same_seed_same_faults() {
    let config = |seed| FaultConfig { seed, error_rate: 0.5, ..Default::default() };
    let (a, ha) = faulty_memory(config(7));
    let (b, _) = faulty_memory(config(7));
    let (c, _) = faulty_memory(config(8));
    let ra = run_200(&a).await;
    let rb = run_200(&b).await;
    let rc = run_200(&c).await;
    assert_eq!(ra, rb);
    assert_ne!(ra, rc);
    let failed = ra.iter().filter(|ok| !**ok).count();
    assert_eq!(failed as u64, ha.injected());
    assert!((60..=140).contains(&failed), "{failed} of 200 failed");
}

#[tokio::test]
async fn rate_zero_injects_nothing() {
    let (op, h) = faulty_memory(FaultConfig { seed: 1, ..Default::default() });
    assert!(run_200(&op).await.iter().all(|ok| *ok));
    assert_eq!(h.injected(), 0);
}

#[tokio::test]
async fn rate_one_fails_every_kind_before_the_backend() {
    let base = memory();
    base.write("there", "1").await.unwrap();
    let layer = FaultLayer::new(FaultConfig { seed: 1, error_rate: 1.0, ..Default::default() });
    let op = base.clone().layer(layer.clone());
    let errs = [
        op.write_with("new", "1").if_not_exists(true).await.unwrap_err(),
        op.write("new", "1").await.unwrap_err(),
        op.read("there").await.unwrap_err(),
        op.stat("there").await.unwrap_err(),
        op.list("").await.unwrap_err(),
        op.delete("there").await.unwrap_err(),
    ];
    for e in &errs {
        assert!(is_injected(e), "{e}");
    }
    assert_eq!(layer.handle().injected(), errs.len() as u64);
    // Nothing reached the backend.
    assert!(!base.exists("new").await.unwrap());
    assert!(base.exists("there").await.unwrap());
}

#[tokio::test]
async fn lost_reply_keeps_the_effect() {
    let base = memory();
    let (counter, faults) = (
        OpCounter::new(),
        FaultLayer::new(FaultConfig { seed: 3, error_rate: 1.0, lost_reply: 1.0, ..Default::default() }),
    );
    // Counting inside the faults: it sees what reached the backend.
    let op = base.clone().layer(CountingLayer::new(counter.clone())).layer(faults.clone());
    let e = op.write_with("lock", "1").if_not_exists(true).await.unwrap_err();
    assert!(is_injected(&e), "{e}");
    assert!(base.exists("lock").await.unwrap());
    let e = op.delete("lock").await.unwrap_err();
    assert!(is_injected(&e), "{e}");
    assert!(!base.exists("lock").await.unwrap());
    assert_eq!((counter.snapshot().create, counter.snapshot().delete), (1, 1));

    // Faults before the backend are not counted by an inner counter.
    faults.handle().set_lost_reply(0.0);
    op.write("x", "1").await.unwrap_err();
    assert_eq!(counter.snapshot().put, 0);
}

#[tokio::test]
async fn outer_counter_sees_faulted_attempts() {
    let counter = OpCounter::new();
    let op = memory()
        .layer(FaultLayer::new(FaultConfig { error_rate: 1.0, ..Default::default() }))
        .layer(CountingLayer::new(counter.clone()));
    op.write("x", "1").await.unwrap_err();
    op.read("x").await.unwrap_err();
    assert_eq!((counter.snapshot().put, counter.snapshot().read), (1, 1));
}

#[tokio::test]
async fn handle_toggles_faults() {
    let (op, h) = faulty_memory(FaultConfig { seed: 5, ..Default::default() });
    op.write("a", "1").await.unwrap();
    h.set_error_rate(1.0);
    assert_eq!(h.error_rate(), 1.0);
    assert!(is_injected(&op.read("a").await.unwrap_err()));
    h.pause();
    assert!(h.is_paused());
    op.read("a").await.unwrap();
    h.resume();
    assert!(is_injected(&op.stat("a").await.unwrap_err()));
    h.set_error_rate(0.0);
    op.stat("a").await.unwrap();
    assert_eq!(h.injected(), 2);
}

#[tokio::test]
async fn pause_does_not_shift_later_faults() {
    let config = FaultConfig { seed: 11, error_rate: 0.5, ..Default::default() };
    let (a, _) = faulty_memory(config.clone());
    let (b, hb) = faulty_memory(config);
    let head_a = run_stats(&a, 50).await;
    hb.pause();
    let head_b = run_stats(&b, 50).await;
    hb.resume();
    assert!(head_a.contains(&false));
    assert!(head_b.iter().all(|ok| *ok));
    // The paused calls still drew from the RNG: what follows matches.
    assert_eq!(run_200(&a).await, run_200(&b).await);
}

/// `n` stats (of missing objects); true where no fault was injected.
async fn run_stats(op: &Operator, n: usize) -> Vec<bool> {
    let mut out = Vec::new();
    for i in 0..n {
        let r = op.stat(&format!("p/{i}")).await;
        out.push(!matches!(r, Err(ref e) if is_injected(e)));
    }
    out
}

#[tokio::test]
async fn kinds_limit_faults() {
    let (op, _) =
        faulty_memory(FaultConfig { seed: 2, error_rate: 1.0, kinds: vec![OpKind::Read], ..Default::default() });
    op.write("a", "1").await.unwrap();
    op.stat("a").await.unwrap();
    op.list("").await.unwrap();
    assert!(is_injected(&op.read("a").await.unwrap_err()));
    op.delete("a").await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn latency_is_added() {
    let (op, h) = faulty_memory(FaultConfig {
        seed: 9,
        latency: Some((Duration::from_millis(50), Duration::from_millis(50))),
        ..Default::default()
    });
    let t = tokio::time::Instant::now();
    op.write("a", "1").await.unwrap();
    op.read("a").await.unwrap();
    op.stat("a").await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_millis(150));

    h.set_latency(Some((Duration::from_millis(10), Duration::from_millis(20))));
    for _ in 0..20 {
        let t = tokio::time::Instant::now();
        op.stat("a").await.unwrap();
        let e = t.elapsed();
        assert!((Duration::from_millis(10)..=Duration::from_millis(20)).contains(&e), "{e:?}");
    }

    h.set_latency(None);
    let t = tokio::time::Instant::now();
    op.stat("a").await.unwrap();
    assert_eq!(t.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn the_op_hook_sees_affected_operations_unless_paused() {
    let (op, h) = faulty_memory(FaultConfig { kinds: vec![OpKind::Put, OpKind::Read], ..Default::default() });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    h.set_on_op(Some(Arc::new(move |k, _| s.lock().unwrap().push(k))));
    op.write("a", "1").await.unwrap();
    op.read("a").await.unwrap();
    op.stat("a").await.unwrap();
    h.pause();
    op.read("a").await.unwrap();
    h.resume();
    h.set_on_op(None);
    op.read("a").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![OpKind::Put, OpKind::Read]);
}
