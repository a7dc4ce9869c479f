#!/usr/bin/env bash
# Builds the Debian package of compactd with cargo-deb (the tool made for
# it, from crates.io): target/debian/compactd_<version>-1_<arch>.deb, holding
# /usr/bin/compactd, the systemd unit (contrib/compactd.service, installed
# disabled), /etc/compactd/compactd.toml (a conffile), the man page and the
# bash, zsh and fish completions (both made by the binary itself), and the
# README. Installs cargo-deb first if it is missing (.ci/install-cargo-deb.sh).
#
#   bash .ci/build-deb.sh                 # cargo build --release, then package
#   COMPACTD_DEB_BINARY=path COMPACTD_DEB_OUT=dir bash .ci/build-deb.sh
#                                         # package that binary (tests/all/ops/deb.rs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash .ci/install-cargo-deb.sh

extra=()
if [[ -n "${COMPACTD_DEB_BINARY:-}" ]]; then
    # A target folder of our own for cargo-deb to take the binary from
    # (cargo-deb reads `target/release/` as "the target folder's release/").
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    export CARGO_TARGET_DIR="$stage"
    mkdir -p "$stage/release"
    cp "$COMPACTD_DEB_BINARY" "$stage/release/compactd"
    # A test's binary is large: compress fast.
    extra+=(--fast)
else
    cargo build --release --locked
fi
target=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/release/compactd"
pkg="$target/release/package"
rm -rf "$pkg" && mkdir -p "$pkg"
# COMPACTD_CONFIG=/dev/null: the build host's /etc/compactd/compactd.toml
# must not change what is generated.
COMPACTD_CONFIG=/dev/null "$bin" man | gzip -9n > "$pkg/compactd.1.gz"
COMPACTD_CONFIG=/dev/null "$bin" completions bash > "$pkg/compactd.bash"
COMPACTD_CONFIG=/dev/null "$bin" completions zsh > "$pkg/_compactd"
COMPACTD_CONFIG=/dev/null "$bin" completions fish > "$pkg/compactd.fish"
out="${COMPACTD_DEB_OUT:-$target/debian}"
mkdir -p "$out"
cargo deb --no-build --locked --output "$out" "${extra[@]}"
ls "$out"/compactd_*.deb
