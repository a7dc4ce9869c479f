#!/usr/bin/env python3
"""The policy planner's cost and latency.

  python3 bench/planner.py --binary target/release/compactd [--partitions 10000] [--latency-samples 3]

1. **Requests on S3** (the loopback S3 server of the tests, which counts the
   requests it serves per bucket and method): 10 tables of
   `--partitions / 10` partitions of one small file each, none due (the
   policy's `min-small-files = 4`). One node runs for `--seconds` with
   `--heartbeat 1s --plan-interval 5s`, first with no policy (the idle
   baseline), then with the policy: a window of whole passes (from the end
   of one to the end of another, the first pass over the tables left out),
   counted from its log (`planner pass ended`). Reported: requests per pass
   (the second window minus the baseline, per pass), by bucket, and what
   that makes per hour at the default `--plan-interval 60s`; and the bound
   per monitor round (`--plan-budget`, default 200, plus the one table a
   round may finish). The baseline is subtracted per heartbeat, counted in the S3
   server's request log (`--keep DIR` keeps it, one line per request, and
   the node's log).
2. **Latency at the default timings** (10 s heartbeat, 60 s plan interval)
   on fs: a partition is given its 4th small file at a random moment; the
   time until its merge starts (the node's log, `subtask started`) is
   measured `--latency-samples` times.

Prints `RESULT {json}` lines (part "planner") and a summary.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY = 'name = "warehouse"\ntables = ["db/public/*"]\nexecutor = "merge"\nmin-small-files = 4\nmin-interval = "0s"\n'
ENV = {"AWS_ACCESS_KEY_ID": "compactd-test", "AWS_SECRET_ACCESS_KEY": "compactd-test-secret"}


def start_s3(request_log=None):
    py = os.path.join(REPO, ".venv-s3/bin/python")
    log = ["--request-log", request_log] if request_log else []
    p = subprocess.Popen(
        [py, os.path.join(REPO, "tests/support/s3_server.py")] + log, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    line = p.stdout.readline().decode()
    assert line.startswith("PORT "), line
    return p, int(line.split()[1])


def counts(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_requests") as r:
        return json.loads(r.read())


def by_bucket(c):
    out = {}
    for k, v in c.items():
        b = k.split(" ")[0]
        out[b] = out.get(b, 0) + v
    return out


def diff(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) - a.get(k, 0)}


def heartbeats(request_log):
    """The node's heartbeats (writes of its registry entry) in the idle
    window and in the window with the policy: the stretches of the server's
    request log between its 1st and 2nd, and its 3rd and 4th `/_requests`."""
    beats, mark = [0, 0, 0, 0, 0], 0
    for line in open(request_log):
        if line.endswith(" _requests\n"):
            mark += 1
        elif mark < len(beats) and " tree PUT /compactd/Compaction_V2/Registry/Nodes/n1 " in line:
            beats[mark] += 1
    return beats[1], beats[3]


def s3_cost(args):
    keep = args.keep or tempfile.mkdtemp()
    os.makedirs(keep, exist_ok=True)
    request_log = os.path.join(keep, "requests.log")
    server, port = start_s3(request_log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import_boto = [os.path.join(REPO, ".venv-s3/bin/python"), "-c"]
        fill = f"""
import boto3
s3 = boto3.client("s3", endpoint_url="{endpoint}", region_name="us-east-1",
                  aws_access_key_id="x", aws_secret_access_key="y")
for b in ("tree", "data"):
    s3.create_bucket(Bucket=b)
n = {args.partitions}
for i in range(n):
    t, p = divmod(i, n // 10)
    s3.put_object(Bucket="data", Key=f"lake/db/public/t{{t}}/p{{p:05d}}/f0.txt", Body=b"one small file\\n")
"""
        t0 = time.time()
        subprocess.run(import_boto + [fill], check=True)
        print(f"filled {args.partitions} partitions in {time.time() - t0:.0f} s", file=sys.stderr)
        env = dict(os.environ, **ENV, RUST_LOG="info,compactd::policy=debug")
        root = f"s3://tree/compactd?endpoint={endpoint}&region=us-east-1"
        data = f"s3://data/lake?endpoint={endpoint}&region=us-east-1"
        work = tempfile.mkdtemp()
        log = os.path.join(work, "n1.log")
        node = subprocess.Popen(
            [args.binary, "--root", root, "run", "--node-id", "n1", "--data", data, "--heartbeat", "1s",
             "--plan-interval", "5s", "--listen", "off"],
            env=env, stderr=open(log, "w"), stdout=subprocess.DEVNULL,
        )
        time.sleep(5)
        c0 = counts(port)
        time.sleep(args.seconds)
        c1 = counts(port)
        idle = by_bucket(diff(c0, c1))
        pol = os.path.join(work, "w.toml")
        open(pol, "w").write(POLICY)
        subprocess.run([args.binary, "--root", root, "policy", "apply", pol], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        # The window runs from the end of a pass to the end of a later one,
        # so that it holds whole passes; it starts after the first pass over
        # the tables (which writes every table's summary once). The idle
        # node's own passes (no policy: `tables=0`) are not counted.
        deadline = time.time() + 300

        def passes_ended():
            return len(re.findall(r"planner pass ended tables=[1-9]", open(log).read()))

        def await_pass(n):
            while passes_ended() < n:
                assert time.time() < deadline, "no planner pass ended"
                time.sleep(0.05)

        await_pass(2)
        passes0 = passes_ended()
        c2 = counts(port)
        t2 = time.time()
        while time.time() - t2 < args.seconds:
            time.sleep(0.5)
        deadline = time.time() + 300
        await_pass(passes_ended() + 1)
        c3 = counts(port)
        window_s = time.time() - t2
        passes = passes_ended() - passes0
        planned = by_bucket(diff(c2, c3))
        methods = diff(c2, c3)
        node.terminate()
        node.wait(timeout=30)
        # The idle node's requests are subtracted per heartbeat (its tick's
        # cadence), not per second: a planner that slows the tick (one that
        # runs inside it) would otherwise be credited with the heartbeats it
        # delayed.
        beats = heartbeats(request_log)
        extra = {b: planned.get(b, 0) - idle.get(b, 0) * beats[1] / beats[0] for b in set(planned) | set(idle)}
        per_pass = {b: round(v / max(passes, 1), 1) for b, v in extra.items()}
        total = sum(extra.values()) / max(passes, 1)
        r = {
            "part": "planner",
            "what": "s3_requests",
            "partitions": args.partitions,
            "tables": 10,
            "window_s": round(window_s, 1),
            "passes": passes,
            "idle_heartbeats": beats[0],
            "with_policy_heartbeats": beats[1],
            "idle_requests_by_bucket": idle,
            "with_policy_requests_by_bucket": planned,
            "with_policy_requests_by_method": methods,
            "planner_requests_per_pass_by_bucket": per_pass,
            "planner_requests_per_pass": round(total, 1),
            "planner_requests_per_hour_default_interval": round(total * 60),
        }
        print("RESULT " + json.dumps(r))
        shutil.copy(log, os.path.join(keep, "n1.log"))
        shutil.rmtree(work, ignore_errors=True)
    finally:
        server.terminate()
        if not args.keep:
            shutil.rmtree(keep, ignore_errors=True)


def latency(args):
    work = tempfile.mkdtemp()
    data = os.path.join(work, "data")
    root = os.path.join(work, "root")
    for p in range(args.latency_samples):
        d = os.path.join(data, f"db/public/lat/p{p}")
        os.makedirs(d)
        for i in range(3):
            open(os.path.join(d, f"f{i}.txt"), "w").write(f"p{p} {i}\n")
    pol = os.path.join(work, "w.toml")
    open(pol, "w").write(POLICY)
    log = os.path.join(work, "n1.log")
    node = subprocess.Popen(
        [args.binary, "--root", root, "run", "--node-id", "n1", "--data", data, "--listen", "127.0.0.1:0"],
        stderr=open(log, "w"), stdout=subprocess.DEVNULL, env=dict(os.environ, RUST_LOG="info"),
    )
    time.sleep(3)
    subprocess.run([args.binary, "--root", root, "policy", "apply", pol], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(7)
    samples = []
    for p in range(args.latency_samples):
        time.sleep(rng.uniform(5, 65))
        started = open(log).read().count("subtask started")
        t0 = time.time()
        open(os.path.join(data, f"db/public/lat/p{p}", "f3.txt"), "w").write(f"p{p} 3\n")
        while open(log).read().count("subtask started") == started:
            time.sleep(0.05)
            assert time.time() - t0 < 300, "no merge started"
        samples.append(round(time.time() - t0, 2))
        print(f"threshold → merge start: {samples[-1]} s", file=sys.stderr)
    node.terminate()
    node.wait(timeout=30)
    print("RESULT " + json.dumps({"part": "planner", "what": "latency_default_timings", "samples_s": samples,
                                  "max_s": max(samples), "mean_s": round(sum(samples) / len(samples), 2)}))
    shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(REPO, "target/release/compactd"))
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--latency-samples", type=int, default=3)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="keep the S3 server's request log (one line per request) and the "
                    "node's log in DIR")
    args = ap.parse_args()
    s3_cost(args)
    if not args.skip_latency:
        latency(args)


if __name__ == "__main__":
    main()
