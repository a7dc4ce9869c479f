//! `compactd upgrade` as a process, on fs and on the loopback S3 server: the
//! seed's v1 tree becomes exactly the seed's v2 picture, a rerun changes
//! nothing, malformed files are reported and left untouched.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use store::testing::snapshot;
use store::{RootUri, Store};

const SEED_V1: &[&str] = &[
    "compct.xcloud24_9876.0.1583392356000.Done",
    "compct.xcloud24_9876.0.1614928356000.Cancel",
    "compct.xcloud24_9876.0.1617606756000.Assigned",
    "compct.xcloud24_9876.0.1617693156000",
];
/// The seed's expected v2 tree, with the node hash `aaaaffff` replaced by
/// FNV-1a-32("xcloud24_9876") = 345ef1df.
const SEED_V2: &[(&str, &str)] = &[
    ("345ef1df.15833923.56000000.0", "Done"),
    ("345ef1df.16149283.56000000.0", "Cancel"),
    ("345ef1df.16176067.56000000.0", "Init"),
    ("345ef1df.16176931.56000000.0", "Init"),
];

fn seed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/v1-seed")
}

fn compactd(root: &str, args: &[&str], env: &[(String, String)]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .arg("--root")
        .arg(root)
        .arg("upgrade")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run compactd");
    eprintln!(
        "compactd upgrade {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().expect("a summary line");
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON summary");
    v["summary"].clone()
}

fn seed_files() -> Vec<(String, Vec<u8>)> {
    store::testing::local_files(&seed_dir())
}

fn expected_v2_paths() -> Vec<String> {
    let mut want = Vec::new();
    for (id, state) in SEED_V2 {
        want.push(format!("Compaction_V2/Scheduler/{id}/Status.{state}"));
        want.push(format!("Compaction_V2/Scheduler/{id}/TaskInfo.pc.db"));
    }
    for f in SEED_V1 {
        want.push(format!("Compaction_V2/TaskUpgradeLock/{f}.lock"));
    }
    want.push("Compaction_V2/TaskUpgradeLock/UpgradeState.json".into());
    want.sort();
    want
}

/// The whole scenario on one backend: plan, apply, rerun, malformed files,
/// verify, finalize.
async fn seed_scenario(root: &str, env: &[(String, String)]) {
    let store = Store::open(&RootUri::parse(root).unwrap()).await.unwrap();
    for (p, b) in seed_files() {
        store.create(&p, b).await.unwrap();
    }
    let v1 = snapshot(&store, "Compaction/").await;
    assert_eq!(v1.len(), 6);

    // Dry run: the plan, and nothing written.
    let out = compactd(root, &["--dry-run"], env);
    assert_eq!(out.status.code(), Some(0));
    let plan = String::from_utf8_lossy(&out.stdout);
    for (id, state) in SEED_V2 {
        assert!(plan.contains(&format!("{id}/Status.{state}")), "{plan}");
    }
    assert!(snapshot(&store, "Compaction_V2/").await.is_empty());

    // Apply: exactly the seed's v2 picture.
    let out = compactd(root, &["--json", "--concurrency", "3"], env);
    assert_eq!(out.status.code(), Some(0));
    let s = summary(&out);
    assert_eq!((s["migrated"].as_u64(), s["failed"].as_u64()), (Some(4), Some(0)));
    let v2 = snapshot(&store, "Compaction_V2/").await;
    let paths: Vec<String> = v2.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(paths, expected_v2_paths());
    assert_eq!(snapshot(&store, "Compaction/").await, v1, "v1 tree touched");
    for (p, b) in &v2 {
        if p.ends_with("TaskInfo.pc.db") {
            let info: layouts::formats::UpgradedTaskInfo = layouts::formats::decode(b).unwrap();
            assert!(p.contains(&info.info.id.to_string()));
            assert!(SEED_V1.contains(&info.upgraded_from.as_str()));
        }
    }
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None);

    // A rerun changes nothing.
    let out = compactd(root, &["--json"], env);
    assert_eq!(out.status.code(), Some(0));
    let s = summary(&out);
    assert_eq!((s["migrated"].as_u64(), s["already_done"].as_u64()), (Some(0), Some(4)));
    assert_eq!(snapshot(&store, "Compaction_V2/").await, v2, "rerun changed the tree");

    // A malformed v1 file is reported and left untouched; the rest migrates.
    let bad = "Compaction/Scheduler/compct.xcloud24_9876.0.1617700000000";
    let bad_bytes = b"CompactTaskId: compct.xcloud24_9876.0.1617700000000\ndb_name: ../../etc\n".to_vec();
    store.create(bad, bad_bytes.clone()).await.unwrap();
    let good = "Compaction/Scheduler/compct.xcloud25_9876.0.1617700001000.Done";
    store.create(good, b"db_name: d\nschema_name: s\ntable_name: t\n".to_vec()).await.unwrap();
    let out = compactd(root, &["--json"], env);
    assert_eq!(out.status.code(), Some(1));
    let s = summary(&out);
    assert_eq!((s["migrated"].as_u64(), s["already_done"].as_u64(), s["failed"].as_u64()), (Some(1), Some(4), Some(1)));
    assert_eq!(s["failures"][0]["path"].as_str(), Some(bad));
    assert!(s["failures"][0]["reason"].as_str().unwrap().contains("db_name"));
    assert_eq!(&store.read(bad).await.unwrap().unwrap()[..], &bad_bytes[..]);
    assert!(migrate::upgrade_in_progress(&store).await.unwrap().is_some());
    // Verify fails, finalize refuses and removes nothing.
    assert_eq!(compactd(root, &["--verify"], env).status.code(), Some(1));
    assert_eq!(compactd(root, &["--finalize"], env).status.code(), Some(1));
    assert!(store.exists(bad).await.unwrap());
    // The operator removes the bad file; verify passes; finalize.
    store.delete(bad).await.unwrap();
    let out = compactd(root, &["--verify", "--json"], env);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(summary(&out)["verified"].as_u64(), Some(5));
    assert_eq!(migrate::upgrade_in_progress(&store).await.unwrap(), None);
    let out = compactd(root, &["--finalize"], env);
    assert_eq!(out.status.code(), Some(0));
    assert!(snapshot(&store, "Compaction/").await.is_empty());
    let left = snapshot(&store, "Compaction_V2/").await;
    assert_eq!(left.len(), 10);
    assert!(left.iter().all(|(p, _)| p.starts_with("Compaction_V2/Scheduler/")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_tree_on_fs() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    seed_scenario(dir.path().to_str().unwrap(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_tree_on_s3() {
    let _turn = crate::common::turns::waits();
    let s3 = common::s3::S3Server::shared();
    s3.set_env();
    let root = s3.new_bucket("upgrade-seed");
    seed_scenario(&root, &s3.env()).await;
}

/// The seed's own backend: its v1 tree (and its lock files) lived on HDFS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_tree_on_hdfs() {
    let _turn = crate::common::turns::waits();
    let hdfs = common::hdfs::HdfsCluster::shared();
    seed_scenario(&hdfs.new_root("upgrade-seed"), &[]).await;
}

#[test]
fn usage_errors_exit_2() {
    let _turn = crate::common::turns::waits();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for args in [&["--dry-run", "--verify"][..], &["--concurrency", "0"], &["--force"]] {
        assert_eq!(compactd(root, args, &[]).status.code(), Some(2), "{args:?}");
    }
}
