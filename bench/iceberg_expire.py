#!/usr/bin/env python3
"""Iceberg retention on a real HDFS: compactd's `expire` executor against
Java Iceberg's own `ExpireSnapshots` on twin tables (run by hand; figures
copied into RESULTS.md):

    python3 bench/iceberg_expire.py --binary target/release/compactd [--files 2000]

Starts the test launcher's MiniDFSCluster (`bash .ci/install-hdfs.sh`) and a
Spark 4.1 session with Iceberg 1.12's runtime (`bash .ci/install-spark-iceberg.sh`,
`local[2]`) whose Hadoop catalog lives on it, and the tests' Java Iceberg
1.12 tool (`bash .ci/install-iceberg.sh`). Spark writes the same table
three times: one append of FILES small files (100 tasks, each a range of ids into
FILES/100 partitions with Iceberg's fanout writer), then compacts each with
its own `rewrite_data_files` (the same for both: what is measured is the
retention). Then table A is expired by `compactd __expire` (zero age,
forced, the newest snapshot kept) and table B by Java Iceberg's
`expireSnapshots().expireOlderThan(now).retainLast(1).commit()` (what
Spark's `expire_snapshots` runs, without its Spark jobs, which never
finished on this MiniDFSCluster), each timed alone, with the NameNode's own
RPC count (the launcher's, asked right before and right after; the JVM is
started and the table loaded before its count starts) and the NameNode's count of files and bytes under
each table (`getContentSummary`) after the write, after the compaction and
after the retention. Spark reads both tables afterwards (same rows). Prints
one `RESULT {json}` line and writes it to bench/iceberg-expire-results.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPARK_PY = os.path.join(REPO, ".venv-spark-iceberg", "bin", "python")
TOOLS = os.path.join(REPO, "tests", "support")
sys.path.insert(0, HERE)
from hdfs import MiniDfs  # noqa: E402
import expire  # noqa: E402
from expire import count  # noqa: E402

# One session for the whole run: commands on stdin, one JSON answer each.
SESSION = f"""
import json, os, sys, time
sys.path.insert(0, {TOOLS!r})
import spark_iceberg_tool as t
out = t.spark_tool.PROTO
t0 = time.monotonic()
spark = t.session()
started = time.monotonic() - t0
out.write(json.dumps({{"session_s": started}}) + "\\n")
for line in sys.stdin:
    c = json.loads(line)
    t1 = time.monotonic()
    if c["cmd"] == "catalog":
        spark.conf.set(f"spark.sql.catalog.{{c['name']}}", "org.apache.iceberg.spark.SparkCatalog")
        spark.conf.set(f"spark.sql.catalog.{{c['name']}}.type", "hadoop")
        spark.conf.set(f"spark.sql.catalog.{{c['name']}}.warehouse", c["warehouse"])
        spark.conf.set(f"spark.sql.catalog.{{c['name']}}.cache-enabled", "false")
        r = {{}}
    elif c["cmd"] == "sql":
        r = {{"rows": [{{k: str(v) for k, v in row.asDict().items()}} for row in spark.sql(c["sql"]).collect()]}}
    r["s"] = time.monotonic() - t1
    out.write(json.dumps(r) + "\\n")
spark.stop()
"""


class Java:
    """The tests' Java Iceberg tool: one JSON command a line, one answer."""

    def __init__(self):
        d = os.path.join(TOOLS, "iceberg", "target")
        if not os.path.isdir(os.path.join(d, "lib")):
            raise SystemExit("the Java Iceberg tool is not built: run `bash .ci/install-iceberg.sh`")
        self.p = subprocess.Popen(["java", "-Xmx1g", "-cp", f"{d}/classes:{d}/lib/*", "compactd.IcebergTool"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.answer()

    def answer(self):
        while line := self.p.stdout.readline():
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit("the Java Iceberg tool ended")

    def __call__(self, **c):
        self.p.stdin.write(json.dumps(c) + "\n")
        self.p.stdin.flush()
        r = self.answer()
        if r.get("ok") is False:
            raise SystemExit(f"Java Iceberg {c['cmd']}: {r}")
        return r

    def stop(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


class Spark(expire.Spark):
    def __init__(self):
        super().__init__(SPARK_PY, SESSION)

    def sql(self, q):
        return self(cmd="sql", sql=q)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--files", type=int, default=2000)
    a = ap.parse_args()
    if a.files % 100:
        raise SystemExit("--files must be a multiple of 100 (100 tasks, one file per partition each)")
    dfs = MiniDfs("/tmp")
    spark = Spark()
    roots = {k: f"{dfs.url}/bench-{k}" for k in "abc"}
    tables = {k: f"{r}/db/s/t" for k, r in roots.items()}
    out = {"files": a.files, "spark_session_s": spark.started["session_s"]}
    parts, rows = a.files // 100, a.files * 3 // 2
    for k, r in roots.items():
        spark(cmd="catalog", name=k, warehouse=f"{r}/db")
        spark.sql(f"CREATE TABLE {k}.s.t (id BIGINT, s STRING, part INT) USING iceberg PARTITIONED BY (part) "
                  "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none', "
                  "'write.spark.fanout.enabled'='true')")
        spark.sql(f"INSERT INTO {k}.s.t SELECT /*+ REPARTITION_BY_RANGE(100, id) */ id, concat('row-', id), "
                  f"cast(id % {parts} AS INT) FROM range({rows})")
        out[f"{k}_written"] = count(dfs, tables[k])
        spark.sql(f"CALL {k}.system.rewrite_data_files(table => 's.t', options => map('min-input-files', '2'))")
        out[f"{k}_compacted"] = count(dfs, tables[k])
    read = {k: f"SELECT count(*) AS n, sum(id) AS s FROM {k}.s.t" for k in tables}
    before = {k: spark.sql(q)["rows"] for k, q in read.items()}

    out.update(expire.compactd_expire(a.binary, dfs, roots["a"]))
    out["a_expired"] = count(dfs, tables["a"])

    java = Java()
    java(cmd="snapshots", location=tables["b"])
    rpcs = dfs.rpcs()
    t0 = time.monotonic()
    v = java(cmd="expire", location=tables["b"], older_than=int(time.time() * 1000), retain_last=1)
    out["java_s"] = time.monotonic() - t0
    out["java_commit_s"] = v["seconds"]
    out["java_rpcs"] = dfs.rpcs() - rpcs
    java.stop()
    out["b_expired"] = count(dfs, tables["b"])

    now = spark.sql("SELECT CAST(current_timestamp() AS STRING) AS t")["rows"][0]["t"]
    rpcs = dfs.rpcs()
    v = spark.sql(f"CALL c.system.expire_snapshots(table => 's.t', older_than => TIMESTAMP '{now}', retain_last => 1)")
    out["spark_s"] = v["s"]
    out["spark_rpcs"] = dfs.rpcs() - rpcs
    out["spark_deleted"] = v["rows"][0]
    out["c_expired"] = count(dfs, tables["c"])
    after = {k: spark.sql(q)["rows"] for k, q in read.items()}
    for k in tables:
        if before[k] != after[k]:
            raise SystemExit(f"table {k} changed: {before[k]} -> {after[k]}")
    out["rows"] = after["a"][0]["n"]
    spark.stop()
    dfs.stop()
    result = {"part": "iceberg-expire", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **out}
    with open(os.path.join(HERE, "iceberg-expire-results.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
