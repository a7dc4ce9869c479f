#!/usr/bin/env python3
"""Spark with Apache Iceberg's Spark runtime, on the tables compactd
compacts: one long-lived session driven by JSON lines exactly as
spark_tool.py's (same protocol, answers and canonical rows), from the venv
.ci/install-spark-iceberg.sh makes (.venv-spark-iceberg/bin/python, Spark
4.1: Iceberg 1.12.0 has no runtime for the Delta judge's 4.2).

  spark_iceberg_tool.py             serve
  spark_iceberg_tool.py --smoke DIR start a session, create, append to and
                                    read a table in warehouse DIR, print
                                    {"session_start_s", "roundtrip_s"}

Tables live in file-system ("Hadoop") catalogs: `catalog` names one over a
warehouse folder, whose table `<ns>.<t>` is the folder `<warehouse>/<ns>/<t>`
(compactd's `db/s/t` is table `s.t` of a catalog over `db`).

Commands ("cmd"), besides spark_tool.py's read/sql:
  catalog  name, warehouse -> {}: a Hadoop catalog `name` over `warehouse`,
           without a table cache (compactd commits between statements)
  query    sql -> {rows: [{column: value as text}]}: a statement's result
           (the procedures' CALL ... answers, metadata tables)
  table    table (catalog.ns.t), snapshot?, where? -> {count, digest}: its
           rows at the snapshot (absent: the current), canonical
  write    table, schema, rows, files: as spark_tool.py's write, appended to
           an Iceberg table, each call one snapshot
  sql_loop statements, retries -> {done: [{i, tries, ms}], errors}: runs the
           statements in order, each retried up to `retries` times when its
           commit fails (a concurrent writer won, as Iceberg reports it);
           stops at the first that fails every try
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spark_tool  # noqa: E402 - after the path; it also takes over stdout for the protocol

RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
REPO = Path(__file__).resolve().parents[2]


def session():
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master("local[2]")
        .appName("compactd-spark-iceberg")
        .config("spark.jars.packages", RUNTIME)
        .config("spark.jars.ivySettings", str(REPO / ".ci/spark-ivysettings.xml"))
        .config("spark.jars.ivy", str(REPO / ".spark-iceberg-ivy"))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        # As in spark_tool.session: without it, expire_snapshots and
        # remove_orphan_files never finish on HDFS.
        .config("spark.locality.wait", "0")
        .config("spark.driver.memory", os.environ.get("COMPACTD_SPARK_DRIVER_MEMORY", "3g"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC -XX:TieredStopAtLevel=1")
        .config("spark.sql.warehouse.dir", os.path.join(os.getcwd(), "spark-warehouse"))
    )
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class IcebergJudge(spark_tool.Judge):
    def catalog(self, c):
        name = c["name"]
        self.spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
        self.spark.conf.set(f"spark.sql.catalog.{name}.type", "hadoop")
        self.spark.conf.set(f"spark.sql.catalog.{name}.warehouse", c["warehouse"])
        # Each statement loads the table anew: other writers (compactd)
        # commit between statements.
        self.spark.conf.set(f"spark.sql.catalog.{name}.cache-enabled", "false")
        return {}

    def query(self, c):
        rows = self.spark.sql(c["sql"]).collect()
        return {"rows": [{k: None if v is None else str(v) for k, v in r.asDict().items()} for r in rows]}

    def age(self, c):
        """Sets the modification time of every file below `location` to
        `mtime_ms` (through Hadoop's FileSystem, so on HDFS too)."""
        jvm = self.spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(c["location"])
        fs = path.getFileSystem(self.spark._jsc.hadoopConfiguration())
        files = fs.listFiles(path, True)
        n = 0
        while files.hasNext():
            fs.setTimes(files.next().getPath(), int(c["mtime_ms"]), -1)
            n += 1
        return {"files": n}

    def table(self, c):
        if c.get("snapshot") is not None:
            # Spark 4.1's Iceberg reader takes time travel in SQL only.
            df = self.spark.sql(f"SELECT * FROM {c['table']} VERSION AS OF {int(c['snapshot'])}")
        else:
            df = self.spark.read.format("iceberg").load(c["table"])
        if c.get("where"):
            df = df.where(c["where"])
        return self.canonical_read(df, c)

    def sql_loop(self, c):
        done, errors = [], []
        for i, stmt in enumerate(c["statements"]):
            t = time.monotonic()
            for attempt in range(1, int(c.get("retries", 5)) + 1):
                try:
                    self.spark.sql(stmt).collect()
                    done.append({"i": i, "tries": attempt, "ms": int((time.monotonic() - t) * 1000)})
                    break
                except Exception as e:  # noqa: BLE001 - retried, then reported
                    last = spark_tool.failure(e)
                    # Only a lost commit is retried: anything else (and an
                    # unknown commit state) is the answer.
                    if "ValidationException" not in last["error"] and "CommitFailedException" not in last["error"]:
                        errors.append({"i": i, "tries": attempt, **last})
                        return {"done": done, "errors": errors}
            else:
                errors.append({"i": i, "tries": attempt, **last})
                return {"done": done, "errors": errors}
        return {"done": done, "errors": errors}

    def write(self, c):
        files = int(c.get("files", 1))
        df = spark_tool.frame(self.spark, c["schema"], c["rows"])
        df = df.coalesce(1) if files == 1 else df.repartition(files)
        df.writeTo(c["table"]).append()
        return {"rows": df.count()}


def smoke(folder):
    t = time.monotonic()
    spark = session()
    started = time.monotonic() - t
    t = time.monotonic()
    judge = IcebergJudge(spark)
    judge.catalog({"name": "smoke", "warehouse": folder})
    spark.sql("CREATE TABLE smoke.s.t (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part)")
    judge.write({"table": "smoke.s.t", "schema": "id BIGINT, part STRING", "rows": [[1, "a"], [2, "b"]]})
    n = judge.table({"table": "smoke.s.t"})["count"]
    if n != 2:
        raise SystemExit(f"the smoke table read back {n} rows, not 2")
    spark_tool.PROTO.write(
        json.dumps({"session_start_s": round(started, 1), "roundtrip_s": round(time.monotonic() - t, 1)}) + "\n"
    )
    spark.stop()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--smoke":
        smoke(sys.argv[2])
        return
    if len(sys.argv) != 1:
        raise SystemExit(__doc__)
    try:
        t = time.monotonic()
        spark = session()
    except Exception as e:  # noqa: BLE001 - the first answer says why
        traceback.print_exc()
        spark_tool.PROTO.write(json.dumps({"ok": False, "ready": False, **spark_tool.failure(e)}) + "\n")
        return
    ready = {"ok": True, "ready": True, "session_start_ms": int((time.monotonic() - t) * 1000)}
    spark_tool.PROTO.write(json.dumps(ready) + "\n")
    spark_tool.PROTO.flush()
    spark_tool.serve(spark, IcebergJudge(spark))


if __name__ == "__main__":
    main()
