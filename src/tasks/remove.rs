//! Removing a layout 2 subtask folder or a layout 3 batch folder.
//!
//! A worker starts a unit of a batch that has no marker of its own unless
//! the batch is `Released`. A recursive delete goes in listing order, so
//! one cut short (the process killed, an error part way) could leave the
//! `Info` beside a unit whose claim and end were removed already, and that
//! unit would look unstarted and run again. So a batch is released first:
//! after that no unit starts from it whatever is removed next, and the
//! `Info` stays until the recursive delete reaches it, so the batch is
//! never taken for one whose `Info` vanished (which its manager would
//! cancel and wait on). What a removal cut short leaves, the manager's
//! next round or rebuild and the monitor's sweep remove again. A layout 2
//! subtask folder has no release: it goes in one recursive delete, and one
//! cut short can still leave its info beside a unit with no marker.

use layouts::v3;
use store::Store;

/// Removes the subtask or batch folder `dir` (`TaskAssigned/<node>/<name>/`),
/// a batch released first.
pub async fn remove_folder(store: &Store, dir: &str) -> store::Result<()> {
    let name = dir.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    if v3::parse_batch_name(name).is_some() {
        store.create(&format!("{dir}{}", v3::RELEASED), Vec::new()).await?;
    }
    store.delete_all(dir).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use layouts::{v2, NodeId, TaskId};

    #[tokio::test]
    async fn the_folder_goes_whole() {
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
