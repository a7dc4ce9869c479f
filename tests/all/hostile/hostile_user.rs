//! A careless or hostile user with the binary, one test per limit, with
//! real `compactd` processes on an fs root:
//!
//! - durations of 2^64 ms or more (which used to wrap into the tree's
//!   milliseconds) are refused naming the flag or the key and the maximum,
//!   and the maximum itself is stored exactly;
//! - a policy no reader could read (over the 4 MiB state-file limit) is
//!   refused at `apply` with nothing written, and the policies stay usable;
//! - `/dev/zero` given to `policy apply`, `define apply` or `--config` is
//!   read to the limit and refused (the process stays small);
//! - a target size of 2^64 is refused naming the flag, key and maximum;
//! - params compactd sets itself (`compactd_*`) are refused from `submit`,
//!   `trigger` and job definitions, while the planner's own still work;
//! - a heartbeat name linked to a secret file: nothing of the file is ever
//!   printed or logged;
//! - names holding a newline or a right-to-left override are shown escaped;
//!   a refusal says its reason once.
// Real processes: waits on real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::cluster::{alive, output_within, Cluster, BIN};
use serde_json::Value;

const MAX_FILE: usize = 4 * 1024 * 1024;
const HUGE_SECONDS: &str = "18446744073709552s";

/// `compactd --root <root> <args>` without the test's COMPACTD_* settings.
fn run(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", &c.root]).args(args).env_remove("COMPACTD_DATA").env_remove("COMPACTD_LISTEN");
    output_within(&mut cmd, Duration::from_secs(60))
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts exit `code` and that stderr holds every word.
fn refused(out: &Output, code: i32, words: &[&str], what: &str) {
    let (o, e) = text(out);
    assert_eq!(out.status.code(), Some(code), "{what}: exit {:?}\nstdout: {o}\nstderr: {e}", out.status.code());
    for w in words {
        assert!(e.contains(w), "{what}: the message lacks {w:?}: {e}");
    }
}

/// Every file below `dir` (relative paths).
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out
}

fn started(c: &mut Cluster, extra: &[&str]) {
    c.start_with("n1", extra);
    c.wait_nodes(Duration::from_secs(30), "n1 alive", |r| alive(r) == ["n1"]);
}

#[test]
fn durations_past_the_maximum_are_refused_naming_the_flag_or_key_and_never_wrap() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let out = run(&c, &["run", "--node-id", "w1", "--session-timeout", HUGE_SECONDS]);
    refused(&out, 2, &["--session-timeout", HUGE_SECONDS, "maximum of 3650d"], "run --session-timeout");
    let file = c.fs_path().with_file_name("compactd.toml");
    std::fs::write(&file, format!("session_timeout = \"{HUGE_SECONDS}\"\n")).unwrap();
    let out = run(&c, &["--config", file.to_str().unwrap(), "run", "--node-id", "w1"]);
    refused(&out, 2, &[file.to_str().unwrap(), "key `session_timeout`", "maximum of 3650d"], "the file's key");
    assert!(files_below(&c.fs_path()).iter().all(|f| !f.contains("w1")), "a refused run wrote its heartbeat");

    // The maximum is stored as it is, not modulo 2^64 ms.
    c.timings = vec![];
    started(&mut c, &["--heartbeat", "200ms", "--session-timeout", "3650d", "--lease", "2s", "--command", "ok=true"]);
    let rows = c.nodes();
    assert_eq!(rows[0]["session_timeout_ms"], 3650u64 * 86_400 * 1000, "{rows:#?}");

    let submit = ["submit", "--db", "d", "--schema", "s", "--table", "t", "--command-name", "ok", "--shards", "1"];
    let mut args = submit.to_vec();
    args.extend(["--repeat", "2", "--interval", HUGE_SECONDS]);
    refused(&run(&c, &args), 2, &["--interval", "maximum of 3650d"], "submit --interval");
    let mut args = submit.to_vec();
    args.extend(["--repeat", "2", "--interval", "3650d", "--json"]);
    let out = run(&c, &args);
    assert!(out.status.success(), "{}", text(&out).1);
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let s = c.status(&id);
    assert_eq!(s["repeat"]["repeatInterval"], 3650u64 * 86_400 * 1000, "{s:#}");
    assert_eq!(run(&c, &["stop", &id]).status.code(), Some(0));

    for key in ["min-interval", "max-small-age"] {
        let policy = c.fs_path().with_file_name(format!("{key}.toml"));
        std::fs::write(
            &policy,
            format!("name = \"w\"\ntables = [\"d/s/*\"]\nmin-small-files = 2\n{key} = \"{HUGE_SECONDS}\"\n"),
        )
        .unwrap();
        let out = run(&c, &["policy", "apply", policy.to_str().unwrap()]);
        refused(&out, 1, &[&format!("line 4, key `{key}`"), HUGE_SECONDS, "maximum of 3650d"], key);
    }
    assert!(!c.fs_path().join("Compaction_V2/Policies/w").exists(), "a refused policy was written");
}

#[test]
fn a_policy_no_reader_could_read_is_refused_at_apply_with_nothing_written() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    let dir = c.fs_path().with_file_name("policies");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = |name: &str, n: usize| -> String {
        let tables: Vec<String> = (0..n).map(|i| format!("\"d/s/t{i:07}\"")).collect();
        format!("name = \"{name}\"\ntables = [{}]\nmin-small-files = 2\n", tables.join(","))
    };
    // Over the limit as a file (4.4 MB).
    let big = dir.join("big.toml");
    std::fs::write(&big, policy("big", 300_000)).unwrap();
    assert!(std::fs::metadata(&big).unwrap().len() > 4_400_000);
    let out = run(&c, &["policy", "apply", big.to_str().unwrap()]);
    refused(&out, 1, &[big.to_str().unwrap(), &format!("{MAX_FILE}-byte limit")], "a 4.4 MB policy file");
    // Under it as a file, over it as the definition the tree would hold
    // (pretty JSON takes more room than the file's TOML).
    let wide = dir.join("wide.toml");
    std::fs::write(&wide, policy("wide", 250_000)).unwrap();
    assert!(std::fs::metadata(&wide).unwrap().len() < MAX_FILE as u64);
    let out = run(&c, &["policy", "apply", wide.to_str().unwrap()]);
    refused(&out, 1, &["\"wide\"", "bytes in the tree", &format!("{MAX_FILE}-byte limit")], "an oversize definition");
    let written = files_below(&c.fs_path().join("Compaction_V2"));
    assert!(written.iter().all(|f| !f.contains("big") && !f.contains("wide")), "a refused apply wrote {written:?}");

    // Everything that read the policies goes on working.
    let small = dir.join("small.toml");
    std::fs::write(&small, policy("small", 3)).unwrap();
    let out = run(&c, &["policy", "apply", small.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let data = c.fs_path().with_file_name("data");
    std::fs::create_dir_all(&data).unwrap();
    let data = format!("fs://{}", data.display());
    for args in [
        vec!["policy", "list"],
        vec!["policy", "pause", "small"],
        vec!["tables"],
        vec!["plan", "--dry-run", "--data", &data],
    ] {
        let out = run(&c, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out).1);
    }
}

/// Runs `compactd args` and returns its output with its peak RSS (KiB).
/// A process that reads until memory runs out (what these commands did) is
/// killed after a minute rather than left to the OOM killer.
fn with_peak_rss(c: &Cluster, args: &[&str]) -> (Output, u64) {
    let mut cmd = Command::new(BIN);
    cmd.args(["--root", &c.root]).args(args);
    let m = common::rss::peak_rss(&cmd, Duration::from_secs(60));
    (m.output, m.peak_kib)
}

#[test]
fn dev_zero_given_to_apply_or_as_the_config_is_read_to_the_limit_and_refused() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    for (args, code, limit) in [
        (vec!["policy", "apply", "/dev/zero"], 1, MAX_FILE),
        (vec!["define", "apply", "/dev/zero"], 1, MAX_FILE),
        (vec!["--config", "/dev/zero", "nodes"], 2, 1 << 20),
    ] {
        let t = Instant::now();
        let (out, rss_kib) = with_peak_rss(&c, &args);
        eprintln!("{args:?}: {:?}, peak RSS {rss_kib} KiB", t.elapsed());
        refused(&out, code, &["/dev/zero", &format!("{limit}-byte limit")], &format!("{args:?}"));
        assert!(t.elapsed() < Duration::from_secs(20), "{args:?} took {:?}", t.elapsed());
        assert!(rss_kib < 64 * 1024, "{args:?} grew to {rss_kib} KiB");
    }
}

#[test]
fn a_target_size_of_2_64_is_refused_naming_the_flag_key_and_maximum() {
    let _turn = crate::common::turns::waits();
    let c = Cluster::fs();
    for size in ["18446744073709551616", "18446744073709551615", "17179869184GiB", "65GiB"] {
        let out = run(&c, &["run", "--node-id", "w1", "--target-size", size]);
        refused(&out, 2, &["--target-size", size, "maximum of 64 GiB"], size);
    }
    let file = c.fs_path().with_file_name("compactd.toml");
    std::fs::write(&file, "target_size = \"18446744073709551616\"\n").unwrap();
    let out = run(&c, &["--config", file.to_str().unwrap(), "run", "--node-id", "w1"]);
    refused(&out, 2, &["key `target_size`", "maximum of 64 GiB"], "the file's target_size");
    let policy = c.fs_path().with_file_name("p.toml");
    for v in ["\"17179869184GiB\"", "9223372036854775807"] {
        std::fs::write(
            &policy,
            format!("name = \"p\"\ntables = [\"d/s/*\"]\nmin-small-files = 2\ntarget-size = {v}\n"),
        )
        .unwrap();
        let out = run(&c, &["policy", "apply", policy.to_str().unwrap()]);
        refused(&out, 1, &["line 4, key `target-size`", "maximum of 64 GiB"], v);
    }
}

#[test]
fn params_compactd_sets_itself_are_refused_from_submitters_and_the_planners_own_still_work() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let data = c.fs_path().with_file_name("data");
    let data_uri = format!("fs://{}", data.display());
    common::table::make_table(&data_uri, 2);
    started(&mut c, &["--data", &data_uri, "--command", "ok=true", "--plan-interval", "1s"]);
    let submit = ["submit", "--db", "d", "--schema", "s", "--table", "t", "--command-name", "ok", "--shards", "1"];
    for p in ["compactd_target_size=1", "compactd_policy_decision=db/s/t/dt=0#1", "COMPACTD_JOB_STEP=x"] {
        let mut args = submit.to_vec();
        args.extend(["--param", p]);
        refused(&run(&c, &args), 2, &["--param", "reserved"], p);
    }
    let job = c.fs_path().with_file_name("job.json");
    std::fs::write(
        &job,
        r#"{"jobName":"j","steps":[{"stepName":"a","kind":"command","commandName":"ok","params":{"compactd_job_step":"x"}}]}"#,
    )
    .unwrap();
    refused(&run(&c, &["define", "apply", job.to_str().unwrap()]), 1, &["\"compactd_job_step\"", "reserved"], "a step");
    std::fs::write(&job, r#"{"jobName":"j","steps":[{"stepName":"a","kind":"command","commandName":"ok"}]}"#).unwrap();
    assert!(run(&c, &["define", "apply", job.to_str().unwrap()]).status.success());
    let out = run(&c, &["trigger", "j", "--trigger", "k1", "--param", "compactd_target_size=1"]);
    refused(&out, 1, &["\"compactd_target_size\"", "reserved"], "trigger --param");
    let scheduler = files_below(&c.fs_path().join("Compaction_V2/Scheduler"));
    assert!(scheduler.is_empty(), "a refused request wrote {scheduler:?}");
    // One reason, said once.
    let mut args = submit.to_vec();
    let last = args.len() - 1;
    args[last] = "100000000";
    let out = run(&c, &args);
    let e = text(&out).1;
    assert_eq!(e.matches("100000000 shards is over the limit").count(), 1, "{e}");

    // The planner's tasks carry its marker and target size.
    let policy = c.fs_path().with_file_name("p.toml");
    std::fs::write(
        &policy,
        "name = \"p\"\ntables = [\"db/s/*\"]\nmin-small-files = 2\nmin-interval = \"0s\"\ntarget-size = \"1MiB\"\nmin-file-age = \"0s\"\n",
    )
    .unwrap();
    assert!(run(&c, &["policy", "apply", policy.to_str().unwrap()]).status.success());
    let t0 = Instant::now();
    let infos = loop {
        let infos: Vec<String> = files_below(&c.fs_path().join("Compaction_V2/Scheduler"))
            .into_iter()
            .filter(|f| f.ends_with("TaskInfo.pc.db"))
            .collect();
        if infos.len() >= 2 {
            break infos;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no planner task: {infos:?}\n{}", c.logs_text());
        std::thread::sleep(Duration::from_millis(200));
    };
    for i in infos {
        let info: Value =
            serde_json::from_slice(&std::fs::read(c.fs_path().join("Compaction_V2/Scheduler").join(&i)).unwrap())
                .unwrap();
        let params = &info["params"];
        assert!(params["compactd_policy_decision"].as_str().is_some_and(|m| m.starts_with("db/s/t/dt=")), "{info:#}");
        assert_eq!(params["compactd_target_size"], "1048576", "{info:#}");
    }
}

#[test]
fn a_heartbeat_name_linked_to_a_secret_file_never_shows_its_content() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    started(&mut c, &[]);
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.json");
    std::fs::write(&secret, "\"TOPSECRET-7f3a\"\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let nodes_dir = c.fs_path().join("Compaction_V2/Registry/Nodes");
    std::os::unix::fs::symlink(&secret, nodes_dir.join("evil")).unwrap();
    // A folder of the tree replaced by a link, too.
    let joins = c.fs_path().join("Compaction_V2/Registry/Joins");
    let _ = std::fs::remove_dir_all(&joins);
    std::fs::write(secret_dir.path().join("n9.1"), "\"TOPSECRET-7f3a\"\n").unwrap();
    std::os::unix::fs::symlink(secret_dir.path(), &joins).unwrap();
    // Let the monitor scan it a few times.
    std::thread::sleep(Duration::from_secs(2));
    let mut seen = String::new();
    for args in [vec!["check"], vec!["check", "--json"], vec!["nodes"], vec!["nodes", "--json"]] {
        let out = run(&c, &args);
        let (o, e) = text(&out);
        seen += &format!("--- {args:?}\n{o}{e}");
    }
    seen += &c.logs_text();
    assert!(!seen.contains("TOPSECRET"), "the secret was shown:\n{seen}");
    assert!(seen.contains("Registry/Nodes/evil") && seen.contains("symbolic link"), "{seen}");
    assert!(c.nodes().iter().any(|r| r["id"] == "n1" && r["alive"] == true), "n1 goes on");
}

#[test]
fn names_with_a_newline_or_a_right_to_left_override_are_shown_escaped() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    started(&mut c, &["--command", "ok=true"]);
    let nodes_dir = c.fs_path().join("Compaction_V2/Registry/Nodes");
    std::fs::write(nodes_dir.join("x\nok: no anomalies"), "{}").unwrap();
    let forged = |o: &str| o.lines().any(|l| l.trim_start().starts_with("ok: no anomalies"));
    for args in [vec!["check"], vec!["nodes"]] {
        let out = run(&c, &args);
        let (o, e) = text(&out);
        assert!(!forged(&o) && !forged(&e), "{args:?} printed a forged line:\n{o}{e}");
        assert!(format!("{o}{e}").contains("x\\nok: no anomalies"), "{args:?}: the name is not shown escaped:\n{o}{e}");
    }
    let rtl = "evil\u{202E}txt.exe";
    let out =
        run(&c, &["submit", "--db", "d", "--schema", "s", "--table", rtl, "--command-name", "ok", "--shards", "1"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let id = text(&out).0.trim().to_string();
    let policy = c.fs_path().with_file_name("p.toml");
    std::fs::write(&policy, format!("name = \"p{rtl}\"\ntables = [\"d/s/{rtl}\"]\nmin-small-files = 2\n")).unwrap();
    assert!(run(&c, &["policy", "apply", policy.to_str().unwrap()]).status.success());
    for args in [vec!["list"], vec!["status", &id], vec!["policy", "list"]] {
        let (o, e) = text(&run(&c, &args));
        assert!(!o.contains('\u{202E}') && !e.contains('\u{202E}'), "{args:?} printed the override:\n{o}{e}");
        assert!(o.contains("evil\\u{202e}txt.exe"), "{args:?}: not shown escaped:\n{o}{e}");
    }
}
