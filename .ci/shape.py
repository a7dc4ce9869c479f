#!/usr/bin/env python3
"""The house's shape, held by CI: run from the repository root.

Fails (exit 1, naming each offence) when
- a Rust source file (`src/`, `*/src/`, tests, benches) has more than 800
  lines: past that a file holds two concepts;
- `src/` has a flat `.rs` file beyond the allowed few: features grow in
  their concept's folder;
- `cargo test` would build more than 4 integration test binaries;
- modules of one crate import each other in a circle. A module is a file
  (`a/b.rs` and `a/b/mod.rs` are `a::b`); a reference is any `crate::x::y`
  path or `use super::…` in it, resolved to the deepest module that exists.
  References between a module and its own submodules do not count (a folder
  is one concept); a circle among the rest means one side owns something of
  the other's;
- a module of the main crate imports one of a higher layer (`LAYERS`,
  lowest first): the daemon's parts stack, and a part that reaches up to
  one above it (the task machinery to the HTTP server, an executor to the
  task machinery) owns what the one above should take from below. A new
  top-level module of `src/` must be given its layer.
"""
import os
import re
import sys

MAX_LINES = 800
FLAT_ALLOWED = {"lib.rs", "main.rs", "clock.rs", "logging.rs"}
CRATES = ["src", "store/src", "layouts/src", "migrate/src", "sim/src", "clock/src"]

problems = []

# Upward imports kept, each with the reason it stays until it can go.
UPWARD_KEPT = {
    ("src/executor/iceberg/commit.rs", "tasks::outcomes"):
        "the Iceberg commit unit takes the units its round recorded done, read from the task "
        "folder as the task layer reads it; to go when the manager hands the committer that set",
}

# The main crate's top-level modules, lowest layer first. Each may use the
# layers below it and none above.
LAYERS = [
    "clock",     # the injected clock at the CLI edge
    "logging",   # tracing's setup
    "schedule",  # cron patterns and windows
    "table",     # the tables compactd reads: formats, partitions
    "cluster",   # election, membership, liveness, pokes between nodes
    "executor",  # what a unit runs: merge, parquet, delta, iceberg, commands
    "tasks",     # tasks, their splitting, placing, claiming and running
    "jobs",      # versioned DAGs of tasks
    "policy",    # the planner that submits tasks for tables
    "monitor",   # the elected node's rounds over all of the above
    "serve",     # the HTTP listener, metrics, the status page
    "node",      # one daemon: its loop over every part
    "check",     # `compactd check`, which reads every part's files
    "cli",       # the command line
]

for top in CRATES + ["tests", "benches", "store/tests", "layouts/tests", "migrate/tests", "migrate/benches", "sim/tests"]:
    for dirpath, _, files in os.walk(top):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(dirpath, f)
                with open(p, encoding="utf-8") as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_LINES:
                    problems.append(f"{p}: {n} lines (at most {MAX_LINES}: split it by concept)")

flat = sorted(f for f in os.listdir("src") if f.endswith(".rs"))
extra = [f for f in flat if f not in FLAT_ALLOWED]
if extra:
    problems.append(f"src/ has flat files beyond {sorted(FLAT_ALLOWED)}: {extra} (put them in their concept's folder)")


def modules(root):
    """Module path (tuple) -> file, for one crate's src/."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            out[tuple(rel)] = os.path.join(dirpath, f)
    return out


PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"use\s+(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\}", re.S)


def refs(text, me, is_mod_file):
    """Module paths referenced from a file's text."""
    text = re.sub(r"//[^\n]*", "", text)
    found = []
    base_super = me if is_mod_file else me[:-1]

    def resolve(kind, segs):
        if kind == "crate":
            return tuple(segs)
        # `super` of a/b.rs is a; of a/b/mod.rs (module a::b) is a too.
        parent = me[:-1]
        while segs and segs[0] == "super":
            parent = parent[:-1]
            segs = segs[1:]
        return parent + tuple(segs)

    for m in PATH.finditer(text):
        segs = [s for s in m.group(2).split("::") if s]
        found.append(resolve(m.group(1), segs))
    for m in USE_GROUP.finditer(text):
        segs = [s for s in m.group(2).split("::") if s]
        for item in re.split(r"[,\s]+", m.group(3)):
            item = item.split("::")[0].strip("{} ")
            if item and item != "self" and re.match(r"^[a-z_][a-z0-9_]*$", item):
                found.append(resolve(m.group(1), segs + [item]))
    return found


for root in CRATES:
    if not os.path.isdir(root):
        continue
    mods = modules(root)
    edges = {m: set() for m in mods}
    for me, path in mods.items():
        is_mod = path.endswith(("mod.rs", "lib.rs", "main.rs"))
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for target in refs(text, me, is_mod):
            while target and target not in mods:
                target = target[:-1]
            if not target or target == me:
                continue
            # A module and its own submodules are one concept.
            if target[: len(me)] == me or me[: len(target)] == target:
                continue
            edges[me].add(target)
            # A module's tests may judge it with a layer above (`check`).
            is_test = os.path.basename(path) == "tests.rs" or path.endswith("_tests.rs")
            if root == "src" and me and target and me[0] != target[0] and not is_test:
                low, high = me[0], target[0]
                if low not in LAYERS or high not in LAYERS:
                    unknown = low if low not in LAYERS else high
                    problems.append(f"src/{unknown}: a top-level module with no layer: add it to LAYERS in .ci/shape.py")
                elif LAYERS.index(low) < LAYERS.index(high) and (path, "::".join(target)) not in UPWARD_KEPT:
                    problems.append(
                        f"{path}: imports {'::'.join(target)}, a layer above it ({low} < {high} in LAYERS): "
                        "move what both need below both"
                    )
    # Strongly connected components (Tarjan).
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in sccs:
        names = sorted("::".join(c) or "(root)" for c in comp)
        detail = "; ".join(
            f"{'::'.join(a)} -> {'::'.join(b)}" for a in sorted(comp) for b in sorted(edges[a]) if b in comp
        )
        problems.append(f"{root}: import circle among {names} ({detail})")

# Integration test binaries: each links the whole crate again and starts its
# own servers. cargo makes one of every `tests/*.rs` and `tests/*/main.rs` of
# each crate (autotests; the [[test]] entries of the root Cargo.toml point
# at such files too).
MAX_TEST_BINARIES = 4
binaries = []
for crate in ["."] + [os.path.dirname(c) for c in CRATES if c != "src"]:
    tests = os.path.join(crate, "tests")
    if not os.path.isdir(tests):
        continue
    for name in sorted(os.listdir(tests)):
        full = os.path.join(tests, name)
        if name.endswith(".rs") or os.path.isfile(os.path.join(full, "main.rs")):
            binaries.append(os.path.normpath(full))
if len(binaries) > MAX_TEST_BINARIES:
    problems.append(
        f"{len(binaries)} integration test binaries (at most {MAX_TEST_BINARIES}): {binaries}; "
        "add a test to a topic module of tests/all/ instead"
    )

# Every test of tests/all takes its turn first (tests/all/common/turns.rs):
# the turns, not libtest's threads, decide how many run at once, so a test
# that skips its turn runs beside everything, uncounted.
TURN = re.compile(r"let _turn = crate::common::turns::(waits\(\)|core\(\)|machine\(\)|[A-Z_]+\.turn\(\));")
turnless = []
if os.path.isdir("tests/all"):
    for dirpath, _, files in os.walk("tests/all"):
        if os.path.join("tests/all", "common") in dirpath:
            continue
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            lines = open(path, encoding="utf-8").read().split("\n")
            for i, line in enumerate(lines):
                if line.strip() != "#[test]" and not line.strip().startswith("#[tokio::test"):
                    continue
                j = i + 1
                while j < len(lines) and not re.match(r"\s*(async )?fn \w+", lines[j]):
                    j += 1
                k = j + 1
                while k < len(lines) and lines[k].strip().startswith("//"):
                    k += 1
                if k >= len(lines) or not TURN.search(lines[k]):
                    turnless.append(f"{path}:{j + 1}")
for t in turnless:
    problems.append(f"{t}: a test whose first line is not its turn (`let _turn = crate::common::turns::waits();`)")

for p in problems:
    print(f"shape: {p}")
if problems:
    sys.exit(1)
print(f"shape: ok (file sizes, flat files in src/, no import circles, no upward imports, {len(binaries)} integration test binaries, every test takes its turn)")
