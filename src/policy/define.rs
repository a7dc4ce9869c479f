//! Policy definitions in the tree: apply (a new logged version, then the
//! main copy), list, show, pause, resume and delete. The write order is the job
//! definitions' (see `crate::jobs::define`): the log entry is an atomic
//! create of the next version number and is written before the main copy
//! is replaced, so a crash leaves the previous definition or the new one.

use layouts::formats::{self, decode, encode};
use layouts::policies::{self as paths, PolicyDefinition, PolicyPause};
use layouts::Name;
use serde::Serialize;
use store::{Created, Store};

use super::PolicyError;

/// Outcome of [`apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub policy: Name,
    pub version: u64,
    /// False when the file equals the current definition: nothing logged.
    pub changed: bool,
}

/// A policy as `policy list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyRow {
    #[serde(flatten)]
    pub definition: PolicyDefinition,
    pub paused: bool,
}

pub(crate) async fn read_json<T: for<'de> serde::Deserialize<'de>>(
    store: &Store,
    path: &str,
) -> Result<Option<T>, PolicyError> {
    match store.read_or_bad(path).await? {
        None => Ok(None),
        Some(Err(bad)) => Err(PolicyError::Malformed { path: path.to_string(), problem: bad.to_string() }),
        Some(Ok(b)) => {
            decode(&b).map(Some).map_err(|e| PolicyError::Malformed { path: path.to_string(), problem: e.to_string() })
        }
    }
}

fn same_rules(a: &PolicyDefinition, b: &PolicyDefinition) -> bool {
    let strip = |d: &PolicyDefinition| PolicyDefinition { version: 0, wall_ms: 0, by: String::new(), ..d.clone() };
    strip(a) == strip(b)
}

/// Registers `def` (from [`super::spec::parse`]) as the policy's current
/// definition.
pub async fn apply(store: &Store, mut def: PolicyDefinition, by: &str, wall_ms: u64) -> Result<Applied, PolicyError> {
    let current: Option<PolicyDefinition> = read_json(store, &paths::policy_main(&def.name)).await?;
    if let Some(cur) = &current {
        if same_rules(cur, &def) {
            return Ok(Applied { policy: def.name, version: cur.version, changed: false });
        }
    }
    def.by = by.to_string();
    def.wall_ms = wall_ms;
    // Every later read refuses a state file over the limit: so does apply,
    // before anything is written (with the widest version number).
    let bytes = encode(&PolicyDefinition { version: u64::MAX, ..def.clone() }).len();
    if bytes > formats::MAX_FILE_BYTES {
        return Err(PolicyError::TooLarge { policy: def.name.to_string(), bytes, limit: formats::MAX_FILE_BYTES });
    }
    def.version = logged_versions(store, &def.name).await?.last().copied().unwrap_or(0) + 1;
    // A concurrent apply took the number: take the next one; nothing logged
    // is ever overwritten.
    while store.create(&paths::policy_log(&def.name, def.version), encode(&def)).await? == Created::Exists {
        def.version += 1;
    }
    store.put(&paths::policy_main(&def.name), encode(&def)).await?;
    Ok(Applied { policy: def.name, version: def.version, changed: true })
}

pub async fn logged_versions(store: &Store, policy: &Name) -> Result<Vec<u64>, PolicyError> {
    let mut v: Vec<u64> = store
        .list(&paths::policy_log_dir(policy))
        .await?
        .iter()
        .filter_map(|e| paths::parse_version(e.name()))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// The current definition, `None` if never applied.
pub async fn current(store: &Store, policy: &Name) -> Result<Option<PolicyDefinition>, PolicyError> {
    read_json(store, &paths::policy_main(policy)).await
}

/// A logged version.
pub async fn version(store: &Store, policy: &Name, version: u64) -> Result<PolicyDefinition, PolicyError> {
    read_json(store, &paths::policy_log(policy, version))
        .await?
        .ok_or_else(|| PolicyError::VersionNotFound { policy: policy.to_string(), version })
}

pub async fn is_paused(store: &Store, policy: &Name) -> Result<bool, PolicyError> {
    Ok(store.exists(&paths::policy_paused(policy)).await?)
}

/// Every policy with its paused flag, by name. A policy whose main copy is
/// unreadable is reported in `bad`, not fatal: the others still run.
pub async fn list(store: &Store, bad: &mut Vec<PolicyError>) -> Result<Vec<PolicyRow>, PolicyError> {
    let mut out = vec![];
    for e in store.list(paths::POLICIES).await? {
        if !e.is_dir {
            continue;
        }
        let Ok(name) = Name::parse(e.name()) else { continue };
        let files = store.list(&paths::policy_dir(&name)).await?;
        let paused = files.iter().any(|f| f.name() == paths::PAUSED);
        if !files.iter().any(|f| f.name() == paths::POLICY_FILE) {
            continue;
        }
        match current(store, &name).await {
            Ok(Some(d)) if d.name == name => out.push(PolicyRow { definition: d, paused }),
            Ok(Some(d)) => bad.push(PolicyError::Malformed {
                path: paths::policy_main(&name),
                problem: format!("names policy {:?}, not its folder's {:?}", d.name.as_str(), name.as_str()),
            }),
            Ok(None) => {}
            Err(e) => bad.push(e),
        }
    }
    Ok(out)
}

/// Pauses a policy: the planner submits nothing for its tables (running
/// tasks finish). Idempotent.
pub async fn pause(store: &Store, policy: &Name, by: &str, wall_ms: u64) -> Result<(), PolicyError> {
    require(store, policy).await?;
    store.create(&paths::policy_paused(policy), encode(&PolicyPause { by: by.to_string(), wall_ms })).await?;
    Ok(())
}

/// Resumes a paused policy. Idempotent.
pub async fn resume(store: &Store, policy: &Name) -> Result<(), PolicyError> {
    require(store, policy).await?;
    store.delete(&paths::policy_paused(policy)).await?;
    Ok(())
}

/// Deletes a policy: its main copy first (from then on no planner round
/// owns its tables by it, and `list` no longer shows it), then its pause
/// and schedule marks. Its logged versions are kept (`show --version`; a
/// later apply of the name continues their numbering), and so are its
/// tables' decisions: a planner task already submitted finishes, and a
/// table another policy matches is planned by that one, which waits for
/// those tasks like for its own. Returns the deleted version.
pub async fn delete(store: &Store, policy: &Name) -> Result<u64, PolicyError> {
    let def = require(store, policy).await?;
    store.delete(&paths::policy_main(policy)).await?;
    store.delete(&paths::policy_paused(policy)).await?;
    store.delete(&paths::policy_last_pass(policy)).await?;
    Ok(def.version)
}

async fn require(store: &Store, policy: &Name) -> Result<PolicyDefinition, PolicyError> {
    current(store, policy).await?.ok_or_else(|| PolicyError::NotFound { policy: policy.to_string() })
}
