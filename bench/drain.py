#!/usr/bin/env python3
"""A backlog's drain: a policy against one submit, same cluster, same run.

  python3 bench/drain.py --binary target/release/compactd [--partitions 1000]

Three nodes on fs at the default timings (10 s heartbeat, 60 s plan
interval, 2 subtasks each; wake-ups on 127.0.0.1). Two copies of a table of
`--partitions` partitions of 4 small files each: `db/bulk/big` is compacted
by one `submit` (one task, a unit per partition), then `db/public/big` by a
policy (`min-small-files = 4`), with no submit: the planner submits one task
per partition as slots free. Each is timed from the command to the moment
every partition is one file (the data folder polled every 50 ms).

Prints a `RESULT {json}` line (part "planner", what "drain") and a summary.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY = 'name = "lake"\ntables = ["db/public/*"]\nexecutor = "merge"\nmin-small-files = 4\nsmall-file-size = 100\n'


def fill(data, schema, n):
    for p in range(n):
        d = os.path.join(data, f"db/{schema}/big/p{p:04d}")
        os.makedirs(d)
        for f in range(4):
            with open(os.path.join(d, f"f{f}.txt"), "w") as fh:
                fh.write(f"p{p:04d}/{f}\n")


def compacted(data, schema):
    base = os.path.join(data, f"db/{schema}/big")
    done = 0
    for p in os.listdir(base):
        if p.startswith((".", "_")):
            continue
        names = [f for f in os.listdir(os.path.join(base, p)) if not f.startswith((".", "_"))]
        done += len(names) == 1
    return done


def wait_all(data, schema, n, limit):
    t0 = time.time()
    while compacted(data, schema) < n:
        assert time.time() - t0 < limit, f"{schema}: {compacted(data, schema)} of {n} after {limit} s"
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(REPO, "target/release/compactd"))
    ap.add_argument("--partitions", type=int, default=1000)
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    data, root = os.path.join(work, "data"), os.path.join(work, "root")
    fill(data, "bulk", args.partitions)
    fill(data, "public", args.partitions)
    b = [args.binary, "--root", root]
    nodes = []
    for n in ("n1", "n2", "n3"):
        nodes.append(subprocess.Popen(
            b + ["run", "--node-id", n, "--data", data, "--listen", "127.0.0.1:0"],
            stderr=open(os.path.join(work, f"{n}.log"), "w"), stdout=subprocess.DEVNULL,
            env=dict(os.environ, RUST_LOG="info"),
        ))
        time.sleep(1)
    deadline = time.time() + 60
    while time.time() < deadline:
        out = subprocess.run(b + ["nodes", "--json"], capture_output=True, text=True)
        if out.returncode == 0 and sum(r["alive"] for r in json.loads(out.stdout)) == 3:
            break
        time.sleep(0.5)
    try:
        t0 = time.time()
        subprocess.run(b + ["submit", "--db", "db", "--schema", "bulk", "--table", "big"], check=True,
                       stdout=subprocess.DEVNULL)
        wait_all(data, "bulk", args.partitions, 1800)
        by_submit = time.time() - t0
        print(f"one submit: {by_submit:.1f} s", file=sys.stderr)
        pol = os.path.join(work, "lake.toml")
        open(pol, "w").write(POLICY)
        t0 = time.time()
        subprocess.run(b + ["policy", "apply", pol], check=True, stdout=subprocess.DEVNULL)
        wait_all(data, "public", args.partitions, 3600)
        by_policy = time.time() - t0
        print(f"by policy: {by_policy:.1f} s", file=sys.stderr)
    finally:
        for p in nodes:
            p.terminate()
        for p in nodes:
            p.wait(timeout=60)
    r = {"part": "planner", "what": "drain", "partitions": args.partitions, "nodes": 3,
         "by_submit_s": round(by_submit, 1), "by_policy_s": round(by_policy, 1),
         "ratio": round(by_policy / by_submit, 2)}
    print("RESULT " + json.dumps(r))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
