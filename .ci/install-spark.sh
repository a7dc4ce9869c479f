#!/usr/bin/env bash
# Installs Spark with Delta Lake, the reference implementation of Delta and
# the engine most users read their tables with, as a judge of compactd's
# output (tests/all/formats/spark.rs through tests/support/spark_tool.py):
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
NAME=install-spark
source "$REPO/.ci/lib.sh"
VENV="$(cached_dir .venv-spark)"
IVY="$(cached_dir .spark-ivy)"
# Pinned so that a new release cannot change the judge under the tests.
REQUIREMENTS=("delta-spark==4.4.0" "pyspark==4.2.0")
IMPORTS="pyspark, delta"
IVY_EXTRA=
SMOKE="$REPO/tests/support/spark_tool.py"
WHAT="a Delta table"
install_spark_judge
