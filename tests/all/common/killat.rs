//! `tests/support/killat.c`, the LD_PRELOAD shim that SIGKILLs a process at
//! an exact file operation (see the C file for its modes), built once per
//! test binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/killat.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("killat-{}.so", std::process::id()));
        let st = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .status()
            .expect("a C compiler (`cc`) builds the crash shim; it is part of the Rust toolchain's requirements");
        assert!(st.success(), "building {} failed", src.display());
        out
    })
}

/// Arms `cmd` to be SIGSTOPped (once) at the `nth` file operation of kind
/// `at` whose path contains `pattern`: the test acts while it waits there,
/// then sends SIGCONT ([`wait_stopped`] finds the moment).
pub fn arm_stop(cmd: &mut Command, at: &str, pattern: &str, nth: u32) {
    arm(cmd, at, pattern, nth);
    cmd.env("COMPACTD_KILL_SIGNAL", "STOP");
}

/// Waits (at most a minute) until process `pid` is stopped.
// A real process: real time.
#[allow(clippy::disallowed_methods)]
pub fn wait_stopped(pid: u32) {
    for _ in 0..6000 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command's name in parentheses.
        if stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} never stopped at its armed point");
}

/// Arms `cmd` to be SIGKILLed at the `nth` file operation of kind `at`
/// whose path contains `pattern`.
pub fn arm(cmd: &mut Command, at: &str, pattern: &str, nth: u32) {
    cmd.env("LD_PRELOAD", shim())
        .env("COMPACTD_KILL_AT", at)
        .env("COMPACTD_KILL_PATH", pattern)
        .env("COMPACTD_KILL_NTH", nth.to_string());
}
