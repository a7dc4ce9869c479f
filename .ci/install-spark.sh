#!/usr/bin/env bash
# Installs Spark with Delta Lake, the reference implementation of Delta and
# the engine most users read their tables with, as a judge of compactd's
# output (tests/spark.rs through tests/support/spark_tool.py):
# - $REPO/.venv-spark: delta-spark 4.4.0, which brings pyspark 4.2.0 (its
#   own Spark jars; Java 17 runs them). Not 4.4.1: its wheel asks for
#   io.delta:delta-spark_4.2_2.13:4.4.1, which Maven Central does not serve.
# - $REPO/.spark-ivy: the Ivy cache holding the Delta jars delta-spark's
#   configure_spark_with_delta_pip names for pyspark 4.2
#   (io.delta:delta-spark_4.2_2.13:4.4.0) and their dependencies, resolved
#   here through .ci/spark-ivysettings.xml (Maven Central only), so that the
#   tests resolve from this cache and download nothing at run time.
# The last step starts one Spark session the way the tests do, writes and
# reads a small Delta table, and prints how long the session took to start.
# Idempotent: does nothing when both are in place at the pinned versions.
# Needs python3 (>= 3.10) with the venv module, Java 17, access to PyPI and
# Maven Central.
#
# Usage: bash .ci/install-spark.sh     (PYTHON=/path/to/python3 to choose the interpreter)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv-spark"
IVY="$REPO/.spark-ivy"
PYTHON="${PYTHON:-python3}"

# Pinned so that a new release cannot change the judge under the tests.
REQUIREMENTS=("delta-spark==4.4.0" "pyspark==4.2.0")
VENV_STAMP="$VENV/.compactd-requirements"
VENV_WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"
IVY_STAMP="$IVY/.compactd-resolved"
# What the cache was resolved for: the Ivy settings and the venv's pins.
ivy_want() { cat "$REPO/.ci/spark-ivysettings.xml" "$VENV_STAMP" | sha256sum | cut -d' ' -f1; }

say() { echo "install-spark: $*"; }

venv_ok() {
  [[ -x "$VENV/bin/python" && -f "$VENV_STAMP" && "$(cat "$VENV_STAMP")" == "$VENV_WANT" ]] \
    && "$VENV/bin/python" -c 'import pyspark, delta' 2>/dev/null
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
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${REQUIREMENTS[@]}"
  "$VENV/bin/python" -c 'import pyspark, delta'
  printf '%s\n' "$VENV_WANT" >"$VENV_STAMP"
  say "venv made in $(( $(date +%s) - start ))s"
fi

rm -rf "$IVY"
mkdir -p "$IVY"
say "resolving the Delta jars into $IVY and starting a session as the tests do"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && "$VENV/bin/python" "$REPO/tests/support/spark_tool.py" --smoke "$work/t" 2>"$work/log"); then
  tail -n 40 "$work/log" >&2
  say "error: Spark could not start or round-trip a Delta table (log above)" >&2
  exit 1
fi
ivy_want >"$IVY_STAMP"
say "installed in $(( $(date +%s) - start ))s: $(ls "$IVY/jars" | wc -l) jars in $IVY/jars"
