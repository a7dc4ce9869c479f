#!/usr/bin/env python3
"""The Iceberg compaction benchmark: compactd's `iceberg` executor against
Spark's `CALL system.rewrite_data_files` (Iceberg 1.12's Spark runtime on
Spark 4.1, `local[2]`, Java 17), on copies of the same table. Needs the
venvs .ci/install-spark-iceberg.sh and .ci/install-parquet-tools.sh make.

  python3 bench/iceberg.py [--binary target/release/compactd] [--base DIR] [--runs 3] [--merge-on-read]

The table: a file-system (Hadoop catalog) table Spark writes in one append
of --files tasks over --partitions partitions with Iceberg's fanout writer
(`write.distribution-mode=none`): about files x partitions small Parquet
files (id, a string, a double; partitioned by `part`), --rows rows. Iceberg
paths are absolute, so every run restores the pristine copy at the same
path before it runs:
- compactd: one `compactd run` node (started before the clock starts,
  `--max-running 2`, as Spark's 2 cores), then `compactd submit --executor
  iceberg --wait` timed: a unit per partition, 2 at a time, and one commit;
- Spark: one process that starts a session (JVM start-up, timed apart) and
  calls `rewrite_data_files(table, options => map('target-file-size-bytes',
  T, 'min-input-files', '2'))` (timed: the rewrite and its commit).
With --merge-on-read the table is a merge-on-read one, and after the
append Spark deletes every 10th row and updates every 13th (position
deletes): both contenders apply them as they rewrite, and both drop the
delete files they spent (Spark with `remove-dangling-deletes`).
Both with the same target (64 MiB, above a partition's size). Peak RSS is
the largest sum of the RSS of the contender's process tree (sampled every
50 ms: the node and its unit processes; python and Spark's JVM). Every run
is judged by pyiceberg (`StaticTable`, through the version hint): the same
rows (count and sum of ids) as before, fewer files, the commits it added.
The median of --runs runs is printed as a markdown table and `RESULT {json}`
lines (part "iceberg"), and every figure goes to bench/iceberg-results.json.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPARK_PY = os.path.join(REPO, ".venv-spark-iceberg", "bin", "python")
JUDGE_PY = os.path.join(REPO, ".venv-parquet", "bin", "python")
TOOLS = os.path.join(REPO, "tests", "support")

SPARK_PRELUDE = f"""
import json, sys, time
sys.path.insert(0, {TOOLS!r})
import spark_iceberg_tool as t
t0 = time.monotonic()
spark = t.session()
started = time.monotonic() - t0
spark.conf.set("spark.sql.catalog.b", "org.apache.iceberg.spark.SparkCatalog")
spark.conf.set("spark.sql.catalog.b.type", "hadoop")
spark.conf.set("spark.sql.catalog.b.warehouse", sys.argv[1])
"""

GEN = SPARK_PRELUDE + """
rows, files, parts, mor = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "mor"
modes = (", 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'" if mor else "")
spark.sql("CREATE TABLE b.s.t (id BIGINT, s STRING, d DOUBLE, part INT) USING iceberg PARTITIONED BY (part) "
          "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none', 'write.spark.fanout.enabled'='true'"
          + modes + ")")
(spark.range(0, rows, 1, files)
    .selectExpr("id", "concat('value-', cast(id * 7919 % 1000003 as string)) AS s", "id * 0.25 AS d",
                f"cast(id % {parts} AS INT) AS part")
    .writeTo("b.s.t").append())
if mor:
    spark.sql("DELETE FROM b.s.t WHERE id % 10 = 0")
    spark.sql("UPDATE b.s.t SET s = 'updated' WHERE id % 13 = 0")
t.spark_tool.PROTO.write(json.dumps({"session_s": started}) + "\\n")
spark.stop()
"""

REWRITE = SPARK_PRELUDE + """
t1 = time.monotonic()
r = spark.sql("CALL b.system.rewrite_data_files(table => 's.t', options => map("
              f"'target-file-size-bytes', '{sys.argv[2]}', 'min-input-files', '2', "
              "'remove-dangling-deletes', 'true'))").collect()
took = time.monotonic() - t1
t.spark_tool.PROTO.write(json.dumps({"session_s": started, "rewrite_s": took,
                                     "result": {k: str(v) for k, v in r[0].asDict().items()}}) + "\\n")
spark.stop()
"""

JUDGE = """
import json, sys
import pyarrow.compute as pc
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
s = t.current_snapshot()
a = t.scan(selected_fields=("id",)).to_arrow()
files = list(t.scan().plan_files())
deletes = {d.file_path for f in files for d in f.delete_files}
print(json.dumps({"rows": a.num_rows, "id_sum": pc.sum(a.column("id")).as_py(), "files": len(files),
                  "delete_files": len(deletes),
                  "mib": round(sum(f.file.file_size_in_bytes for f in files) / 2**20, 1),
                  "snapshots": len(t.metadata.snapshots), "operation": s.summary.operation.value}))
"""


def sizes(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(s[: -len(u)]) * m
    return int(s)


def tree_rss_kib(root):
    """The summed VmRSS (KiB) of `root` and its descendants."""
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


class Peak:
    """Samples a process tree's RSS every 50 ms until stopped."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, tree_rss_kib(self.pid))
            self.stop.wait(0.05)

    def mib(self):
        self.stop.set()
        self.t.join()
        return round(self.peak / 1024, 1)


def judge(table):
    p = subprocess.run([JUDGE_PY, "-c", JUDGE, table], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"pyiceberg could not read {table}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def spark(script, *args):
    """Runs a Spark script; (wall seconds, peak tree RSS MiB, its JSON answer)."""
    t0 = time.monotonic()
    p = subprocess.Popen([SPARK_PY, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tempfile.gettempdir())
    peak = Peak(p.pid)
    out, err = p.communicate()
    wall, mib = time.monotonic() - t0, peak.mib()
    if p.returncode != 0:
        raise RuntimeError(f"Spark failed ({p.returncode}): {err[-3000:]}")
    return wall, mib, json.loads(out.strip().splitlines()[-1])


def restore(orig, table):
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(orig, table)
    subprocess.run(["sync"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="target/release/compactd")
    ap.add_argument("--base", help="work folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=400, help="Spark tasks writing (files per partition)")
    ap.add_argument("--partitions", type=int, default=5)
    ap.add_argument("--target-size", default="64MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--merge-on-read", action="store_true", help="deletes and updates as position deletes first")
    ap.add_argument("--out", help="default: bench/iceberg-results.json (iceberg-mor-results.json with --merge-on-read)")
    a = ap.parse_args()
    a.out = a.out or os.path.join(HERE, "iceberg-mor-results.json" if a.merge_on_read else "iceberg-results.json")
    binary = os.path.abspath(a.binary)
    for need in (binary, SPARK_PY, JUDGE_PY):
        if not os.access(need, os.X_OK):
            raise SystemExit(f"missing {need}: cargo build --release; bash .ci/install-spark-iceberg.sh; "
                             "bash .ci/install-parquet-tools.sh")
    work = a.base or tempfile.mkdtemp(prefix="compactd-iceberg-bench.")
    base = os.path.join(work, "iceberg-mor-bench" if a.merge_on_read else "iceberg-bench")
    data, orig = os.path.join(base, "data"), os.path.join(base, "orig")
    table = os.path.join(data, "db", "s", "t")
    knobs = {"rows": a.rows, "files": a.files, "partitions": a.partitions, "merge_on_read": a.merge_on_read}
    stamp = os.path.join(base, "orig.json")
    if os.path.exists(stamp) and json.load(open(stamp)) == knobs:
        print(f"reusing the table in {orig}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.dirname(table))
        t0 = time.monotonic()
        spark(GEN, os.path.join(data, "db"), str(a.rows), str(a.files), str(a.partitions),
              "mor" if a.merge_on_read else "cow")
        shutil.copytree(table, orig)
        json.dump(knobs, open(stamp, "w"))
        print(f"Spark wrote the table in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    restore(orig, table)
    before = judge(table)
    print(f"table: {before['rows']:,} rows, {before['files']} files, {before['mib']} MiB, "
          f"{before['delete_files']} delete files", file=sys.stderr)
    target = sizes(a.target_size)

    def run_compactd(i):
        tree = os.path.join(base, f"tree-{i}")
        shutil.rmtree(tree, ignore_errors=True)
        node = subprocess.Popen([binary, "--root", f"fs://{tree}", "run", "--node-id", "n1", "--data", f"fs://{data}",
                                 "--executor", "iceberg", "--target-size", a.target_size, "--max-running", "2"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, f"node-{i}.log"), "w"))
        try:
            time.sleep(3)
            peak = Peak(node.pid)
            t0 = time.monotonic()
            p = subprocess.run([binary, "--root", f"fs://{tree}", "submit", "--db", "db", "--schema", "s", "--table",
                                "t", "--executor", "iceberg", "--param", "iceberg.sole-writer=true", "--wait", "--json"],
                               capture_output=True, text=True)
            wall, mib = time.monotonic() - t0, peak.mib()
            if p.returncode != 0:
                raise RuntimeError(f"compactd submit failed: {p.stderr[-2000:]}")
            return {"seconds": round(wall, 3), "peak_rss_mib": mib}
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait()
            shutil.rmtree(tree, ignore_errors=True)

    def run_spark(_i):
        wall, mib, out = spark(REWRITE, os.path.join(data, "db"), str(target))
        return {"seconds": round(out["rewrite_s"], 3), "process_seconds": round(wall, 3),
                "jvm_session_start_s": round(out["session_s"], 3), "peak_rss_mib": mib, "spark_result": out["result"]}

    contenders = [
        ("compactd", f"iceberg executor, 1 node, 2 units at a time, target {a.target_size}", run_compactd),
        ("spark", f"CALL system.rewrite_data_files, Spark 4.1 local[2], Iceberg 1.12, target {a.target_size}", run_spark),
    ]
    results = []
    print("| contender | setting | seconds (median; runs) | JVM start-up s | rows/s | peak RSS MiB | files before → after "
          "| MiB before → after | commits |")
    print("|---|---|---|---:|---:|---:|---|---|---:|")
    for name, setting, fn in contenders:
        runs = []
        for i in range(a.runs):
            restore(orig, table)
            r = fn(i)
            after = judge(table)
            if (after["rows"], after["id_sum"]) != (before["rows"], before["id_sum"]) or after["files"] >= before["files"]:
                raise RuntimeError(f"{name} run {i}: {before} -> {after}")
            if a.merge_on_read and after["delete_files"] != 0:
                raise RuntimeError(f"{name} run {i}: {after['delete_files']} delete files left: {after}")
            r.update(files_after=after["files"], mib_after=after["mib"], commits=after["snapshots"] - before["snapshots"],
                     operation=after["operation"], delete_files_after=after["delete_files"])
            runs.append(r)
            print(f"{name} run {i}: {r}", file=sys.stderr, flush=True)
        best = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        row = {"part": "iceberg-mor" if a.merge_on_read else "iceberg", "peer": name, "setting": setting, **best,
               "runs": sorted(r["seconds"] for r in runs), "rows": before["rows"], "files_before": before["files"],
               "mib_before": before["mib"], "delete_files_before": before["delete_files"], "rows_per_s": round(before["rows"] / best["seconds"]),
               "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}
        results.append(row)
        jvm = f"{row['jvm_session_start_s']:.1f}" if "jvm_session_start_s" in row else "-"
        print(f"| {name} | {setting} | {row['seconds']:.2f} ({', '.join(f'{s:.2f}' for s in row['runs'])}) | {jvm} | "
              f"{row['rows_per_s']:,} | {row['peak_rss_mib']:.0f} | {row['files_before']} → {row['files_after']} | "
              f"{row['mib_before']} → {row['mib_after']} | {row['commits']} |", flush=True)
        print("RESULT " + json.dumps(row), flush=True)
    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True, cwd=HERE).stdout.strip()  # noqa: E731
    doc = {"meta": {"date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "commit": sh("git rev-parse --short HEAD"),
                    "knobs": knobs, "target": a.target_size}, "results": results}
    json.dump(doc, open(a.out, "w"), indent=1)
    if not a.base:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
