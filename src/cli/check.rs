//! `compactd check`: report every anomaly in the tree (exit 1 if any); with
//! `--data`, also the orphans the `delta` executor left in Delta tables.
//! `compactd vacuum-orphans`: remove those orphans (opt-in, by age).

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Print a JSON array of {path, problem}.
    #[arg(long)]
    pub json: bool,
    /// Also check the Delta tables (`<db>/<schema>/<table>/_delta_log/`) of
    /// this data backend for orphans: files a `delta` unit wrote and never
    /// committed (see `compactd vacuum-orphans`).
    #[arg(long, value_name = "URI")]
    pub data: Option<String>,
    /// With --data: only this table (`db/schema/table`), not every table.
    #[arg(long, requires = "data", value_name = "DB/SCHEMA/TABLE")]
    pub table: Option<String>,
}

pub async fn run(store: store::Store, args: CheckArgs) -> anyhow::Result<i32> {
    let mut found = crate::check::check_tree(&store).await?;
    if let Some(data) = &args.data {
        let data = open_data(store.options(), data).await?;
        for table in crate::executor::delta::orphans::tables(&data, args.table.as_deref()).await? {
            for o in crate::executor::delta::orphans::find(&data, &table).await? {
                found.push(crate::check::Anomaly::new(
                    &o.path,
                    format!(
                        "orphan of the delta executor ({} bytes): no version of {table} names it; \
                         `compactd vacuum-orphans --data … --older-than 1h` removes it",
                        o.bytes
                    ),
                ));
            }
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
    /// backend's clock). Make it longer than the longest a unit runs (the
    /// executor timeout): a unit still writing has not committed yet.
    #[arg(long, value_parser = layouts::units::parse_duration_or_zero)]
    pub older_than: std::time::Duration,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn vacuum_orphans(options: &store::StoreOptions, args: VacuumOrphansArgs) -> anyhow::Result<i32> {
    let data = open_data(options, &args.data).await?;
    // The CLI edge: the one place this command reads the clock.
    let now = crate::clock::wall_time(&*crate::clock::SystemClock::shared());
    let now_ms = now.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let (mut removed, mut kept) = (0usize, 0usize);
    for table in crate::executor::delta::orphans::tables(&data, args.table.as_deref()).await? {
        let (old, young) = crate::executor::delta::orphans::vacuum(
            &data,
            &table,
            now_ms,
            args.older_than.as_millis() as i64,
            args.dry_run,
        )
        .await?;
        let verb = if args.dry_run { "would remove" } else { "removed" };
        for o in &old {
            println!("{verb} {} ({} bytes)", o.path, o.bytes);
        }
        for o in &young {
            println!("kept {} (younger than --older-than, or of unknown age)", o.path);
        }
        removed += old.len();
        kept += young.len();
    }
    eprintln!("{} orphans {}, {kept} kept", removed, if args.dry_run { "to remove" } else { "removed" });
    Ok(0)
}
