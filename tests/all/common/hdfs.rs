//! A real HDFS for integration tests: Hadoop's MiniDFSCluster (one NameNode
//! and 3 DataNodes in one JVM, over folders in a temp dir), started by the
//! launcher in `tests/support/minidfs` that `.ci/install-hdfs.sh` builds.
//!
//! The launcher's stdin is a pipe held by [`HdfsCluster`]: the JVM shuts the
//! cluster down and exits when it is dropped, and also when the test process
//! dies for any reason (the kernel closes the pipe). Faults are commands on
//! that pipe, answered line by line: stop and restart the NameNode (same
//! port, same storage folders), stop a DataNode and restart the stopped
//! ones, and the NameNode's own count of client RPCs.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct HdfsCluster {
    child: Child,
    /// Commands go down this pipe; answers come up `stdout`.
    io: Mutex<(Option<ChildStdin>, BufReader<ChildStdout>)>,
    url: String,
    roots: AtomicUsize,
    _dir: tempfile::TempDir,
}

impl HdfsCluster {
    fn launcher() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/minidfs")
    }

    /// Starts a fresh cluster (NameNode on a free loopback port, 3
    /// DataNodes) and waits until it is up and out of safe mode. Panics
    /// (never skips) when the launcher is not built.
    pub fn start() -> HdfsCluster {
        Self::launch(Mode::Plain)
    }

    /// An HA cluster: the name service `minidfs-ns` with two NameNodes (the
    /// first active) and 3 DataNodes; clients find it through
    /// `HADOOP_CONF_DIR=`[`HdfsCluster::conf_dir`]; [`HdfsCluster::url`] is
    /// `hdfs://minidfs-ns`.
    pub fn start_ha() -> HdfsCluster {
        Self::launch(Mode::Ha)
    }

    /// A secure cluster: a KDC in the launcher's JVM, Kerberos RPC
    /// authentication, SASL on block transfers and block access tokens.
    /// Clients need [`HdfsCluster::kerberos_env`] and a ticket
    /// ([`HdfsCluster::kinit`]).
    pub fn start_kerberos() -> HdfsCluster {
        Self::launch(Mode::Kerberos)
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn launch(mode: Mode) -> HdfsCluster {
        let dir = Self::launcher();
        if !dir.join("target/lib").is_dir() || !dir.join("target/classes").is_dir() {
            panic!(
                "the HDFS test launcher is not built ({}/target missing): run `bash .ci/install-hdfs.sh` \
                 from the repository root (needs Java 17 and Maven)",
                dir.display()
            );
        }
        let port = Self::free_port();
        let storage = tempfile::tempdir().unwrap();
        let cp = format!("{0}/target/classes:{0}/target/lib/*", dir.display());
        let log = std::fs::File::create(storage.path().join("minidfs.log")).unwrap();
        let mut child = Command::new("java")
            // C1 only: the cluster's JIT compiles far less on 2 cores
            // (C2 took ~30 s of CPU in a minute's run) for about the same
            // throughput.
            .args(["-Xmx1g", "-XX:TieredStopAtLevel=1", "-cp", &cp, "compactd.MiniDfs"])
            .arg(storage.path().join("dfs"))
            .arg(port.to_string())
            .arg("3")
            .args(match mode {
                Mode::Plain => vec![],
                Mode::Ha => vec!["ha".to_string(), Self::free_port().to_string()],
                Mode::Kerberos => vec!["kerberos".to_string()],
            })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the HDFS launcher (java): {e}; is a JDK installed?"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let res = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send((res, reader));
        });
        let log_tail = |storage: &tempfile::TempDir| {
            let text = std::fs::read_to_string(storage.path().join("minidfs.log")).unwrap_or_default();
            text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
        };
        let (line, reader) = match rx.recv_timeout(START_TIMEOUT) {
            Ok((Ok(line), reader)) => (line, reader),
            Ok((Err(e), _)) => panic!("HDFS launcher: reading its READY line failed: {e}"),
            Err(_) => {
                let _ = child.kill();
                panic!("the HDFS launcher was not ready within {START_TIMEOUT:?}:\n{}", log_tail(&storage));
            }
        };
        let Some(url) = line.trim().strip_prefix("READY ").map(str::to_string) else {
            let _ = child.kill();
            let status = child.wait().ok();
            panic!("the HDFS launcher did not start (exit {status:?}), said {line:?}:\n{}", log_tail(&storage));
        };
        HdfsCluster { child, io: Mutex::new((stdin, reader)), url, roots: AtomicUsize::new(0), _dir: storage }
    }

    /// One cluster for the whole test binary, started on first use; it exits
    /// with the test process. Use [`HdfsCluster::new_root`] per test.
    pub fn shared() -> &'static HdfsCluster {
        static SHARED: OnceLock<HdfsCluster> = OnceLock::new();
        SHARED.get_or_init(HdfsCluster::start)
    }

    /// A second cluster for the whole test binary, for the tests that stop
    /// its NameNode and DataNodes (they take turns: `turns::HDFS_FAULTS`);
    /// the tests on [`HdfsCluster::shared`] run beside them unharmed.
    pub fn faults() -> &'static HdfsCluster {
        assert!(
            super::turns::held(&super::turns::HDFS_FAULTS),
            "a test on the faults' HDFS takes `turns::HDFS_FAULTS.turn()` first"
        );
        static FAULTS: OnceLock<HdfsCluster> = OnceLock::new();
        FAULTS.get_or_init(HdfsCluster::start)
    }

    /// `hdfs://127.0.0.1:<port>` (HA: `hdfs://minidfs-ns`)
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client config of an HA cluster, for `HADOOP_CONF_DIR`.
    pub fn conf_dir(&self) -> PathBuf {
        self._dir.path().join("dfs/conf")
    }

    /// Kerberos: what a client process needs beside its ticket, as for
    /// Hadoop's own clients: `HADOOP_CONF_DIR` with
    /// `hadoop.security.authentication=kerberos` and the cluster's
    /// `dfs.data.transfer.protection` (without it the client skips the
    /// DataNodes' SASL handshake and they reset every block transfer), the
    /// KDC's `KRB5_CONFIG`, and `KRB5CCNAME`, a ticket cache of this
    /// cluster's own (empty until [`HdfsCluster::kinit`]).
    pub fn kerberos_env(&self) -> Vec<(String, String)> {
        let conf = self._dir.path().join("client-conf");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("core-site.xml"),
            "<configuration>\
             <property><name>hadoop.security.authentication</name><value>kerberos</value></property>\
             <property><name>dfs.data.transfer.protection</name><value>authentication</value></property>\
             </configuration>\n",
        )
        .unwrap();
        let kdc = self._dir.path().join("dfs/kdc");
        vec![
            ("HADOOP_CONF_DIR".into(), conf.display().to_string()),
            ("KRB5_CONFIG".into(), kdc.join("krb5.conf").display().to_string()),
            ("KRB5CCNAME".into(), format!("FILE:{}", self._dir.path().join("krb5cc").display())),
        ]
    }

    /// Kerberos: gets a ticket for `hdfs/localhost` from the cluster's
    /// keytab into the cache of [`HdfsCluster::kerberos_env`] (`kinit`,
    /// Debian's krb5-user).
    pub fn kinit(&self) {
        let keytab = self._dir.path().join("dfs/kdc/hdfs.keytab");
        let out = Command::new("kinit")
            .args(["-kt", &keytab.display().to_string(), "hdfs/localhost"])
            .envs(self.kerberos_env())
            .output()
            .unwrap_or_else(|e| panic!("kinit: {e}: install krb5-user (bash .ci/install-test-deps.sh)"));
        assert!(out.status.success(), "kinit: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// HA: the active NameNode steps down and the other takes over.
    pub fn failover(&self) {
        self.command("failover");
    }

    /// A fresh root URI per call: `hdfs://127.0.0.1:<port>/<name>-<n>`.
    pub fn new_root(&self, name: &str) -> String {
        let n = self.roots.fetch_add(1, Ordering::Relaxed);
        format!("{}/{name}-{n}", self.url)
    }

    /// Sends one command and returns what follows `OK`; panics on `ERR`.
    fn command(&self, cmd: &str) -> String {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let (stdin, stdout) = &mut *io;
        let stdin = stdin.as_mut().expect("the launcher's stdin is open");
        writeln!(stdin, "{cmd}").and_then(|_| stdin.flush()).unwrap_or_else(|e| panic!("HDFS launcher {cmd}: {e}"));
        let mut answer = String::new();
        stdout.read_line(&mut answer).unwrap_or_else(|e| panic!("HDFS launcher {cmd}: {e}"));
        match answer.trim().strip_prefix("OK") {
            Some(rest) => rest.trim().to_string(),
            None => panic!("HDFS launcher {cmd}: {answer:?}"),
        }
    }

    pub fn stop_namenode(&self) {
        self.command("stop-namenode");
    }

    /// Restarts the NameNode on the same port and storage; returns once it
    /// is active and out of safe mode.
    pub fn restart_namenode(&self) {
        self.command("restart-namenode");
    }

    pub fn stop_datanode(&self, i: usize) {
        self.command(&format!("stop-datanode {i}"));
    }

    pub fn restart_datanodes(&self) {
        self.command("restart-datanodes");
    }

    /// The NameNode's count of what is below `uri` (a URI of this cluster,
    /// or a path): (folders, files, bytes), as `hdfs dfs -count` gives them.
    pub fn count(&self, uri: &str) -> (u64, u64, u64) {
        let path = uri.strip_prefix(self.url.as_str()).unwrap_or(uri);
        let answer = self.command(&format!("count {path}"));
        let n: Vec<u64> = answer.split_whitespace().map(|w| w.parse().expect("a count")).collect();
        (n[0], n[1], n[2])
    }

    /// Client RPCs the NameNode has processed since the cluster started.
    pub fn namenode_rpcs(&self) -> u64 {
        self.command("rpcs").parse().expect("a count")
    }

    /// [`HdfsCluster::namenode_rpcs`] once it holds still: the NameNode
    /// counts a call after its reply is sent, so a read right after the
    /// last reply can miss it (seen one short under CI's load).
    pub fn namenode_rpcs_settled(&self) -> u64 {
        let mut last = self.namenode_rpcs();
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = self.namenode_rpcs();
            if now == last {
                return now;
            }
            last = now;
        }
        last
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Plain,
    Ha,
    Kerberos,
}

impl Drop for HdfsCluster {
    fn drop(&mut self) {
        drop(self.io.lock().unwrap_or_else(|p| p.into_inner()).0.take());
        let _ = self.child.wait();
    }
}
