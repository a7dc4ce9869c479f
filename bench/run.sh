#!/usr/bin/env bash
# The benchmark suite of compactd, in one go (not part of the test suite):
#   bash bench/run.sh
# Builds --release, runs every part, writes bench/results.json and
# bench/RESULTS.md. See bench/README.md. Takes ~10-15 minutes on 2 cores.
#
# Environment knobs (defaults are what RESULTS.md is made with):
#   BENCH_SHARDS=2000 BENCH_LATENCY_SAMPLES=60 BENCH_MANAGER_SHARDS=10000
#   BENCH_SKIP_CELERY=0 BENCH_SKIP_UPGRADE=0 BENCH_SKIP_PARQUET=0 BENCH_SKIP_IOLIMIT=0 BENCH_SKIP_DELTA=0 BENCH_SKIP_HDFS=0 BENCH_SHORT_SESSION=1 (0: skip the extra
#   2,000-shard run with a 3 s session) BENCH_SKIP_TMPFS=0 (1: skip the tmpfs repeat of
#   limit, dispatch and Celery) BENCH_SKIP_PROOFS=0 (1: skip the scale proofs: the 1,000-node membership
#   simulation at 10/100/1,000 nodes, the sweep of 100,000 tasks, long chaos under kills and calm)
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
OUT=$REPO/bench
WORK=$(mktemp -d "${TMPDIR:-/tmp}/compactd-bench.XXXXXX")
LOG=$WORK/results.txt
trap 'rm -rf "$WORK"' EXIT
: >"$LOG"
START=$(date +%s)
say() { printf '\n== %s (%ss)\n' "$*" "$(($(date +%s) - START))" >&2; }

say "build (release)"
cargo build --release --bin compactd 2>&1 | grep -Ev '^\s+(Compiling|Checking)' >&2 || true
BIN=$REPO/target/release/compactd
# Build the bench binaries once and run them directly, so a concurrent edit
# of the sources cannot trigger a rebuild in the middle of the run.
exe() { grep -o '(target/[^)]*)' | tr -d '()' | tail -1; }
SUITE=$REPO/$(cargo bench --bench suite --no-run 2>&1 | tee /dev/stderr | exe)
UPGRADE=""
if [[ "${BENCH_SKIP_UPGRADE:-0}" != 1 ]]; then
    UPGRADE=$REPO/$(cargo bench -p compactd-migrate --bench upgrade --no-run 2>&1 | tee /dev/stderr | exe)
fi

say "backend limit (suite limit)"
"$SUITE" limit "$WORK" | tee -a "$LOG" || echo "limit failed" >&2

say "dispatch, latency, memory of real processes (bench/dispatch.py)"
DARGS=(--binary "$BIN" --base "$WORK" --shards "${BENCH_SHARDS:-2000}" --samples "${BENCH_LATENCY_SAMPLES:-60}"
    --manager-shards "${BENCH_MANAGER_SHARDS:-10000}")
[[ "${BENCH_SHORT_SESSION:-1}" == 1 ]] && DARGS+=(--short-session)
python3 bench/dispatch.py "${DARGS[@]}" | tee -a "$LOG" || echo "dispatch failed" >&2

if [[ "${BENCH_SKIP_CELERY:-0}" != 1 ]]; then
    say "Celery peer (throwaway venv)"
    if python3 -m venv "$WORK/venv" >&2 && "$WORK/venv/bin/pip" install -q 'celery==5.*' >&2; then
        "$WORK/venv/bin/python" bench/celery_peer.py --tasks "${BENCH_SHARDS:-2000}" --base "$WORK" | tee -a "$LOG" ||
            echo "Celery peer failed" >&2
    else
        echo "Celery could not be installed: reported as missing" >&2
    fi
fi

if [[ "${BENCH_SKIP_TMPFS:-0}" != 1 && -d /dev/shm && -w /dev/shm ]]; then
    SHM=$(mktemp -d /dev/shm/compactd-bench.XXXXXX)
    trap 'rm -rf "$WORK" "$SHM"' EXIT
    say "the same on tmpfs (no fsync cost): limit, dispatch, Celery"
    "$SUITE" limit "$SHM" | tee -a "$LOG" || echo "tmpfs limit failed" >&2
    python3 bench/dispatch.py --binary "$BIN" --base "$SHM" --shards "${BENCH_SHARDS:-2000}" --medium tmpfs \
        --throughput-only | tee -a "$LOG" || echo "tmpfs dispatch failed" >&2
    if [[ -x "$WORK/venv/bin/celery" ]]; then
        "$WORK/venv/bin/python" bench/celery_peer.py --tasks "${BENCH_SHARDS:-2000}" --base "$SHM" --medium tmpfs |
            tee -a "$LOG" || echo "tmpfs Celery peer failed" >&2
    fi
fi

if [[ "${BENCH_SKIP_HDFS:-0}" != 1 ]]; then
    say "HDFS beside fs: dispatch, NameNode RPCs per subtask, idle and per status page (bench/hdfs.py)"
    bash .ci/install-hdfs.sh >&2 || echo "HDFS launcher build failed" >&2
    python3 bench/hdfs.py --binary "$BIN" --base "$WORK" --shards "${BENCH_SHARDS:-2000}" --suite "$SUITE" | tee -a "$LOG" ||
        echo "HDFS bench failed" >&2
fi

say "cost (suite cost)"
(cd "$WORK" && "$SUITE" cost "$WORK") | tee -a "$LOG" || echo "cost failed" >&2

say "scale (suite scale)"
(cd "$WORK" && "$SUITE" scale "$WORK") | tee -a "$LOG" || echo "scale failed" >&2

: >"$WORK/upgrade.txt"
if [[ -n "$UPGRADE" ]]; then
    say "upgrade benchmark"
    [[ -x .venv-s3/bin/python ]] || bash .ci/install-s3-server.sh >&2 || echo "S3 server install failed" >&2
    (cd migrate && COMPACTD_BENCH_TASKS=${BENCH_UPGRADE_TASKS:-5000} "$UPGRADE" --bench) | tee "$WORK/upgrade.txt" || echo "upgrade failed" >&2
fi

if [[ "${BENCH_SKIP_PARQUET:-0}" != 1 ]]; then
    say "Parquet compaction vs pyarrow, DuckDB, byte copy (bench/parquet.py)"
    bash .ci/install-parquet-tools.sh >&2 || echo "pyarrow/DuckDB install failed" >&2
    .venv-parquet/bin/python bench/parquet.py --binary "$BIN" --base "$WORK" | tee -a "$LOG" ||
        echo "parquet bench failed" >&2
fi

if [[ "${BENCH_SKIP_DELTA:-0}" != 1 ]]; then
    say "Delta Lake compaction vs deltalake's optimize.compact (bench/delta.py)"
    bash .ci/install-parquet-tools.sh >&2 || echo "deltalake install failed" >&2
    .venv-parquet/bin/python bench/delta.py --binary "$BIN" --base "$WORK" | tee -a "$LOG" || echo "delta bench failed" >&2
fi

if [[ "${BENCH_SKIP_ICEBERG:-0}" != 1 ]]; then
    say "Iceberg compaction vs Spark's rewrite_data_files (bench/iceberg.py)"
    { bash .ci/install-spark-iceberg.sh && bash .ci/install-parquet-tools.sh; } >&2 || echo "Spark/Iceberg install failed" >&2
    python3 bench/iceberg.py --binary "$BIN" --base "$WORK" | tee -a "$LOG" || echo "iceberg bench failed" >&2
fi

if [[ "${BENCH_SKIP_IOLIMIT:-0}" != 1 ]]; then
    say "I/O limit held over 30 s of merges (bench/io_limit.py)"
    python3 bench/io_limit.py --binary "$BIN" --base "$WORK" --compare | tee -a "$LOG" || echo "io_limit bench failed" >&2
fi

if [[ "${BENCH_SKIP_PROOFS:-0}" != 1 ]]; then
    # The scale proofs, release builds of the tests that prove them;
    # each prints one `RESULT {json}` line.
    say "scale proofs: monitor requests per scan vs nodes, sweep of 100,000 tasks, long chaos vs calm"
    cargo test --release --features testing --test all --no-run >&2
    for n in 10 100 1000; do
        COMPACTD_SIM_NODES=$n cargo test -q --release --features testing --test all simulation::sim_scale:: -- --nocapture 2>/dev/null |
            grep '^RESULT ' | tee -a "$LOG" || echo "sim_scale $n failed" >&2
    done
    COMPACTD_SWEEP_TASKS=${BENCH_SWEEP_TASKS:-100000} cargo test -q --release --features testing \
        --test all task_regressions::a_sweep_over -- --nocapture 2>/dev/null | grep '^RESULT ' | tee -a "$LOG" ||
        echo "sweep sim failed" >&2
    for calm in 0 1; do
        COMPACTD_CHAOS_LONG=1 COMPACTD_CHAOS_CALM=$calm COMPACTD_CHAOS_SEED=${BENCH_CHAOS_SEED:-437550} \
            cargo test -q --release --features testing --test all simulation::chaos::fs_chaos -- --nocapture 2>/dev/null |
            grep '^RESULT ' | tee -a "$LOG" || echo "chaos (calm=$calm) failed" >&2
    done
fi

say "report"
TOTAL=$(($(date +%s) - START))
python3 - "$WORK/meta.json" "$TOTAL" <<'EOF'
import json, os, subprocess, sys
sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
mem = sh("free -g | awk '/^Mem:/{print $2}'")
tmp = os.environ.get("TMPDIR", "/tmp")
json.dump({
    "date": sh("date -u '+%Y-%m-%d %H:%M UTC'"), "nproc": sh("nproc"), "mem": f"{mem} GiB RAM (free -g)",
    "kernel": sh("uname -r"), "rustc": sh("rustc --version"), "python": sh("python3 --version"),
    "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
    "tmp": tmp, "tmpfs": sh(f"df -T {tmp} | awk 'NR==2{{print $2\" (\"$1\")\"}}'"),
    "total_seconds": int(sys.argv[2]), "commit": sh("git rev-parse --short HEAD"),
}, open(sys.argv[1], "w"))
EOF
python3 bench/report.py "$LOG" "$WORK/upgrade.txt" "$WORK/meta.json" "$OUT/results.json" "$OUT/RESULTS.md"
say "done: bench/RESULTS.md, bench/results.json"
