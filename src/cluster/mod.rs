//! What every node takes part in, monitor or not: the election of the
//! monitor by atomic create of lease files ([`election`], also the fence
//! check every destructive monitor action goes through), membership by
//! heartbeat files ([`liveness`]: reading them and judging sessions on the
//! observer's own clock), and the change log ([`events`]).

pub mod election;
pub mod events;
pub mod liveness;
