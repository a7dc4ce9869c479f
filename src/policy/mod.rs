//! Table policies: compaction that runs itself.
//!
//! - [`spec`]: the policy file (TOML) an operator writes, checked;
//! - [`define`]: policies in the tree, versioned like job definitions
//!   (apply, list, show, pause, resume);
//! - [`planner`]: the monitor's duty that finds due partitions and submits
//!   their tasks exactly once, with [`share`] (how many of the cluster's
//!   free slots each table gets), `track` (what is in flight and what
//!   waits, between visits) and `owner` (which policy owns a table);
//! - [`view`]: the tables as the planner last saw them (`compactd tables`,
//!   the status page), with why and until when, and `plan --dry-run`.
//!
//! Which policy owns a table: of every policy's patterns that match
//! `<db>/<schema>/<table>`, the most specific ([`spec::specificity`]: more
//! literal characters, then fewer wildcards); a tie goes to the policy
//! whose name sorts first. A paused policy still owns its tables (they are
//! not handed to a less specific one while it is paused). The tree and its
//! formats are in `layouts::policies`.

mod decide;
pub mod define;
mod owner;
pub mod planner;
pub mod retention;
pub mod share;
pub mod spec;
mod track;
pub mod view;
mod visit;

use std::collections::BTreeMap;
use std::sync::Arc;

use layouts::policies::PolicyDefinition;
use layouts::{Name, NodeId};
use store::Store;

pub use define::{Applied, PolicyRow};
pub use planner::{Planner, PlannerConfig};
pub use share::Capacity;

pub use layouts::formats::TARGET_SIZE_PARAM;

/// What one round did.
#[derive(Debug, Default)]
pub struct PlanReport {
    pub tables_visited: u64,
    pub requests: u64,
    /// `<db>/<schema>/<table>/<partition> <task>` per submission.
    pub submitted: Vec<String>,
    /// Managers of submitted tasks, to poke.
    pub managers: Vec<NodeId>,
    pub errors: Vec<String>,
    pub pass_ended: bool,
    /// Tasks in flight the round saw end.
    pub ended: u64,
    /// Due partitions wait and slots are free, but the round's budget ran
    /// out: the planner runs again soon.
    pub more: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{path}: not a valid policy: {problem}")]
    File { path: String, problem: String },
    #[error("{path}: {problem}")]
    Malformed { path: String, problem: String },
    #[error("policy {policy:?} is not defined (`compactd policy list` shows the policies)")]
    NotFound { policy: String },
    #[error("policy {policy:?} has no logged version {version}")]
    VersionNotFound { policy: String, version: u64 },
    #[error(
        "policy {policy:?} would be {bytes} bytes in the tree, over the {limit}-byte limit of a state file that \
         every reader refuses (nothing was written; name fewer table patterns)"
    )]
    TooLarge { policy: String, bytes: usize, limit: usize },
}

/// A table and the policy that owns it.
#[derive(Debug, Clone)]
pub struct Owned {
    pub db: Name,
    pub schema: Name,
    pub table: Name,
    pub policy: Arc<PolicyDefinition>,
    pub paused: bool,
    /// The pattern that won.
    pub pattern: String,
    /// What the folders above the table are (its schema and database
    /// folders, the data root), from the listings that found it: a table
    /// inside another format's table is never planned.
    pub above: crate::table::Findings,
}

/// The tables on the data backend that some policy matches, each with its
/// owner ([`owner::Patterns`]). Listings: the data root, then each matching
/// database and schema. Yields to the runtime between folders, so that a
/// large tree does not hold a thread.
pub async fn assign(data: &Store, rows: &[PolicyRow]) -> Result<Vec<Owned>, PolicyError> {
    let pats = owner::Patterns::new(rows);
    if pats.is_empty() {
        return Ok(vec![]);
    }
    let mut out = vec![];
    let (dbs, root) = folders(data, "").await?;
    for db in dbs {
        if !pats.any_in_db(db.as_str()) {
            continue;
        }
        let (schemas, in_db) = folders(data, &format!("{db}/")).await?;
        for schema in schemas {
            tokio::task::yield_now().await;
            if !pats.any_in_schema(db.as_str(), schema.as_str()) {
                continue;
            }
            let (tables, in_schema) = folders(data, &format!("{db}/{schema}/")).await?;
            let mut above = root.clone();
            above.extend(in_db.clone());
            above.extend(in_schema);
            for (i, table) in tables.into_iter().enumerate() {
                if i % 1024 == 1023 {
                    tokio::task::yield_now().await;
                }
                if let Some(p) = pats.owner(db.as_str(), schema.as_str(), table.as_str()) {
                    out.push(Owned {
                        db: db.clone(),
                        schema: schema.clone(),
                        table,
                        policy: p.policy.clone(),
                        paused: p.paused,
                        pattern: p.text.clone(),
                        above: above.clone(),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Folder names under `dir` on the data backend that are names and not
/// hidden or reserved (`_…`, `.…`), and what the folder itself is as a
/// folder above tables ([`crate::table::Detector::above`]).
async fn folders(data: &Store, dir: &str) -> Result<(Vec<Name>, crate::table::Findings), PolicyError> {
    let entries = data.list(dir).await?;
    let mut d = crate::table::Detector::above();
    for e in &entries {
        d.observe_entry(dir, e);
    }
    // A candidate (a `metadata/` folder: Iceberg?) is looked into.
    for sub in d.to_look_into() {
        for e in data.list(&format!("{dir}{sub}")).await? {
            d.observe_entry(dir, &e);
        }
    }
    let names = entries
        .into_iter()
        .filter(|e| e.is_dir && !e.name().starts_with(['_', '.']))
        .filter_map(|e| Name::parse(e.name()).ok())
        .collect();
    Ok((names, d.finish()))
}

/// An instant for people (UTC, RFC 3339).
pub(crate) fn at(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
}

/// Policies by name (the planner's and the views' lookup).
pub fn by_name(rows: &[PolicyRow]) -> BTreeMap<&str, &PolicyRow> {
    rows.iter().map(|r| (r.definition.name.as_str(), r)).collect()
}

/// Whether the policy's executor commits a task's partitions together
/// (`iceberg`: one snapshot for the task): then a table has one task at a
/// time, its share of the slots goes to one task whose units are the
/// partitions, and partitions that come due while it runs wait for it to
/// end. A second task would race the first's commit, each rewriting the
/// table's whole metadata; a `delta` unit commits its partition alone.
pub fn one_task_per_table(p: &PolicyDefinition) -> bool {
    p.executor == "iceberg"
}

#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;
