//! Jobs through the real binary: `define`, `trigger`, `jobs`, `job`.
//!
//! - Ten concurrent `compactd trigger` processes with the same key create
//!   exactly one job instance, on fs and on the loopback S3 server.
//! - Definitions through the CLI: validation errors name the steps and
//!   write nothing; versions, switch, show.
//! - The diamond job (A → B, A → C, B and C → D; B sharded 4 ways) runs to
//!   the end across three `compactd run` processes with the `command`
//!   executor, each step starting only after its dependencies succeeded; a
//!   failing step fails its job and skips its dependents; a job running
//!   while its definition changes finishes with the version it started with.
//! - A scheduled definition: refused with a bad pattern, listed by `jobs`
//!   with its next fire instant (the firing itself is tested under the
//!   manual clock in `src/jobs/cron_tests.rs` and `tests/all/tasks/schedules.rs`).
// Real processes, real backends and wall-clock seeds: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{alive, Cluster, BIN};
use common::hdfs::HdfsCluster;
use common::s3::S3Server;
use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/jobs").join(name).display().to_string()
}

fn ok(out: &Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Ten `trigger` processes started at once with the same key; exactly one
/// reports `created`, all report the same instance.
fn trigger_race(c: &Cluster) {
    ok(&c.compactd(&["define", "apply", &fixture("diamond.json"), "--json"]), "define apply");
    let children: Vec<_> = (0..10)
        .map(|i| {
            Command::new(BIN)
                .args(["--root", &c.root, "trigger", "diamond", "--trigger", "2024-01-01"])
                .args(["--param", &format!("who={i}"), "--json"])
                .envs(c.env.iter().cloned())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<Value> = children.into_iter().map(|ch| ok(&ch.wait_with_output().unwrap(), "trigger")).collect();
    let created: Vec<&Value> = results.iter().filter(|r| r["created"] == true).collect();
    assert_eq!(created.len(), 1, "{results:#?}");
    let winner = &created[0]["job"];
    for r in &results {
        assert_eq!(r["job"]["params"], winner["params"], "{results:#?}");
        assert_eq!(r["job"]["created_wall_ms"], winner["created_wall_ms"]);
        assert_eq!(r["job"]["trigger"], "2024-01-01");
    }
    let jobs = ok(&c.compactd(&["jobs", "--json"]), "jobs");
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs:#?}");
    assert_eq!(jobs[0]["params"], winner["params"]);
}

#[test]
fn ten_concurrent_trigger_processes_create_one_job_on_fs() {
    let _turn = crate::common::turns::waits();
    trigger_race(&Cluster::fs());
}

#[test]
fn ten_concurrent_trigger_processes_create_one_job_on_s3() {
    let _turn = crate::common::turns::waits();
    let server = S3Server::shared();
    let c = Cluster::on(server.new_bucket("jobs-trigger"), server.env());
    trigger_race(&c);
}

#[test]
fn ten_concurrent_trigger_processes_create_one_job_on_hdfs() {
    let _turn = crate::common::turns::waits();
    let hdfs = HdfsCluster::shared();
    trigger_race(&Cluster::on(hdfs.new_root("jobs-trigger"), vec![]));
}

#[test]
fn definitions_through_the_cli() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    // Refused definitions name the steps and write nothing.
    let out = c.compactd(&["define", "apply", &fixture("cycle.json")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(r#"steps form a cycle: "extract" -> "transform" -> "publish" -> "extract""#),
        "{}",
        stderr(&out)
    );
    let out = c.compactd(&["define", "apply", &fixture("unknown-dep.json")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(r#"step "publish" depends on unknown step "transform""#), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"jobName\": \"x\", \"steps\": [").unwrap();
    let out = c.compactd(&["define", "apply", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&format!("{}: not a valid job definition", bad.display())));
    let out = c.compactd(&["define", "apply", "/nonexistent/def.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/def.json"), "{}", stderr(&out));
    assert!(!c.fs_path().join("Compaction_V2/Jobs").exists());
    // Names are checked like every name: a usage error.
    let out = c.compactd(&["trigger", "../x", "--trigger", "k"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = c.compactd(&["trigger", "x", "--trigger", "k", "--param", "a-b=1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));

    // Versions, switch, show.
    let a = ok(&c.compactd(&["define", "apply", &fixture("report.json"), "--json"]), "apply");
    assert_eq!((a["version"].as_u64(), a["changed"].as_bool()), (Some(1), Some(true)));
    let v1 = ok(&c.compactd(&["define", "show", "events-report"]), "show");
    let changed =
        std::fs::read_to_string(fixture("report.json")).unwrap().replace("\"sharding\": 2", "\"sharding\": 3");
    let f2 = dir.path().join("report-v2.json");
    std::fs::write(&f2, changed).unwrap();
    let a = ok(&c.compactd(&["define", "apply", f2.to_str().unwrap(), "--json"]), "apply v2");
    assert_eq!(a["version"], 2);
    assert_eq!(a["changedSteps"], serde_json::json!(["stats"]));
    let a = ok(&c.compactd(&["define", "apply", f2.to_str().unwrap(), "--json"]), "apply v2 again");
    assert_eq!((a["version"].as_u64(), a["changed"].as_bool()), (Some(2), Some(false)));
    let vs = ok(&c.compactd(&["define", "versions", "events-report", "--json"]), "versions");
    let cur: Vec<(u64, bool)> = vs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["version"].as_u64().unwrap(), r["current"].as_bool().unwrap()))
        .collect();
    assert_eq!(cur, vec![(1, false), (2, true)]);
    assert_eq!(ok(&c.compactd(&["define", "show", "events-report"]), "show")["steps"][1]["sharding"], 3);
    let out = c.compactd(&["define", "switch", "events-report", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(ok(&c.compactd(&["define", "show", "events-report"]), "show"), v1);
    assert_eq!(
        ok(&c.compactd(&["define", "show", "events-report", "--version", "2"]), "show v2")["steps"][1]["sharding"],
        3
    );
    // Delete keeps the log; switch restores.
    let out = c.compactd(&["define", "delete", "events-report"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.compactd(&["define", "show", "events-report"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is deleted"), "{}", stderr(&out));
    let vs = ok(&c.compactd(&["define", "versions", "events-report", "--json"]), "versions");
    assert_eq!(vs.as_array().unwrap().len(), 2);
    assert!(c.compactd(&["define", "switch", "events-report", "2"]).status.success());
    assert_eq!(ok(&c.compactd(&["define", "show", "events-report"]), "show")["version"], 2);
    // `check` knows the Jobs/ folder.
    let out = c.compactd(&["check"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Jobs"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A scheduled definition through the CLI: a bad schedule is refused naming
/// the key and the pattern; `jobs` lists the job with its zone and next
/// fire instant; `job --json` carries the schedule on an instance.
#[test]
fn a_schedule_through_the_cli() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    let text = std::fs::read_to_string(fixture("nightly.json")).unwrap();
    std::fs::write(&bad, text.replace("30 2 * * *", "30 2 * *")).unwrap();
    let out = c.compactd(&["define", "apply", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(r#""schedule": cron expression "30 2 * *""#), "{}", stderr(&out));
    ok(&c.compactd(&["define", "apply", &fixture("nightly.json"), "--json"]), "apply");
    let out = c.compactd(&["jobs"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    let row = listed.lines().find(|l| l.starts_with("nightly ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains("30 2 * * *") && row.contains("Europe/Berlin") && row.contains(":30:00.000Z"), "{row}");
    assert!(c.compactd(&["trigger", "nightly", "--trigger", "by-hand"]).status.success());
    let job = ok(&c.compactd(&["job", "nightly", "by-hand", "--json"]), "job");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let next = job["schedule"]["nextFireMs"].as_u64().unwrap_or_else(|| panic!("{job:#}"));
    assert!(next > now && next <= now + 25 * 3_600_000, "next fire {next}, now {now}");
    assert_eq!(job["schedule"]["timeZone"], "Europe/Berlin");
}

fn wait_job(c: &Cluster, job: &str, key: &str, timeout: Duration) -> Value {
    let start = Instant::now();
    loop {
        let v = ok(&c.compactd(&["job", job, key, "--json"]), "job");
        if v["state"] != "Running" {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("{job}/{key} still running after {timeout:?}: {v:#}\n{}", c.logs_text());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn step<'a>(job: &'a Value, name: &str) -> &'a Value {
    job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stepName"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {job:#}"))
}

/// Every step started (task submitted) no earlier than each of its
/// dependencies finished (recorded by the driver).
fn assert_dag_order(job: &Value) {
    for s in job["steps"].as_array().unwrap() {
        let Some(started) = s["started_wall_ms"].as_u64() else {
            continue;
        };
        for d in s["dependentSteps"].as_array().unwrap() {
            let dep = step(job, d.as_str().unwrap());
            assert_eq!(dep["state"], "Succeeded", "{job:#}");
            let finished = dep["finished_wall_ms"].as_u64().unwrap();
            assert!(started >= finished, "{} started at {started} before {d} finished at {finished}", s["stepName"]);
        }
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[test]
fn diamond_runs_across_three_processes() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--executor", "command", "--command", "true", "--sweep", "1s", "--allow-inline-commands"]);
    }
    c.wait_nodes(Duration::from_secs(20), "three live nodes", |rows| alive(rows).len() == 3);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.log");
    let out_s = out.to_str().unwrap();
    ok(&c.compactd(&["define", "apply", &fixture("diamond.json"), "--json"]), "apply");
    // A failing twin: B exits 3.
    let failing = std::fs::read_to_string(fixture("diamond.json"))
        .unwrap()
        .replace("\"jobName\": \"diamond\"", "\"jobName\": \"failing\"");
    let mut v: Value = serde_json::from_str(&failing).unwrap();
    v["steps"][1]["command"] = Value::from("exit 3");
    let ff = dir.path().join("failing.json");
    std::fs::write(&ff, serde_json::to_vec(&v).unwrap()).unwrap();
    ok(&c.compactd(&["define", "apply", ff.to_str().unwrap(), "--json"]), "apply failing");

    let param = format!("out={out_s}");
    for (job, key) in [("diamond", "d1"), ("failing", "f1")] {
        let t = ok(&c.compactd(&["trigger", job, "--trigger", key, "--param", &param, "--json"]), "trigger");
        assert_eq!(t["created"], true);
    }
    // The definition changes while d1 runs: v2 writes "v2" instead of "v1".
    let v2 =
        std::fs::read_to_string(fixture("diamond.json")).unwrap().replace("\"version\": \"v1\"", "\"version\": \"v2\"");
    let f2 = dir.path().join("diamond-v2.json");
    std::fs::write(&f2, v2).unwrap();
    let a = ok(&c.compactd(&["define", "apply", f2.to_str().unwrap(), "--json"]), "apply v2");
    assert_eq!(a["version"], 2);
    ok(&c.compactd(&["trigger", "diamond", "--trigger", "d2", "--param", &param, "--json"]), "trigger d2");

    let d1 = wait_job(&c, "diamond", "d1", Duration::from_secs(120));
    assert_eq!(d1["state"], "Succeeded", "{d1:#}");
    assert_eq!(d1["jobVersion"], 1);
    assert_dag_order(&d1);
    assert_eq!(step(&d1, "B")["params"]["out"], out_s);

    let f1 = wait_job(&c, "failing", "f1", Duration::from_secs(120));
    assert_eq!(f1["state"], "Failed", "{f1:#}");
    assert_eq!(step(&f1, "B")["state"], "Failed");
    assert_eq!(step(&f1, "C")["state"], "Succeeded");
    assert_eq!(step(&f1, "D")["state"], "Skipped");
    assert!(step(&f1, "D")["task"].is_null());

    let d2 = wait_job(&c, "diamond", "d2", Duration::from_secs(120));
    assert_eq!(d2["state"], "Succeeded", "{d2:#}");
    assert_eq!(d2["jobVersion"], 2);
    assert_dag_order(&d2);

    // What the executors wrote: every shard once, in DAG order, each job
    // with its own definition version.
    let all = lines(&out);
    let of = |key: &str| -> Vec<String> { all.iter().filter(|l| l.split(' ').nth(2) == Some(key)).cloned().collect() };
    let d1_lines = of("d1");
    let mut sorted = d1_lines.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec!["A 0/1 d1 v1", "B 0/4 d1 v1", "B 1/4 d1 v1", "B 2/4 d1 v1", "B 3/4 d1 v1", "C 0/1 d1 v1", "D 0/1 d1 v1"],
        "{all:#?}"
    );
    assert!(d1_lines[0].starts_with("A "), "{d1_lines:?}");
    assert!(d1_lines[6].starts_with("D "), "{d1_lines:?}");
    assert!(of("d2").iter().all(|l| l.ends_with(" v2")), "{all:#?}");
    assert_eq!(of("d2").len(), 7, "{all:#?}");
    let f1_lines = of("f1");
    assert!(f1_lines.iter().all(|l| !l.starts_with("D ")), "{f1_lines:?}");
    assert!(f1_lines.iter().any(|l| l.starts_with("C ")), "{f1_lines:?}");

    // `jobs` lists all three.
    let jobs = ok(&c.compactd(&["jobs", "--json"]), "jobs");
    assert_eq!(jobs.as_array().unwrap().len(), 3);
}
