//! The tables as the planner last saw them (`compactd tables`, the status
//! page), and what it would submit now (`compactd plan --dry-run`).

use futures::TryStreamExt;
use layouts::policies::{self as paths, TableSummary};
use serde::Serialize;
use store::Store;

use super::define::{self, read_json};
use super::planner::{dry_run, DryRun};
use super::PolicyError;

/// One table of `compactd tables`.
#[derive(Debug, Clone, Serialize)]
pub struct TableView {
    /// `<db>/<schema>/<table>`.
    pub table: String,
    pub paused: bool,
    /// The policy the summary names is deleted: nothing plans the table
    /// any more (unless another policy matches it: its next pass rewrites
    /// the summary).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub policy_deleted: bool,
    #[serde(flatten)]
    pub summary: TableSummary,
}

/// The first `limit` table summaries in the tree, by name; unreadable ones
/// in `bad`.
pub async fn tables(store: &Store, limit: usize, bad: &mut Vec<PolicyError>) -> Result<Vec<TableView>, PolicyError> {
    let mut bad_rows = vec![];
    let paused: std::collections::BTreeMap<String, bool> = define::list(store, &mut bad_rows)
        .await?
        .into_iter()
        .map(|r| (r.definition.name.to_string(), r.paused))
        .collect();
    // A policy that could not be read is not a deleted one.
    let unreadable: Vec<String> = bad_rows
        .iter()
        .filter_map(|e| match e {
            PolicyError::Malformed { path, .. } => {
                path.strip_prefix(paths::POLICIES).and_then(|p| p.split('/').next()).map(str::to_string)
            }
            _ => None,
        })
        .collect();
    bad.extend(bad_rows);
    let mut paths_found = vec![];
    let mut s = store.list_stream(paths::TABLES, true);
    while let Some(e) = s.try_next().await? {
        // <db>/<schema>/<table>/Summary, not the decisions below it.
        let Some(rel) = e.path.strip_prefix(paths::TABLES) else { continue };
        if rel.split('/').count() == 4 && rel.ends_with(&format!("/{}", paths::SUMMARY)) {
            paths_found.push(e.path);
        }
    }
    paths_found.sort();
    paths_found.truncate(limit);
    let mut out = vec![];
    for p in paths_found {
        match read_json::<TableSummary>(store, &p).await {
            Ok(Some(summary)) => out.push(TableView {
                table: format!("{}/{}/{}", summary.db, summary.schema, summary.table),
                paused: paused.get(&summary.policy).copied().unwrap_or(false),
                policy_deleted: !paused.contains_key(&summary.policy) && !unreadable.contains(&summary.policy),
                summary,
            }),
            Ok(None) => {}
            Err(e) => bad.push(e),
        }
    }
    out.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(out)
}

/// What the planner would submit now, and why (nothing is written).
pub async fn plan(store: &Store, data: &Store, wall_ms: u64) -> Result<DryRun, PolicyError> {
    dry_run(store, data, wall_ms).await
}
