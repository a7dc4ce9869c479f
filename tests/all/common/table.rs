//! The sample table the task tests compact: `db/s/t/dt=<p>/part-<f>`, five
//! small newline-delimited files of 20 lines per partition, on any data
//! backend (fs, S3 or HDFS), and the readers that check the result (compactd's
//! store, and on HDFS also a client that is not compactd's).

use std::collections::BTreeMap;

use store::{RootUri, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Writes the table with `partitions` partitions on the data backend;
/// returns every line, sorted.
pub fn make_table(data_uri: &str, partitions: usize) -> Vec<String> {
    let rt = rt();
    let store = rt.block_on(Store::open(&RootUri::parse(data_uri).unwrap())).unwrap();
    let mut lines = vec![];
    for p in 0..partitions {
        for f in 0..5 {
            let mut text = String::new();
            for l in 0..20 {
                let line = format!("p{p}-f{f}-l{l}");
                text += &line;
                text.push('\n');
                lines.push(line);
            }
            rt.block_on(store.put(&format!("db/s/t/dt={p}/part-{f}"), text.into_bytes())).unwrap();
        }
    }
    lines.sort();
    lines
}

/// Per partition, the merge commits found: (attempt, done).
pub type Commits = BTreeMap<String, Vec<(u64, bool)>>;

/// Every line of the table's data files (not `_compactd/`), sorted, and the
/// merge commits of every partition (a commit that does not parse counts as
/// attempt 0, not done).
pub fn read_table(data_uri: &str, partitions: usize) -> (Vec<String>, Commits) {
    let rt = rt();
    let store = rt.block_on(Store::open(&RootUri::parse(data_uri).unwrap())).unwrap();
    let mut lines = vec![];
    let mut commits = Commits::new();
    for p in 0..partitions {
        let dir = format!("db/s/t/dt={p}/");
        for e in rt.block_on(store.list(&dir)).unwrap() {
            if e.is_dir || e.name().starts_with('.') {
                continue;
            }
            let b = rt.block_on(store.read(&e.path)).unwrap().unwrap();
            lines.extend(String::from_utf8(b.to_vec()).unwrap().lines().map(str::to_string));
        }
        for e in rt.block_on(store.list(&format!("{dir}_compactd/"))).unwrap() {
            if e.name().starts_with("commit.") {
                let b = rt.block_on(store.read(&e.path)).unwrap().unwrap_or_default();
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null);
                commits
                    .entry(format!("dt={p}"))
                    .or_default()
                    .push((v["attempt"].as_u64().unwrap_or(0), v["done"] == true));
            }
        }
    }
    lines.sort();
    (lines, commits)
}

/// What a reader that is not compactd sees of a merged table on HDFS
/// (hdfs-native's Python client through pyarrow, `parquet_tool.py
/// hdfs-get`): every line, sorted; panics unless each partition holds
/// exactly one file.
pub fn read_merged_through_python(data_uri: &str, partitions: usize) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    super::parquet::tool(&["hdfs-get", data_uri, tmp.path().to_str().unwrap()], &[]);
    let mut lines = vec![];
    for p in 0..partitions {
        let dir = tmp.path().join(format!("db/s/t/dt={p}"));
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(files.len(), 1, "dt={p}: {files:?}");
        lines.extend(std::fs::read_to_string(files[0].path()).unwrap().lines().map(str::to_string));
    }
    lines.sort();
    lines
}
