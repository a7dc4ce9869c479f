#!/usr/bin/env python3
"""Collects the `RESULT {json}` lines of one bench/run.sh run into
bench/results.json and renders bench/RESULTS.md (figures, ratios, the
commands that produced them, the machine)."""
import json
import re
import sys

# S3 us-east-1 list prices, USD per 1,000 requests.
PRICE_PUT_CLASS = 0.005  # PUT, COPY, POST, LIST
PRICE_GET_CLASS = 0.0004  # GET, HEAD (stat) and other reads
HOURS_PER_MONTH = 730


def load(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("RESULT "):
                out.append(json.loads(line[7:]))
    return out


def parse_upgrade(path):
    """The upgrade benchmark prints human lines; keep them and pick the rates."""
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return None
    lines = [l.rstrip() for l in text.splitlines()
             if l.startswith(("fs (", "  ", "s3", "peak RSS")) and "Compiling" not in l]
    rates = {}
    section = None
    for l in lines:
        m = re.match(r"fs \((\w+)", l)
        if m:
            section = m.group(1)
        if l.startswith("s3"):
            section = "s3"
        m = re.match(r"\s+(cp -r|upgrade rerun|upgrade)\s+:\s+(\S+)\s+(\d+) tasks/s", l)
        if m and section:
            rates[f"{section}: {m.group(1)}"] = {"time": m.group(2), "tasks_per_s": int(m.group(3))}
    return {"lines": lines, "rates": rates}


def bill(c):
    """USD for the given op counts (list calls billed as estimated pages)."""
    put_class = c["create"] + c["put"] + c["list_pages_est"] + c["other"]
    get_class = c["read"] + c["stat"]
    return put_class / 1000 * PRICE_PUT_CLASS + get_class / 1000 * PRICE_GET_CLASS


def fmt(x, nd=1):
    if x is None:
        return "missing"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def ops_row(label, c):
    return (f"| {label} | {c['create']:.2f} | {c['put']:.2f} | {c['read']:.2f} | {c['stat']:.3f} | {c['list']:.3f} "
            f"| {c['delete']:.2f} | {c['total']:.2f} |")


def main():
    if sys.argv[1] == "--from-json":
        # Re-render an earlier run's results.json (after a change of this
        # script): python3 bench/report.py --from-json bench/results.json OUT.json OUT.md
        j = json.load(open(sys.argv[2]))
        return render(j["meta"], j["results"], j.get("upgrade"), sys.argv[3], sys.argv[4])
    results_txt, upgrade_txt, meta_json, out_json, out_md = sys.argv[1:6]
    render(json.load(open(meta_json)), load(results_txt), parse_upgrade(upgrade_txt), out_json, out_md)


def render(meta, rs, up, out_json, out_md):
    by = {}
    for r in rs:
        by.setdefault(r["part"], []).append(r)
    one = lambda k: (by.get(k) or [None])[0]

    med = lambda r: r.get("medium", "disk")
    disp = [r for r in by.get("dispatch", []) if "3s session" not in r["label"] and med(r) == "disk"]
    disp_short = [r for r in by.get("dispatch", []) if "3s" in r["label"]]
    d = disp[0] if disp else None
    lim = {r["loops"]: r for r in by.get("limit", []) if r["backend"].startswith("fs://") and "/dev/shm" not in r["backend"]}
    lim_h = {r["loops"]: r for r in by.get("limit", []) if r["backend"].startswith("hdfs://")}
    cel = {r["body"]: r for r in by.get("celery", []) if med(r) == "disk"}
    # The same three on tmpfs: no fsync cost (OpenDAL's fs writer syncs every
    # file; kombu's filesystem transport does not).
    d_t = next((r for r in by.get("dispatch", []) if med(r) == "tmpfs"), None)
    lim_t = {r["loops"]: r for r in by.get("limit", []) if "/dev/shm" in r["backend"]}
    cel_t = {r["body"]: r for r in by.get("celery", []) if med(r) == "tmpfs"}
    lat = one("latency")
    life = one("cost_lifecycle")
    idle = one("cost_idle")
    scale = one("scale")
    mem_idle = one("memory_idle")
    mem_mgr = one("memory_manager")

    derived = {}
    if idle:
        n = idle["nodes"]
        mon, mem = idle["monitor_per_hour"], idle["member_per_hour_mean"]
        hb = idle["heartbeat_puts_per_node_hour"]
        cluster_hour = bill(mon) + (n - 1) * bill(mem)
        hb_hour = n * hb / 1000 * PRICE_PUT_CLASS
        derived["idle_bill"] = {
            "nodes": n, "monitor_usd_month": bill(mon) * HOURS_PER_MONTH,
            "member_usd_month": bill(mem) * HOURS_PER_MONTH,
            "cluster_usd_month": cluster_hour * HOURS_PER_MONTH,
            "heartbeat_usd_month": hb_hour * HOURS_PER_MONTH,
            "heartbeat_share": hb_hour / cluster_hour if cluster_hour else None,
        }
    if life:
        derived["usd_per_million_subtasks"] = bill(life["ops_per_subtask"]) * 1e6
    if d:
        if 3 in lim:
            derived["compactd_vs_limit_3_loops"] = d["subtasks_per_s"] / lim[3]["subtasks_per_s"]
        if 1 in lim:
            derived["compactd_vs_limit_1_loop"] = d["subtasks_per_s"] / lim[1]["subtasks_per_s"]
        for body, c in cel.items():
            derived[f"compactd_vs_celery_{body}"] = d["subtasks_per_s"] / c["tasks_per_s"]
    if d_t:
        for loops, r in lim_t.items():
            derived[f"tmpfs_compactd_vs_limit_{loops}_loop{'s' if loops > 1 else ''}"] = (
                d_t["subtasks_per_s"] / r["subtasks_per_s"])
        for body, c in cel_t.items():
            derived[f"tmpfs_compactd_vs_celery_{body}"] = d_t["subtasks_per_s"] / c["tasks_per_s"]

    json.dump({"meta": meta, "results": rs, "upgrade": up, "derived": derived}, open(out_json, "w"), indent=2)

    L = []
    w = L.append
    w("# compactd benchmark results")
    w("")
    w(f"Produced by `bash bench/run.sh` on {meta['date']} (total {meta.get('total_seconds', '?')} s). "
      "Raw figures: [results.json](results.json). Method and caveats: [README.md](README.md).")
    w("")
    w(f"Machine: {meta['nproc']} cores, {meta['mem']}, Linux {meta['kernel']}, {meta['rustc']}, "
      f"{meta['python']}; temp dir `{meta['tmp']}` on {meta['tmpfs']}.")
    w("")
    w("## Dispatch (3 real `compactd run` processes, fs backend, no-op command)")
    w("")
    w("Command: `python3 bench/dispatch.py --binary target/release/compactd` (inside run.sh): 3 nodes "
      "`compactd run --executor command --command true --listen 127.0.0.1:0 --max-running 256` at the default "
      "timings (10 s heartbeat, 30 s session and lease: work moves by wake-ups), then "
      "`compactd submit --shards 2000 --wait` (the nodes' default `--command true`).")
    w("")
    def side_by_side(d, lim, cel):
        w("| what | subtasks/s | time | ratio compactd / this |")
        w("|---|---:|---:|---:|")
        if d:
            w(f"| **compactd**, {d['shards']} subtasks, 3 nodes | **{d['subtasks_per_s']:.1f}** "
              f"| {d['seconds']:.1f} s | 1 |")
        else:
            w("| compactd | missing | | |")
        for loops in (1, 3):
            r = lim.get(loops)
            if r and d:
                w(f"| backend limit: the lifecycle's operations ({r['ops_per_subtask']['total']:.2f} ops/subtask) "
                  f"in {loops} tight loop{'s' if loops > 1 else ''} on the same fs, no scheduling "
                  f"| {r['subtasks_per_s']:.1f} | {r['seconds']:.1f} s | {d['subtasks_per_s'] / r['subtasks_per_s']:.2f} |")
        for body, c in cel.items():
            if d:
                what = "a Python no-op" if body == "noop" else "runs `true` (subprocess), like compactd"
                note = ""
                if c.get("complete") is False:
                    note = (f" — **only {c['completed']:,} of {c['tasks']:,} completed**, {c['workers_crashed']} "
                            "of 3 workers crashed (kombu filesystem transport read a message file mid-write); rate "
                            "over the completed tasks")
                src = f" ({c['source']})" if c.get("source") else ""
                w(f"| Celery {c['celery']}, filesystem broker, 3 worker processes (`--pool solo`), task {what}{note}"
                  f"{src} | {c['tasks_per_s']:.1f} | {c['seconds']:.1f} s | {d['subtasks_per_s'] / c['tasks_per_s']:.2f} |")
        if not cel:
            w("| Celery | missing (see run log) | | |")

    side_by_side(d, lim, cel)
    for r in disp_short:
        rate = f"{r['subtasks_per_s']:.1f}" if r["exit_code"] == 0 else "**did not finish** (stuck; submit killed)"
        w(f"| compactd with `--session-timeout 3s --lease 3s` | {rate} | {r['seconds']:.1f} s "
          f"| re-dispatches {r['redispatches']}, rejoins {r['rejoins']}, offline declarations {r['declared_offline']} |")
    w("")
    if d:
        w(f"compactd run: manager {d['manager']}, {d['starts']} executor starts for {d['shards']} subtasks plus the "
          f"latency samples, {d['redispatches']} re-dispatches.")
        if d.get("ops_per_subtask") is not None:
            kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(d["ops_per_subtask_by_kind"].items()) if v)
            w(f"Backend requests of the three processes during the run, from their `GET /v1/status`: "
              f"**{d['ops_per_subtask']:.2f} per subtask** ({kinds}), wake-up ticks included.")
        w("")
    if d_t or lim_t or cel_t:
        w("**The same on tmpfs** (roots under `/dev/shm`, measured in the same run). On disk compactd syncs every "
          "file it creates or replaces and the folders of its creates (durable coordination state), while kombu's "
          "filesystem transport and Celery's file result backend sync nothing; and every inode a scheduler frees "
          "costs more on this disk (ext4 without a journal, `-o discard`: see bench/README.md). On tmpfs neither "
          "costs anything, so this table compares the schedulers' own overhead:")
        w("")
        side_by_side(d_t, lim_t, cel_t)
        w("")
    if lat:
        w(f"**Submit-to-start latency**, idle cluster, {lat['samples']} single-shard tasks "
          f"(`--command-name stamp` writing `date +%s%N` to a file, compared with the wall time just before `compactd submit`): "
          f"**p50 {lat['p50_ms']:.0f} ms, p99 {lat['p99_ms']:.0f} ms** (min {lat['min_ms']:.0f}, "
          f"max {lat['max_ms']:.0f}) at the **default timings** (10 s polls): `submit` pokes the manager, which "
          "writes the subtask and pokes the worker, which starts it; included are the CLI's start-up, its read of "
          "the lease for the manager's address, and the `sh` spawn. Without wake-ups (`--listen off`) the same "
          "waits for two polls, ~1.5 × 10 s.")
        w("")
    w("## Cost (backend operations, S3 request prices)")
    w("")
    w(f"Prices: PUT/COPY/POST/LIST ${PRICE_PUT_CLASS}/1,000; GET and other reads (stat) "
      f"${PRICE_GET_CLASS}/1,000; DELETE free; {HOURS_PER_MONTH} h/month. Lists are billed as estimated pages "
      "(`list_pages_est`, 1 per 1,000 entries). Counted by `store::layers::CountingLayer`; "
      "command: `cargo bench --bench suite -- cost`.")
    w("")
    w("| operations | create | put | read | stat | list | delete | total |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    if life:
        w(ops_row(f"per subtask lifecycle ({life['shards']} shards, 3 nodes, fs, idle share subtracted)",
                  life["ops_per_subtask"]))
        w(ops_row("per subtask, including the idle cluster over the same polls", life["all_ops_per_subtask"]))
    if idle:
        w(ops_row(f"idle monitor, per hour ({idle['nodes']}-node cluster)", idle["monitor_per_hour"]))
        w(ops_row(f"idle member, per hour (mean of {idle['nodes'] - 1})", idle["member_per_hour_mean"]))
    w("")
    if "idle_bill" in derived:
        b = derived["idle_bill"]
        w(f"**Idle {b['nodes']}-node cluster (99 members + 1 monitor), default timings (heartbeat 10 s, "
          f"lease 30 s, session 30 s): ${b['cluster_usd_month']:.2f}/month** in S3 requests; of which heartbeat "
          f"PUTs (360 per node per hour) ${b['heartbeat_usd_month']:.2f} ({b['heartbeat_share'] * 100:.0f} %). "
          f"Per node: monitor ${b['monitor_usd_month']:.2f}/month, member ${b['member_usd_month']:.2f}/month.")
        w("")
    if "usd_per_million_subtasks" in derived:
        w(f"**Per subtask**: ${derived['usd_per_million_subtasks']:.2f} per million subtask lifecycles "
          "(create + 2 puts dominate; the delete is free).")
        w("")
    if "idle_bill" in derived:
        b = derived["idle_bill"]
        w(f"Against the floor (the heartbeat PUTs any heartbeat design pays): "
          f"**{b['cluster_usd_month'] / b['heartbeat_usd_month']:.3f} ×** "
          f"(${b['cluster_usd_month']:.2f} / ${b['heartbeat_usd_month']:.2f}). Formula: per hour, "
          "(PUT + CREATE + LIST pages) × $0.005/1,000 + (GET + stat) × $0.0004/1,000, monitor plus 99 members, "
          "× 730 h. Members GET the lease and their inbox stamp per poll and list their folder every 60 polls; "
          "the monitor lists `Registry/Nodes/` and `Registry/Joins/` per scan, stats `Lease.<E+1>` per fence and "
          "lists `Election/` once per lease.")
        w("")
    scans = sorted(by.get("scan_sim", []), key=lambda r: r["nodes"])
    if scans:
        w("## Monitor requests per scan vs cluster size")
        w("")
        w("In-process nodes on the memory store (listings carry versions, as S3's do), each behind a fault layer "
          "(0.2 % errors) and a counting layer, default timings, one poll per round; a steady minute once every "
          "node joined (`tests/all/simulation/sim_scale.rs`, release build, `COMPACTD_SIM_NODES=N`).")
        w("")
        w("| nodes | monitor ticks | requests per tick, max | mean | all joined after (simulated) |")
        w("|---:|---:|---:|---:|---:|")
        for r in scans:
            w(f"| {r['nodes']:,} | {r['monitor_ticks']} | {r['max_requests_per_tick']} | "
              f"{r['mean_requests_per_tick']:.2f} | {r['converged_s']:.0f} s |")
        w("")
    sw = one("sweep_sim")
    if sw:
        w(f"**Sweep of {sw['tasks']:,} finished task folders** (`tests/all/tasks/task_regressions.rs`, every monitor request "
          f"priced at {sw['per_request_ms']} ms on the manual clock): {sw['rounds']} rounds, longest monitor tick "
          f"{sw['longest_tick_s']:.2f} s (budget {sw['budget_s']:.2f} s), at most {sw['max_requests_per_tick']:,} "
          f"requests per tick, {sw['requests']:,} in all.")
        w("")
    ch = {bool(r["calm"]): r for r in by.get("chaos", []) if r.get("long")}
    if ch:
        w("## Long chaos (release build, `tests/all/simulation/chaos.rs` long mode)")
        w("")
        w("| run | seed | units | executions | per unit | all terminal after | kills (of the monitor) | pauses "
          "(daemon, machine) | epochs | violations |")
        w("|---|---:|---:|---:|---:|---:|---|---|---:|---:|")
        for calm, r in sorted(ch.items()):
            w(f"| {'calm' if calm else 'chaos'} | {r['seed']} | {r['units']:,} | {r['executions']:,} | "
              f"{r['executions'] / r['units']:.2f} | {r['work_s']:.1f} s | {r['kills']} ({r['kills_of_monitor']}) | "
              f"{r['pauses_daemon']}, {r['pauses_machine']} | {r['epochs']} | {r['violations']} |")
        if True in ch and False in ch:
            w("")
            w(f"Throughput under chaos: **{ch[True]['work_s'] / ch[False]['work_s'] * 100:.0f} % of calm**; "
              f"executions per unit under chaos **{ch[False]['executions'] / ch[False]['units']:.2f}**.")
        w("")
    w("## Scale (10,000 subtasks over 10 in-process nodes, memory backend)")
    w("")
    if scale:
        s = scale
        rss, hwm = s["rss_kib"], s["hwm_kib"]
        w(f"Command: `cargo bench --bench suite -- scale`. 10 `Node`s over ONE memory store, manual clock "
          f"advanced one 10 s poll per round, command executor `true` (real processes), max {s['max_running_per_node']} "
          "running per node.")
        w("")
        w("| figure | value |")
        w("|---|---:|")
        w(f"| time to finish {s['shards']:,} subtasks (wall) | {s['seconds']:.1f} s ({s['subtasks_per_s']:.0f} subtasks/s) |")
        w(f"| polls needed | {s['polls']} (= {s['simulated_minutes_at_10s_polls']:.1f} min at the default 10 s poll) |")
        w(f"| operations per subtask (idle share subtracted) | {s['ops_per_subtask']['total']:.2f} "
          f"(create {s['ops_per_subtask']['create']:.2f}, put {s['ops_per_subtask']['put']:.2f}, read "
          f"{s['ops_per_subtask']['read']:.2f}, list {s['ops_per_subtask']['list']:.3f}, delete "
          f"{s['ops_per_subtask']['delete']:.2f}) |")
        w(f"| process RSS: idle 10-node cluster → after the task | {rss['idle_cluster'] / 1024:.1f} → "
          f"{rss['after_task'] / 1024:.1f} MiB |")
        w(f"| process peak RSS (VmHWM) during the task | {hwm['after_task'] / 1024:.1f} MiB "
          f"(+{(hwm['after_task'] - rss['idle_cluster']) / 1024:.1f} MiB over the idle cluster) |")
        w("")
        w("The process holds all 10 nodes, the memory backend's 10,000 subtask files and the executors' handles, "
          "so the growth is an upper bound for the manager's own state; the real-process figure below isolates it.")
    else:
        w("missing")
    w("")
    w("## Memory (real processes)")
    w("")
    w("| process | VmRSS |")
    w("|---|---:|")
    if mem_idle:
        w(f"| idle `compactd run` node ({mem_idle['settle_s']} s after start, max of 3) | "
          f"{mem_idle['max_rss_kib'] / 1024:.1f} MiB |")
    if mem_mgr:
        m = mem_mgr
        w(f"| manager node ({m['manager']}) before a {m['shards']:,}-subtask task | {m['manager_rss_before_kib'] / 1024:.1f} MiB |")
        w(f"| manager node, peak during the task (VmHWM) | {m['manager_hwm_kib'] / 1024:.1f} MiB |")
        w(f"| manager node, after the task | {m['manager_rss_after_kib'] / 1024:.1f} MiB |")
        w("")
        w(f"The {m['shards']:,}-subtask task on the 3-node process cluster took {m['seconds']:.1f} s "
          f"({m['subtasks_per_s']:.1f} subtasks/s, {m['redispatches']} re-dispatches, 20 s session). The RSS "
          "figures are of the node that managed the task when it was submitted.")
    w("")
    w("## Upgrade (v1 → v2)")
    w("")
    w("Command: `COMPACTD_BENCH_TASKS=5000 cargo bench -p compactd-migrate --bench upgrade` "
      "(S3 part on the loopback moto server from `.ci/install-s3-server.sh`).")
    w("")
    if up and up["rates"]:
        w("| run | time | tasks/s | ratio to `cp -r` |")
        w("|---|---:|---:|---:|")
        for k, v in up["rates"].items():
            sec = k.split(":")[0]
            cp = up["rates"].get(f"{sec}: cp -r")
            ratio = f"{v['tasks_per_s'] / cp['tasks_per_s']:.3f}" if cp else ""
            w(f"| {k} | {v['time']} | {v['tasks_per_s']:,} | {ratio} |")
        w("")
        w("```text")
        for l in up["lines"]:
            w(l)
        w("```")
    else:
        w("missing (see the run log)")
    w("")
    pq = by.get("parquet", [])
    if pq:
        pm = meta.get("parquet", {})
        w("## Parquet compaction")
        w("")
        r0 = pq[0]
        w(f"One generated table ({r0['files_in']} small Parquet files, {r0['rows']:,} rows, {r0['input_mib']} MiB, "
          "snappy, the schema of `tests/support/parquet_tool.py`: nulls, strings, zoned timestamps, decimals, a list "
          "and a struct column), every peer rewriting each partition into one zstd file, one after another in the "
          "same run" + (f" ({pm['date']}, commit {pm['commit']}, `bash bench/parquet.sh`)" if pm else "") +
          ". Median of three runs of each peer (one for the node), wall time of its processes, start-up included; "
          "peak RSS from GNU time (the largest process of all runs).")
        w("")
        w("| peer | setting | s (median) | runs, s | M rows/s | MiB/s | peak RSS MiB | files out | MiB out |")
        w("|---|---|---|---|---|---|---|---|---|")
        for r in pq:
            runs = ", ".join(f"{x:.2f}" for x in r.get("runs", [r["seconds"]]))
            w(f"| {r['peer']} | {r['setting']} | {r['seconds']:.2f} | {runs} | {r['rows_per_s'] / 1e6:.2f} | "
              f"{r['mib_per_s']:.1f} | {fmt(r.get('peak_rss_mib'))} | {r.get('files_out', '—')} | "
              f"{r.get('output_mib', '—')} |")
        best = lambda peer: max((r for r in pq if r["peer"] == peer), key=lambda r: r["rows_per_s"], default=None)
        c, pa_, dk, cp = best("compactd"), best("pyarrow"), best("DuckDB"), best("byte copy")
        w("")
        if c and pa_ and dk:
            derived["parquet_compactd_vs_pyarrow"] = c["rows_per_s"] / pa_["rows_per_s"]
            derived["parquet_compactd_vs_duckdb_best"] = c["rows_per_s"] / dk["rows_per_s"]
            rss = [r for r in pq if r["peer"] == "compactd" and r.get("peak_rss_mib")]
            w(f"compactd at its best setting ({c['setting']}) vs pyarrow: "
              f"**{derived['parquet_compactd_vs_pyarrow']:.2f}×**; vs DuckDB at its best "
              f"({next((x for x in dk['setting'].split(', ') if x.startswith('threads')), dk['setting'])}): "
              f"**{derived['parquet_compactd_vs_duckdb_best']:.2f}×**" +
              (f"; vs the byte copy floor: {c['rows_per_s'] / cp['rows_per_s']:.2f}×" if cp else "") +
              (f". Peak RSS: compactd {max(r['peak_rss_mib'] for r in rss)} MiB, pyarrow {pa_['peak_rss_mib']} MiB."
               if rss and pa_.get("peak_rss_mib") else "."))
            json.dump({"meta": meta, "results": rs, "upgrade": up, "derived": derived}, open(out_json, "w"), indent=2)
        w("")
        mem = by.get("parquet_memory", [])
        if mem:
            w("Peak RSS of compactd's executor against the number of files in one partition (files of 1,000 rows, "
              "target 8 MiB, so row groups are bounded alike): " +
              "; ".join(f"{m['files']:,} files ({m['input_mib']} MiB): {fmt(m['peak_rss_mib'])} MiB in {m['seconds']:.2f} s"
                        for m in mem) +
              ". Memory is bounded by the open row group (≤ min(target, 64 MiB)), a few decoded batches and "
              "footers, plus the commit plan's list of input names.")
            w("")

    dl = [r for r in by.get("delta", []) if "seconds" in r]
    if dl:
        w("## Delta Lake")
        w("")
        r0 = dl[0]
        w("Command: `.venv-parquet/bin/python bench/delta.py --binary target/release/compactd` (inside run.sh). "
          f"One table written by the `deltalake` package: {r0['rows']:,} rows in {r0['files_before']:,} small files "
          f"({r0['input_mib']} MiB) over 5 partitions, one append each, copied afresh for every run. compactd: one "
          "`compactd __merge --format delta` process per partition, one after another (an OPTIMIZE commit each); "
          "deltalake: one `optimize.compact()` over the whole table (its default concurrency; one commit). Median "
          "of 3 runs, start-up included; every run judged by `tests/support/delta_tool.py check`.")
        w("")
        w("| contender | setting | seconds | rows rewritten/s | peak RSS MiB | files | MiB after | commits |")
        w("|---|---|---:|---:|---:|---|---:|---:|")
        for r in dl:
            w(f"| {r['peer']} | {r['setting']} | {r['seconds']:.2f} | {r['rows_rewritten_per_s']:,} | "
              f"{fmt(r.get('peak_rss_mib'))} | {r['files_before']:,} → {r['files_after']} | {r['output_mib']} | "
              f"{r['commits']} |")
        c = next((r for r in dl if r["peer"] == "compactd"), None)
        d = next((r for r in dl if r["peer"] == "deltalake"), None)
        if c and d:
            derived["delta_compactd_vs_deltalake"] = c["rows_rewritten_per_s"] / d["rows_rewritten_per_s"]
            w("")
            w(f"compactd vs deltalake's own OPTIMIZE: **{derived['delta_compactd_vs_deltalake']:.2f}×** the rows "
              f"per second, peak RSS {fmt(c.get('peak_rss_mib'))} MiB vs {fmt(d.get('peak_rss_mib'))} MiB.")
        w("")

    ib = [r for r in by.get("iceberg", []) if "seconds" in r]
    if ib:
        w("## Iceberg")
        w("")
        r0 = ib[0]
        w("Command: `python3 bench/iceberg.py --binary target/release/compactd` (inside run.sh). One file-system "
          f"table Spark wrote (Iceberg 1.12's runtime, one append with the fanout writer): {r0['rows']:,} rows in "
          f"{r0['files_before']:,} small files ({r0['mib_before']} MiB) over 5 partitions, restored at the same path "
          "for every run. compactd: `submit --executor iceberg --wait` to one node running 2 units at a time (a unit "
          "per partition, one commit); Spark: `CALL system.rewrite_data_files` in `local[2]`, its session (the JVM's "
          "start-up) timed apart. Median of 3 runs; peak RSS of the process tree; every run judged by pyiceberg.")
        w("")
        w("| contender | setting | seconds | JVM start-up s | rows/s | peak RSS MiB | files | MiB after | commits |")
        w("|---|---|---:|---:|---:|---:|---|---:|---:|")
        for r in ib:
            jvm = f"{r['jvm_session_start_s']:.1f}" if "jvm_session_start_s" in r else "-"
            w(f"| {r['peer']} | {r['setting']} | {r['seconds']:.2f} | {jvm} | {r['rows_per_s']:,} | "
              f"{fmt(r.get('peak_rss_mib'))} | {r['files_before']:,} → {r['files_after']} | {r['mib_after']} | "
              f"{r['commits']} |")
        c = next((r for r in ib if r["peer"] == "compactd"), None)
        s = next((r for r in ib if r["peer"] == "spark"), None)
        if c and s:
            derived["iceberg_compactd_vs_spark"] = c["rows_per_s"] / s["rows_per_s"]
            w("")
            w(f"compactd vs Spark's rewrite_data_files: **{derived['iceberg_compactd_vs_spark']:.1f}×** the rows per "
              "second (Spark's JVM start-up not counted), peak RSS "
              f"{fmt(c.get('peak_rss_mib'))} MiB vs {fmt(s.get('peak_rss_mib'))} MiB.")
        w("")

    hd = {r["medium"]: r for r in by.get("dispatch", []) if med(r) in ("fs", "hdfs")}
    if "hdfs" in hd:
        h, f = hd["hdfs"], hd.get("fs")
        rpcs, idle_h, page, dfs = one("hdfs_rpcs"), one("hdfs_idle"), one("hdfs_status_page"), one("hdfs_cluster")
        w("## HDFS")
        w("")
        w("Command: `python3 bench/hdfs.py --binary target/release/compactd` (inside run.sh): the same 3 nodes and "
          "2,000-shard task as above at the default timings, first with the tree on fs, then on a real HDFS "
          "(Hadoop 3.4.1's `MiniDFSCluster`: one NameNode and 3 DataNodes in one JVM on this machine, started by "
          f"the test launcher in {dfs['start_seconds'] if dfs else '?'} s). NameNode RPCs are the NameNode's own "
          "count of the client calls it processed (its RPC server's metrics; DataNodes report on a port of their "
          "own), beside the count compactd keeps itself (`compactd_namenode_rpcs_total` on each node's `/metrics`).")
        w("")
        w("| tree on | subtasks/s | time | backend requests per subtask (compactd's count) |")
        w("|---|---:|---:|---:|")
        for label, r in (("fs", f), ("HDFS", h)):
            if r:
                w(f"| {label} | {r['subtasks_per_s']:.1f} | {r['seconds']:.1f} s | {r['ops_per_subtask']:.2f} |")
        for loops, r in sorted(lim_h.items()):
            w(f"| HDFS backend limit: the lifecycle's operations ({r['ops_per_subtask']['total']:.2f} ops/subtask) "
              f"in {loops} tight loop{'s' if loops > 1 else ''}, no scheduling | {r['subtasks_per_s']:.1f} | "
              f"{r['seconds']:.1f} s | |")
        w("")
        if f:
            ratio = f["subtasks_per_s"] / h["subtasks_per_s"]
            derived["hdfs_fs_rate_ratio"] = ratio
            w(f"fs is **{ratio:.2f} ×** the HDFS rate (the bound asked: within 3 ×).")
            if lim_h:
                top = max(lim_h.values(), key=lambda r: r["subtasks_per_s"])
                derived["hdfs_vs_backend_limit"] = h["subtasks_per_s"] / top["subtasks_per_s"]
                w(f"compactd on HDFS reaches **{h['subtasks_per_s'] / top['subtasks_per_s']:.2f}** of what the same "
                  f"HDFS does with the lifecycle's operations alone ({top['loops']} loops, no scheduling): the test "
                  "HDFS (a NameNode and 3 DataNodes in one JVM) is what bounds the rate on this 2-core machine, "
                  "where it saturates both cores.")
            w("")
        if rpcs:
            w(f"- **NameNode RPCs per subtask**: {rpcs['namenode_rpcs_per_subtask']:.2f} (NameNode's count, "
              f"including the `submit` client), {rpcs['own_count_per_subtask']:.2f} (compactd's own count). A "
              "create or replace of a small file is 4 RPCs (`create`, `addBlock`, `complete`, `rename2`), a read "
              "1 (`getBlockLocations`), a listing 1 per 1,000 entries, a folder's delete 1.")
        if idle_h:
            w(f"- **Idle NameNode RPCs per node-minute**: {idle_h['namenode_rpcs_per_node_minute']:.1f} (NameNode's "
              f"count over {idle_h['seconds']:.0f} s of 3 idle nodes at the default timings; compactd's own count "
              f"{idle_h['own_count_per_node_minute']:.1f}).")
        if page:
            w(f"- **One status page load** (`GET /` on a node): {page['namenode_rpcs']} NameNode RPCs.")
        w("")

    il = [r for r in by.get("io_limit", []) if r.get("limit_bytes_per_s")]
    if il:
        r, im = il[0], meta.get("io_limit", {})
        free = next((x for x in by["io_limit"] if not x.get("limit_bytes_per_s")), None)
        mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
        w("## I/O limit")
        w("")
        w(f"Command: `{im.get('command', 'bash bench/io_limit.sh')}`" +
          (f" ({im['date']}, commit {im['commit']}, {im.get('binary', 'release')} binary)" if im else "") +
          f": one `compactd run --io-limit {r['limit_bytes_per_s'] / 2**20:g}MiB --max-running 2` node on fs merges "
          f"{r['partitions']} partitions of 32 × 1 MiB newline-delimited files (two `merge` executors at once); "
          "its `/metrics` is sampled every 0.25 s. Achieved = bytes granted (`compactd_io_limit_bytes_total`, read "
          f"plus written) over the first {r['span_s']:.0f} s after the first grant; the cross-check divides the "
          "executors' own `bytes_in + bytes_out` (`status --json`) by the time from the first grant to the last.")
        w("")
        w("| limit MiB/s | achieved MiB/s | deviation | 1 s windows MiB/s | 5 s windows MiB/s | executors' own MiB/s | "
          "executors waited | task |")
        w("|---:|---:|---:|---|---|---:|---:|---:|")
        w(f"| {mib(r['limit_bytes_per_s'])} | **{mib(r['achieved_bytes_per_s'])}** | {r['deviation_pct']:+.2f} % | "
          f"{mib(r['min_1s_bytes_per_s'])} – {mib(r['max_1s_bytes_per_s'])} | "
          f"{mib(r['min_5s_bytes_per_s'])} – {mib(r['max_5s_bytes_per_s'])} | {mib(r['executor_rate_bytes_per_s'])} | "
          f"{r['waited_s']:.0f} s | {r['state']} in {r['task_s']:.1f} s |")
        w("")
        derived["io_limit_achieved_vs_limit"] = r["achieved_bytes_per_s"] / r["limit_bytes_per_s"]
        w(f"Held within **{abs(r['deviation_pct']):.2f} %** of the limit over {r['span_s']:.0f} s (the bound asked: "
          "10 %)." + (f" Without the flag the same node merged {mib(free['executor_bytes'])} MiB (read plus "
                      f"written) in {free['task_s']:.1f} s, start-up included: {mib(free['task_rate_bytes_per_s'])} "
                      f"MiB/s, and asked for {free['granted_bytes']:.0f} bytes: the limit, not the disk, is what "
                      "bounds the limited run." if free else ""))
        w("")

    w("## Ratios")
    w("")
    for k, v in derived.items():
        if k.startswith(("compactd_vs", "tmpfs_compactd_vs", "parquet_")):
            w(f"- {k.replace('_', ' ')}: {v:.2f}")
    w("")
    open(out_md, "w").write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
