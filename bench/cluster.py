"""Issue 13 benchmark: send throughput and delay-level drain with 1 and 2 brokers behind delaymq-namesrv.

`cluster_scale`: a name server and 1 or 2 brokers (different brokerName, each registered with it). The
same load-generator budget in both variants: 2 generator processes x 2 connections x 64 in flight,
128 B, 8 queues per broker; with 2 brokers each generator sends to one broker (what a producer does
after the route lookup: its queues span both brokers). Then the drain: N DELAY messages (level = 20 s)
spread over the brokers, every broker stopped until all are due, all restarted at once; the drain rate
is N / (first delivered STORETIMESTAMP -> last, across brokers; the brokers are restarted together). CPU: /proc per process (each broker,
the generators, the name server) and the machine's busy share from /proc/stat, to show where it goes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import wire
from bench.broker_core import _create
from bench.common import HOST, REPO, Broker, CpuMeter, CpuSampler, pick_port, proc_cpu_s, store_base
from bench.procs import run_one, run_parallel
from codec.properties import MessageConst

TOPIC_QUEUES = 8
READY_RE = re.compile(r"delaymq namesrv ready on")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds, total CPU seconds) of all CPUs since boot, from /proc/stat."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return (sum(parts) - idle) / CLK_TCK, sum(parts) / CLK_TCK


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


class Namesrv:
    def __init__(self) -> None:
        self.port = pick_port()
        self.work = Path(tempfile.mkdtemp(prefix="delaymq-bench-ns-", dir=store_base()))
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    def __enter__(self) -> Namesrv:
        err = open(self.work / "namesrv.stderr", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "server.cluster.namesrv", "--port", str(self.port),
                                      "--log-level", "warning"], cwd=REPO, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=err, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        err.close()
        ready = threading.Event()

        def reader(proc=self.proc):
            for raw in proc.stdout:
                if READY_RE.search(raw.decode("utf-8", "replace")):
                    ready.set()
            ready.set()

        threading.Thread(target=reader, daemon=True).start()
        if not ready.wait(30) or self.proc.poll() is not None:
            raise RuntimeError("namesrv did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        shutil.rmtree(self.work, ignore_errors=True)


def _brokers(ns: Namesrv, count: int, extra: dict | None = None) -> list[Broker]:
    return [Broker({"flushDiskType": "ASYNC_FLUSH", "namesrvAddr": ns.addr, "brokerName": f"bench-{chr(97 + i)}",
                    **(extra or {})}) for i in range(count)]


def _start_all(brokers: list[Broker]) -> None:
    errors: list[BaseException] = []

    def go(b: Broker) -> None:
        try:
            b.start()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=go, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def send_run(n: int, count: int) -> dict:
    with Namesrv() as ns:
        brokers = _brokers(ns, count)
        try:
            for b in brokers:
                b.start()
                _create(b.addr, "BenchSend", TOPIC_QUEUES)
            targets = [brokers[i % count] for i in range(2)]  # 2 generators: both on one broker, or one each
            run_parallel([("send_closed_loop", dict(addr=b.addr, topic="BenchSend", n=10000, conns=2, window=64,
                                                    body_size=128, queues=TOPIC_QUEUES)) for b in targets])  # warm-up
            meters = [CpuMeter(b.pid).start() for b in brokers]
            ns_c0 = proc_cpu_s(ns.proc.pid)
            busy0, total0 = machine_busy()
            res = run_parallel([("send_closed_loop", dict(addr=b.addr, topic="BenchSend", n=n // 2, conns=2,
                                                          window=64, body_size=128, queues=TOPIC_QUEUES))
                                for b in targets])
            busy1, total1 = machine_busy()
            usage = [m.stop() for m in meters]
            ok = sum(r["ok"] for r in res)
            el = max(r["elapsed_s"] for r in res)
            gen_cpu_s = sum(r["generator_cpu_us_per_msg"] * r["n"] / 1e6 for r in res)
            ns_cpu_s = proc_cpu_s(ns.proc.pid) - ns_c0
            ours = sum(u["cpu_s"] for u in usage) + gen_cpu_s + ns_cpu_s
            return {"brokers": count, "ok": ok, "errors": sum(r["errors"] for r in res), "elapsed_s": el,
                    "rate": round(ok / el, 1), "generators": res,
                    "broker_cpu": usage, "broker_cpu_s": round(sum(u["cpu_s"] for u in usage), 3),
                    "broker_cpu_us_per_msg": round(sum(u["cpu_s"] for u in usage) / ok * 1e6, 2),
                    "generator_cpu_s": round(gen_cpu_s, 3),
                    "namesrv_cpu_s": round(ns_cpu_s, 3),
                    "machine_busy_share": round((busy1 - busy0) / max(1e-9, total1 - total0), 3),
                    "other_processes_cpu_s": round(max(0.0, busy1 - busy0 - ours), 3)}
        finally:
            for b in brokers:
                b.cleanup()


def drain_run(n: int, count: int, delay_s: int) -> dict:
    conf = {"messageDelayLevel": " ".join(f"{delay_s}s" for _ in range(4))}
    topic = "BenchDrain"
    with Namesrv() as ns:
        brokers = _brokers(ns, count, conf)
        try:
            for b in brokers:
                b.start()
                _create(b.addr, topic, TOPIC_QUEUES)
            t_send0 = time.time()
            sends = run_parallel([("send_closed_loop", dict(
                addr=b.addr, topic=topic, n=n // count, conns=2, window=64, body_size=128, queues=TOPIC_QUEUES,
                properties=wire.props_string({MessageConst.DELAY: "1"}))) for b in brokers])
            send_s = time.time() - t_send0
            for b in brokers:
                b.stop()
            time.sleep(max(0.0, t_send0 + send_s + delay_s + 2.0 - time.time()))  # all due while brokers are down
            restart_ms = int(time.time() * 1000)
            for b in brokers:
                b.sampler = CpuSampler()
            _start_all(brokers)  # at once: the drain starts before the ready line
            busy0, total0 = machine_busy()
            for b in brokers:  # every record delivered: poll the real topic's max offsets
                run_one("watch_max_offsets", addr=b.addr, topic=topic, queues=TOPIC_QUEUES,
                        target=n // count, deadline_s=max(120.0, n / 2000), interval_s=0.05, base=0)
            busy1, total1 = machine_busy()
            per_broker = []
            all_ts: list[int] = []
            for b in brokers:
                ts = sorted(t for t in run_one("store_timestamps", addr=b.addr, topic=topic,
                                               queues=TOPIC_QUEUES)["store_ts"] if t >= restart_ms)
                b.sampler.stop()
                cpu = b.sampler.cpu_between(ts[0], ts[-1]) if ts else 0.0
                per_broker.append({"delivered": len(ts), "span_ms": (ts[-1] - ts[0]) if ts else None,
                                   "rate": round(len(ts) / max(1, ts[-1] - ts[0]) * 1000, 1) if ts else None,
                                   "cpu_s": round(cpu, 3),
                                   "cpu_us_per_msg": round(cpu / len(ts) * 1e6, 1) if ts else None})
                all_ts += ts
            all_ts.sort()
            span = max(1, all_ts[-1] - all_ts[0]) if all_ts else 1
            return {"brokers": count, "n": n, "sent_ok": sum(s["ok"] for s in sends), "delivered": len(all_ts),
                    "drain_span_ms": span, "rate_first_to_last": round(len(all_ts) / span * 1000, 1),
                    "per_broker": per_broker,
                    "machine_busy_share_during_watch": round((busy1 - busy0) / max(1e-9, total1 - total0), 3)}
        finally:
            for b in brokers:
                b.cleanup()


def bench_cluster_scale(quick: bool) -> dict:
    n_send = 60000 if quick else 200000
    n_drain = 40000 if quick else 100000
    delay_s = 10 if quick else 15
    repeats = 1 if quick else 3
    send: dict[str, list[dict]] = {"1broker": [], "2broker": []}
    drain: dict[str, list[dict]] = {"1broker": [], "2broker": []}
    for _ in range(repeats):  # variants alternate so a noisy neighbour spreads over both
        for c in (1, 2):
            send[f"{c}broker"].append(send_run(n_send, c))
    for _ in range(repeats):
        for c in (1, 2):
            drain[f"{c}broker"].append(drain_run(n_drain, c, delay_s))
    s1, s2 = (_median([r["rate"] for r in send[k]]) for k in ("1broker", "2broker"))
    d1, d2 = (_median([r["rate_first_to_last"] for r in drain[k]]) for k in ("1broker", "2broker"))
    cpu1, cpu2 = (_median([r["broker_cpu_us_per_msg"] for r in send[k]]) for k in ("1broker", "2broker"))
    return {"config": {"n_send": n_send, "n_drain": n_drain, "level_delay_s": delay_s, "queues_per_broker": TOPIC_QUEUES,
                       "generators": "2 processes x 2 connections x 64 in flight, 128 B", "repeats": repeats,
                       "figures": "median of the repeats", "cpus": os.cpu_count()},
            "raw": {"send": send, "drain": drain},
            "headline": {"send_1broker_msg_s": s1, "send_2broker_msg_s": s2, "send_scaling": round(s2 / s1, 2),
                         "drain_1broker_msg_s": d1, "drain_2broker_msg_s": d2, "drain_scaling": round(d2 / d1, 2),
                         "broker_cpu_us_per_msg_1": cpu1, "broker_cpu_us_per_msg_2": cpu2},
            "target": "(report: scaling on this machine)", "met": None}


BENCHES = {"cluster_scale": bench_cluster_scale}
