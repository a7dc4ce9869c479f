//! Reads: one `getBlockLocations` when the reader opens, then ranges from
//! the DataNodes.

use std::sync::Arc;

use hdfs_native::file::FileReader;
use opendal::raw::oio;
use opendal::{Buffer, Result};

use super::{to_error, Core, Method};

pub struct HdfsReader {
    core: Arc<Core>,
    path: String,
}

impl HdfsReader {
    pub(super) fn new(core: Arc<Core>, path: &str) -> Self {
        HdfsReader { core, path: path.to_string() }
    }
}

impl oio::PositionRead for HdfsReader {
    type Handle = FileReader;

    async fn open(&self) -> Result<FileReader> {
        self.core.count(Method::GetBlockLocations);
        let abs = self.core.abs(&self.path);
        self.core.client.read(&abs).await.map_err(|e| to_error(e, "getBlockLocations").with_context("path", &self.path))
    }

    async fn read_at(file: &FileReader, offset: u64, size: usize) -> Result<Buffer> {
        let len = file.file_length() as u64;
        if size == 0 || offset >= len {
            return Ok(Buffer::new());
        }
        let size = (size as u64).min(len - offset) as usize;
        file.read_range(offset as usize, size).await.map(Buffer::from).map_err(|e| to_error(e, "read"))
    }
}
