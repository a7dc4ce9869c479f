#!/usr/bin/env bash
# Installs Spark with Apache Iceberg's Spark runtime, the engine whose
# maintenance procedures (expire_snapshots, rewrite_manifests,
# remove_orphan_files) run on the tables compactd compacted, and whose
# rewrite_data_files the bench holds compactd against
# (tests/all/formats/iceberg_spark.rs, bench/iceberg.py, through
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
NAME=install-spark-iceberg
source "$REPO/.ci/lib.sh"
VENV="$(cached_dir .venv-spark-iceberg)"
IVY="$(cached_dir .spark-iceberg-ivy)"
# Pinned so that a new release cannot change the judge under the tests;
# the runtime's coordinates are in tests/support/spark_iceberg_tool.py
# (its RUNTIME line is what the cache was resolved for).
REQUIREMENTS=("pyspark==4.1.4")
IMPORTS="pyspark"
IVY_EXTRA="$(grep -h '^RUNTIME = ' "$REPO/tests/support/spark_iceberg_tool.py")"
SMOKE="$REPO/tests/support/spark_iceberg_tool.py"
WHAT="an Iceberg table"
install_spark_judge
