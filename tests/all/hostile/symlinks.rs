//! Executors never read or write outside the data root: symbolic links (to
//! a file outside the root, to a file of another partition, dangling, to
//! another link), a FIFO and a symlinked `_compactd/` folder in partitions
//! of a table on the fs data backend, compacted by 3 real `compactd`
//! processes. After the task: no outside content in the table, the outside
//! files untouched, every regular input line exactly once, the non-regular
//! entries still there and reported (node log, `status --json`).

use crate::common;

use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;
use std::time::Duration;

use common::cluster::{alive, monitor_of, Cluster};
use serde_json::Value;

fn write_part(dir: &Path, name: &str, tag: &str) -> Vec<String> {
    let lines: Vec<String> = (0..5).map(|l| format!("{tag}-{name}-l{l}")).collect();
    std::fs::write(dir.join(name), lines.join("\n") + "\n").unwrap();
    lines
}

/// Every line of every regular, non-hidden file directly in the partitions.
fn table_lines(table: &Path) -> Vec<String> {
    let mut out = vec![];
    for p in std::fs::read_dir(table).unwrap() {
        let p = p.unwrap().path();
        for f in std::fs::read_dir(&p).unwrap() {
            let f = f.unwrap();
            let n = f.file_name().to_string_lossy().into_owned();
            // `hardlink` is left where it is (never an input): not counted.
            if f.file_type().unwrap().is_file() && !n.starts_with('_') && !n.starts_with('.') && n != "hardlink" {
                out.extend(std::fs::read_to_string(f.path()).unwrap().lines().map(str::to_string));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn links_fifos_and_a_planted_meta_folder_are_never_followed() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let base = c.fs_path().parent().unwrap().to_path_buf();
    let outside = base.join("outside");
    std::fs::create_dir_all(outside.join("metadir")).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret-outside\n").unwrap();
    std::fs::write(outside.join("metadir/keep"), "outside-meta\n").unwrap();
    let data = base.join("data");
    let table = data.join("db/s/t");
    let (p1, p2) = (table.join("p1"), table.join("p2"));
    std::fs::create_dir_all(&p1).unwrap();
    std::fs::create_dir_all(&p2).unwrap();
    let mut want = vec![];
    for f in ["part-1", "part-2", "part-3"] {
        want.extend(write_part(&p1, f, "p1"));
        want.extend(write_part(&p2, f, "p2"));
    }
    want.sort();
    symlink(outside.join("secret.txt"), p1.join("evil")).unwrap();
    symlink("../p2/part-1", p1.join("cross")).unwrap();
    symlink("/nonexistent/compactd-test", p1.join("dangling")).unwrap();
    symlink("evil", p1.join("link-to-link")).unwrap();
    let fifo = std::ffi::CString::new(p1.join("pipe").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    symlink(outside.join("metadir"), p2.join("_compactd")).unwrap();
    // A hard link is a regular file with a second name: the content may be
    // anyone's (here, outside the root), so it is not an input either.
    std::fs::write(outside.join("hard-secret.txt"), "hard-secret-outside\n").unwrap();
    std::fs::hard_link(outside.join("hard-secret.txt"), p1.join("hardlink")).unwrap();
    let specials_p1 = ["evil", "cross", "dangling", "link-to-link", "pipe", "hardlink"];

    let data_uri = format!("fs://{}", data.display());
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", &data_uri, "--max-running", "8"]);
    }
    c.wait_nodes(Duration::from_secs(20), "3 nodes and a monitor", |r| alive(r).len() == 3 && monitor_of(r).is_some());
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let s = c.wait_status(&id, Duration::from_secs(30), "the task to end", |s| {
        s["state"] == "Done" || s["state"] == "Failed" || s["state"] == "Cancel"
    });
    assert_eq!(s["state"], "Done", "{s:#}\n{}", c.logs_text());
    assert_eq!(s["result"]["success"], 2, "{s:#}");

    // Every regular input line exactly once, nothing from outside.
    let got = table_lines(&table);
    assert_eq!(got, want, "the table holds exactly the regular inputs' lines");
    assert!(!got.iter().any(|l| l.contains("secret") || l.contains("outside")), "{got:?}");
    // compactd's outputs hold nothing from outside either.
    for p in [&p1, &p2] {
        for e in std::fs::read_dir(p).unwrap().map(|e| e.unwrap()) {
            if e.file_name().to_string_lossy().starts_with("compacted-") {
                let text = std::fs::read_to_string(e.path()).unwrap();
                assert!(!text.contains("secret"), "{} holds outside content", e.path().display());
            }
        }
    }
    // Both partitions were merged (each had 3 small regular files).
    for p in [&p1, &p2] {
        let merged = std::fs::read_dir(p)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("compacted-"))
            .count();
        assert_eq!(merged, 1, "{} was not merged", p.display());
    }
    // Outside files untouched, nothing written through the planted link.
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "secret-outside\n");
    let mut meta: Vec<String> = std::fs::read_dir(outside.join("metadir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    meta.sort();
    assert_eq!(meta, vec!["keep".to_string()], "something was written through the _compactd link");
    assert_eq!(std::fs::read_to_string(outside.join("metadir/keep")).unwrap(), "outside-meta\n");
    // The non-regular entries are still there, untouched.
    for n in specials_p1 {
        let m = std::fs::symlink_metadata(p1.join(n)).unwrap_or_else(|_| panic!("{n} was deleted"));
        assert!(m.file_type().is_symlink() || m.file_type().is_fifo() || n == "hardlink", "{n} changed kind");
    }
    assert_eq!(std::fs::read_to_string(outside.join("hard-secret.txt")).unwrap(), "hard-secret-outside\n");
    assert!(p2.join("part-1").exists() || table_lines(&table).iter().any(|l| l.starts_with("p2-part-1")));
    // Reported: counted in status --json, warned in a node's log.
    assert_eq!(s["stats"]["skipped_special"], specials_p1.len() as u64 + 1, "{s:#}");
    let logs: String =
        ["n1", "n2", "n3"].iter().map(|n| std::fs::read_to_string(c.log_path(n)).unwrap_or_default()).collect();
    assert!(logs.contains("not regular files were left alone"), "no warning in the node logs:\n{logs}");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

/// A symlinked partition folder is not a partition: it is skipped.
#[test]
fn a_symlinked_partition_folder_is_skipped() {
    let _turn = crate::common::turns::waits();
    let mut c = Cluster::fs();
    let base = c.fs_path().parent().unwrap().to_path_buf();
    let outside = base.join("outside-part");
    std::fs::create_dir_all(&outside).unwrap();
    write_part(&outside, "a", "out");
    write_part(&outside, "b", "out");
    let table = base.join("data/db/s/t");
    std::fs::create_dir_all(table.join("p1")).unwrap();
    write_part(&table.join("p1"), "a", "in");
    write_part(&table.join("p1"), "b", "in");
    symlink(&outside, table.join("p9")).unwrap();
    let data_uri = format!("fs://{}", base.join("data").display());
    c.start_with("n1", &["--data", &data_uri]);
    // Alive too: submit places the task on a member of the view.
    c.wait_nodes(Duration::from_secs(20), "n1 monitor and member", |r| {
        monitor_of(r).as_deref() == Some("n1") && alive(r).contains(&"n1".to_string())
    });
    let out = c.compactd(&["submit", "--db", "db", "--schema", "s", "--table", "t", "--json"]);
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_string();
    let s = c.wait_status(&id, Duration::from_secs(30), "Done", |s| s["state"] == "Done" || s["state"] == "Failed");
    assert_eq!(s["state"], "Done", "{s:#}");
    assert_eq!(s["result"]["success"], 1, "only p1 is a partition: {s:#}");
    let mut names: Vec<String> =
        std::fs::read_dir(&outside).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    names.sort();
    assert_eq!(names, vec!["a".to_string(), "b".to_string()], "the outside folder was touched");
}
