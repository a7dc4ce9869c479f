#!/usr/bin/env python3
"""The I/O limit benchmark: how closely one `compactd run --io-limit RATE`
node holds its built-in executors to RATE (bytes read plus written per
second) over a sustained run of merges.

  python3 bench/io_limit.py --binary target/release/compactd [--limit 50MiB] [--seconds 30]

One node on fs, `--max-running 2` (two `merge` executors at once), merges a
newline-delimited table sized to keep it busy for longer than --seconds at
the limit (partitions of 32 files of 1 MiB, one output each). Its
`/metrics` (`compactd_io_limit_bytes_total`) is sampled every 0.25 s; the
achieved rate is the bytes granted over the first --seconds after the first
grant, and over every 1 s and 5 s window in it. A cross-check that does not
trust the limiter: the executors' own figures (`bytes_in + bytes_out` in
`status --json`) over the time from the first grant to the last. With
--compare the same node without the flag merges a smaller copy (to show
that the disk is faster than the limit, i.e. that the limit is what binds).

Prints `RESULT {json}` lines (part "io_limit") and a summary.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

MIB = 1 << 20
FILES = 32


def parse_size(s):
    for suffix, mul in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10), ("B", 1)):
        if s.endswith(suffix):
            return int(s[: -len(suffix)]) * mul
    return int(s)


def generate(data, partitions):
    """Partitions of FILES files of 1 MiB (64-byte lines)."""
    block = b"".join(b"%-63d\n" % i for i in range(MIB // 64))
    for p in range(partitions):
        d = os.path.join(data, "db/s/t", f"dt={p}")
        os.makedirs(d, exist_ok=True)
        for f in range(FILES):
            with open(os.path.join(d, f"part-{f:03d}"), "wb") as out:
                out.write(block)
    subprocess.run(["sync"])
    return partitions * FILES * MIB


def cli(binary, root, *args):
    return subprocess.run([binary, "--root", f"fs://{root}", *args], capture_output=True, text=True)


def counter(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def run(binary, base, name, partitions, limit):
    """Merges a fresh table on a fresh node; returns (samples, status,
    input bytes). `limit`: the --io-limit value, or None."""
    root, data = os.path.join(base, name, "root"), os.path.join(base, name, "data")
    os.makedirs(root)
    size = generate(data, partitions)
    args = [binary, "--root", f"fs://{root}", "run", "--node-id", "b1", "--data", f"fs://{data}",
            "--listen", "127.0.0.1:0", "--max-running", "2", "--target-size", "64MiB", "--heartbeat", "1s"]
    if limit:
        args += ["--io-limit", limit]
    node = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        addr = None
        for _ in range(300):
            st = cli(binary, root, "nodes", "--json")
            rows = json.loads(st.stdout) if st.returncode == 0 and st.stdout.strip() else []
            if rows and rows[0].get("alive") and rows[0].get("monitor") and rows[0].get("addr"):
                addr = rows[0]["addr"]
                break
            time.sleep(0.1)
        if addr is None:
            sys.exit(f"{name}: the node did not join")
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    body = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
                    samples.append((time.monotonic(), counter(body, "compactd_io_limit_bytes_total") or 0.0,
                                    counter(body, "compactd_io_limit_wait_seconds_total") or 0.0))
                except OSError:
                    pass
                time.sleep(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        sub = cli(binary, root, "submit", "--db", "db", "--schema", "s", "--table", "t", "--wait", "--json")
        took = time.monotonic() - started
        time.sleep(0.5)
        stop.set()
        sampler.join()
        if sub.returncode != 0:
            sys.exit(f"{name}: submit --wait failed: {sub.stderr}")
        status = json.loads(cli(binary, root, "status", json.loads(sub.stdout)["id"], "--json").stdout)
        return samples, status, size, took
    finally:
        node.terminate()
        node.wait(timeout=30)


def at(samples, t):
    """Bytes granted by time t (linear between samples)."""
    prev = samples[0]
    for s in samples:
        if s[0] >= t:
            if s[0] == prev[0]:
                return s[1]
            return prev[1] + (s[1] - prev[1]) * (t - prev[0]) / (s[0] - prev[0])
        prev = s
    return samples[-1][1]


def windows(samples, t0, span, width):
    rates, t = [], t0
    while t + width <= t0 + span + 1e-9:
        rates.append((at(samples, t + width) - at(samples, t)) / width)
        t += width
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/compactd")
    ap.add_argument("--limit", default="50MiB")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--base", default=None, help="work folder (default: a temp dir, removed after)")
    ap.add_argument("--compare", action="store_true", help="also merge a copy without the limit")
    a = ap.parse_args()
    rate = parse_size(a.limit)
    base = a.base or tempfile.mkdtemp(prefix="compactd-iolimit.")
    try:
        # Read + written = 2 × input; enough for the span and 20 % more.
        partitions = max(2, int(rate * a.seconds * 1.2 / 2 / (FILES * MIB)) + 1)
        samples, status, size, took = run(a.binary, base, "limited", partitions, a.limit)
        granted = [s for s in samples if s[1] > 0]
        if not granted:
            sys.exit("nothing was granted: is --io-limit in this binary?")
        t0 = granted[0][0]
        last = next(s[0] for s in samples if s[1] >= samples[-1][1])
        if last - t0 < a.seconds:
            print(f"warning: the merges took only {last - t0:.1f} s at the limit, less than {a.seconds} s",
                  file=sys.stderr)
        span = min(a.seconds, last - t0)
        achieved = (at(samples, t0 + span) - at(samples, t0)) / span
        per_1s, per_5s = windows(samples, t0, span, 1.0), windows(samples, t0, span, 5.0)
        st = status.get("stats", {})
        io = st.get("bytes_in", 0) + st.get("bytes_out", 0)
        cross = io / (last - t0) if last > t0 else 0.0
        r = {
            "part": "io_limit", "limit_bytes_per_s": rate, "span_s": round(span, 2),
            "achieved_bytes_per_s": round(achieved), "deviation_pct": round(100 * (achieved - rate) / rate, 2),
            "min_1s_bytes_per_s": round(min(per_1s)), "max_1s_bytes_per_s": round(max(per_1s)),
            "min_5s_bytes_per_s": round(min(per_5s)), "max_5s_bytes_per_s": round(max(per_5s)),
            "granted_bytes": samples[-1][1], "executor_bytes": io, "executor_rate_bytes_per_s": round(cross),
            "waited_s": round(samples[-1][2], 1), "task_s": round(took, 1), "input_bytes": size,
            "partitions": partitions, "state": status.get("state"),
        }
        print("RESULT " + json.dumps(r), flush=True)
        m = lambda b: f"{b / MIB:.1f} MiB/s"  # noqa: E731
        print(f"limit {m(rate)}: achieved {m(achieved)} over {span:.0f} s ({r['deviation_pct']:+.2f} %); "
              f"1 s windows {m(min(per_1s))} .. {m(max(per_1s))}; 5 s windows {m(min(per_5s))} .. {m(max(per_5s))}; "
              f"executors' own bytes {io / MIB:.0f} MiB over {last - t0:.1f} s = {m(cross)}; "
              f"task {status.get('state')} in {took:.1f} s")
        if a.compare:
            parts = max(2, partitions // 3)
            samples, status, size, took = run(a.binary, base, "unlimited", parts, None)
            st = status.get("stats", {})
            io = st.get("bytes_in", 0) + st.get("bytes_out", 0)
            r = {"part": "io_limit", "limit_bytes_per_s": None, "executor_bytes": io, "task_s": round(took, 2),
                 "task_rate_bytes_per_s": round(io / took), "granted_bytes": samples[-1][1] if samples else 0,
                 "state": status.get("state")}
            print("RESULT " + json.dumps(r), flush=True)
            print(f"without a limit: {io / MIB:.0f} MiB read+written, task {took:.1f} s (start-up included) = "
                  f"{m(io / took)}; granted {r['granted_bytes']:.0f} bytes")
    finally:
        if a.base is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
