//! In-process simulations and chaos: seeded schedules of nodes on the memory store, SIGKILL chaos of real processes.

mod chaos;
mod sim_chaos;
mod sim_membership;
mod sim_scale;
