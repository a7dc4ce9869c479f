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

/// Arms `cmd` to be SIGKILLed at the `nth` file operation of kind `at`
/// whose path contains `pattern`.
pub fn arm(cmd: &mut Command, at: &str, pattern: &str, nth: u32) {
    cmd.env("LD_PRELOAD", shim())
        .env("COMPACTD_KILL_AT", at)
        .env("COMPACTD_KILL_PATH", pattern)
        .env("COMPACTD_KILL_NTH", nth.to_string());
}
