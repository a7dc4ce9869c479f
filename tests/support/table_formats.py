"""Tables of formats compactd must never change, written by their own tools
where one runs here (deltalake for Delta Lake, pyiceberg for Iceberg) and as
they lie on disk otherwise (Hudi copy-on-write, Hive ACID, a Spark streaming
sink, Paimon, Databricks transactional writes, DuckLake), plus a plain
Hive-style Parquet table the text merge must refuse.

    table_formats.py make --root DIR     writes them under DIR/db/<schema>/<table>
    table_formats.py sums --root DIR     {relative path: sha256} of every file
    table_formats.py read --root DIR     rows each reader sees (deltalake, pyiceberg)

Every table has two partitions of several small files, so that any executor
that did not refuse it would find work. The last line of output is JSON.
"""

import argparse
import hashlib
import json
import os
import sys
import uuid

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

ROWS = 5
APPENDS = 8


def batch(i, part):
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{x}" for x in ids], "part": [part] * ROWS})


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def make_delta(root):
    from deltalake import write_deltalake

    t = f"{root}/db/delta/orders"
    for i in range(APPENDS):
        write_deltalake(t, batch(i, "ab"[i % 2]), mode="append", partition_by=["part"])
    return t


def make_iceberg(root):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    cat = SqlCatalog("t", uri=f"sqlite:///{root}/../iceberg-catalog.db", warehouse=f"file://{root}")
    cat.create_namespace_if_not_exists("iceberg")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "v", StringType(), required=False),
        NestedField(3, "part", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="part"))
    location = f"{root}/db/iceberg/orders"
    table = cat.create_table("iceberg.orders", schema=schema, partition_spec=spec, location=f"file://{location}")
    for i in range(APPENDS):
        table.append(batch(i, "ab"[i % 2]))
    return location


def make_hudi(root):
    """A copy-on-write table as Hudi 0.x lays it out: `.hoodie/` with its
    properties and timeline, `.hoodie_partition_metadata` in each partition,
    base files named <fileId>_<writeToken>_<instant>.parquet carrying Hudi's
    meta columns."""
    t = f"{root}/db/hudi/orders"
    instants = [f"2026112600000{i}000" for i in range(4)]
    write(
        f"{t}/.hoodie/hoodie.properties",
        "hoodie.table.name=orders\nhoodie.table.type=COPY_ON_WRITE\nhoodie.table.version=6\n"
        "hoodie.table.recordkey.fields=id\nhoodie.table.partition.fields=part\n"
        "hoodie.table.base.file.format=PARQUET\nhoodie.timeline.layout.version=1\n",
    )
    for n, instant in enumerate(instants):
        for part in "ab":
            file_id = str(uuid.UUID(int=n * 2 + (part == "b")))
            b = batch(n * 2 + (part == "b"), part)
            meta = {
                "_hoodie_commit_time": [instant] * ROWS,
                "_hoodie_commit_seqno": [f"{instant}_0_{k}" for k in range(ROWS)],
                "_hoodie_record_key": [str(x) for x in b["id"].to_pylist()],
                "_hoodie_partition_path": [f"part={part}"] * ROWS,
                "_hoodie_file_name": [f"{file_id}-0_0-1-1_{instant}.parquet"] * ROWS,
            }
            for k, v in meta.items():
                b = b.append_column(k, pa.array(v))
            os.makedirs(f"{t}/part={part}", exist_ok=True)
            pq.write_table(b, f"{t}/part={part}/{file_id}-0_0-1-1_{instant}.parquet")
        write(f"{t}/.hoodie/{instant}.commit.requested", "")
        write(f"{t}/.hoodie/{instant}.inflight", "{}")
        write(f"{t}/.hoodie/{instant}.commit", json.dumps({"operationType": "INSERT", "partitionToWriteStats": {}}))
    for part in "ab":
        write(
            f"{t}/part={part}/.hoodie_partition_metadata",
            f"#partition metadata\ncommitTime={instants[0]}\npartitionDepth=1\n",
        )
    return t


def make_hive_acid(root):
    """Full-ACID ORC tables: an unpartitioned one (its transaction folders
    at the table's root, where a folder listing takes them for partitions)
    and a partitioned one."""
    out = []
    for t, prefix in [(f"{root}/db/hive_acid/orders", ""), (f"{root}/db/hive_acid/events", "p=1/")]:
        for w in range(1, 5):
            d = f"{t}/{prefix}delta_{w:07d}_{w:07d}_0000"
            os.makedirs(d, exist_ok=True)
            for bucket in range(2):
                orc.write_table(batch(w * 2 + bucket, "x"), f"{d}/bucket_{bucket:05d}")
            write(f"{d}/_orc_acid_version", "2")
        out.append(t)
    return out


def make_spark_sink(root):
    """A Spark Structured Streaming file sink: JSON files (exactly what the
    text merge concatenates) whose readers read only what `_spark_metadata`
    lists."""
    t = f"{root}/db/sink/clicks"
    files = []
    for i in range(APPENDS):
        part = "ab"[i % 2]
        name = f"part={part}/part-{i:05d}-{uuid.UUID(int=i)}.c000.json"
        write(f"{t}/{name}", "".join(json.dumps({"id": x}) + "\n" for x in range(i * ROWS, (i + 1) * ROWS)))
        files.append(name)
    for batch_id, name in enumerate(files):
        entry = {"path": f"file://{t}/{name}", "size": os.path.getsize(f"{t}/{name}"), "isDir": False,
                 "modificationTime": 0, "blockReplication": 1, "blockSize": 33554432, "action": "add"}
        write(f"{t}/_spark_metadata/{batch_id}", "v1\n" + json.dumps(entry) + "\n")
    return t


def make_paimon(root):
    t = f"{root}/db/paimon/orders"
    write(f"{t}/snapshot/LATEST", "4")
    write(f"{t}/snapshot/EARLIEST", "1")
    write(f"{t}/schema/schema-0", json.dumps({"id": 0, "fields": []}))
    for i in range(APPENDS):
        d = f"{t}/part={'ab'[i % 2]}/bucket-0"
        os.makedirs(d, exist_ok=True)
        orc.write_table(batch(i, "x"), f"{d}/data-{uuid.UUID(int=i)}-0.orc")
    return t


def make_dbio(root):
    """Databricks transactional writes: readers take a file as committed by
    the `_committed_<txn>` markers."""
    t = f"{root}/db/dbio/orders"
    for part in "ab":
        names = []
        for i in range(4):
            name = f"part-0000{i}-tid-8573512382734-{uuid.UUID(int=i)}-c000.json"
            write(f"{t}/part={part}/{name}", json.dumps({"id": i}) + "\n")
            names.append(name)
        write(f"{t}/part={part}/_started_8573512382734", "")
        write(f"{t}/part={part}/_committed_8573512382734", json.dumps({"added": names, "removed": []}))
    return t


def make_ducklake(root):
    t = f"{root}/db/ducklake/orders"
    for i in range(APPENDS):
        d = f"{t}/part={'ab'[i % 2]}"
        os.makedirs(d, exist_ok=True)
        pq.write_table(batch(i, "x"), f"{d}/ducklake-{uuid.UUID(int=i)}.parquet")
    return t


def make_plain_parquet(root):
    """A plain Hive-style Parquet table: the parquet executor's, which the
    text merge would concatenate into files no reader opens."""
    t = f"{root}/db/plain/parquet"
    for i in range(APPENDS):
        d = f"{t}/part={'ab'[i % 2]}"
        os.makedirs(d, exist_ok=True)
        pq.write_table(batch(i, "x"), f"{d}/part-{i:05d}.parquet")
    return t


def make(root):
    tables = {
        "delta": make_delta(root),
        "iceberg": make_iceberg(root),
        "hudi": make_hudi(root),
        "spark-streaming-sink": make_spark_sink(root),
        "paimon": make_paimon(root),
        "databricks-transactional": make_dbio(root),
        "ducklake": make_ducklake(root),
        "plain-parquet": make_plain_parquet(root),
    }
    acid, acid_partitioned = make_hive_acid(root)
    tables["hive-acid"] = acid
    tables["hive-acid-partitioned"] = acid_partitioned
    return {k: os.path.relpath(v, root) for k, v in tables.items()}


def sums(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def read(root):
    from deltalake import DeltaTable
    from pyiceberg.catalog.sql import SqlCatalog

    delta = DeltaTable(f"{root}/db/delta/orders")
    q = delta.to_pyarrow_dataset().to_table()
    cat = SqlCatalog("t", uri=f"sqlite:///{root}/../iceberg-catalog.db", warehouse=f"file://{root}")
    ice = cat.load_table("iceberg.orders").scan().to_arrow()
    return {"delta_rows": q.num_rows, "iceberg_rows": ice.num_rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["make", "sums", "read"])
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    try:
        out = {"make": make, "sums": sums, "read": read}[a.command](root)
    except Exception as e:  # the test prints it
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
