"""Instructions per gRPC SendMessage of a server under callgrind: the bare grpc.aio echo (the floor,
bench.grpc_echo), delaymq's in-broker endpoint and delaymq-proxy, a figure a noisy shared host cannot move
(`python -m bench.grpc_instr [N] [--kinds echo,delaymq_local,delaymq_proxy] [--window W]`; run it in two
trees to A/B).

`delaymq_proxy`: a name server and a broker run as usual (not under valgrind; the topic created on the
broker and its route on the name server before the calls), the proxy under callgrind: its instructions per
SendMessage, the gRPC side and its remoting send to the broker (one SEND_MESSAGE_V2 round trip per message;
server.proxy.backend). Its route cache lives as long as the run (routeCacheTtlMs=3600000): under callgrind
the default 3 s would refresh the route every few dozen calls instead of every few thousand.

The server runs under `valgrind --tool=callgrind --instr-atstart=no` (start-up is not instrumented,
so a broker starts in a minute or two); one client process (this one, uvloop, not under valgrind)
sends a warm-up of 200 calls, then `callgrind_control -i on` and N calls (W in flight, default 16; one
128 B NORMAL message each, a distinct message id per call), then a dump, then as long idle and a second
dump. Every thread counts (grpc's C core, the loop, the store's flush thread). Under callgrind the calls
take ~50x longer, so the broker's clock-driven work (flush thread, scheduler ticks) would be charged to
them: Ir per call = (calls' Ir - idle Ir per second x the calls' seconds) / N (the gross figure too). Prints one JSON line per
kind and the ratio to the echo.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.common import HOST, READY_RE, pick_port, store_base

SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
WARMUP = 200
TOPIC = "BenchInstr"
KINDS = ("echo", "delaymq_local", "delaymq_proxy")


def _ir(path: str) -> int:
    """The dump's `totals:` line (its `summary:` may read 0 when instrumentation started late)."""
    with open(path) as f:
        for line in f:
            m = re.match(r"^totals:\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no totals in {path}")


def requests(n: int, topic: str) -> list[bytes]:
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    out = []
    for i in range(n):
        m = pb.Message(topic=pb.Resource(name=topic), body=b"x" * 128)
        m.system_properties.message_id = f"01BENCHINSTR{i:016d}"
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.born_timestamp.FromMilliseconds(1_700_000_000_000 + i)
        out.append(spb.SendMessageRequest(messages=[m]).SerializeToString())
    return out


async def _calls(addr: str, reqs: list[bytes], window: int) -> int:
    import grpc

    from server.grpc.v2 import service_pb2 as spb
    async with grpc.aio.insecure_channel(addr) as ch:
        call = ch.unary_unary(SEND_METHOD, request_serializer=None,
                              response_deserializer=spb.SendMessageResponse.FromString)
        await asyncio.wait_for(ch.channel_ready(), 300)
        it = iter(reqs)
        errors = 0

        async def worker() -> None:
            nonlocal errors
            for r in it:
                resp = await call(r, timeout=300)
                errors += resp.status.code != 20000

        await asyncio.gather(*(worker() for _ in range(window)))
    return errors


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)


def probe(kind: str, n: int, window: int, out: str) -> dict:
    work = tempfile.mkdtemp(prefix="grpc-instr-", dir=store_base())
    gport = pick_port()
    wrap = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    for f in (out, f"{out}.1", f"{out}.2", f"{out}.3"):
        if os.path.exists(f):
            os.unlink(f)
    closers: list = []
    if kind == "echo":
        argv = [*wrap, sys.executable, "-m", "bench.grpc_echo", "aio_uvloop", str(gport)]
        ready = "echo ready on"
    elif kind == "delaymq_local":
        conf = os.path.join(work, "broker.conf")
        with open(conf, "w") as f:
            f.write(f"flushDiskType=ASYNC_FLUSH\ngrpcListenPort={gport}\ndefaultTopicQueueNums=8\n")
        argv = [*wrap, sys.executable, "-m", "server", "--store", os.path.join(work, "store"), "--port",
                str(pick_port()), "--config", conf, "--log-level", "warning"]
        ready = READY_RE.pattern
    elif kind == "delaymq_proxy":
        ns = _proxy_backends(closers)
        conf = os.path.join(work, "proxy.conf")
        with open(conf, "w") as f:
            f.write("routeCacheTtlMs=3600000\n")
        argv = [*wrap, sys.executable, "-m", "server.proxy", "--namesrv", ns, "--grpc-port", str(gport), "--host",
                HOST, "--config", conf, "--log-level", "warning", "--grpc-server-stack", "grpcio"]
        ready = r"proxy ready on"
    else:
        raise ValueError(f"unknown kind {kind!r}")
    try:
        return _measure(kind, argv, ready, gport, work, n, window, out)
    finally:
        for close in reversed(closers):
            close()


def _proxy_backends(closers: list) -> str:
    """A name server and one broker (8 queues of TOPIC, registered with the name server) for the proxy to send
    to; their stops appended to `closers`. Returns the name server's address."""
    from bench.common import Broker
    from bench.grpc_floor import Proc
    port = pick_port()
    ns_proc = Proc([sys.executable, "-m", "server.cluster.namesrv", "--port", str(port), "--log-level", "warning"],
                   r"namesrv ready on")
    closers.append(ns_proc.stop)
    ns = f"{HOST}:{port}"
    b = Broker({"flushDiskType": "ASYNC_FLUSH", "defaultTopicQueueNums": 8, "namesrvAddr": ns,
                "brokerName": "bench-instr"})
    closers.append(b.cleanup)
    b.start()
    asyncio.run(_create_topic(b.addr, ns))
    return ns


async def _create_topic(broker: str, ns: str) -> None:
    """TOPIC on the broker, then wait (bounded) until the name server routes it."""
    from bench import wire
    from codec.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
    from codec.command import RemotingCommand
    conn = await wire.connect(broker)
    try:
        r = await conn.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}), timeout=30)
        if r.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"create topic {TOPIC}: {r.code} {r.remark}")
    finally:
        conn.close()
    conn = await wire.connect(ns)
    try:
        for _ in range(600):
            r = await conn.invoke(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
                                  timeout=30)
            if r.code == ResponseCode.SUCCESS:
                return
            await asyncio.sleep(0.1)  # polling the name server for the broker's registration, bounded
        raise RuntimeError(f"the name server has no route of {TOPIC} after 60 s")
    finally:
        conn.close()


def _measure(kind: str, argv: list[str], ready: str, gport: int, work: str, n: int, window: int,
             out: str) -> dict:
    import uvloop
    with open(os.path.join(work, "stderr"), "wb") as err:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if re.search(ready, line.decode("utf-8", "replace")):
                break
        else:
            raise RuntimeError(f"{kind} exited before it was ready (stderr in {work})")
        addr = f"{HOST}:{gport}"
        reqs = requests(WARMUP + n, TOPIC)
        warm_errors = uvloop.run(_calls(addr, reqs[:WARMUP], window))
        _control(p.pid, "--zero")
        _control(p.pid, "-i", "on")
        t0 = time.monotonic()
        errors = uvloop.run(_calls(addr, reqs[WARMUP:], window))
        calls_s = time.monotonic() - t0
        _control(p.pid, "--dump=calls")
        t0 = time.monotonic()
        time.sleep(calls_s)  # as long idle: what the server's timers cost by the clock, not by the calls
        _control(p.pid, "--dump=idle")
        idle_s = time.monotonic() - t0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(300)
    ir, idle = _ir(f"{out}.1"), _ir(f"{out}.2")
    shutil.rmtree(work, ignore_errors=True)
    net = ir - idle * calls_s / idle_s
    return {"kind": kind, "n": n, "window": window, "errors": errors, "warm_errors": warm_errors,
            "calls_s": round(calls_s, 1), "ir_idle_per_s": round(idle / idle_s),
            "ir_per_call_gross": round(ir / n), "ir_per_call": round(net / n)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_instr")
    p.add_argument("n", type=int, nargs="?", default=1000)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--out", default="/tmp/grpc_instr.cg")
    a = p.parse_args(argv)
    res = {}
    for kind in a.kinds.split(","):
        res[kind] = probe(kind, a.n, a.window, f"{a.out}.{kind}")
        print(json.dumps(res[kind]), flush=True)
    if "echo" in res:
        print(json.dumps({f"{k}_x_echo": round(r["ir_per_call"] / res["echo"]["ir_per_call"], 3)
                          for k, r in res.items() if k != "echo"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
