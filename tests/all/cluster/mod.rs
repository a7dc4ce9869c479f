//! The cluster as a whole: membership, election, the layout switch, rolling and v1 upgrades, warm shutdown and drains, wake-ups, crashes inside creates.

mod create_kill;
mod drain;
mod election;
mod rolling;
mod rolling_upgrade;
mod upgrade;
mod upgrade_kill;
mod wakeups;
mod warm_shutdown;
