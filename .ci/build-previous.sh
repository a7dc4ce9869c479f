#!/usr/bin/env bash
# Builds the previous release's `compactd` (the commit before layout 3 and
# warm shutdown) for tests/all/cluster/rolling_upgrade.rs, which runs it beside this
# one: ${CARGO_TARGET_DIR:-target}/previous/compactd. The sources come from
# git (`git archive`, no worktree) and are built in a target dir of their
# own, never this tree's: cargo names a workspace's crates by their path in
# it, so the two builds would take each other's artifacts for fresh. That
# dir starts as a copy of this tree's compiled dependencies when there are
# some (CI builds the tests first): the previous release has the same
# Cargo.lock, so mostly its own crates compile. A binary already there for
# the same commit is kept.
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
# `git archive` dates files at the commit; cargo would take this tree's
# newer artifacts of the same names for fresh. Dated now, every workspace
# crate is compiled from these sources.
find "$SRC" -type f -exec touch {} +
start=$(date +%s)
BUILD=$OUT/build
rm -rf "$BUILD"
mkdir -p "$BUILD/debug"
for d in deps build .fingerprint; do
    if [[ -d $TARGET/debug/$d ]]; then
        cp -a "$TARGET/debug/$d" "$BUILD/debug/"
    fi
done
(cd "$SRC" && CARGO_TARGET_DIR=$BUILD cargo build --locked --all-features --bin compactd)
cp "$BUILD/debug/compactd" "$OUT/compactd"
rm -rf "$BUILD"
echo "$COMMIT" > "$OUT/commit"
echo "build-previous: $COMMIT built in $(( $(date +%s) - start )) s: $OUT/compactd"
