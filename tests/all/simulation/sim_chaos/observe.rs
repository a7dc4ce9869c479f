//! Invariants (a), (a'), (d), (e): read from the tree after every round,
//! through the same store with faults paused.

use super::*;

impl Sim {
    /// Reads the tree with faults paused (the fault RNG still advances the
    /// same way on every run of a seed) and checks (a), (a'), (d), (e).
    pub(super) async fn observe(&mut self) -> Check {
        self.faults.pause();
        let r = self.observe_inner().await;
        self.faults.resume();
        r
    }

    pub(super) async fn observe_inner(&mut self) -> Check {
        // Leases: record each epoch's holder.
        let mut newest = self.seen.newest_before;
        for name in self.list_names(v2::ELECTION).await {
            let Some(epoch) = v2::parse_lease_name(&name) else {
                return Err(format!("(e) unexpected entry in Election/: {name:?}"));
            };
            let Some(bytes) = self.read(&v2::lease(epoch)).await else {
                continue;
            };
            let lease: Lease =
                formats::decode(&bytes).map_err(|e| format!("(e) lease {epoch} does not decode: {e}"))?;
            if lease.epoch != epoch {
                return Err(format!("(e) Lease.{epoch} says epoch {}", lease.epoch));
            }
            match self.seen.holders.get(&epoch) {
                Some(h) if *h != lease.holder => {
                    return Err(format!("(a) lease {epoch} changed holder from {h} to {}", lease.holder))
                }
                Some(_) => {}
                None => {
                    self.seen.holders.insert(epoch, lease.holder.clone());
                }
            }
            newest = newest.max(epoch);
        }

        // Events: new ones must be well-formed, written by the holder of
        // their epoch, not by a superseded epoch, and never reuse a seq.
        let mut present = BTreeSet::new();
        for name in self.list_names(v2::EVENTS).await {
            let Some(seq) = v2::parse_event_name(&name) else {
                return Err(format!("(e) unexpected entry in Events/: {name:?}"));
            };
            present.insert(seq);
            if self.seen.present_events.contains(&seq) {
                continue; // created once, never rewritten
            }
            if self.seen.gone_events.contains(&seq) {
                return Err(format!("(e) event sequence number {seq} was used again after it had been purged"));
            }
            let Some(bytes) = self.read(&v2::event(seq)).await else {
                present.remove(&seq);
                continue;
            };
            let ev: Event = formats::decode(&bytes).map_err(|e| format!("(e) event {seq} does not decode: {e}"))?;
            if ev.seq != seq {
                return Err(format!("(e) event file {seq} says seq {}", ev.seq));
            }
            if matches!(ev.kind, EventKind::Unknown) {
                return Err(format!("(e) event {seq} has an unknown kind"));
            }
            if let EventKind::MonitorElected { node } = &ev.kind {
                if *node != ev.by {
                    return Err(format!("(e) MonitorElected {seq} names {node} but is by {}", ev.by));
                }
            }
            match self.seen.holders.get(&ev.epoch) {
                None => {
                    return Err(format!(
                        "(a) event {seq} by {} is of epoch {}, whose lease was never seen",
                        ev.by, ev.epoch
                    ))
                }
                Some(h) if *h != ev.by => {
                    return Err(format!(
                        "(a) event {seq} ({:?}) is by {} in epoch {}, whose holder is {h}",
                        ev.kind, ev.by, ev.epoch
                    ))
                }
                Some(_) => {}
            }
            if ev.epoch < self.seen.newest_before {
                return Err(format!(
                    "(a') event {seq} ({:?}) by {} is of epoch {}, written after epoch {} existed: a stale monitor passed its fence",
                    ev.kind, ev.by, ev.epoch, self.seen.newest_before
                ));
            }
            if let Some((prev_seq, prev)) = self.seen.events.range(..seq).next_back() {
                if prev.epoch > ev.epoch {
                    return Err(format!(
                        "(a') event {seq} of epoch {} follows event {prev_seq} of epoch {}",
                        ev.epoch, prev.epoch
                    ));
                }
            }
            if let Some((next_seq, next)) = self.seen.events.range(seq + 1..).next() {
                if next.epoch < ev.epoch {
                    return Err(format!(
                        "(a') event {seq} of epoch {} precedes event {next_seq} of epoch {}",
                        ev.epoch, next.epoch
                    ));
                }
            }
            self.seen.events.insert(seq, ev);
        }
        for gone in self.seen.present_events.difference(&present) {
            self.seen.gone_events.insert(*gone);
        }
        self.seen.present_events = present;

        // Offline records.
        let mut present_offline = BTreeSet::new();
        for name in self.list_names(v2::OFFLINE).await {
            let Some((node, inc)) = v2::parse_offline_marker(&name) else {
                return Err(format!("(e) unexpected entry in Offline/: {name:?}"));
            };
            let Some(bytes) = self.read(&v2::offline_marker(&node, inc)).await else {
                continue;
            };
            let rec: OfflineRecord =
                formats::decode(&bytes).map_err(|e| format!("(e) offline record {name} does not decode: {e}"))?;
            if rec.node != node || rec.incarnation != inc {
                return Err(format!("(e) offline record {name} says {}.{}", rec.node, rec.incarnation));
            }
            match self.seen.holders.get(&rec.epoch) {
                None => {
                    return Err(format!(
                        "(a) offline record {name} is of epoch {}, whose lease was never seen",
                        rec.epoch
                    ))
                }
                Some(h) if *h != rec.declared_by => {
                    return Err(format!(
                        "(a) offline record {name} was declared by {} in epoch {}, whose holder is {h}",
                        rec.declared_by, rec.epoch
                    ))
                }
                Some(_) => {}
            }
            if let Some(seq) = rec.event_seq {
                if let Some(ev) = self.seen.events.get(&seq) {
                    let ok = matches!(&ev.kind, EventKind::NodeOffline { node: n, incarnation: i } if *n == node && *i == inc);
                    if !ok {
                        return Err(format!("(e) offline record {name} points at event {seq}, which is {:?}", ev.kind));
                    }
                } else if !self.seen.gone_events.contains(&seq) {
                    return Err(format!("(e) offline record {name} points at event {seq}, which was never seen"));
                }
            }
            let key = (node, inc);
            present_offline.insert(key.clone());
            match self.seen.offline.get(&key) {
                None => {
                    if rec.epoch < self.seen.newest_before {
                        return Err(format!(
                            "(a') offline record {name} was declared in epoch {} after epoch {} existed: a stale monitor passed its fence",
                            rec.epoch, self.seen.newest_before
                        ));
                    }
                }
                Some(old) => {
                    if old.epoch != rec.epoch || old.declared_by != rec.declared_by {
                        return Err(format!("(a) offline record {name} changed its declaration: {old:?} -> {rec:?}"));
                    }
                    if old.cleaned && !rec.cleaned {
                        return Err(format!("(d) offline record {name} went back to not cleaned"));
                    }
                }
            }
            self.seen.offline.insert(key, rec);
        }
        for (key, rec) in &self.seen.offline {
            if !present_offline.contains(key) && !self.seen.purged_offline.contains(key) {
                // Finished and purged within one tick is fine, if it was
                // old enough to be purged.
                let horizon = self.cluster.clock.wall_ms().saturating_sub(self.retention.as_millis() as u64);
                if !rec.cleaned && rec.wall_ms >= horizon {
                    return Err(format!(
                        "(d) offline record {}.{} was deleted while not cleaned: {rec:?}",
                        key.0, key.1
                    ));
                }
            }
        }
        self.seen.purged_offline =
            self.seen.offline.keys().filter(|k| !present_offline.contains(*k)).cloned().collect();
        self.seen.newest_before = newest;
        Ok(())
    }
}
