#!/usr/bin/env python3
"""What compactd's `delta` executor writes into a table, judged by deltalake
(delta-rs) and pyarrow from the venv .ci/install-parquet-tools.sh makes:
per-file statistics, checkpoints, and tables whose files differ in schema.
Local tables only. The partition column is `part` (one partition, 0).

  gen-typed    --table T --appends A --rows R
               A appends of R rows with integers, strings (some longer than
               Delta's 32-character prefix), dates, timestamps with and
               without a zone, decimals, booleans, doubles, a struct and a
               list; nulls throughout. Prints {"version", "rows"}.
  gen-evolving --table T
               Appends whose files differ as deltalake 1.6.6 makes them: a
               list column named `item` in the first file and `element`
               after, then a column added (schema_mode="merge"), then
               appends with it. Prints {"version", "rows", "columns"}.
  same         --table NEW --orig ORIG
               Every version of ORIG read by deltalake (all columns, sorted
               by id) equals NEW at that version; NEW's later versions equal
               ORIG's last. Prints {"versions", "rows"}.
  stats        --table T
               Each add compactd wrote (`compactd-*`) has statistics, which
               deltalake parses, that bound the file's rows (pyarrow) and
               agree with what deltalake itself writes for the same rows
               (integers, decimals, dates, null counts equal; strings cut to
               Delta's prefix; timestamps to the millisecond, rounded
               outwards; doubles and booleans absent). Then predicate queries
               through deltalake return the rows a full scan with the filter
               returns, and a selective one reads fewer files than the table
               has. Prints {"files", "predicates", "files_read", "files_total"}.
  cleanup      --table T
               The newest checkpoint must be compactd's; reads the table with
               deltalake, deletes the commits before that checkpoint (as
               Delta's log cleanup does), reads it again: the same version,
               rows, active files and statistics. Prints {"checkpoint",
               "deleted", "files", "rows"}.

Every command prints one JSON object on its last stdout line; on failure
{"error": ...} and exit status 1.
"""

import argparse
import datetime as d
import decimal
import json
import os
import re
import sys
import tempfile
import traceback

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, write_deltalake


class Fail(Exception):
    pass


UTC = d.timezone.utc
ST = pa.struct([("x", pa.int64()), ("y", pa.string())])


def typed(first, n):
    ids = list(range(first, first + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "part": pa.array([0] * n, pa.int64()),
        "i": pa.array([None if j % 7 == 0 else j % 1000 - 500 for j in ids], pa.int32()),
        "s": pa.array([None if j % 11 == 0 else f"{'name-' * (j % 9)}{j:08d}" for j in ids]),
        "dt": pa.array([d.date(2000, 1, 1) + d.timedelta(days=j) for j in ids], pa.date32()),
        "ts": pa.array([d.datetime(2020, 1, 1, tzinfo=UTC) + d.timedelta(seconds=j, microseconds=j * 37 % 10**6)
                        for j in ids], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([d.datetime(2020, 1, 1) + d.timedelta(minutes=j, microseconds=j * 13 % 10**6) for j in ids],
                        pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(j * 7 - 3000) / 100 for j in ids], pa.decimal128(12, 2)),
        "b": pa.array([j % 3 == 0 for j in ids]),
        "f": pa.array([j / 3 for j in ids], pa.float64()),
        "st": pa.array([None if j % 13 == 0 else {"x": j, "y": f"y{j % 50}"} for j in ids], ST),
        "l": pa.array([[j, j + 1] for j in ids], pa.list_(pa.int64())),
    })


def gen_typed(a):
    for k in range(a.appends):
        write_deltalake(a.table, typed(k * a.rows, a.rows), mode="append", partition_by=["part"])
    dt = DeltaTable(a.table)
    return {"version": dt.version(), "rows": a.appends * a.rows}


def gen_evolving(a):
    rows = 0
    for k in range(8):
        ids = list(range(k * 50, k * 50 + 50))
        cols = {"id": pa.array(ids, pa.int64()), "part": pa.array([0] * 50, pa.int64()),
                "l": pa.array([[j, None] if j % 5 else None for j in ids], pa.list_(pa.int32())),
                "s": pa.array([f"v{j}" for j in ids])}
        mode = {}
        if k >= 4:  # a column added from the fifth append on
            cols["added"] = pa.array([None if j % 3 else j * 10 for j in ids], pa.int64())
            mode = {"schema_mode": "merge"}
        write_deltalake(a.table, pa.table(cols), mode="append", partition_by=["part"], **mode)
        rows += 50
    dt = DeltaTable(a.table)
    names = set()
    for f in dt.file_uris():
        names.add(pq.ParquetFile(f).schema_arrow.field("l").type.value_field.name)
    if names != {"item", "element"}:
        raise Fail(f"deltalake wrote list children named {sorted(names)}: this test needs both item and element")
    return {"version": dt.version(), "rows": rows, "columns": [f.name for f in dt.schema().fields]}


def rows_at(table, version=None):
    """(DeltaTable, every row as a dict, by id) as deltalake's engine reads them."""
    dt = DeltaTable(table, version=version)
    t = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t ORDER BY id").read_all())
    return dt, t.to_pylist()


def same(a):
    last = DeltaTable(a.orig).version()
    latest = DeltaTable(a.table).version()
    n = 0
    for v in range(latest + 1):
        _, want = rows_at(a.orig, min(v, last))
        _, got = rows_at(a.table, v)
        if got != want:
            diff = [(x, y) for x, y in zip(got, want) if x != y][:3]
            raise Fail(f"version {v}: rows differ from the original's ({len(got)} vs {len(want)}): {diff}")
        n = len(got)
    return {"versions": latest + 1, "rows": n}


def ours(dt):
    return [r for r in pa.table(dt.get_add_actions(flatten=True)).to_pylist() if "compactd-" in r["path"]]


def deltalakes_stats(rows):
    """deltalake's own statistics of one file holding `rows`."""
    with tempfile.TemporaryDirectory() as tmp:
        write_deltalake(tmp, rows, mode="append")
        (r,) = pa.table(DeltaTable(tmp).get_add_actions(flatten=True)).to_pylist()
        return r


def ms_floor(t):
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def check_column(path, col, mine, theirs, values):
    lo, hi = mine.get(f"min.{col}"), mine.get(f"max.{col}")
    kind = col.split(".")[-1]
    present = [v for v in values if v is not None]
    if mine.get(f"null_count.{col}") != theirs.get(f"null_count.{col}"):
        raise Fail(f"{path}: null_count.{col} {mine.get(f'null_count.{col}')}, deltalake says "
                   f"{theirs.get(f'null_count.{col}')}")
    if kind in ("f", "b"):
        if lo is not None or hi is not None:
            raise Fail(f"{path}: {col} has bounds, which compactd must omit (doubles, booleans)")
        return
    if not present:
        return
    if lo is None or hi is None:
        raise Fail(f"{path}: no bounds for {col}")
    if not (lo <= min(present) and hi >= max(present)):
        raise Fail(f"{path}: {col} bounds [{lo!r}, {hi!r}] do not hold its values [{min(present)!r}, {max(present)!r}]")
    tlo, thi = theirs.get(f"min.{col}"), theirs.get(f"max.{col}")
    if kind in ("ts", "ntz"):
        # deltalake cuts both to the millisecond; compactd rounds the max up.
        if lo != ms_floor(tlo) or not (ms_floor(thi) <= hi <= ms_floor(thi) + d.timedelta(milliseconds=1)):
            raise Fail(f"{path}: {col} [{lo}, {hi}] vs deltalake's [{tlo}, {thi}]")
    elif kind == "s":
        if lo != min(present)[:32] or not (hi == max(present) or (len(max(present)) > 32 and hi[:32] == max(present)[:32])):
            raise Fail(f"{path}: {col} [{lo!r}, {hi!r}] is not Delta's 32-character cut of [{min(present)!r}, "
                       f"{max(present)!r}]")
    elif (lo, hi) != (tlo, thi):
        raise Fail(f"{path}: {col} [{lo!r}, {hi!r}] vs deltalake's [{tlo!r}, {thi!r}]")


PREDICATES = [
    ("id < 100", lambda r: r["id"] < 100),
    ("id >= 2300", lambda r: r["id"] >= 2300),
    ("i = -500", lambda r: r["i"] == -500),
    ("s = 'name-00000010'", lambda r: r["s"] == "name-00000010"),
    ("s > 'name-name-name-name-name-name-name'", lambda r: r["s"] is not None and r["s"] > "name-name-name-name-name-name-name"),
    ("dt = '2000-01-05'", lambda r: r["dt"] == d.date(2000, 1, 5)),
    ("ts < '2020-01-01T00:01:00.001Z'", lambda r: r["ts"] < d.datetime(2020, 1, 1, 0, 1, 0, 1000, tzinfo=UTC)),
    ("ts > '2020-01-01T00:39:00Z'", lambda r: r["ts"] > d.datetime(2020, 1, 1, 0, 39, tzinfo=UTC)),
    ("ntz <= '2020-01-01 01:00:00.013'", lambda r: r["ntz"] <= d.datetime(2020, 1, 1, 1, 0, 0, 13000)),
    ("dec > 150", lambda r: r["dec"] > 150),
    ("st.x = 5", lambda r: r["st"] is not None and r["st"]["x"] == 5),
    ("i IS NULL", lambda r: r["i"] is None),
]


def stats(a):
    dt = DeltaTable(a.table)
    adds = ours(dt)
    if not adds:
        raise Fail("no file of compactd's is active")
    for r in adds:
        if r["num_records"] is None:
            raise Fail(f"{r['path']}: no numRecords")
        data = pq.read_table(os.path.join(a.table, r["path"]))
        theirs = deltalakes_stats(data)
        by_col = {}
        for name in data.column_names:
            if name in ("l",):
                if r.get(f"null_count.{name}") is not None:
                    raise Fail(f"{r['path']}: a null count for list column {name}")
                continue
            if name == "st":
                for sub in ("x", "y"):
                    by_col[f"st.{sub}"] = [None if v is None else v[sub] for v in data.column("st").to_pylist()]
            else:
                by_col[name] = data.column(name).to_pylist()
        for col, values in by_col.items():
            check_column(r["path"], col, r, theirs, values)
    # The whole table, read without statistics: every active file whole.
    everything = []
    for uri in dt.file_uris():
        everything.extend(pq.read_table(uri).to_pylist())
    q = QueryBuilder().register("t", dt)
    for sql, keep in PREDICATES:
        got = sorted(pa.table(q.execute(f"SELECT id FROM t WHERE {sql}").read_all()).column("id").to_pylist())
        want = sorted(row["id"] for row in everything if keep(row))
        if got != want:
            raise Fail(f"WHERE {sql}: deltalake returns {len(got)} rows, a full scan {len(want)}: "
                       f"{sorted(set(got) ^ set(want))[:10]}")
    plan = pa.table(q.execute("EXPLAIN ANALYZE SELECT id FROM t WHERE id < 100").read_all()).to_pylist()
    text = " ".join(str(p["plan"]) for p in plan)
    read = len(set(re.findall(r"compactd-[^,\]\s]+\.parquet", text)))
    total = len(dt.file_uris())
    if not 0 < read < total:
        raise Fail(f"WHERE id < 100 read {read} of {total} files: statistics did not skip any: {text[:2000]}")
    return {"files": len(adds), "predicates": len(PREDICATES), "files_read": read, "files_total": total}


def snapshot(table):
    dt, rows = rows_at(table)
    adds = sorted(pa.table(dt.get_add_actions(flatten=True)).to_pylist(), key=lambda r: r["path"])
    return dt.version(), rows, adds


def cleanup(a):
    log = os.path.join(a.table, "_delta_log")
    cps = sorted(int(n.split(".")[0]) for n in os.listdir(log) if n.endswith(".checkpoint.parquet"))
    if not cps:
        raise Fail("no checkpoint in the log")
    cp = cps[-1]
    made_by = pq.ParquetFile(os.path.join(log, f"{cp:020d}.checkpoint.parquet")).metadata.created_by
    if not made_by.startswith("compactd version"):
        raise Fail(f"checkpoint {cp} was written by {made_by!r}, not compactd")
    last = json.load(open(os.path.join(log, "_last_checkpoint")))
    if last.get("version") != cp:
        raise Fail(f"_last_checkpoint says {last}, the newest checkpoint is {cp}")
    before = snapshot(a.table)
    deleted = 0
    for v in range(cp):
        os.remove(os.path.join(log, f"{v:020d}.json"))
        deleted += 1
    after = snapshot(a.table)
    for what, x, y in zip(("version", "rows", "add actions"), before, after):
        if x != y:
            raise Fail(f"after the commits before checkpoint {cp} were deleted, deltalake reads other {what}")
    return {"checkpoint": cp, "deleted": deleted, "files": len(after[2]), "rows": len(after[1])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cmds = {"gen-typed": gen_typed, "gen-evolving": gen_evolving, "same": same, "stats": stats, "cleanup": cleanup}
    p = {name: sub.add_parser(name) for name in cmds}
    for q in p.values():
        q.add_argument("--table", required=True)
    p["gen-typed"].add_argument("--appends", type=int, default=12)
    p["gen-typed"].add_argument("--rows", type=int, default=200)
    p["same"].add_argument("--orig", required=True)
    a = ap.parse_args()
    code = 0
    try:
        out = cmds[a.cmd](a)
    except Exception as e:
        if not isinstance(e, Fail):
            traceback.print_exc()
        msg = str(e) if isinstance(e, Fail) else f"{type(e).__name__}: {e}"
        print(f"delta_data {a.cmd}: error: {msg}", file=sys.stderr)
        out, code = {"error": msg}, 1
    print(json.dumps(out))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip teardown: delta-rs's native threads can abort it


if __name__ == "__main__":
    main()
