//! What an operator runs: the metrics, health and status endpoints, the Debian package, the quickstart, the blocks of README.md and docs/; and CI's gate on the code's shape.

mod daemon;
mod deb;
mod quickstart;
mod readme;
mod shape;
