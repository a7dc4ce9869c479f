"""A table writer for tests/all/tasks/policies.rs: keeps adding small files.

Every round it writes one small file to each partition of each table,
`<db>/public/t<NN>/p<M>/w-<round>.txt`, holding `LINES` lines named
`t<NN>/p<M>/<round>/<i>` (so a reader can check that every line written is
there exactly once after the compactions). It stops after `--rounds`
rounds (numbered from `--first`) or when the file `--stop` exists, whichever comes first, and prints
the number of rounds it completed.

Targets: a folder (`--fs DIR`) or an S3 prefix (`--s3 ENDPOINT BUCKET
PREFIX`, credentials from the environment; boto3 from the S3 venv).
"""

import argparse
import os
import sys
import time

LINES = 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs")
    ap.add_argument("--s3", nargs=3, metavar=("ENDPOINT", "BUCKET", "PREFIX"))
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--first", type=int, default=0, help="number of the first round")
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--stop")
    a = ap.parse_args()
    if a.s3:
        import boto3

        endpoint, bucket, prefix = a.s3
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

        def put(key, body):
            s3.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)

    else:

        def put(key, body):
            path = os.path.join(a.fs, key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
            with open(tmp, "wb") as f:
                f.write(body)
            # Readers never see a half-written file.
            os.rename(tmp, path)

    done = 0
    for r in range(a.first, a.first + a.rounds):
        if a.stop and os.path.exists(a.stop):
            break
        started = time.monotonic()
        n = a.tables * a.partitions
        for k in range(n):
            t, p = divmod(k, a.partitions)
            name = f"t{t:02d}/p{p}"
            body = "".join(f"{name}/{r}/{i}\n" for i in range(LINES)).encode()
            put(f"db/public/{name}/w-{r:06d}.txt", body)
            # Spread over the round, as independent writers are: not every
            # partition due in the same instant.
            time.sleep(max(0.0, started + a.every * (k + 1) / n - time.monotonic()))
        done += 1
    print(done)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
