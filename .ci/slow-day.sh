#!/usr/bin/env bash
# CI on a slow day: `.ci/run` in a fresh clone of this repository's HEAD
# beside two CPU burners (`sh -c 'while :; do :; done'`, one per core of
# this 2-core machine), as the acceptance of CI's time asks. Prints each
# stage's clock (from .ci/run), then the run's exit status and its seconds.
#   bash .ci/slow-day.sh [CLONE_DIR] [BURNERS]
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
clone=${1:-$(mktemp -d /tmp/compactd-slow-day.XXXXXX)}
burners=${2:-2}
rm -rf "$clone"
git clone --quiet "$repo" "$clone" || exit 1
pids=()
for _ in $(seq "$burners"); do
    sh -c 'while :; do :; done' &
    pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
start=$SECONDS
(cd "$clone" && bash .ci/run)
rc=$?
echo "== slow day: .ci/run beside $burners burners exited $rc after $((SECONDS - start)) s (clone: $clone)"
exit $rc
