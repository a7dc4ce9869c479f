#!/usr/bin/env python3
"""Parquet tables for compactd's tests, written and checked by tools nobody
here wrote: pyarrow and DuckDB (from the venv .ci/install-parquet-tools.sh
makes).

  gen DIR --partitions P --files F --rows R [--seed S] [--compression C]
      Writes DIR/db/s/t/dt=<k>/part-<n>.parquet (Hive style) with nulls,
      strings, timestamps with a time zone, decimals, a list and a struct
      column and key-value schema metadata. Prints {"files", "rows", "bytes"}.
  check ORIG NEW --target BYTES
      Compares table NEW (after compaction) with ORIG (a copy from before):
      pyarrow: the same schema (with metadata) and the same rows in every
      partition, fewer files, outputs near the target; DuckDB: both tables
      EXCEPT ALL each other are empty and counts match. Prints a JSON summary;
      exits 1 naming what differs.
  odd FILE --variant type|missing-required|spark-legacy|corrupt-page
      Writes one small file that cannot share an output with gen's: `score`
      is a string; `id` (not nullable in gen's) is missing; Spark's footer
      keys say its dates are Julian-rebased (LEGACY); or one of gen's schema
      whose first data page is corrupt (with checksums).
  rows DIR
      Prints {"partition": [rows, files, checksum]} of the table under DIR
      (pyarrow): the kill test's quick oracle.
  s3-put DIR URI / s3-get URI DIR
      Copies a folder to / from the loopback S3 server (pyarrow.fs;
      URI: s3://bucket/prefix?endpoint=http://127.0.0.1:PORT).
"""

import argparse
import datetime
import decimal
import hashlib
import json
import os
import random
import shutil
import sys
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq

TABLE = "db/s/t"


def schema():
    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("amount", pa.decimal128(12, 2)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.struct([pa.field("k", pa.string()), pa.field("v", pa.int32())])),
            pa.field("score", pa.float64()),
        ],
        metadata={"owner": "ingest-7", "compactd.test": "parquet"},
    )


def gen(args):
    rng = random.Random(args.seed)
    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    files = rows = size = 0
    next_id = 0
    for p in range(args.partitions):
        d = os.path.join(args.dir, TABLE, f"dt={p}")
        os.makedirs(d, exist_ok=True)
        for f in range(args.files):
            n = args.rows
            ids = list(range(next_id, next_id + n))
            next_id += n
            cols = {
                "id": ids,
                "name": [None if rng.random() < 0.1 else f"user-{rng.randrange(10**6)}" for _ in ids],
                "ts": [base + datetime.timedelta(seconds=i * 7, microseconds=rng.randrange(10**6)) for i in ids],
                "amount": [
                    None if rng.random() < 0.05 else decimal.Decimal(rng.randrange(-10**9, 10**9)) / 100 for _ in ids
                ],
                "tags": [
                    None if rng.random() < 0.1 else [f"t{rng.randrange(50)}" for _ in range(rng.randrange(4))]
                    for _ in ids
                ],
                "attrs": [
                    None if rng.random() < 0.1 else {"k": f"k{rng.randrange(100)}", "v": rng.randrange(-1000, 1000)}
                    for _ in ids
                ],
                "score": [None if rng.random() < 0.1 else rng.random() * 100 for _ in ids],
            }
            t = pa.table(cols, schema=schema())
            path = os.path.join(d, f"part-{f:05d}.parquet")
            pq.write_table(t, path, compression=args.compression)
            files += 1
            rows += n
            size += os.path.getsize(path)
    print(json.dumps({"files": files, "rows": rows, "bytes": size}))


def odd(args):
    base = schema()
    if args.variant == "type":
        fields = [pa.field("score", pa.string()) if f.name == "score" else f for f in base]
        sch = pa.schema(fields, metadata=base.metadata)
    elif args.variant == "missing-required":
        sch = pa.schema([f for f in base if f.name != "id"], metadata=base.metadata)
    elif args.variant == "spark-legacy":
        sch = base.with_metadata({**base.metadata, b"org.apache.spark.version": b"3.5.1",
                                  b"org.apache.spark.legacyDateTime": b""})
    else:
        # The right schema, page checksums on, then bytes of the first data
        # page flipped: the footer reads, the data does not.
        sch = base
    cols = {f.name: [None] * 3 for f in sch}
    if "id" in sch.names:
        cols["id"] = [10**9, 10**9 + 1, 10**9 + 2]
    if args.variant != "corrupt-page":
        pq.write_table(pa.table(cols, schema=sch), args.file)
        return
    cols["name"] = [f"name-{i}" for i in range(3)]
    pq.write_table(pa.table(cols, schema=sch), args.file, write_page_checksum=True, compression="none")
    meta = pq.ParquetFile(args.file).metadata
    col = meta.row_group(0).column(0)
    start = col.data_page_offset
    with open(args.file, "r+b") as f:
        f.seek(start + col.total_compressed_size - 8)
        f.write(b"\xff" * 8)


def data_files(d):
    """Files a Hive reader sees: not `_`/`.`-prefixed, `.parquet`."""
    out = []
    for name in sorted(os.listdir(d)):
        full = os.path.join(d, name)
        if name.startswith(("_", ".")) or not os.path.isfile(full) or not name.endswith(".parquet"):
            continue
        out.append(full)
    return out


def partitions(root):
    base = os.path.join(root, TABLE)
    return sorted(p for p in os.listdir(base) if not p.startswith(("_", ".")))


def read_partition(d):
    tables = [pq.read_table(f) for f in data_files(d)]
    return tables


def fail(msg, summary):
    summary["error"] = msg
    print(json.dumps(summary))
    sys.exit(1)


def check(args):
    import duckdb

    summary = {"partitions": {}}
    orig_parts, new_parts = partitions(args.orig), partitions(args.new)
    if orig_parts != new_parts:
        fail(f"partitions differ: {orig_parts} vs {new_parts}", summary)
    want_schema = None
    for p in orig_parts:
        od, nd = os.path.join(args.orig, TABLE, p), os.path.join(args.new, TABLE, p)
        ot, nt = read_partition(od), read_partition(nd)
        s = {"files_before": len(ot), "files_after": len(nt)}
        summary["partitions"][p] = s
        for f, t in zip(data_files(nd), nt):
            if not t.schema.equals(ot[0].schema, check_metadata=True):
                fail(f"{f}: schema {t.schema} (metadata {t.schema.metadata}) differs from the input's {ot[0].schema} "
                     f"(metadata {ot[0].schema.metadata})", summary)
        want_schema = ot[0].schema
        a = pa.concat_tables(ot).sort_by("id")
        b = pa.concat_tables(nt).sort_by("id")
        s["rows"] = b.num_rows
        if a.num_rows != b.num_rows:
            fail(f"{p}: {a.num_rows} rows before, {b.num_rows} after", summary)
        if not a.equals(b):
            fail(f"{p}: the rows differ", summary)
        if len(nt) >= len(ot):
            fail(f"{p}: {len(nt)} files after, {len(ot)} before: not fewer", summary)
        sizes = sorted(os.path.getsize(f) for f in data_files(nd) if os.path.basename(f).startswith("compacted-"))
        s["output_sizes"] = sizes
        if not sizes:
            fail(f"{p}: no compacted output", summary)
        # Every output but the smallest (the partition's remainder) is near
        # the target: between half of it and 1.25 times it.
        for size in sizes[1:]:
            if not (args.target * 0.5 <= size <= args.target * 1.25):
                fail(f"{p}: output of {size} bytes is not near the target {args.target}", summary)
    # DuckDB, on the same files.
    con = duckdb.connect()
    con.execute("SET threads TO 2")

    def files_of(root):
        return [f for p in partitions(root) for f in data_files(os.path.join(root, TABLE, p))]

    o, n = files_of(args.orig), files_of(args.new)
    q = "read_parquet({}, hive_partitioning = false)"
    ol, nl = repr(o), repr(n)
    counts = con.execute(f"SELECT (SELECT count(*) FROM {q.format(ol)}), (SELECT count(*) FROM {q.format(nl)})").fetchone()
    diff1 = con.execute(
        f"SELECT count(*) FROM (SELECT * FROM {q.format(ol)} EXCEPT ALL SELECT * FROM {q.format(nl)})"
    ).fetchone()[0]
    diff2 = con.execute(
        f"SELECT count(*) FROM (SELECT * FROM {q.format(nl)} EXCEPT ALL SELECT * FROM {q.format(ol)})"
    ).fetchone()[0]
    summary["duckdb"] = {"rows_before": counts[0], "rows_after": counts[1], "only_before": diff1, "only_after": diff2}
    if counts[0] != counts[1] or diff1 or diff2:
        fail("DuckDB sees other rows after compaction", summary)
    cols_o = con.execute(f"DESCRIBE SELECT * FROM {q.format(ol)}").fetchall()
    cols_n = con.execute(f"DESCRIBE SELECT * FROM {q.format(nl)}").fetchall()
    if cols_o != cols_n:
        fail(f"DuckDB sees other columns: {cols_o} vs {cols_n}", summary)
    summary["schema"] = str(want_schema)
    print(json.dumps(summary))


def rows(args):
    out = {}
    for p in partitions(args.dir):
        d = os.path.join(args.dir, TABLE, p)
        fs = data_files(d)
        n = 0
        h = 0
        for f in fs:
            t = pq.read_table(f, columns=["id"])
            ids = t.column("id").to_pylist()
            n += len(ids)
            for i in ids:
                h = (h + int(hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest(), 16)) % (1 << 64)
        out[p] = [n, len(fs), h]
    print(json.dumps(out))


def s3fs(uri):
    from pyarrow import fs

    u = urllib.parse.urlparse(uri)
    q = urllib.parse.parse_qs(u.query)
    ep = urllib.parse.urlparse(q["endpoint"][0])
    s3 = fs.S3FileSystem(
        access_key=os.environ.get("AWS_ACCESS_KEY_ID", "x"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "x"),
        endpoint_override=ep.netloc,
        scheme=ep.scheme,
        region=q.get("region", ["us-east-1"])[0],
        allow_bucket_creation=False,
    )
    return s3, (u.netloc + u.path).rstrip("/")


def s3_put(args):
    from pyarrow import fs

    s3, base = s3fs(args.uri)
    fs.copy_files(args.dir, base, destination_filesystem=s3)


def s3_get(args):
    from pyarrow import fs

    s3, base = s3fs(args.uri)
    if os.path.exists(args.dir):
        shutil.rmtree(args.dir)
    fs.copy_files(base, args.dir, source_filesystem=s3)


def hdfs(uri):
    """pyarrow's filesystem API over hdfs-native's fsspec filesystem (a
    client written by others, no JVM) and the base path of `uri`."""
    from pyarrow import fs
    from hdfs_native.fsspec import HdfsFileSystem

    u = urllib.parse.urlparse(uri)
    h = HdfsFileSystem(host=u.hostname, port=u.port)
    return fs.PyFileSystem(fs.FSSpecHandler(h)), u.path.rstrip("/")


def hdfs_put(args):
    from pyarrow import fs

    h, base = hdfs(args.uri)
    fs.copy_files(args.dir, base, destination_filesystem=h)


def hdfs_get(args):
    """Copies what a reader of the table sees (no hidden `.`/`_` entries)."""
    from pyarrow import fs

    h, base = hdfs(args.uri)
    if os.path.exists(args.dir):
        shutil.rmtree(args.dir)
    for info in h.get_file_info(fs.FileSelector(base, recursive=True)):
        rel = info.path[len(base):].lstrip("/")
        # --delta: a Delta table's reader needs its log (`_delta_log/`, with
        # its `_last_checkpoint`) too.
        log = ("_delta_log", "_last_checkpoint")
        hidden = [p for p in rel.split("/") if p.startswith((".", "_")) and not (args.delta and p in log)]
        if info.type != fs.FileType.File or hidden:
            continue
        dest = os.path.join(args.dir, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with h.open_input_stream(info.path) as src, open(dest, "wb") as out:
            out.write(src.read())


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("dir")
    g.add_argument("--partitions", type=int, default=2)
    g.add_argument("--files", type=int, default=10)
    g.add_argument("--rows", type=int, default=1000)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--compression", default="snappy")
    c = sub.add_parser("check")
    c.add_argument("orig")
    c.add_argument("new")
    c.add_argument("--target", type=int, required=True)
    o = sub.add_parser("odd")
    o.add_argument("file")
    o.add_argument("--variant", choices=["type", "missing-required", "spark-legacy", "corrupt-page"], required=True)
    r = sub.add_parser("rows")
    r.add_argument("dir")
    p = sub.add_parser("s3-put")
    p.add_argument("dir")
    p.add_argument("uri")
    q = sub.add_parser("s3-get")
    q.add_argument("uri")
    q.add_argument("dir")
    hp = sub.add_parser("hdfs-put")
    hp.add_argument("dir")
    hp.add_argument("uri")
    hg = sub.add_parser("hdfs-get")
    hg.add_argument("uri")
    hg.add_argument("dir")
    hg.add_argument("--delta", action="store_true", help="keep _delta_log/ (a Delta table)")
    a = ap.parse_args()
    {
        "gen": gen,
        "odd": odd,
        "check": check,
        "rows": rows,
        "s3-put": s3_put,
        "s3-get": s3_get,
        "hdfs-put": hdfs_put,
        "hdfs-get": hdfs_get,
    }[a.cmd](a)


if __name__ == "__main__":
    main()
