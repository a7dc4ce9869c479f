//! The commit unit of an `iceberg` task: one `replace` snapshot of what
//! the task's partition units staged (see the module doc of [`super`]).
//!
//! Invariants:
//! - Only the staged record of a unit its manager recorded `Done` is
//!   committed, the newest attempt's.
//! - Each unit is validated against the snapshot the commit builds on (its
//!   inputs live, no position delete in its partition, the same table and
//!   format version); one that fails is abandoned alone, its outputs
//!   deleted.
//! - Manifests and the manifest list are written under names unique to
//!   the task, round, attempt and try before the metadata's next version is
//!   created; a refused commit deletes them only once the table, reloaded,
//!   shows no snapshot of theirs (a refusal can answer a request sent again
//!   after the catalog applied it: then it is this try's commit), and
//!   builds again on that version.
//! - When the outcome of the create is unknown (an error), nothing is
//!   deleted: a rerun finds the snapshot by its marker, or commits.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{json, Value as Json};
use store::Store;

use super::catalog::{self, Swap};
use super::manifest::{self, Commit, Entry, Written};
use super::{Head, IcebergError, IcebergJob, Outcome, StagedUnit, MAX_COMMIT_TRIES};
use crate::executor::merge::SUPERSEDED;

/// The staged units a commit takes: per unit index, its newest attempt's
/// record, and the outputs of the records it does not take.
async fn staged(job: &IcebergJob) -> Result<(Vec<StagedUnit>, Vec<String>), IcebergError> {
    let (tree, task) = job.tree()?;
    let round = job.merge.round;
    // Per-unit outcome files, and batch records (layouts::v3).
    let outcomes = crate::tasks::outcomes::read_dir_with_outcomes(tree, &task).await?;
    let done: BTreeSet<u32> = outcomes.recorded(round).into_iter().filter(|(_, ok)| *ok).map(|(u, _)| u).collect();
    let mut newest: BTreeMap<u32, (u32, String)> = BTreeMap::new();
    let mut others = vec![];
    for e in tree.list(&layouts::v2::staged_dir(&task)).await? {
        let Some((r, u, a)) = layouts::v2::parse_staged_unit(e.name()) else { continue };
        if r != round {
            continue;
        }
        if !done.contains(&u) {
            others.push(e.path);
            continue;
        }
        match newest.get(&u) {
            Some((best, _)) if *best >= a => others.push(e.path),
            _ => {
                if let Some((_, old)) = newest.insert(u, (a, e.path.clone())) {
                    others.push(old);
                }
            }
        }
    }
    let read = |path: String| async move {
        let b = tree.read(&path).await?.ok_or_else(|| job.broken(format!("{path} vanished")))?;
        serde_json::from_slice::<StagedUnit>(&b).map_err(|e| job.broken(format!("{path} does not parse: {e}")))
    };
    let mut taken = vec![];
    for (_, (_, path)) in newest {
        taken.push(read(path).await?);
    }
    let mut stale_outputs = vec![];
    for path in others {
        if let Ok(s) = read(path).await {
            stale_outputs.extend(s.outputs.into_iter().map(|o| o.store_path));
        }
    }
    Ok((taken, stale_outputs))
}

/// The snapshot of this round's commit in the table's history, if any:
/// (its id, whether this attempt made it).
fn own_snapshot(table: &super::table::Table, job: &IcebergJob) -> Option<(i64, bool)> {
    table.snapshots().iter().find_map(|s| {
        let sum = &s["summary"];
        let mine = sum["compactd.task"].as_str() == Some(job.merge.task.as_str())
            && sum["compactd.round"].as_str() == Some(job.merge.round.to_string().as_str());
        mine.then(|| {
            let this = sum["compactd.attempt"].as_str() == Some(job.merge.attempt.to_string().as_str());
            (s["snapshot-id"].as_i64().unwrap_or(0), this)
        })
    })
}

/// Why `unit` cannot be committed on `head`, if it cannot.
fn invalid(head: &Head, live: &HashMap<&str, &Entry>, unit: &StagedUnit) -> Option<String> {
    if head.table.uuid() != unit.table_uuid {
        return Some(format!("the table was replaced (uuid {} is now {})", unit.table_uuid, head.table.uuid()));
    }
    if head.table.format_version() != unit.format_version {
        return Some(format!("the format version changed to {}", head.table.format_version()));
    }
    if let Some(gone) = unit.inputs.iter().find(|i| !live.contains_key(i.as_str())) {
        return Some(format!("input {gone} is no longer live (deleted or rewritten since)"));
    }
    // Equality deletes committed since apply to the outputs too (they keep
    // the data sequence number the unit read); a position delete names an
    // input's path, which the outputs do not have: one committed after the
    // read in the unit's partition may delete rows of its inputs that the
    // outputs still hold.
    head.live().map(|(_, e)| e).filter(|e| e.content == 1 && e.sequence_number > unit.sequence_number).find_map(|e| {
        (manifest::unit_key(e.spec_id, &e.partition) == super::group::parse(&unit.unit).0)
            .then(|| format!("position delete file {} was committed in its partition since", e.file_path))
    })
}

/// The delete files this commit removes: the position deletes the units
/// found spent (alone, or together with the other groups of their
/// partition), and each equality delete every live data file of which
/// the commit rewrites, by units that read it and so applied it.
fn spent_deletes(head: &Head, units: &[&StagedUnit], inputs: &HashSet<String>) -> HashSet<String> {
    let live: HashSet<String> = head.live().map(|(_, e)| e.key()).collect();
    let mut spent: HashSet<String> =
        units.iter().flat_map(|u| &u.spent_deletes).filter(|d| live.contains(d.as_str())).cloned().collect();
    // A position delete naming files of several groups: spent when every
    // group that holds one of them commits here too.
    for (d, rest) in units.iter().flat_map(|u| &u.shared_deletes) {
        if live.contains(d.as_str()) && rest.iter().all(|r| inputs.contains(r)) {
            spent.insert(d.clone());
        }
    }
    let data: Vec<&Entry> = head.live().map(|(_, e)| e).filter(|e| e.content == 0).collect();
    for d in head.live().map(|(_, e)| e).filter(|e| e.content == 2) {
        let applies: Vec<&&Entry> = data.iter().filter(|e| super::deletes::applies(head, d, e)).collect();
        let read_by_all = units
            .iter()
            .filter(|u| applies.iter().any(|e| u.inputs.contains(&e.file_path)))
            .all(|u| d.sequence_number <= u.sequence_number);
        if !applies.is_empty() && applies.iter().all(|e| inputs.contains(&e.file_path)) && read_by_all {
            spent.insert(d.file_path.clone());
        }
    }
    spent
}

/// A positive 63-bit snapshot id from the table, task, round, attempt and
/// try, unused in the table.
fn snapshot_id(head: &Head, job: &IcebergJob, try_no: u32) -> i64 {
    let seed = format!("{}/{}/{}/{}/{try_no}", head.table.uuid(), job.merge.task, job.merge.round, job.merge.attempt);
    let used: HashSet<i64> = head.table.snapshots().iter().filter_map(|s| s["snapshot-id"].as_i64()).collect();
    let mut h = manifest::fnv64(&seed);
    loop {
        h = h.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ manifest::fnv64(&format!("{seed}/{h}"));
        let id = (h >> 1) as i64;
        if id > 0 && !used.contains(&id) {
            return id;
        }
    }
}

pub async fn run(store: &Store, job: &IcebergJob) -> Result<(Outcome, BTreeMap<String, u64>), IcebergError> {
    let dir = job.table().to_string();
    job.catalog.check_writers(store, &dir)?;
    let (units, stale_outputs) = staged(job).await?;
    let mut head = Head::load(store, &job.catalog, &dir).await?;
    let mut stats = BTreeMap::from([("version_before".to_string(), head.table.version)]);
    if let Some(s) = &head.snapshot {
        stats.insert("snapshot_before".into(), s.id as u64);
    }
    if let Some((id, _)) = own_snapshot(&head.table, job) {
        // An earlier attempt committed and died before reporting (or
        // before writing the hint).
        job.catalog.committed(store, &dir, head.table.version).await;
        stats.insert("snapshot_after".into(), id as u64);
        return Ok((Outcome::AlreadyCommitted { snapshot: id }, stats));
    }
    if units.is_empty() {
        stats.insert("version_after".into(), head.table.version);
        return Ok((Outcome::NothingToDo, stats));
    }
    let mut retries = 0u32;
    // The table's own limit where it sets one: its owner's word on how
    // long a writer may contend.
    let max_retries = head
        .table
        .properties()
        .get("commit.retry.num-retries")
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(MAX_COMMIT_TRIES);
    loop {
        let live: HashMap<&str, &Entry> =
            head.live().filter(|(_, e)| e.content == 0).map(|(_, e)| (e.file_path.as_str(), e)).collect();
        let (ok, abandoned): (Vec<&StagedUnit>, Vec<(&StagedUnit, String)>) = {
            let (mut ok, mut bad) = (vec![], vec![]);
            // Two units never replace one file: the second would add its
            // rows again. Groups are disjoint by construction; this holds
            // it whatever the unit list says (a partition named twice).
            let mut taken: HashSet<&str> = HashSet::new();
            for u in &units {
                let why = invalid(&head, &live, u).or_else(|| {
                    u.inputs.iter().find(|i| taken.contains(i.as_str())).map(|i| {
                        format!("input {i} is another unit's too (a partition planned twice); left to that unit")
                    })
                });
                match why {
                    None => {
                        taken.extend(u.inputs.iter().map(String::as_str));
                        ok.push(u)
                    }
                    Some(why) => bad.push((u, why)),
                }
            }
            (ok, bad)
        };
        for (u, why) in &abandoned {
            tracing::warn!(table = dir, unit = u.unit, "unit abandoned: {why}");
        }
        if ok.is_empty() {
            remove_outputs(store, abandoned.iter().flat_map(|(u, _)| &u.outputs).map(|o| &o.store_path)).await;
            let why = abandoned.iter().map(|(u, w)| format!("{}: {w}", u.unit)).collect::<Vec<_>>().join("; ");
            stats.insert("abandoned_units".into(), abandoned.len() as u64);
            stats.insert("version_after".into(), head.table.version);
            return Ok((Outcome::Abandoned { why }, stats));
        }
        let built = build(store, job, &head, &live, &ok, retries).await?;
        if !job.merge.delay_before_commit.is_zero() {
            // A test knob (a kill or a race must land before the commit).
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(job.merge.delay_before_commit).await;
        }
        fence(store, job, &built).await?;
        let swap = job.catalog.commit(store, &head.table, &built.meta).await?;
        match landed(store, job, &dir, swap, &built, head.table.version).await? {
            Landed::Yes { version: n } => {
                if matches!(job.catalog, catalog::Catalog::Files { .. }) {
                    remove_dropped_metadata(store, &head.table, &built.meta).await;
                }
                // Never a file the snapshot names, whoever else staged it.
                let kept: HashSet<&str> = ok.iter().flat_map(|u| &u.outputs).map(|o| o.store_path.as_str()).collect();
                let others = abandoned.iter().flat_map(|(u, _)| &u.outputs).map(|o| &o.store_path);
                remove_outputs(store, others.chain(&stale_outputs).filter(|p| !kept.contains(p.as_str()))).await;
                stats.insert("version_after".into(), n);
                stats.insert("snapshot_after".into(), built.snapshot_id as u64);
                stats.insert("commit_retries".into(), retries as u64);
                stats.insert("committed_units".into(), ok.len() as u64);
                stats.insert("abandoned_units".into(), abandoned.len() as u64);
                for k in ["files_in", "files_out", "bytes_in", "bytes_out", "rows_in", "rows_out"] {
                    let sum: u64 = ok.iter().map(|u| u.stats.get(k).copied().unwrap_or(0)).sum();
                    stats.insert(format!("committed_{k}"), sum);
                }
                let outcome = Outcome::Committed {
                    version: n,
                    snapshot: built.snapshot_id,
                    units: ok.len(),
                    abandoned: abandoned.len(),
                    retries,
                };
                return Ok((outcome, stats));
            }
            Landed::No(now) => {
                // The table shows no snapshot of this try: no version names
                // its manifests.
                remove_outputs(store, built.files.iter()).await;
                retries += 1;
                if retries > max_retries {
                    return Err(job.broken(format!(
                        "{max_retries} versions were taken by other writers while committing (at most \
                         commit.retry.num-retries); nothing committed"
                    )));
                }
                head = *now;
                if let Some((id, _)) = own_snapshot(&head.table, job) {
                    stats.insert("snapshot_after".into(), id as u64);
                    stats.insert("version_after".into(), head.table.version);
                    return Ok((Outcome::AlreadyCommitted { snapshot: id }, stats));
                }
            }
        }
    }
}

/// Whether a commit landed.
enum Landed {
    /// The table's version that holds it.
    Yes { version: u64 },
    /// It did not: the table as the catalog has it now.
    No(Box<Head>),
}

/// Whether the commit of `built` on version `base` landed: by the
/// catalog's answer `swap` when it is a plain yes, else by the table
/// reloaded. A refusal is not taken at its word: a REST request sent twice
/// (a proxy's or an HTTP client's retry) is refused with 409 once the first
/// was applied, and deleting this try's manifests on the refusal alone
/// would delete what the current snapshot names. Only [`Landed::No`], the
/// table seen without the snapshot, lets the caller delete them.
async fn landed(
    store: &Store,
    job: &IcebergJob,
    dir: &str,
    swap: Swap,
    built: &Built,
    base: u64,
) -> Result<Landed, IcebergError> {
    let unknown = match swap {
        Swap::Won => return Ok(Landed::Yes { version: base + 1 }),
        Swap::Lost => None,
        Swap::Unknown(why) => {
            tracing::warn!(table = dir, "the commit's outcome is unknown ({why}): reloading the table");
            Some(why)
        }
    };
    let now = Head::load(store, &job.catalog, dir).await.map_err(|e| {
        job.broken(match &unknown {
            Some(why) => format!(
                "the commit's outcome is unknown ({why}) and the table cannot be reloaded ({e}); nothing was \
                 deleted: a rerun finds the snapshot or commits"
            ),
            None => format!(
                "the catalog refused the commit and the table cannot be reloaded ({e}) to tell whether an earlier \
                 send of it was applied; nothing was deleted: a rerun finds the snapshot or commits"
            ),
        })
    })?;
    if now.table.snapshots().iter().any(|s| s["snapshot-id"].as_i64() == Some(built.snapshot_id)) {
        if unknown.is_none() {
            tracing::warn!(
                table = dir,
                snapshot = built.snapshot_id,
                "the catalog refused the commit, yet the table holds its snapshot (the request was sent twice?): \
                 committed"
            );
        }
        return Ok(Landed::Yes { version: now.table.version });
    }
    match unknown {
        None => Ok(Landed::No(Box::new(now))),
        Some(why) => Err(job.broken(format!(
            "the commit's outcome is unknown ({why}) and the table does not show it; nothing was deleted: a rerun \
             finds the snapshot or commits"
        ))),
    }
}

/// Right before the create: the subtask is still this node's, and every
/// output is still there (an operator's `vacuum-orphans` may have removed
/// one: then nothing is committed).
async fn fence(store: &Store, job: &IcebergJob, built: &Built) -> Result<(), IcebergError> {
    if let Some((sched, folder)) = &job.merge.fence {
        if !crate::executor::merge::fence_holds(sched, folder).await? {
            remove_outputs(store, built.files.iter()).await;
            return Err(job.broken(SUPERSEDED));
        }
    }
    for o in &built.outputs {
        if !store.exists(o).await? {
            remove_outputs(store, built.files.iter()).await;
            return Err(job.broken(format!(
                "output {o} vanished before the commit (removed by `vacuum-orphans`?); nothing committed"
            )));
        }
    }
    Ok(())
}

async fn remove_outputs(store: &Store, paths: impl Iterator<Item = &String>) {
    for p in paths {
        if let Err(e) = store.delete(p).await {
            tracing::warn!(path = p, error = %e, "could not remove a file no snapshot names");
        }
    }
}

/// A snapshot ready to commit.
struct Built {
    snapshot_id: i64,
    meta: Json,
    /// The manifests and manifest list written (store paths).
    files: Vec<String>,
    /// The outputs it adds (store paths).
    outputs: Vec<String>,
}

async fn build(
    store: &Store,
    job: &IcebergJob,
    head: &Head,
    live: &HashMap<&str, &Entry>,
    units: &[&StagedUnit],
    try_no: u32,
) -> Result<Built, IcebergError> {
    let t = &head.table;
    let broken = |p: String| job.broken(p);
    let (Some(parent), Some(list)) = (&head.snapshot, &head.list) else {
        return Err(broken("the table has no current snapshot any more".into()));
    };
    let v2 = t.format_version() >= 2;
    let sequence_number = if v2 { t.last_sequence_number() + 1 } else { 0 };
    let snapshot_id = snapshot_id(head, job, try_no);
    let mut sync = [0u8; 16];
    sync[..8].copy_from_slice(&snapshot_id.to_le_bytes());
    sync[8..].copy_from_slice(&manifest::fnv64(&job.merge.task).to_le_bytes());
    let commit = Commit { table: t, snapshot_id, sequence_number, list, sync };
    let stem = format!(
        "{}{}compactd-{}-r{}-a{}-t{try_no}",
        t.dir,
        catalog::METADATA_DIR,
        job.merge.task,
        job.merge.round,
        job.merge.attempt
    );
    let inputs: HashSet<String> = units.iter().flat_map(|u| u.inputs.iter().cloned()).collect();
    let spent = spent_deletes(head, units, &inputs);
    let removed: HashSet<String> = inputs.iter().chain(&spent).cloned().collect();
    let mut records = vec![];
    // Whether each record is of a manifest this commit writes.
    let mut new = vec![];
    let mut written: Vec<Written> = vec![];
    // New files first (as Java lists them), one manifest per spec, made
    // from a manifest of that spec holding an input.
    let mut by_spec: BTreeMap<i32, Vec<&StagedUnit>> = BTreeMap::new();
    for u in units {
        by_spec.entry(u.spec_id).or_default().push(u);
    }
    for (k, (spec, us)) in by_spec.iter().enumerate() {
        let first = live[us[0].inputs[0].as_str()];
        let mi = head
            .manifests
            .iter()
            .position(|m| m.entries.iter().any(|e| e.is_live() && e.file_path == first.file_path))
            .ok_or_else(|| broken(format!("no manifest of spec {spec} holds {}", first.file_path)))?;
        let mut outs = vec![];
        for u in us {
            let template = live[u.inputs[0].as_str()];
            for o in &u.outputs {
                outs.push((o.uri.clone(), o.size, &o.metrics, u.sequence_number, template));
            }
        }
        let path = format!("{stem}-m{k}.avro");
        let w = commit.added(&head.manifests[mi], &list.manifests[mi], &outs, &path).map_err(broken)?;
        records.push(w.record.clone());
        new.push(true);
        written.push(w);
    }
    let mut changed_partitions = BTreeSet::new();
    for (i, (m, mref)) in head.manifests.iter().zip(&list.manifests).enumerate() {
        let holds = m.entries.iter().any(|e| e.is_live() && removed.contains(&e.key()));
        if !holds {
            records.push(mref.record.clone());
            new.push(false);
            continue;
        }
        for e in m.entries.iter().filter(|e| e.is_live() && removed.contains(&e.key())) {
            changed_partitions.insert(manifest::unit_key(e.spec_id, &e.partition));
        }
        let path = format!("{stem}-r{i}.avro");
        let w = commit.rewrite(m, mref, &removed, &path).map_err(broken)?;
        records.push(w.record.clone());
        new.push(true);
        written.push(w);
    }
    let lineage = if t.format_version() >= 3 {
        let first = t.meta["next-row-id"].as_i64().unwrap_or(0);
        let next = commit.assign_row_ids(&mut records, &new, first).map_err(broken)?;
        Some((first, next))
    } else {
        None
    };
    let list_bytes = commit.list(parent.id, &records).map_err(broken)?;
    let list_path = format!(
        "{}{}snap-{snapshot_id}-1-compactd-{}-r{}-a{}-t{try_no}.avro",
        t.dir,
        catalog::METADATA_DIR,
        job.merge.task,
        job.merge.round,
        job.merge.attempt
    );
    let mut files = vec![];
    for w in &written {
        store.put(&w.path, w.bytes.clone()).await?;
        files.push(w.path.clone());
    }
    store.put(&list_path, list_bytes).await?;
    files.push(list_path.clone());
    let spent: Vec<&Entry> = head.live().map(|(_, e)| e).filter(|e| spent.contains(&e.key())).collect();
    let summary = summary(job, head, units, live, &spent, changed_partitions.len());
    let mut meta = metadata(job, head, snapshot_id, sequence_number, &t.file_uri(&list_path), summary);
    if let Some((first, next)) = lineage {
        if let Some(snap) = meta["snapshots"].as_array_mut().and_then(|s| s.last_mut()) {
            snap["first-row-id"] = json!(first);
            snap["added-rows"] = json!(next - first);
        }
        meta["next-row-id"] = json!(next);
    }
    let outputs = units.iter().flat_map(|u| u.outputs.iter().map(|o| o.store_path.clone())).collect();
    Ok(Built { snapshot_id, meta, files, outputs })
}

/// The snapshot summary: what readers show of a `replace`, the totals
/// carried from the parent, and compactd's marker.
fn summary(
    job: &IcebergJob,
    head: &Head,
    units: &[&StagedUnit],
    live: &HashMap<&str, &Entry>,
    spent: &[&Entry],
    changed: usize,
) -> serde_json::Map<String, Json> {
    let inputs: Vec<&Entry> = units.iter().flat_map(|u| u.inputs.iter().map(|i| live[i.as_str()])).collect();
    let outputs: Vec<_> = units.iter().flat_map(|u| &u.outputs).collect();
    let (added_rows, deleted_rows) = (
        outputs.iter().map(|o| o.metrics.record_count as i64).sum::<i64>(),
        inputs.iter().map(|e| e.record_count).sum::<i64>(),
    );
    let (added_size, mut removed_size) =
        (outputs.iter().map(|o| o.size as i64).sum::<i64>(), inputs.iter().map(|e| e.file_size).sum::<i64>());
    let mut s = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        s.insert(k.to_string(), Json::String(v));
    };
    put("operation", "replace".into());
    put("added-data-files", outputs.len().to_string());
    put("deleted-data-files", inputs.len().to_string());
    put("added-records", added_rows.to_string());
    put("deleted-records", deleted_rows.to_string());
    put("added-files-size", added_size.to_string());
    put("removed-files-size", removed_size.to_string());
    put("changed-partition-count", changed.to_string());
    let (pos, eq): (Vec<&Entry>, Vec<&Entry>) = spent.iter().partition(|e| e.content == 1);
    let dvs = pos.iter().filter(|e| e.is_dv()).count();
    let (pos_rows, eq_rows) =
        (pos.iter().map(|e| e.record_count).sum::<i64>(), eq.iter().map(|e| e.record_count).sum::<i64>());
    if !spent.is_empty() {
        // As Java's SnapshotSummary names what a rewrite removes.
        put("removed-delete-files", spent.len().to_string());
        put("removed-position-delete-files", (pos.len() - dvs).to_string());
        put("removed-dvs", dvs.to_string());
        put("removed-equality-delete-files", eq.len().to_string());
        put("removed-position-deletes", pos_rows.to_string());
        put("removed-equality-deletes", eq_rows.to_string());
        removed_size += spent.iter().map(|e| e.file_size).sum::<i64>();
        put("removed-files-size", removed_size.to_string());
    }
    let parent = head
        .snapshot
        .as_ref()
        .and_then(|p| head.table.snapshots().iter().find(|s| s["snapshot-id"].as_i64() == Some(p.id)))
        .map(|s| s["summary"].clone())
        .unwrap_or(Json::Null);
    let total = |k: &str| parent[k].as_str().and_then(|v| v.parse::<i64>().ok());
    let delta = [
        ("total-records", added_rows - deleted_rows),
        ("total-files-size", added_size - removed_size),
        ("total-data-files", outputs.len() as i64 - inputs.len() as i64),
        ("total-delete-files", -(spent.len() as i64)),
        ("total-position-deletes", -pos_rows),
        ("total-equality-deletes", -eq_rows),
    ];
    for (k, d) in delta {
        if let Some(v) = total(k) {
            put(k, (v + d).to_string());
        }
    }
    put("compactd.task", job.merge.task.clone());
    put("compactd.round", job.merge.round.to_string());
    put("compactd.attempt", job.merge.attempt.to_string());
    put("engine-name", "compactd".into());
    put("engine-version", env!("CARGO_PKG_VERSION").into());
    s
}

/// The table's next metadata: the new snapshot current on `main`, the
/// logs extended; every key a commit does not own kept as it is.
fn metadata(
    job: &IcebergJob,
    head: &Head,
    snapshot_id: i64,
    sequence_number: i64,
    list_uri: &str,
    summary: serde_json::Map<String, Json>,
) -> Json {
    let t = &head.table;
    let mut m = t.meta.clone();
    let last_updated = m["last-updated-ms"].as_i64().unwrap_or(0);
    let parent_ts = head.snapshot.as_ref().map(|s| s.timestamp_ms).unwrap_or(0);
    // Not before the version read: this clock may lag its writers'.
    let now = (job.clock.wall_ms() as i64).max(last_updated).max(parent_ts);
    let mut snap = json!({
        "snapshot-id": snapshot_id,
        "timestamp-ms": now,
        "summary": summary,
        "manifest-list": list_uri,
    });
    if let Some(p) = &head.snapshot {
        snap["parent-snapshot-id"] = json!(p.id);
    }
    if let Some(id) = m["current-schema-id"].as_i64() {
        snap["schema-id"] = json!(id);
    }
    let v2 = t.format_version() >= 2;
    if v2 {
        snap["sequence-number"] = json!(sequence_number);
        m["last-sequence-number"] = json!(sequence_number);
    }
    push(&mut m, "snapshots", snap);
    push(&mut m, "snapshot-log", json!({"timestamp-ms": now, "snapshot-id": snapshot_id}));
    m["current-snapshot-id"] = json!(snapshot_id);
    if !m["refs"].is_object() {
        m["refs"] = json!({});
    }
    if !m["refs"]["main"].is_object() {
        m["refs"]["main"] = json!({"type": "branch"});
    }
    m["refs"]["main"]["snapshot-id"] = json!(snapshot_id);
    m["last-updated-ms"] = json!(now);
    log_previous(&mut m, t, last_updated);
    m
}

/// Names `t`'s metadata file in the next version's `metadata-log` (as of
/// `last_updated`, its own time), trimmed to the table's
/// `write.metadata.previous-versions-max` (default 100) as Java does.
pub(super) fn log_previous(m: &mut Json, t: &super::table::Table, last_updated: i64) {
    let previous = t.file_uri(&catalog::version_path(&t.dir, t.version));
    push(m, "metadata-log", json!({"timestamp-ms": last_updated, "metadata-file": previous}));
    let max = t
        .properties()
        .get("write.metadata.previous-versions-max")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(100)
        .max(1);
    if let Some(log) = m["metadata-log"].as_array_mut() {
        if log.len() > max {
            log.drain(..log.len() - max);
        }
    }
}

/// With the table's `write.metadata.delete-after-commit.enabled`, the
/// metadata files `base`'s log held and the committed `meta`'s no longer
/// does (past `write.metadata.previous-versions-max`) are deleted, as
/// Java's `deleteRemovedMetadataFiles` does after its commits. Best
/// effort: a file left is one more old version, which readers skip.
pub(super) async fn remove_dropped_metadata(store: &Store, base: &super::table::Table, meta: &Json) {
    let enabled = base.properties().get("write.metadata.delete-after-commit.enabled").cloned();
    if !enabled.is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return;
    }
    let files = |m: &Json| -> HashSet<String> {
        m["metadata-log"]
            .as_array()
            .map(|l| l.iter().filter_map(|e| e["metadata-file"].as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let kept = files(meta);
    for uri in files(&base.meta).difference(&kept) {
        // Only the table's own metadata files, whatever a log names.
        let Ok(path) = base.store_path(uri) else { continue };
        let own = path.strip_prefix(&format!("{}{}", base.dir, catalog::METADATA_DIR));
        if !own.is_some_and(|name| !name.contains('/') && name.ends_with(".metadata.json")) {
            continue;
        }
        if let Err(e) = store.delete(&path).await {
            tracing::warn!(path, error = %e, "could not delete a metadata file past previous-versions-max");
        }
    }
}

fn push(m: &mut Json, key: &str, v: Json) {
    match m[key].as_array_mut() {
        Some(a) => a.push(v),
        None => m[key] = json!([v]),
    }
}
