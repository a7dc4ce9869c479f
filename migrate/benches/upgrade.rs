//! Upgrade benchmark (not a test): `cargo bench -p compactd-migrate --bench upgrade`.
//!
//! 1. fs: generates a v1 tree of `COMPACTD_BENCH_TASKS` tasks (default
//!    10,000), times `cp -r` of it, then times the upgrade (concurrency
//!    `COMPACTD_BENCH_CONCURRENCY`, default 16) and prints tasks/s, backend
//!    operations per task and the process's peak RSS. Done on the temp dir's
//!    disk and, when it exists, on /dev/shm (OpenDAL's fs backend syncs each
//!    file it writes; `cp` does not).
//! 2. S3: on the loopback S3 server (`bash .ci/install-s3-server.sh` first;
//!    skipped if absent), generates `COMPACTD_BENCH_S3_TASKS` tasks (default
//!    300: the server answers one request at a time) and prints the requests
//!    per task by kind for a first run and for a rerun.
// A benchmark measures real time.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use compactd_migrate as migrate;
use migrate::{Mode, Options, Report};
use store::layers::{CountingLayer, OpCounter, OpCounts};
use store::{RootUri, Store};

fn env_u64(name: &str, default: u64) -> u64 {
    store::testing::env_u64(name).unwrap_or(default)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        })
        .map(|kib| kib / 1024.0)
        .unwrap_or(f64::NAN)
}

async fn counted(uri: &RootUri) -> (Store, OpCounter) {
    let counter = OpCounter::new();
    let c = counter.clone();
    let store = Store::open_with(uri, move |op| op.layer(CountingLayer::new(c.clone()))).await.expect("open store");
    (store, counter)
}

async fn upgrade(store: &Store, concurrency: usize) -> Report {
    let opts = Options { mode: Mode::Apply, concurrency, force: false, ..Options::default() };
    let r = migrate::run(store, &opts, &|_| {}).await.expect("upgrade");
    assert_eq!(r.failed, 0, "{r:#?}");
    r
}

fn per_task(c: &OpCounts, tasks: u64) -> String {
    let t = tasks.max(1) as f64;
    format!(
        "read {:.2}, create {:.2}, put {:.3}, stat {:.2}, list calls {:.4}, list pages (est.) {:.4}, delete {:.2}, total {:.2}",
        c.read as f64 / t,
        c.create as f64 / t,
        c.put as f64 / t,
        c.stat as f64 / t,
        c.list as f64 / t,
        c.list_pages_est as f64 / t,
        c.delete as f64 / t,
        c.total() as f64 / t
    )
}

async fn bench_fs(base: &Path, label: &str, tasks: u64, concurrency: usize) {
    let src = base.join("tree");
    let copy = base.join("copy");
    let uri = RootUri::parse(src.to_str().unwrap()).unwrap();
    let plain = Store::open(&uri).await.unwrap();
    let spec = migrate::fixture::Spec { tasks, seed: 1 };
    let t = Instant::now();
    let files = migrate::fixture::write(&plain, &spec, concurrency).await.unwrap();
    let gen = t.elapsed();

    let t = Instant::now();
    let st = Command::new("cp").arg("-r").arg(&src).arg(&copy).status().unwrap();
    assert!(st.success());
    let cp = t.elapsed();

    let (store, counter) = counted(&uri).await;
    let t = Instant::now();
    let r = upgrade(&store, concurrency).await;
    let up = t.elapsed();
    let counts = counter.snapshot();

    counter.reset();
    let t = Instant::now();
    let r2 = upgrade(&store, concurrency).await;
    let rerun = t.elapsed();
    assert_eq!(r2.already_done, tasks);
    let counts2 = counter.snapshot();

    println!("fs ({label}): {tasks} v1 tasks, {files} files (generated in {gen:.2?})");
    println!("  cp -r          : {cp:>9.2?}  {:>9.0} tasks/s", tasks as f64 / cp.as_secs_f64());
    println!(
        "  upgrade        : {up:>9.2?}  {:>9.0} tasks/s  ({} migrated, {} subtasks, concurrency {concurrency})",
        tasks as f64 / up.as_secs_f64(),
        r.migrated,
        r.subtasks
    );
    println!(
        "  upgrade rerun  : {rerun:>9.2?}  {:>9.0} tasks/s  (all already done)",
        tasks as f64 / rerun.as_secs_f64()
    );
    println!("  ops/task first : {}", per_task(&counts, tasks));
    println!("  ops/task rerun : {}", per_task(&counts2, tasks));
}

struct S3 {
    child: Child,
    port: u16,
}

impl S3 {
    fn start(repo: &Path) -> Option<S3> {
        let python = std::env::var_os("COMPACTD_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join(".venv-s3/bin/python"));
        if !python.exists() {
            return None;
        }
        let mut child = Command::new(python)
            .arg(repo.join("tests/support/s3_server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut()?).read_line(&mut line).ok()?;
        let port = line.trim().strip_prefix("PORT ")?.parse().ok()?;
        Some(S3 { child, port })
    }

    fn bucket(&self, name: &str) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            s,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(resp.split_whitespace().nth(1) == Some("200"), "{resp}");
        format!("s3://{name}/compactd?endpoint=http://127.0.0.1:{}&region=us-east-1", self.port)
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn bench_s3(repo: &Path, tasks: u64, concurrency: usize) {
    let Some(server) = S3::start(repo) else {
        println!("s3: skipped (no loopback S3 server: run `bash .ci/install-s3-server.sh`)");
        return;
    };
    std::env::set_var("AWS_ACCESS_KEY_ID", "compactd-bench");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "compactd-bench-secret");
    let uri = RootUri::parse(&server.bucket("upgrade-bench")).unwrap();
    let plain = Store::open(&uri).await.unwrap();
    migrate::fixture::write(&plain, &migrate::fixture::Spec { tasks, seed: 1 }, concurrency).await.unwrap();
    let (store, counter) = counted(&uri).await;
    let t = Instant::now();
    let r = upgrade(&store, concurrency).await;
    let up = t.elapsed();
    let first = counter.snapshot();
    counter.reset();
    upgrade(&store, concurrency).await;
    let rerun = counter.snapshot();
    println!("s3 (loopback moto): {tasks} v1 tasks, {} subtasks ({} open) in {up:.2?}", r.subtasks, r.subtasks_open);
    println!("  requests, first run : {first}");
    println!("  per task, first run : {}", per_task(&first, tasks));
    println!("  per task, rerun     : {}", per_task(&rerun, tasks));
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let tasks = env_u64("COMPACTD_BENCH_TASKS", 10_000);
    let s3_tasks = env_u64("COMPACTD_BENCH_S3_TASKS", 300);
    let concurrency = env_u64("COMPACTD_BENCH_CONCURRENCY", 16) as usize;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let disk = tempfile::tempdir().unwrap();
        bench_fs(disk.path(), &format!("disk, {}", std::env::temp_dir().display()), tasks, concurrency).await;
        if Path::new("/dev/shm").is_dir() {
            let shm = tempfile::tempdir_in("/dev/shm").unwrap();
            bench_fs(shm.path(), "tmpfs, /dev/shm", tasks, concurrency).await;
        }
        bench_s3(&repo, s3_tasks, concurrency).await;
    });
    println!("peak RSS of the benchmark process: {:.1} MiB", peak_rss_mib());
}
