//! The tripwire: `TaskUpgradeLock/UpgradeState.json` with `state: running`
//! and a `tripwire` field, armed by the monitor of a tree whose layout in
//! force is 3 or above (layouts/README.md, "The tripwire").
//!
//! Why this file: the releases before it never read `Registry/Layout.*`,
//! so a layout marker cannot stop them, and one of them elected on a
//! layout-4 tree would re-dispatch units that layout-4 batches run (command
//! units twice at once) and merge partitions without their turns. Their
//! one start-up check of a file they did not write is this upgrade gate:
//! `running` makes `compactd run` exit 1 before it writes anything, and
//! prints the file's `by`, which therefore says what happened. They decode
//! the file without refusing unknown fields, so the `tripwire` field that
//! tells the releases since that no upgrade is under way costs them
//! nothing.

use layouts::formats::{self, Tripwire, UpgradePhase, UpgradeState};
use layouts::v2;
use store::{Created, Store};

use super::{read_state, MigrateError};

/// What [`arm`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// Written now.
    Now,
    /// A tripwire of this layout or above stands already.
    Already,
    /// Left alone: an upgrade is half done or finalizing (its own marker
    /// stops the older releases), or the file cannot be read (`check`
    /// names it; overwriting a file nobody can read loses what it was).
    Left,
}

/// What the older releases print, as the writer of the upgrade they think
/// is half done.
pub fn message(layout: u32, monitor: &str) -> String {
    format!(
        "NOT AN UPGRADE: a tripwire armed by the monitor {monitor} of a newer compactd, \
         because layout {layout} is in force on this tree and this release cannot take part in it. \
         Start the newer release on this node instead; do not run this release's `upgrade` here \
         (layouts/README.md, \"The tripwire\")"
    )
}

/// Arms the tripwire for `layout` unless it stands already, or an upgrade's
/// own marker stands in its place. One read, and one write when it arms: a
/// create where no file is, a put over a finished upgrade's marker or a
/// tripwire of a lower layout.
pub async fn arm(store: &Store, layout: u32, wall_ms: u64, monitor: &str) -> Result<Armed, MigrateError> {
    let wire = UpgradeState {
        state: UpgradePhase::Running,
        wall_ms,
        by: message(layout, monitor),
        v1_tasks: 0,
        tripwire: Some(Tripwire { layout }),
    };
    let current = match read_state(store).await {
        Ok(s) => s,
        Err(MigrateError::Marker { .. }) => return Ok(Armed::Left),
        Err(e) => return Err(e),
    };
    match current {
        None => {
            // Created, never put: an upgrade that starts at this moment
            // writes its own marker, which a put here would hide.
            Ok(match store.create(v2::UPGRADE_STATE, formats::encode(&wire)).await? {
                Created::Created => Armed::Now,
                Created::Exists => Armed::Left,
            })
        }
        Some(s) => match (s.tripwire, s.state) {
            (Some(t), _) if t.layout >= layout => Ok(Armed::Already),
            (Some(_), _) | (None, UpgradePhase::Complete) => {
                store.put(v2::UPGRADE_STATE, formats::encode(&wire)).await?;
                Ok(Armed::Now)
            }
            (None, UpgradePhase::Running | UpgradePhase::Finalizing) => Ok(Armed::Left),
        },
    }
}
