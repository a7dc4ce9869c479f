//! The integration tests that set this process's own environment (the
//! Hadoop client in the store reads `HADOOP_CONF_DIR` and the Kerberos
//! variables from it), apart from `tests/all/` whose tests share one
//! process: here one at a time, each putting back what it set.

#[path = "../all/common/mod.rs"]
mod common;

mod hdfs_ha;
mod hdfs_kerberos;

use std::sync::{Mutex, MutexGuard};

/// Held for the whole of a test: the variables it sets are back as they
/// were when it drops.
pub struct Env {
    saved: Vec<(String, Option<std::ffi::OsString>)>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Env {
    pub fn take() -> Env {
        static ONE: Mutex<()> = Mutex::new(());
        Env { saved: Vec::new(), _one_at_a_time: ONE.lock().unwrap_or_else(|e| e.into_inner()) }
    }

    pub fn set(&mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) {
        if !self.saved.iter().any(|(k, _)| k == key) {
            self.saved.push((key.to_string(), std::env::var_os(key)));
        }
        std::env::set_var(key, value);
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for (k, v) in self.saved.drain(..).rev() {
            match v {
                Some(v) => std::env::set_var(&k, v),
                None => std::env::remove_var(&k),
            }
        }
    }
}
