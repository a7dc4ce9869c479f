#!/usr/bin/env bash
# Installs the loopback S3-protocol server the integration tests start
# (moto, served one request at a time by tests/support/s3_server.py) into
# $REPO/.venv-s3. Idempotent: does nothing when the venv already holds the
# pinned versions. Needs only python3 (>= 3.9) with the venv module and
# access to PyPI.
#
# Usage: bash .ci/install-s3-server.sh        (PYTHON=/path/to/python3 to choose the interpreter)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/.ci/lib.sh"
VENV="$(cached_dir .venv-s3)"
PYTHON="${PYTHON:-python3}"

# Pinned: moto 5.2.5 is the version whose conditional-write behaviour was
# measured (If-None-Match: * and If-Match answer 412); the web stack and
# botocore (moto's service models) are pinned with it so a new release
# cannot change the server under the tests.
REQUIREMENTS=(
  "moto[server]==5.2.5"
  "werkzeug==3.1.9"
  "flask==3.1.3"
  "flask-cors==6.0.5"
  "boto3==1.44.5"
  "botocore==1.44.5"
)
STAMP="$VENV/.compactd-requirements"
WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"

say() { echo "install-s3-server: $*"; }

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] \
  && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
import moto.server, werkzeug.serving  # noqa: F401  (the server script's imports)
assert m.version("moto") == "5.2.5", m.version("moto")
PY
then
  say "already installed in $VENV (moto $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))')); nothing to do"
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  say "error: $PYTHON not found; install python3 (with the venv module) first" >&2
  exit 1
fi

start=$(date +%s)
if [[ -d "$VENV" ]]; then
  say "removing incomplete or outdated $VENV"
  rm -rf "$VENV"
fi
say "creating venv $VENV with $("$PYTHON" --version 2>&1)"
if ! "$PYTHON" -m venv "$VENV"; then
  say "error: '$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
  rm -rf "$VENV"
  exit 1
fi
say "installing ${REQUIREMENTS[*]}"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import moto.server, werkzeug.serving'
printf '%s\n' "$WANT" >"$STAMP"
say "installed moto $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))') in $VENV in $(( $(date +%s) - start ))s"
