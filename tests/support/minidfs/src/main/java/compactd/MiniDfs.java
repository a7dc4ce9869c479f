package compactd;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.hdfs.server.namenode.NameNodeRpcServer;
import org.apache.hadoop.minikdc.MiniKdc;

/**
 * A real HDFS for compactd's tests: one NameNode and N DataNodes (Hadoop's
 * MiniDFSCluster) over folders below a base folder.
 *
 * <p>Usage: {@code MiniDfs BASE NAMENODE_PORT [DATANODES [ha SECOND_PORT | kerberos]]}.
 * Prints {@code READY hdfs://127.0.0.1:PORT} on stdout once the cluster is
 * up (with {@code ha}: two NameNodes of the name service {@code minidfs-ns},
 * the first active, client config in {@code BASE/conf/} for
 * {@code HADOOP_CONF_DIR}, and {@code READY hdfs://minidfs-ns}), then answers one
 * line per command read on stdin ({@code OK ...} or {@code ERR message}):
 * {@code ping}, {@code stop-namenode}, {@code restart-namenode} (same port,
 * same storage; answers once the NameNode has left safe mode),
 * {@code stop-datanode I}, {@code restart-datanodes}, {@code failover} (HA:
 * the active NameNode becomes standby and the other active), {@code rpcs} (client
 * RPCs the NameNode processed since start, across restarts). Exits, shutting
 * the cluster down, when stdin closes, so it dies with the test process that
 * holds the pipe. Everything but the protocol goes to stderr.
 */
public final class MiniDfs {
    private final MiniDFSCluster cluster;
    private final Deque<MiniDFSCluster.DataNodeProperties> stopped = new ArrayDeque<>();
    /** Client RPCs counted by NameNode instances that were shut down. */
    private long rpcsBefore = 0;
    private boolean namenodeUp = true;
    /** HA: the index of the active NameNode; -1 without HA. */
    private int active = -1;

    static final String NAMESERVICE = "minidfs-ns";

    private MiniKdc kdc;

    private MiniDfs(File base, int port, int datanodes, int haPort, boolean kerberos) throws Exception {
        Configuration conf = new HdfsConfiguration();
        if (kerberos) {
            secure(conf, new File(base, "kdc"));
        }
        // Small blocks: the tests' files span several blocks.
        conf.setLong(DFSConfigKeys.DFS_BLOCK_SIZE_KEY, 1024 * 1024);
        conf.setLong(DFSConfigKeys.DFS_NAMENODE_MIN_BLOCK_SIZE_KEY, 1024);
        conf.setInt(DFSConfigKeys.DFS_BYTES_PER_CHECKSUM_KEY, 512);
        conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, Math.min(3, datanodes));
        // A write goes on with one DataNode lost (the fault tests kill one).
        conf.setInt(DFSConfigKeys.DFS_NAMENODE_REPLICATION_MIN_KEY, 1);
        conf.setBoolean(DFSConfigKeys.DFS_PERMISSIONS_ENABLED_KEY, false);
        conf.setInt(DFSConfigKeys.DFS_NAMENODE_SAFEMODE_EXTENSION_KEY, 0);
        // DataNodes talk to a service RPC port of their own, so the client
        // port's count is clients' calls only.
        conf.set(DFSConfigKeys.DFS_NAMENODE_SERVICE_RPC_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_NAMENODE_HTTP_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_HTTP_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_IPC_ADDRESS_KEY, "127.0.0.1:0");
        // Lost DataNodes are noticed in seconds, not minutes.
        conf.setInt(DFSConfigKeys.DFS_NAMENODE_HEARTBEAT_RECHECK_INTERVAL_KEY, 2000);
        conf.setLong(DFSConfigKeys.DFS_HEARTBEAT_INTERVAL_KEY, 1);
        conf.setLong(DFSConfigKeys.DFS_NAMENODE_STALE_DATANODE_INTERVAL_KEY, 3000);
        MiniDFSCluster.Builder b = new MiniDFSCluster.Builder(conf, base)
                .nameNodePort(port)
                .nameNodeHttpPort(0)
                .numDataNodes(datanodes)
                .format(true);
        if (haPort > 0) {
            b.nnTopology(new MiniDFSNNTopology().addNameservice(new MiniDFSNNTopology.NSConf(NAMESERVICE)
                    .addNN(new MiniDFSNNTopology.NNConf("nn0").setIpcPort(port))
                    .addNN(new MiniDFSNNTopology.NNConf("nn1").setIpcPort(haPort))));
        }
        cluster = b.build();
        if (haPort > 0) {
            cluster.transitionToActive(0);
            active = 0;
            writeClientConf(new File(base, "conf"), port, haPort);
        }
        cluster.waitActive();
        waitOutOfSafeMode();
    }

    /**
     * Starts a KDC and makes {@code conf} a secure cluster's, as Hadoop's own
     * secure tests and hdfs-native's do: one principal for the NameNode and
     * the DataNodes, and DataNodes on unprivileged ports with SASL on block
     * transfers instead of root-only ports.
     */
    private void secure(Configuration conf, File dir) throws Exception {
        dir.mkdirs();
        Properties kconf = MiniKdc.createConf();
        kconf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
        kdc = new MiniKdc(kconf, dir);
        kdc.start();
        File keytab = new File(dir, "hdfs.keytab");
        kdc.createPrincipal(keytab, "hdfs/localhost");
        String principal = "hdfs/localhost@" + kdc.getRealm();
        java.nio.file.Files.copy(kdc.getKrb5conf().toPath(), new File(dir, "krb5.conf").toPath(),
                java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        conf.set("hadoop.security.authentication", "kerberos");
        conf.set("hadoop.security.authorization", "true");
        conf.set("hadoop.rpc.protection", "authentication");
        conf.set(DFSConfigKeys.DFS_DATA_TRANSFER_PROTECTION_KEY, "authentication");
        conf.set(DFSConfigKeys.DFS_NAMENODE_KEYTAB_FILE_KEY, keytab.getAbsolutePath());
        conf.set(DFSConfigKeys.DFS_NAMENODE_KERBEROS_PRINCIPAL_KEY, principal);
        conf.set(DFSConfigKeys.DFS_DATANODE_KEYTAB_FILE_KEY, keytab.getAbsolutePath());
        conf.set(DFSConfigKeys.DFS_DATANODE_KERBEROS_PRINCIPAL_KEY, principal);
        conf.setBoolean(DFSConfigKeys.DFS_BLOCK_ACCESS_TOKEN_ENABLE_KEY, true);
        conf.setBoolean(DFSConfigKeys.IGNORE_SECURE_PORTS_FOR_TESTING_KEY, true);
        org.apache.hadoop.security.UserGroupInformation.setConfiguration(conf);
        org.apache.hadoop.security.UserGroupInformation.loginUserFromKeytab(principal, keytab.getAbsolutePath());
    }

    /** core-site.xml and hdfs-site.xml for clients of the name service. */
    private static void writeClientConf(File dir, int port0, int port1) throws Exception {
        dir.mkdirs();
        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", "hdfs://" + NAMESERVICE);
        try (java.io.OutputStream o = new java.io.FileOutputStream(new File(dir, "core-site.xml"))) {
            core.writeXml(o);
        }
        Configuration hdfs = new Configuration(false);
        hdfs.set("dfs.nameservices", NAMESERVICE);
        hdfs.set("dfs.ha.namenodes." + NAMESERVICE, "nn0,nn1");
        hdfs.set("dfs.namenode.rpc-address." + NAMESERVICE + ".nn0", "127.0.0.1:" + port0);
        hdfs.set("dfs.namenode.rpc-address." + NAMESERVICE + ".nn1", "127.0.0.1:" + port1);
        hdfs.set("dfs.client.failover.proxy.provider." + NAMESERVICE,
                "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
        try (java.io.OutputStream o = new java.io.FileOutputStream(new File(dir, "hdfs-site.xml"))) {
            hdfs.writeXml(o);
        }
    }

    private long clientRpcs() {
        NameNode nn = cluster.getNameNode(Math.max(active, 0));
        if (nn == null) {
            return 0;
        }
        NameNodeRpcServer rpc = (NameNodeRpcServer) nn.getRpcServer();
        return rpc.getClientRpcServer().getRpcMetrics().getTotalRequests();
    }

    private void waitOutOfSafeMode() throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (cluster.getNameNode(Math.max(active, 0)).isInSafeMode()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the NameNode stayed in safe mode for 60 s");
            }
            Thread.sleep(100);
        }
    }

    private String handle(String line) throws Exception {
        String[] w = line.trim().split("\\s+");
        switch (w[0]) {
            case "ping":
                return "OK";
            case "rpcs":
                return "OK " + (rpcsBefore + (namenodeUp ? clientRpcs() : 0));
            case "stop-namenode":
                if (namenodeUp) {
                    rpcsBefore += clientRpcs();
                    cluster.shutdownNameNode(0);
                    namenodeUp = false;
                }
                return "OK";
            case "restart-namenode":
                if (namenodeUp) {
                    rpcsBefore += clientRpcs();
                }
                cluster.restartNameNode(0, true);
                namenodeUp = true;
                cluster.waitActive();
                waitOutOfSafeMode();
                return "OK";
            case "failover": {
                if (active < 0) {
                    return "ERR not an HA cluster";
                }
                int next = 1 - active;
                cluster.transitionToStandby(active);
                cluster.transitionToActive(next);
                active = next;
                waitOutOfSafeMode();
                return "OK";
            }
            case "count": {
                // The NameNode's own count of what is below a path (as
                // `hdfs dfs -count`): folders, files, bytes.
                org.apache.hadoop.fs.ContentSummary c = cluster.getFileSystem(Math.max(active, 0))
                        .getContentSummary(new org.apache.hadoop.fs.Path(w[1]));
                return "OK " + c.getDirectoryCount() + " " + c.getFileCount() + " " + c.getLength();
            }
            case "stop-datanode":
                stopped.push(cluster.stopDataNode(Integer.parseInt(w[1])));
                return "OK";
            case "restart-datanodes":
                while (!stopped.isEmpty()) {
                    cluster.restartDataNode(stopped.pop(), true);
                }
                cluster.waitActive();
                return "OK";
            default:
                return "ERR unknown command " + w[0];
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: MiniDfs BASE NAMENODE_PORT [DATANODES [ha SECOND_PORT]]");
            System.exit(2);
        }
        // The protocol owns stdout; anything a library prints goes to stderr.
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        int port = Integer.parseInt(args[1]);
        int datanodes = args.length > 2 ? Integer.parseInt(args[2]) : 3;
        int haPort = args.length > 4 && args[3].equals("ha") ? Integer.parseInt(args[4]) : 0;
        boolean kerberos = args.length > 3 && args[3].equals("kerberos");
        MiniDfs dfs = new MiniDfs(new File(args[0]), port, datanodes, haPort, kerberos);
        out.println(haPort > 0 ? "READY hdfs://" + NAMESERVICE : "READY hdfs://127.0.0.1:" + port);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String answer;
            try {
                answer = dfs.handle(line);
            } catch (Exception e) {
                answer = "ERR " + e.toString().replace('\n', ' ');
            }
            out.println(answer);
        }
        dfs.cluster.shutdown(true);
        if (dfs.kdc != null) {
            dfs.kdc.stop();
        }
        System.exit(0);
    }
}
