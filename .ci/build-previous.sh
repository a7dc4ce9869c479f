#!/usr/bin/env bash
# Builds the previous release's `compactd` (the commit before layout 3 and
# warm shutdown) for tests/rolling_upgrade.rs, which runs it beside this
# one: ${CARGO_TARGET_DIR:-target}/previous/compactd. The sources come from
# git (`git archive`, no worktree), the build has a target dir of its own
# (so this tree's build is left alone), and a binary already there for the
# same commit is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
COMMIT=529000c
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
OUT=$TARGET/previous
if [[ -x $OUT/compactd && $(cat "$OUT/commit" 2>/dev/null) == "$COMMIT" ]]; then
    exit 0
fi
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
git archive "$COMMIT" | tar -x -C "$SRC"
start=$(date +%s)
(cd "$SRC" && CARGO_TARGET_DIR=$OUT/build cargo build --locked --bin compactd)
mkdir -p "$OUT"
cp "$OUT/build/debug/compactd" "$OUT/compactd"
echo "$COMMIT" > "$OUT/commit"
echo "build-previous: $COMMIT built in $(( $(date +%s) - start )) s: $OUT/compactd"
