#!/usr/bin/env python3
"""compactd on a real HDFS beside fs, in one run (bench/run.sh, or alone):

    python3 bench/hdfs.py --binary target/release/compactd [--shards 2000]

Starts the test launcher's MiniDFSCluster (a NameNode and 3 DataNodes in one
JVM; `bash .ci/install-hdfs.sh` builds it), then measures, for 3 `compactd
run` processes with the command executor (`true`) at the default timings:
  - dispatch: one task of N shards (`submit --wait`) with the tree on fs and
    with the tree on HDFS;
  - NameNode RPCs per subtask: the NameNode's own count (its RPC server's
    processed calls, asked of the launcher before and after) beside the count
    compactd keeps itself (`compactd_namenode_rpcs_total` on every node's
    /metrics);
  - idle NameNode RPCs per node-minute: the same count over a quiet minute;
  - NameNode RPCs of one status page load (`GET /` on a node).
Prints one `RESULT {json}` line per measurement. Diagnostics (environment):
JVMFLAGS replaces the launcher's `-XX:TieredStopAtLevel=1` (the tests' flag
for a fast start), DATANODES the 3 DataNodes (1: replication 1).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dispatch import Cluster, emit, throughput  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(REPO, "tests/support/minidfs")


class MiniDfs:
    def __init__(self, base):
        self.dir = tempfile.mkdtemp(prefix="minidfs.", dir=base)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cp = f"{LAUNCHER}/target/classes:{LAUNCHER}/target/lib/*"
        if not os.path.isdir(f"{LAUNCHER}/target/lib"):
            raise SystemExit("the MiniDFS launcher is not built: run `bash .ci/install-hdfs.sh`")
        # The JVM flags of tests/all/common/hdfs.rs.
        jvm = os.environ.get("JVMFLAGS", "-XX:TieredStopAtLevel=1").split()
        datanodes = os.environ.get("DATANODES", "3")
        self.proc = subprocess.Popen(["java", "-Xmx1g", *jvm, "-cp", cp, "compactd.MiniDfs", self.dir, str(port), datanodes],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        t = time.time()
        line = self.proc.stdout.readline().strip()
        if not line.startswith("READY "):
            raise SystemExit(f"MiniDFS did not start: {line!r}")
        self.url = line.split(" ", 1)[1]
        self.started_s = time.time() - t

    def cmd(self, c):
        self.proc.stdin.write(c + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer.startswith("OK"):
            raise SystemExit(f"MiniDFS {c}: {answer}")
        return answer[2:].strip()

    def rpcs(self):
        return int(self.cmd("rpcs"))

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def own_count(c):
    """NameNode RPCs compactd counted itself, summed over its nodes."""
    return sum(own_by_method(c).values())


def own_by_method(c):
    """compactd's own NameNode RPC counts by method, summed over its nodes."""
    rows = json.loads(c.cli("nodes", "--json").stdout)
    out = {}
    for r in rows:
        if r.get("addr") and r["id"] in c.procs:
            text = urllib.request.urlopen(f"http://{r['addr']}/metrics", timeout=5).read().decode()
            for line in text.splitlines():
                if line.startswith("compactd_namenode_rpcs_total{"):
                    labels, value = line.rsplit(" ", 1)
                    method = labels.split('method="', 1)[1].split('"', 1)[0] if 'method="' in labels else "?"
                    out[method] = out.get(method, 0.0) + float(value)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--base", default=tempfile.gettempdir())
    ap.add_argument("--shards", type=int, default=2000)
    ap.add_argument("--idle-seconds", type=int, default=60)
    ap.add_argument("--suite", help="the suite bench binary: also run its backend limit on the HDFS")
    a = ap.parse_args()
    args = dict(heartbeat="10s", session="30s", lease="30s", max_running=256)

    fs = Cluster(a.binary, a.base, 3, **args)
    try:
        throughput(fs, a.shards, "fs, for the HDFS comparison", medium="fs")
    finally:
        fs.stop()
        fs.cleanup()

    dfs = MiniDfs(a.base)
    emit("hdfs_cluster", start_seconds=round(dfs.started_s, 1), url=dfs.url)
    c = None
    try:
        if a.suite:
            env = dict(os.environ, COMPACTD_BENCH_LIMIT_SUBTASKS=str(a.shards), COMPACTD_BENCH_LIMIT_LOOPS="1,64")
            r = subprocess.run([a.suite, "limit", f"{dfs.url}/limit"], env=env, capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if line.startswith("RESULT "):
                    print(line, flush=True)
        c = Cluster(a.binary, a.base, 3, root=f"{dfs.url}/bench/tree", **args)
        # Idle: a quiet period once every node joined.
        time.sleep(5)
        # (`own_count` runs `compactd nodes`, which reads the tree: outside
        # the NameNode's counts.)
        own0 = own_count(c)
        n0, t0 = dfs.rpcs(), time.time()
        time.sleep(a.idle_seconds)
        n1, t1 = dfs.rpcs(), time.time()
        own1 = own_count(c)
        minutes = (t1 - t0) / 60
        emit("hdfs_idle", nodes=3, seconds=round(t1 - t0, 1),
             namenode_rpcs_per_node_minute=round((n1 - n0) / 3 / minutes, 2),
             own_count_per_node_minute=round((own1 - own0) / 3 / minutes, 2))
        # One status page load.
        rows = json.loads(c.cli("nodes", "--json").stdout)
        addr = next(r["addr"] for r in rows if r.get("addr"))
        n0 = dfs.rpcs()
        urllib.request.urlopen(f"http://{addr}/", timeout=30).read()
        n1 = dfs.rpcs()
        emit("hdfs_status_page", namenode_rpcs=n1 - n0)
        # Dispatch.
        # The NameNode's count includes the `submit` client and the few
        # `compactd nodes`/`status` calls of the measurement itself.
        by0 = own_by_method(c)
        n0 = dfs.rpcs()
        throughput(c, a.shards, "hdfs", medium="hdfs")
        n1 = dfs.rpcs()
        by1 = own_by_method(c)
        own0, own1 = sum(by0.values()), sum(by1.values())
        emit("hdfs_rpcs", shards=a.shards, namenode_rpcs_per_subtask=round((n1 - n0) / a.shards, 3),
             own_count_per_subtask=round((own1 - own0) / a.shards, 3))
        # Where a subtask's NameNode calls go (compactd's own count).
        per = {m: round((by1.get(m, 0) - by0.get(m, 0)) / a.shards, 3) for m in sorted(set(by0) | set(by1))}
        emit("hdfs_rpcs_by_method", shards=a.shards, **{m: v for m, v in per.items() if v})
    finally:
        if c:
            c.stop()
            c.cleanup()
        dfs.stop()


if __name__ == "__main__":
    main()
