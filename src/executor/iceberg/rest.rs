//! An Iceberg REST catalog (the `iceberg.rest-uri` task parameter): the
//! table `<db>/<schema>/<table>/` is the catalog's `<schema>.<table>`, whose
//! location must be that folder on the data backend. compactd loads the
//! table's current metadata from the catalog and commits its snapshot
//! through the catalog's commit endpoint; the catalog writes the metadata
//! file. Manifests and manifest lists are compactd's, as on file-system
//! tables.
//!
//! Invariants:
//! - A commit carries requirements (the table's uuid, `main` still at the
//!   snapshot the commit was built on): the catalog applies it whole or
//!   refuses it, never on top of another writer's snapshot.
//! - 409 (another writer committed first, as the catalog says) is
//!   [`Swap::Lost`]: the caller reloads the table and rebuilds on the new
//!   head, unless the table holds the commit's snapshot: a request sent
//!   again by a proxy or client after the catalog applied it is answered
//!   409 too. A 5xx answer, or a connection that fails once the request may
//!   have been sent, is [`Swap::Unknown`]: the caller reloads and looks for
//!   its own snapshot, and deletes nothing.
//! - Any other answer is an error naming the status and the catalog's
//!   message.

use std::time::Duration;

use serde_json::{json, Value as Json};

use super::table::Table;
use super::{IcebergError, Swap};

/// The task parameter naming a REST catalog's base URI (before `/v1`).
pub const REST_URI_PARAM: &str = "iceberg.rest-uri";

/// How long one request to the catalog may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A REST catalog, its `/v1/config` read.
#[derive(Debug, Clone)]
pub struct Rest {
    client: reqwest::Client,
    /// `<uri>/v1/` plus the catalog's prefix and `/`, if it has one.
    base: String,
}

/// `/`-free, URL-safe: every byte but unreserved ones percent-encoded.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `<db>/<schema>/<table>/` as the catalog's namespace and name.
fn identifier(dir: &str) -> Option<(&str, &str)> {
    let mut parts = dir.trim_end_matches('/').rsplit('/');
    let table = parts.next().filter(|s| !s.is_empty())?;
    let schema = parts.next().filter(|s| !s.is_empty())?;
    Some((schema, table))
}

/// `N` of a catalog's metadata file `…/NNNNN-<uuid>.metadata.json`.
fn version_of(location: &str) -> u64 {
    let name = location.rsplit('/').next().unwrap_or("");
    name.split_once('-').and_then(|(n, _)| n.parse().ok()).unwrap_or(0)
}

impl Rest {
    /// Reads the catalog's configuration at `uri` (its prefix).
    pub async fn connect(uri: &str) -> Result<Rest, IcebergError> {
        let uri = uri.trim_end_matches('/');
        let broken = |problem: String| IcebergError::Table { table: uri.to_string(), problem };
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|e| broken(format!("cannot make an HTTP client: {e}")))?;
        let config = format!("{uri}/v1/config");
        let resp = client.get(&config).send().await.map_err(|e| broken(format!("GET {config}: {e}")))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| broken(format!("GET {config}: {e}")))?;
        if !status.is_success() {
            return Err(broken(format!("GET {config}: {status}: {}", String::from_utf8_lossy(&body))));
        }
        let conf: Json = serde_json::from_slice(&body).map_err(|e| broken(format!("GET {config}: not JSON ({e})")))?;
        let prefix = conf["overrides"]["prefix"].as_str().or(conf["defaults"]["prefix"].as_str()).unwrap_or("");
        let base = if prefix.is_empty() { format!("{uri}/v1/") } else { format!("{uri}/v1/{}/", encode(prefix)) };
        Ok(Rest { client, base })
    }

    fn table_url(&self, dir: &str) -> Result<String, IcebergError> {
        let (ns, t) = identifier(dir).ok_or_else(|| IcebergError::Table {
            table: dir.to_string(),
            problem: "not a <db>/<schema>/<table> folder: no REST identifier".into(),
        })?;
        Ok(format!("{}namespaces/{}/tables/{}", self.base, encode(ns), encode(t)))
    }

    /// The table's current metadata, as the catalog has it.
    pub async fn load(&self, dir: &str) -> Result<Table, IcebergError> {
        let broken = |problem: String| IcebergError::Table { table: dir.to_string(), problem };
        let url = self.table_url(dir)?;
        let resp = self.client.get(&url).send().await.map_err(|e| broken(format!("GET {url}: {e}")))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| broken(format!("GET {url}: {e}")))?;
        if !status.is_success() {
            return Err(broken(format!("the REST catalog: GET {url}: {status}: {}", String::from_utf8_lossy(&body))));
        }
        let loaded: Json = serde_json::from_slice(&body).map_err(|e| broken(format!("GET {url}: not JSON ({e})")))?;
        let meta = loaded["metadata"].clone();
        if !meta.is_object() {
            return Err(broken(format!("GET {url}: no metadata in the answer")));
        }
        let version = version_of(loaded["metadata-location"].as_str().unwrap_or(""));
        let table = Table { dir: dir.to_string(), version, meta };
        // Files are found under the location: it must be this folder.
        let want = dir.trim_end_matches('/');
        if !table.location().ends_with(&format!("/{want}")) {
            return Err(broken(format!(
                "the REST catalog's location of {} is {}, not this folder ({want}) on the data backend",
                identifier(dir).map(|(n, t)| format!("{n}.{t}")).unwrap_or_default(),
                table.location()
            )));
        }
        Ok(table)
    }

    /// Commits the snapshot `meta` makes current on `main` (the last of its
    /// `snapshots`), built on `base`.
    pub async fn commit(&self, base: &Table, meta: &Json) -> Result<Swap, IcebergError> {
        let broken = |problem: String| IcebergError::Table { table: base.dir.clone(), problem };
        let url = self.table_url(&base.dir)?;
        let (ns, t) = identifier(&base.dir).expect("checked by table_url");
        let snapshot = meta["snapshots"].as_array().and_then(|s| s.last()).cloned().unwrap_or(Json::Null);
        let id = snapshot["snapshot-id"].as_i64().ok_or_else(|| broken("the commit has no snapshot".into()))?;
        let body = json!({
            "identifier": {"namespace": [ns], "name": t},
            "requirements": [
                {"type": "assert-table-uuid", "uuid": base.uuid()},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": base.current_snapshot_id()},
            ],
            "updates": [
                {"action": "add-snapshot", "snapshot": snapshot},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id},
            ],
        });
        let sent = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("JSON serializes"))
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            // Unless it failed before connecting, the catalog may have
            // applied it.
            Err(e) if e.is_connect() => return Err(broken(format!("the REST catalog: POST {url}: {e}"))),
            Err(e) => return Ok(Swap::Unknown(format!("POST {url}: {e}"))),
        };
        let status = resp.status();
        let text = match resp.bytes().await {
            Ok(b) => String::from_utf8_lossy(&b).chars().take(2000).collect::<String>(),
            Err(e) if status.is_success() => return Ok(Swap::Unknown(format!("POST {url}: {status}, then {e}"))),
            Err(e) => e.to_string(),
        };
        match status.as_u16() {
            200..=299 => Ok(Swap::Won),
            409 => Ok(Swap::Lost),
            500..=599 => Ok(Swap::Unknown(format!("POST {url}: {status}: {text}"))),
            _ => Err(broken(format!("the REST catalog refused the commit: {status}: {text}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_name_their_namespace_and_table_and_metadata_files_their_version() {
        assert_eq!(identifier("db/s/t/"), Some(("s", "t")));
        assert_eq!(identifier("t/"), None);
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(version_of("/w/db/s/t/metadata/00012-0d5c2800-b4a4-42f4-8be9-2644b229965b.metadata.json"), 12);
    }
}
