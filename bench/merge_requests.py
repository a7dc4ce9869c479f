#!/usr/bin/env python3
"""S3 requests per merge unit, by the loopback S3 server's own count:

    .venv-s3/bin/python bench/merge_requests.py --binary target/release/compactd [--binary OTHER] \
        [--files 40] [--partitions 5]

(the S3 server's venv, for boto3: `bash .ci/install-s3-server.sh`).

For each binary: a fresh bucket holding one table of P partitions of F small
newline-delimited files (written with boto3, not counted), then
`compactd __merge` of each partition as a worker runs it (one unit each, no
scheduler tree, no fence), then a second run of each partition (a rerun
that finds its round done). Prints one `RESULT {json}` line per binary with
the requests per unit by method and kind, for the first runs and for the
reruns. Compares what the merge commit protocol costs on S3, where every
request is billed: the plan's listings, the inputs' reads, the commit, the
outputs' copy and the inputs' deletes.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3 import ENV, counts, start_s3  # noqa: E402


def boto(endpoint):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"], aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])


def diff(c0, c1):
    return {k: c1.get(k, 0) - c0.get(k, 0) for k in c1 if c1.get(k, 0) - c0.get(k, 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--partitions", type=int, default=5)
    a = ap.parse_args()
    os.environ.update(ENV)
    server, port = start_s3()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto(endpoint)
    try:
        for n, binary in enumerate(a.binary):
            bucket = f"merge{n}"
            s3.create_bucket(Bucket=bucket)
            for p in range(a.partitions):
                for f in range(a.files):
                    body = "".join(f"p{p}-f{f}-l{i}\n" for i in range(10)).encode()
                    s3.put_object(Bucket=bucket, Key=f"data/db/s/t/p{p}/part-{f:04}", Body=body)
            root = f"s3://{bucket}/data?endpoint={endpoint}&region=us-east-1"
            figures = {}
            for run in ("first", "rerun"):
                c0 = counts(port)
                for p in range(a.partitions):
                    r = subprocess.run([binary, "--root", root, "__merge", "--dir", f"db/s/t/p{p}/",
                                        "--task", "aaaaffff.16176931.56000000.0", "--round", "1", "--attempt",
                                        "1" if run == "first" else "2", "--target-size", "1MiB"],
                                       capture_output=True, text=True, timeout=300)
                    if r.returncode != 0:
                        raise SystemExit(f"{binary} p{p} {run}: {r.stderr}")
                d = diff(c0, counts(port))
                figures[run] = {"requests_per_unit": round(sum(d.values()) / a.partitions, 2),
                                "by_kind": {k: round(v / a.partitions, 2) for k, v in sorted(d.items())}}
            left = s3.list_objects_v2(Bucket=bucket, Prefix="data/db/s/t/p0/")
            data_files = [o["Key"] for o in left.get("Contents", []) if "/_compactd/" not in o["Key"]]
            print("RESULT " + json.dumps({"bench": "merge_requests", "binary": binary, "files": a.files,
                                          "partitions": a.partitions, "files_after": len(data_files), **figures}),
                  flush=True)
    finally:
        server.stdin.close()
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
