#!/usr/bin/env bash
# Installs the tools the Parquet and Delta tests and benchmarks check
# compactd's output with (pyarrow, DuckDB and deltalake: written by others,
# so they judge compactd's files independently) into $REPO/.venv-parquet.
# Idempotent: does nothing when the venv already holds the pinned versions.
# Needs python3 (>= 3.9) with the venv module and access to PyPI.
#
# Usage: bash .ci/install-parquet-tools.sh     (PYTHON=/path/to/python3 to choose the interpreter)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/.ci/lib.sh"
VENV="$(cached_dir .venv-parquet)"
PYTHON="${PYTHON:-python3}"

# Pinned so that a new release cannot change the judges under the tests.
# hdfs-native (with fsspec) is the Python client the HDFS tests read and
# write tables through: pyarrow over its fsspec filesystem, no JVM.
# deltalake (delta-rs) writes the Delta tables the delta executor compacts,
# runs the competing OPTIMIZE in bench/delta.py, and is one of the two
# readers tests/support/delta_tool.py checks compactd's commits with.
# pyiceberg (with its SQLite catalog) writes the Iceberg tables that
# compactd must refuse to change (tests/all/formats/table_formats.rs) and reads them
# back.
REQUIREMENTS=(
  "pyarrow==26.0.1"
  "duckdb==2.0.0"
  "hdfs-native==0.14.7"
  "fsspec==2026.9.0"
  "deltalake==1.6.6"
  "pyiceberg[sql-sqlite]==0.12.0"
)
STAMP="$VENV/.compactd-requirements"
WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"

say() { echo "install-parquet-tools: $*"; }

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] \
  && "$VENV/bin/python" -c 'import pyarrow.parquet, duckdb, hdfs_native.fsspec, deltalake, pyiceberg.catalog.sql' 2>/dev/null; then
  say "already installed in $VENV; nothing to do"
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  say "error: $PYTHON not found; install python3 (with the venv module) first" >&2
  exit 1
fi

start=$(date +%s)
rm -rf "$VENV"
say "creating venv $VENV with $("$PYTHON" --version 2>&1)"
if ! "$PYTHON" -m venv "$VENV"; then
  say "error: '$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
  rm -rf "$VENV"
  exit 1
fi
say "installing ${REQUIREMENTS[*]}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import pyarrow.parquet, duckdb, deltalake, pyiceberg.catalog.sql'
printf '%s\n' "$WANT" >"$STAMP"
say "installed pyarrow, duckdb, deltalake and pyiceberg in $VENV in $(( $(date +%s) - start ))s"
