//! Helpers for tests of crates built on the store (the `testing` feature).

use futures::TryStreamExt;

use crate::Store;

/// Every object below `dir` with its bytes, sorted by path: a picture of a
/// tree to compare before and after an operation.
pub async fn snapshot(store: &Store, dir: &str) -> Vec<(String, Vec<u8>)> {
    let entries: Vec<_> = store.list_stream(dir, true).try_collect().await.expect("listing for a snapshot");
    let mut out = Vec::new();
    for e in entries {
        let b = store.read(&e.path).await.expect("reading for a snapshot").unwrap_or_default();
        out.push((e.path, b.to_vec()));
    }
    out.sort();
    out
}

/// Every regular file below the local folder `dir`, as (path relative to
/// `dir` with `/` separators, bytes), sorted by path.
pub fn local_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &std::path::Path, dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd {
            let p = e.expect("a readable folder entry").path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).expect("below the base").to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read(&p).expect("a readable file")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A number from the environment (a test's or benchmark's knob); `None` if
/// unset. A value that is not a number is a mistake worth stopping for.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}
