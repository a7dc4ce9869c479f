//! The text format of the merge: newline-delimited files concatenated in
//! groups of at most the target size. Staging only; the commit protocol is
//! the parent's.

use super::*;

/// Stages the concatenation of small text files, in greedy groups in name
/// order of at most the target size (a group of one file is left alone).
pub(super) async fn stage(store: &Store, job: &MergeJob, staging: &str) -> Result<Staged, MergeError> {
    let small: Vec<(String, u64)> =
        data_files(store, &job.dir).await?.into_iter().filter(|(_, len)| *len < job.target_size).collect();
    let mut groups: Vec<Vec<(String, u64)>> = vec![];
    let mut size = 0;
    for f in small {
        if groups.is_empty() || size + f.1 > job.target_size {
            groups.push(vec![]);
            size = 0;
        }
        size += f.1;
        groups.last_mut().expect("pushed above").push(f);
    }
    groups.retain(|g| g.len() > 1);
    let mut staged = Staged::default();
    let (mut bytes_in, mut bytes_out, mut rows) = (0u64, 0u64, 0u64);
    for (k, group) in groups.iter().enumerate() {
        let mut buf = Vec::with_capacity(group.iter().map(|f| f.1 as usize + 1).sum());
        for (path, len) in group {
            job.io.take(*len).await?;
            let bytes =
                store.read(path).await?.ok_or_else(|| job.broken(format!("input {path} vanished while staging")))?;
            bytes_in += bytes.len() as u64;
            buf.extend_from_slice(&bytes);
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                buf.push(b'\n');
            }
        }
        rows += buf.iter().filter(|b| **b == b'\n').count() as u64;
        bytes_out += buf.len() as u64;
        let path = format!("{staging}{k}");
        job.io.take(buf.len() as u64).await?;
        store.put(&path, buf).await?;
        staged.outputs.push(Output {
            staged: path,
            final_path: format!("{}compacted-{}-r{}-{k}", job.dir, job.task, job.round),
            inputs: group.iter().map(|f| f.0.clone()).collect(),
        });
    }
    if !staged.outputs.is_empty() {
        let files_in = groups.iter().map(Vec::len).sum::<usize>() as u64;
        staged.stats = stats(files_in, staged.outputs.len() as u64, bytes_in, bytes_out, rows, rows);
    }
    Ok(staged)
}
