//! Deterministic generator of large v1 trees, for tests and the benchmark
//! (`compactd upgrade --generate-fixture N --seed S`).
//!
//! Task `i` of a tree is a pure function of `(seed, i)`, so trees are
//! produced as a stream and never held in memory. Shape, per task: a node of
//! `xcloud00_9876`…`xcloud15_9876`, a unique timestamp, a state (40% Init,
//! 30% Assigned, 15% Cancel, 15% Done), the seed's fields as YAML lines (one
//! task in three with the legacy `ResulttInfo` spelling); each Assigned task
//! has 1–3 subtasks on other workers, in mixed states (Success, Failed,
//! Running, Init, or no marker).

use futures::StreamExt;
use store::{Created, Store, StoreError};

#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub tasks: u64,
    pub seed: u64,
}

pub const NODES: u64 = 16;
const BASE_MS: u64 = 1_600_000_000_000;

struct Rng(u64);
impl Rng {
    fn new(seed: u64, i: u64) -> Rng {
        Rng(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
    /// splitmix64
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed's task-info fields as YAML lines.
#[allow(clippy::too_many_arguments)]
pub fn task_info_text(
    id: &str,
    state: &str,
    repeat: bool,
    subtasks: bool,
    repeat_count: u64,
    success: u64,
    failed: u64,
    legacy_spelling: bool,
    db: &str,
    table: &str,
    partition: &str,
) -> String {
    let result = if legacy_spelling { "ResulttInfo" } else { "ResultInfo" };
    format!(
        "CompactTaskId: \"{id}\"\nCompactTaskState: \"{state}\"\nrepeat_flag: {repeat}\nsub_task_flag: {subtasks}\n\
         RepeatInfo:\n  repeatCount: {repeat_count}\n  repeatInterval: {}\n{result}:\n  successCount: {success}\n  failedCount: {failed}\n\
         db_name: {db}\nschema_name: public\ntable_name: {table}\npartition_name: {partition}\n",
        if repeat { 3_600_000 } else { 0 }
    )
}

/// The files of task `i` (its main task file, then its subtasks' files):
/// paths relative to the root and contents.
pub fn task_files(spec: &Spec, i: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(spec.seed, i);
    let node = format!("xcloud{:02}_9876", i % NODES);
    let ms = BASE_MS + i * 1000 + rng.below(1000);
    let (suffix, state) = match rng.below(100) {
        0..40 => ("", "Init"),
        40..70 => (".Assigned", "Assigned"),
        70..85 => (".Cancel", "Cancel"),
        _ => (".Done", "Done"),
    };
    let id = format!("compct.{node}.0.{ms}");
    let repeat = rng.below(5) == 0;
    let legacy = i.is_multiple_of(3);
    let db = format!("db{}", rng.below(8));
    let table = format!("t{i}");
    let nsub = if state == "Assigned" { 1 + rng.below(3) } else { 0 };
    let mut out = vec![(
        format!("Compaction/Scheduler/{id}{suffix}"),
        task_info_text(
            &id,
            state,
            repeat,
            nsub > 0,
            rng.below(4),
            rng.below(10),
            rng.below(3),
            legacy,
            &db,
            &table,
            "",
        )
        .into_bytes(),
    )];
    for k in 1..=nsub {
        let worker = format!("xcloud{:02}_9876", (i + k) % NODES);
        let sub = format!("compct.{node}.{k}.{ms}");
        let dir = format!("Compaction/TaskAssigned/{worker}/{sub}");
        let status = match rng.below(5) {
            0 => Some("Success"),
            1 => Some("Failed"),
            2 => Some("Running"),
            3 => Some("Init"),
            _ => None,
        };
        if let Some(s) = status {
            out.push((format!("{dir}/Status.{s}"), Vec::new()));
        }
        out.push((
            format!("{dir}/TaskInfo"),
            task_info_text(
                &sub,
                status.unwrap_or("Init"),
                false,
                false,
                0,
                0,
                0,
                legacy,
                &db,
                &table,
                &format!("dt=2021-04-{k:02}"),
            )
            .into_bytes(),
        ));
    }
    out
}

/// Writes the tree of `spec` with at most `concurrency` creates in flight;
/// existing files are left as they are. Returns the number of files.
pub async fn write(store: &Store, spec: &Spec, concurrency: usize) -> Result<u64, StoreError> {
    let spec = *spec;
    let files = futures::stream::iter(0..spec.tasks)
        .flat_map(move |i| futures::stream::iter(task_files(&spec, i)))
        .map(|(path, bytes)| async move { store.create(&path, bytes).await })
        .buffer_unordered(concurrency.max(1));
    futures::pin_mut!(files);
    let mut n = 0;
    while let Some(r) = files.next().await {
        let _: Created = r?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::v1;

    #[test]
    fn generated_files_parse() {
        let spec = Spec { tasks: 300, seed: 7 };
        let mut states = std::collections::HashSet::new();
        for i in 0..spec.tasks {
            let files = task_files(&spec, i);
            assert_eq!(files, task_files(&spec, i), "deterministic");
            let (path, bytes) = &files[0];
            let f = v1::V1TaskFile::parse(path.rsplit('/').next().unwrap()).unwrap();
            states.insert(f.state);
            let info = v1::parse_task_info(bytes).unwrap();
            assert_eq!(info.task_id.unwrap(), f.name.to_string());
            for (p, b) in &files[1..] {
                if p.ends_with("/TaskInfo") {
                    assert!(v1::parse_task_info(b).unwrap().partition_name.is_some());
                }
            }
        }
        assert_eq!(states.len(), 4);
    }
}
