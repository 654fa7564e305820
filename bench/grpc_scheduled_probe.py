"""Issue 24 (envoylate): bench.grpc_topology's scheduled phase alone, delaymq-proxy's two gRPC stacks side by side.

`python -m bench.grpc_scheduled_probe [--rounds N] [--seconds S] [--load K] [--setups a,b]`: the setups (default
delaymq_proxy1,delaymq_envoy1) are started at once and probed alternately, N rounds each. A probe is the
topology's scheduled phase (2 client processes, 500 DELAY SendMessage/s paced open-loop, one message per
call, due 3 s + i % 997 ms after its slot; received and acked as they come) with each SendMessage's round trip
timed at the client. `--load K` runs K busy-looping processes during each probe (a loaded host, on demand:
the lateness under load was the issue; at most the probe's length). Per probe: send round trip p50/p99/max,
store lateness p50/p99 (store timestamp - delivery timestamp), receive lateness p50/p99, CPU seconds of each
process. No pass/fail: the figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from bench.common import percentiles
from bench.grpc_floor import CLIENTS, metadata
from bench.grpc_topology import (
    DELAY_GROUP,
    DELAY_TOPIC,
    DUE_AFTER_MS,
    SCHEDULED_MAX,
    SCHEDULED_RATE,
    Setup,
    _cpu,
    start,
)


async def _sender(addr: str, client: int, clients: int, n: int, start_ms: int) -> dict:
    """bench.grpc_topology's scheduled sender, each call's round trip (ms) kept."""
    import grpc

    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    ch = grpc.aio.insecure_channel(addr)
    call = ch.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage", request_serializer=None,
                          response_deserializer=spb.SendMessageResponse.FromString)
    await ch.channel_ready()
    ok = errors = 0
    rtt: list[float] = []
    behind: list[float] = []  # ms the sender itself started a call after its slot (the client's own lateness)
    tasks = []
    md = metadata(client)

    async def one(data: bytes) -> None:
        nonlocal ok, errors
        t0 = time.monotonic()
        try:
            r = await call(data, timeout=30, metadata=md)
            ok += r.status.code == 20000
            errors += r.status.code != 20000
        except Exception:
            errors += 1
        rtt.append((time.monotonic() - t0) * 1000)

    for i in range(client, n, clients):
        slot = start_ms + i * 1000 // SCHEDULED_RATE
        m = pb.Message(topic=pb.Resource(name=DELAY_TOPIC), body=b"x" * 128)
        m.system_properties.message_id = f"01BENCHPROBE{client:04d}{i:012d}{start_ms}"
        m.system_properties.message_type = pb.DELAY
        m.system_properties.delivery_timestamp.FromMilliseconds(slot + DUE_AFTER_MS + i % 997)
        data = spb.SendMessageRequest(messages=[m]).SerializeToString()
        wait = slot / 1000 - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        behind.append(max(0.0, -wait * 1000))
        tasks.append(asyncio.ensure_future(one(data)))
    await asyncio.gather(*tasks)
    await ch.close()
    return {"ok": ok, "errors": errors, "rtt": rtt, "behind": behind}


def _sender_process(kwargs: dict) -> dict:
    import uvloop
    return uvloop.run(_sender(**kwargs))


def _warm(_: int) -> None:
    """A pool worker started and its imports done before the first probe's clock runs (spawning them inside
    the first probe's 1.5 s lead put its senders behind their slots on a loaded host)."""
    import grpc  # noqa: F401
    import uvloop  # noqa: F401

    import server.grpc.v2.service_pb2  # noqa: F401


def probe(s: Setup, seconds: float, pool: ProcessPoolExecutor, load: int) -> dict:
    from bench.grpc import _receive_all
    n = min(SCHEDULED_MAX, int(SCHEDULED_RATE * seconds))
    start_ms = int(time.time() * 1000) + 1500
    spin = [subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds + 6}\n"
                              "while time.time() < end: pass"]) for _ in range(load)]
    c0 = _cpu(s.pids)
    futs = [pool.submit(_sender_process, {"addr": s.grpc[c % len(s.grpc)], "client": c, "clients": CLIENTS,
                                          "n": n, "start_ms": start_ms}) for c in range(CLIENTS)]
    store_late: list[int] = []
    recv_late: list[int] = []

    def on_message(m, now_ms: int) -> None:
        sp = m.system_properties
        due = sp.delivery_timestamp.ToMilliseconds()
        store_late.append(sp.store_timestamp.ToMilliseconds() - due)
        recv_late.append(now_ms - due)

    deadline = seconds + (DUE_AFTER_MS + 997) / 1000 + 20

    async def all_channels() -> list[dict]:
        return await asyncio.gather(*(_receive_all(a, DELAY_TOPIC, DELAY_GROUP, n // len(s.grpc), conns=1,
                                                   deadline_s=deadline, on_message=on_message) for a in s.grpc))

    try:
        asyncio.run(all_channels())
        sent = [f.result(timeout=120) for f in futs]
    finally:
        for p in spin:
            p.kill()
            p.wait()
    c1 = _cpu(s.pids)
    pick = (50, 99)
    return {"n": n, "sent_ok": sum(p["ok"] for p in sent), "send_errors": sum(p["errors"] for p in sent),
            "received": len(store_late), "loadavg": round(os.getloadavg()[0], 1),
            "send_rtt_ms": percentiles([x for p in sent for x in p["rtt"]], pick),
            "sender_behind_ms": percentiles([x for p in sent for x in p["behind"]], pick),
            "store_late_ms": percentiles(store_late, pick), "receive_late_ms": percentiles(recv_late, pick),
            "cpu_s": {k: round(c1[k] - c0[k], 2) for k in c0}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_scheduled_probe")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--load", type=int, default=0, help="busy-looping processes during each probe (default 0)")
    p.add_argument("--setups", default="delaymq_proxy1,delaymq_envoy1")
    a = p.parse_args(argv)
    names = a.setups.split(",")
    setups: dict[str, Setup] = {}
    try:
        for name in names:
            setups[name] = start(name)
        with ProcessPoolExecutor(CLIENTS, mp_context=mp.get_context("spawn")) as pool:
            list(pool.map(_warm, range(CLIENTS * 2)))
            for r in range(a.rounds):
                for name in names:
                    res = {"setup": name, "round": r, **probe(setups[name], a.seconds, pool, a.load)}
                    print(json.dumps(res), flush=True)
    finally:
        for s in setups.values():
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
