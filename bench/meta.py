"""Issue 17 benchmark: metadata at RocketMQ scale (`meta_scale`).

One broker (ASYNC_FLUSH, `DELAYMQ_LOOP_LAG_MS=5`: its loop-lag probe logs every tick later than 5 ms)
goes through these phases, each driven from separate generator processes (their coroutines: bench.meta_load):

1. create N topics (100,000; `--quick` 10,000) with UPDATE_AND_CREATE_TOPIC, 2 connections x 16 in flight
   (every response waits for the MetaStore commit holding its topic), while another process sends
   GET_MAX_OFFSET 200 times a second: creates/s overall and per slice of N/10, the prober's round trip
   p50/p99/max;
2. create G subscription groups (10,000; `--quick` 2,000) the same way;
3. G groups commit offsets on 4 queues each every second (acknowledged UPDATE_CONSUMER_OFFSET; 40,000
   commits/s at G = 10,000) for D seconds (20; `--quick` 5) with the prober running: achieved commits/s,
   commit and prober round trips, the broker's CPU time per commit (event-loop thread, whole process);
4. the requests that walk the tables, once each with the prober running: GET_ALL_TOPIC_CONFIG,
   GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET, a route,
   two HEART_BEATs of a consumer subscribing 1,000 topics, a /metrics scrape (time, bytes);
5. the stock mqadmin (4.9.7, from ../shared; skipped, and said so, without it) against those tables:
   `topicList` (every tenant topic listed?), `consumerProgress -g cg-00007` and `consumerProgress` (seconds);
6. RSS before/after (bytes per topic = RSS growth over the creates / N), then SIGTERM and a restart:
   seconds from spawn to the ready line with those tables.

Loop stalls: `loop.stall` lines of the broker's probe during each phase; `loop_cpu_ms` tells a stall the
loop spent computing (>= 5 ms) from one where the process was not scheduled (2 shared cores).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.common import CLK_TCK, Broker, percentiles, pick_port, proc_cpu_s, proc_mem_mb
from bench.meta_load import PROBE_RATE, create_topic
from bench.procs import run_job
from codec.codes import RETRY_PREFIX, ResponseCode

LOAD = "bench.meta_load"  # the module of the generator coroutines each phase runs in spawned processes


def mqadmin_tools(addr: str, n_topics: int, group: str, topic: str) -> dict:
    """The stock mqadmin 4.9.7 (../shared, located as the Java tests do) against the broker holding every
    table: `topicList` must list all N tenant topics; `consumerProgress -g` the group's 4 queues of its
    topic; `consumerProgress` (no -g: it walks the whole topic list for %RETRY% topics) the group."""
    from tests.helpers.java import ROCKETMQ_JAVA, java_available, mqadmin

    if not java_available():
        return {"skipped": f"no Apache RocketMQ 4.9.7 mqadmin at {ROCKETMQ_JAVA} or no java"}
    out: dict = {}
    t0 = time.monotonic()
    r = mqadmin("topicList", "-n", addr, timeout=600)
    names = set(r.stdout.split())
    listed = sum(f"tenant-{i:06d}" in names for i in range(n_topics))
    out["topicList"] = {"seconds": round(time.monotonic() - t0, 1), "returncode": r.returncode,
                        "tenant_topics_listed": listed, "ok": r.returncode == 0 and listed == n_topics}
    t0 = time.monotonic()
    r = mqadmin("consumerProgress", "-n", addr, "-g", group, timeout=600)
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] == [topic]]
    out["consumerProgress_group"] = {"seconds": round(time.monotonic() - t0, 1), "returncode": r.returncode,
                                     "queues_shown": len(rows), "ok": r.returncode == 0 and len(rows) == 4}
    t0 = time.monotonic()
    r = mqadmin("consumerProgress", "-n", addr, timeout=600)
    found = any(line.split()[:1] == [group] for line in r.stdout.splitlines())
    out["consumerProgress_all"] = {"seconds": round(time.monotonic() - t0, 1), "returncode": r.returncode,
                                   "group_listed": found, "ok": r.returncode == 0 and found}
    out["ok"] = all(v["ok"] for v in out.values())
    if not out["ok"]:
        out["output_tail"] = (r.stdout + r.stderr)[-2000:]
    return out


# ---------------------------------------------------------------- orchestration

def _stalls(stderr: Path, t0: float, t1: float) -> dict:
    """The broker probe's `loop.stall` lines logged between wall times t0 and t1: how many, the largest,
    how many the loop spent mostly computing (loop CPU >= half the lag; the rest: the process was not
    scheduled or waited for the GIL), and the three largest with the tail of the loop's stack; and the
    probe's `loop.gc_pause` lines (collections over 5 ms, with their generation)."""
    from datetime import datetime

    found = []
    gc_pauses: list[tuple[float, int]] = []
    try:
        lines = stderr.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        event = "gc" if '"loop.gc_pause"' in line else "stall" if '"loop.stall"' in line else None
        if event is None:
            continue
        try:
            d = json.loads(line)
            ts = datetime.fromisoformat(str(d.get("timestamp")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if not t0 <= ts <= t1:
            continue
        if event == "gc":
            gc_pauses.append((float(d.get("ms", 0)), int(d.get("generation", -1))))
        else:
            stack = [x.strip() for x in str(d.get("stack") or "").splitlines() if x.strip().startswith("File")]
            found.append((float(d.get("lag_ms", 0)), float(d.get("loop_cpu_ms", 0)), stack[-2:]))
    busy = [f for f in found if f[1] >= f[0] / 2]
    top = sorted(found, reverse=True)[:3]
    return {"stalls_over_5ms": len(found), "max_lag_ms": max((f[0] for f in found), default=0.0),
            "busy_stalls": len(busy), "max_busy_lag_ms": max((f[0] for f in busy), default=0.0),
            "largest": [{"lag_ms": lag, "loop_cpu_ms": cpu, "stack_tail": st} for lag, cpu, st in top],
            "gc_pauses_over_5ms": [{"ms": ms, "generation": gen} for ms, gen in sorted(gc_pauses, reverse=True)[:5]],
            "gc_pause_count": len(gc_pauses)}


def _loop_thread_cpu_s(pid: int) -> float:
    """utime + stime of the broker's main thread (its event loop: the thread whose id is the pid)."""
    data = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rtt(samples, t0: float, t1: float) -> dict:
    return percentiles([ms for ts, ms in samples if t0 <= ts <= t1])


def _phase(b: Broker, stop: Path, jobs: list[tuple[str, dict]], max_s: float) -> tuple[list[dict], dict, float, float]:
    """Run `jobs` with the prober beside them; (job results, prober result, wall t0, t1)."""
    if stop.exists():
        stop.unlink()
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(jobs) + 1, mp_context=ctx) as pool:
        prober = pool.submit(run_job, LOAD, "probe", {"addr": b.addr, "stop_file": str(stop), "max_s": max_s})
        futs = [pool.submit(run_job, LOAD, name, kw) for name, kw in jobs]
        results = [f.result() for f in futs]
        t1 = time.time()
        stop.touch()
        pr = prober.result()
    return results, pr, t0, t1


def bench_meta_scale(quick: bool) -> dict:
    n_topics = int(os.environ.get("BENCH_META_TOPICS") or (10_000 if quick else 100_000))
    n_groups = int(os.environ.get("BENCH_META_GROUPS") or (2_000 if quick else 10_000))
    commit_s = 5 if quick else 20
    conns, window = 2, 16
    os.environ["DELAYMQ_LOOP_LAG_MS"] = "5"  # inherited by the broker process only matters there
    stop = Path(tempfile.mkdtemp(prefix="meta-bench-")) / "stop"
    out: dict = {"config": {"topics": n_topics, "groups": n_groups, "commit_seconds": commit_s,
                            "create_connections": conns, "window": window, "probe_rate": PROBE_RATE,
                            "flush": "ASYNC_FLUSH"}}
    metrics_port = pick_port()
    with Broker({"flushDiskType": "ASYNC_FLUSH", "metricsPort": str(metrics_port)}) as b:
        err = b.work / "broker.stderr"
        empty_start_s = round(b.ready_at - b.started_at, 2)  # the same start with an empty store: the baseline
        time.sleep(1.0)  # bench pacing: let start-up settle before the baseline RSS
        mem0 = proc_mem_mb(b.pid)
        per = n_topics // conns
        jobs = [("create_many", {"addr": b.addr, "kind": "topic", "start": i * per, "n": per, "window": window})
                for i in range(conns)]
        res, pr, t0, t1 = _phase(b, stop, jobs, 3600)
        mem1 = proc_mem_mb(b.pid)
        marks = sorted(m for r in res for m in r["marks"])  # every 1000 creates over both connections
        slice_n = max(1, len(marks) // 10)
        slices = []
        prev = 0.0
        for k in range(slice_n - 1, len(marks), slice_n):
            slices.append(round(slice_n * 1000 / max(1e-9, marks[k] - prev)))
            prev = marks[k]
        seconds = max(r["seconds"] for r in res)
        out["create_topics"] = {
            "seconds": round(seconds, 2), "rate_per_s": round(n_topics / seconds),
            "slice_rates_per_s": slices, "min_slice_rate_per_s": min(slices) if slices else 0,
            "errors": sum(r["errors"] for r in res), "probe_rtt_ms": _rtt(pr["samples"], t0, t1),
            "probe_errors": pr["errors"], "loop": _stalls(err, t0, t1),
            "rss_mb_before": mem0, "rss_mb_after": mem1,
            "bytes_per_topic": round((mem1["RssAnon"] - mem0["RssAnon"]) * 1048576 / n_topics)}

        per = n_groups // conns
        jobs = [("create_many", {"addr": b.addr, "kind": "group", "start": i * per, "n": per, "window": window})
                for i in range(conns)]
        res, pr, t0, t1 = _phase(b, stop, jobs, 600)
        seconds = max(r["seconds"] for r in res)
        out["create_groups"] = {"seconds": round(seconds, 2), "rate_per_s": round(n_groups / seconds),
                                "errors": sum(r["errors"] for r in res), "probe_rtt_ms": _rtt(pr["samples"], t0, t1),
                                "loop": _stalls(err, t0, t1)}

        half = n_groups // 2
        jobs = [("commit_offsets", {"addr": b.addr, "g0": g0, "g1": g1, "duration_s": commit_s, "topics": n_topics})
                for g0, g1 in ((0, half), (half, n_groups))]
        cpu0, loop0 = proc_cpu_s(b.pid), _loop_thread_cpu_s(b.pid)
        res, pr, t0, t1 = _phase(b, stop, jobs, 600)
        cpu1, loop1 = proc_cpu_s(b.pid), _loop_thread_cpu_s(b.pid)
        ok = sum(r["ok"] for r in res)
        out["commit_offsets"] = {
            # CPU time, not wall clock (the host is shared): the broker's main (event loop) thread and the
            # whole process (with the meta writer thread), over the phase, per acknowledged commit
            "broker_cpu_us_per_commit": {"loop_thread": round((loop1 - loop0) * 1e6 / max(1, ok), 2),
                                         "process": round((cpu1 - cpu0) * 1e6 / max(1, ok), 2)},
            "target_per_s": n_groups * 4, "acked_per_s": round(ok / max(r["seconds"] for r in res)),
            "sent": sum(r["sent"] for r in res), "ok": ok, "errors": sum(r["errors"] for r in res),
            "lost": sum(r["lost"] for r in res), "commit_rtt_ms": [r["rtt_ms"] for r in res],
            "probe_rtt_ms": _rtt(pr["samples"], t0, t1), "loop": _stalls(err, t0, t1)}
        mem2 = proc_mem_mb(b.pid)

        res, pr, t0, t1 = _phase(b, stop, [("whole_tables", {"addr": b.addr, "topics": n_topics,
                                                              "metrics_port": metrics_port})], 600)
        out["whole_tables"] = {**res[0], "probe_rtt_ms": _rtt(pr["samples"], t0, t1), "loop": _stalls(err, t0, t1)}
        out["rss_mb_with_tables"] = mem2

        # a consumer's heartbeat makes its group's retry topic: made here for the one group mqadmin looks at
        g = 7
        code = asyncio.run(create_topic(b.addr, f"{RETRY_PREFIX}cg-{g:05d}"))
        out["mqadmin"] = mqadmin_tools(b.addr, n_topics, f"cg-{g:05d}", f"tenant-{g % n_topics:06d}") if code == ResponseCode.SUCCESS \
            else {"ok": False, "error": f"creating the retry topic answered {code}"}

        stop_s = b.stop()
        t_spawn = time.monotonic()
        b.start(timeout=120)
        out["restart"] = {"shutdown_s": round(stop_s, 2), "start_to_ready_s": round(b.ready_at - t_spawn, 2),
                          "empty_store_start_to_ready_s": empty_start_s,
                          "rss_mb_after_restart": proc_mem_mb(b.pid)}
    ct, co = out["create_topics"], out["commit_offsets"]
    probe_p99 = max(ct["probe_rtt_ms"].get("p99", 0), co["probe_rtt_ms"].get("p99", 0),
                    out["create_groups"]["probe_rtt_ms"].get("p99", 0))
    out["headline"] = {"creates_per_s": ct["rate_per_s"], "min_slice_creates_per_s": ct["min_slice_rate_per_s"],
                       "probe_p99_ms": probe_p99, "probe_max_ms": max(ct["probe_rtt_ms"].get("max", 0),
                                                                      co["probe_rtt_ms"].get("max", 0)),
                       "commits_acked_per_s": co["acked_per_s"],
                       "commit_loop_cpu_us": co["broker_cpu_us_per_commit"]["loop_thread"],
                       "restart_s": out["restart"]["start_to_ready_s"],
                       "empty_start_s": out["restart"]["empty_store_start_to_ready_s"],
                       "bytes_per_topic": ct["bytes_per_topic"],
                       "rss_mb": out["rss_mb_with_tables"].get("VmRSS")}
    out["target"] = ">= 2,000 creates/s sustained, prober p99 < 5 ms, restart < 3 s"
    mq = out["mqadmin"]
    out["headline"]["mqadmin"] = "skipped" if "skipped" in mq else ("ok" if mq.get("ok") else "FAILED")
    out["met"] = (ct["min_slice_rate_per_s"] >= 2000 and probe_p99 < 5.0 and out["restart"]["start_to_ready_s"] < 3.0
                  and ct["errors"] == 0 and co["errors"] == 0 and co["lost"] == 0
                  and out["mqadmin"].get("ok") is not False)
    return out


BENCHES = {"meta_scale": bench_meta_scale}
