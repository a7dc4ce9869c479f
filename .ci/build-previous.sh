#!/usr/bin/env bash
# Builds the previous release's `compactd` (the commit before layout 3 and
# warm shutdown) for tests/rolling_upgrade.rs, which runs it beside this
# one: ${CARGO_TARGET_DIR:-target}/previous/compactd. The sources come from
# git (`git archive`, no worktree) and are built in this tree's target dir
# with the features the tests build with: the previous release has the
# same Cargo.lock, so only its own crates compile (the dependencies are
# shared; its workspace crates take the names of this tree's, which the
# test build then rebuilds, as it would anyway after clippy). Run it before
# the test build, never beside one. A binary already there for the same
# commit is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COMMIT=e5876c9
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
OUT=$TARGET/previous
if [[ -x $OUT/compactd && $(cat "$OUT/commit" 2>/dev/null) == "$COMMIT" ]]; then
    exit 0
fi
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
git archive "$COMMIT" | tar -x -C "$SRC"
start=$(date +%s)
(cd "$SRC" && CARGO_TARGET_DIR=$TARGET cargo build --locked --all-features --bin compactd)
mkdir -p "$OUT"
cp "$TARGET/debug/compactd" "$OUT/compactd"
echo "$COMMIT" > "$OUT/commit"
echo "build-previous: $COMMIT built in $(( $(date +%s) - start )) s: $OUT/compactd"
