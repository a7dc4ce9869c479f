//! The memory backend's versions: its listings carry no metadata, so a
//! write counter per path stands in for S3's ETag, and in-process clusters
//! see the versions a real object store gives ([`crate::Entry::version`]).

#[derive(Debug, Default)]
pub(crate) struct MemVersions {
    next: std::sync::atomic::AtomicU64,
    by_path: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl MemVersions {
    pub(crate) fn bump(&self, path: &str) {
        let v = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.by_path.lock().expect("not poisoned").insert(path.to_string(), v);
    }

    pub(crate) fn remove(&self, path: &str) {
        let mut map = self.by_path.lock().expect("not poisoned");
        if path.ends_with('/') {
            map.retain(|k, _| !k.starts_with(path));
        } else {
            map.remove(path);
        }
    }

    pub(crate) fn get(&self, path: &str) -> Option<String> {
        self.by_path.lock().expect("not poisoned").get(path).map(|v| format!("w{v}"))
    }
}
