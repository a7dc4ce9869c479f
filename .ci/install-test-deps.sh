#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine, once (each step is
# idempotent and quick when already done): the loopback S3 server's venv
# (moto), the Parquet judges' venv (pyarrow, DuckDB, hdfs-native), Spark
# with Delta Lake (the Delta and Parquet judge of tests/all/formats/spark.rs), Spark with
# Iceberg's runtime (tests/all/formats/iceberg_spark.rs), the HDFS
# launcher (Hadoop's MiniDFSCluster, built with Maven; needs Java 17), Java
# Iceberg's test tool (tests/all/formats/iceberg.rs, built with Maven), and
# Debian's chromium and jq (the status page's browser test, the examples
# of README.md and docs/), nftables and faketime (the network-fault tests' cuts and
# skewed clocks), krb5-user (kinit for the Kerberos HDFS test; it brings
# the GSSAPI library hdfs-native loads), cargo-deb, dpkg-dev and man-db
# (the Debian package's build and install test). README.md's test block is this
# script and the test command; .ci/run calls it too.
#
# The venvs and Ivy caches are kept by version in
# ${COMPACTD_CI_CACHE:-~/.cache/compactd-ci} and linked into the clone
# (.ci/lib.sh, cached_dir): a fresh clone on a machine that ran this once
# installs nothing again. The cache is locked while the installers run.
#
# Usage: bash .ci/install-test-deps.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
source .ci/lib.sh
if [[ $(ci_cache_root) != off ]]; then
    mkdir -p "$(ci_cache_root)"
    exec 9>"$(ci_cache_root)/.lock"
    flock -n 9 || { echo "== install: waiting for the install cache's lock ($(ci_cache_root)/.lock)"; flock 9; }
fi

echo "== install: loopback S3 server (moto) for the S3 tests ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-s3-server.sh

echo "== install: pyarrow and DuckDB, which judge the Parquet executor's output (tests/all/formats/parquet.rs) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-parquet-tools.sh

echo "== install: Spark with Delta Lake, the reference reader and writer that judges compactd's output (tests/all/formats/spark.rs) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-spark.sh

echo "== install: Spark with Iceberg's runtime, whose maintenance procedures run on tables compactd compacted (tests/all/formats/iceberg_spark.rs) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-spark-iceberg.sh

echo "== install: the real HDFS the HDFS tests start (Hadoop's MiniDFSCluster launcher, built with Maven) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-hdfs.sh

echo "== install: Java Iceberg, the reference writer and judge of the iceberg executor (tests/all/formats/iceberg.rs, built with Maven) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-iceberg.sh

echo "== install: cargo-deb, which builds the Debian package (.ci/build-deb.sh, tests/all/ops/deb.rs) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
bash .ci/install-cargo-deb.sh

echo "== install: Debian's chromium (tests/all/ops/daemon.rs), jq (the examples of README.md and docs/, tests/all/ops/readme.rs), nftables and faketime (tests/all/backends/netfaults.rs), krb5-user (tests/process_env/hdfs_kerberos.rs), dpkg-dev and man-db (tests/all/ops/deb.rs), GNU time (tests/all/hostile/hostile_user.rs) ($(date -u +%H:%M:%S), ${SECONDS}s in)"
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v kinit >/dev/null 2>&1 || missing+=(krb5-user)
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v man >/dev/null 2>&1 || missing+=(man-db)
[[ -x /usr/bin/time ]] || missing+=(time)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "install-test-deps: need ${missing[*]}: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
chromium --version
jq --version
nft --version
command -v faketime
command -v kinit
