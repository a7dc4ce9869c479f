//! One conformance suite for the `store` crate, run on every backend compactd
//! ships: local fs, memory, a real S3-protocol server on loopback (moto,
//! `bash .ci/install-s3-server.sh`) and a real HDFS (a NameNode and 3
//! DataNodes, `bash .ci/install-hdfs.sh`), each as a tree store (`Store::open`) and
//! as a data store (`Store::open_data`, no-follow on fs). Like object_store's
//! `put_get_delete_list`: the same calls, the same answers, whatever the
//! backend. A backend added later gets a `#[test]` here.

use crate::common;

use common::hdfs::HdfsCluster;
use common::s3::S3Server;
use store::layers::{CountingLayer, OpCounter};
use store::{Created, RootUri, Store, MAX_STATE_BYTES};

/// The semantics every protocol step relies on.
async fn conformance(what: &str, s: &Store) {
    // Missing things are `None` / empty, never errors.
    assert!(s.read("c/missing").await.unwrap().is_none(), "{what}");
    assert!(s.stat("c/missing").await.unwrap().is_none(), "{what}");
    assert!(!s.exists("c/missing").await.unwrap(), "{what}");
    assert!(s.list("c/nothing/").await.unwrap().is_empty(), "{what}");
    assert!(s.read_range("c/missing", 0, 4).await.unwrap().is_none(), "{what}");
    s.delete("c/missing").await.unwrap();
    s.delete_all("c/nothing/").await.unwrap();

    // put / read / stat / replace.
    s.put("c/a/one", b"hello".to_vec()).await.unwrap();
    assert_eq!(&s.read("c/a/one").await.unwrap().unwrap()[..], b"hello", "{what}");
    assert_eq!(s.stat("c/a/one").await.unwrap().unwrap().len, 5, "{what}");
    s.put("c/a/one", b"bye".to_vec()).await.unwrap();
    assert_eq!(&s.read("c/a/one").await.unwrap().unwrap()[..], b"bye", "{what}: replace");
    s.put("c/a/empty", Vec::new()).await.unwrap();
    assert_eq!(s.read("c/a/empty").await.unwrap().unwrap().len(), 0, "{what}");

    // Ranged reads within the object; past its end is an error everywhere.
    s.put("c/a/digits", b"0123456789".to_vec()).await.unwrap();
    assert_eq!(&s.read_range("c/a/digits", 3, 4).await.unwrap().unwrap()[..], b"3456", "{what}");
    assert_eq!(&s.read_range("c/a/digits", 6, 4).await.unwrap().unwrap()[..], b"6789", "{what}");
    let past = s.read_range("c/a/digits", 8, 100).await;
    assert!(past.is_err(), "{what}: a range past the end: {past:?}");

    // Atomic create: one winner, the loser sees the winner's bytes, a create
    // never replaces, and creates make their folders.
    assert_eq!(s.create("c/b/x/y", b"first".to_vec()).await.unwrap(), Created::Created, "{what}");
    assert_eq!(s.create("c/b/x/y", b"second".to_vec()).await.unwrap(), Created::Exists, "{what}");
    assert_eq!(&s.read("c/b/x/y").await.unwrap().unwrap()[..], b"first", "{what}");
    assert_eq!(s.create("c/b/empty", Vec::new()).await.unwrap(), Created::Created, "{what}");
    assert!(s.exists("c/b/empty").await.unwrap(), "{what}: an empty create exists");
    empty_creates(what, s).await;

    // One-level listing: sorted, folders end in `/`, names.
    let listed: Vec<(String, bool)> =
        s.list("c/").await.unwrap().into_iter().map(|e| (e.name().to_string(), e.is_dir)).collect();
    assert_eq!(listed, vec![("a".into(), true), ("b".into(), true)], "{what}");
    let names: Vec<String> = s.list("c/a/").await.unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(names, vec!["c/a/digits", "c/a/empty", "c/a/one"], "{what}");
    // A size carried by the listing is the object's size; S3 and a data
    // store over fs carry it.
    for e in s.list("c/a/").await.unwrap() {
        let stat = s.stat(&e.path).await.unwrap().unwrap().len;
        match e.len {
            Some(len) => assert_eq!(len, stat, "{what}: {}", e.path),
            None => assert!(!what.contains("s3") && what != "fs data", "{what}: no size listed for {}", e.path),
        }
    }

    // Modification times: a tree store's listing on fs, S3 and HDFS carries
    // the backend's time of the last write (what `nodes` compares with a
    // writer's clock to show its skew); the memory backend has none.
    if !what.contains("data") && what != "memory" {
        #[allow(clippy::disallowed_methods)] // the backend's clock against this host's: real time
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        for e in s.list("c/a/").await.unwrap() {
            let m = e.modified_ms.unwrap_or_else(|| panic!("{what}: no modification time listed for {}", e.path));
            assert!((now_ms - m).abs() < 60_000, "{what}: {} modified at {m}, now is {now_ms}", e.path);
        }
    }

    // Versions: a tree store's listing carries one per object; it stays
    // while the object does and changes when it is rewritten (what the
    // monitor's heartbeat scan relies on: a changed version is a new beat).
    if !what.contains("data") {
        let version = |l: Vec<store::Entry>, name: &str| {
            let e = l.into_iter().find(|e| e.name() == name).expect("listed");
            e.version.unwrap_or_else(|| panic!("{what}: no version listed for {}", e.path))
        };
        let v1 = version(s.list("c/a/").await.unwrap(), "digits");
        assert_eq!(v1, version(s.list("c/a/").await.unwrap(), "digits"), "{what}: unchanged object, same version");
        s.put("c/a/digits", b"0123456789abc".to_vec()).await.unwrap();
        let v2 = version(s.list("c/a/").await.unwrap(), "digits");
        assert_ne!(v1, v2, "{what}: a rewrite changes the version");
        if !what.starts_with("fs") {
            // Same size, different bytes: the ETag (or the memory backend's
            // write counter) changes too; fs tells by time, so a rewrite
            // within the clock's granularity may look unchanged there.
            s.put("c/a/digits", b"abc0123456789".to_vec()).await.unwrap();
            assert_ne!(v2, version(s.list("c/a/").await.unwrap(), "digits"), "{what}: same-size rewrite");
        }
        s.put("c/a/digits", b"0123456789".to_vec()).await.unwrap();
    }

    // Recursive streamed listing yields only objects.
    use futures::TryStreamExt;
    let mut all: Vec<String> = s.list_stream("c/", true).map_ok(|e| e.path).try_collect().await.unwrap();
    all.sort();
    assert_eq!(all, vec!["c/a/digits", "c/a/empty", "c/a/one", "c/b/empty", "c/b/x/y"], "{what}");
    // The tree listing: the same objects, plus whatever folders the backend
    // has (never an object missing).
    let tree: Vec<store::Entry> = s.list_tree("c/").try_collect().await.unwrap();
    let mut objects: Vec<String> = tree.iter().filter(|e| !e.is_dir).map(|e| e.path.clone()).collect();
    objects.sort();
    assert_eq!(objects, all, "{what}: list_tree objects");
    assert!(tree.iter().filter(|e| e.is_dir).all(|e| e.path.starts_with("c/") && e.path.ends_with('/')), "{what}");

    // Streamed writes: nothing visible until close, a dropped writer leaves
    // nothing, a closed one replaces whole (several parts on S3).
    let mut w = s.writer("c/w/big").await.unwrap();
    let part: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    for _ in 0..3 {
        w.write(part.clone().into()).await.unwrap();
    }
    assert!(s.read("c/w/big").await.unwrap().is_none(), "{what}: visible before close");
    assert_eq!(w.written(), 9 << 20, "{what}");
    w.close().await.unwrap();
    // Over a tree store's read limit: read it back in ranges.
    let big = s.read_range("c/w/big", 0, 9 << 20).await.unwrap().unwrap();
    assert_eq!(big.len(), 9 << 20, "{what}");
    assert!(big.chunks(3 << 20).all(|c| c == &part[..]), "{what}: content");
    let mut dropped = s.writer("c/w/dropped").await.unwrap();
    dropped.write(b"half".to_vec().into()).await.unwrap();
    drop(dropped);
    assert!(!s.exists("c/w/dropped").await.unwrap(), "{what}: a dropped writer published");
    let listed: Vec<String> = s.list("c/w/").await.unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(listed, vec!["c/w/big"], "{what}: temp files left");

    // Promote: the staged object appears at its final name, replacing it;
    // promoting again once it moved is done already; neither side is an error.
    s.put("c/p/staged", b"new".to_vec()).await.unwrap();
    s.put("c/p/final", b"old".to_vec()).await.unwrap();
    s.promote("c/p/staged", "c/p/final").await.unwrap();
    assert_eq!(&s.read("c/p/final").await.unwrap().unwrap()[..], b"new", "{what}: promote");
    s.delete("c/p/staged").await.unwrap();
    s.promote("c/p/staged", "c/p/final").await.unwrap();
    let err = s.promote("c/p/none", "c/p/nowhere").await.unwrap_err().to_string();
    assert!(err.contains("c/p/none") && err.contains("c/p/nowhere"), "{what}: {err}");

    // Deletes are idempotent; a recursive delete removes everything below.
    s.delete("c/a/one").await.unwrap();
    s.delete("c/a/one").await.unwrap();
    assert!(s.read("c/a/one").await.unwrap().is_none(), "{what}");
    // Many at once (S3: one batch request), missing ones among them.
    let many: Vec<String> = (0..1005).map(|i| format!("c/m/{i:04}")).collect();
    for p in many.iter().step_by(2) {
        s.put(p, b"x".to_vec()).await.unwrap();
    }
    s.put("c/m/kept", b"x".to_vec()).await.unwrap();
    s.delete_many(&many).await.unwrap();
    s.delete_many(&[]).await.unwrap();
    let left: Vec<String> = s.list_stream("c/m/", true).map_ok(|e| e.path).try_collect().await.unwrap();
    assert_eq!(left, vec!["c/m/kept".to_string()], "{what}: delete_many");
    s.delete_all("c/").await.unwrap();
    assert!(s.list("c/").await.unwrap().is_empty(), "{what}: delete_all");
    let left: Vec<String> = s.list_stream("c/", true).map_ok(|e| e.path).try_collect().await.unwrap();
    assert!(left.is_empty(), "{what}: {left:?}");
}

/// Empty creates (state markers, claims): they take a path of their own on
/// fs (an exclusive create at the name) and HDFS (`create` without
/// overwrite at the name, then `complete`), with the same answers as any
/// create: one winner among racers, never a replace in either direction,
/// folders made on the way, and an empty file that reads, stats and lists
/// as one.
async fn empty_creates(what: &str, s: &Store) {
    use futures::StreamExt;
    let winners = futures::stream::iter(0..8)
        .map(|_| s.create("c/e/deep/marker", Vec::new()))
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let won = winners.iter().filter(|r| matches!(r, Ok(Created::Created))).count();
    assert_eq!(won, 1, "{what}: 8 racing empty creates: {winners:?}");
    assert!(winners.iter().all(|r| r.is_ok()), "{what}: {winners:?}");
    assert_eq!(s.read("c/e/deep/marker").await.unwrap().unwrap().len(), 0, "{what}");
    assert_eq!(s.stat("c/e/deep/marker").await.unwrap().unwrap().len, 0, "{what}");
    // An empty create never replaces content, nor content an empty file.
    assert_eq!(s.create("c/e/full", b"content".to_vec()).await.unwrap(), Created::Created, "{what}");
    assert_eq!(s.create("c/e/full", Vec::new()).await.unwrap(), Created::Exists, "{what}");
    assert_eq!(&s.read("c/e/full").await.unwrap().unwrap()[..], b"content", "{what}");
    assert_eq!(s.create("c/e/deep/marker", b"x".to_vec()).await.unwrap(), Created::Exists, "{what}");
    assert_eq!(s.read("c/e/deep/marker").await.unwrap().unwrap().len(), 0, "{what}: replaced");
    // On backends with folders, a folder at the name is a name (exists, or
    // an error), never written into; object stores have keys and prefixes
    // side by side.
    s.put("c/e/dir/inside", b"x".to_vec()).await.unwrap();
    if what.starts_with("fs") || what.starts_with("hdfs") {
        let over_dir = s.create("c/e/dir", Vec::new()).await;
        assert!(!matches!(over_dir, Ok(Created::Created)), "{what}: an empty create over a folder: {over_dir:?}");
    }
    let names: Vec<String> = s.list("c/e/").await.unwrap().into_iter().map(|e| e.name().to_string()).collect();
    assert_eq!(names, ["deep", "dir", "full"], "{what}: no temp name left");
    for e in s.list("c/e/deep/").await.unwrap() {
        assert!(e.len.is_none_or(|l| l == 0), "{what}: {e:?}");
    }
    s.delete_all("c/e/").await.unwrap();
}

/// Listings past one page (S3 pages at 1,000 keys).
async fn paging(what: &str, s: &Store, n: usize) {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(0..n)
        .map(|i| {
            let s = s.clone();
            async move { s.put(&format!("p/k{i:05}"), format!("{i}").into_bytes()).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let listed = s.list("p/").await.unwrap();
    assert_eq!(listed.len(), n, "{what}: one-level list over pages");
    assert!(listed.windows(2).all(|w| w[0].path < w[1].path), "{what}: sorted");
    let streamed: Vec<_> = s.list_stream("p/", true).try_collect().await.unwrap();
    assert_eq!(streamed.len(), n, "{what}: recursive list over pages");
    // Resuming after a key (the planner's cursor across rounds): in key
    // order from just after it where the backend can (S3's start-after, the
    // memory backend), the whole listing elsewhere.
    assert_eq!(s.lists_from_key(), what.starts_with("s3") || what.starts_with("memory"), "{what}");
    let after = "p/k00999";
    let rest: Vec<String> = s.list_stream_after("p/", Some(after)).map_ok(|e| e.path).try_collect().await.unwrap();
    if s.lists_from_key() {
        assert_eq!(rest.len(), n - 1000, "{what}: listed on after {after}");
        assert!(rest.windows(2).all(|w| w[0] < w[1]) && rest[0].as_str() > after, "{what}: {:?}", &rest[..3]);
    } else {
        assert_eq!(rest.len(), n, "{what}: a whole listing where the backend cannot resume");
    }
    s.delete_all("p/").await.unwrap();
    assert!(s.list("p/").await.unwrap().is_empty(), "{what}");
}

/// A tree store's reads are bounded and typed (`store/src/read.rs`): a file
/// of exactly the limit reads whole, one byte more is refused after one
/// request that fetched at most the limit and a byte, and a folder at a
/// file's name is a bad file, not a backend failure. `folders`: whether the
/// backend has folders (S3 has none: a "folder" name is simply absent).
async fn bounded_reads(what: &str, uri: &RootUri, folders: bool) {
    let counter = OpCounter::new();
    let c = counter.clone();
    let s = Store::open_with(uri, move |op| op.layer(CountingLayer::new(c.clone()))).await.unwrap();
    bounded_reads_on(what, &s, &counter, folders).await;
    // A data store reads objects of any size.
    let data = Store::open_data(uri).await.unwrap();
    let limit = MAX_STATE_BYTES as usize;
    data.put("bounded/over", vec![b'x'; limit + 1]).await.unwrap();
    assert_eq!(data.read("bounded/over").await.unwrap().unwrap().len(), limit + 1, "{what} data");
    s.delete_all("bounded/").await.unwrap();
}

async fn bounded_reads_on(what: &str, s: &Store, counter: &OpCounter, folders: bool) {
    let limit = MAX_STATE_BYTES as usize;
    s.put("bounded/at-limit", vec![b'x'; limit]).await.unwrap();
    s.put("bounded/over", vec![b'x'; limit + 1]).await.unwrap();
    assert_eq!(s.read("bounded/at-limit").await.unwrap().unwrap().len(), limit, "{what}");
    counter.reset();
    let err = s.read("bounded/over").await.unwrap_err();
    assert!(err.is_bad_file(), "{what}: {err}");
    let msg = err.to_string();
    assert!(msg.contains("bounded/over") && msg.contains(&limit.to_string()), "{what}: {msg}");
    assert_eq!(counter.snapshot().read, 1, "{what}: one request for an oversize read");
    assert_eq!(counter.snapshot().total(), 1, "{what}: no stat or list besides it");
    // An empty object reads as empty with a bounded range (S3 answers 416).
    s.put("bounded/empty", Vec::new()).await.unwrap();
    assert_eq!(s.read("bounded/empty").await.unwrap().unwrap().len(), 0, "{what}");
    s.put("bounded/folder/inside", b"x".to_vec()).await.unwrap();
    match s.read("bounded/folder").await {
        Err(e) if folders => assert!(e.is_bad_file() && e.to_string().contains("folder"), "{what}: {e}"),
        Ok(None) if !folders => {}
        other => panic!("{what}: a folder at a file's name read as {other:?}"),
    }
    s.delete_all("bounded/").await.unwrap();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn fs_conforms() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let uri = RootUri::Fs { root: dir.path().join("root") };
    rt().block_on(async {
        conformance("fs", &Store::open(&uri).await.unwrap()).await;
        conformance("fs data", &Store::open_data(&uri).await.unwrap()).await;
        paging("fs", &Store::open(&uri).await.unwrap(), 1100).await;
        bounded_reads("fs", &uri, true).await;
    });
}

#[test]
fn memory_conforms() {
    let _turn = crate::common::turns::waits();
    rt().block_on(async {
        conformance("memory", &Store::memory().await).await;
        conformance("memory data", &Store::open_data(&RootUri::Memory).await.unwrap()).await;
        paging("memory", &Store::memory().await, 1100).await;
        let counter = OpCounter::new();
        let c = counter.clone();
        let s = Store::memory().await.layered(move |op| op.layer(CountingLayer::new(c.clone())));
        bounded_reads_on("memory", &s, &counter, false).await;
    });
}

#[test]
fn s3_conforms() {
    let _turn = crate::common::turns::waits();
    let server = S3Server::shared();
    server.set_env();
    let uri = RootUri::parse(&server.new_bucket("conformance")).unwrap();
    rt().block_on(async {
        let s = Store::open(&uri).await.unwrap();
        conformance("s3", &s).await;
        conformance("s3 data", &Store::open_data(&uri).await.unwrap()).await;
        paging("s3", &s, 1100).await;
        bounded_reads("s3", &uri, false).await;
    });
}

#[test]
fn hdfs_conforms() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    let uri = RootUri::parse(&hdfs.new_root("conformance")).unwrap();
    rt().block_on(async {
        let s = Store::open(&uri).await.unwrap();
        conformance("hdfs", &s).await;
        conformance("hdfs data", &Store::open_data(&uri).await.unwrap()).await;
        paging("hdfs", &s, 1100).await;
        bounded_reads("hdfs", &uri, true).await;
    });
}

/// compactd's own count of NameNode RPCs (`compactd_namenode_rpcs_total`,
/// the HDFS bench's per-subtask figures) against the NameNode's count of the
/// client calls it processed, on a cluster of its own so no other test's
/// calls mix in: the protocol's operations, one-level and recursive
/// listings of folders with subfolders included. hdfs-native's own calls
/// (lease renewals, repeated `complete`s) are not visible to compactd.
#[test]
fn hdfs_namenode_rpcs_are_counted_as_the_namenode_counts_them() {
    let _turn = crate::common::turns::waits();
    use futures::TryStreamExt;
    let hdfs = HdfsCluster::start();
    let uri = RootUri::parse(&hdfs.new_root("rpcs")).unwrap();
    rt().block_on(async {
        let s = Store::open(&uri).await.unwrap();
        s.put("warm", b"x".to_vec()).await.unwrap();
        // A status shows the cluster's block size (1 MiB here): writes are
        // counted one addBlock per block of it from then on.
        assert!(s.stat("warm").await.unwrap().is_some());
        let ours = s.namenode_rpcs().expect("an HDFS store counts its RPCs");
        let (ours0, theirs0) = (ours.total(), hdfs.namenode_rpcs_settled());
        for i in 0..5 {
            assert_eq!(s.create(&format!("r/a/f{i}"), format!("{i}").into_bytes()).await.unwrap(), Created::Created);
            s.put(&format!("r/b/{i}/g"), Vec::new()).await.unwrap();
        }
        // An empty create is `create` + `complete`, no block; one that
        // loses is the `create` alone.
        let before = ours.snapshot();
        let (ours1, theirs1) = (ours.total(), hdfs.namenode_rpcs_settled());
        for i in 0..5 {
            assert_eq!(s.create(&format!("r/m/e{i}"), Vec::new()).await.unwrap(), Created::Created);
        }
        assert_eq!(s.create("r/m/e0", Vec::new()).await.unwrap(), Created::Exists);
        let after = ours.snapshot();
        let delta = |m: &str| after[m] - before[m];
        assert_eq!(
            (delta("create"), delta("complete"), delta("addBlock"), delta("rename2")),
            (6, 5, 0, 0),
            "{after:?}"
        );
        let (ours1, theirs1) = (ours.total() - ours1, hdfs.namenode_rpcs_settled() - theirs1);
        assert!(
            ours1 == 11 && (11..=12).contains(&theirs1),
            "empty creates: compactd counted {ours1}, the NameNode {theirs1}"
        );
        assert_eq!(s.create("r/a/f0", b"again".to_vec()).await.unwrap(), Created::Exists);
        s.put("r/big", vec![b'x'; 3 << 20]).await.unwrap();
        assert_eq!(s.read("r/a/f1").await.unwrap().unwrap().as_ref(), b"1");
        assert!(s.stat("r/nothing").await.unwrap().is_none());
        assert_eq!(s.list("r/").await.unwrap().len(), 4, "one level: a/, b/, m/, big");
        let all: Vec<_> = s.list_stream("r/", true).try_collect().await.unwrap();
        assert_eq!(all.len(), 16);
        s.promote("r/a/f2", "r/a/f9").await.unwrap();
        s.delete("r/a/f3").await.unwrap();
        s.delete_all("r/").await.unwrap();
        let (ours, theirs) = (ours.total() - ours0, hdfs.namenode_rpcs_settled() - theirs0);
        eprintln!(
            "NameNode RPCs: compactd counted {ours}, the NameNode {theirs}: {:?}",
            s.namenode_rpcs().unwrap().snapshot()
        );
        // Never more than the NameNode saw (an over-count, like the listing
        // bug this test found, fails), and fewer only by what hdfs-native
        // sends on its own: a lease renewal, or a `complete` it repeats
        // while the last block's replicas report in (it measured equal
        // when quiet, one short under the full suite's load).
        assert!(ours <= theirs && theirs - ours <= 2, "compactd counted {ours}, the NameNode {theirs}");
    });
}
