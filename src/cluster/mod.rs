//! What every node takes part in, monitor or not: the election of the
//! monitor by atomic create of lease files ([`election`], also the fence
//! check every destructive monitor action goes through), membership by
//! heartbeat files ([`liveness`]: reading them and judging sessions on the
//! observer's own clock), the change log ([`events`]), and wake-ups between
//! nodes ([`wake`]: a poke is a hint that makes a node look at the tree now
//! instead of at its next poll; the tree stays the truth, so a lost poke
//! costs a poll interval and a forged one a look; [`wake::ended`]: the same
//! for a client waiting on a task, answered by the task's manager).

pub mod election;
pub mod events;
pub mod liveness;
pub mod wake;
