//! The `iceberg` executor on tables of a REST catalog (Iceberg's own
//! `RESTCatalogServer` from its test fixtures, over SQLite; its warehouse
//! the data backend's `db/`), written by pyiceberg through the catalog and
//! judged by Java Iceberg 1.12's `RESTCatalog` and pyiceberg's: three
//! `compactd` processes commit one `replace` through the catalog's commit
//! endpoint; both read the same rows at the new snapshot and every older
//! one, its removed and added files are the inputs and outputs, metrics
//! equal Java's `ParquetUtil.fileMetrics`, predicate scans equal filters.
//! A commit the catalog refuses with 409 (another writer committed first)
//! is rebuilt on the new head; one whose answer is lost (502 after the
//! catalog applied it) is found by reloading, and nothing is deleted; so is
//! one answered 409 because it was sent again after the catalog applied
//! it; one that never reached the catalog leaves every file for the rerun.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster};
use common::iceberg::{pyiceberg, Java};
use common::iceberg_rest::{Fault, Proxy, RestServer};
use serde_json::{json, Value};

fn start(c: &mut Cluster, nodes: &[&str]) {
    let data = format!("fs://{}", RestServer::shared().data().display());
    for n in nodes {
        c.start_with(n, &["--data", &data, "--target-size", "8MiB", "--executor", "iceberg"]);
    }
    c.wait_nodes(Duration::from_secs(30), "nodes alive and a monitor", |r| {
        alive(r).len() == nodes.len() && monitor_of(r).is_some()
    });
}

/// Submits `db.<ns>.t` through the catalog at `uri`; its `status --json`.
fn compact(c: &Cluster, ns: &str, uri: &str) -> Value {
    let param = format!("iceberg.rest-uri={uri}");
    let args = ["submit", "--db", "db", "--schema", ns, "--table", "t", "--executor", "iceberg", "--param", &param];
    let out = c.compactd(&[&args[..], &["--wait", "--json"]].concat());
    let id: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("submit: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs_text()));
    c.status(id["id"].as_str().unwrap())
}

fn java_cmd(cmd: &str, ns: &str, extra: Value) -> Value {
    let mut c = json!({"cmd": cmd, "rest": RestServer::shared().uri, "table": format!("{ns}.t")});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    Java::shared().run(&c)
}

fn live(ns: &str) -> BTreeSet<String> {
    let s = java_cmd("snapshots", ns, json!({}));
    s["live"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect()
}

fn operations(ns: &str) -> Vec<String> {
    let s = java_cmd("snapshots", ns, json!({}));
    s["snapshots"].as_array().unwrap().iter().map(|s| s["operation"].as_str().unwrap().to_string()).collect()
}

#[test]
fn three_nodes_compact_a_pyiceberg_table_through_the_rest_catalog_and_java_and_pyiceberg_agree() {
    let _turn = crate::common::turns::ICEBERG_REST.turn();
    let server = RestServer::shared();
    let ns = "s1";
    pyiceberg(&["rest_make", &server.uri, &format!("{ns}.t"), "6", "60", "3"]);
    let snaps = java_cmd("snapshots", ns, json!({}));
    let old = snaps["current"].as_i64().unwrap();
    let inputs = live(ns);
    assert_eq!(inputs.len(), 18, "{inputs:?}");
    let mut reads = vec![];
    for s in snaps["snapshots"].as_array().unwrap() {
        let id = s["id"].as_i64().unwrap();
        reads.push((id, java_cmd("read", ns, json!({"snapshot": id}))));
    }
    let mut c = Cluster::fs();
    start(&mut c, &["n1", "n2", "n3"]);
    // No sole-writer statement: the catalog orders the writers' commits.
    let status = compact(&c, ns, &server.uri);
    assert_eq!(status["state"], "Done", "{status:#}\n{}", server.log());
    let versions = status["table_versions"].as_array().expect("a commit");
    assert_eq!(versions.len(), 1, "one commit for the task: {status:#}");
    let new = java_cmd("snapshots", ns, json!({}));
    let current = new["current"].as_i64().unwrap();
    assert_eq!(versions[0]["stats"]["snapshot_after"].as_u64(), Some(current as u64), "{status:#}");
    let s = new["snapshots"].as_array().unwrap().iter().find(|s| s["id"].as_i64() == Some(current)).unwrap().clone();
    assert_eq!((s["operation"].as_str(), s["parent"].as_i64()), (Some("replace"), Some(old)), "{s}");
    // The same rows at the new snapshot and every older one.
    let now = java_cmd("read", ns, json!({}));
    let at_old = &reads.iter().find(|(id, _)| *id == old).unwrap().1;
    assert_eq!((&now["count"], &now["digest"]), (&at_old["count"], &at_old["digest"]));
    assert_eq!(now["files"], 3, "{now}");
    for (id, r) in &reads {
        let again = java_cmd("read", ns, json!({"snapshot": id}));
        assert_eq!((&again["count"], &again["digest"]), (&r["count"], &r["digest"]), "snapshot {id}");
    }
    // Removed: exactly the inputs; added: compactd's outputs.
    let diff = java_cmd("diff", ns, json!({"snapshot": current}));
    let removed: BTreeSet<String> =
        diff["removed"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(removed, inputs);
    for f in diff["added"].as_array().unwrap() {
        assert!(f["path"].as_str().unwrap().contains("/compactd-"), "{f}");
    }
    let metrics = java_cmd("metrics", ns, json!({}));
    for f in metrics["files"].as_array().unwrap() {
        assert_eq!(f["stored"], f["java"], "metrics of {}", f["path"]);
        assert_eq!(f["length"], f["size"], "{f}");
    }
    let p = java_cmd("predicates", ns, json!({}));
    assert_eq!(p["mismatches"], 0, "{p:#}");
    // pyiceberg, through the catalog: the same rows at every snapshot.
    let py = pyiceberg(&["rest_read", &server.uri, &format!("{ns}.t"), "--key", "id"]);
    assert_eq!(py["current"].as_i64(), Some(current), "{py}");
    for (id, r) in &reads {
        assert_eq!(py["snapshots"][id.to_string()]["rows"], r["count"], "snapshot {id}");
    }
    assert_eq!(py["snapshots"][current.to_string()]["digest"], py["snapshots"][old.to_string()]["digest"]);
}

#[test]
fn a_commit_refused_with_409_is_rebuilt_and_one_whose_answer_is_lost_is_found_and_deletes_nothing() {
    let _turn = crate::common::turns::ICEBERG_REST.turn();
    let server = RestServer::shared();
    let ns = "s2";
    let table = format!("{ns}.t");
    pyiceberg(&["rest_make", &server.uri, &table, "4", "40", "2"]);
    let proxy = Proxy::start(&server.uri);
    let mut c = Cluster::fs();
    start(&mut c, &["n1"]);

    // 409: pyiceberg appends between compactd's load and its commit.
    let (uri, t) = (server.uri.clone(), table.clone());
    proxy.arm(Fault::Before(Box::new(move || {
        pyiceberg(&["rest_append", &uri, &t, "100", "40", "2"]);
    })));
    let status = compact(&c, ns, &proxy.uri);
    assert_eq!(status["state"], "Done", "{status:#}\n{}", server.log());
    assert_eq!(*proxy.commits.lock().unwrap(), [409, 200], "the catalog refused the first commit, took the second");
    assert_eq!(status["table_versions"][0]["stats"]["commit_retries"], 1, "{status:#}");
    assert_eq!(operations(ns), ["append", "append", "append", "append", "append", "replace"]);
    let py = pyiceberg(&["rest_read", &server.uri, &table, "--key", "id"]);
    let keys = &py["snapshots"][py["current"].as_i64().unwrap().to_string()]["keys"];
    let mut want: Vec<String> =
        (0..4).chain([100]).flat_map(|b| (0..40).map(move |i| (b * 1000 + i).to_string())).collect();
    want.sort();
    assert_eq!(keys, &json!(want), "rows lost or doubled");
    let after_409 = java_cmd("read", ns, json!({}));

    // The answer lost after the catalog applied the commit: reloaded, found,
    // reported; every file of the snapshot is there.
    for b in [200, 201] {
        pyiceberg(&["rest_append", &server.uri, &table, &b.to_string(), "40", "2"]);
    }
    let before = java_cmd("read", ns, json!({}));
    proxy.commits.lock().unwrap().clear();
    proxy.arm(Fault::LoseAnswer);
    let status = compact(&c, ns, &proxy.uri);
    assert_eq!(status["state"], "Done", "{status:#}\n{}", c.logs_text());
    assert_eq!(*proxy.commits.lock().unwrap(), [200], "one commit, applied, its answer lost");
    let current = java_cmd("snapshots", ns, json!({}))["current"].as_i64().unwrap();
    assert_eq!(status["table_versions"][0]["stats"]["snapshot_after"].as_u64(), Some(current as u64), "{status:#}");
    assert_eq!(operations(ns).last().map(String::as_str), Some("replace"));
    let now = java_cmd("read", ns, json!({}));
    assert_eq!((&now["count"], &now["digest"]), (&before["count"], &before["digest"]));
    assert_ne!(before["digest"], after_409["digest"]);
    assert!(live(ns).iter().all(|f| std::path::Path::new(f.trim_start_matches("file:")).exists()));

    // A commit that never reached the catalog: the unit fails saying the
    // outcome is unknown, deletes nothing, and the rerun commits.
    for b in [300, 301] {
        pyiceberg(&["rest_append", &server.uri, &table, &b.to_string(), "40", "2"]);
    }
    let before = java_cmd("read", ns, json!({}));
    let ops_before = operations(ns).len();
    proxy.commits.lock().unwrap().clear();
    proxy.arm(Fault::Drop);
    let status = compact(&c, ns, &proxy.uri);
    assert_eq!(status["state"], "Done", "{status:#}\n{}", c.logs_text());
    assert_eq!(*proxy.commits.lock().unwrap(), [200], "the dropped commit, then the rerun's");
    assert!(c.logs_text().contains("outcome is unknown"), "{}", c.logs_text());
    assert_eq!(operations(ns).len(), ops_before + 1, "one replace");
    let now = java_cmd("read", ns, json!({}));
    assert_eq!((&now["count"], &now["digest"]), (&before["count"], &before["digest"]));
}

/// The local path of a `file:` URI.
fn local(uri: &str) -> std::path::PathBuf {
    uri.strip_prefix("file://").or_else(|| uri.strip_prefix("file:")).unwrap_or(uri).into()
}

#[test]
fn a_commit_refused_with_409_when_sent_again_after_the_catalog_applied_it_is_found_and_deletes_nothing() {
    let _turn = crate::common::turns::ICEBERG_REST.turn();
    let server = RestServer::shared();
    let ns = "twice";
    let table = format!("{ns}.t");
    pyiceberg(&["rest_make", &server.uri, &table, "4", "40", "2"]);
    let old = java_cmd("snapshots", ns, json!({}))["current"].as_i64().unwrap();
    let before = java_cmd("read", ns, json!({}));
    let py_before = pyiceberg(&["rest_read", &server.uri, &table, "--key", "id"]);
    let proxy = Proxy::start(&server.uri);
    let mut c = Cluster::fs();
    start(&mut c, &["n1"]);

    // The proxy sends the commit again, as a retrying proxy or client does:
    // the catalog applies the first and refuses the second, whose 409 is
    // all compactd sees.
    proxy.arm(Fault::Twice);
    let status = compact(&c, ns, &proxy.uri);
    assert_eq!(status["state"], "Done", "{status:#}\n{}", c.logs_text());
    assert_eq!(*proxy.commits.lock().unwrap(), [200, 409], "applied, then refused when sent again");
    // Every file the current snapshot names is there: its manifest list
    // (read from the catalog's metadata, not through a judge that could
    // hide it), then its manifests and data files through Java's scan.
    let addr = server.uri.trim_start_matches("http://");
    let (code, body) = common::http::get(addr, &format!("/v1/namespaces/{ns}/tables/t")).unwrap();
    assert_eq!(code, 200, "{body}");
    let meta = &serde_json::from_str::<Value>(&body).unwrap()["metadata"];
    let current = meta["current-snapshot-id"].as_i64().unwrap();
    let snap = meta["snapshots"].as_array().unwrap().iter().find(|s| s["snapshot-id"].as_i64() == Some(current));
    let list = local(snap.unwrap()["manifest-list"].as_str().unwrap());
    assert!(list.exists(), "the current snapshot's manifest list {} was deleted\n{}", list.display(), c.logs_text());
    let snaps = java_cmd("snapshots", ns, json!({}));
    assert_eq!(snaps["current"].as_i64(), Some(current));
    assert!(live(ns).iter().all(|f| local(f).exists()));
    // Reported as this try's commit, not a retry nor another attempt's.
    let v = &status["table_versions"][0]["stats"];
    assert_eq!(v["snapshot_after"].as_u64(), Some(current as u64), "{status:#}");
    assert_eq!(v["commit_retries"], 0, "{status:#}");
    let s = snaps["snapshots"].as_array().unwrap().iter().find(|s| s["id"].as_i64() == Some(current)).unwrap().clone();
    assert_eq!((s["operation"].as_str(), s["parent"].as_i64()), (Some("replace"), Some(old)), "{s}");
    assert_eq!(operations(ns), ["append", "append", "append", "append", "replace"]);
    // The same rows, for Java and pyiceberg.
    let now = java_cmd("read", ns, json!({}));
    assert_eq!((&now["count"], &now["digest"]), (&before["count"], &before["digest"]));
    let py = pyiceberg(&["rest_read", &server.uri, &table, "--key", "id"]);
    assert_eq!(py["current"].as_i64(), Some(current), "{py}");
    let at = |p: &Value, id: i64| p["snapshots"][id.to_string()].clone();
    assert_eq!(at(&py, current)["keys"], at(&py_before, old)["keys"], "rows lost or doubled");
    assert_eq!(at(&py, current)["digest"], at(&py_before, old)["digest"]);
}

/// The compactd outputs (`compactd-*.parquet`) under `dir`.
fn outputs_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(outputs_in(&p));
        } else if p.file_name().unwrap().to_string_lossy().starts_with("compactd-") && p.extension().is_some() {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn check_data_and_vacuum_orphans_cover_a_rest_table_through_the_catalog_its_tasks_named() {
    let _turn = crate::common::turns::ICEBERG_REST.turn();
    let server = RestServer::shared();
    let ns = "chk";
    pyiceberg(&["rest_make", &server.uri, &format!("{ns}.t"), "4", "40", "2"]);
    let old = java_cmd("read", ns, json!({}));
    let table = server.data().join(format!("db/{ns}/t"));
    let data_uri = format!("fs://{}", server.data().display());
    let only = format!("db/{ns}/t");
    let mut c = Cluster::fs();
    // The commit waits before it commits: the task's outputs lie there
    // uncommitted while it runs.
    c.env = vec![("COMPACTD_TEST_MERGE_DELAY_MS".into(), "4000".into())];
    start(&mut c, &["n1"]);
    let param = format!("iceberg.rest-uri={}", server.uri);
    let args = ["submit", "--db", "db", "--schema", ns, "--table", "t", "--executor", "iceberg", "--param", &param];
    let out = c.compactd(&[&args[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let start_wait = std::time::Instant::now();
    let running_outputs = loop {
        let o = outputs_in(&table);
        if !o.is_empty() {
            break o;
        }
        assert!(start_wait.elapsed() < Duration::from_secs(60), "no output appeared\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(20));
    };
    // The in-flight guard: outputs of a running task are neither named nor
    // removed; and the REST table is checked (its versions are the
    // catalog's `NNNNN-<uuid>.metadata.json`, which a file-system read
    // refuses as another catalog's).
    let check = c.compactd(&["check", "--data", &data_uri, "--table", &only]);
    assert!(check.status.success(), "{}", text(&check));
    let vac = c.compactd(&["vacuum-orphans", "--data", &data_uri, "--table", &only, "--older-than", "1ms"]);
    assert!(vac.status.success(), "{}", text(&vac));
    assert!(text(&vac).contains(&format!("task {id} is Running: its unit may still commit it")), "{}", text(&vac));
    assert!(running_outputs.iter().all(|p| p.exists()), "removed a running task's output: {}", text(&vac));
    let st = c.wait_status(&id, Duration::from_secs(120), "the task to end", |s| {
        s["state"].as_str().is_some_and(|x| x == "Done" || x == "Failed")
    });
    assert_eq!(st["state"], "Done", "{st:#}\n{}", server.log());
    let check = c.compactd(&["check", "--data", &data_uri, "--table", &only, "--json"]);
    assert!(check.status.success(), "{}", text(&check));
    // An orphan of the finished task (an output its commit never named) is
    // named with the task's fate.
    let live_files = live(ns);
    let one_live = live_files.iter().next().unwrap().trim_start_matches("file:").to_string();
    let orphan = std::path::Path::new(&one_live)
        .parent()
        .unwrap()
        .join(format!("compactd-{id}-r9-u0123456789abcdef-a1-0.parquet"));
    std::fs::copy(&one_live, &orphan).unwrap();
    let check = c.compactd(&["check", "--data", &data_uri, "--table", &only, "--json"]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    let found: Value = serde_json::from_slice(&check.stdout).unwrap();
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:#?}");
    let problem = found[0]["problem"].as_str().unwrap();
    assert!(found[0]["path"].as_str().unwrap().ends_with(orphan.file_name().unwrap().to_str().unwrap()), "{found:#?}");
    assert!(problem.contains("orphan of the iceberg executor") && problem.contains(&format!("task {id} is Done")));
    // A live file of the current snapshot gone: named, readers of it fail.
    let aside = std::path::Path::new(&one_live).with_extension("aside");
    std::fs::rename(&one_live, &aside).unwrap();
    let check = c.compactd(&["check", "--data", &data_uri, "--table", &only]);
    let current = java_cmd("snapshots", ns, json!({}))["current"].as_i64().unwrap();
    assert!(
        text(&check)
            .contains(&format!("Iceberg snapshot {current}, the current one, names live files that do not exist")),
        "{}",
        text(&check)
    );
    std::fs::rename(&aside, &one_live).unwrap();
    // vacuum-orphans removes the orphan, nothing the catalog's snapshots name.
    let vac = c.compactd(&["vacuum-orphans", "--data", &data_uri, "--table", &only, "--older-than", "1ms"]);
    assert!(vac.status.success(), "{}", text(&vac));
    assert!(text(&vac).contains(&format!("removed {only}/")) && !orphan.exists(), "{}", text(&vac));
    assert!(live(ns).iter().all(|f| std::path::Path::new(f.trim_start_matches("file:")).exists()));
    let now = java_cmd("read", ns, json!({}));
    assert_eq!((&now["count"], &now["digest"]), (&old["count"], &old["digest"]));
    let check = c.compactd(&["check", "--data", &data_uri, "--table", &only]);
    assert!(check.status.success(), "{}", text(&check));
}
