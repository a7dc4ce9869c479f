#!/usr/bin/env python3
"""Dispatch, latency and memory of real `compactd run` processes (bench/run.sh).

Starts a cluster of `compactd run` processes on a temp fs root with the
command executor, then measures:
  - throughput: one task of N shards running the nodes' default `--command true`, via `compactd submit --wait`;
  - submit-to-start latency: single-shard tasks whose command records
    `date +%s%N`, compared with the wall time just before `compactd submit`;
  - resident memory: VmRSS of the idle nodes; VmRSS/VmHWM of the manager
    while it runs a task of M shards (sampled every 100 ms).
Prints one `RESULT {json}` line per measurement.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def emit(part, **v):
    v["part"] = part
    print("RESULT " + json.dumps(v), flush=True)


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# The tree layout the nodes run in: 4 (the default) waits until the
# monitor put layout 4 in force (one session after every node advertised
# it: docs/operations.md, "The layout switch"); 3 and 2 start the nodes with
# `--max-layout 3` or `2` (batches named without their term; the form
# before batches). Binaries before layout 4: 3 or 2; without the switch: 2.
LAYOUT = int(os.environ.get("BENCH_LAYOUT", "4"))


class Cluster:
    def __init__(self, binary, base, nodes, heartbeat, session, lease, max_running, root=None):
        """`root`: the tree's URI (default: a folder in a fresh temp dir under `base`)."""
        # The nodes run in the cluster's own folder: a relative path (as
        # RESULTS.md's commands give it) would not be found from there.
        binary = os.path.abspath(binary)
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="cluster.", dir=base)
        self.root = root or os.path.join(self.dir, "root")
        self.args = dict(heartbeat=heartbeat, session=session, lease=lease, max_running=max_running)
        self.procs = {}
        for i in range(1, nodes + 1):
            nid = f"n{i}"
            log = open(os.path.join(self.dir, f"{nid}.log"), "w")
            self.procs[nid] = subprocess.Popen(
                [binary, "--root", self.root, "run", "--node-id", nid, "--executor", "command", "--command", "true",
                 "--command", "stamp=date +%s%N > {param.out}", "--allow-root", "--listen", "127.0.0.1:0",
                 "--heartbeat", heartbeat, "--session-timeout", session, "--lease", lease,
                 "--max-running", str(max_running), "--data", os.path.join(self.dir, "data")]
                + (["--max-layout", str(LAYOUT)] if LAYOUT < 4 else []),
                stdout=subprocess.DEVNULL, stderr=log, cwd=self.dir)
        self.wait_members(nodes)
        if LAYOUT >= 3:
            self.wait_layout(LAYOUT)

    def wait_layout(self, layout, timeout=180):
        """Until the monitor has put `layout` in force (`nodes --json`)."""
        end = time.time() + timeout
        while time.time() < end:
            r = self.cli("nodes", "--json", check=False)
            if r.returncode == 0 and any(x.get("layout_in_force") == layout for x in json.loads(r.stdout)):
                # The lease that says so reaches every node at its next poll
                # (one heartbeat interval): a manager writes what its view says.
                hb = self.args["heartbeat"]
                time.sleep(1.0 + (float(hb[:-2]) / 1000 if hb.endswith("ms") else float(hb[:-1])))
                return
            time.sleep(0.5)
        raise SystemExit(f"layout {layout} was not put in force within {timeout} s")

    def cli(self, *args, check=True):
        return subprocess.run([self.binary, "--root", self.root, *args], capture_output=True, text=True, check=check)

    def wait_members(self, n, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            r = self.cli("nodes", "--json", check=False)
            if r.returncode == 0:
                rows = json.loads(r.stdout)
                if sum(1 for x in rows if x.get("alive")) >= n and any(x.get("monitor") for x in rows):
                    # members are published in the lease a moment later
                    time.sleep(1.0)
                    return
            time.sleep(0.2)
        raise SystemExit(f"cluster did not come up: {r.stderr}")

    def logs(self, needle):
        n = 0
        for nid in self.procs:
            with open(os.path.join(self.dir, f"{nid}.log"), errors="replace") as f:
                n += sum(1 for line in f if needle in line)
        return n

    def backend_ops(self):
        """Backend requests of every node so far, by kind (GET /v1/status)."""
        import urllib.request
        rows = json.loads(self.cli("nodes", "--json").stdout)
        total = {}
        for r in rows:
            if r.get("addr") and r["id"] in self.procs:
                st = json.loads(urllib.request.urlopen(f"http://{r['addr']}/v1/status", timeout=5).read())
                for k, v in st["backend"].items():
                    total[k] = total.get(k, 0) + v
        return total

    def manager_of(self, task):
        st = json.loads(self.cli("status", task, "--json").stdout)
        return st.get("manager")

    def stop(self):
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def cpu_seconds(pid):
    """(own, reaped children's) CPU seconds of `pid` (/proc/PID/stat: utime
    + stime, cutime + cstime); the executors a node ran are its children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return (0.0, 0.0)
    tick = os.sysconf("SC_CLK_TCK")
    return ((int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick)


def throughput(c, shards, label, medium="disk", timeout=300, table="t"):
    ops0 = c.backend_ops()
    cpu0 = {n: cpu_seconds(p.pid) for n, p in c.procs.items()}
    t = time.time()
    p = subprocess.Popen([c.binary, "--root", c.root, "submit", "--db", "bench", "--schema", "s", "--table", table,
                          "--shards", str(shards), "--wait", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a stuck task: report it, do not hang the run
        p.kill()
        out, _ = p.communicate()
    secs = time.time() - t
    # The children's CPU is counted when they are reaped: the last ones a
    # moment after the task ends.
    time.sleep(0.3)
    cpu1 = {n: cpu_seconds(p.pid) for n, p in c.procs.items()}
    daemon_cpu = sum(cpu1[n][0] - cpu0[n][0] for n in cpu0)
    executor_cpu = sum(cpu1[n][1] - cpu0[n][1] for n in cpu0)
    ops1 = c.backend_ops()
    ops = {k: (ops1[k] - ops0.get(k, 0)) / shards for k in ops1}
    r = subprocess.CompletedProcess(p.args, p.returncode, out, "")
    task = json.loads(r.stdout.splitlines()[0])["id"] if r.stdout.strip() else None
    emit("dispatch", label=label, nodes=len(c.procs), shards=shards, seconds=secs, subtasks_per_s=shards / secs,
         exit_code=r.returncode, starts=c.logs("subtask started"), redispatches=c.logs("dispatching again"),
         rejoins=c.logs("rejoining with a new incarnation"), declared_offline=c.logs("declared offline"),
         manager=c.manager_of(task) if task else None, medium=medium,
         daemon_cpu_ms_per_subtask=round(daemon_cpu * 1000 / shards, 3),
         executor_cpu_ms_per_subtask=round(executor_cpu * 1000 / shards, 3),
         ops_per_subtask=round(sum(ops.values()), 3), ops_per_subtask_by_kind={k: round(v, 3) for k, v in ops.items()},
         **c.args)


def latency(c, samples):
    out = os.path.join(c.dir, "lat")
    os.makedirs(out)
    lat = []
    for i in range(samples):
        time.sleep(random.uniform(0.05, 0.4))  # random phase against the nodes' polls
        path = os.path.join(out, str(i))
        t0 = time.time_ns()
        c.cli("submit", "--db", "bench", "--schema", "s", "--table", f"lat{i}", "--shards", "1",
              "--command-name", "stamp", "--param", f"out={path}")
        end = time.time() + 30
        while time.time() < end:
            try:
                with open(path) as f:
                    s = f.read().strip()
                if s:
                    lat.append((int(s) - t0) / 1e6)
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.005)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))]
    emit("latency", samples=len(lat), p50_ms=q(50), p90_ms=q(90), p99_ms=q(99), min_ms=lat[0], max_ms=lat[-1],
         mean_ms=statistics.mean(lat), **c.args)


def idle_rss(c, settle):
    time.sleep(settle)
    rss = {nid: status_kib(p.pid, "VmRSS:") for nid, p in c.procs.items()}
    emit("memory_idle", settle_s=settle, rss_kib=rss, max_rss_kib=max(rss.values()), **c.args)


def manager_rss(c, shards):
    before = {nid: status_kib(p.pid, "VmRSS:") for nid, p in c.procs.items()}
    t = time.time()
    sub = subprocess.Popen([c.binary, "--root", c.root, "submit", "--db", "bench", "--schema", "s", "--table", "big",
                            "--shards", str(shards), "--wait", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    task = json.loads(sub.stdout.readline())["id"]
    manager = None
    peak = {nid: 0 for nid in c.procs}
    while sub.poll() is None:
        if manager is None:
            try:
                manager = c.manager_of(task)
            except Exception:
                pass
        for nid, p in c.procs.items():
            peak[nid] = max(peak[nid], status_kib(p.pid, "VmRSS:") or 0)
        time.sleep(0.1)
    secs = time.time() - t
    manager = manager or c.manager_of(task)
    mp = c.procs[manager].pid
    emit("memory_manager", shards=shards, seconds=secs, subtasks_per_s=shards / secs, exit_code=sub.returncode,
         manager=manager, rss_before_kib=before, peak_rss_sampled_kib=peak,
         manager_rss_before_kib=before[manager], manager_peak_rss_kib=peak[manager],
         manager_hwm_kib=status_kib(mp, "VmHWM:"), manager_rss_after_kib=status_kib(mp, "VmRSS:"),
         redispatches=c.logs("dispatching again"), **c.args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--base", default=tempfile.gettempdir())
    ap.add_argument("--shards", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--manager-shards", type=int, default=10000)
    ap.add_argument("--max-running", type=int, default=256)
    ap.add_argument("--short-session", action="store_true", help="also run the 2,000 shards with a 3 s session/lease")
    ap.add_argument("--medium", default="disk", help="label of what --base is on (disk, tmpfs)")
    ap.add_argument("--throughput-only", action="store_true", help="only the 2,000-shard run (no RSS, no latency)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --throughput-only: that many tasks back to back in the same cluster, one line each "
                         "(a node's wake-ups in a sustained run)")
    ap.add_argument("--warmup", type=int, default=9,
                    help="with --throughput-only: a task of that many shards, untimed, before the timed ones (3 per "
                         "node, as the Celery peer warms up with 3 tasks per worker; 0: none)")
    ap.add_argument("--heartbeat", default="10s", help="the main cluster's timings: the defaults of compactd run")
    ap.add_argument("--session", default="30s")
    ap.add_argument("--lease", default="30s")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)
    random.seed(1)

    # Main cluster: the default timings (10 s polls, 30 s session and
    # lease); work moves by wake-ups. The run with 200 ms polls and a 3 s
    # session, where a slow tick would cost re-dispatches, is reported apart.
    c = Cluster(a.binary, a.base, 3, a.heartbeat, a.session, a.lease, a.max_running)
    timings = f"{a.heartbeat} polls, {a.session} session/lease"
    try:
        if a.throughput_only:
            if a.warmup:
                warm = subprocess.run([c.binary, "--root", c.root, "submit", "--db", "bench", "--schema", "s",
                                       "--table", "warmup", "--shards", str(a.warmup), "--wait", "--json"],
                                      capture_output=True, text=True, timeout=120)
                if warm.returncode != 0:
                    raise SystemExit(f"the warm-up task failed: {warm.stdout} {warm.stderr}")
            for i in range(a.repeat):
                label = f"3 nodes, fs on {a.medium}, {timings}" + (f", task {i + 1} of {a.repeat}" if a.repeat > 1 else "")
                throughput(c, a.shards, label, medium=a.medium, table=f"t{i}" if i else "t")
            return
        idle_rss(c, 5)
        latency(c, a.samples)
        throughput(c, a.shards, f"3 nodes, fs, {timings}", medium=a.medium)
        if a.manager_shards:
            manager_rss(c, a.manager_shards)
    finally:
        c.stop()
        c.cleanup()

    if a.short_session:
        c = Cluster(a.binary, a.base, 3, "200ms", "3s", "3s", a.max_running)
        try:
            throughput(c, a.shards, "3 nodes, fs, 200ms polls, 3s session/lease", medium=a.medium)
        finally:
            c.stop()
            c.cleanup()


if __name__ == "__main__":
    sys.exit(main())
