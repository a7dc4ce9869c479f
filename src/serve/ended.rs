//! Task ends a client waits on: the wake-up that `submit --wait` gets.
//!
//! A task's end is a file its manager writes; a client waiting on it reads
//! the task now and then. Between two looks it may instead ask the
//! manager's listener (`GET /v1/tasks/{id}/ended?wait_ms=N`, on the wake-up
//! face) to answer as soon as the manager has seen the task end, or after
//! `N` ms. The answer is a hint, like a poke: the client then reads the
//! task's files, which decide. A lost, late or forged answer costs a look,
//! never a wrong result; a manager handed the task over, or of a version
//! without the route, leaves the client to its looks.
//!
//! Bounds: the ends this node remembers are the last [`REMEMBERED`]; a wait
//! lasts at most [`MAX_WAIT`] and holds one of the listener's connection
//! slots (at most `MAX_CONNECTIONS`, each closed after `CONNECTION_LIFE`), so
//! waiting clients cannot hold the node or its pokes.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use layouts::TaskId;
use tokio::sync::Notify;

/// Task ends remembered (older ones: the client's next look finds them).
pub const REMEMBERED: usize = 1024;

/// Longest wait one request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// The tasks this node saw end as their manager, most recent last.
#[derive(Debug, Default)]
pub struct TaskEnds {
    ended: Mutex<VecDeque<TaskId>>,
    changed: Notify,
}

impl TaskEnds {
    /// This node, managing `id`, wrote its end.
    pub fn ended(&self, id: TaskId) {
        let mut e = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if e.len() >= REMEMBERED {
            e.pop_front();
        }
        e.push_back(id);
        drop(e);
        self.changed.notify_waiters();
    }

    fn has(&self, id: &TaskId) -> bool {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).contains(id)
    }

    /// True once this node has seen `id` end, or false after `wait` (at most
    /// [`MAX_WAIT`]).
    pub async fn wait(&self, id: &TaskId, wait: Duration) -> bool {
        // A listener's wait on real time, like its header timeout; nothing
        // the node decides depends on it.
        #[allow(clippy::disallowed_methods)]
        let deadline = tokio::time::sleep(wait.min(MAX_WAIT));
        tokio::pin!(deadline);
        loop {
            // Registered before the check, so an end between the two wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.has(id) {
                return true;
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = &mut deadline => return self.has(id),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn id(n: u32) -> TaskId {
        TaskId::parse(&format!("{n:08x}.17000000.00000000.0")).unwrap()
    }

    #[tokio::test]
    async fn a_waiter_hears_its_task_end_and_only_its_own() {
        let ends = Arc::new(TaskEnds::default());
        let e = ends.clone();
        let waiter = tokio::spawn(async move { e.wait(&id(1), Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        ends.ended(id(2));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "another task's end is not this one's");
        ends.ended(id(1));
        assert!(waiter.await.unwrap());
        assert!(ends.wait(&id(1), Duration::ZERO).await, "an end seen before the wait counts");
        assert!(!ends.wait(&id(3), Duration::from_millis(20)).await, "no end: false after the wait");
    }

    #[test]
    fn only_the_last_ends_are_remembered() {
        let ends = TaskEnds::default();
        for n in 0..(REMEMBERED as u32 + 5) {
            ends.ended(id(n));
        }
        assert!(!ends.has(&id(0)));
        assert!(ends.has(&id(REMEMBERED as u32 + 4)));
        assert_eq!(ends.ended.lock().unwrap().len(), REMEMBERED);
    }
}
