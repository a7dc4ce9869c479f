#!/usr/bin/env python3
"""pyiceberg as a judge of the Iceberg tables compactd compacts
(tests/all/formats/iceberg.rs), from the Parquet judges' venv (.venv-parquet).

  iceberg_tool.py read TABLE [--key COL]
      TABLE is a table folder (read through version-hint.text, as
      StaticTable does), a vN.metadata.json, or the same as an hdfs:// URI
      (read through hdfs-native). Prints {"current", "hint", "snapshots":
      {id: {"rows", "digest", "keys"?, "operation", "parent", "files"}}}: every
      snapshot the metadata lists, scanned as of it; digest is the sha256 of
      the snapshot's rows as sorted JSON lines.
  iceberg_tool.py rest_read URI NS.T [--key COL]
      As read, for a table of the REST catalog at URI, loaded through it.
  iceberg_tool.py rest_make URI NS.T APPENDS ROWS PARTS
      Creates NS and NS.T (id long, s string, part string, partitioned by
      part; format version 2) through the REST catalog and appends APPENDS
      batches of ROWS rows (batch b: ids b*1000+i, part p<i % PARTS>), each
      one snapshot with one file per partition. Prints {"snapshots"}.
  iceberg_tool.py rest_append URI NS.T BATCH ROWS PARTS
      One more such append (batch BATCH). Prints {"snapshot"}.
  iceberg_tool.py s3_make TABLE APPENDS ROWS PARTS
      TABLE: s3://bucket/prefix/db/s/t?endpoint=…&region=… (the loopback
      server; credentials from the environment). The same appends as
      rest_make, written by pyiceberg (its SQL catalog, in memory) at that
      location, then made a file-system table: the current metadata as
      metadata/v1.metadata.json (its metadata-log dropped), the hint 1, the
      catalog's metadata files deleted. Prints {"snapshots"}. `read` takes
      such a URI too.
  iceberg_tool.py catalog_table ROOT LOCATION
      A table made by pyiceberg's SQL catalog (SQLite under ROOT): its
      metadata files are named NNNNN-<uuid>.metadata.json, as every
      catalog but the file system names them.
"""

import hashlib
import json
import sys
from urllib.parse import urlparse


from pyiceberg.io.fsspec import FsspecFileIO


class HdfsIO(FsspecFileIO):
    """pyiceberg's fsspec IO with hdfs:// read by hdfs-native (no libhdfs)."""

    def _get_fs(self, scheme, hostname=None):
        if scheme == "hdfs":
            from hdfs_native.fsspec import HdfsFileSystem

            return HdfsFileSystem(host=self.properties["hdfs.host"], port=int(self.properties["hdfs.port"]))
        return super()._get_fs(scheme, hostname)


def rows_json(table):
    out = []
    for r in table.to_pylist():
        out.append(json.dumps(r, sort_keys=True, default=str))
    out.sort()
    return out


def read(args):
    from pyiceberg.table import StaticTable

    loc = args[0]
    key = args[args.index("--key") + 1] if "--key" in args else None
    props = {}
    if loc.startswith("hdfs://"):
        u = urlparse(loc)
        props = {"py-io-impl": "__main__.HdfsIO", "hdfs.host": u.hostname, "hdfs.port": str(u.port)}
    if loc.startswith("s3://"):
        loc, props = s3_location(loc)
    scan_all(StaticTable.from_metadata(loc, properties=props), key)


def rest(uri):
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("rest", uri=uri)


def rest_read(args):
    key = args[args.index("--key") + 1] if "--key" in args else None
    scan_all(rest(args[0]).load_table(args[1]), key)


def batch_rows(b, rows, parts):
    import pyarrow as pa

    ids = [b * 1000 + i for i in range(rows)]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"value-{i:06d}-{b}" for i in range(rows)], pa.string()),
        "part": pa.array([f"p{i % parts}" for i in range(rows)], pa.string()),
    })


def s3_location(uri):
    """An s3:// URI with ?endpoint=…&region=… as (location, pyiceberg S3 properties)."""
    import os
    from urllib.parse import parse_qs

    base, _, query = uri.partition("?")
    q = {k: v[0] for k, v in parse_qs(query).items()}
    props = {
        "s3.endpoint": q["endpoint"],
        "s3.region": q.get("region", "us-east-1"),
        "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "s3.force-virtual-addressing": "false",
    }
    return base.rstrip("/"), props


def s3_make(args):
    from pyiceberg.catalog.sql import SqlCatalog

    location, props = s3_location(args[0])
    appends, rows, parts = int(args[1]), int(args[2]), int(args[3])
    cat = SqlCatalog("s3", uri="sqlite:///:memory:", warehouse=location.rsplit("/", 3)[0], **props)
    cat.create_namespace("s")
    t = cat.create_table("s.t", schema=table_schema(), partition_spec=table_spec(), location=location,
                         properties={"format-version": "2"})
    for b in range(appends):
        t.append(batch_rows(b, rows, parts))
    io = t.io
    meta = json.loads(io.new_input(t.metadata_location).open().read())
    meta["metadata-log"] = []
    with io.new_output(f"{location}/metadata/v1.metadata.json").create(overwrite=True) as f:
        f.write(json.dumps(meta).encode())
    with io.new_output(f"{location}/metadata/version-hint.text").create(overwrite=True) as f:
        f.write(b"1")
    for entry in t.metadata.metadata_log:
        io.delete(entry.metadata_file)
    io.delete(t.metadata_location)
    print(json.dumps({"snapshots": len(t.metadata.snapshots)}))


def table_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
        NestedField(3, "part", StringType(), required=False),
    )


def table_spec():
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    return PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="part"))


def rest_make(args):
    uri, name, appends, rows, parts = args[0], args[1], int(args[2]), int(args[3]), int(args[4])
    cat = rest(uri)
    cat.create_namespace_if_not_exists(name.split(".")[0])
    t = cat.create_table(name, schema=table_schema(), partition_spec=table_spec(), properties={"format-version": "2"})
    for b in range(appends):
        t.append(batch_rows(b, rows, parts))
    print(json.dumps({"snapshots": len(t.metadata.snapshots)}))


def rest_append(args):
    uri, name, b, rows, parts = args[0], args[1], int(args[2]), int(args[3]), int(args[4])
    t = rest(uri).load_table(name)
    t.append(batch_rows(b, rows, parts))
    print(json.dumps({"snapshot": t.metadata.current_snapshot_id}))


def scan_all(t, key):
    out = {"current": t.metadata.current_snapshot_id, "snapshots": {}}
    for s in t.metadata.snapshots:
        a = t.scan(snapshot_id=s.snapshot_id).to_arrow()
        lines = rows_json(a)
        entry = {
            "rows": a.num_rows,
            "digest": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
            "operation": s.summary.operation.value if s.summary else None,
            "parent": s.parent_snapshot_id,
            "files": sorted(task.file.file_path for task in t.scan(snapshot_id=s.snapshot_id).plan_files()),
        }
        if key:
            entry["keys"] = sorted(str(v) for v in a.column(key).to_pylist())
        out["snapshots"][str(s.snapshot_id)] = entry
    print(json.dumps(out))


def catalog_table(args):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    root, location = args
    cat = SqlCatalog("t", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    cat.create_namespace_if_not_exists("db")
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    t = cat.create_table("db.t", schema=data.schema, location=f"file://{location}")
    for i in range(3):
        t.append(data)
    print(json.dumps({"metadata": t.metadata_location}))


if __name__ == "__main__":
    commands = {"read": read, "rest_read": rest_read, "rest_make": rest_make, "rest_append": rest_append}
    commands["catalog_table"] = catalog_table
    commands["s3_make"] = s3_make
    commands[sys.argv[1]](sys.argv[2:])
