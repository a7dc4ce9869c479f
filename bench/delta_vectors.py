#!/usr/bin/env python3
"""The Delta deletion-vector compaction benchmark: compactd's `delta`
executor against Spark's `OPTIMIZE` (Delta 4.4 on Spark 4.2, `local[2]`,
Java 17, the JIT at its defaults) and deltalake's (delta-rs)
`optimize.compact()`, on copies of the same merge-on-read table. Needs the
venvs .ci/install-spark.sh and .ci/install-parquet-tools.sh make.

  python3 bench/delta_vectors.py [--binary target/release/compactd] [--base DIR] [--runs 3]

The table: Spark writes --rows rows (id, a string, a double; partitioned by
`part`) in one append of --files tasks over --partitions partitions (about
files x partitions small files), with deletion vectors on; then deletes
every 10th row and updates every 13th (each leaves a vector on every file
it touches, and the updated rows in new files). Delta paths are relative;
every run starts from a fresh copy of the pristine table:
- compactd: one `compactd run` node (started before the clock, `--max-running
  2`, as Spark's 2 cores), then `compactd submit --executor delta --wait`
  timed: a unit per partition, 2 at a time, each its own OPTIMIZE commit;
- Spark: one process that starts a session (timed apart) and runs
  `OPTIMIZE delta.`path`` (timed), which rewrites small files and files whose
  vectors delete over 5 % of their rows (`maxDeletedRowsRatio`, the same
  rule compactd applies);
- deltalake: one process calling `optimize.compact(target_size=T)`.
All with the same target (64 MiB, above a partition's size). Peak RSS is the
largest sum of the RSS of the contender's process tree (sampled every 50
ms). Every run is judged by Spark reading the result (a session of its own):
the same rows (count and sum of ids) as before, fewer files, no vector left
on any file. A contender that refuses the table is reported with its error,
one that does not answer within --limit seconds (deltalake) as such.
The median of --runs runs is printed as a markdown table and `RESULT {json}`
lines (part "delta-vectors"), and every figure goes to
bench/delta-vectors-results.json.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPARK_PY = os.path.join(REPO, ".venv-spark", "bin", "python")
DELTALAKE_PY = os.path.join(REPO, ".venv-parquet", "bin", "python")

sys.path.insert(0, HERE)
from iceberg import Peak, sizes  # noqa: E402

SPARK_PRELUDE = f"""
import json, os, sys, time
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession
out = os.fdopen(os.dup(1), "w", buffering=1)
t0 = time.monotonic()
b = (SparkSession.builder.master("local[2]").appName("compactd-bench")
     .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
     .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
     .config("spark.jars.ivySettings", {os.path.join(REPO, ".ci", "spark-ivysettings.xml")!r})
     .config("spark.jars.ivy", {os.path.join(REPO, ".spark-ivy")!r})
     .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
     .config("spark.driver.memory", "3g"))
spark = configure_spark_with_delta_pip(b).getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
started = time.monotonic() - t0
t = sys.argv[1]
"""

GEN = SPARK_PRELUDE + """
rows, files, parts = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spark.sql(f"CREATE TABLE delta.`{t}` (id BIGINT, s STRING, d DOUBLE, part INT) USING delta PARTITIONED BY (part) "
          "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
(spark.range(0, rows, 1, files)
    .selectExpr("id", "concat('value-', cast(id * 7919 % 1000003 as string)) AS s", "CAST(id * 0.25 AS DOUBLE) AS d",
                f"cast(id % {parts} AS INT) AS part")
    .write.format("delta").mode("append").partitionBy("part").save(t))
spark.sql(f"DELETE FROM delta.`{t}` WHERE id % 10 = 0")
spark.sql(f"UPDATE delta.`{t}` SET s = 'updated' WHERE id % 13 = 0")
out.write(json.dumps({"session_s": started}) + "\\n")
spark.stop()
"""

OPTIMIZE = SPARK_PRELUDE + """
t1 = time.monotonic()
r = spark.sql(f"OPTIMIZE delta.`{t}`").collect()
took = time.monotonic() - t1
m = r[0]["metrics"].asDict()
out.write(json.dumps({"session_s": started, "optimize_s": took,
                      "result": {k: m[k] for k in ("numFilesAdded", "numFilesRemoved", "numDeletionVectorsRemoved")
                                 if k in m}}) + "\\n")
spark.stop()
"""

JUDGE = SPARK_PRELUDE + """
from pyspark.sql import DataFrame, functions as F
row = spark.read.format("delta").load(t).agg(F.count("*").alias("n"), F.sum("id").alias("s")).collect()[0]
detail = spark.sql(f"DESCRIBE DETAIL delta.`{t}`").collect()[0]
jvm = spark._jvm
snap = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, t).update(
    False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
vectors = DataFrame(snap.allFiles().toDF(), spark).where("deletionVector IS NOT NULL").count()
out.write(json.dumps({"rows": row["n"], "id_sum": row["s"], "files": detail["numFiles"],
                      "mib": round(detail["sizeInBytes"] / 2**20, 1), "vectors": vectors,
                      "version": snap.version()}) + "\\n")
spark.stop()
"""

DELTALAKE = """
import json, os, sys, time
from deltalake import DeltaTable
t0 = time.monotonic()
m = DeltaTable(sys.argv[1]).optimize.compact(target_size=int(sys.argv[2]))
print(json.dumps({"optimize_s": time.monotonic() - t0,
                  "result": {k: m[k] for k in ("numFilesAdded", "numFilesRemoved")}}), flush=True)
os._exit(0)
"""


def child(py, script, *args, limit=None):
    """Runs a script; (wall seconds, peak tree RSS MiB, its last JSON line), or raises with its error (or
    with how long it ran without answering, past `limit` seconds: then it is killed)."""
    t0 = time.monotonic()
    p = subprocess.Popen([py, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tempfile.gettempdir())
    peak = Peak(p.pid)
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        cpu = cpu_seconds(p.pid)
        p.kill()
        p.communicate()
        peak.mib()
        raise RuntimeError(f"no answer within {limit} s ({cpu:.1f} s of CPU used), killed")
    wall, mib = time.monotonic() - t0, peak.mib()
    if p.returncode != 0:
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    return wall, mib, json.loads(out.strip().splitlines()[-1])


def cpu_seconds(pid):
    """User and system CPU seconds `pid` used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restore(orig, table):
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(orig, table)
    subprocess.run(["sync"])


def judge(table):
    return child(SPARK_PY, JUDGE, table)[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="target/release/compactd")
    ap.add_argument("--base", help="work folder (default: a new temp folder, removed at the end)")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=400, help="Spark tasks writing (files per partition)")
    ap.add_argument("--partitions", type=int, default=5)
    ap.add_argument("--target-size", default="64MiB")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=int, default=180,
                    help="seconds deltalake may run before it is killed and reported (its 1.6.6 hangs here)")
    ap.add_argument("--out", default=os.path.join(HERE, "delta-vectors-results.json"))
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    for need in (binary, SPARK_PY, DELTALAKE_PY):
        if not os.access(need, os.X_OK):
            raise SystemExit(f"missing {need}: cargo build --release; bash .ci/install-spark.sh; "
                             "bash .ci/install-parquet-tools.sh")
    work = a.base or tempfile.mkdtemp(prefix="compactd-delta-vectors-bench.")
    base = os.path.join(work, "delta-vectors-bench")
    data, orig = os.path.join(base, "data"), os.path.join(base, "orig")
    table = os.path.join(data, "db", "s", "t")
    knobs = {"rows": a.rows, "files": a.files, "partitions": a.partitions}
    stamp = os.path.join(base, "orig.json")
    if os.path.exists(stamp) and json.load(open(stamp)) == knobs:
        print(f"reusing the table in {orig}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(os.path.dirname(table))
        t0 = time.monotonic()
        child(SPARK_PY, GEN, table, str(a.rows), str(a.files), str(a.partitions))
        shutil.copytree(table, orig)
        json.dump(knobs, open(stamp, "w"))
        print(f"Spark wrote the table in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    restore(orig, table)
    before = judge(table)
    print(f"table: {before}", file=sys.stderr)
    target = sizes(a.target_size)

    def run_compactd(i):
        tree = os.path.join(base, f"tree-{i}")
        shutil.rmtree(tree, ignore_errors=True)
        node = subprocess.Popen([binary, "--root", f"fs://{tree}", "run", "--node-id", "n1", "--data", f"fs://{data}",
                                 "--executor", "delta", "--target-size", a.target_size, "--max-running", "2"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, f"node-{i}.log"), "w"))
        try:
            time.sleep(3)
            peak = Peak(node.pid)
            t0 = time.monotonic()
            p = subprocess.run([binary, "--root", f"fs://{tree}", "submit", "--db", "db", "--schema", "s", "--table",
                                "t", "--executor", "delta", "--wait", "--json"], capture_output=True, text=True)
            wall, mib = time.monotonic() - t0, peak.mib()
            if p.returncode != 0:
                raise RuntimeError(f"compactd submit failed: {p.stderr[-2000:]}")
            return {"seconds": round(wall, 3), "peak_rss_mib": mib}
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait()
            shutil.rmtree(tree, ignore_errors=True)

    def run_spark(_i):
        wall, mib, out = child(SPARK_PY, OPTIMIZE, table)
        return {"seconds": round(out["optimize_s"], 3), "process_seconds": round(wall, 3),
                "jvm_session_start_s": round(out["session_s"], 3), "peak_rss_mib": mib, "result": out["result"]}

    def run_deltalake(_i):
        wall, mib, out = child(DELTALAKE_PY, DELTALAKE, table, str(target), limit=a.limit)
        return {"seconds": round(wall, 3), "peak_rss_mib": mib, "result": out["result"]}

    contenders = [
        ("compactd", f"delta executor, 1 node, 2 units at a time, target {a.target_size}", run_compactd),
        ("spark", f"OPTIMIZE, Spark 4.2 local[2], Delta 4.4", run_spark),
        ("deltalake", f"optimize.compact(), deltalake 1.6.6, target {a.target_size}", run_deltalake),
    ]
    results = []
    print("| contender | setting | seconds (median; runs) | JVM start-up s | rows/s | peak RSS MiB | files before → after "
          "| MiB before → after | vectors after |")
    print("|---|---|---|---:|---:|---:|---|---|---:|")
    for name, setting, fn in contenders:
        runs = []
        try:
            for i in range(a.runs):
                restore(orig, table)
                r = fn(i)
                after = judge(table)
                if (after["rows"], after["id_sum"]) != (before["rows"], before["id_sum"]) \
                        or after["files"] >= before["files"]:
                    raise RuntimeError(f"{name} run {i}: {before} -> {after}")
                r.update(files_after=after["files"], mib_after=after["mib"], vectors_after=after["vectors"],
                         commits=after["version"] - before["version"])
                runs.append(r)
                print(f"{name} run {i}: {r}", file=sys.stderr, flush=True)
        except RuntimeError as e:
            if runs:
                raise
            row = {"part": "delta-vectors", "peer": name, "setting": setting, "refused": str(e)[-500:]}
            results.append(row)
            print(f"| {name} | {setting} | refused: {row['refused']} | | | | | | |", flush=True)
            print("RESULT " + json.dumps(row), flush=True)
            continue
        best = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        row = {"part": "delta-vectors", "peer": name, "setting": setting, **best,
               "runs": sorted(r["seconds"] for r in runs), "rows": before["rows"], "files_before": before["files"],
               "mib_before": before["mib"], "vectors_before": before["vectors"],
               "rows_per_s": round(before["rows"] / best["seconds"]),
               "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}
        results.append(row)
        jvm = f"{row['jvm_session_start_s']:.1f}" if "jvm_session_start_s" in row else "-"
        print(f"| {name} | {setting} | {row['seconds']:.2f} ({', '.join(f'{s:.2f}' for s in row['runs'])}) | {jvm} | "
              f"{row['rows_per_s']:,} | {row['peak_rss_mib']:.0f} | {row['files_before']} → {row['files_after']} | "
              f"{row['mib_before']} → {row['mib_after']} | {row['vectors_before']} → {row['vectors_after']} |",
              flush=True)
        print("RESULT " + json.dumps(row), flush=True)
    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True, cwd=HERE).stdout.strip()  # noqa: E731
    doc = {"meta": {"date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "commit": sh("git rev-parse --short HEAD"),
                    "knobs": knobs, "target": a.target_size}, "results": results}
    json.dump(doc, open(a.out, "w"), indent=1)
    if not a.base:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
