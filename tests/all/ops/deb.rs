//! The Debian package, built by `.ci/build-deb.sh` (cargo-deb) from the
//! binary under test, installed with `dpkg -i` on a fresh copy of this
//! machine: an overlay of `/` in a mount namespace of the test's own (an
//! empty upper layer on tmpfs), entered with `chroot`. Whatever the
//! package's scripts do (its user, dpkg's database, /etc) happens in the
//! copy and is gone with it; the test checks that the host has no trace.
//!
//! Checked there: the package's files (binary, unit, conffile, man page,
//! completions), its dependencies, `compactd --version`, `man compactd`,
//! the packaged configuration as `compactd config` reads it, the bash
//! completion, the unit by `systemd-analyze verify`, the system user of the
//! postinst, the service left disabled, and `dpkg --purge` removing it all.
//!
//! Needs root (mount namespaces) and cargo-deb (`.ci/install-cargo-deb.sh`,
//! which `.ci/install-test-deps.sh` runs); without them the test prints
//! SKIP and passes, unless `COMPACTD_REQUIRE_DEB=1` (`.ci/run` sets it).
// Real processes: waits on real time.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn skip(why: &str) {
    assert!(std::env::var_os("COMPACTD_REQUIRE_DEB").is_none(), "COMPACTD_REQUIRE_DEB is set, but {why}");
    eprintln!("SKIP: {why}");
}

fn sh(script: &str) -> (bool, String) {
    let out = Command::new("bash").args(["-c", script]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_debian_package_installs_with_dpkg_on_a_fresh_copy_of_this_machine() {
    let _turn = crate::common::turns::core();
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root: no mount namespace for a throwaway copy of the machine");
    }
    if !sh("cargo deb --version").0 {
        return skip("cargo-deb is not installed (bash .ci/install-cargo-deb.sh)");
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let out = tempfile::tempdir().unwrap();
    let built = Command::new("bash")
        .arg(format!("{root}/.ci/build-deb.sh"))
        .env("COMPACTD_DEB_BINARY", BIN)
        .env("COMPACTD_DEB_OUT", out.path())
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&built.stdout), String::from_utf8_lossy(&built.stderr));
    assert!(built.status.success(), ".ci/build-deb.sh failed:\n{log}");
    let debs: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}\n{log}");
    let deb = debs[0].display().to_string();
    assert!(deb.contains(&format!("compactd_{VERSION}-1_")), "{deb}");

    // What the package holds and needs.
    let (ok, files) = sh(&format!("dpkg-deb -c {deb}"));
    assert!(ok, "{files}");
    for f in [
        "./usr/bin/compactd",
        "./usr/lib/systemd/system/compactd.service",
        "./etc/compactd/compactd.toml",
        "./usr/share/man/man1/compactd.1.gz",
        "./usr/share/bash-completion/completions/compactd",
        "./usr/share/zsh/vendor-completions/_compactd",
        "./usr/share/fish/vendor_completions.d/compactd.fish",
        "./usr/share/doc/compactd/copyright",
    ] {
        assert!(files.lines().any(|l| l.ends_with(f)), "{f} is not in the package:\n{files}");
    }
    let (_, fields) = sh(&format!("dpkg-deb -f {deb} Package Version Depends Conffiles"));
    assert!(fields.contains("libc6"), "the dependencies name the C library: {fields}");
    let (_, conffiles) = sh(&format!("dpkg-deb -I {deb} conffiles"));
    assert!(conffiles.contains("/etc/compactd/compactd.toml"), "{conffiles}");

    let host_before = sh("ls -d /usr/bin/compactd /etc/compactd 2>/dev/null; getent passwd compactd").1;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().display();
    // The host's / with an empty tmpfs layer on top, in a mount namespace
    // of its own: the package lands in the layer, which goes with the
    // namespace.
    let script = format!(
        r#"set -euo pipefail
mount -t tmpfs tmpfs {t}
mkdir {t}/up {t}/work {t}/root
mount -t overlay overlay -o lowerdir=/,upperdir={t}/up,workdir={t}/work {t}/root
mount --rbind /dev {t}/root/dev
mount --rbind /sys {t}/root/sys
mount -t proc proc {t}/root/proc
mount -t tmpfs tmpfs {t}/root/run
chroot {t}/root /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 bash -euo pipefail -c '
echo "== dpkg -i"
dpkg -i {deb}
echo "== version"
compactd --version
echo "== man"
MANPAGER=cat MANWIDTH=100 man compactd | head -40
echo "== config"
compactd config
echo "== completion"
source /usr/share/bash-completion/completions/compactd && complete -p compactd
echo "== unit"
systemd-analyze verify /usr/lib/systemd/system/compactd.service && echo unit ok
echo "== user"
getent passwd compactd
echo "== enabled"
ls /etc/systemd/system/multi-user.target.wants/ 2>/dev/null | grep -c compactd || true
echo "== purge"
dpkg --purge compactd
ls /usr/bin/compactd /etc/compactd 2>&1 || true
'
"#
    );
    let run = Command::new("unshare").args(["-m", "--propagation", "private", "bash", "-c", &script]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "the install in the throwaway copy failed:\n{text}");
    let section = |name: &str| -> String {
        text.split(&format!("== {name}\n")).nth(1).and_then(|r| r.split("\n== ").next()).unwrap_or("").to_string()
    };
    assert!(section("version").trim() == format!("compactd {VERSION}"), "{text}");
    let man = section("man");
    assert!(man.contains("compactd") && man.contains("Compaction scheduler") && man.contains("run"), "{man}");
    let config = section("config");
    assert!(
        config.lines().any(|l| l.starts_with("root = ")
            && l.contains("/var/lib/compactd/cluster.compact")
            && l.ends_with("# file")),
        "the packaged configuration is read: {config}"
    );
    assert!(section("completion").contains("compactd"), "{text}");
    assert!(section("unit").contains("unit ok"), "systemd-analyze verify: {text}");
    assert!(section("user").starts_with("compactd:"), "the postinst's user: {text}");
    assert_eq!(section("enabled").trim(), "0", "the service must not be enabled before it is configured: {text}");
    let purge = section("purge");
    assert!(
        purge.contains("'/usr/bin/compactd': No such file") && purge.contains("'/etc/compactd': No such file"),
        "purge leaves files: {purge}"
    );
    // Nothing of it on the host.
    let host_after = sh("ls -d /usr/bin/compactd /etc/compactd 2>/dev/null; getent passwd compactd").1;
    assert_eq!(host_before, host_after, "the host changed");
    assert!(!Path::new(&format!("{t}/up")).exists(), "the overlay's layer outlived its namespace");
    eprintln!("{text}");
}
