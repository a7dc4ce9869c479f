#!/usr/bin/env python3
"""The Delta Lake compaction benchmark: compactd's `delta` executor against
deltalake's own OPTIMIZE (`DeltaTable.optimize.compact`), on the same
generated table, in one run. Run with the python of .venv-parquet:

  .venv-parquet/bin/python bench/delta.py [--binary target/release/compactd] [--base DIR]

The table: `<DATA_ROOT>/db/s/t`, written by tests/support/delta_tool.py's
gen (deltalake appends, one commit and one small snappy file each; default
2,000 appends of 2,000 rows round-robin over 5 partitions, so 400 files per
partition). It is copied afresh for every run of every contender:
- compactd: `compactd --root fs://<DATA_ROOT> __merge --format delta --dir
  db/s/t/ --partition part=<k> ...`, one process per partition, one at a
  time (one OPTIMIZE commit each);
- deltalake: one process calling `optimize.compact(target_size=...)` on the
  whole table (its default concurrency: all cores; one OPTIMIZE commit).
Both with the same target size (64 MiB, above a partition's size). Wall
seconds include process start-up; rows rewritten/s = rows in the files the
OPTIMIZE commits removed / wall; peak RSS is the largest of the contender's
processes (GNU time's %M; without /usr/bin/time, RUSAGE_CHILDREN's maxrss,
which is the largest child of this process so far). Every run is checked by
delta_tool's judge (log replay and deltalake agree at every new version, no
id lost or doubled, rows unchanged, fewer files). The median of --runs runs
is reported: a markdown row per contender on stdout, `RESULT {json}` lines
(part "delta", for bench/report.py) on stdout, and every figure in bench/delta-results.json.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))

import deltalake  # noqa: E402
import pyarrow as pa  # noqa: E402

import delta_tool  # noqa: E402

TABLE = "db/s/t"
TASK = "aaaaffff.16176931.56000000.0"
TIME = "/usr/bin/time"

DELTALAKE = """
import json, os, sys
from deltalake import DeltaTable
m = DeltaTable(sys.argv[1]).optimize.compact(target_size=int(sys.argv[2]))
print(json.dumps({k: m[k] for k in ("numFilesAdded", "numFilesRemoved")}), flush=True)
os._exit(0)  # see delta_tool.main: no interpreter teardown
"""


def size_arg(s):
    """Bytes of a size as compactd spells it (64MiB), for deltalake."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    try:
        for u, m in units.items():
            if s.endswith(u):
                return int(s[: -len(u)]) * m
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 64MiB)")


def ns(**kw):
    return argparse.Namespace(**kw)


def run(cmds):
    """Runs the commands one after the other: wall seconds, the largest peak
    RSS (MiB) of any of them, their stdouts. GNU time's figure is the
    child's own (this process's rusage would also count pages of its
    pre-exec copy of this big Python process)."""
    start, peak, outs = time.monotonic(), None, []
    for c in cmds:
        with tempfile.NamedTemporaryFile(delete=False) as rss:
            pass
        wrapped = [TIME, "-f", "%M", "-o", rss.name] + c if os.path.exists(TIME) else c
        p = subprocess.run(wrapped, capture_output=True, text=True)
        if p.returncode != 0:
            os.unlink(rss.name)
            err = (p.stderr or p.stdout).strip()[-2000:]
            raise RuntimeError(f"exit status {p.returncode}: {err or '(no output)'}\n(command: {' '.join(c)})")
        outs.append(p.stdout)
        try:
            kb = int(open(rss.name).read().split()[-1])
        except (OSError, ValueError, IndexError):
            kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        os.unlink(rss.name)
        peak = max(peak or 0, kb / 1024)
    return time.monotonic() - start, peak, outs


def state(table):
    """(version, files, bytes) of the table's latest version, by deltalake."""
    dt = delta_tool.Table(table).dt()
    adds = pa.table(dt.get_add_actions(flatten=True))
    return dt.version(), adds.num_rows, sum(adds.column("size_bytes").to_pylist())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="target/release/compactd")
    ap.add_argument("--base", help="work folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=5)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--target-size", default="64MiB", type=lambda s: size_arg(s) and s)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "delta-results.json"))
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"no compactd binary at {binary}: cargo build --release, or pass --binary")
    work = a.base or tempfile.mkdtemp(prefix="compactd-delta-bench.")
    base = os.path.join(work, "delta-bench")
    orig, stamp = os.path.join(base, "orig"), os.path.join(base, "orig.json")
    knobs = {"appends": a.appends, "partitions": a.partitions, "rows": a.rows, "seed": 1}
    # Each commit costs deltalake more as the log grows (~2 min for 2,000
    # appends): with --base, a table generated with the same knobs is reused.
    if os.path.exists(stamp) and json.load(open(stamp))["knobs"] == knobs:
        g = json.load(open(stamp))["gen"]
        print(f"reusing the table in {orig}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.join(orig, os.path.dirname(TABLE)))
        t0 = time.monotonic()
        g = delta_tool.gen(ns(table=os.path.join(orig, TABLE), start_id=0, **knobs))
        print(f"generated {a.appends} appends x {a.rows} rows over {a.partitions} partitions in "
              f"{time.monotonic() - t0:.1f}s", file=sys.stderr)
        json.dump({"knobs": knobs, "gen": g}, open(stamp, "w"))
    for d in os.listdir(base):  # leftovers of an interrupted run
        if d not in ("orig", "orig.json"):
            shutil.rmtree(os.path.join(base, d))
    v0, files0, bytes0 = state(os.path.join(orig, TABLE))
    mib = bytes0 / 2**20
    print(f"table: version {v0}, {g['rows']} rows, {files0} files, {mib:.1f} MiB", file=sys.stderr)

    target = size_arg(a.target_size)
    contenders = [
        ("compactd", f"delta executor, `__merge --format delta` per partition, one at a time, target {a.target_size}",
         lambda d: [[binary, "--root", f"fs://{d}", "__merge", "--format", "delta", "--dir", f"{TABLE}/",
                     "--partition", f"part={k}", "--task", TASK, "--round", "1", "--attempt", "1",
                     "--target-size", a.target_size] for k in range(a.partitions)]),
        ("deltalake", f"optimize.compact(target_size={a.target_size}), whole table, default concurrency, "
                      f"deltalake {deltalake.__version__}",
         lambda d: [[sys.executable, "-c", DELTALAKE, os.path.join(d, TABLE), str(target)]]),
    ]
    results, failed = [], False
    print("| contender | setting | seconds (median) | rows rewritten | rows rewritten/s | peak RSS MiB "
          "| files before → after | MiB before → after | commits |")
    print("|---|---|---:|---:|---:|---:|---|---|---:|")
    for name, setting, cmds in contenders:
        walls, peak, runs = [], None, []
        try:
            for i in range(a.runs):
                d = os.path.join(base, f"{name}-{i}")
                shutil.copytree(orig, d)
                subprocess.run(["sync"])
                wall, p, _ = run(cmds(d))
                walls.append(wall)
                peak = max(peak or 0, p or 0) or None
                # The judge, from the version before the compaction on.
                c = delta_tool.check(ns(table=os.path.join(d, TABLE), min_version=v0, rows_at="all"))
                v1, files1, bytes1 = state(os.path.join(d, TABLE))
                if c["rows"] != g["rows"] or files1 >= files0 or not c["optimize_versions"]:
                    raise RuntimeError(f"run {i}: rows {c['rows']} (want {g['rows']}), files {files0} -> {files1}, "
                                       f"OPTIMIZE versions {c['optimize_versions']}")
                runs.append({"seconds": round(wall, 3), "rows_rewritten": c["rows_rewritten"], "files_after": files1,
                             "mib_after": round(bytes1 / 2**20, 1), "commits": v1 - v0})
                shutil.rmtree(d)
        except (RuntimeError, delta_tool.Fail) as e:
            failed = True
            r = {"part": "delta", "peer": name, "setting": setting, "error": str(e)[-2000:]}
            results.append(r)
            print(f"| {name} | {setting} | failed: {str(e).splitlines()[0][:300]} | | | | | | |", flush=True)
            print("RESULT " + json.dumps(r), flush=True)
            continue
        mid = sorted(range(len(walls)), key=lambda i: walls[i])[len(walls) // 2]
        best = runs[mid]
        r = {"part": "delta", "peer": name, "setting": setting, "seconds": best["seconds"],
             "runs": sorted(round(w, 3) for w in walls), "rows": g["rows"], "rows_rewritten": best["rows_rewritten"],
             "rows_rewritten_per_s": round(best["rows_rewritten"] / best["seconds"]),
             "peak_rss_mib": round(peak, 1) if peak else None, "files_before": files0, "files_after": best["files_after"],
             "input_mib": round(mib, 1), "output_mib": best["mib_after"], "commits": best["commits"]}
        results.append(r)
        rss = f"{r['peak_rss_mib']:.0f}" if r["peak_rss_mib"] else "n/a"
        print(f"| {name} | {setting} | {r['seconds']:.2f} | {r['rows_rewritten']:,} | {r['rows_rewritten_per_s']:,} | "
              f"{rss} | {files0} → {r['files_after']} | {mib:.1f} → {r['output_mib']} | {r['commits']} |", flush=True)
        print("RESULT " + json.dumps(r), flush=True)

    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True, cwd=HERE).stdout.strip()  # noqa: E731
    doc = {"meta": {"date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "commit": sh("git rev-parse --short HEAD"),
                    "cpus": os.cpu_count(), "python": platform.python_version(), "deltalake": deltalake.__version__,
                    "pyarrow": pa.__version__, "binary": binary, "peak_rss_from": "GNU time %M" if os.path.exists(TIME)
                    else "RUSAGE_CHILDREN maxrss"},
           "table": {"appends": a.appends, "partitions": a.partitions, "rows_per_append": a.rows, "rows": g["rows"],
                     "files": files0, "mib": round(mib, 1), "version": v0, "target_size": a.target_size, "runs": a.runs},
           "results": results}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)
    if not a.base:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failed else 0)  # as delta_tool: skip the native threads' teardown


if __name__ == "__main__":
    main()
