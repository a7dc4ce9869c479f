//! Where a table's current version lives and how a commit swaps it:
//! [`Catalog::Files`], or a REST catalog ([`super::rest`]).
//!
//! File-system ("Hadoop") tables: the table is its `metadata/` folder, whose
//! `vN.metadata.json` with the highest N is the current version, and a
//! commit creates `v(N+1).metadata.json` once. `version-hint.text` (the
//! bare decimal N) is a hint for readers that do not list the folder.
//!
//! Invariants:
//! - The commit is [`Store::create`]: on HDFS a rename that refuses an
//!   existing target, as Java's `HadoopTableOperations` commits, so it is
//!   safe beside Spark, Flink and Java writers there. On fs and S3, Java
//!   writers check then rename (or copy), which can overwrite a version
//!   compactd created: compactd commits there only when told it is the
//!   table's sole writer ([`check_writers`]).
//! - A table whose metadata files are named `NNNNN-<uuid>.metadata.json`
//!   belongs to a catalog (Hive Metastore, REST, JDBC, Glue, …) that
//!   tracks its current file elsewhere: a file commit would fork it, so it
//!   is refused by name. So is one holding gzip versions
//!   (`vN.gz.metadata.json`, `vN.metadata.json.gz`): two writers could both
//!   take version N under two names.
//! - The hint is written after the commit, best effort (a reader that
//!   lists finds the version anyway), and only forward: never over a
//!   higher number or one it could not read ([`write_hint`]); a later
//!   commit or rerun brings a lagging hint up to date.

use std::collections::BTreeSet;

use store::{Created, RootUri, Store};

use super::table::Table;
use super::IcebergError;

pub const METADATA_DIR: &str = "metadata/";
pub const HINT: &str = "version-hint.text";

/// The metadata file of version `n`.
pub fn version_path(dir: &str, n: u64) -> String {
    format!("{dir}{METADATA_DIR}v{n}.metadata.json")
}

/// What `metadata/` holds.
#[derive(Debug, Default)]
struct Listing {
    versions: BTreeSet<u64>,
    gzip: Option<String>,
    foreign: Option<String>,
}

pub(super) fn version_of(name: &str) -> Option<u64> {
    let n = name.strip_prefix('v')?.strip_suffix(".metadata.json")?;
    (!n.is_empty() && n.len() < 19 && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok())?
}

/// `NNNNN-<uuid>.metadata.json`: a catalog's metadata file.
fn is_catalog_named(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".metadata.json").or_else(|| name.strip_suffix(".gz.metadata.json")) else {
        return false;
    };
    match stem.split_once('-') {
        Some((n, uuid)) => !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && uuid.len() >= 32,
        None => false,
    }
}

async fn list(store: &Store, dir: &str) -> Result<Listing, IcebergError> {
    let mut l = Listing::default();
    for e in store.list(&format!("{dir}{METADATA_DIR}")).await? {
        let name = e.name();
        if e.is_dir {
            continue;
        }
        if let Some(v) = version_of(name) {
            l.versions.insert(v);
        } else if name.ends_with(".gz.metadata.json") || name.ends_with(".metadata.json.gz") {
            l.gzip.get_or_insert_with(|| e.path.clone());
        } else if is_catalog_named(name) {
            l.foreign.get_or_insert_with(|| e.path.clone());
        }
    }
    Ok(l)
}

/// The table's current version (the highest `vN.metadata.json`), refused
/// by name when its metadata folder shows another catalog owns it or
/// gzip versions.
pub async fn load(store: &Store, dir: &str) -> Result<Table, IcebergError> {
    let broken = |problem: String| IcebergError::Table { table: dir.to_string(), problem };
    // Temp files of a create killed mid-way (fs only): a version linked but
    // not yet unlinked from its temp has two names (and is not read) until
    // then.
    store.sweep_stale_temps(&format!("{dir}{METADATA_DIR}")).await?;
    let l = list(store, dir).await?;
    if let Some(f) = &l.foreign {
        return Err(broken(format!(
            "{f} is a catalog's metadata file (Hive Metastore, REST, JDBC, Glue …): that catalog owns the table and \
             a file-system commit would fork it; compactd does not commit to it"
        )));
    }
    if let Some(g) = &l.gzip {
        return Err(broken(format!(
            "{g} is gzip-compressed metadata: two writers could both take its version under two names; compactd \
             does not commit to it"
        )));
    }
    let Some(&version) = l.versions.last() else {
        return Err(broken(format!("no {METADATA_DIR}vN.metadata.json: not a file-system Iceberg table")));
    };
    let path = version_path(dir, version);
    let bytes = store.read(&path).await?.ok_or_else(|| broken(format!("{path} vanished while being read")))?;
    let meta: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| broken(format!("{path} does not parse: {e}")))?;
    if !meta.is_object() {
        return Err(broken(format!("{path} is not a JSON object")));
    }
    Ok(Table { dir: dir.to_string(), version, meta })
}

pub use super::Swap;

/// The catalog of the tables a job commits to.
#[derive(Debug, Clone)]
pub enum Catalog {
    /// File-system tables; `sole_writer`: the task states compactd is the
    /// sole writer (needed on fs and S3, see [`check_writers`]).
    Files {
        sole_writer: bool,
    },
    Rest(super::rest::Rest),
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog::Files { sole_writer: false }
    }
}

impl Catalog {
    /// The catalog a task's parameters name (`param` looks one up).
    pub async fn from_params(param: impl Fn(&str) -> Option<String>) -> Result<Catalog, IcebergError> {
        if let Some(uri) = param(super::rest::REST_URI_PARAM).filter(|u| !u.is_empty()) {
            return Ok(Catalog::Rest(super::rest::Rest::connect(&uri).await?));
        }
        Ok(Catalog::Files { sole_writer: param(SOLE_WRITER_PARAM).is_some_and(|v| v == "true") })
    }

    /// The table's current version.
    pub async fn load(&self, store: &Store, dir: &str) -> Result<Table, IcebergError> {
        match self {
            Catalog::Files { .. } => load(store, dir).await,
            Catalog::Rest(r) => r.load(dir).await,
        }
    }

    /// Commits `meta` as the version after `base`'s.
    pub async fn commit(&self, store: &Store, base: &Table, meta: &serde_json::Value) -> Result<Swap, IcebergError> {
        match self {
            Catalog::Files { .. } => commit(store, base, meta).await,
            Catalog::Rest(r) => r.commit(base, meta).await,
        }
    }

    /// Whether compactd may commit to the table at `dir` through this
    /// catalog: a REST catalog orders its writers' commits itself.
    pub fn check_writers(&self, store: &Store, dir: &str) -> Result<(), IcebergError> {
        match self {
            Catalog::Files { sole_writer } => check_writers(store, dir, *sole_writer),
            Catalog::Rest(_) => Ok(()),
        }
    }

    /// After the table was found at `version` with this job's commit: the
    /// hint of a file-system table brought up to it.
    pub async fn committed(&self, store: &Store, dir: &str, version: u64) {
        if let Catalog::Files { .. } = self {
            write_hint(store, dir, version).await;
        }
    }
}

/// Commits `meta` as the version after `base`'s, then brings the hint up
/// to it (best effort).
pub async fn commit(store: &Store, base: &Table, meta: &serde_json::Value) -> Result<Swap, IcebergError> {
    let next = base.version + 1;
    let bytes = serde_json::to_vec_pretty(meta).expect("JSON serializes");
    match store.create(&version_path(&base.dir, next), bytes).await? {
        Created::Exists => Ok(Swap::Lost),
        Created::Created => {
            write_hint(store, &base.dir, next).await;
            Ok(Swap::Won)
        }
    }
}

/// Writes the hint as the bare decimal `version` (no newline: pyiceberg
/// checks it with `isnumeric()`), only if that moves it forward: a slower
/// committer must not put back a version older than a faster one's hint.
///
/// The hint is read right before the write, but the two are not one step:
/// a writer that puts a newer number between them is overwritten, and the
/// hint lags until the next commit or rerun writes it (Java's
/// `HadoopTableOperations.writeVersionHint` writes without looking at all).
/// Java reads on from the hint to the last `vN` that exists and compactd
/// lists the folder, so they are not misled; a reader that takes the hint
/// at its word (pyiceberg's `StaticTable`) reads an older version until
/// then.
pub async fn write_hint(store: &Store, dir: &str, version: u64) {
    let path = format!("{dir}{METADATA_DIR}{HINT}");
    let current = match store.read(&path).await {
        Ok(Some(b)) => String::from_utf8_lossy(&b).trim().parse::<u64>().ok(),
        Ok(None) => None,
        // What it holds is unknown, maybe a newer version: left as it is.
        Err(e) => {
            tracing::warn!(path, error = %e, "could not read the version hint: not written (it may hold a newer version)");
            return;
        }
    };
    if current.is_some_and(|c| c >= version) {
        return;
    }
    if let Err(e) = store.put(&path, version.to_string().into_bytes()).await {
        tracing::warn!(path, error = %e, "could not write the version hint (readers that list the folder find the version)");
    }
}

/// Whether compactd may commit to tables on this backend: on HDFS always
/// (the commit is the rename Java's writers use too); on fs and S3 only
/// when it is the tables' sole writer (`sole_writer`).
pub fn check_writers(store: &Store, table: &str, sole_writer: bool) -> Result<(), IcebergError> {
    match store.uri() {
        RootUri::Hdfs { .. } | RootUri::Memory => Ok(()),
        _ if sole_writer => Ok(()),
        uri => Err(IcebergError::Table {
            table: table.to_string(),
            problem: format!(
                "a file-system Iceberg table on {uri}: Java, Spark and Flink writers commit here by checking then \
                 renaming or copying, which can overwrite a version compactd created, so compactd commits only when \
                 it is the table's sole writer: submit with `--param {SOLE_WRITER_PARAM}=true` once nothing else \
                 writes to it"
            ),
        }),
    }
}

/// The task parameter that states compactd is the sole writer of a
/// file-system table on fs or S3.
pub const SOLE_WRITER_PARAM: &str = "iceberg.sole-writer";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_file_names_are_told_apart() {
        assert_eq!(version_of("v12.metadata.json"), Some(12));
        assert_eq!(version_of("v12.gz.metadata.json"), None);
        assert_eq!(version_of("00003-0d5c2800-b4a4-42f4-8be9-2644b229965b.metadata.json"), None);
        assert!(is_catalog_named("00003-0d5c2800-b4a4-42f4-8be9-2644b229965b.metadata.json"));
        assert!(!is_catalog_named("v3.metadata.json"));
    }

    #[tokio::test]
    async fn the_highest_version_is_current_and_a_taken_version_is_lost() {
        let store = Store::memory().await;
        for v in [1, 2] {
            store.put(&version_path("db/s/t/", v), format!("{{\"v\": {v}}}").into_bytes()).await.unwrap();
        }
        let t = load(&store, "db/s/t/").await.unwrap();
        assert_eq!((t.version, t.meta["v"].as_u64()), (2, Some(2)));
        assert_eq!(commit(&store, &t, &serde_json::json!({"v": 3})).await.unwrap(), Swap::Won);
        assert_eq!(&store.read("db/s/t/metadata/version-hint.text").await.unwrap().unwrap()[..], b"3");
        assert_eq!(commit(&store, &t, &serde_json::json!({"v": 3})).await.unwrap(), Swap::Lost);
        store
            .put("db/s/t/metadata/00004-0d5c2800-b4a4-42f4-8be9-2644b229965b.metadata.json", b"{}".to_vec())
            .await
            .unwrap();
        assert!(load(&store, "db/s/t/").await.unwrap_err().to_string().contains("catalog's metadata file"));
    }

    #[tokio::test]
    async fn the_hint_never_moves_back_not_even_when_it_cannot_be_read() {
        use store::layers::{FaultConfig, FaultLayer, OpKind};
        let store = Store::memory().await;
        let hint = "db/s/t/metadata/version-hint.text";
        let holds = |s: Store| async move { String::from_utf8(s.read(hint).await.unwrap().unwrap().to_vec()).unwrap() };
        // The committer of N+1 writes its hint after the one of N+5 did.
        let n = 7;
        store.put(hint, (n + 5).to_string().into_bytes()).await.unwrap();
        write_hint(&store, "db/s/t/", n + 1).await;
        assert_eq!(holds(store.clone()).await, (n + 5).to_string());
        // A hint that cannot be read may hold a newer version.
        let faults =
            FaultLayer::new(FaultConfig { error_rate: 1.0, kinds: vec![OpKind::Read], ..FaultConfig::default() });
        let unreadable = store.layered(move |op| op.layer(faults.clone()));
        write_hint(&unreadable, "db/s/t/", n + 1).await;
        assert_eq!(holds(store.clone()).await, (n + 5).to_string());
        // Forward it moves; a hint that is no number is replaced.
        write_hint(&store, "db/s/t/", n + 6).await;
        assert_eq!(holds(store.clone()).await, (n + 6).to_string());
        store.put(hint, b"v7".to_vec()).await.unwrap();
        write_hint(&store, "db/s/t/", n + 7).await;
        assert_eq!(holds(store.clone()).await, (n + 7).to_string());
    }
}
