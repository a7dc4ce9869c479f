#!/usr/bin/env bash
# The I/O limit benchmark alone (bench/run.sh runs it too):
#   bash bench/io_limit.sh
# Builds --release, runs bench/io_limit.py (a node with --io-limit merging
# for 30 s, then the same without the limit), puts its figures into
# bench/results.json (replacing earlier I/O limit figures) and re-renders
# bench/RESULTS.md. Knobs: BENCH_IO_LIMIT=50MiB BENCH_IO_SECONDS=30
# BENCH_BINARY (default target/release/compactd, built here; a debug binary
# is taken as given). Takes ~1 minute after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/compactd-iolimit-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
BIN=${BENCH_BINARY:-target/release/compactd}
if [[ -z "${BENCH_BINARY:-}" ]]; then
    cargo build --release --bin compactd 2>&1 | grep -Ev '^\s+(Compiling|Checking)' >&2 || true
fi
python3 bench/io_limit.py --binary "$BIN" --base "$WORK" --limit "${BENCH_IO_LIMIT:-50MiB}" \
    --seconds "${BENCH_IO_SECONDS:-30}" --compare | tee "$WORK/io_limit.txt"
python3 - "$WORK/io_limit.txt" bench/results.json "$BIN" "${BENCH_IO_LIMIT:-50MiB}" "${BENCH_IO_SECONDS:-30}" <<'PY'
import json, subprocess, sys
new = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
j = json.load(open(sys.argv[2]))
j["results"] = [r for r in j["results"] if r.get("part") != "io_limit"] + new
sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
j["meta"]["io_limit"] = {
    "date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "commit": sh("git rev-parse --short HEAD"),
    "binary": "debug" if "/debug/" in sys.argv[3] else "release",
    "command": f"python3 bench/io_limit.py --binary {sys.argv[3]} --limit {sys.argv[4]} --seconds {sys.argv[5]} --compare",
}
json.dump(j, open(sys.argv[2], "w"), indent=2)
PY
python3 bench/report.py --from-json bench/results.json bench/results.json bench/RESULTS.md
echo "done: bench/RESULTS.md (I/O limit), bench/results.json" >&2
