//! Unit tests of the store on fs and memory (fs create, no-follow data
//! store, quarantine, temp sweeps). The cross-backend suite is
//! `tests/all/backends/store_conformance.rs`.
#![allow(clippy::disallowed_methods)] // file ages against the real clock

use super::*;
use futures::TryStreamExt;

async fn fs_store(dir: &std::path::Path) -> Store {
    Store::open(&RootUri::Fs { root: dir.to_path_buf() }).await.unwrap()
}

/// Temp files anywhere below `dir`: in the temp folder (older versions),
/// or beside a target.
fn temps(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir.join(FS_TMP_DIR))
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                // The repairers' lock stays by design (see beneath.rs).
                .filter(|n| n != "repair.lock")
                .collect()
        })
        .unwrap_or_default();
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.map(|e| e.unwrap()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                if name != FS_TMP_DIR {
                    walk(&e.path(), out);
                }
            } else if name.starts_with(".compactd-") {
                out.push(e.path().display().to_string());
            }
        }
    }
    walk(dir, &mut out);
    out
}

#[tokio::test]
async fn fs_create_publishes_whole_files_and_loses_to_an_existing_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    assert_eq!(s.create("a/b/c", b"first".to_vec()).await.unwrap(), Created::Created);
    assert_eq!(s.create("a/b/c", b"second".to_vec()).await.unwrap(), Created::Exists);
    assert_eq!(std::fs::read(dir.path().join("a/b/c")).unwrap(), b"first");
    // An empty file left by a crashed writer of an older version is an
    // existing name too: a create never overwrites.
    std::fs::write(dir.path().join("a/torn"), b"").unwrap();
    assert_eq!(s.create("a/torn", b"x".to_vec()).await.unwrap(), Created::Exists);
    assert_eq!(std::fs::read(dir.path().join("a/torn")).unwrap(), b"");
    assert!(temps(dir.path()).is_empty(), "no temp file left: {:?}", temps(dir.path()));
    // A folder where the file should be is an error, not a win.
    std::fs::create_dir_all(dir.path().join("a/dir")).unwrap();
    assert_eq!(s.create("a/dir", b"x".to_vec()).await.unwrap(), Created::Exists);
}

#[tokio::test]
async fn fs_creates_racing_on_os_threads_have_one_winner_with_its_content() {
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    for round in 0..20 {
        let path = format!("race/{round}");
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (s, path) = (s.clone(), path.clone());
                tokio::spawn(async move { (i, s.create(&path, format!("writer {i}").into_bytes()).await.unwrap()) })
            })
            .collect();
        let mut winners = vec![];
        for t in tasks {
            let (i, r) = t.await.unwrap();
            if r == Created::Created {
                winners.push(i);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let content = std::fs::read_to_string(dir.path().join(&path)).unwrap();
        assert_eq!(content, format!("writer {}", winners[0]));
    }
    assert!(temps(dir.path()).is_empty());
}

#[tokio::test]
async fn a_torn_file_is_quarantined_after_its_grace_and_a_valid_one_never() {
    use fs::Quarantine;
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    let torn = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).is_err();
    std::fs::create_dir_all(dir.path().join("j")).unwrap();
    std::fs::write(dir.path().join("j/Job"), b"").unwrap();
    let now = SystemTime::now();
    let grace = Duration::from_secs(60);
    assert!(matches!(s.quarantine_torn("j/Job", torn, grace, now).await.unwrap(), Quarantine::TooYoung { .. }));
    assert!(dir.path().join("j/Job").exists());
    let later = now + Duration::from_secs(61);
    assert_eq!(s.quarantine_torn("j/Job", torn, grace, later).await.unwrap(), Quarantine::Removed);
    assert!(!dir.path().join("j/Job").exists());
    assert_eq!(s.create("j/Job", b"{}".to_vec()).await.unwrap(), Created::Created);
    assert_eq!(s.quarantine_torn("j/Job", torn, grace, later).await.unwrap(), Quarantine::NotTorn);
    assert_eq!(std::fs::read(dir.path().join("j/Job")).unwrap(), b"{}");
    assert_eq!(s.quarantine_torn("j/none", torn, grace, later).await.unwrap(), Quarantine::NotTorn);
    assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
    let m = Store::memory().await;
    m.put("j/Job", b"".to_vec()).await.unwrap();
    assert_eq!(m.quarantine_torn("j/Job", torn, grace, later).await.unwrap(), Quarantine::NotTorn);
}

#[tokio::test]
async fn a_data_store_over_fs_never_follows_links() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let (root, outside) = (dir.path().join("data"), dir.path().join("outside"));
    std::fs::create_dir_all(root.join("t/p")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"secret").unwrap();
    std::fs::write(root.join("t/p/a"), b"0123456789").unwrap();
    symlink(outside.join("secret"), root.join("t/p/evil")).unwrap();
    symlink(&outside, root.join("t/p/linkdir")).unwrap();
    symlink(&outside, root.join("t/q")).unwrap();
    let s = Store::open_data(&RootUri::Fs { root: root.clone() }).await.unwrap();
    let listed: Vec<(String, bool, Option<&str>)> =
        s.list("t/p/").await.unwrap().into_iter().map(|e| (e.name().to_string(), e.is_dir, e.special)).collect();
    assert_eq!(
        listed,
        vec![
            ("a".into(), false, None),
            ("evil".into(), false, Some("symbolic link")),
            ("linkdir".into(), false, Some("symbolic link")),
        ]
    );
    assert_eq!(&s.read("t/p/a").await.unwrap().unwrap()[..], b"0123456789");
    assert_eq!(&s.read_range("t/p/a", 2, 3).await.unwrap().unwrap()[..], b"234");
    assert!(s.read_range("t/p/a", 8, 10).await.is_err(), "past the end");
    let e = s.read("t/p/evil").await.unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(s.read("t/p/linkdir/secret").await.is_err(), "a linked folder on the way is refused");
    assert!(s.read("t/q/secret").await.is_err());
    assert!(s.stat("t/p/evil").await.unwrap().is_none(), "a link is not an existing file");
    assert!(s.put("t/p/linkdir/x", b"x".to_vec()).await.is_err());
    assert!(s.create("t/q/x", b"x".to_vec()).await.is_err());
    s.delete("t/p/evil").await.unwrap();
    assert!(root.join("t/p/evil").symlink_metadata().is_ok(), "a link is never deleted as a file");
    // A put over a link replaces the link, never writes through it.
    s.put("t/p/evil", b"mine".to_vec()).await.unwrap();
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"secret");
    assert_eq!(std::fs::read(root.join("t/p/evil")).unwrap(), b"mine");
    assert_eq!(s.create("t/p/new", b"1".to_vec()).await.unwrap(), Created::Created);
    assert_eq!(s.create("t/p/new", b"2".to_vec()).await.unwrap(), Created::Exists);
    assert!(s.remove_link("t/p/linkdir/").await.unwrap());
    assert!(outside.join("secret").exists());
    symlink(&outside, root.join("t/p/sub")).unwrap();
    s.delete_all("t/p/").await.unwrap();
    assert!(!root.join("t/p").exists());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "nothing outside removed");
    assert!(s.read("t/../../outside/secret").await.is_err(), "`..` is refused");
    // Temps of crashed writers of this host are swept, others kept.
    std::fs::create_dir_all(root.join("u")).unwrap();
    let host = fs::host_tag();
    for n in [format!(".compactd-put.{host}.0.1.x"), ".compactd-put.otherhost.0.1.x".to_string()] {
        std::fs::write(root.join("u").join(n), b"").unwrap();
    }
    assert_eq!(s.sweep_stale_temps("u/").await.unwrap(), 1);
    assert_eq!(std::fs::read_dir(root.join("u")).unwrap().count(), 1);
}

#[tokio::test]
async fn fs_open_sweeps_temps_of_dead_processes_of_this_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join(FS_TMP_DIR);
    std::fs::create_dir_all(&tmp).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    // pid 0 is never a user process; our own pid is alive.
    let dead = format!("create.{host}.0.7");
    let alive = format!("create.{host}.{}.9", std::process::id());
    let other_host = "create.some-other-host.0.1".to_string();
    for n in [&dead, &alive, &other_host] {
        std::fs::write(tmp.join(n), b"x").unwrap();
    }
    let _ = fs_store(dir.path()).await;
    let mut left = temps(dir.path());
    left.sort();
    let mut want = vec![alive, other_host];
    want.sort();
    assert_eq!(left, want);
}

#[tokio::test]
async fn fs_puts_lists_and_deletes_of_the_tree_are_whole_and_leave_no_temps() {
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    // A put into folders that do not exist yet, then a replacing one.
    s.put("t/a/x", b"one".to_vec()).await.unwrap();
    s.put("t/a/x", b"two".to_vec()).await.unwrap();
    assert_eq!(std::fs::read(dir.path().join("t/a/x")).unwrap(), b"two");
    // A streamed write larger than the put buffer: spilled, then published.
    let big: Vec<u8> = (0..(fs::PUT_BUFFER_FOR_TESTS + 12_345)).map(|i| (i % 251) as u8).collect();
    let mut w = s.writer("t/big").await.unwrap();
    for part in big.chunks(3 * 1024 * 1024) {
        w.write(Bytes::copy_from_slice(part)).await.unwrap();
    }
    assert!(!dir.path().join("t/big").exists(), "nothing visible before close");
    w.close().await.unwrap();
    assert_eq!(std::fs::read(dir.path().join("t/big")).unwrap(), big);
    // A writer dropped before close leaves neither the name nor a temp.
    let mut w = s.writer("t/dropped").await.unwrap();
    w.write(Bytes::from(vec![7u8; fs::PUT_BUFFER_FOR_TESTS + 1])).await.unwrap();
    drop(w);
    assert!(!dir.path().join("t/dropped").exists());
    assert!(temps(dir.path()).is_empty(), "no temp file left: {:?}", temps(dir.path()));

    // More entries than one listing chunk, recursive and not; a symbolic
    // link to a folder is listed as an entry and never walked into.
    let n = fs::LIST_CHUNK + 100;
    for i in 0..n {
        std::fs::create_dir_all(dir.path().join(format!("t/many/s{i:05}"))).unwrap();
        std::fs::write(dir.path().join(format!("t/many/s{i:05}/f")), b"x").unwrap();
    }
    std::os::unix::fs::symlink(dir.path().join("t/a"), dir.path().join("t/many/link")).unwrap();
    let flat = s.list("t/many/").await.unwrap();
    assert_eq!(flat.len(), n + 1);
    assert_eq!(flat.iter().filter(|e| e.is_dir).count(), n);
    let deep: Vec<Entry> = s.list_stream("t/many/", true).try_collect().await.unwrap();
    let mut files: Vec<&str> = deep.iter().map(|e| e.path.as_str()).collect();
    files.sort();
    assert_eq!(files.len(), n + 1, "every file once, the link once, nothing through it");
    assert!(files.contains(&"t/many/link") && !files.iter().any(|f| f.starts_with("t/many/link/")));
    assert!(s.list("t/nothing-here/").await.unwrap().is_empty());

    // Temps beside targets are never listed; a dead process's is removed by
    // the listing that comes across it, a live one's and another host's kept.
    let host = fs::host_tag();
    let dead = format!(".compactd-put.{host}.0.3.x");
    let live = format!(".compactd-create.{host}.{}.4.y", std::process::id());
    let other = ".compactd-put.some-other-host.0.5.z".to_string();
    for n in [&dead, &live, &other] {
        std::fs::write(dir.path().join("t/a").join(n), b"t").unwrap();
    }
    let names: Vec<String> = s.list("t/a/").await.unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(names, vec!["t/a/x".to_string()]);
    assert!(!dir.path().join("t/a").join(&dead).exists());
    assert!(dir.path().join("t/a").join(&live).exists() && dir.path().join("t/a").join(&other).exists());
    std::fs::remove_file(dir.path().join("t/a").join(&live)).unwrap();
    std::fs::remove_file(dir.path().join("t/a").join(&other)).unwrap();

    // Deletes: a file, a missing file, a folder with everything below it
    // (through the link: never its target).
    s.delete("t/a/x").await.unwrap();
    s.delete("t/a/x").await.unwrap();
    std::fs::write(dir.path().join("t/a/keep"), b"k").unwrap();
    s.delete_all("t/many/").await.unwrap();
    assert!(!dir.path().join("t/many").exists());
    assert_eq!(std::fs::read(dir.path().join("t/a/keep")).unwrap(), b"k");
}

#[tokio::test]
async fn memory_basics() {
    let s = Store::memory().await;
    assert_eq!(s.create("a/b", b"1".to_vec()).await.unwrap(), Created::Created);
    assert_eq!(s.create("a/b", b"2".to_vec()).await.unwrap(), Created::Exists);
    assert_eq!(&s.read("a/b").await.unwrap().unwrap()[..], b"1");
    s.put("a/b", b"3".to_vec()).await.unwrap();
    assert_eq!(&s.read("a/b").await.unwrap().unwrap()[..], b"3");
    assert!(s.read("a/c").await.unwrap().is_none());
    s.put("a/d/e", b"x".to_vec()).await.unwrap();
    let names: Vec<_> = s.list("a/").await.unwrap().into_iter().map(|e| (e.name().to_string(), e.is_dir)).collect();
    assert_eq!(names, vec![("b".into(), false), ("d".into(), true)]);
    s.delete("a/b").await.unwrap();
    s.delete("a/b").await.unwrap();
    s.delete_all("a/").await.unwrap();
    assert!(s.list("a/").await.unwrap().is_empty());
    assert!(s.list("missing/").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_repairers_and_creators_of_a_torn_name_have_one_winner() {
    use fs::Quarantine;
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    let torn = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).is_err();
    let later = SystemTime::now() + Duration::from_secs(3600);
    for round in 0..20 {
        let path = format!("r/{round}/Job");
        let file = dir.path().join(&path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"").unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (s, path) = (s.clone(), path.clone());
                tokio::spawn(async move {
                    let q = s.quarantine_torn(&path, torn, Duration::from_secs(60), later).await.unwrap();
                    assert_ne!(q, Quarantine::TooYoung { age: Duration::ZERO });
                    (i, s.create(&path, format!("{{\"writer\":{i}}}").into_bytes()).await.unwrap())
                })
            })
            .collect();
        let mut winners = vec![];
        for t in tasks {
            let (i, c) = t.await.unwrap();
            if c == Created::Created {
                winners.push(i);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(v["writer"], winners[0], "round {round}: the name holds the winner's content");
        let left: Vec<String> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["Job".to_string()], "round {round}: graves left behind");
    }
}

fn is_ext4(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: statfs fills the zeroed struct it is given.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(p.as_ptr(), &mut st) } == 0) && st.f_type == 0xEF53
}

#[tokio::test]
async fn a_spread_folder_gets_the_orlov_attribute_where_the_file_system_has_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    let set = s.spread_children("Compaction_V2/TaskAssigned/n1/").await;
    let folder = dir.path().join("Compaction_V2/TaskAssigned/n1");
    assert!(folder.is_dir(), "the folder is created");
    assert_eq!(
        set,
        fs::attr_flags(&std::fs::File::open(&folder).unwrap()).is_some_and(|f| f & fs::FS_TOPDIR_FL != 0),
        "reported as it is"
    );
    if is_ext4(dir.path()) {
        assert!(set, "ext4 has the attribute");
    }
    // Again: nothing changes, nothing fails; a folder with files stays.
    std::fs::write(folder.join("x"), b"1").unwrap();
    assert_eq!(s.spread_children("Compaction_V2/TaskAssigned/n1/").await, set);
    assert_eq!(std::fs::read(folder.join("x")).unwrap(), b"1");
    // Other backends: nothing to do.
    let m = Store::open(&RootUri::Memory).await.unwrap();
    assert!(!m.spread_children("Compaction_V2/TaskAssigned/n1/").await);
    assert!(m.list("Compaction_V2/").await.unwrap().is_empty());
}

/// What a careless or hostile user can put at a state file's name on fs:
/// each is refused as a bad file at once, naming the path, having read at
/// most the limit and a byte (`read.rs`), and never blocks (a FIFO with no
/// writer would block an `open` for reading forever).
#[tokio::test]
async fn fs_reads_of_the_tree_refuse_what_is_not_a_small_regular_file() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let s = fs_store(dir.path()).await;
    let d = dir.path().join("t");
    std::fs::create_dir_all(d.join("folder")).unwrap();
    let fifo = std::ffi::CString::new(d.join("fifo").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    symlink("/dev/zero", d.join("zero")).unwrap();
    symlink("/dev/null", d.join("null")).unwrap();
    symlink(d.join("loop-b"), d.join("loop-a")).unwrap();
    symlink(d.join("loop-a"), d.join("loop-b")).unwrap();
    let sparse = std::fs::File::create(d.join("sparse")).unwrap();
    sparse.set_len(2 << 30).unwrap();
    std::fs::write(d.join("small"), b"{}").unwrap();
    symlink(d.join("small"), d.join("link-to-small")).unwrap();
    std::os::unix::fs::symlink(&d, dir.path().join("linked-folder")).unwrap();
    let cases = [
        ("folder", "folder"),
        ("fifo", "FIFO"),
        ("zero", "symbolic link"),
        ("null", "symbolic link"),
        ("loop-a", "symbolic link"),
        ("sparse", "limit"),
        ("link-to-small", "symbolic link"),
    ];
    for (name, says) in cases {
        let path = format!("t/{name}");
        let t = std::time::Instant::now();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&path)).await;
        let err = got.unwrap_or_else(|_| panic!("{name}: the read hung")).expect_err(name);
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{name}: {:?}", t.elapsed());
        let msg = err.to_string();
        assert!(msg.contains(&path), "{name}: {msg}");
        assert!(err.is_bad_file() && msg.contains(says), "{name}: {msg}");
    }
    // No link of the tree is followed (as the data root's are not): not at
    // a file's name, not in the folders leading to it.
    let err = s.read("linked-folder/small").await.expect_err("a file below a link");
    assert!(err.is_bad_file() && err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(&s.read("t/small").await.unwrap().unwrap()[..], b"{}");
}

/// Writes, listings, stats and deletes of a tree over fs follow no link
/// either: a folder of the tree replaced by a link to somewhere else gets
/// nothing written there, lists nothing from there, and a delete removes
/// a link itself, never its target.
#[tokio::test]
async fn fs_tree_writes_lists_and_deletes_never_follow_a_link() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"SECRET").unwrap();
    let s = fs_store(dir.path()).await;
    std::fs::create_dir_all(dir.path().join("Registry")).unwrap();
    symlink(outside.path(), dir.path().join("Registry/Nodes")).unwrap();
    assert!(s.create("Registry/Nodes/n1", b"{}".to_vec()).await.is_err(), "a create through a link");
    assert!(s.put("Registry/Nodes/n1", b"{}".to_vec()).await.is_err(), "a put through a link");
    assert!(!outside.path().join("n1").exists(), "nothing was written through the link");
    assert!(s.list("Registry/Nodes/").await.is_err(), "a listing through a link");
    assert!(s.stat("Registry/Nodes/secret").await.unwrap().is_none(), "a stat through a link");
    // A link at a file's name: stat sees the name, delete removes the name.
    symlink(outside.path().join("secret"), dir.path().join("Registry/beat")).unwrap();
    let listed = s.list("Registry/").await.unwrap();
    assert!(listed.iter().any(|e| e.name() == "beat" && !e.is_dir), "{listed:?}");
    assert!(s.exists("Registry/beat").await.unwrap());
    s.delete("Registry/beat").await.unwrap();
    assert!(std::fs::symlink_metadata(dir.path().join("Registry/beat")).is_err(), "the link is gone");
    assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"SECRET", "its target is kept");
    s.delete_all("Registry/Nodes/").await.unwrap();
    assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"SECRET", "nothing below the link deleted");
    // The tree itself still works.
    assert_eq!(s.create("Registry/x/y", b"1".to_vec()).await.unwrap(), Created::Created);
    assert_eq!(&s.read("Registry/x/y").await.unwrap().unwrap()[..], b"1");
}

/// A data store over fs whose file system stops answering (a hung NFS
/// server): a metadata call ends with an error at the request timeout
/// instead of holding its caller (the manager's tick) forever; content
/// moves are not cut short (they run in executors with their own limit).
#[tokio::test]
async fn a_hung_metadata_call_of_a_data_store_over_fs_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions { timeout: Some(std::time::Duration::from_millis(100)), retries: 0 };
    let s = Store::open_data_with_options(&RootUri::Fs { root: dir.path().to_path_buf() }, &opts).await.unwrap();
    let hang = |_: &beneath::Beneath| {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        Ok(())
    };
    let t = std::time::Instant::now();
    let err = s.fs_data("list", "t/", hang).await.unwrap_err();
    assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(err.to_string().contains("no answer from the file system"), "{err}");
    let t = std::time::Instant::now();
    s.fs_data("read", "t/x", hang).await.unwrap();
    assert!(t.elapsed() >= std::time::Duration::from_millis(1500));
}

/// S3's 409 on a conditional create (OpenDAL's `Conflict`: another
/// conditional write of the key in flight) is a create not applied: it is
/// sent again after a backoff, and only its answer counts.
#[cfg(feature = "testing")]
#[tokio::test(start_paused = true)]
async fn a_create_answered_409_is_sent_again_after_a_backoff_and_never_taken_as_exists() {
    use crate::layers::{FaultConfig, FaultLayer, OpKind};
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::sync::Arc;
    let layer = FaultLayer::new(FaultConfig { error_rate: 1.0, kinds: vec![OpKind::Create], ..Default::default() });
    let h = layer.handle();
    h.set_error_kind(ErrorKind::Conflict);
    let store = Store::open_with(&RootUri::Memory, move |op| op.layer(layer.clone())).await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    // 409 until the `n`-th create request; the ones after reach the backend.
    let answer_from = |n: u32| {
        calls.store(0, SeqCst);
        h.set_error_rate(1.0);
        let (c, h2) = (calls.clone(), h.clone());
        h.set_on_op(Some(Arc::new(move |_, _| {
            if c.fetch_add(1, SeqCst) + 1 == n - 1 {
                h2.set_error_rate(0.0);
            }
        })));
    };
    answer_from(3);
    let t = tokio::time::Instant::now();
    assert_eq!(store.create("a", "x").await.unwrap(), Created::Created);
    assert_eq!(calls.load(SeqCst), 3);
    assert!(t.elapsed() >= std::time::Duration::from_millis(150), "{:?}", t.elapsed());
    // A 409, then the name turns out taken: Exists, content untouched.
    answer_from(2);
    assert_eq!(store.create("a", "y").await.unwrap(), Created::Exists);
    assert_eq!(store.read("a").await.unwrap().unwrap(), "x");
    // 409 every time: an error after the bounded tries, not "exists".
    answer_from(u32::MAX);
    let t = tokio::time::Instant::now();
    let err = store.create("b", "z").await.unwrap_err().to_string();
    assert!(err.contains("create") && err.contains("\"b\""), "{err}");
    assert_eq!(calls.load(SeqCst), CREATE_CONFLICT_TRIES);
    assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(!store.exists("b").await.unwrap());
}
