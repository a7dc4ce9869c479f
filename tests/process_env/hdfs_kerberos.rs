//! compactd on a Kerberized HDFS (a KDC in the launcher's JVM, Kerberos RPC
//! authentication, SASL on block transfers, block access tokens), set up as
//! an operator sets up any Hadoop client: `hadoop.security.authentication=
//! kerberos` in `HADOOP_CONF_DIR`'s `core-site.xml`, the realm's
//! `krb5.conf`, and a ticket from `kinit`. Without a ticket every command
//! fails at once naming Kerberos; with one, 3 `compactd` processes keep
//! their tree there and compact a Parquet table there (the executors are
//! child processes: they authenticate too), judged by pyarrow reading
//! through hdfs-native's fsspec filesystem with the same ticket.
// Real processes and servers: real time.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{alive, monitor_of, Cluster, BIN};
use common::hdfs::HdfsCluster;
use common::parquet::{assert_figures, compact_table, tool};
use store::{Created, RootUri, Store};

const TARGET: &str = "512KiB";

#[test]
fn compactd_runs_on_a_kerberized_hdfs_with_a_ticket_and_refuses_without_one() {
    let mut process_env = crate::Env::take();
    let hdfs = HdfsCluster::start_kerberos();
    let env = hdfs.kerberos_env();
    let root = format!("{}/krb-tree", hdfs.url());
    let data = format!("{}/krb-data", hdfs.url());

    // No ticket yet: a command fails at once, and says why.
    let start = Instant::now();
    let out = Command::new(BIN).args(["--root", &root, "nodes"]).envs(env.iter().cloned()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nodes without a ticket succeeded: {err}");
    assert!(err.contains(&root) && err.contains("No Kerberos credentials") && err.contains("kinit"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}: {err}", start.elapsed());
    eprintln!("without a ticket, in {:?}: {}", start.elapsed(), err.lines().last().unwrap_or(""));

    hdfs.kinit();
    // This process's own store, through the same config and ticket: a
    // create-once, a lost create, a read and a replace (blocks written and
    // read over SASL-protected DataNode connections).
    for (k, v) in &env {
        process_env.set(k, v);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = rt.block_on(Store::open(&RootUri::parse(&format!("{}/krb-store", hdfs.url())).unwrap())).unwrap();
    assert_eq!(rt.block_on(store.create("a", b"one".to_vec())).unwrap(), Created::Created);
    assert_eq!(rt.block_on(store.create("a", b"two".to_vec())).unwrap(), Created::Exists);
    rt.block_on(store.put("b", b"three".to_vec())).unwrap();
    assert_eq!(rt.block_on(store.read("a")).unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(rt.block_on(store.read("b")).unwrap().as_deref(), Some(&b"three"[..]));

    // A Parquet table written by pyarrow through hdfs-native's fsspec
    // filesystem, which authenticates with the same ticket.
    let tmp = tempfile::tempdir().unwrap();
    let (orig, after) = (tmp.path().join("orig"), tmp.path().join("after"));
    let generated = tool(
        &["gen", orig.to_str().unwrap(), "--partitions", "2", "--files", "12", "--rows", "2000", "--seed", "17"],
        &[],
    );
    tool(&["hdfs-put", orig.to_str().unwrap(), &data], &env);

    let mut c = Cluster::on(root.clone(), env.clone());
    for n in ["n1", "n2", "n3"] {
        c.start_with(n, &["--data", &data, "--target-size", TARGET]);
    }
    c.wait_nodes(Duration::from_secs(60), "three nodes alive and a monitor", |r| {
        alive(r).len() == 3 && monitor_of(r).is_some()
    });
    let status = compact_table(&c);
    assert_figures(&status, &generated);
    tool(&["hdfs-get", &data, after.to_str().unwrap()], &env);
    let checked = tool(&["check", orig.to_str().unwrap(), after.to_str().unwrap(), "--target", "524288"], &[]);
    eprintln!("checked: {checked}");
    let check = c.compactd(&["check"]);
    assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
}
