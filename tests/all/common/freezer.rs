//! A TCP proxy to the S3 server that can stop answering: a backend that
//! hangs. While frozen, new connections are accepted and read but never
//! reach the server nor get a byte back; a request already on its way is
//! still delivered whole, so that the hang is the backend's and not a
//! half-sent request's, but its reply is held back.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Freezer {
    pub port: u16,
    pub frozen: Arc<AtomicBool>,
}

/// Copies `from` to `to`; while `hold` is set (if given), stops reading.
fn pump(mut from: TcpStream, mut to: TcpStream, hold: Option<Arc<AtomicBool>>) {
    from.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 16384];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(300) {
        if hold.as_ref().is_some_and(|h| h.load(Ordering::Relaxed)) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// Reads and drops what the client sends, never answers.
fn blackhole(mut client: TcpStream) {
    let mut buf = [0u8; 16384];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(300) {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

impl Freezer {
    /// Stops (true) or resumes (false) answering.
    pub fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::Relaxed);
    }

    pub fn start(upstream: u16) -> Freezer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(client) = conn else { continue };
                if f.load(Ordering::Relaxed) {
                    std::thread::spawn(move || blackhole(client));
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let hold = f.clone();
                std::thread::spawn(move || pump(client, server, None));
                std::thread::spawn(move || pump(s2, c2, Some(hold)));
            }
        });
        Freezer { port, frozen }
    }
}
