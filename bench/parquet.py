#!/usr/bin/env python3
"""The Parquet compaction benchmark: compactd's built-in `parquet` executor
against pyarrow, DuckDB and a plain byte copy (the floor), on one generated
table, in one run. Run with the python of .venv-parquet (pyarrow, duckdb):

  .venv-parquet/bin/python bench/parquet.py --binary target/release/compactd --base DIR

Prints `RESULT {json}` lines (part "parquet") for bench/report.py.

The table: Hive-style `db/s/t/dt=<p>/part-<n>.parquet`, P partitions of F
files of R rows each (default 4 x 100 x 10,000), written by pyarrow with its
default codec (snappy), the schema of tests/support/parquet_tool.py (nulls,
strings, zoned timestamps, decimals, a list and a struct column, metadata).
Every peer rewrites each partition into one file with zstd (the target size
128 MiB is above a partition's size), three times; the median wall time of
the peer's processes (start-up included) gives rows/s and MiB/s (input MiB);
peak RSS from GNU time (the largest of the peer's processes, all runs).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import parquet_tool  # noqa: E402

TABLE = "db/s/t"


def generate(root, partitions, files, rows):
    """Eight distinct base tables (row by row, like parquet_tool gen), then
    each file is one of them with its own ids."""
    import random
    import datetime
    import decimal

    rng = random.Random(42)
    base_ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    bases = []
    for b in range(8):
        ids = range(rows)
        cols = {
            "id": list(ids),
            "name": [None if rng.random() < 0.1 else f"user-{rng.randrange(10**6)}" for _ in ids],
            "ts": [base_ts + datetime.timedelta(seconds=i * 7 + b, microseconds=rng.randrange(10**6)) for i in ids],
            "amount": [None if rng.random() < 0.05 else decimal.Decimal(rng.randrange(-10**9, 10**9)) / 100 for _ in ids],
            "tags": [None if rng.random() < 0.1 else [f"t{rng.randrange(50)}" for _ in range(rng.randrange(4))] for _ in ids],
            "attrs": [None if rng.random() < 0.1 else {"k": f"k{rng.randrange(100)}", "v": rng.randrange(-1000, 1000)}
                      for _ in ids],
            "score": [None if rng.random() < 0.1 else rng.random() * 100 for _ in ids],
        }
        bases.append(pa.table(cols, schema=parquet_tool.schema()))
    n = 0
    total = 0
    for p in range(partitions):
        d = os.path.join(root, TABLE, f"dt={p}")
        os.makedirs(d, exist_ok=True)
        for f in range(files):
            t = bases[n % 8]
            t = t.set_column(0, pa.field("id", pa.int64(), nullable=False), pc.add(t.column("id"), n * rows))
            path = os.path.join(d, f"part-{f:05d}.parquet")
            pq.write_table(t, path)
            total += os.path.getsize(path)
            n += 1
    return total


def files_of(root, p):
    d = os.path.join(root, TABLE, f"dt={p}")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet") and not f.startswith(("_", ".")))


TIME = "/usr/bin/time"


def run(cmds, parallel=1):
    """Runs the commands, `parallel` at a time; wall seconds and the largest
    peak RSS (MiB) of any of them, from GNU time's %M (the rusage of a child
    of this big Python process would count the pages it had before exec)."""
    import tempfile

    start = time.monotonic()
    peak = None
    pending = list(cmds)
    running = {}
    while pending or running:
        while pending and len(running) < parallel:
            c = pending.pop(0)
            rss = tempfile.NamedTemporaryFile(delete=False)
            wrapped = [TIME, "-f", "%M", "-o", rss.name] + c if os.path.exists(TIME) else c
            p = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            running[p.pid] = (p, c, rss.name)
        pid, status, _ = os.wait4(-1, 0)
        if pid not in running:
            continue
        p, c, rss = running.pop(pid)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        if status != 0:
            raise SystemExit(f"{c} failed ({status}): {err[-2000:]}")
        try:
            kb = int(open(rss).read().split()[-1])
            peak = max(peak or 0, kb / 1024)
        except (OSError, ValueError, IndexError):
            pass
        os.unlink(rss)
    return time.monotonic() - start, peak


PYARROW = """
import sys, pyarrow.parquet as pq
files = sys.argv[2:]
pq.write_table(pq.read_table(files), sys.argv[1], compression="zstd")
"""

DUCKDB = """
import sys, json, duckdb
threads, outs = int(sys.argv[1]), json.loads(sys.argv[2])
con = duckdb.connect()
con.execute(f"SET threads TO {threads}")
for out, files in outs:
    con.execute(f"COPY (SELECT * FROM read_parquet({files!r}, hive_partitioning = false)) TO '{out}' "
                "(FORMAT parquet, COMPRESSION zstd)")
"""


RUNS = 3


def repeat(f):
    """Runs a peer RUNS times: every wall time and the largest peak RSS."""
    walls, peak = [], None
    for _ in range(RUNS):
        w, p = f()
        walls.append(w)
        if p is not None:
            peak = max(peak or 0, p)
    return walls, peak


def rows_in(paths):
    return sum(pq.ParquetFile(f).metadata.num_rows for f in paths)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--rows", type=int, default=10_000)
    a = ap.parse_args()
    base = os.path.join(a.base, "parquet-bench")
    shutil.rmtree(base, ignore_errors=True)
    orig = os.path.join(base, "orig")
    t0 = time.monotonic()
    size = generate(orig, a.partitions, a.files, a.rows)
    rows = a.partitions * a.files * a.rows
    mib = size / 2**20
    print(f"generated {a.partitions} x {a.files} x {a.rows} rows, {mib:.1f} MiB in {time.monotonic() - t0:.1f}s",
          file=sys.stderr)
    parts = range(a.partitions)
    results = []

    def report(peer, setting, walls, peak, out_dir=None, note=""):
        walls = sorted(walls)
        wall = walls[len(walls) // 2]
        r = {"part": "parquet", "peer": peer, "setting": setting, "seconds": round(wall, 3),
             "runs": [round(w, 3) for w in walls],
             "rows": rows, "input_mib": round(mib, 1), "rows_per_s": rows / wall, "mib_per_s": mib / wall,
             "peak_rss_mib": round(peak, 1) if peak else None, "files_in": a.partitions * a.files, "note": note}
        if out_dir:
            outs = [f for p in parts for f in files_of(out_dir, p)]
            got = rows_in(outs)
            if got != rows:
                raise SystemExit(f"{peer} {setting}: {got} rows out of {rows}")
            r["files_out"] = len(outs)
            r["output_mib"] = round(sum(os.path.getsize(f) for f in outs) / 2**20, 1)
        results.append(r)
        print("RESULT " + json.dumps(r), flush=True)

    def fresh(name):
        d = os.path.join(base, name)
        shutil.copytree(orig, d)
        subprocess.run(["sync"])
        return d

    def out_dirs(name):
        d = os.path.join(base, name)
        for p in parts:
            os.makedirs(os.path.join(d, TABLE, f"dt={p}"), exist_ok=True)
        return d

    # The floor: the same bytes read and written once (cat per partition).
    out = out_dirs("copy")
    cmds = [["sh", "-c", 'out=$1; shift; cat "$@" > "$out"', "sh",
             os.path.join(out, TABLE, f"dt={p}", "all.bin")] + files_of(orig, p) for p in parts]
    walls, peak = repeat(lambda: run(cmds))
    report("byte copy", "cat, one partition at a time", walls, peak)

    # pyarrow, default threads (all cores), one process per partition in turn.
    out = out_dirs("pyarrow")
    cmds = [[sys.executable, "-c", PYARROW, os.path.join(out, TABLE, f"dt={p}", "all.parquet")] + files_of(orig, p)
            for p in parts]
    walls, peak = repeat(lambda: run(cmds))
    report("pyarrow", f"pq.write_table(pq.read_table(files)), zstd, pyarrow {pa.__version__}", walls, peak, out)

    import duckdb

    for threads in (1, 2):
        out = out_dirs(f"duckdb{threads}")
        specs = [[os.path.join(out, TABLE, f"dt={p}", "all.parquet"), files_of(orig, p)] for p in parts]
        walls, peak = repeat(lambda: run([[sys.executable, "-c", DUCKDB, str(threads), json.dumps(specs)]]))
        report("DuckDB", f"COPY … TO (FORMAT parquet, COMPRESSION zstd), threads={threads}, duckdb {duckdb.__version__}",
               walls, peak, out)

    # compactd's executor, as a node runs it: one process per partition;
    # one at a time, then two at once (a node's default --max-running 2).
    for parallel in (1, 2):
        def once():
            shutil.rmtree(os.path.join(base, f"compactd{parallel}"), ignore_errors=True)
            d = fresh(f"compactd{parallel}")
            cmds = [[a.binary, "--root", f"fs://{d}", "__merge", "--dir", f"{TABLE}/dt={p}/", "--task",
                     "aaaaffff.16176931.56000000.0", "--round", "1", "--attempt", "1", "--target-size", "128MiB",
                     "--format", "parquet"] for p in parts]
            return run(cmds, parallel)
        walls, peak = repeat(once)
        report("compactd", f"parquet executor (zstd), {parallel} partition{'s' if parallel > 1 else ''} at once",
               walls, peak, os.path.join(base, f"compactd{parallel}"))

    # The product's path: one node at the default timings, `submit --wait`.
    d = fresh("compactd-node")
    root = os.path.join(base, "cluster")
    node = subprocess.Popen([a.binary, "--root", f"fs://{root}", "run", "--node-id", "n1", "--data", f"fs://{d}",
                             "--listen", "127.0.0.1:0", "--allow-root"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            st = subprocess.run([a.binary, "--root", f"fs://{root}", "nodes", "--json"], capture_output=True, text=True)
            if st.returncode == 0 and '"alive"' in st.stdout.replace(": ", ":").replace('"state":"alive"', '"alive"'):
                break
            time.sleep(0.1)
        start = time.monotonic()
        st = subprocess.run([a.binary, "--root", f"fs://{root}", "submit", "--db", "db", "--schema", "s", "--table", "t",
                             "--executor", "parquet", "--wait"], capture_output=True, text=True)
        wall = time.monotonic() - start
        if st.returncode != 0:
            raise SystemExit(f"submit --wait failed: {st.stderr}")
        report("compactd", "one node (`run`, defaults: 2 subtasks at once), `submit --executor parquet --wait`",
               [wall], None, d, note="one run; RSS of the node's executors not measured here")
    finally:
        node.terminate()
        node.wait()
    # Memory against the number of files: one partition of N files of 1,000
    # rows, target 8 MiB (so the open row group is bounded the same way).
    for n in (250, 1000, 4000):
        root = os.path.join(base, f"mem{n}")
        size = generate(root, 1, n, 1000)
        cmd = [a.binary, "--root", f"fs://{root}", "__merge", "--dir", f"{TABLE}/dt=0/", "--task",
               "aaaaffff.16176931.56000000.0", "--round", "1", "--attempt", "1", "--target-size", "8MiB",
               "--format", "parquet"]
        wall, peak = run([cmd])
        r = {"part": "parquet_memory", "files": n, "rows": n * 1000, "input_mib": round(size / 2**20, 1),
             "seconds": round(wall, 3), "peak_rss_mib": round(peak, 1) if peak else None}
        print("RESULT " + json.dumps(r), flush=True)
        shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
