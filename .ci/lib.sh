# The installers' shared steps, sourced by them.
#
# cached_dir NAME: where an installer keeps NAME (a venv, an Ivy cache).
# What the tests need is pinned by version, so an install made once serves
# every later clone on this machine: it lives in the cache
# (${COMPACTD_CI_CACHE:-~/.cache/compactd-ci}/NAME) and the clone's NAME is a
# link to it. Each installer still checks what it finds there against its
# pins and rebuilds it when they differ. A NAME that is already a folder of
# the clone (an install made before the cache, or COMPACTD_CI_CACHE=off) is
# kept where it is. .ci/install-test-deps.sh holds the cache's lock while the
# installers run, so two clones never build into it at once.
#
# install_spark_judge: the Spark judges' installers (.ci/install-spark.sh:
# Delta, .ci/install-spark-iceberg.sh: Iceberg). The caller sets:
#   NAME          the installer's name, for its messages
#   VENV, IVY     the venv and the Ivy cache to make
#   REQUIREMENTS  (array) the pinned pip requirements
#   IMPORTS       the Python modules that must import (e.g. "pyspark, delta")
#   IVY_EXTRA     text the Ivy cache was resolved for beside
#                 .ci/spark-ivysettings.xml and the venv's pins (may be empty)
#   SMOKE         the tool whose `--smoke <dir>` starts a session as the
#                 tests do and round-trips a table; WHAT names that table
# Idempotent: does nothing when the venv and the cache are in place at the
# pinned versions.

ci_cache_root() {
  echo "${COMPACTD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/compactd-ci}"
}

cached_dir() {
  local name=$1 root
  root=$(ci_cache_root)
  if [[ $root == off || ( -e "$REPO/$name" && ! -L "$REPO/$name" ) ]]; then
    echo "$REPO/$name"
    return 0
  fi
  mkdir -p "$root"
  ln -sfn "$root/$name" "$REPO/$name"
  echo "$root/$name"
}

say() { echo "$NAME: $*"; }

ivy_want() {
  {
    cat "$REPO/.ci/spark-ivysettings.xml" "$VENV/.compactd-requirements"
    if [[ -n "$IVY_EXTRA" ]]; then printf '%s\n' "$IVY_EXTRA"; fi
  } | sha256sum | cut -d' ' -f1
}

venv_ok() {
  [[ -x "$VENV/bin/python" && -f "$VENV/.compactd-requirements" \
    && "$(cat "$VENV/.compactd-requirements")" == "$(printf '%s\n' "${REQUIREMENTS[@]}")" ]] \
    && "$VENV/bin/python" -c "import $IMPORTS" 2>/dev/null
}

install_spark_judge() {
  local ivy_stamp="$IVY/.compactd-resolved" python="${PYTHON:-python3}"
  if venv_ok && [[ -f "$ivy_stamp" && "$(cat "$ivy_stamp")" == "$(ivy_want)" && -d "$IVY/jars" ]]; then
    say "already installed in $VENV and $IVY; nothing to do"
    return 0
  fi
  if ! command -v java >/dev/null 2>&1; then
    say "error: java not found; install a JDK 17 first (Debian: apt-get install openjdk-17-jdk-headless)" >&2
    return 1
  fi
  local start
  start=$(date +%s)
  if ! venv_ok; then
    if ! command -v "$python" >/dev/null 2>&1; then
      say "error: $python not found; install python3 (with the venv module) first" >&2
      return 1
    fi
    rm -rf "$VENV"
    say "creating venv $VENV with $("$python" --version 2>&1)"
    if ! "$python" -m venv "$VENV"; then
      say "error: '$python -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
      rm -rf "$VENV"
      return 1
    fi
    say "installing ${REQUIREMENTS[*]}"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-cache-dir "${REQUIREMENTS[@]}"
    "$VENV/bin/python" -c "import $IMPORTS"
    printf '%s\n' "${REQUIREMENTS[@]}" >"$VENV/.compactd-requirements"
    say "venv made in $(( $(date +%s) - start ))s"
  fi
  rm -rf "$IVY"
  mkdir -p "$IVY"
  say "resolving the jars into $IVY and starting a session as the tests do"
  local work
  work="$(mktemp -d)"
  if ! (cd "$work" && "$VENV/bin/python" "$SMOKE" --smoke "$work/t" 2>"$work/log"); then
    tail -n 40 "$work/log" >&2
    rm -rf "$work"
    say "error: Spark could not start or round-trip $WHAT (log above)" >&2
    return 1
  fi
  rm -rf "$work"
  ivy_want >"$ivy_stamp"
  say "installed in $(( $(date +%s) - start ))s: $(ls "$IVY/jars" | wc -l) jars in $IVY/jars"
}
