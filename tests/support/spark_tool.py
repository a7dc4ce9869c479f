#!/usr/bin/env python3
"""Spark with Delta Lake as a judge of compactd's output: one long-lived
Spark session (it takes 10-20 s to start) driven by JSON lines, from the venv
.ci/install-spark.sh makes (.venv-spark/bin/python).

  spark_tool.py             serve: one JSON command per stdin line, one JSON
                            result per stdout line, until stdin closes
  spark_tool.py --smoke DIR start a session, write and read a Delta table in
                            DIR, print {"session_start_s", "roundtrip_s"}
                            (the install check; it resolves the Delta jars)

Every result is {"ok": true, ...} or {"ok": false, "error": <the Java or
Python message>, "type": <its class>}: a failing command never ends the
session, and nothing else is ever written to stdout (the JVM's stdout goes to
stderr). Each command may carry "conf": {key: value}, Spark SQL settings for
that command only (restored afterwards), such as
spark.sql.parquet.datetimeRebaseModeInWrite=LEGACY or
spark.sql.parquet.datetimeRebaseModeInRead=EXCEPTION.

Commands ("cmd"):
  ping      -> {spark, delta}
  write     format (delta|parquet), path, schema (DDL), rows (JSON arrays in
            schema order, or objects), partition_by [...], mode
            (append|overwrite), options {...} (e.g. userMetadata), files (Spark
            tasks writing; 1: one file per partition) -> {rows, lines}: the
            rows as Spark holds them, canonical (below)
  read      format, path, version (Delta; absent: the latest), schema
            (Parquet; absent: inferred), where (SQL), lines (bool)
            -> {count, digest, lines?}; with confs [{...}, ...]: the same
            table read once under each -> {reads: [{ok, count, ...} or
            {ok: false, error}]}
  scan      format, path, where -> {rows, files, bytes, scans}: what the
            query's file scans read (the numFiles and filesSize metrics of the
            executed plan's file-scan leaves; adaptive execution off)
  history   path -> {history: [{version, operation, readVersion,
            engineInfo, userMetadata, operationParameters, operationMetrics}]}
            oldest first (DESCRIBE HISTORY)
  optimize  path -> {metrics}          (OPTIMIZE delta.`path`)
  vacuum    path -> {operation, deleted} (VACUUM ... RETAIN 0 HOURS, the
            retention check off; the last history entry, VACUUM END, and
            its numDeletedFiles)
  vacuum_dry path -> {files}           (VACUUM ... RETAIN 0 HOURS DRY RUN, the
            retention check off: the files it would delete)
  checkpoint path -> {version}         (a checkpoint of the latest version)
  sql       sql -> {rows}: runs one statement (such as INSERT OVERWRITE
            DIRECTORY ... SELECT ... FROM range(n): a table Spark generates
            itself), the number of rows it returned; with lines (bool) also
            -> {lines}: the rows it returned, canonical (below)
  footer    path -> {chunks: [{row_group, column, dictionary_pages,
            data_pages {encoding: count}, non_dictionary_pages}]}: a Parquet
            file's page encoding statistics as Spark's Parquet library
            (parquet-mr) reads them, which its dictionary filter trusts
  append_loop path, appends, start_batch, rows, partitions -> {batches: [{batch,
            rows, ms}], errors: [...]}: `appends` blind appends of `rows` rows
            (columns batch, id, part; id = batch * rows + i), each with
            userMetadata "batch-<n>", stopping at the first error
  dml_loop  path, statements [SQL with {t} for the table] -> {results: [{i,
            ok, error?, conflict?}]}: each statement run in turn with
            userMetadata "dml-<i>"; one that fails is reported (conflict:
            Delta refused it for a concurrent commit) and the loop goes on

Canonical rows: one JSON object per row with the columns sorted by name,
written by Spark itself (to_json): dates yyyy-MM-dd, timestamps
yyyy-MM-ddTHH:mm:ss.SSSSSS in UTC, decimals as Spark prints them, nulls kept;
digest: sha256 of the sorted lines joined by newlines. They show Spark's
values exactly: a date Spark reads shifted shows shifted.
"""

import contextlib
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

# The protocol owns the real stdout; everything else printed to fd 1 (the
# JVM's System.out, py4j, stray prints) goes to stderr.
PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

REPO = Path(__file__).resolve().parents[2]
JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "dateFormat": "yyyy-MM-dd",
    "ignoreNullFields": "false",
}


def session():
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master("local[2]")
        .appName("compactd-spark-judge")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Maven Central only, into the project's own cache (see
        # .ci/spark-ivysettings.xml): the same resolution on every machine.
        .config("spark.jars.ivySettings", str(REPO / ".ci/spark-ivysettings.xml"))
        .config("spark.jars.ivy", str(REPO / ".spark-ivy"))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # Listings (VACUUM's above all) are Spark jobs of this many tasks:
        # 10,000 by default, a minute for a table of a few files.
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        # Tasks reading HDFS prefer the DataNodes' host (127.0.0.1), which is
        # not the driver's address here; delay scheduling then waits for a
        # slot there that never comes, and a stage whose sibling finished
        # first can wait forever (Iceberg's expire_snapshots did). One
        # executor has no locality to wait for.
        .config("spark.locality.wait", "0")
        .config("spark.driver.memory", "3g")
        .config("spark.sql.session.timeZone", "UTC")
        # Legacy rebasing of timestamps uses the JVM's zone: UTC, as the
        # session's, so a run does not depend on the machine's zone.
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC -XX:TieredStopAtLevel=1")
        .config("spark.sql.warehouse.dir", os.path.join(os.getcwd(), "spark-warehouse"))
    )
    spark = configure_spark_with_delta_pip(b).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def confs(spark, conf):
    old = {}
    for k, v in (conf or {}).items():
        old[k] = spark.conf.get(k, None)
        spark.conf.set(k, str(v))
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def frame(spark, schema, rows):
    """`rows` (JSON arrays in schema order, or objects) as a DataFrame of
    `schema`, parsed by Spark itself (from_json: java.time, the proleptic
    Gregorian calendar Spark 3+ holds dates in; decimals from strings,
    exactly), failing on any value that does not parse: no Python
    conversion of dates or times, whose range and zone handling differ."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    st = spark.createDataFrame([], schema).schema if isinstance(schema, str) else schema
    if not isinstance(st, StructType):
        raise ValueError(f"not a row schema: {schema}")
    names = [f.name for f in st.fields]
    docs = []
    for r in rows:
        if isinstance(r, list):
            if len(r) != len(names):
                raise ValueError(f"a row of {len(r)} values for {len(names)} columns: {r}")
            r = dict(zip(names, r))
        docs.append((json.dumps(r),))
    raw = spark.createDataFrame(docs, "j STRING")
    df = raw.select(F.from_json("j", st, {**JSON_OPTIONS, "mode": "FAILFAST"}).alias("r")).select("r.*")
    return df


def canonical(df):
    """Sorted canonical lines of `df` (see the module doc)."""
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`") for c in sorted(df.columns)]
    lines = [r[0] for r in df.select(F.to_json(F.struct(*cols), JSON_OPTIONS)).collect()]
    lines.sort()
    return lines


def digest(lines):
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def reader(spark, c):
    fmt = c.get("format", "delta")
    r = spark.read.format(fmt)
    if c.get("version") is not None:
        r = r.option("versionAsOf", int(c["version"]))
    if c.get("schema"):
        r = r.schema(c["schema"])
    df = r.load(c["path"])
    if c.get("where"):
        df = df.where(c["where"])
    return df


class Judge:
    def __init__(self, spark):
        self.spark = spark

    def ping(self, c):
        from importlib.metadata import version

        return {"spark": self.spark.version, "delta": version("delta-spark")}

    def write(self, c):
        files = int(c.get("files", 1))
        df = frame(self.spark, c["schema"], c["rows"])
        # One task (no shuffle) writes one file per partition.
        df = df.coalesce(1) if files == 1 else df.repartition(files)
        lines = canonical(df)
        w = df.write.format(c.get("format", "delta")).mode(c.get("mode", "append"))
        for k, v in (c.get("options") or {}).items():
            w = w.option(k, str(v))
        if c.get("partition_by"):
            w = w.partitionBy(*c["partition_by"])
        w.save(c["path"])
        return {"rows": len(lines), "lines": lines}

    def read(self, c):
        df = reader(self.spark, c)
        if "confs" not in c:
            return self.canonical_read(df, c)
        # One DataFrame read under each conf: a Delta version's snapshot is
        # rebuilt once, and each read plans (and so picks its settings) anew.
        reads = []
        for conf in c["confs"]:
            try:
                with confs(self.spark, conf):
                    reads.append({"ok": True, **self.canonical_read(df, c)})
            except Exception as e:  # noqa: BLE001 - each read's failure is its answer
                traceback.print_exc()
                reads.append({"ok": False, **failure(e)})
        return {"reads": reads}

    @staticmethod
    def canonical_read(df, c):
        lines = canonical(df)
        out = {"count": len(lines), "digest": digest(lines)}
        if c.get("lines"):
            out["lines"] = lines
        return out

    def scan(self, c):
        # Adaptive execution would wrap the plan and hide its leaves' metrics
        # behind query stages.
        with confs(self.spark, {"spark.sql.adaptive.enabled": "false"}):
            df = reader(self.spark, c)
            # Collected in the JVM: no Python conversion of the values
            # (Python's datetime cannot hold every date Spark can).
            rows = df._jdf.collectAsList().size()
            plan = df._jdf.queryExecution().executedPlan()
        leaves = plan.collectLeaves()
        files = size = scans = 0
        for i in range(leaves.size()):
            metrics = leaves.apply(i).metrics()
            nf, fs = metrics.get("numFiles"), metrics.get("filesSize")
            if nf.isDefined():
                scans += 1
                files += nf.get().value()
                if fs.isDefined():
                    size += fs.get().value()
        return {"rows": rows, "files": files, "bytes": size, "scans": scans}

    def history(self, c):
        from delta.tables import DeltaTable

        rows = DeltaTable.forPath(self.spark, c["path"]).history().orderBy("version").collect()
        keep = ("version", "operation", "readVersion", "engineInfo", "userMetadata", "isBlindAppend")
        out = []
        for r in rows:
            d = {k: r[k] for k in keep}
            d["operationParameters"] = dict(r["operationParameters"] or {})
            d["operationMetrics"] = dict(r["operationMetrics"] or {})
            out.append(d)
        return {"history": out}

    def optimize(self, c):
        r = self.spark.sql(f"OPTIMIZE delta.`{c['path']}`").collect()
        metrics = r[0]["metrics"].asDict(recursive=True) if r else {}
        keep = ("numFilesAdded", "numFilesRemoved", "totalConsideredFiles", "totalFilesSkipped")
        return {"metrics": {k: metrics.get(k) for k in keep}}

    def vacuum(self, c):
        from delta.tables import DeltaTable

        path = c["path"]
        with confs(self.spark, {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}):
            self.spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
        last = DeltaTable.forPath(self.spark, path).history(1).collect()
        metrics = dict(last[0]["operationMetrics"] or {}) if last else {}
        return {"operation": last[0]["operation"] if last else None, "deleted": int(metrics.get("numDeletedFiles", -1))}

    def vacuum_dry(self, c):
        path = c["path"]
        with confs(self.spark, {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}):
            rows = self.spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS DRY RUN").collect()
        return {"files": [r[0] for r in rows]}

    def checkpoint(self, c):
        jvm = self.spark._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, c["path"])
        snap = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
        if snap.version() < 0:
            raise ValueError(f"{c['path']} is not a Delta table (no version to checkpoint)")
        log.checkpoint(snap, jvm.scala.Option.empty())
        return {"version": snap.version()}

    def sql(self, c):
        df = self.spark.sql(c["sql"])
        if c.get("lines"):
            lines = canonical(df)
            return {"rows": len(lines), "lines": lines}
        return {"rows": len(df.collect())}

    def footer(self, c):
        jvm = self.spark._jvm
        conf = self.spark._jsc.hadoopConfiguration()
        f = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(jvm.org.apache.hadoop.fs.Path(c["path"]), conf)
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(f)
        chunks = []
        try:
            for g, block in enumerate(reader.getFooter().getBlocks()):
                for col in block.getColumns():
                    es = col.getEncodingStats()
                    chunks.append({
                        "row_group": g,
                        "column": col.getPath().toDotString(),
                        "dictionary_pages": None if es is None else sorted(str(e) for e in es.getDictionaryEncodings()),
                        "data_pages": None if es is None else {
                            str(e): es.getNumDataPagesEncodedAs(e) for e in es.getDataEncodings()
                        },
                        "non_dictionary_pages": None if es is None else es.hasNonDictionaryEncodedPages(),
                    })
        finally:
            reader.close()
        return {"chunks": chunks}

    def append_loop(self, c):
        from pyspark.sql import functions as F

        n, start, rows, parts = int(c["appends"]), int(c.get("start_batch", 0)), int(c["rows"]), int(c["partitions"])
        done, errors = [], []
        for b in range(start, start + n):
            t = time.monotonic()
            df = (
                self.spark.range(b * rows, (b + 1) * rows, numPartitions=1)
                .select(F.lit(b).cast("bigint").alias("batch"), F.col("id"), (F.col("id") % parts).cast("int").alias("part"))
            )
            try:
                df.write.format("delta").mode("append").option("userMetadata", f"batch-{b}").save(c["path"])
            except Exception as e:  # noqa: BLE001 - reported, the loop stops
                errors.append({"batch": b, **failure(e)})
                break
            done.append({"batch": b, "rows": rows, "ms": int((time.monotonic() - t) * 1000)})
        return {"batches": done, "errors": errors}

    def dml_loop(self, c):
        table = f"delta.`{c['path']}`"
        results = []
        for i, q in enumerate(c["statements"]):
            try:
                with confs(self.spark, {"spark.databricks.delta.commitInfo.userMetadata": f"dml-{i}"}):
                    self.spark.sql(q.replace("{t}", table)).collect()
                results.append({"i": i, "ok": True})
            except Exception as e:  # noqa: BLE001 - reported, the loop goes on
                f = failure(e)
                # Delta's conflict checker: io.delta.exceptions.Concurrent*
                # (Delta 4 names it only by its error class in the message).
                conflict = f["type"].startswith("Concurrent") or "DELTA_CONCURRENT" in f["error"]
                results.append({"i": i, "ok": False, "conflict": conflict, **f})
        return {"results": results}


def failure(e):
    msg = str(e)
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            msg = java.toString()
        except Exception:  # noqa: BLE001 - the JVM may be gone
            pass
    return {"error": msg[:4000], "type": type(e).__name__}


def serve(spark, judge=None):
    judge = judge or Judge(spark)
    for line in sys.stdin:
        if not line.strip():
            continue
        t = time.monotonic()
        try:
            c = json.loads(line)
            fn = getattr(judge, c.get("cmd", ""), None)
            if fn is None or c["cmd"].startswith("_"):
                raise ValueError(f"unknown command {c.get('cmd')!r}")
            with confs(spark, c.get("conf")):
                out = {"ok": True, **fn(c)}
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            traceback.print_exc()
            out = {"ok": False, **failure(e)}
        out["ms"] = int((time.monotonic() - t) * 1000)
        PROTO.write(json.dumps(out) + "\n")
        PROTO.flush()


def smoke(folder):
    t = time.monotonic()
    spark = session()
    started = time.monotonic() - t
    t = time.monotonic()
    judge = Judge(spark)
    schema = "id BIGINT, part INT, d DATE"
    rows = [[1, 0, "0001-01-01"], [2, 1, "1582-10-04"]]
    wrote = judge.write({"path": folder, "schema": schema, "rows": rows, "partition_by": ["part"]})
    read = judge.read({"path": folder, "lines": True})
    if read["lines"] != wrote["lines"]:
        raise SystemExit(f"the smoke table read back differs: {read['lines']} != {wrote['lines']}")
    PROTO.write(json.dumps({"session_start_s": round(started, 1), "roundtrip_s": round(time.monotonic() - t, 1)}) + "\n")
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
        PROTO.write(json.dumps({"ok": False, "ready": False, **failure(e)}) + "\n")
        return
    PROTO.write(json.dumps({"ok": True, "ready": True, "session_start_ms": int((time.monotonic() - t) * 1000)}) + "\n")
    PROTO.flush()
    serve(spark)
    spark.stop()


if __name__ == "__main__":
    main()
