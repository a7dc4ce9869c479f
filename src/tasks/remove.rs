//! Removing a layout 2 subtask folder or a layout 3 batch folder: its info
//! first, then the rest.
//!
//! A worker starts a unit only from a folder whose info its listing shows,
//! and a unit of a batch with no marker of its own looks unstarted. A
//! recursive delete goes in listing order, so one cut short (the process
//! killed, an error part way) could leave the info beside a unit whose
//! claim and end were removed already, and that unit would run again.
//! Removed first, the info takes every unit of the folder out of the
//! workers' reach at once (a worker kills what still runs from a folder
//! without its info, as from one that is gone). What a removal cut short
//! leaves is a folder without its info: the manager's rebuild and the
//! monitor's sweep remove it, and `check` reports it as pending.

use layouts::{v2, v3};
use store::Store;

/// Removes the subtask or batch folder `dir` (`TaskAssigned/<node>/<name>/`),
/// its info first.
pub async fn remove_folder(store: &Store, dir: &str) -> store::Result<()> {
    let name = dir.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    let info = if v3::parse_batch_name(name).is_some() { v3::INFO } else { v2::TASK_INFO };
    store.delete(&format!("{dir}{info}")).await?;
    store.delete_all(dir).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::{NodeId, TaskId};

    #[tokio::test]
    async fn the_info_goes_first_and_the_folder_after() {
        let store = Store::memory().await;
        let node = NodeId::parse("n1").unwrap();
        let task = TaskId::parse("0435dc00.10000000.00000000.0").unwrap();
        let batch = v3::batch_name(&task, 1, v3::BatchNo::new(1, 1));
        let sub = v2::subtask_name(&task, 1, 0, 1);
        for (dir, info) in [
            (v3::batch_dir(&node, &batch), v3::batch_info(&node, &batch)),
            (v2::subtask_dir(&node, &sub), v2::subtask_info(&node, &sub)),
        ] {
            store.create(&info, b"{}".to_vec()).await.unwrap();
            store.create(&format!("{dir}u0.a1.Success"), vec![]).await.unwrap();
            remove_folder(&store, &dir).await.unwrap();
            assert!(store.list(&dir).await.unwrap().is_empty(), "{dir}");
        }
    }
}
