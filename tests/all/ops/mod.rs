//! What an operator runs: the metrics, health and status endpoints, the Debian package, the quickstart, the README blocks.

mod daemon;
mod deb;
mod quickstart;
mod readme;
