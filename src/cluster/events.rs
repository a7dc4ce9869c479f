//! The append-only change-event log (`Registry/Events/<seq>`).
//!
//! Only the monitor appends, with atomic create, so two monitors (one of
//! them stale) can never write the same sequence number twice: the loser of a
//! create moves to the next number. Consumers keep a cursor (the last
//! sequence they handled; each node publishes its cursor in its heartbeat)
//! and read what is past it. The monitor purges events older than the
//! retention (default 2 h). A consumer whose cursor fell behind the purge
//! horizon sees a gap, which [`EventConsumer::poll`] reports so that the
//! consumer resynchronises from the full state (the lease's member view)
//! instead of silently missing changes.

use std::time::Duration;

use layouts::formats::{self, Event, EventKind};
use layouts::{v2, NodeId};
use store::{Created, Store};

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("could not append event: sequence numbers {from}..{to} were all taken")]
    Contended { from: u64, to: u64 },
}

/// Lists the sequence numbers present in the log, ascending.
pub async fn list_seqs(store: &Store) -> store::Result<Vec<u64>> {
    let mut seqs: Vec<u64> =
        store.list(v2::EVENTS).await?.iter().filter_map(|e| v2::parse_event_name(e.name())).collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// The monitor's writing end of the log.
#[derive(Debug)]
pub struct EventLog {
    next_seq: u64,
}

impl EventLog {
    /// Opens the log for appending after its newest entry (one LIST).
    /// Opens the log for appending after its newest entry (one LIST), and
    /// never below `floor` (the newest sequence number the previous monitor
    /// published): numbers are never reused, even if the log was emptied.
    pub async fn open(store: &Store, floor: u64) -> store::Result<EventLog> {
        let last = list_seqs(store).await?.last().copied().unwrap_or(0).max(floor);
        Ok(EventLog { next_seq: last + 1 })
    }

    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub async fn append(
        &mut self,
        store: &Store,
        epoch: u64,
        by: &NodeId,
        wall_ms: u64,
        kind: EventKind,
    ) -> Result<u64, EventError> {
        let from = self.next_seq;
        for _ in 0..64 {
            let seq = self.next_seq;
            self.next_seq += 1;
            let event = Event { seq, epoch, by: by.clone(), wall_ms, kind: kind.clone() };
            if store.create(&v2::event(seq), formats::encode(&event)).await? == Created::Created {
                return Ok(seq);
            }
        }
        Err(EventError::Contended { from, to: self.next_seq })
    }

    /// Deletes events older than `retention` by the monitor's wall clock,
    /// oldest first, stopping at the first younger one. Unreadable events
    /// older than the newest kept one are left for `compactd check`.
    /// Returns how many were deleted and how many are kept.
    pub async fn purge(store: &Store, now_wall_ms: u64, retention: Duration) -> store::Result<Purged> {
        let horizon = now_wall_ms.saturating_sub(retention.as_millis() as u64);
        let mut purged = 0;
        let seqs = list_seqs(store).await?;
        let listed = seqs.len();
        // The newest event always stays: it carries the log's position.
        let keep_from = seqs.len().saturating_sub(1);
        for seq in seqs.into_iter().take(keep_from) {
            let path = v2::event(seq);
            let Some(found) = store.read_or_bad(&path).await? else {
                continue;
            };
            match found.ok().map(|b| formats::decode::<Event>(&b)) {
                Some(Ok(e)) if e.wall_ms < horizon => {
                    store.delete(&path).await?;
                    purged += 1;
                }
                _ => break,
            }
        }
        Ok(Purged { purged, kept: listed - purged })
    }
}

/// What [`EventLog::purge`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub purged: usize,
    pub kept: usize,
}

/// What a consumer gets from one poll.
#[derive(Debug, Default)]
pub struct Polled {
    pub events: Vec<Event>,
    /// Events between the cursor and the oldest one still in the log were
    /// purged before this consumer read them: resynchronise from full state.
    pub gap: bool,
    /// Entries that could not be read (reported, skipped).
    pub unreadable: Vec<String>,
}

/// A reading end with its cursor.
#[derive(Debug, Clone)]
pub struct EventConsumer {
    pub cursor: u64,
}

impl EventConsumer {
    /// Returns the events after the cursor, in order, and advances it.
    pub async fn poll(&mut self, store: &Store) -> store::Result<Polled> {
        let mut out = Polled::default();
        let seqs: Vec<u64> = list_seqs(store).await?.into_iter().filter(|s| *s > self.cursor).collect();
        if let Some(first) = seqs.first() {
            out.gap = *first > self.cursor + 1 && self.cursor > 0;
        }
        for seq in seqs {
            let path = v2::event(seq);
            match store.read_or_bad(&path).await? {
                Some(Ok(bytes)) => match formats::decode::<Event>(&bytes) {
                    Ok(e) if e.seq == seq => out.events.push(e),
                    _ => out.unreadable.push(path),
                },
                Some(Err(_)) => out.unreadable.push(path),
                None => out.gap = true,
            }
            self.cursor = seq;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(n: &str) -> EventKind {
        EventKind::NodeJoined { node: NodeId::parse(n).unwrap(), incarnation: 1 }
    }

    #[tokio::test]
    async fn every_event_reaches_every_consumer_once_in_order() {
        let store = Store::memory().await;
        let mut log = EventLog::open(&store, 0).await.unwrap();
        let mut a = EventConsumer { cursor: 0 };
        let mut b = EventConsumer { cursor: 0 };
        let mut got_a = vec![];
        let mut got_b = vec![];
        for i in 0..30u64 {
            log.append(&store, 1, &NodeId::parse("m").unwrap(), 1000 + i, joined(&format!("n{i}"))).await.unwrap();
            if i % 3 == 0 {
                got_a.extend(a.poll(&store).await.unwrap().events.into_iter().map(|e| e.seq));
            }
            if i % 7 == 0 {
                got_b.extend(b.poll(&store).await.unwrap().events.into_iter().map(|e| e.seq));
            }
        }
        got_a.extend(a.poll(&store).await.unwrap().events.into_iter().map(|e| e.seq));
        got_b.extend(b.poll(&store).await.unwrap().events.into_iter().map(|e| e.seq));
        let want: Vec<u64> = (1..=30).collect();
        assert_eq!(got_a, want);
        assert_eq!(got_b, want);
    }

    #[tokio::test]
    async fn two_writers_never_share_a_sequence_number() {
        let store = Store::memory().await;
        let mut stale = EventLog::open(&store, 0).await.unwrap();
        let mut fresh = EventLog::open(&store, 0).await.unwrap();
        let s1 = fresh.append(&store, 2, &NodeId::parse("m").unwrap(), 0, joined("a")).await.unwrap();
        let s2 = stale.append(&store, 1, &NodeId::parse("m").unwrap(), 0, joined("b")).await.unwrap();
        assert_ne!(s1, s2);
        assert_eq!(list_seqs(&store).await.unwrap(), vec![1, 2]);
    }

    #[tokio::test]
    async fn purge_keeps_recent_events_and_lagging_consumers_see_a_gap() {
        let store = Store::memory().await;
        let mut log = EventLog::open(&store, 0).await.unwrap();
        let hour = 3_600_000;
        for i in 0..5 {
            log.append(&store, 1, &NodeId::parse("m").unwrap(), i * hour, joined("a")).await.unwrap();
        }
        let mut lagging = EventConsumer { cursor: 1 };
        let purged = EventLog::purge(&store, 4 * hour + 1, Duration::from_secs(2 * 3600)).await.unwrap().purged;
        assert_eq!(purged, 3, "events at 0h, 1h and 2h are older than 2h at 4h");
        let polled = lagging.poll(&store).await.unwrap();
        assert!(polled.gap);
        assert_eq!(polled.events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
        // a reopened log continues after the newest entry
        let mut reopened = EventLog::open(&store, 0).await.unwrap();
        assert_eq!(reopened.append(&store, 2, &NodeId::parse("m").unwrap(), 5 * hour, joined("b")).await.unwrap(), 6);
    }
}
