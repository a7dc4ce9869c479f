#!/usr/bin/env bash
# Installs Spark with Apache Iceberg's Spark runtime, the engine whose
# maintenance procedures (expire_snapshots, rewrite_manifests,
# remove_orphan_files) run on the tables compactd compacted, and whose
# rewrite_data_files the bench holds compactd against
# (tests/iceberg_spark.rs, bench/iceberg.py, through
# tests/support/spark_iceberg_tool.py):
# - $REPO/.venv-spark-iceberg: pyspark 4.1.4. Not the Delta judge's 4.2:
#   Iceberg 1.12.0 ships its Spark runtime for Spark 4.1 and none for 4.2.
# - $REPO/.spark-iceberg-ivy: the Ivy cache holding
#   org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0, resolved as
#   .ci/install-spark.sh resolves the Delta jars (.ci/spark-ivysettings.xml:
#   Maven Central only), so that the tests download nothing at run time.
# The last step starts one session the way the tests do, creates, appends
# to and reads an Iceberg table, and prints how long the session took.
# Idempotent: does nothing when both are in place at the pinned versions.
# Needs python3 (>= 3.10) with the venv module, Java 17, access to PyPI and
# Maven Central.
#
# Usage: bash .ci/install-spark-iceberg.sh   (PYTHON=/path/to/python3 to choose the interpreter)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv-spark-iceberg"
IVY="$REPO/.spark-iceberg-ivy"
PYTHON="${PYTHON:-python3}"

# Pinned so that a new release cannot change the judge under the tests;
# the runtime's coordinates are in tests/support/spark_iceberg_tool.py.
REQUIREMENTS=("pyspark==4.1.4")
VENV_STAMP="$VENV/.compactd-requirements"
VENV_WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"
IVY_STAMP="$IVY/.compactd-resolved"
ivy_want() {
  cat "$REPO/.ci/spark-ivysettings.xml" "$VENV_STAMP" <(grep -h '^RUNTIME = ' "$REPO/tests/support/spark_iceberg_tool.py") \
    | sha256sum | cut -d' ' -f1
}

say() { echo "install-spark-iceberg: $*"; }

venv_ok() {
  [[ -x "$VENV/bin/python" && -f "$VENV_STAMP" && "$(cat "$VENV_STAMP")" == "$VENV_WANT" ]] \
    && "$VENV/bin/python" -c 'import pyspark' 2>/dev/null
}

if venv_ok && [[ -f "$IVY_STAMP" && "$(cat "$IVY_STAMP")" == "$(ivy_want)" && -d "$IVY/jars" ]]; then
  say "already installed in $VENV and $IVY; nothing to do"
  exit 0
fi

if ! command -v java >/dev/null 2>&1; then
  say "error: java not found; install a JDK 17 first (Debian: apt-get install openjdk-17-jdk-headless)" >&2
  exit 1
fi

start=$(date +%s)
if ! venv_ok; then
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "error: $PYTHON not found; install python3 (with the venv module) first" >&2
    exit 1
  fi
  rm -rf "$VENV"
  say "creating venv $VENV with $("$PYTHON" --version 2>&1)"
  if ! "$PYTHON" -m venv "$VENV"; then
    say "error: '$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
  say "installing ${REQUIREMENTS[*]}"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-cache-dir "${REQUIREMENTS[@]}"
  "$VENV/bin/python" -c 'import pyspark'
  printf '%s\n' "$VENV_WANT" >"$VENV_STAMP"
  say "venv made in $(( $(date +%s) - start ))s"
fi

rm -rf "$IVY"
mkdir -p "$IVY"
say "resolving Iceberg's Spark runtime into $IVY and starting a session as the tests do"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && "$VENV/bin/python" "$REPO/tests/support/spark_iceberg_tool.py" --smoke "$work/wh" 2>"$work/log"); then
  tail -n 40 "$work/log" >&2
  say "error: Spark could not start or round-trip an Iceberg table (log above)" >&2
  exit 1
fi
ivy_want >"$IVY_STAMP"
say "installed in $(( $(date +%s) - start ))s: $(ls "$IVY/jars" | wc -l) jars in $IVY/jars"
