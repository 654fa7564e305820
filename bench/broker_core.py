"""Issue 2 benchmarks: sync round trip, pipelined send, pull, produce->consume latency, idle RSS."""

from __future__ import annotations

import time

from bench import wire
from bench.common import Broker, CpuMeter, proc_rss_mb
from bench.procs import run_here, run_one, run_parallel
from codec.properties import MessageConst

BASE_CONF = {"flushDiskType": "ASYNC_FLUSH"}


def _create(addr: str, topic: str, queues: int) -> None:
    async def go():
        c = await wire.connect(addr)
        await wire.create_topic(c, topic, queues)
        c.close()
    run_here(go)


def _settle(seconds: float = 0.5) -> None:
    time.sleep(seconds)  # bench pacing between phases, not synchronisation


def bench_sync_rtt(quick: bool) -> dict:
    n = 2000 if quick else 10000
    rate = 1000
    with Broker(BASE_CONF) as b:
        _create(b.addr, "BenchRtt", 4)
        run_one("sync_rtt", addr=b.addr, topic="BenchRtt", n=200, rate=rate)  # warm-up
        cpu = CpuMeter(b.pid).start()
        r = run_one("sync_rtt", addr=b.addr, topic="BenchRtt", n=n, rate=rate)
        r["broker_cpu"] = cpu.stop()
    p99_ms = r["rtt_us"]["p99"] / 1000
    return {"config": {"n": n, "rate_per_s": rate, "body": 128, "connections": 1, "flush": "ASYNC_FLUSH"},
            "raw": r, "headline": {"p50_us": r["rtt_us"]["p50"], "p99_us": r["rtt_us"]["p99"]},
            "target": "p99 <= 1 ms", "met": p99_ms <= 1.0}


def bench_send_throughput(quick: bool) -> dict:
    n = 60000 if quick else 300000
    conns, window, gens = 4, 64, 1
    runs = {}
    # what a Java producer sends with every message (the generator patches nothing in it: the
    # broker sees one UNIQ_KEY repeated, which costs it the same as distinct ones)
    java_props = wire.props_string({MessageConst.UNIQ_KEY: "7F0000010B5C2A139A5F4B1E2E3C0000", MessageConst.WAIT: "true",
                                    MessageConst.TAGS: "TagA"})
    for name, size, props in (("128B", 128, ""), ("1KiB", 1024, ""), ("128B_java_props", 128, java_props)):
        with Broker(BASE_CONF) as b:
            _create(b.addr, "BenchSend", 8)
            run_one("send_closed_loop", addr=b.addr, topic="BenchSend", n=20000, conns=conns, window=window,
                    body_size=size, queues=8, properties=props)  # warm-up (page faults of the first mapped file)
            cpu = CpuMeter(b.pid).start()
            per = n // gens
            res = run_parallel([("send_closed_loop", dict(addr=b.addr, topic="BenchSend", n=per, conns=conns,
                                                          window=window, body_size=size, queues=8,
                                                          properties=props))] * gens)
            usage = cpu.stop()
            ok = sum(r["ok"] for r in res)
            el = max(r["elapsed_s"] for r in res)
            runs[name] = {"generators": res, "ok": ok, "rate": round(ok / el, 1), "properties": props,
                          "broker_cpu": usage, "broker_cpu_us_per_msg": round(usage["cpu_s"] / ok * 1e6, 2),
                          "broker_rss_mb": round(proc_rss_mb(b.pid), 1)}
    r128 = runs["128B"]["rate"]
    return {"config": {"n": n, "connections": conns * gens, "in_flight_per_connection": window,
                       "generator_processes": gens, "queues": 8, "flush": "ASYNC_FLUSH",
                       "header": "SEND_MESSAGE_V2, ROCKETMQ binary serialization"},
            "raw": runs, "headline": {"msg_s_128B": r128, "msg_s_1KiB": runs["1KiB"]["rate"],
                                      "msg_s_128B_java_props": runs["128B_java_props"]["rate"],
                                      "broker_cpu_us_per_msg_128B": runs["128B"]["broker_cpu_us_per_msg"]},
            "target": ">= 45,000 msg/s at 128 B", "met": r128 >= 45000}


def bench_pull_throughput(quick: bool) -> dict:
    n = 100000 if quick else 400000
    queues = 8
    with Broker(BASE_CONF) as b:
        _create(b.addr, "BenchPull", queues)
        fill = run_one("send_closed_loop", addr=b.addr, topic="BenchPull", n=n, conns=4, window=64,
                       body_size=128, queues=queues)
        per_queue = [n // queues] * queues
        cpu = CpuMeter(b.pid).start()
        r = run_one("pull_all", addr=b.addr, topic="BenchPull", queues=queues, per_queue=per_queue, window=8)
        r["broker_cpu"] = cpu.stop()
        r["fill"] = fill
    return {"config": {"n": n, "queues": queues, "maxMsgNums": 32, "pulls_in_flight_per_queue": 8, "body": 128},
            "raw": r, "headline": {"msg_s": r["rate"], "MiB_s": r["mib_s"]}, "target": "(none)", "met": None}


def bench_e2e_latency(quick: bool) -> dict:
    rate, dur = 1000, (5 if quick else 20)
    with Broker(BASE_CONF) as b:
        _create(b.addr, "BenchE2E", 4)
        start_at = time.time() + 2.0
        cons, prod = run_parallel([
            ("consume", dict(addr=b.addr, topic="BenchE2E", queues=4, expected=rate * dur, deadline_s=dur + 30)),
            ("send_paced", dict(addr=b.addr, topic="BenchE2E", rate=rate, duration_s=dur, queues=4, conns=1,
                                start_at=start_at)),
        ])
    p99 = cons["e2e_ms"].get("p99", float("inf"))
    return {"config": {"rate_per_s": rate, "duration_s": dur, "queues": 4, "consumer": "long-poll pull, 32/pull"},
            "raw": {"consumer": cons, "producer": prod},
            "headline": {"p50_ms": cons["e2e_ms"].get("p50"), "p99_ms": p99, "received": cons["received"]},
            "target": "p99 <= 5 ms", "met": p99 <= 5}


def bench_idle_rss(quick: bool) -> dict:
    with Broker(BASE_CONF) as b:
        _settle(3.0)
        rss = proc_rss_mb(b.pid)
        cpu = CpuMeter(b.pid).start()
        _settle(5.0)
        idle_cpu = cpu.stop()
    return {"config": {"defaults": "mappedFileSizeCommitLog 1 GiB (mmap, only touched pages count)"},
            "raw": {"rss_mb": round(rss, 1), "idle_cpu": idle_cpu},
            "headline": {"rss_mb": round(rss, 1), "idle_cpu_util": idle_cpu["cpu_util"]},
            "target": "< 100 MB", "met": rss < 100}


BENCHES = {
    "sync_rtt": bench_sync_rtt,
    "send_throughput": bench_send_throughput,
    "pull_throughput": bench_pull_throughput,
    "e2e_latency": bench_e2e_latency,
    "idle_rss": bench_idle_rss,
}
