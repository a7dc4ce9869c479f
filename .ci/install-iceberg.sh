#!/usr/bin/env bash
# Builds Java Iceberg's test tool (tests/support/iceberg: Iceberg's core,
# data and Parquet modules with Hadoop's client, from Maven Central), the
# writer and judge of tests/all/formats/iceberg.rs, with Maven, once: the classes and
# every runtime jar land in tests/support/iceberg/target/{classes,lib}, and
# the tests start it with a plain `java -cp` (no Maven at test time). Then
# Iceberg's REST catalog server (tests/support/iceberg-rest: its test
# fixtures' RESTCatalogServer, Jetty and SQLite; jars only, in
# tests/support/iceberg-rest/target/lib), the catalog of
# tests/all/formats/iceberg_rest.rs.
# Idempotent: does nothing when the build matches the sources. Needs Java 17
# and Maven with access to Maven Central (the first build downloads about
# 90 MB of jars into ~/.m2, most of them Hadoop's, shared with the HDFS
# launcher).
#
# Usage: bash .ci/install-iceberg.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$REPO/tests/support/iceberg"
STAMP="$DIR/target/.compactd-built"

say() { echo "install-iceberg: $*"; }

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "error: $tool not found; install a JDK (17) and Maven first (Debian: apt-get install openjdk-17-jdk-headless maven)" >&2
    exit 1
  fi
done

REST="$REPO/tests/support/iceberg-rest"
REST_STAMP="$REST/target/.compactd-built"
REST_WANT="$(sha256sum <"$REST/pom.xml" | cut -d' ' -f1)"
if [[ -f "$REST_STAMP" && "$(cat "$REST_STAMP")" == "$REST_WANT" && -d "$REST/target/lib" ]]; then
  say "REST catalog server already in $REST/target"
else
  start=$(date +%s)
  rm -rf "$REST/target"
  mvn -q -B -Dstyle.color=never -f "$REST/pom.xml" package 2>&1 | sed "s/\x1b\[[0-9;]*m//g"
  echo "$REST_WANT" >"$REST_STAMP"
  say "REST catalog server in $(( $(date +%s) - start ))s: $(ls "$REST/target/lib" | wc -l) jars, $(du -sh "$REST/target/lib" | cut -f1)"
fi

WANT="$(cat "$DIR/pom.xml" "$DIR"/src/main/java/compactd/*.java | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -d "$DIR/target/lib" && -d "$DIR/target/classes" ]]; then
  say "tool already built in $DIR/target; nothing to do"
  exit 0
fi

start=$(date +%s)
say "building the Java Iceberg tool with $(mvn -v -B -Dstyle.color=never 2>/dev/null | head -1 | sed "s/\x1b\[[0-9;]*m//g") and $(java -version 2>&1 | head -1)"
rm -rf "$DIR/target"
mvn -q -B -Dstyle.color=never -f "$DIR/pom.xml" package -DskipTests 2>&1 | sed "s/\x1b\[[0-9;]*m//g"
echo "$WANT" >"$STAMP"
say "built in $(( $(date +%s) - start ))s: $(ls "$DIR/target/lib" | wc -l) jars, $(du -sh "$DIR/target/lib" | cut -f1)"
