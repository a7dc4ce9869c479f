#!/usr/bin/env python3
"""Retention on a real HDFS: compactd's `expire` executor against Spark's
`VACUUM` on twin Delta tables (run by hand; figures copied into RESULTS.md):

    python3 bench/expire.py --binary target/release/compactd [--files 2000]

Starts the test launcher's MiniDFSCluster (`bash .ci/install-hdfs.sh`) and a
Spark 4.2 session with Delta 4.4 (`bash .ci/install-spark.sh`, `local[2]`).
Spark writes the same table twice, FILES small files each (one task, one row
per file: version 0); each is compacted by `compactd __merge --format delta`
(version 1). Then table A is expired by `compactd __expire` (zero retention,
forced) and table B vacuumed by Spark (`VACUUM … RETAIN 0 HOURS`, the
retention check off), each timed alone, with the NameNode's own RPC count
(the launcher's, asked right before and right after; Spark's session is
started and the table's log loaded before the count starts) and the
NameNode's count of files and bytes under each table (`getContentSummary`)
before compaction, after it, and after retention. Spark reads both tables
afterwards (same rows). Prints one `RESULT {json}` line and writes it to
bench/expire-results.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPARK_PY = os.path.join(REPO, ".venv-spark", "bin", "python")
sys.path.insert(0, HERE)
from hdfs import MiniDfs  # noqa: E402
from delta_vectors import SPARK_PRELUDE  # noqa: E402

# One session for the whole run: commands on stdin, one JSON answer each.
SESSION = SPARK_PRELUDE + """
from pyspark.sql import functions as F
spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
out.write(json.dumps({"session_s": started}) + "\\n")
for line in sys.stdin:
    c = json.loads(line)
    t1 = time.monotonic()
    if c["cmd"] == "write":
        (spark.range(0, c["rows"], 1, 1).selectExpr("id", "concat('row-', cast(id as string)) AS s")
            .write.format("delta").mode("append").option("maxRecordsPerFile", "1").save(c["path"]))
        r = {}
    elif c["cmd"] == "load":
        r = {"files": spark.sql(f"DESCRIBE DETAIL delta.`{c['path']}`").collect()[0]["numFiles"]}
    elif c["cmd"] == "vacuum":
        spark.sql(f"VACUUM delta.`{c['path']}` RETAIN 0 HOURS").collect()
        r = {}
    elif c["cmd"] == "read":
        row = spark.read.format("delta").load(c["path"]).agg(F.count("*").alias("n"), F.sum("id").alias("s")).collect()[0]
        r = {"rows": row["n"], "id_sum": row["s"]}
    r["s"] = time.monotonic() - t1
    out.write(json.dumps(r) + "\\n")
spark.stop()
"""


class Spark:
    """A Spark session in a child (`session`, run by `python`): one JSON
    command a line on its stdin, one JSON answer a line."""

    def __init__(self, python=SPARK_PY, session=SESSION):
        self.p = subprocess.Popen([python, "-c", session, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, cwd="/tmp")
        self.started = self.answer("the session's start")

    def answer(self, what):
        # Ivy prints its settings on stdout before the session's own lines.
        while line := self.p.stdout.readline():
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit(f"Spark ended during {what}")

    def __call__(self, **c):
        self.p.stdin.write(json.dumps(c) + "\n")
        self.p.stdin.flush()
        return self.answer(c)

    def stop(self):
        self.p.stdin.close()
        self.p.wait(timeout=120)


def count(dfs, uri):
    dirs, files, size = (int(x) for x in dfs.cmd(f"count {uri[len(dfs.url):]}").split())
    return {"folders": dirs, "files": files, "bytes": size}


def compactd_expire(binary, dfs, root, **params):
    """Runs `compactd __expire` of `db/s/t/` below `root` with a forced zero
    retention (and `params`, as `COMPACTD_PARAM_…` variables), timed with
    the NameNode's RPCs: `compactd_s`, `compactd_rpcs`, `compactd_outcome`."""
    env = dict(os.environ, COMPACTD_PARAM_EXPIRE_OLDER_THAN="0", COMPACTD_PARAM_EXPIRE_FORCE="true", RUST_LOG="warn",
               **params)
    rpcs = dfs.rpcs()
    t0 = time.monotonic()
    r = subprocess.run([binary, "--root", root, "__expire", "--dir", "db/s/t/"], capture_output=True, text=True,
                       env=env)
    took = time.monotonic() - t0
    spent = dfs.rpcs() - rpcs
    if r.returncode != 0:
        raise SystemExit(f"expire: {r.stderr}")
    return {"compactd_s": took, "compactd_rpcs": spent, "compactd_outcome": r.stdout.strip().splitlines()[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--files", type=int, default=2000)
    a = ap.parse_args()
    dfs = MiniDfs("/tmp")
    spark = Spark()
    roots = {k: f"{dfs.url}/bench-{k}" for k in "ab"}
    tables = {k: f"{r}/db/s/t" for k, r in roots.items()}
    out = {"files": a.files, "spark_session_s": spark.started["session_s"]}
    for k, t in tables.items():
        spark(cmd="write", path=t, rows=a.files)
        out[f"{k}_written"] = count(dfs, t)
        r = subprocess.run([a.binary, "--root", roots[k], "__merge", "--dir", "db/s/t/", "--task", "bench",
                            "--round", "1", "--attempt", "1", "--target-size", "134217728", "--format", "delta",
                            "--partition", "whole-table"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"compaction of {t}: {r.stderr}")
        out[f"{k}_compacted"] = count(dfs, t)
    before = {k: spark(cmd="read", path=t) for k, t in tables.items()}

    out.update(compactd_expire(a.binary, dfs, roots["a"], COMPACTD_PARAM_EXPIRE_LOG_OLDER_THAN="0"))
    out["a_expired"] = count(dfs, tables["a"])

    spark(cmd="load", path=tables["b"])
    rpcs = dfs.rpcs()
    v = spark(cmd="vacuum", path=tables["b"])
    out["spark_rpcs"] = dfs.rpcs() - rpcs
    out["spark_s"] = v["s"]
    out["b_vacuumed"] = count(dfs, tables["b"])
    after = {k: spark(cmd="read", path=t) for k, t in tables.items()}
    for k in tables:
        if (before[k]["rows"], before[k]["id_sum"]) != (after[k]["rows"], after[k]["id_sum"]):
            raise SystemExit(f"table {k} changed: {before[k]} -> {after[k]}")
    out["rows"] = after["a"]["rows"]
    spark.stop()
    dfs.stop()
    result = {"part": "expire", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **out}
    with open(os.path.join(HERE, "expire-results.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
