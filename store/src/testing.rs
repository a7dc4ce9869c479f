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
