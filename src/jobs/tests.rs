//! Unit tests of the jobs layer on the memory store (and fs for the
//! trigger race). Task execution is simulated by writing the tasks'
//! `Status.Done` / `Status.Failed` markers.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use layouts::formats::{self, ExecutorKind, Lease, Member, TaskInfo};
use layouts::jobs::{self as paths, JobState, StepState};
use layouts::{v2, Name, NodeId, TaskId, TaskState};
use store::Store;

use super::instance::{self, JobView};
use super::*;
use crate::tasks;

const DIAMOND: &str = include_str!("../../fixtures/jobs/diamond.json");
const CYCLE: &str = include_str!("../../fixtures/jobs/cycle.json");
const UNKNOWN: &str = include_str!("../../fixtures/jobs/unknown-dep.json");
const REPORT: &str = include_str!("../../fixtures/jobs/report.json");

const T0: u64 = 1_700_000_000_000;

pub(super) fn n(s: &str) -> Name {
    Name::parse(s).unwrap()
}

pub(super) fn me() -> NodeId {
    NodeId::parse("n1").unwrap()
}

pub(super) fn parse(json: &str) -> JobSpec {
    spec::parse("test.json", json.as_bytes()).unwrap()
}

/// A monitor lease with `n1` as the only member, so that `submit` finds a
/// live manager.
pub(super) async fn with_member(store: &Store) {
    let lease = Lease {
        epoch: 1,
        holder: me(),
        holder_incarnation: 1,
        renewal: 1,
        lease_ms: 1500,
        wall_ms: T0,
        members: vec![Member {
            node: me(),
            incarnation: 1,
            session_timeout_ms: 1500,
            commands: vec![],
            addr: None,
            executor: None,
            executors: None,
            slots: None,
            layouts: None,
            draining: false,
        }],
        offline: vec![],
        last_event: 0,
        released: false,
        layout: None,
    };
    store.create(&v2::lease(1), formats::encode(&lease)).await.unwrap();
}

async fn jobs_files(store: &Store) -> Vec<String> {
    store.list_stream(paths::JOBS, true).map_ok(|e| e.path).try_collect().await.unwrap()
}

async fn apply(store: &Store, json: &str, wall: u64) -> Applied {
    define::apply(store, &parse(json), &me(), "test", wall).await.unwrap()
}

async fn view(store: &Store, job: &str, trigger: &str) -> JobView {
    instance::view(store, &n(job), &n(trigger), false).await.unwrap()
}

fn step<'a>(v: &'a JobView, name: &str) -> &'a instance::StepView {
    v.steps.iter().find(|s| s.name.as_str() == name).unwrap()
}

async fn finish_task(store: &Store, id: &TaskId, state: TaskState) {
    store.create(&v2::task_status(id, state), Vec::new()).await.unwrap();
}

/// Drives until the instance ends; every round, `complete` decides how each
/// running step's task ends (`None`: keep it running).
async fn run_to_end(
    store: &Store,
    job: &str,
    trigger: &str,
    wall: &mut u64,
    mut complete: impl FnMut(&str) -> Option<TaskState>,
) -> JobView {
    for _ in 0..50 {
        *wall += 1000;
        let r = drive(store, &me(), *wall).await.unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let v = view(store, job, trigger).await;
        if v.state != JobState::Running {
            return v;
        }
        for s in &v.steps {
            if let (StepState::Running, Some(id)) = (s.state, s.task) {
                if let Some(state) = complete(s.name.as_str()) {
                    finish_task(store, &id, state).await;
                }
            }
        }
    }
    panic!("{job}/{trigger} did not end");
}

#[tokio::test]
async fn validation_names_the_steps_and_writes_nothing() {
    let store = Store::memory().await;
    let e = define::apply(&store, &parse(CYCLE), &me(), "t", T0).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, JobError::Cycle { .. }), "{msg}");
    assert!(msg.contains(r#""extract" -> "transform" -> "publish" -> "extract""#), "{msg}");

    let e = define::apply(&store, &parse(UNKNOWN), &me(), "t", T0).await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(r#"step "publish" depends on unknown step "transform""#), "{msg}");

    let dup = r#"{"jobName":"dup","steps":[
        {"stepName":"a","kind":"command","command":"true"},
        {"stepName":"b","kind":"command","command":"true"},
        {"stepName":"a","kind":"command","command":"false"}]}"#;
    let msg = define::apply(&store, &parse(dup), &me(), "t", T0).await.unwrap_err().to_string();
    assert!(msg.contains(r#"duplicate step name(s): "a""#), "{msg}");

    let selfdep =
        r#"{"jobName":"s","steps":[{"stepName":"a","kind":"command","command":"true","dependentSteps":["a"]}]}"#;
    let msg = define::apply(&store, &parse(selfdep), &me(), "t", T0).await.unwrap_err().to_string();
    assert!(msg.contains(r#"cycle: "a" -> "a""#), "{msg}");

    for (bad, want) in [
        (r#"{"jobName":"x","steps":[{"stepName":"c","kind":"compact","db":"d"}]}"#, "needs `db`, `schema` and `table`"),
        (r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command"}]}"#, "needs a `commandName`"),
        (r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command","command":"x","commandName":"x"}]}"#, "not both"),
        (r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command","command":" "}]}"#, "is empty"),
        (
            r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command","command":"x","sharding":0}]}"#,
            "sharding must be at least 1",
        ),
        (
            r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command","command":"x","params":{"a-b":"1"}}]}"#,
            "parameter name",
        ),
        (r#"{"jobName":"x","steps":[]}"#, "at least one step"),
        (
            r#"{"jobName":"x","steps":[{"stepName":"c","kind":"command","command":"x","sharding":100000000}]}"#,
            "100000000 shards is over the limit of 100000",
        ),
        (
            r#"{"jobName":"x","steps":[{"stepName":"c","kind":"compact","db":"d","schema":"s","table":"t","partitions":["_compactd"]}]}"#,
            "\"_compactd\" is reserved",
        ),
    ] {
        let msg = define::apply(&store, &parse(bad), &me(), "t", T0).await.unwrap_err().to_string();
        assert!(msg.contains(want), "{msg}");
    }
    assert!(jobs_files(&store).await.is_empty(), "validation wrote files");

    // Bad input is an error naming the file, never a panic.
    for bad in [
        "",
        "{",
        r#"{"jobName":"../x","steps":[]}"#,
        r#"{"jobName":"a/b","steps":[]}"#,
        r#"{"jobName":"x","steps":[{"stepName":"..","kind":"command","command":"x"}]}"#,
        r#"{"jobName":"x","steps":[{"stepName":"a","kind":"spark"}]}"#,
        r#"{"jobName":"x","steps":[{"stepName":"a","kind":"command","command":"x","dependentStep":"b"}]}"#,
        r#"{"jobName":"x\u0000","steps":[]}"#,
        "[]",
    ] {
        let e = spec::parse("defs/bad.json", bad.as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with("defs/bad.json: "), "{e}");
    }
}

#[tokio::test]
async fn fixtures_are_valid() {
    for (json, first) in [(DIAMOND, "A"), (REPORT, "compact")] {
        let order = spec::validate(&parse(json)).unwrap();
        assert_eq!(order[0].as_str(), first);
    }
    let order = spec::validate(&parse(DIAMOND)).unwrap();
    let names: Vec<&str> = order.iter().map(Name::as_str).collect();
    assert_eq!(names, ["A", "B", "C", "D"]);
}

#[tokio::test]
async fn split_storage_versions_switch_and_show() {
    let store = Store::memory().await;
    let a1 = apply(&store, DIAMOND, T0).await;
    assert_eq!((a1.version, a1.changed, a1.relations_version), (1, true, 1));
    assert_eq!(a1.changed_steps.len(), 4);

    // The split: job, steps, relations, each with main copy and log.
    let files = jobs_files(&store).await;
    let d = "Compaction_V2/Jobs/Definitions/diamond/";
    for f in [
        "Job",
        "JobLog/00000000000000000001",
        "Steps/A",
        "Steps/D",
        "StepLog/B.00000000000000000001",
        "Relations",
        "RelationLog/00000000000000000001",
    ] {
        assert!(files.contains(&format!("{d}{f}")), "{f} missing: {files:#?}");
    }
    let def = define::current(&store, &n("diamond")).await.unwrap().unwrap();
    let rel = define::relations_version(&store, &n("diamond"), 1).await.unwrap();
    // A is a root (pre code 0), D has two predecessors: 1 + 1 + 1 + 2 rows.
    assert_eq!(rel.relations.len(), 5);
    assert!(rel.relations.iter().any(|r| r.pre_code == 0 && r.post_step.as_str() == "A"));
    let codes: std::collections::BTreeSet<u64> = def.steps.iter().map(|s| s.code).collect();
    assert_eq!(codes.len(), 4, "distinct Snowflake codes");
    assert!(!codes.contains(&def.code));

    // Unchanged: nothing new logged.
    let again = apply(&store, DIAMOND, T0 + 1).await;
    assert_eq!((again.version, again.changed), (1, false));

    // Change B's sharding: only B gets a new step version.
    let v2 = DIAMOND.replacen("\"sharding\": 4", "\"sharding\": 8", 1);
    let a2 = apply(&store, &v2, T0 + 2).await;
    assert_eq!((a2.version, a2.changed), (2, true));
    assert_eq!(a2.changed_steps, vec![n("B")]);
    assert_eq!(a2.relations_version, 1, "relations unchanged");
    let cur = define::current(&store, &n("diamond")).await.unwrap().unwrap();
    let b = cur.steps.iter().find(|s| s.name.as_str() == "B").unwrap();
    assert_eq!(b.version, 2);
    assert_eq!(
        b.code,
        def.steps.iter().find(|s| s.name.as_str() == "B").unwrap().code,
        "a step keeps its code across versions"
    );

    // show reassembles one JSON; --version shows the logged one.
    let shown = define::show(&store, &n("diamond"), None).await.unwrap();
    assert_eq!(shown.steps[1].sharding, Some(8));
    assert_eq!(shown.version, Some(2));
    let old = define::show(&store, &n("diamond"), Some(1)).await.unwrap();
    assert_eq!(old.steps[1].sharding, Some(4));
    assert_eq!(old.steps[3].dependent_steps, vec![n("B"), n("C")]);
    // What show prints can be applied again as is.
    let text = serde_json::to_string_pretty(&old).unwrap();
    assert_eq!(spec::parse("shown", text.as_bytes()).unwrap(), old);

    // Dropping a step and a dependency: new relations, stale main removed.
    let v3 = r#"{"jobName":"diamond","steps":[
        {"stepName":"A","kind":"command","command":"true"},
        {"stepName":"C","kind":"command","command":"true","dependentSteps":["A"]}]}"#;
    let a3 = apply(&store, v3, T0 + 3).await;
    assert_eq!((a3.version, a3.relations_version), (3, 2));
    assert!(store.read(&paths::step_main(&n("diamond"), &n("B"))).await.unwrap().is_none());

    // versions: all logged, the current one marked.
    let rows = define::versions(&store, &n("diamond")).await.unwrap();
    let vs: Vec<(u64, bool)> = rows.iter().map(|r| (r.version, r.current)).collect();
    assert_eq!(vs, vec![(1, false), (2, false), (3, true)]);

    // switch: the logged version copied over the main copies.
    let sw = define::switch(&store, &n("diamond"), 1).await.unwrap();
    assert_eq!(sw.version, 1);
    let shown = define::show(&store, &n("diamond"), None).await.unwrap();
    assert_eq!(shown, old);
    assert!(store.read(&paths::step_main(&n("diamond"), &n("B"))).await.unwrap().is_some());
    let vs: Vec<(u64, bool)> =
        define::versions(&store, &n("diamond")).await.unwrap().iter().map(|r| (r.version, r.current)).collect();
    assert_eq!(vs, vec![(1, true), (2, false), (3, false)]);
    assert!(matches!(
        define::switch(&store, &n("diamond"), 9).await,
        Err(JobError::VersionNotFound { version: 9, .. })
    ));
    // A later apply takes the next free number, never a logged one.
    let a4 = apply(&store, &v2, T0 + 4).await;
    assert_eq!(a4.version, 4);
}

#[tokio::test]
async fn delete_keeps_the_log() {
    let store = Store::memory().await;
    apply(&store, DIAMOND, T0).await;
    let before = jobs_files(&store).await;
    assert_eq!(define::delete(&store, &n("diamond")).await.unwrap(), 1);
    let after = jobs_files(&store).await;
    let logs: Vec<&String> = before.iter().filter(|p| p.contains("Log/")).collect();
    assert_eq!(logs.len(), 1 + 4 + 1);
    for l in &logs {
        assert!(after.contains(l), "{l} was removed");
    }
    assert!(after.iter().all(|p| p.contains("Log/")), "{after:#?}");
    let e = define::show(&store, &n("diamond"), None).await.unwrap_err();
    assert!(matches!(e, JobError::Deleted { .. }), "{e}");
    assert!(e.to_string().contains("define switch"), "{e}");
    assert_eq!(define::versions(&store, &n("diamond")).await.unwrap().len(), 1);
    let e = trigger(&store, &n("diamond"), &n("t"), BTreeMap::new(), "t", T0).await.unwrap_err();
    assert!(matches!(e, JobError::Deleted { .. }), "{e}");
    // The log still has it: show --version and switch bring it back.
    define::show(&store, &n("diamond"), Some(1)).await.unwrap();
    define::switch(&store, &n("diamond"), 1).await.unwrap();
    assert_eq!(jobs_files(&store).await, before);
    let e = define::show(&store, &n("nope"), None).await.unwrap_err();
    assert!(matches!(e, JobError::NotFound { .. }), "{e}");
}

#[tokio::test]
async fn diamond_runs_in_dag_order() {
    let store = Store::memory().await;
    with_member(&store).await;
    apply(&store, DIAMOND, T0).await;
    let params = instance::parse_params(&["out=/tmp/x".into(), "day=2024-01-01".into()]).unwrap();
    let t = trigger(&store, &n("diamond"), &n("20240101"), params, "t", T0).await.unwrap();
    assert!(t.created);
    let v = view(&store, "diamond", "20240101").await;
    assert!(v.steps.iter().all(|s| s.state == StepState::Waiting));

    // Finish the steps one round after they are seen running, C slowest.
    let mut wall = T0;
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let v = run_to_end(&store, "diamond", "20240101", &mut wall, |s| {
        let c = seen.entry(s.to_string()).or_default();
        *c += 1;
        let need = if s == "C" { 3 } else { 1 };
        (*c >= need).then_some(TaskState::Done)
    })
    .await;
    assert_eq!(v.state, JobState::Succeeded);
    for s in &v.steps {
        assert_eq!(s.state, StepState::Succeeded, "{}", s.name);
        let started = s.started_wall_ms.unwrap();
        assert!(s.finished_wall_ms.unwrap() > started);
        for d in &s.dependent_steps {
            let dep = step(&v, d.as_str());
            assert!(started >= dep.finished_wall_ms.unwrap(), "{} started at {started} before {} finished", s.name, d);
        }
    }
    // B and C ran in parallel; D waited for the slower C.
    assert_eq!(step(&v, "B").started_wall_ms, step(&v, "C").started_wall_ms);
    assert!(step(&v, "D").started_wall_ms >= step(&v, "C").finished_wall_ms);

    // Each step ran as one main task with the right shape and parameters.
    let b = tasks::read_info(&store, &step(&v, "B").task.unwrap()).await.unwrap();
    assert_eq!(b.run.shards, Some(4));
    assert_eq!((b.db_name.as_str(), b.schema_name.as_str(), b.table_name.as_str()), ("diamond", "jobs", "B"));
    let exec = b.run.executor.unwrap();
    assert_eq!(exec.kind, ExecutorKind::Command);
    assert!(exec.command.unwrap().contains("{param.out}"));
    let p = &b.run.params;
    assert_eq!(p["out"], "/tmp/x", "request params override the definition's");
    assert_eq!(p["day"], "2024-01-01");
    assert_eq!(p["trigger"], "20240101");
    assert_eq!(p["step"], "B");
    assert_eq!(p[MARKER_PARAM], "diamond/20240101/B");
    let a = tasks::read_info(&store, &step(&v, "A").task.unwrap()).await.unwrap();
    assert_eq!(a.run.shards, Some(1));
    // Exactly four tasks: no step was submitted twice.
    assert_eq!(tasks::list_ids(&store).await.unwrap().len(), 4);
    // A finished job is not driven again.
    let r = drive(&store, &me(), wall + 1000).await.unwrap();
    assert_eq!(r.instances, 0);
    // The job's view lists it.
    let all = instance::views(&store, None).await.unwrap();
    assert_eq!(all.len(), 1);
}

#[tokio::test]
async fn compact_steps_submit_their_table() {
    let store = Store::memory().await;
    with_member(&store).await;
    apply(&store, REPORT, T0).await;
    trigger(&store, &n("events-report"), &n("d1"), BTreeMap::new(), "t", T0).await.unwrap();
    let r = drive(&store, &me(), T0 + 1).await.unwrap();
    assert_eq!(r.submitted.len(), 1, "{r:?}");
    let v = view(&store, "events-report", "d1").await;
    let info = tasks::read_info(&store, &step(&v, "compact").task.unwrap()).await.unwrap();
    assert_eq!(
        (info.db_name.as_str(), info.schema_name.as_str(), info.table_name.as_str()),
        ("db", "public", "events")
    );
    assert!(info.run.partitions.is_empty() && info.run.shards.is_none());
    assert!(info.run.executor.is_none(), "compact uses the nodes' executor");
}

#[tokio::test]
async fn a_failed_step_fails_the_job_and_skips_its_dependents() {
    let store = Store::memory().await;
    with_member(&store).await;
    apply(&store, DIAMOND, T0).await;
    let mut wall = T0;
    for key in ["marker", "counted"] {
        trigger(&store, &n("diamond"), &n(key), BTreeMap::new(), "t", wall).await.unwrap();
    }
    let v = run_to_end(&store, "diamond", "marker", &mut wall, |s| {
        Some(if s == "B" { TaskState::Failed } else { TaskState::Done })
    })
    .await;
    let states: Vec<(&str, StepState)> = v.steps.iter().map(|s| (s.name.as_str(), s.state)).collect();
    assert_eq!(
        states,
        vec![
            ("A", StepState::Succeeded),
            ("B", StepState::Failed),
            ("C", StepState::Succeeded),
            ("D", StepState::Skipped)
        ]
    );
    assert_eq!(v.state, JobState::Failed);
    assert!(step(&v, "D").task.is_none(), "a skipped step has no task");
    assert!(step(&v, "D").reason.as_ref().unwrap().contains("\"B\" failed"));
    let end: layouts::jobs::JobEnd =
        define::read_json(&store, &paths::instance_end(&n("diamond"), &n("marker"))).await.unwrap().unwrap();
    assert_eq!(end.failed_steps, vec![n("B")]);

    // A task that is Done with failed subtasks fails its step too.
    let mut marked = false;
    let v = run_to_end(&store, "diamond", "counted", &mut wall, |_| {
        marked = true;
        Some(TaskState::Done)
    })
    .await;
    assert!(marked);
    assert_eq!(v.state, JobState::Succeeded);

    trigger(&store, &n("diamond"), &n("counted2"), BTreeMap::new(), "t", wall).await.unwrap();
    wall += 1000;
    drive(&store, &me(), wall).await.unwrap();
    let v = view(&store, "diamond", "counted2").await;
    let a = step(&v, "A").task.unwrap();
    let mut info: TaskInfo = tasks::read_info(&store, &a).await.unwrap();
    info.result.failed_count = 1;
    info.result.success_count = 0;
    store.put(&v2::task_info(&a), formats::encode(&info)).await.unwrap();
    finish_task(&store, &a, TaskState::Done).await;
    wall += 1000;
    drive(&store, &me(), wall).await.unwrap();
    let v = view(&store, "diamond", "counted2").await;
    assert_eq!(v.state, JobState::Failed);
    assert_eq!(step(&v, "A").state, StepState::Failed);
    assert!(step(&v, "A").reason.as_ref().unwrap().contains("1 subtask(s) failed"));
    assert!(v.steps[1..].iter().all(|s| s.state == StepState::Skipped));
}

#[tokio::test]
async fn a_running_job_keeps_the_versions_it_started_with() {
    let store = Store::memory().await;
    with_member(&store).await;
    apply(&store, DIAMOND, T0).await;
    let mut wall = T0;
    trigger(&store, &n("diamond"), &n("old"), BTreeMap::new(), "t", wall).await.unwrap();
    wall += 1000;
    drive(&store, &me(), wall).await.unwrap(); // A of "old" is running

    // The definition changes while "old" runs: D's command and shape.
    let v2 = r#"{"jobName":"diamond","steps":[
        {"stepName":"A","kind":"command","command":"echo v2-A"},
        {"stepName":"D","kind":"command","command":"echo v2-D","sharding":2,"dependentSteps":["A"]}]}"#;
    assert_eq!(apply(&store, v2, wall).await.version, 2);
    trigger(&store, &n("diamond"), &n("new"), BTreeMap::new(), "t", wall).await.unwrap();
    // And is deleted outright: both instances still run to the end.
    define::delete(&store, &n("diamond")).await.unwrap();

    let old = run_to_end(&store, "diamond", "old", &mut wall, |_| Some(TaskState::Done)).await;
    let new = run_to_end(&store, "diamond", "new", &mut wall, |_| Some(TaskState::Done)).await;
    assert_eq!((old.state, new.state), (JobState::Succeeded, JobState::Succeeded));
    assert_eq!((old.job_version, new.job_version), (1, 2));
    assert_eq!(old.steps.len(), 4);
    assert_eq!(new.steps.len(), 2);
    let cmd = |v: &JobView, s: &str| {
        let id = step(v, s).task.unwrap();
        let store = store.clone();
        async move {
            let i = tasks::read_info(&store, &id).await.unwrap();
            (i.run.executor.unwrap().command.unwrap(), i.run.shards)
        }
    };
    let (c, shards) = cmd(&old, "D").await;
    assert!(c.contains("{param.out}"), "{c}");
    assert_eq!(shards, Some(1));
    assert_eq!(cmd(&new, "D").await, ("echo v2-D".into(), Some(2)));
    assert_eq!(cmd(&new, "A").await.0, "echo v2-A");

    // switch brings back version 1 for new instances.
    define::switch(&store, &n("diamond"), 1).await.unwrap();
    let t = trigger(&store, &n("diamond"), &n("again"), BTreeMap::new(), "t", wall).await.unwrap();
    assert_eq!(t.instance.job_version, 1);
    assert_eq!(t.instance.steps.len(), 4);
}

async fn trigger_race(stores: Vec<Store>) {
    let first = stores[0].clone();
    apply(&first, DIAMOND, T0).await;
    let handles: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            tokio::spawn(async move {
                let params = BTreeMap::from([("who".to_string(), i.to_string())]);
                trigger(&s, &n("diamond"), &n("2024-01-01"), params, "t", T0 + i as u64).await.unwrap()
            })
        })
        .collect();
    let mut results = vec![];
    for h in handles {
        results.push(h.await.unwrap());
    }
    assert_eq!(results.iter().filter(|r| r.created).count(), 1);
    let winner = results.iter().find(|r| r.created).unwrap().instance.clone();
    for r in &results {
        assert_eq!(r.instance, winner, "every request reports the one instance");
    }
    let all = instance::list_instances(&first).await.unwrap();
    assert_eq!(all.len(), 1);
    // A later request reports it too.
    let again = trigger(&first, &n("diamond"), &n("2024-01-01"), BTreeMap::new(), "t", T0).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.instance, winner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_triggers_create_one_job_on_memory() {
    let store = Store::memory().await;
    trigger_race(vec![store; 10]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_triggers_create_one_job_on_fs() {
    let dir = tempfile::tempdir().unwrap();
    let uri = store::RootUri::Fs { root: dir.path().to_path_buf() };
    let mut stores = vec![];
    for _ in 0..10 {
        stores.push(Store::open(&uri).await.unwrap());
    }
    trigger_race(stores).await;
}

#[tokio::test]
async fn trigger_checks_its_input() {
    let store = Store::memory().await;
    apply(&store, DIAMOND, T0).await;
    for bad in ["x", "=1", "a-b=1", "a b=1"] {
        assert!(instance::parse_params(&[bad.into()]).is_err(), "{bad}");
    }
    assert_eq!(instance::parse_params(&["a=b=c".into()]).unwrap()["a"], "b=c");
    let e = trigger(&store, &n("nope"), &n("k"), BTreeMap::new(), "t", T0).await.unwrap_err();
    assert!(matches!(e, JobError::NotFound { .. }), "{e}");
    let e = instance::view(&store, &n("diamond"), &n("k"), false).await.unwrap_err();
    assert!(matches!(e, JobError::NoInstance { .. }), "{e}");
}

#[tokio::test]
async fn an_unrecorded_submission_is_found_not_repeated() {
    let store = Store::memory().await;
    with_member(&store).await;
    apply(&store, DIAMOND, T0).await;
    let inst = trigger(&store, &n("diamond"), &n("k"), BTreeMap::new(), "t", T0).await.unwrap().instance;
    let a = n("A");
    let claim_path = paths::step_file(&inst.job, &inst.trigger, &a, paths::StepFile::Claim);
    let claim = layouts::jobs::StepClaim { by: "n1".into(), wall_ms: T0 + 1000, marker: "diamond/k/A".into() };

    // 1. The driver crashed after submit, before recording the task id.
    store.create(&claim_path, formats::encode(&claim)).await.unwrap();
    let def = define::step_version(&store, &inst.job, &a, 1).await.unwrap();
    let id = tasks::submit(&store, drive::task_spec(&inst, &def), T0 + 1000).await.unwrap();
    let r = drive(&store, &me(), T0 + 2000).await.unwrap();
    assert_eq!(r.submitted, vec![format!("diamond/k/A {id}")]);
    assert_eq!(tasks::list_ids(&store).await.unwrap(), vec![id]);
    let v = view(&store, "diamond", "k").await;
    assert_eq!(step(&v, "A").task, Some(id));
    assert_eq!(step(&v, "A").started_wall_ms, Some(T0 + 1000));

    // 2. Crashed before submit (claim only): its own claim is resubmitted.
    trigger(&store, &n("diamond"), &n("k2"), BTreeMap::new(), "t", T0).await.unwrap();
    let p2 = paths::step_file(&n("diamond"), &n("k2"), &a, paths::StepFile::Claim);
    let mut c2 = claim.clone();
    c2.marker = "diamond/k2/A".into();
    store.create(&p2, formats::encode(&c2)).await.unwrap();
    drive(&store, &me(), T0 + 3000).await.unwrap();
    let v = view(&store, "diamond", "k2").await;
    assert_eq!(step(&v, "A").state, StepState::Running);
    assert_eq!(tasks::list_ids(&store).await.unwrap().len(), 2);

    // 3. Another node's fresh claim is left to it until the grace is over.
    trigger(&store, &n("diamond"), &n("k3"), BTreeMap::new(), "t", T0).await.unwrap();
    let p3 = paths::step_file(&n("diamond"), &n("k3"), &a, paths::StepFile::Claim);
    let mut c3 = claim.clone();
    c3.by = "n2".into();
    c3.marker = "diamond/k3/A".into();
    c3.wall_ms = T0 + 4000;
    store.create(&p3, formats::encode(&c3)).await.unwrap();
    drive(&store, &me(), T0 + 5000).await.unwrap();
    assert_eq!(step(&view(&store, "diamond", "k3").await, "A").state, StepState::Submitting);
    drive(&store, &me(), T0 + 4000 + drive::CLAIM_GRACE_MS).await.unwrap();
    assert_eq!(step(&view(&store, "diamond", "k3").await, "A").state, StepState::Running);
    assert_eq!(tasks::list_ids(&store).await.unwrap().len(), 3);
}

#[tokio::test]
async fn no_live_node_leaves_the_claim_for_the_next_round() {
    let store = Store::memory().await;
    apply(&store, DIAMOND, T0).await;
    trigger(&store, &n("diamond"), &n("k"), BTreeMap::new(), "t", T0).await.unwrap();
    let r = drive(&store, &me(), T0 + 1000).await.unwrap();
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert!(r.errors[0].contains("no live node"), "{r:?}");
    assert_eq!(step(&view(&store, "diamond", "k").await, "A").state, StepState::Submitting);
    with_member(&store).await;
    let r = drive(&store, &me(), T0 + 2000).await.unwrap();
    assert_eq!(r.submitted.len(), 1, "{r:?}");
    assert_eq!(tasks::list_ids(&store).await.unwrap().len(), 1);
}
