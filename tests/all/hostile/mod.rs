//! Bad input: malformed trees, hostile users and HTTP clients, symlinks, scale, a broken stderr.

mod bad_input;
mod broken_stderr;
mod hostile_scale;
mod hostile_tree;
mod hostile_user;
mod http_hostile;
mod symlinks;
