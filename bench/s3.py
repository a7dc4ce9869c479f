#!/usr/bin/env python3
"""S3 requests per subtask, by the loopback S3 server's own count (bench/run.sh, or alone):

    python3 bench/s3.py --binary target/release/compactd [--shards 1000]

Starts the tests' loopback S3 server (moto, one request at a time; it counts
what it serves by bucket, method and kind, `GET /_requests`), 3 `compactd
run` processes with the tree in one bucket at the default timings (10 s
heartbeat, 30 s session and lease, wake-ups on), the command executor
(`true`), then one task of N shards (`submit --wait`). Requests per subtask =
the server's count over the whole `submit --wait` (the client's own
requests, the nodes' heartbeats, lease reads and idle polls during it
included) divided by N. Prints one `RESULT {json}` line.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dispatch import Cluster, emit  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"AWS_ACCESS_KEY_ID": "compactd-test", "AWS_SECRET_ACCESS_KEY": "compactd-test-secret"}


def start_s3():
    py = os.path.join(REPO, ".venv-s3/bin/python")
    if not os.path.exists(py):
        raise SystemExit("the loopback S3 server's venv is missing: run `bash .ci/install-s3-server.sh`")
    p = subprocess.Popen([py, os.path.join(REPO, "tests/support/s3_server.py")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith("PORT "), line
    return p, int(line.split()[1])


def counts(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_requests") as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--base", default=tempfile.gettempdir())
    ap.add_argument("--shards", type=int, default=1000)
    a = ap.parse_args()
    os.environ.update(ENV)
    server, port = start_s3()
    endpoint = f"http://127.0.0.1:{port}"
    c = None
    try:
        subprocess.run([os.path.join(REPO, ".venv-s3/bin/python"), "-c",
                        f"import boto3; boto3.client('s3', endpoint_url='{endpoint}', region_name='us-east-1')"
                        ".create_bucket(Bucket='tree')"], check=True, env=dict(os.environ))
        root = f"s3://tree/compactd?endpoint={endpoint}&region=us-east-1"
        c = Cluster(a.binary, a.base, 3, root=root, heartbeat="10s", session="30s", lease="30s", max_running=256)
        time.sleep(2)
        c0 = counts(port)
        t = time.time()
        r = subprocess.run([c.binary, "--root", c.root, "submit", "--db", "bench", "--schema", "s", "--table", "t",
                            "--shards", str(a.shards), "--wait", "--json"], capture_output=True, text=True,
                           timeout=900)
        secs = time.time() - t
        c1 = counts(port)
        diff = {k: c1.get(k, 0) - c0.get(k, 0) for k in c1 if c1.get(k, 0) - c0.get(k, 0)}
        total = sum(diff.values())
        emit("s3_requests", shards=a.shards, nodes=3, seconds=round(secs, 1), exit_code=r.returncode,
             requests=total, requests_per_subtask=round(total / a.shards, 3),
             by_kind={k: round(v / a.shards, 3) for k, v in sorted(diff.items())},
             redispatches=c.logs("dispatching again"))
    finally:
        if c:
            c.stop()
            c.cleanup()
        server.terminate()


if __name__ == "__main__":
    main()
