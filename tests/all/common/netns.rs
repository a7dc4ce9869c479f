//! Hosts of the test's own: one network namespace per host, all on one
//! bridge that lives in a namespace of its own, so no packet of a test ever
//! touches the machine's own network. A storage host runs the loopback S3
//! server; each node host runs one `compactd run` on its own address.
//!
//! Faults, all inside the test's namespaces:
//! - cuts: nftables rules in a host's namespace drop every packet to and
//!   from the addresses it is cut from (silently, as a partition does: no
//!   reset, no "unreachable");
//! - slow and lossy links: loss by nftables (`numgen random`: each packet of
//!   the host's link dropped with the given chance, both ways), delay by a
//!   TCP proxy on the storage host that holds every chunk of a connection
//!   from a slowed host for the given time each way (order kept). The
//!   kernels these tests run on are built without `sch_netem`, so `tc
//!   netem` is not used: [`Net::new`] does not need it;
//! - skewed wall clocks: libfaketime preloaded into one host's processes,
//!   monotonic clocks left alone.
//!
//! [`Net::new`] returns `None`, after printing why, where namespaces cannot
//! be made (not root, no `ip`, `nft` or libfaketime); with
//! `COMPACTD_REQUIRE_NETNS=1` (CI) it fails the test instead. The
//! namespaces are deleted on drop, also when the test fails, and a later run
//! deletes those a killed test run left (named by the pid that made them).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const PREFIX: &str = "cdnf";
pub const STORAGE_IP: &str = "10.0.0.100";

/// One host: a namespace with `eth0` on the test's bridge.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub ns: String,
    pub ip: String,
    /// The bridge's end of this host's link (in the switch namespace).
    port: String,
}

pub struct Net {
    switch: String,
    pub storage: Host,
    pub hosts: BTreeMap<String, Host>,
    /// Per host namespace: the addresses it is cut from now.
    cuts: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Per host namespace: the chance in % that a packet of its link is
    /// dropped.
    loss: Mutex<BTreeMap<String, u32>>,
    /// Per client address: the one-way delay and jitter (ms) the storage
    /// host's proxy adds ([`Net::storage_proxy`]).
    delays: Arc<Mutex<BTreeMap<IpAddr, (u64, u64)>>>,
    stop: Arc<AtomicBool>,
}

fn run(args: &[&str]) -> Result<(), String> {
    run_stdin(args, None)
}

fn run_stdin(args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}: {}{}", args.join(" "), String::from_utf8_lossy(&out.stderr), stdin.unwrap_or("")))
    }
}

fn must(args: &[&str]) {
    if let Err(e) = run(args) {
        panic!("network set-up: {e}");
    }
}

/// The libfaketime library Debian's `faketime` package installs.
pub fn libfaketime() -> Option<String> {
    ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(str::to_string)
}

/// Environment that shifts a process's wall clock by `secs` (its monotonic
/// clock is left alone, as NTP leaves it).
pub fn skewed_clock_env(secs: i64) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), libfaketime().expect("libfaketime (Debian: faketime)")),
        ("FAKETIME".into(), format!("{secs:+}s")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        // Without it libfaketime caches the offset per process start only;
        // harmless either way, explicit for the reader.
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ]
}

fn pid_alive(pid: i32) -> bool {
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Deletes the namespaces a test process that no longer runs left behind.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let pid: i32 = rest.split(['-', '_']).next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if pid > 0 && !pid_alive(pid) {
            // Its processes (nodes, the S3 server) outlived the test that
            // made them: stop them first, or they run on unseen.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
                for p in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                    }
                }
            }
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}

fn unavailable(why: &str) -> Option<Net> {
    if std::env::var_os("COMPACTD_REQUIRE_NETNS").is_some_and(|v| v == "1") {
        panic!("network namespaces are required here (COMPACTD_REQUIRE_NETNS=1) but: {why}");
    }
    eprintln!("SKIP: this test needs its own network namespaces and cannot make them here: {why}");
    None
}

impl Net {
    /// A bridge, a storage host and one host per name in `nodes`
    /// (addresses 10.0.0.11, .12, …; storage 10.0.0.100).
    pub fn new(nodes: &[&str]) -> Option<Net> {
        assert!(
            super::turns::held(&super::turns::NETNS),
            "a test that makes namespaces takes `turns::NETNS.turn()` first"
        );
        if unsafe { libc::geteuid() } != 0 {
            return unavailable("not root");
        }
        for tool in ["ip", "nft"] {
            if Command::new(tool).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
                return unavailable(&format!("`{tool}` is not installed (Debian: iproute2, nftables)"));
            }
        }
        if libfaketime().is_none() {
            return unavailable("libfaketime is not installed (Debian: faketime)");
        }
        sweep_stale();
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let tag = format!("{PREFIX}{}_{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let switch = format!("{tag}-switch");
        if let Err(e) = run(&["ip", "netns", "add", &switch]) {
            return unavailable(&e);
        }
        let mut net = Net {
            switch: switch.clone(),
            storage: Host::placeholder(),
            hosts: BTreeMap::new(),
            cuts: Mutex::default(),
            loss: Mutex::default(),
            delays: Arc::default(),
            stop: Arc::default(),
        };
        // The cuts need nf_tables in the kernel: probe it before any test
        // step relies on it (skip, or fail under COMPACTD_REQUIRE_NETNS).
        if let Err(e) = run_stdin(
            &["ip", "netns", "exec", &switch, "nft", "-f", "-"],
            Some("table inet compactd_probe\ndelete table inet compactd_probe\n"),
        ) {
            drop(net);
            return unavailable(&format!("nftables does not work here: {e}"));
        }
        must(&["ip", "-n", &switch, "link", "add", "br0", "type", "bridge"]);
        must(&["ip", "-n", &switch, "link", "set", "br0", "up"]);
        net.storage = net.add_host(&tag, "storage", STORAGE_IP, 0);
        for (i, n) in nodes.iter().enumerate() {
            let h = net.add_host(&tag, n, &format!("10.0.0.{}", 11 + i), i + 1);
            net.hosts.insert(n.to_string(), h);
        }
        Some(net)
    }

    fn add_host(&self, tag: &str, name: &str, ip: &str, i: usize) -> Host {
        let ns = format!("{tag}-{name}");
        let port = format!("p{i}");
        must(&["ip", "netns", "add", &ns]);
        must(&[
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            &ns,
            "type",
            "veth",
            "peer",
            "name",
            &port,
            "netns",
            &self.switch,
        ]);
        must(&["ip", "-n", &self.switch, "link", "set", &port, "master", "br0"]);
        must(&["ip", "-n", &self.switch, "link", "set", &port, "up"]);
        must(&["ip", "-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        Host { name: name.to_string(), ns, ip: ip.to_string(), port }
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts.get(name).unwrap_or_else(|| panic!("no host {name}"))
    }

    /// Makes `cmd` start inside `ns` (the namespace is entered between fork
    /// and exec).
    pub fn enter(cmd: &mut Command, ns: &str) {
        let f = File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("netns {ns}: {e}"));
        let fd = f.as_raw_fd();
        // The file stays open (moved into the hook) until the command is
        // dropped; the child enters before exec, then exec closes it.
        unsafe {
            cmd.pre_exec(move || {
                let _keep = &f;
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Runs `f` on a thread inside `ns` (for the test's own HTTP requests).
    pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("netns {ns}: {e}"));
        std::thread::scope(|s| {
            s.spawn(move || {
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// `GET path` on a node's listener, from the storage host.
    pub fn get(&self, addr: &str, path: &str) -> Result<(u16, String), String> {
        let (addr, path) = (addr.to_string(), path.to_string());
        Self::in_ns(&self.storage.ns, move || super::http::get(&addr, &path))
    }

    /// Rewrites `ns`'s rules: drops to and from `blocked`, and `loss` % of
    /// the packets of its link (never its own loopback).
    fn apply_rules(&self, ns: &str, blocked: &BTreeSet<String>, loss: u32) {
        let mut rules = String::new();
        if !blocked.is_empty() {
            let set = blocked.iter().cloned().collect::<Vec<_>>().join(", ");
            rules += &format!("ip saddr {{ {set} }} drop\nip daddr {{ {set} }} drop\n");
        }
        if loss > 0 {
            rules += &format!("iifname \"eth0\" numgen random mod 100 < {loss} drop\n");
            rules += &format!("oifname \"eth0\" numgen random mod 100 < {loss} drop\n");
        }
        let mut script = "table inet compactd_test\ndelete table inet compactd_test\n".to_string();
        if !rules.is_empty() {
            script += &format!(
                "table inet compactd_test {{\n\
                 chain input {{\n type filter hook input priority 0;\n {rules}}}\n\
                 chain output {{\n type filter hook output priority 0;\n {rules}}}\n}}\n"
            );
        }
        if let Err(e) = run_stdin(&["ip", "netns", "exec", ns, "nft", "-f", "-"], Some(&script)) {
            panic!("nft in {ns}: {e}");
        }
    }

    fn apply_cuts(&self, ns: &str, blocked: &BTreeSet<String>) {
        let loss = self.loss.lock().unwrap().get(ns).copied().unwrap_or(0);
        self.apply_rules(ns, blocked, loss);
    }

    fn set_cut(&self, a: &Host, b: &Host, cut: bool) {
        let mut cuts = self.cuts.lock().unwrap();
        for (x, y) in [(a, b), (b, a)] {
            let set = cuts.entry(x.ns.clone()).or_default();
            if cut {
                set.insert(y.ip.clone());
            } else {
                set.remove(&y.ip);
            }
            self.apply_cuts(&x.ns, set);
        }
    }

    /// Drops every packet between `a` and `b` (host names; "storage" is the
    /// storage host), both ways.
    pub fn cut(&self, a: &str, b: &str) {
        self.set_cut(self.any(a), self.any(b), true);
    }

    pub fn heal(&self, a: &str, b: &str) {
        self.set_cut(self.any(a), self.any(b), false);
    }

    /// Cuts `a` from every other host, storage included.
    pub fn isolate(&self, a: &str) {
        for b in self.all_names() {
            if b != a {
                self.cut(a, &b);
            }
        }
    }

    /// Heals every cut of every host.
    pub fn heal_all(&self) {
        let mut cuts = self.cuts.lock().unwrap();
        for (ns, set) in cuts.iter_mut() {
            set.clear();
            self.apply_cuts(ns, set);
        }
    }

    /// Cuts `a` from the other node hosts, not from storage.
    pub fn cut_from_peers(&self, a: &str) {
        for b in self.hosts.keys().filter(|b| *b != a) {
            self.cut(a, b);
        }
    }

    /// Makes `host`'s link slow and lossy: `loss` % of its packets dropped
    /// both ways (nftables in its namespace) and, on its connections to the
    /// storage host's proxy, each chunk held `delay_ms` ± `jitter_ms` each
    /// way. `slow_link(h, 0, 0, 0)` restores it.
    pub fn slow_link(&self, host: &str, delay_ms: u64, jitter_ms: u64, loss: u32) {
        let h = self.any(host).clone();
        self.loss.lock().unwrap().insert(h.ns.clone(), loss);
        let blocked = self.cuts.lock().unwrap().get(&h.ns).cloned().unwrap_or_default();
        self.apply_rules(&h.ns, &blocked, loss);
        let mut delays = self.delays.lock().unwrap();
        let targets: Vec<IpAddr> = if host == "storage" {
            self.hosts.values().chain(std::iter::once(&self.storage)).map(|h| h.ip.parse().unwrap()).collect()
        } else {
            vec![h.ip.parse().unwrap()]
        };
        for ip in targets {
            if delay_ms == 0 {
                delays.remove(&ip);
            } else {
                delays.insert(ip, (delay_ms, jitter_ms));
            }
        }
    }

    /// A TCP proxy on the storage host, on `0.0.0.0:<returned port>`, to
    /// `127.0.0.1:upstream` there: what [`Net::slow_link`] delays. Without
    /// a delay it passes bytes through as they come.
    pub fn storage_proxy(&self, upstream: u16) -> u16 {
        let file = File::open(format!("/var/run/netns/{}", self.storage.ns)).unwrap();
        let (tx, rx) = mpsc::channel();
        let (delays, stop) = (self.delays.clone(), self.stop.clone());
        // Sockets belong to the namespace of the thread that makes them, and
        // threads inherit it: the accept thread enters first.
        std::thread::spawn(move || {
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            let l = TcpListener::bind("0.0.0.0:0").unwrap();
            l.set_nonblocking(true).unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let (client, peer) = match l.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let ip = peer.ip();
                for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let (delays, stop) = (delays.clone(), stop.clone());
                    std::thread::spawn(move || delayed_pump(from, to, ip, delays, stop));
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("the storage proxy listens")
    }

    fn any(&self, name: &str) -> &Host {
        if name == "storage" {
            &self.storage
        } else {
            self.host(name)
        }
    }

    fn all_names(&self) -> Vec<String> {
        std::iter::once("storage".to_string()).chain(self.hosts.keys().cloned()).collect()
    }
}

impl Host {
    fn placeholder() -> Host {
        Host { name: String::new(), ns: String::new(), ip: String::new(), port: String::new() }
    }
}

/// Copies `from` to `to`, each chunk written when the delay that was set
/// for `ip` at its arrival has passed (order kept: never before the chunk
/// ahead of it).
fn delayed_pump(
    mut from: TcpStream,
    mut to: TcpStream,
    ip: IpAddr,
    delays: Arc<Mutex<BTreeMap<IpAddr, (u64, u64)>>>,
    stop: Arc<AtomicBool>,
) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    // A peer that is cut off must not hold the writer (and its socket)
    // for TCP's own give-up time.
    let _ = to.set_write_timeout(Some(Duration::from_secs(5)));
    let writer = std::thread::spawn(move || {
        for (at, chunk) in rx {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    from.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 16384];
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let (delay, jitter) = delays.lock().unwrap().get(&ip).copied().unwrap_or((0, 0));
                let j = rand::random_range(0..=2 * jitter);
                let at = (Instant::now()
                    + Duration::from_millis(delay + j).saturating_sub(Duration::from_millis(jitter)))
                .max(last);
                last = at;
                if tx.send((at, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    drop(tx);
    let _ = writer.join();
}

impl Drop for Net {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Processes still inside keep a namespace's network alive but not
        // its name: the owners (Cluster, S3Server) kill theirs first.
        for h in self.hosts.values().chain(std::iter::once(&self.storage)) {
            if !h.ns.is_empty() {
                let _ = run(&["ip", "netns", "del", &h.ns]);
            }
        }
        let _ = run(&["ip", "netns", "del", &self.switch]);
    }
}
