#!/usr/bin/env python3
"""Delta Lake tables for the tests of compactd's `delta` executor, written and
judged by code nobody here wrote: deltalake (delta-rs) and pyarrow, from the
venv .ci/install-parquet-tools.sh makes (.venv-parquet/bin/python).

  gen     --table URI --appends A --partitions P --rows R [--seed S] [--start-id K]
          A appends (one commit and one file each) of R rows; append i goes to
          partition i % P; ids K, K+1, ... Prints {"version", "rows", "files"}.
  check   --table URI [--min-version N] [--rows-at all|key]
          The judge: every version from N to the latest is read twice, by
          deltalake (time travel) and by a log replay here (pyarrow only), and
          both must hold the same unique ids; OPTIMIZE commits must keep the
          ids of the version before and change no data. --rows-at key: the
          rows only at key versions (much faster on S3). Prints {"version",
          "rows", "files", "unique", "optimize_versions", "versions_checked",
          "files_by_version", "rows_rewritten"}.
  writer  --table URI --appends N --start-id K --ids-out FILE [--partitions P]
          N commits of 10 rows each; a line {"version", "ids"} per commit.
  reader  --table URI --stop-file FILE --out FILE2
          Reads every version until FILE exists: no id twice, none lost.
  expect  --table URI --ids-file FILE [--ids-file ...] --gen-rows N
          The latest version holds ids 0..N-1 and FILE's ids, each once.
  bulk    --table PATH --bytes N [--partitions P]
          Commits one version of `add` actions, as a bulk load (CONVERT TO
          DELTA of a big table) writes, until the commit is N bytes: 128 MiB
          files with stats as delta-rs writes them, spread over P partitions
          (1000, 1001, …),
          that are NOT on disk (never read: over any target size, compaction
          leaves them be; they make a log that is large to replay). Local
          tables only. Prints {"version", "bytes", "adds"}.
  vacuum-dry --table URI
          deltalake's VACUUM with a zero retention, the check off, as a dry
          run: prints {"version", "files", "named_missing"}: the files it would
          delete that exist, and how many it named that do not (tombstones).
  files   --table PATH [--parts P]
          deltalake's own replay: the active files, and for partitions 0..P-1
          the number of files and the rows they hold. Prints {"version",
          "files", "part_files": [...], "rows": [...]}.

Every command prints one JSON object on its last stdout line; on failure that
object is {"error": ...}, the message also goes to stderr, and the exit
status is 1. URI: a local path, or s3://bucket/prefix[?endpoint=URL&region=R]
(else AWS_ENDPOINT_URL / AWS_REGION) with AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY from the environment. The partition column is `part`.
"""

import argparse
import collections
import json
import os
import random
import sys
import time
import traceback
import urllib.parse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.int64()), ("payload", pa.string()), ("value", pa.float64())])
ID_PART = pa.schema([("id", pa.int64()), ("part", pa.int64())])


class Fail(Exception):
    """A verdict or a usage error: reported as {"error": ..., **out}."""

    def __init__(self, msg, out=None):
        super().__init__(msg)
        self.out = out or {}


class Table:
    """One table as deltalake opens it (URI + storage options) and as the
    replay here reads it (a pyarrow filesystem: its own S3 client)."""

    def __init__(self, uri):
        u = urllib.parse.urlparse(uri)
        if u.scheme == "s3":
            # deltalake reads AWS_* from the environment as well: a lock table
            # or unsafe rename there would change how commits are made.
            for bad in ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME", "DELTA_DYNAMO_TABLE_NAME"):
                if os.environ.get(bad):
                    raise Fail(f"{bad} is set: commits must use conditional put (If-None-Match), unset it")
            q = urllib.parse.parse_qs(u.query)
            endpoint = q.get("endpoint", [os.environ.get("AWS_ENDPOINT_URL", "")])[0]
            region = q.get("region", [os.environ.get("AWS_REGION", "us-east-1")])[0]
            key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
            if not key or not secret:
                raise Fail("s3:// tables need AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
            self.uri = f"s3://{u.netloc}{u.path}".rstrip("/")
            self.root = (u.netloc + u.path).rstrip("/")
            # conditional_put=etag is delta-rs 1.x's default; named so that a
            # changed default cannot silently weaken commits ("disabled"
            # makes every commit fail rather than fall back to a rename).
            self.options = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": region,
                            "conditional_put": "etag"}
            ep = urllib.parse.urlparse(endpoint) if endpoint else None
            if ep:
                self.options["AWS_ENDPOINT_URL"] = endpoint
                if ep.scheme == "http":
                    self.options["AWS_ALLOW_HTTP"] = "true"
            self.fs = pafs.S3FileSystem(access_key=key, secret_key=secret, region=region,
                                        endpoint_override=ep.netloc if ep else None,
                                        scheme=ep.scheme if ep else "https", allow_bucket_creation=False)
        elif u.scheme in ("", "file"):
            self.root = self.uri = os.path.abspath(u.path if u.scheme else uri)
            self.options, self.fs = None, pafs.LocalFileSystem()
        else:
            raise Fail(f"unsupported table URI {uri!r}: a local path or s3://bucket/prefix")
        self.log = self.root + "/_delta_log"

    def dt(self, version=None):
        return DeltaTable(self.uri, version=version, storage_options=self.options)

    def read(self, path):
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def log_files(self):
        sel = pafs.FileSelector(self.log, allow_not_found=True)
        return [i.base_name for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File]

    def commit(self, v):
        """Actions of version v, or None when its commit file does not exist."""
        try:
            text = self.read(f"{self.log}/{v:020d}.json").decode()
        except FileNotFoundError:
            return None
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as e:
            raise Fail(f"version {v}: commit file is not JSON lines: {e}")

    def data_path(self, add_path):
        # add.path is a URI reference: relative (percent-encoded) or absolute.
        u = urllib.parse.urlparse(add_path)
        if u.scheme == "s3":
            return urllib.parse.unquote(u.netloc + u.path)
        if u.scheme == "file":
            return urllib.parse.unquote(u.path)
        return self.root + "/" + urllib.parse.unquote(add_path)

    def find_txn(self, app, txn, first):
        """The version >= first whose commit carries txn (app, txn), else None.
        Read from the log itself: the truth when a commit's answer was lost."""
        v = first
        while (actions := self.commit(v)) is not None:
            if any(a.get("txn", {}).get("appId") == app and a["txn"].get("version") == txn for a in actions):
                return v
            v += 1
        return None


def deltalake_rows(t, version=None, dt=None):
    """(DeltaTable, table of id and part) as delta-rs reads them with its own
    engine (DataFusion via QueryBuilder): no parquet code shared with the
    replay, and unlike to_pyarrow_table() it does not make the interpreter
    abort at exit ("terminate called without an active exception")."""
    dt = dt if dt is not None else t.dt(version)
    rows = pa.table(QueryBuilder().register("t", dt).execute("SELECT id, part FROM t").read_all())
    return dt, rows.cast(ID_PART)


def duplicates(ids):
    counts = pc.value_counts(ids)
    return sorted(counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist())


class Replay:
    """The table state version by version from the log alone: add minus
    remove, the files read with pyarrow (each once), `part` taken from the
    add's partitionValues as the protocol says (files do not store it)."""

    def __init__(self, t):
        self.t, self.active, self.files = t, {}, {}

    def apply(self, v, actions, optimize=False):
        removed = []
        for a in actions:
            if "add" in a:
                # The protocol lets a commit add an active path again (its
                # metadata replaces the old): delta-rs does so when the reply
                # to its commit was lost and it commits once more. A compaction
                # must only add new files.
                if a["add"]["path"] in self.active and optimize:
                    raise Fail(f"version {v} (OPTIMIZE) adds {a['add']['path']}, which is already active")
                self.files.pop(a["add"]["path"], None)
                self.active[a["add"]["path"]] = a["add"].get("partitionValues") or {}
            elif "remove" in a:
                if self.active.pop(a["remove"]["path"], None) is None:
                    raise Fail(f"version {v} removes {a['remove']['path']}, which is not active")
                removed.append(a["remove"]["path"])
        return removed

    def load_checkpoint(self, v, parts):
        """The active files (adds) of checkpoint v: what the replayed state
        must be at v (or the state to start from when early commits are gone)."""
        state = {}
        for name in parts:
            adds = pq.read_table(f"{self.t.log}/{name}", filesystem=self.t.fs, columns=["add"]).column("add")
            for r in adds.to_pylist():
                if r:
                    state[r["path"]] = dict(r["partitionValues"] or [])
        return state

    def file(self, path):
        if path not in self.files:
            try:
                ids = pq.read_table(self.t.data_path(path), filesystem=self.t.fs, columns=["id"]).column("id")
            except Exception as e:
                raise Fail(f"active file {path}: cannot read it with pyarrow: {e}")
            pv = self.active[path].get("part")
            part = pa.array([None if pv is None else int(pv)] * len(ids), pa.int64())
            self.files[path] = pa.table({"id": ids.cast(pa.int64()), "part": part})
        return self.files[path]

    def rows(self):
        tables = [self.file(p) for p in sorted(self.active)]
        return pa.concat_tables(tables) if tables else pa.table({"id": [], "part": []}, schema=ID_PART)


def checkpoints(t):
    """{version: [file names]} of every checkpoint in the log (single or
    multi-part), and the version _last_checkpoint names (None without)."""
    found = collections.defaultdict(list)
    for name in t.log_files():
        bits = name.split(".")
        if len(bits) >= 3 and bits[1] == "checkpoint" and bits[-1] == "parquet" and bits[0].isdigit():
            found[int(bits[0])].append(name)
    last = None
    try:
        last = json.loads(t.read(t.log + "/_last_checkpoint"))["version"]
    except FileNotFoundError:
        pass
    if last is not None and last not in found:
        raise Fail(f"_last_checkpoint names version {last}, whose checkpoint is not in the log")
    return {v: sorted(n) for v, n in found.items()}, last


def sorted_pairs(rows):
    return rows.sort_by([("id", "ascending"), ("part", "ascending")])


def diff(x, y, xname, yname):
    cx, cy = (collections.Counter(zip(*t.to_pydict().values())) for t in (x, y))
    return (f"(id, part) only in the {xname} {sorted(cx - cy)[:10]}, only in the {yname} {sorted(cy - cx)[:10]} "
            f"({x.num_rows} vs {y.num_rows} rows)")


def check(a):
    t = Table(a.table)
    dt = t.dt()
    latest = dt.version()
    cps, last_cp = checkpoints(t)
    replay, start, from_cp = Replay(t), 0, None
    if t.commit(0) is None:  # early commits cleaned up: start from a checkpoint
        usable = [c for c in cps if t.commit(c + 1) is not None or c == latest]
        if not usable:
            raise Fail("commit 0 is gone and no checkpoint is followed by the log")
        start = from_cp = min(usable)
        replay.active = replay.load_checkpoint(start, cps[start])
        if a.min_version < start:
            raise Fail(f"the log before version {start} is gone: use --min-version {start} or more")
    history = {h["version"]: h.get("operation") for h in dt.history()}
    prev, files_by_version, rewritten, walker = None, {}, 0, None
    for v in range(start, latest + 1):
        actions = t.commit(v)
        if actions is None and v != from_cp:
            raise Fail(f"deltalake says the latest version is {latest} but commit {v} is missing")
        actions = actions or []
        info = next((x["commitInfo"] for x in actions if "commitInfo" in x), {})
        optimize = info.get("operation") == "OPTIMIZE"
        removed = replay.apply(v, actions, optimize) if v != from_cp else []  # a checkpoint includes its version
        if v in cps and v != from_cp:
            cp = replay.load_checkpoint(v, cps[v])
            if cp != replay.active:
                raise Fail(f"checkpoint {v} differs from the replayed log: only in it "
                           f"{sorted(set(cp) - set(replay.active))[:5]}, only in the log "
                           f"{sorted(set(replay.active) - set(cp))[:5]}")
        if v < a.min_version - 1:
            continue
        if v in history and history[v] != info.get("operation"):
            raise Fail(f"version {v}: history() says {history[v]!r}, the commit file says {info.get('operation')!r}")
        mine = sorted_pairs(replay.rows())
        if optimize:
            changes = [x[k] for x in actions for k in ("add", "remove") if k in x]
            if any(c.get("dataChange", True) for c in changes):
                raise Fail(f"version {v} (OPTIMIZE): an add or remove has dataChange true")
            if prev is not None and not mine.equals(prev):
                raise Fail(f"version {v} (OPTIMIZE) changed the rows of version {v - 1}: "
                           f"{diff(prev, mine, 'before', 'after')}")
            rewritten += sum(replay.files[p].num_rows for p in removed if p in replay.files)
        prev = mine
        if v < a.min_version:
            continue
        dup = duplicates(mine.column("id"))
        if dup:
            raise Fail(f"version {v}: ids more than once: {dup[:20]} ({len(dup)} in all)")
        # deltalake's own replay of version v: opened from scratch (time
        # travel), or for --rows-at key between key versions, one table moved
        # forward (far fewer requests: each open lists and reads the log).
        key = v in (a.min_version, latest) or v in cps or "OPTIMIZE" in (history.get(v), history.get(v + 1))
        if a.rows_at == "all" or key or walker is None:
            vdt = walker = t.dt(v)
        else:
            walker.load_as_version(v)
            vdt = walker
        adds = {r["path"]: r for r in pa.table(vdt.get_add_actions(flatten=True)).to_pylist()}
        if set(adds) != set(replay.active):
            raise Fail(f"version {v}: active files only in the replay {sorted(set(replay.active) - set(adds))[:5]}, "
                       f"only in deltalake {sorted(set(adds) - set(replay.active))[:5]}")
        for path, r in adds.items():
            pv = replay.active[path].get("part")
            if r.get("partition.part") != (None if pv is None else int(pv)) or r.get("num_records") not in (
                    None, replay.files[path].num_rows):
                raise Fail(f"version {v}: {path}: deltalake says part={r.get('partition.part')} and "
                           f"{r.get('num_records')} rows, the replay part={pv} and {replay.files[path].num_rows} rows")
        if a.rows_at == "all" or key:
            theirs = sorted_pairs(deltalake_rows(t, dt=vdt)[1])
            if not theirs.equals(mine):
                raise Fail(f"version {v}: the log replay and deltalake disagree: "
                           f"{diff(mine, theirs, 'replay', 'deltalake')}")
        files_by_version[str(v)] = len(replay.active)
    # The optimize versions as deltalake's history reports them (checked above
    # against the commit files for every version it lists).
    optimize_versions = sorted(v for v, op in history.items() if op == "OPTIMIZE" and v >= a.min_version)
    return {"version": latest, "rows": prev.num_rows if prev is not None else 0, "files": len(dt.file_uris()),
            "unique": True, "optimize_versions": optimize_versions, "versions_checked": len(files_by_version),
            "files_by_version": files_by_version, "rows_rewritten": rewritten,
            "checkpoints": sorted(cps), "last_checkpoint": last_cp}


def batch(first_id, n, part, rng):
    return pa.table({"id": range(first_id, first_id + n), "part": [part] * n,
                     "payload": [f"{rng.getrandbits(48):012x}{'-' * rng.randrange(12)}" for _ in range(n)],
                     "value": [rng.random() * 1000 for _ in range(n)]}, schema=SCHEMA)


def gen(a):
    t = Table(a.table)
    rng = random.Random(a.seed * 1_000_003 + a.start_id)
    target = t.uri
    for i in range(a.appends):
        data = batch(a.start_id + i * a.rows, a.rows, i % a.partitions, rng)
        write_deltalake(target, data, mode="append", partition_by=["part"], storage_options=t.options)
        if isinstance(target, str):
            target = t.dt()  # then commit on the same snapshot: no log reload per append
    dt, rows = deltalake_rows(t)
    return {"version": dt.version(), "rows": rows.num_rows, "files": len(dt.file_uris())}


def writer(a):
    t = Table(a.table)
    app = f"delta_tool-writer-{a.start_id}"  # Delta's txn (idempotency) id for this writer
    dt = t.dt()  # kept across commits: delta-rs then reads only the commits since, not the whole log
    floor = dt.version() + 1  # our commits can only land after this
    rng = random.Random(a.start_id)
    with open(a.ids_out, "a") as out:
        for j in range(a.appends):
            ids = list(range(a.start_id + 10 * j, a.start_id + 10 * j + 10))
            data = batch(ids[0], 10, j % a.partitions, rng)
            props = CommitProperties(app_transactions=[Transaction(app, j)])
            for attempt in range(1, 41):
                try:
                    if dt is None:
                        dt = t.dt()
                    else:  # catch up first: delta-rs gives up after 15 conflicting versions
                        dt.update_incremental()
                    write_deltalake(dt, data, mode="append", partition_by=["part"], commit_properties=props)
                    v = t.find_txn(app, j, floor)
                    if v is None:
                        raise Fail(f"append {j}: deltalake reported success but no commit carries txn ({app}, {j})")
                    break
                except (DeltaError, OSError) as e:
                    # Lost? Or landed with its answer lost? The log decides,
                    # so that a retry never writes the same rows twice.
                    dt, v = None, t.find_txn(app, j, floor)
                    if v is not None:
                        break
                    print(f"delta_tool writer: append {j} attempt {attempt}: {type(e).__name__}: {e}", file=sys.stderr)
                    time.sleep(min(0.02 * attempt, 0.5))
            else:
                raise Fail(f"append {j}: no commit after 40 attempts")
            out.write(json.dumps({"version": v, "ids": ids}) + "\n")
            out.flush()
            floor = v + 1
    return {"appends": a.appends, "last_version": floor - 1}


def reader(a):
    t = Table(a.table)
    seen, prev, dups, missing = -1, None, [], []
    while True:
        stop = os.path.exists(a.stop_file)  # before reading: the last pass sees all commits made before it
        try:
            latest = t.dt().version()
        except TableNotFoundError:
            latest = -1
        for v in range(seen + 1, latest + 1):
            for attempt in range(5):  # a transient storage error is not a verdict
                try:
                    ids = deltalake_rows(t, v)[1].column("id")
                    break
                except (DeltaError, OSError):
                    if attempt == 4:
                        raise
                    time.sleep(0.2)
            dup = duplicates(ids)
            if dup:
                dups.append({"version": v, "ids": dup[:20]})
            cur = set(ids.to_pylist())
            if prev is not None and not cur >= prev:
                missing.append({"version": v, "ids": sorted(prev - cur)[:20]})
            prev, seen = cur, v
        if stop:
            break
        time.sleep(0.05)
    out = {"versions_read": seen + 1, "duplicates": dups, "missing": missing}
    with open(a.out, "w") as f:
        json.dump(out, f)
    if dups or missing:
        raise Fail(f"ids duplicated or lost in {len(dups) + len(missing)} versions: see {a.out}", out)
    return out


def expect(a):
    t = Table(a.table)
    written = [i for f in a.ids_file for line in open(f) if line.strip() for i in json.loads(line)["ids"]]
    want = collections.Counter(range(a.gen_rows)) + collections.Counter(written)
    if any(c > 1 for c in want.values()):
        raise Fail("the ids files repeat an id or overlap the generated ids: the writers misbehaved")
    dt, rows = deltalake_rows(t)
    got = collections.Counter(rows.column("id").to_pylist())
    dup = sorted(i for i, c in got.items() if c > 1)
    lost, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if dup or lost or extra:
        raise Fail(f"version {dt.version()}: ids twice {dup[:20]} ({len(dup)}), missing {lost[:20]} ({len(lost)}), "
                   f"unexpected {extra[:20]} ({len(extra)})")
    return {"version": dt.version(), "rows": rows.num_rows, "expected": len(want), "ok": True}


def bulk(a):
    t = Table(a.table)
    v = t.dt().version() + 1
    rng = random.Random(v)
    now = int(time.time() * 1000)
    lines = [json.dumps({"commitInfo": {"timestamp": now, "operation": "CONVERT", "operationParameters": {},
                                        "clientVersion": "delta_tool-bulk"}})]
    size, adds = len(lines[0]) + 1, 0
    while size < a.bytes:
        part = 1000 + adds % a.partitions  # partitions of their own: gen's are 0..P-1
        lo = rng.randrange(1 << 40)
        stats = {"numRecords": 4_000_000, "minValues": {"id": lo, "payload": f"{lo:012x}", "value": rng.random()},
                 "maxValues": {"id": lo + 3_999_999, "payload": f"{lo + 3_999_999:012x}-----", "value": 999.9},
                 "nullCount": {"id": 0, "payload": 0, "value": 0}}
        line = json.dumps({"add": {
            "path": f"part={part}/part-{adds:05d}-{rng.getrandbits(128):032x}-c000.snappy.parquet",
            "partitionValues": {"part": str(part)}, "size": 128 << 20, "modificationTime": now, "dataChange": True,
            "stats": json.dumps(stats), "tags": None, "deletionVector": None, "baseRowId": None,
            "defaultRowCommitVersion": None, "clusteringProvider": None}})
        lines.append(line)
        size += len(line) + 1
        adds += 1
    path = os.path.join(a.table, "_delta_log", f"{v:020}.json")
    with open(path, "x") as f:
        f.write("\n".join(lines) + "\n")
    return {"version": v, "bytes": os.path.getsize(path), "adds": adds}


def files(a):
    t = Table(a.table)
    dt = t.dt()
    out = {"version": dt.version(), "files": len(dt.file_uris())}
    out["part_files"], out["rows"] = [], []
    for part in range(a.parts):
        uris = [u for u in dt.file_uris() if f"/part={part}/" in u]
        out["part_files"].append(len(uris))
        out["rows"].append(sum(pq.ParquetFile(u.removeprefix("file://")).metadata.num_rows for u in uris))
    return out


def vacuum_dry(a):
    # deltalake's own VACUUM, retention check off, deleting nothing: the
    # files it would delete.
    dt = Table(a.table).dt()
    # full: every file the listing holds that no retained version reads, not
    # only the log's tombstones (its default, "lite", mode).
    would = dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
    # It names the tombstones the log still holds whether their files exist
    # or not: only those on the backend are left to delete.
    t = Table(a.table)
    there = [p for p in would if t.fs.get_file_info(t.data_path(p)).type != pafs.FileType.NotFound]
    return {"version": dt.version(), "files": sorted(there), "named_missing": len(would) - len(there)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cmds = {"gen": gen, "check": check, "writer": writer, "reader": reader, "expect": expect, "bulk": bulk,
            "files": files, "vacuum-dry": vacuum_dry}
    p = {name: sub.add_parser(name) for name in cmds}
    for q in p.values():
        q.add_argument("--table", required=True)
    for name, flag, kw in [
        ("gen", "--appends", dict(type=int, default=50)), ("gen", "--partitions", dict(type=int, default=5)),
        ("gen", "--rows", dict(type=int, default=200)), ("gen", "--seed", dict(type=int, default=1)),
        ("gen", "--start-id", dict(type=int, default=0)),
        ("check", "--min-version", dict(type=int, default=0)),
        ("check", "--rows-at", dict(choices=["all", "key"], default="all", help=(
            "versions deltalake reads every row of; key: the first, the last, checkpoints, OPTIMIZE commits and the "
            "versions before them (active files and row counts are compared at every version)"))),
        ("writer", "--appends", dict(type=int, default=100)), ("writer", "--start-id", dict(type=int, required=True)),
        ("writer", "--ids-out", dict(required=True)), ("writer", "--partitions", dict(type=int, default=5)),
        ("reader", "--stop-file", dict(required=True)), ("reader", "--out", dict(required=True)),
        ("expect", "--ids-file", dict(action="append", required=True)),
        ("expect", "--gen-rows", dict(type=int, required=True)),
        ("bulk", "--bytes", dict(type=int, required=True)), ("bulk", "--partitions", dict(type=int, default=5)),
        ("files", "--parts", dict(type=int, default=0)),
    ]:
        p[name].add_argument(flag, **kw)
    a = ap.parse_args()
    code = 0
    try:
        out = cmds[a.cmd](a)
    except Exception as e:
        if not isinstance(e, Fail):
            traceback.print_exc()
        msg = f"{type(e).__name__}: {e}" if not isinstance(e, Fail) else str(e)
        print(f"delta_tool {a.cmd}: error: {msg}", file=sys.stderr)
        out, code = {"error": msg, **getattr(e, "out", {})}, 1
    print(json.dumps(out))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: pyarrow's and delta-rs's native threads can
    # abort it (delta-rs #2184), which would turn a verdict into exit 134.
    os._exit(code)


if __name__ == "__main__":
    main()
