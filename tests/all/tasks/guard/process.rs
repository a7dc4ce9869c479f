//! The guard's deadline held by the executors' reaper, a process of its own
//! (`src/executor/reaper.rs`): a daemon that is stopped (SIGSTOP), starved or
//! stuck still loses its executors at the deadline.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::*;

/// The daemon registered an executor's group and the deadline, then
/// stopped: its pipe stays open and says nothing more. The reaper kills the
/// group at the deadline on its own, and stays up for its daemon.
#[test]
fn the_reaper_kills_at_the_deadline_while_its_daemon_says_nothing() {
    let _turn = crate::common::turns::waits();
    let mut reaper = Command::new(common::cluster::BIN)
        .arg("__reaper")
        .stdin(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start the reaper");
    let mut victim = Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
    let deadline = Duration::from_millis(300);
    let mut pipe = reaper.stdin.take().unwrap();
    let at = compactd::clock::boot_ns() + deadline.as_nanos() as u64;
    writeln!(pipe, "+{}\nD{at}", victim.id()).unwrap();
    pipe.flush().unwrap();
    let sent = Instant::now();
    let died = loop {
        if victim.try_wait().unwrap().is_some() {
            break sent.elapsed();
        }
        assert!(sent.elapsed() < Duration::from_secs(5), "the victim outlived the deadline by seconds");
        std::thread::sleep(Duration::from_millis(5));
    };
    eprintln!("killed {died:?} after the deadline was sent ({deadline:?} ahead)");
    assert!(died + Duration::from_millis(5) >= deadline, "killed before the deadline: {died:?}");
    assert!(died < deadline + Duration::from_millis(200), "killed {:?} late", died - deadline);
    assert!(reaper.try_wait().unwrap().is_none(), "the reaper left before its daemon");
    // A group registered past the deadline dies at once.
    let mut late = Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
    writeln!(pipe, "+{}", late.id()).unwrap();
    pipe.flush().unwrap();
    let sent = Instant::now();
    while late.try_wait().unwrap().is_none() {
        assert!(sent.elapsed() < Duration::from_secs(2), "a group registered past the deadline lives");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(pipe);
    let status = reaper.wait().unwrap();
    assert!(status.success(), "{status}");
}
