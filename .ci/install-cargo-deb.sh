#!/usr/bin/env bash
# Installs cargo-deb, the tool that builds compactd's Debian package
# (.ci/build-deb.sh, tests/all/ops/deb.rs), from crates.io with its own lock file,
# into ~/.cargo/bin; quick when this version is there already.
set -euo pipefail
CARGO_DEB_VERSION=3.8.0
if cargo deb --version 2>/dev/null | grep -qF "$CARGO_DEB_VERSION"; then
    exit 0
fi
# A target folder of its own, removed after: nothing of it in this tree's.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CARGO_TARGET_DIR="$tmp" cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
cargo deb --version
