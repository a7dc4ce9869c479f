//! CI's gate on the house's shape (`.ci/shape.py`) fails on what it names:
//! here an import from a lower layer of the main crate to a higher one,
//! added to a copy of `src/`, a circle between two modules, and an
//! integration test that does not take its turn first.

use std::path::Path;
use std::process::Command;

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// `.ci/shape.py` run in a copy of the crate's `src/` after `edit`: its
/// exit status and output.
fn shape_after(edit: impl FnOnce(&Path)) -> (bool, String) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    copy(&repo.join("src"), &dir.path().join("src"));
    std::fs::copy(repo.join(".ci/shape.py"), dir.path().join("shape.py")).unwrap();
    edit(dir.path());
    let out = Command::new("python3").arg("shape.py").current_dir(dir.path()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn append(file: &Path, text: &str) {
    let mut s = std::fs::read_to_string(file).unwrap();
    s.push_str(text);
    std::fs::write(file, s).unwrap();
}

#[test]
fn the_shape_gate_fails_on_an_upward_import_and_on_a_circle() {
    let _turn = crate::common::turns::waits();
    let (ok, out) = shape_after(|_| {});
    assert!(ok, "the crate as it is passes: {out}");

    // The task layer reaching up to the HTTP server's metrics.
    let (ok, out) = shape_after(|d| {
        append(&d.join("src/tasks/placement.rs"), "\npub fn upward(_: &crate::serve::metrics::Metrics) {}\n")
    });
    assert!(!ok, "an upward import passed: {out}");
    assert!(
        out.contains("src/tasks/placement.rs: imports serve::metrics, a layer above it (tasks < serve"),
        "the offence is named with its file and layers: {out}"
    );

    // The same reference downward is allowed.
    let (ok, out) = shape_after(|d| {
        append(&d.join("src/serve/systemd.rs"), "\npub fn downward(_: &crate::tasks::placement::Ring) {}\n")
    });
    assert!(ok, "a downward import failed: {out}");

    // A circle: schedule <-> table::file.
    let (ok, out) = shape_after(|d| {
        append(&d.join("src/schedule/mod.rs"), "\npub fn a(_: crate::table::file::FileKind) {}\n");
        append(&d.join("src/table/file.rs"), "\npub fn b(_: crate::schedule::Cron) {}\n");
    });
    assert!(!ok, "a circle passed: {out}");
    assert!(out.contains("import circle"), "{out}");
}

#[test]
fn the_shape_gate_fails_on_a_test_that_skips_its_turn() {
    let _turn = crate::common::turns::waits();
    let turnless = "#[test]\nfn a_test_without_its_turn() {\n    assert_eq!(1 + 1, 2);\n}\n";
    let (ok, out) = shape_after(|d| {
        std::fs::create_dir_all(d.join("tests/all/ops")).unwrap();
        std::fs::write(d.join("tests/all/ops/turnless.rs"), turnless).unwrap();
    });
    assert!(!ok, "a test without its turn passed: {out}");
    assert!(out.contains("tests/all/ops/turnless.rs:2: a test whose first line is not its turn"), "{out}");

    // The same test taking its turn (after a comment) passes.
    let (ok, out) = shape_after(|d| {
        std::fs::create_dir_all(d.join("tests/all/ops")).unwrap();
        let taken = turnless.replace("{\n", "{\n    // Short.\n    let _turn = crate::common::turns::waits();\n");
        std::fs::write(d.join("tests/all/ops/turnless.rs"), taken).unwrap();
    });
    assert!(ok, "a test taking its turn failed: {out}");
}
