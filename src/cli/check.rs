//! `compactd check`: report every anomaly in the tree (exit 1 if any), and
//! on stderr the leftovers of finished tasks that the monitor's next sweep
//! removes (`pending sweep: …`, exit 0 for those alone) and Delta versions a
//! retention made unreadable as the table's own retention allows
//! (`expired: …`; exit 0 for those alone); with
//! `--data`, also audit the Delta and Iceberg tables of a data backend,
//! table by table: orphans the `delta` and `iceberg` executors left, Delta
//! versions and the current Iceberg snapshot whose active files are
//! missing, and tables that cannot be read (named; the others are still
//! checked). A REST catalog's Iceberg table is read through the catalog
//! the tree's tasks named for it (`rest_tables`). `compactd vacuum-orphans`: remove those orphans (opt-in, by
//! age, never one whose task is not finished).
//!
//! Both read the scheduler tree (`--root`) to tell a finished task's
//! orphans from the outputs of a unit still running: a file whose task is
//! not finished (or whose state cannot be read) is neither reported nor
//! removed. A task the tree no longer has is looked up in the archive
//! (`Scheduler/Compress/`); one in neither (archived longer ago than the
//! archive retention, another cluster's, a hand-run `__merge`) is reported
//! by `check` and kept by `vacuum-orphans` unless `--unknown-tasks-finished`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use layouts::TaskId;

use crate::executor::delta::{audit, orphans};
use crate::executor::iceberg::orphans as iceberg_orphans;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Print a JSON array of {path, problem}.
    #[arg(long)]
    pub json: bool,
    /// Also audit the Delta tables (`<db>/<schema>/<table>/_delta_log/`) and
    /// Iceberg tables (`metadata/`, and REST tables the tree's tasks name)
    /// of this data backend: orphans (files a `delta` or `iceberg` unit of a
    /// finished task wrote and never committed, see `compactd
    /// vacuum-orphans`), versions whose active files are missing, tables
    /// that cannot be read.
    #[arg(long, value_name = "URI")]
    pub data: Option<String>,
    /// With --data: only this table (`db/schema/table`), not every table.
    #[arg(long, requires = "data", value_name = "DB/SCHEMA/TABLE")]
    pub table: Option<String>,
}

pub async fn run(store: store::Store, args: CheckArgs) -> anyhow::Result<i32> {
    let report = crate::check::check_tree_report(&store).await?;
    let mut found = report.anomalies;
    // Leftovers of finished tasks the sweep removes: said, not failed on.
    for p in &report.pending_sweep {
        eprintln!("pending sweep: {p}");
    }
    if let Some(uri) = &args.data {
        let data = open_data(store.options(), uri).await?;
        let mut fates = Fates::new(&store);
        // The CLI edge: the one place this command reads the clock (which
        // removed files the tables' own retention has expired).
        let now = crate::clock::wall_time(&*crate::clock::SystemClock::shared());
        let now_ms = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        for table in orphans::tables(&data, args.table.as_deref()).await? {
            if args.table.is_some() && iceberg_orphans::is_table(&data, &table).await {
                continue;
            }
            let a = match audit::audit(&data, &table, now_ms).await {
                Ok(a) => a,
                Err(e) => {
                    found.push(layouts::Anomaly::new(&table, format!("Delta table not checked: {e}")));
                    continue;
                }
            };
            if !a.expired.is_empty() {
                // Not damage: the table's own retention allowed a VACUUM
                // to delete them, and Delta's log outlives its files.
                eprintln!(
                    "expired: {table}: Delta versions {} cannot be read: files they name were removed since, longer \
                     ago than the table's delta.deletedFileRetentionDuration, and deleted by a retention",
                    audit::show(&a.expired)
                );
            }
            if !a.damaged.is_empty() {
                found.push(layouts::Anomaly::new(
                    &table,
                    format!(
                        "Delta versions {} name active files that do not exist ({} missing, e.g. {}): readers of \
                         those versions fail",
                        audit::show(&a.damaged),
                        a.missing_files,
                        a.examples.join(", ")
                    ),
                ));
            }
            if !a.unrebuildable.is_empty() {
                found.push(layouts::Anomaly::new(
                    &table,
                    format!(
                        "Delta versions {} cannot be rebuilt: a commit is missing and no whole checkpoint follows it",
                        audit::show(&a.unrebuildable)
                    ),
                ));
            }
            DELTA.name_orphans(&mut fates, &a.orphans, &table, uri, &mut found).await;
        }
    }
    if let Some(uri) = &args.data {
        let data = open_data(store.options(), uri).await?;
        let mut fates = Fates::new(&store);
        let rest = rest_tables(&store).await?;
        for table in iceberg_tables(&data, args.table.as_deref(), &rest).await? {
            let audited = match catalog_of(&rest, &table).await {
                Ok(cat) => iceberg_orphans::audit(&data, &cat, &table).await,
                Err(e) => Err(e),
            };
            let a = match audited {
                Ok(a) => a,
                Err(e) => {
                    found.push(layouts::Anomaly::new(&table, format!("Iceberg table not checked: {e}")));
                    continue;
                }
            };
            if let (Some(snapshot), false) = (a.snapshot, a.missing.is_empty()) {
                let examples: Vec<&str> = a.missing.iter().take(3).map(String::as_str).collect();
                found.push(layouts::Anomaly::new(
                    &table,
                    format!(
                        "Iceberg snapshot {snapshot}, the current one, names live files that do not exist ({} \
                         missing, e.g. {}): readers of it fail",
                        a.missing.len(),
                        examples.join(", ")
                    ),
                ));
            }
            ICEBERG.name_orphans(&mut fates, &a.orphans, &table, uri, &mut found).await;
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else if found.is_empty() {
        println!("ok: no anomalies in {}", store.uri());
    } else {
        for a in &found {
            println!("{a}");
        }
        eprintln!("{} anomalies", found.len());
    }
    Ok(if found.is_empty() { 0 } else { 1 })
}

async fn open_data(options: &store::StoreOptions, uri: &str) -> anyhow::Result<store::Store> {
    store::Store::open_data_with_options(&store::RootUri::parse(uri)?, options)
        .await
        .with_context(|| format!("--data {uri}"))
}

/// What the tree says of the task that wrote an output.
#[derive(Debug, Clone)]
enum Fate {
    /// Done, Failed or Cancel: none of its units can commit any more.
    Finished(String),
    /// Init, Running, being submitted, or a state that cannot be read: a
    /// unit may still commit its outputs.
    Unfinished(String),
    /// Neither under `Scheduler/` nor in the archive.
    Unknown(String),
}

/// Task fates, each read once.
struct Fates<'a> {
    tree: &'a store::Store,
    known: BTreeMap<String, Fate>,
    /// The archived tasks, read at the first task `Scheduler/` lacks.
    archived: Option<Result<BTreeMap<TaskId, String>, String>>,
}

impl<'a> Fates<'a> {
    fn new(tree: &'a store::Store) -> Self {
        Fates { tree, known: BTreeMap::new(), archived: None }
    }

    async fn of(&mut self, task: Option<&str>) -> Fate {
        let Some(task) = task else {
            return Fate::Unknown("its name carries no task id".into());
        };
        if let Some(f) = self.known.get(task) {
            return f.clone();
        }
        let fate = self.read(task).await;
        self.known.insert(task.to_string(), fate.clone());
        fate
    }

    async fn read(&mut self, task: &str) -> Fate {
        let Ok(id) = TaskId::parse(task) else {
            return Fate::Unknown(format!("{task} is not a task id (a hand-run `__merge`?)"));
        };
        let dir = match crate::tasks::read_dir(self.tree, &id).await {
            Ok(d) => d,
            Err(e) => return Fate::Unfinished(format!("the state of task {id} could not be read: {e}")),
        };
        match dir.state {
            Some(s) if s.is_terminal() => return Fate::Finished(format!("task {id} is {}", s.as_str())),
            Some(s) => return Fate::Unfinished(format!("task {id} is {}", s.as_str())),
            None if dir.has_info || !dir.terms.is_empty() => {
                return Fate::Unfinished(format!("task {id} is being submitted"));
            }
            None => {}
        }
        if self.archived.is_none() {
            let read = crate::monitor::tasks::read_history(self.tree).await;
            self.archived = Some(
                read.map(|(tasks, _)| tasks.into_iter().map(|t| (t.info.id, t.state.as_str().to_string())).collect())
                    .map_err(|e| e.to_string()),
            );
        }
        match self.archived.as_ref().expect("read above") {
            Err(e) => Fate::Unfinished(format!("task {id} is not under Scheduler/ and the archive is unreadable: {e}")),
            Ok(a) => match a.get(&id) {
                Some(state) => Fate::Finished(format!("task {id} was archived {state}")),
                None => Fate::Unknown(format!(
                    "task {id} is neither under Scheduler/ nor in the archive of {}",
                    self.tree.uri()
                )),
            },
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct VacuumOrphansArgs {
    /// The data backend holding the Delta tables.
    #[arg(long, value_name = "URI")]
    pub data: String,
    /// Only this table (`db/schema/table`); default every Delta table found
    /// as `<db>/<schema>/<table>/_delta_log/`.
    #[arg(long, value_name = "DB/SCHEMA/TABLE")]
    pub table: Option<String>,
    /// Remove only orphans last written longer ago than this (by the
    /// backend's clock). Outputs of tasks that are not finished are kept
    /// whatever the age; make it longer than twice the longest a unit runs
    /// (the executor timeout, `run --command-timeout`) all the same.
    #[arg(long, value_parser = layouts::units::parse_duration_or_zero)]
    pub older_than: std::time::Duration,
    /// Also remove orphans of tasks the tree (`--root`) has neither under
    /// `Scheduler/` nor in its archive (archived longer ago than the
    /// archive retention, or run by hand): only with the tree of every
    /// compactd that writes to these tables.
    #[arg(long)]
    pub unknown_tasks_finished: bool,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn vacuum_orphans(store: store::Store, args: VacuumOrphansArgs) -> anyhow::Result<i32> {
    let data = open_data(store.options(), &args.data).await?;
    // The CLI edge: the one place this command reads the clock.
    let now = crate::clock::wall_time(&*crate::clock::SystemClock::shared());
    let now_ms = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let mut run =
        Vacuum { fates: Fates::new(&store), args: &args, now_ms, removed: 0, kept: 0, failed: BTreeSet::new() };
    for table in orphans::tables(&data, args.table.as_deref()).await? {
        if args.table.is_some() && iceberg_orphans::is_table(&data, &table).await {
            continue;
        }
        let found = orphans::find(&data, &table).await;
        let vacuum = |chosen| orphans::vacuum(&data, &table, chosen, args.dry_run);
        run.table(&DELTA, &table, found, vacuum).await;
    }
    // Iceberg tables: the same rules, their own references.
    let rest = rest_tables(&store).await?;
    for table in iceberg_tables(&data, args.table.as_deref(), &rest).await? {
        let cat = match catalog_of(&rest, &table).await {
            Ok(cat) => cat,
            Err(e) => {
                run.table(&ICEBERG, &table, Err(e), |_| async { Ok((vec![], vec![])) }).await;
                continue;
            }
        };
        let found = iceberg_orphans::find(&data, &cat, &table).await;
        let vacuum = |chosen| iceberg_orphans::vacuum(&data, &cat, &table, chosen, args.dry_run);
        run.table(&ICEBERG, &table, found, vacuum).await;
    }
    let Vacuum { removed, kept, failed, .. } = run;
    eprintln!(
        "{removed} orphans {}, {kept} kept, {} tables not vacuumed",
        if args.dry_run { "to remove" } else { "removed" },
        failed.len()
    );
    Ok(if failed.is_empty() { 0 } else { 1 })
}

/// The tables the tree's tasks (under `Scheduler/` and in the archive)
/// compact through a REST catalog (`iceberg.rest-uri`), by folder, with the
/// newest such task's catalog: a REST table's current version is the
/// catalog's, not its folder's, so what its snapshots name is read from
/// the catalog the tasks named.
async fn rest_tables(tree: &store::Store) -> anyhow::Result<BTreeMap<String, String>> {
    use crate::executor::iceberg::rest::REST_URI_PARAM;
    let mut found: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut note = |info: &layouts::formats::TaskInfo| {
        let Some(uri) = info.run.params.get(REST_URI_PARAM).filter(|u| !u.is_empty()) else { return };
        let dir = crate::tasks::table_dir(&info.db_name, &info.schema_name, &info.table_name);
        if found.get(&dir).is_none_or(|(at, _)| info.id.unix_ms >= *at) {
            found.insert(dir, (info.id.unix_ms, uri.clone()));
        }
    };
    for id in crate::tasks::list_ids(tree).await? {
        // An unreadable task is `check`'s anomaly already.
        if let Ok(info) = crate::tasks::read_info(tree, &id).await {
            note(&info);
        }
    }
    // An unreadable archive is `check`'s anomaly; a table only it names
    // is then reported as not checked.
    if let Ok((archived, _)) = crate::monitor::tasks::read_history(tree).await {
        for t in &archived {
            note(&t.info);
        }
    }
    Ok(found.into_iter().map(|(dir, (_, uri))| (dir, uri)).collect())
}

/// The Iceberg tables of the data root (a folder with `metadata/`
/// versions), and the REST tables the tree names there (or just `only`).
async fn iceberg_tables(
    data: &store::Store,
    only: Option<&str>,
    rest: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let mut out: BTreeSet<String> = iceberg_orphans::tables(data, only).await?.into_iter().collect();
    let only = only.map(|t| format!("{}/", t.trim_end_matches('/')));
    out.extend(rest.keys().filter(|t| only.as_ref().is_none_or(|o| o == *t)).cloned());
    Ok(out.into_iter().collect())
}

/// The catalog of the table at `dir`: the REST catalog the tree's tasks
/// named, else its folder's versions.
async fn catalog_of(
    rest: &BTreeMap<String, String>,
    dir: &str,
) -> Result<crate::executor::iceberg::catalog::Catalog, crate::executor::iceberg::IcebergError> {
    use crate::executor::iceberg::{catalog::Catalog, rest::Rest};
    Ok(match rest.get(dir) {
        Some(uri) => Catalog::Rest(Rest::connect(uri).await?),
        None => Catalog::default(),
    })
}

/// What differs between the table formats' orphans: who wrote them, what
/// names a file, and how an orphan's task is read from its name.
struct Format {
    executor: &'static str,
    /// What of the table names its files: a Delta version, an Iceberg
    /// snapshot.
    names: &'static str,
    task_of: fn(&orphans::Orphan) -> Option<&str>,
}

const DELTA: Format = Format { executor: "delta", names: "version", task_of: orphans::Orphan::task };

const ICEBERG: Format =
    Format { executor: "iceberg", names: "snapshot", task_of: |o| iceberg_orphans::task_of(&o.path) };

impl Format {
    /// Reports each of a table's orphans whose task is finished or unknown
    /// (a unit of an unfinished task may still commit its own).
    async fn name_orphans(
        &self,
        fates: &mut Fates<'_>,
        found: &[orphans::Orphan],
        table: &str,
        uri: &str,
        out: &mut Vec<layouts::Anomaly>,
    ) {
        for o in found {
            let why = match fates.of((self.task_of)(o)).await {
                Fate::Unfinished(_) => continue,
                Fate::Finished(why) | Fate::Unknown(why) => why,
            };
            out.push(layouts::Anomaly::new(
                &o.path,
                format!(
                    "orphan of the {} executor ({} bytes; {why}): no {} of {table} names it; `compactd \
                     vacuum-orphans --data {uri} --older-than 2h` removes it (2h: at least twice the executor \
                     timeout, `run --command-timeout`, default 1h, plus any clock skew)",
                    self.executor, o.bytes, self.names
                ),
            ));
        }
    }
}

/// One `vacuum-orphans` run over the tables of every format.
struct Vacuum<'a> {
    fates: Fates<'a>,
    args: &'a VacuumOrphansArgs,
    now_ms: i64,
    removed: usize,
    kept: usize,
    failed: BTreeSet<String>,
}

impl Vacuum<'_> {
    /// Keeps the orphans whose task may still commit them, whose task is
    /// unknown (unless told), and young ones; `vacuum` deletes the rest
    /// unless the table, read again, names them.
    async fn table<E: std::fmt::Display, F>(
        &mut self,
        format: &Format,
        table: &str,
        found: Result<Vec<orphans::Orphan>, E>,
        vacuum: impl FnOnce(Vec<orphans::Orphan>) -> F,
    ) where
        F: std::future::Future<Output = Result<(Vec<orphans::Orphan>, Vec<orphans::Orphan>), E>>,
    {
        let found = match found {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{table}: not vacuumed: {e}");
                self.failed.insert(table.to_string());
                return;
            }
        };
        let older_than_ms = self.args.older_than.as_millis() as i64;
        let mut chosen = vec![];
        for o in found {
            let keep = match self.fates.of((format.task_of)(&o)).await {
                Fate::Unfinished(why) => Some(format!("{why}: its unit may still commit it")),
                Fate::Unknown(why) if !self.args.unknown_tasks_finished => {
                    Some(format!("{why}; --unknown-tasks-finished removes it"))
                }
                Fate::Finished(_) | Fate::Unknown(_) => None,
            };
            let keep = keep.or_else(|| {
                let old = o.modified_ms.is_some_and(|m| self.now_ms - m > older_than_ms);
                (!old).then(|| "younger than --older-than, or of unknown age".to_string())
            });
            match keep {
                Some(why) => {
                    println!("kept {} ({why})", o.path);
                    self.kept += 1;
                }
                None => chosen.push(o),
            }
        }
        let verb = if self.args.dry_run { "would remove" } else { "removed" };
        match vacuum(chosen).await {
            Ok((gone, named)) => {
                for o in &gone {
                    println!("{verb} {} ({} bytes)", o.path, o.bytes);
                }
                for o in &named {
                    println!("kept {} (a {} committed since names it)", o.path, format.names);
                }
                self.removed += gone.len();
                self.kept += named.len();
            }
            Err(e) => {
                eprintln!("{table}: not vacuumed: {e}");
                self.failed.insert(table.to_string());
            }
        }
    }
}
