#!/usr/bin/env python3
"""compactd's fs dispatch against the Celery peer, in alternated pairs.

Each pair is one `dispatch.py --throughput-only` run (a fresh 3-node
cluster, a 9-shard warm-up, then 2,000 `sh -c true` shards) and one
`celery_peer.py --body sh-true` run (3 solo workers on a filesystem
broker, warmed up with 3 tasks each, then 2,000 tasks). Which of the two
goes first alternates pair by pair: a run just after a quiet spell meets
cold caches, and a Celery run meets a disk whose recently freed inodes
each new file must walk past (bench/README.md), so neither order is
neutral on its own.

    python3 bench/pairs.py --binary target/release/compactd \\
        --celery-python <venv>/bin/python --pairs 6

Prints one line per pair and a last line with the ratios' minimum and
median.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def result(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"no RESULT from {cmd}:\n{out.stdout}\n{out.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--celery-python", required=True, help="the Python of a venv with Celery (bench/README.md)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--base", default="/tmp")
    a = ap.parse_args()
    compactd = [sys.executable, os.path.join(HERE, "dispatch.py"), "--binary", os.path.abspath(a.binary),
                "--throughput-only", "--base", a.base]
    celery = [a.celery_python, os.path.join(HERE, "celery_peer.py"), "--tasks", "2000", "--body", "sh-true",
              "--base", a.base]
    ratios = []
    for i in range(a.pairs):
        first_compactd = i % 2 == 0
        if first_compactd:
            c = result(compactd)
            p = result(celery)
        else:
            p = result(celery)
            c = result(compactd)
        ratio = c["subtasks_per_s"] / p["tasks_per_s"]
        ratios.append(ratio)
        print(f"pair {i + 1} ({'compactd' if first_compactd else 'Celery'} first): compactd "
              f"{c['subtasks_per_s']:.1f}/s (daemons {c['daemon_cpu_ms_per_subtask']} ms, executors "
              f"{c['executor_cpu_ms_per_subtask']} ms of CPU per subtask), Celery {p['tasks_per_s']:.1f}/s "
              f"({p['completed']} of {p['tasks']} completed): {ratio:.2f}x", flush=True)
    print(f"ratio: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x over {len(ratios)} pairs")


if __name__ == "__main__":
    main()
