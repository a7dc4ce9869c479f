#!/usr/bin/env python3
"""The Celery peer of the dispatch benchmark (bench/run.sh runs it with the
throwaway venv's python, where `celery` is installed).

Celery with its filesystem broker (kombu `filesystem://`, one shared folder
as in and out queue, the same kind of file-based distribution compactd does)
and the file result backend; three worker processes (`--pool solo`, one
process each that runs its tasks inline, like one compactd node process per
machine); N tasks sent at once; wall time from the first send until the N-th
result file exists.

Three task bodies: `noop` (a Python function that returns), `sh-true`
(`subprocess.run("true", shell=True)`: spawns `/bin/sh -c true`, exactly
what compactd's command executor with `--command true` spawns, so it is the
peer of compactd's dispatch figure), and `true` (runs the `true` program
without a shell: kept for comparison with figures measured before
`sh-true` existed; here a `true` costs its child about 0.50 ms of CPU, an
`sh -c true` 0.58 ms).
Prints `RESULT {json}` lines.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TASKS = r'''
import os, subprocess
from celery import Celery
D = os.environ["CELERY_BENCH_DIR"]
app = Celery("tasks")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={
        "data_folder_in": D + "/queue", "data_folder_out": D + "/queue",
        "processed_folder": D + "/processed", "store_processed": False,
        "polling_interval": float(os.environ.get("CELERY_BENCH_POLL", "0.2")),
    },
    result_backend="file://" + D + "/results",
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

@app.task(name="noop")
def noop():
    return None

@app.task(name="true")
def true():
    subprocess.run(["true"], check=True)
    return None

@app.task(name="sh-true")
def sh_true():
    subprocess.run("true", shell=True, check=True)
    return None
'''


def count_results(d):
    try:
        return sum(1 for n in os.listdir(d) if n.startswith("celery-task-meta-"))
    except FileNotFoundError:
        return 0


def run(n, workers, body, poll, base, medium, stall=30):
    d = tempfile.mkdtemp(prefix="celery.", dir=base)
    for sub in ("queue", "processed", "results"):
        os.makedirs(os.path.join(d, sub))
    with open(os.path.join(d, "tasks.py"), "w") as f:
        f.write(TASKS)
    env = dict(os.environ, CELERY_BENCH_DIR=d, CELERY_BENCH_POLL=str(poll), PYTHONPATH=d)
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    procs = []
    for i in range(workers):
        log = open(os.path.join(d, f"w{i}.log"), "w")
        procs.append(subprocess.Popen(
            [celery, "-A", "tasks", "worker", "--pool", "solo", "--concurrency", "1", "-n", f"w{i}@bench",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
            cwd=d, env=env, stdout=log, stderr=subprocess.STDOUT))
    sys.path.insert(0, d)
    os.environ["CELERY_BENCH_DIR"] = d
    os.environ["CELERY_BENCH_POLL"] = str(poll)
    import tasks as t
    task = t.app.tasks[body]
    try:
        # Warm-up: every worker up and consuming.
        for _ in range(workers * 3):
            task.delay()
        end = time.time() + 60
        while count_results(os.path.join(d, "results")) < workers * 3:
            if time.time() > end:
                raise SystemExit("celery workers did not start; see " + d)
            time.sleep(0.05)
        shutil.rmtree(os.path.join(d, "results"))
        os.makedirs(os.path.join(d, "results"))
        t0 = time.time()
        for _ in range(n):
            task.delay()
        sent = time.time() - t0
        # Kombu's filesystem transport can hand a consumer a message file that
        # another process is still writing (or has just taken): the worker
        # dies on the JSON error and its message is lost. Stop waiting when
        # no result arrives for `stall` seconds and report what completed.
        last, last_t = 0, time.time()
        while True:
            done = count_results(os.path.join(d, "results"))
            now = time.time()
            if done != last:
                last, last_t = done, now
            if done >= n or now - last_t > stall:
                break
            time.sleep(0.02)
        secs = (last_t if done < n else now) - t0
        crashed = sum(1 for p in procs if p.poll() is not None)
        import celery
        print("RESULT " + json.dumps({
            "part": "celery", "celery": celery.__version__, "body": body, "tasks": n, "workers": workers,
            "pool": "solo", "broker": "filesystem://", "result_backend": "file://", "polling_interval_s": poll,
            "completed": done, "complete": done >= n, "workers_crashed": crashed,
            "seconds": secs, "send_seconds": sent, "tasks_per_s": done / secs, "medium": medium}), flush=True)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        sys.path.remove(d)
        sys.modules.pop("tasks", None)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--body", action="append", choices=["noop", "true", "sh-true"])
    ap.add_argument("--base", default=tempfile.gettempdir())
    ap.add_argument("--medium", default="disk", help="label of what --base is on (disk, tmpfs)")
    a = ap.parse_args()
    for body in a.body or ["noop", "sh-true", "true"]:
        run(a.tasks, a.workers, body, a.poll, a.base, a.medium)


if __name__ == "__main__":
    main()
