#!/usr/bin/env bash
# The Parquet compaction benchmark alone (bench/run.sh runs it too):
#   bash bench/parquet.sh
# Builds --release, installs pyarrow and DuckDB (.venv-parquet), runs
# bench/parquet.py on a generated table, then puts its figures into
# bench/results.json (replacing earlier Parquet figures) and re-renders
# bench/RESULTS.md. Knobs: BENCH_PARQUET_PARTITIONS=4 BENCH_PARQUET_FILES=100
# BENCH_PARQUET_ROWS=10000. Takes ~2 minutes on 2 cores after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/compactd-parquet-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cargo build --release --bin compactd 2>&1 | grep -Ev '^\s+(Compiling|Checking)' >&2 || true
bash .ci/install-parquet-tools.sh >&2
.venv-parquet/bin/python bench/parquet.py --binary target/release/compactd --base "$WORK" \
    --partitions "${BENCH_PARQUET_PARTITIONS:-4}" --files "${BENCH_PARQUET_FILES:-100}" \
    --rows "${BENCH_PARQUET_ROWS:-10000}" | tee "$WORK/parquet.txt"
python3 - "$WORK/parquet.txt" bench/results.json <<'PY'
import json, subprocess, sys
new = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
j = json.load(open(sys.argv[2]))
j["results"] = [r for r in j["results"] if r.get("part") not in ("parquet", "parquet_memory")] + new
sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
j["meta"]["parquet"] = {"date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "commit": sh("git rev-parse --short HEAD")}
json.dump(j, open(sys.argv[2], "w"), indent=2)
PY
python3 bench/report.py --from-json bench/results.json bench/results.json bench/RESULTS.md
echo "done: bench/RESULTS.md (Parquet compaction), bench/results.json" >&2
