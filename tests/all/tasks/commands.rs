//! Who may run what, with real processes: nodes run only the command names
//! their own configuration defines; a template carried by a task or job step
//! runs only on nodes started with --allow-inline-commands; params reach a
//! command literally; command executors drop to --run-as; a root daemon that
//! would run commands as root refuses to start.

use crate::common;

use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster, BIN};
use serde_json::Value;

fn ended(c: &Cluster, id: &str) -> Value {
    c.wait_status(id, Duration::from_secs(30), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    })
}

fn one_node(c: &mut Cluster, extra: &[&str]) {
    let mut args = vec!["--retries", "1", "--sweep", "1s"];
    args.extend_from_slice(extra);
    c.start_with("n1", &args);
    c.wait_nodes(Duration::from_secs(20), "n1 monitor and member", |r| {
        monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
    });
}

#[test]
fn an_inline_template_runs_only_on_nodes_that_opt_in() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let marker = c.fs_path().parent().unwrap().join("inline-ran");
    let cmd = format!("touch {}", marker.display());
    one_node(&mut c, &["--executor", "command", "--command", "true"]);
    let s = ended(&c, &c.submit(&["--shards", "1", "--command", &cmd]));
    assert_eq!(s["state"], "Failed", "{s:#}");
    let err = s["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(err.contains("--allow-inline-commands") && err.contains("n1"), "{s:#}");
    assert!(!marker.exists(), "the inline command ran on a node without the opt-in");
    c.terminate("n1");

    one_node(&mut c, &["--executor", "command", "--command", "true", "--allow-inline-commands"]);
    let s = ended(&c, &c.submit(&["--shards", "1", "--command", &cmd]));
    assert_eq!(s["state"], "Done", "{s:#}");
    assert!(marker.exists(), "the inline command did not run with the opt-in");
}

#[test]
fn a_named_command_gets_its_params_literally_and_an_unknown_name_fails() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let dir = c.fs_path().parent().unwrap().to_path_buf();
    let out = dir.join("param-out");
    let template = format!("echo_param=printf %s {{param.x}} > {}", out.display());
    one_node(&mut c, &["--command", &template]);
    let nasty = "$(touch pwned); rm -rf /nonexistent; 'single' \"double\" `tick`\nsecond line";
    let s = ended(&c, &c.submit(&["--shards", "1", "--command-name", "echo_param", "--param", &format!("x={nasty}")]));
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), nasty, "the param was not passed literally");
    // The executor runs in the daemon's working folder (this test's).
    let cwd = std::env::current_dir().unwrap();
    for d in [&dir, &c.fs_path(), &cwd] {
        assert!(!d.join("pwned").exists(), "a param was executed");
    }
    // A command no live node defines: refused at once, naming what they
    // define; submitted only when insisted on, then its unit fails.
    let out = c.compactd(&[
        "submit",
        "--db",
        "d",
        "--schema",
        "s",
        "--table",
        "t",
        "--shards",
        "1",
        "--command-name",
        "no_such_command",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no live node defines command \"no_such_command\"")
            && err.contains("echo_param")
            && err.contains("--force"),
        "{err}"
    );
    let s = ended(&c, &c.submit(&["--shards", "1", "--command-name", "no_such_command", "--force"]));
    assert_eq!(s["state"], "Failed", "{s:#}");
    let err = s["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(err.contains("no_such_command") && err.contains("n1") && err.contains("echo_param"), "{err}");
}

#[test]
fn define_apply_reports_inline_templates_and_unknown_command_names() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    one_node(&mut c, &["--command", "stats=true"]);
    let def = serde_json::json!({
        "jobName": "nightly",
        "steps": [
            { "stepName": "A", "kind": "command", "commandName": "stats" },
            { "stepName": "B", "kind": "command", "commandName": "compact_orc", "dependentSteps": ["A"] },
            { "stepName": "C", "kind": "command", "command": "true", "dependentSteps": ["A"] }
        ]
    });
    let f = c.fs_path().parent().unwrap().join("nightly.json");
    std::fs::write(&f, def.to_string()).unwrap();
    let out = c.compactd(&["define", "apply", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("step B names command \"compact_orc\", which no live node defines"), "{err}");
    assert!(err.contains("step C carries an inline command template"), "{err}");
    assert!(!err.contains("step A"), "stats is defined on n1: {err}");
}

#[test]
fn command_executors_run_as_the_configured_user_and_root_needs_consent() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    // A world-writable folder the unprivileged user can write its uid into.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let out = dir.path().join("uid");
    let template = format!("whoami=id -u > {}", out.display());
    one_node(&mut c, &["--command", &template, "--run-as", "nobody"]);
    let s = ended(&c, &c.submit(&["--shards", "1", "--command-name", "whoami"]));
    assert_eq!(s["state"], "Done", "{s:#}");
    let nobody = std::process::Command::new("id").args(["-u", "nobody"]).output().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), String::from_utf8_lossy(&nobody.stdout).trim());

    // As root, without --run-as or --allow-root: refused before joining.
    if unsafe { libc::geteuid() } == 0 {
        let o = std::process::Command::new(BIN)
            .args(["--root", &c.root, "run", "--node-id", "n9", "--command", "x=true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--run-as") && err.contains("root"), "{err}");
        // The built-in executors need no consent: they run compactd's own code.
        let mut merge_only = std::process::Command::new(BIN)
            .args(["--root", &c.root, "run", "--node-id", "n8", "--heartbeat", "200ms", "--listen", "127.0.0.1:0"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        c.wait_nodes(Duration::from_secs(20), "the merge-only root daemon n8 to join", |r| {
            alive(r).contains(&"n8".to_string())
        });
        assert!(merge_only.try_wait().unwrap().is_none(), "a merge-only root daemon must start");
        merge_only.kill().unwrap();
        merge_only.wait().unwrap();
    }
}
