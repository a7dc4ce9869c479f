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
//! lasts at most [`MAX_WAIT`], and at most [`MAX_WAITERS`] wait at once (the
//! others are answered at once), so waiting clients hold at most that many
//! of the listener's connection slots (`MAX_CONNECTIONS`) and cannot crowd
//! out the pokes of other nodes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use layouts::TaskId;
use tokio::sync::{Notify, Semaphore};

/// Task ends remembered (older ones: the client's next look finds them).
pub const REMEMBERED: usize = 1024;

/// Longest wait one request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Requests waiting at once at most; past it a request is answered at once
/// (its client waits its pause and looks), so that waiting clients never
/// hold more than this many of the connections other nodes' pokes use.
pub const MAX_WAITERS: usize = 256;

/// The tasks this node saw end as their manager, most recent last.
#[derive(Debug)]
pub struct TaskEnds {
    ended: Mutex<VecDeque<TaskId>>,
    changed: Notify,
    waiters: Semaphore,
    /// Requests answered, and of those the ones answered "ended" (for
    /// `/v1/status`).
    pub asked: AtomicU64,
    pub told_ended: AtomicU64,
}

impl Default for TaskEnds {
    fn default() -> Self {
        TaskEnds {
            ended: Mutex::default(),
            changed: Notify::new(),
            waiters: Semaphore::new(MAX_WAITERS),
            asked: AtomicU64::new(0),
            told_ended: AtomicU64::new(0),
        }
    }
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
        let ended = self.wait_bounded(id, wait).await;
        self.asked.fetch_add(1, Ordering::Relaxed);
        if ended {
            self.told_ended.fetch_add(1, Ordering::Relaxed);
        }
        ended
    }

    async fn wait_bounded(&self, id: &TaskId, wait: Duration) -> bool {
        let Ok(_slot) = self.waiters.try_acquire() else { return self.has(id) };
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

    #[tokio::test]
    async fn waiters_past_the_bound_are_answered_at_once() {
        let ends = Arc::new(TaskEnds::default());
        let held: Vec<_> = (0..MAX_WAITERS)
            .map(|_| {
                let e = ends.clone();
                tokio::spawn(async move { e.wait(&id(1), MAX_WAIT).await })
            })
            .collect();
        while ends.waiters.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        // Past the bound: answered at once, although it asked for the most.
        let at_once = tokio::time::timeout(Duration::from_secs(2), ends.wait(&id(1), MAX_WAIT)).await;
        assert_eq!(at_once.ok(), Some(false));
        ends.ended(id(1));
        for h in held {
            assert!(h.await.unwrap());
        }
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
