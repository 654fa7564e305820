"""Issue 24 item 3: CPU per gRPC SendMessage of each candidate server stack, and of delaymq, in one run.

`python -m bench.grpc_floor [--seconds S] [--rounds R] [--kinds a,b,..]` (also `grpc_floor` in run_all):
for R rounds, each kind in turn (alternating, so a host that slows down mid-run slows every kind alike):
start its server process(es), open the load, warm up 1 s, measure S seconds, stop. The load is 2
spawned client processes, each one grpc.aio channel (uvloop) with 64 SendMessage calls in flight, the
same pre-serialized requests (one 128 B NORMAL message, topic BenchFloor, 4,096 distinct message ids per
client) for every kind. Per kind: calls/s
and server CPU µs per call (utime+stime of the server process from /proc over the window); for the proxy
also the broker behind it. The medians over the rounds are the headline.

Kinds: the bare echo servers of bench.grpc_echo (`aio_uvloop`, `aio_asyncio`, `sync`, `grpclib`, `granian`,
`pyvoy`, `pyvoy_connect`),
`delaymq_local` (a broker's in-broker gRPC endpoint), `delaymq_local_envoy` (the broker on grpcServerStack=envoy:
the server is the Envoy process the whole broker runs in), `delaymq_proxy` (delaymq-proxy + broker + name server),
`delaymq_proxy_envoy` (the same with the proxy on `grpcServerStack=envoy`: the server CPU is the Envoy
process's, the proxy's Python embedded in it, as for `pyvoy`; the launcher only waits; the broker's apart).
A kind whose stack is not installed or cannot serve gRPC to grpcio's client is reported with why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import REPO, Broker, pick_port, proc_cpu_s, write_result

ECHO_KINDS = ["aio_uvloop", "aio_asyncio", "sync", "grpclib", "granian", "pyvoy", "pyvoy_connect"]
DELAYMQ_KINDS = ["delaymq_local", "delaymq_local_envoy", "delaymq_proxy"]
# delaymq-proxy with grpcServerStack=envoy: Envoy's CPU (the proxy's Python embedded in it), as for `pyvoy`
DELAYMQ_ENVOY_KINDS = ["delaymq_proxy_envoy"]
ALL_KINDS = ECHO_KINDS + DELAYMQ_KINDS + DELAYMQ_ENVOY_KINDS
ON_ENVOY = ("delaymq_local_envoy", "delaymq_proxy_envoy")  # their own stack's floor is the pyvoy echo
SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
TOPIC = "BenchFloor"
CLIENTS, WINDOW, WARMUP_S = 2, 64, 1.0


def request_bytes(topic: str = TOPIC, i: int = 0, client: int = 0) -> bytes:
    """SendMessage of one 128 B NORMAL message whose id names the client and i (as the official clients
    send a new id per message)."""
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    m = pb.Message(topic=pb.Resource(name=topic), body=b"x" * 128)
    m.system_properties.message_id = f"01BENCHFLOOR{client:04d}{i:012d}"
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    return spb.SendMessageRequest(messages=[m]).SerializeToString()


DISTINCT = 4096  # distinct requests each client cycles through


def metadata(client: object) -> tuple[tuple[str, str], ...]:
    """What every official 5.x client sends with each call (Apache's proxy refuses a call without a client id)."""
    return (("x-mq-client-id", f"bench-{os.getpid()}-{client}"), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"), ("x-mq-client-version", "5.1.2"))


# ------------------------------------------------------------------ load client (spawned processes)

async def closed_loop(one, window: int, start_at: float, measure_from: float, end_at: float) -> dict:
    """`window` calls in flight until `end_at` (time.time()); `await one(i)` makes call i and answers an error
    text ("" when OK). Counts the answers that complete inside [measure_from, end_at]. Shared by every
    load client of the gRPC benches (and bench.grpc_topology's 4.x remoting one)."""
    sent = 0
    while time.time() < start_at:
        await asyncio.sleep(0.01)
    ok = errors = 0
    first_error = ""

    async def worker() -> None:
        nonlocal ok, errors, first_error, sent
        while time.time() < end_at:
            i = sent
            sent += 1
            try:
                error = await one(i)
            except Exception as e:
                error = repr(e)[:300]
            first_error = first_error or error
            if time.time() >= measure_from:
                ok += not error
                errors += bool(error)
            if error:
                await asyncio.sleep(0.01)

    await asyncio.gather(*(worker() for _ in range(window)))
    return {"ok": ok, "errors": errors, "first_error": first_error}


async def _load(addr: str, client: int, window: int, start_at: float, measure_from: float, end_at: float) -> dict:
    """SendMessage calls on one grpc.aio channel, `window` in flight (closed_loop)."""
    import grpc

    from server.grpc.v2 import service_pb2 as spb
    ch = grpc.aio.insecure_channel(addr)
    call = ch.unary_unary(SEND_METHOD, request_serializer=None, response_deserializer=spb.SendMessageResponse.FromString)
    await ch.channel_ready()
    payloads = [request_bytes(TOPIC, i, client) for i in range(DISTINCT)]
    md = metadata(client)

    async def one(i: int) -> str:
        r = await call(payloads[i % DISTINCT], timeout=10, metadata=md)
        return "" if r.status.code == 20000 else f"status {r.status.code} {r.status.message}"[:300]

    out = await closed_loop(one, window, start_at, measure_from, end_at)
    await ch.close()
    return out


def _client_process(kwargs: dict) -> dict:
    import uvloop
    return uvloop.run(_load(**kwargs))


# ------------------------------------------------------------------ servers

class Proc:
    """A server process started with `argv`, ready once a stdout line matches `ready`."""

    def __init__(self, argv: list[str], ready: str, env: dict | None = None, cwd: Path = REPO) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="delaymq-floor-"))
        err = open(self.work / "stderr", "wb")
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
        err.close()
        ok = threading.Event()
        self.ready_line = ""

        def reader() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace")
                if not ok.is_set() and re.search(ready, line):
                    self.ready_line = line.strip()
                    ok.set()
            ok.set()

        threading.Thread(target=reader, daemon=True).start()
        if not ok.wait(60) or self.proc.poll() is not None:
            rc = self.proc.poll()
            self.stop()
            raise RuntimeError(f"exited {rc}: {self.stderr_tail()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self) -> str:
        try:
            return (self.work / "stderr").read_bytes()[-600:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Target:
    """What a kind serves on: the address the load goes to and the processes whose CPU counts."""

    def __init__(self, addr: str, measured: dict[str, int], closers: list) -> None:
        self.addr = addr
        self.measured = measured
        self.closers = closers

    def close(self) -> None:
        for c in reversed(self.closers):
            try:
                c()
            except Exception:  # a stop failure must not keep the other processes running
                pass


def start_target(kind: str) -> Target:
    if kind in ECHO_KINDS:
        port = pick_port()
        p = Proc([sys.executable, "-m", "bench.grpc_echo", kind, str(port)], r"echo ready on")
        # a stack that serves from a child process (pyvoy's Envoy) names it: its CPU is the server's
        served_by = re.search(r" pid (\d+)", p.ready_line)
        return Target(f"127.0.0.1:{port}", {"server": int(served_by.group(1)) if served_by else p.pid}, [p.stop])
    if kind in ("delaymq_local", "delaymq_local_envoy"):
        stack = {"grpcServerStack": "envoy"} if kind == "delaymq_local_envoy" else {}
        b = Broker({"flushDiskType": "ASYNC_FLUSH", "grpcListenPort": pick_port(), "defaultTopicQueueNums": 8, **stack})
        b.start()
        # on Envoy the launcher only waits for a signal: the server is the Envoy child
        return Target(f"127.0.0.1:{b.config['grpcListenPort']}", {"server": b.serving_pid or b.pid}, [b.cleanup])
    if kind in ("delaymq_proxy", "delaymq_proxy_envoy"):
        closers: list = []
        try:
            ns_port = pick_port()
            ns = Proc([sys.executable, "-m", "server.cluster.namesrv", "--port", str(ns_port), "--log-level", "warning"],
                      r"namesrv ready on")
            closers.append(ns.stop)
            b = Broker({"flushDiskType": "ASYNC_FLUSH", "namesrvAddr": f"127.0.0.1:{ns_port}",
                        "brokerName": "floor-a", "defaultTopicQueueNums": 8})
            b.start()
            closers.append(b.cleanup)
            from bench.meta_load import create_topic  # the proxy routes only topics the name server knows
            asyncio.run(create_topic(b.addr, TOPIC, 8))
            px_port = pick_port()
            stack = "envoy" if kind == "delaymq_proxy_envoy" else "grpcio"
            px = Proc([sys.executable, "-m", "server.proxy", "--namesrv", f"127.0.0.1:{ns_port}", "--grpc-port",
                       str(px_port), "--host", "127.0.0.1", "--log-level", "warning", "--grpc-server-stack", stack],
                      r"proxy ready on")
            closers.append(px.stop)
            # on Envoy the ready line names the Envoy child: it serves (and spends the CPU), the launcher waits
            envoy = re.search(r"\(envoy pid (\d+)\)", px.ready_line)
            return Target(f"127.0.0.1:{px_port}", {"server": int(envoy.group(1)) if envoy else px.pid,
                                                   "broker": b.pid}, closers)
        except Exception:
            Target("", {}, closers).close()
            raise
    raise ValueError(f"unknown kind {kind!r}")


def _probe(addr: str, payload: bytes) -> str:
    """'' when one SendMessage is answered OK (a delaymq topic is auto-created on the first send; the
    proxy learns its route once the broker registered it), else why not."""
    import grpc

    from server.grpc.v2 import service_pb2 as spb
    last = ""
    with grpc.insecure_channel(addr) as ch:
        call = ch.unary_unary(SEND_METHOD, request_serializer=None, response_deserializer=spb.SendMessageResponse.FromString)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = call(payload, timeout=5, metadata=metadata("probe"))
                if r.status.code == 20000:
                    return ""
                last = f"status {r.status.code}: {r.status.message}"
            except grpc.RpcError as e:
                last = f"{e.code()}: {e.details()}"
                if e.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                    return last  # the stack answers, but not as gRPC
            time.sleep(0.2)
    return last or "no answer"


def _proc_sys_s(pid: int) -> float:
    """stime of a process in seconds (/proc/<pid>/stat field 15)."""
    data = Path(f"/proc/{pid}/stat").read_text()
    return int(data[data.rindex(")") + 2:].split()[12]) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, seconds: float, payload: bytes, pool) -> dict:
    try:
        t = start_target(kind)
    except RuntimeError as e:
        return {"kind": kind, "unavailable": str(e)[:400]}
    try:
        why = _probe(t.addr, payload)
        if why:
            return {"kind": kind, "unavailable": f"cannot serve gRPC to grpcio's client: {why}"[:400]}
        start_at = time.time() + 1.5  # the clients' channels are up by then
        measure_from = start_at + WARMUP_S
        end_at = measure_from + seconds
        futs = [pool.submit(_client_process, {"addr": t.addr, "client": c, "window": WINDOW,
                                              "start_at": start_at, "measure_from": measure_from, "end_at": end_at})
                for c in range(CLIENTS)]
        time.sleep(max(0.0, measure_from - time.time()))
        c0 = {name: proc_cpu_s(pid) for name, pid in t.measured.items()}
        k0 = _proc_sys_s(t.measured["server"])
        w0 = time.monotonic()
        time.sleep(max(0.0, end_at - time.time()))
        c1 = {name: proc_cpu_s(pid) for name, pid in t.measured.items()}
        k1 = _proc_sys_s(t.measured["server"])
        wall = time.monotonic() - w0
        parts = [f.result(timeout=seconds + 60) for f in futs]
    finally:
        t.close()
    ok = sum(p["ok"] for p in parts)
    errors = sum(p["errors"] for p in parts)
    out: dict = {"kind": kind, "calls": ok, "errors": errors, "wall_s": round(wall, 3),
                 "calls_s": round(ok / wall, 1)}
    for name in t.measured:
        cpu = c1[name] - c0[name]
        out[f"{name}_cpu_s"] = round(cpu, 3)
        out[f"{name}_us_per_call"] = round(cpu / ok * 1e6, 1) if ok else None
    if ok:  # the kernel's share of the server's (system calls: socket I/O, futex wake-ups)
        out["server_sys_us_per_call"] = round((k1 - k0) / ok * 1e6, 1)
    if errors:
        out["first_error"] = next((p["first_error"] for p in parts if p["first_error"]), "")
    return out


def run(kinds: list[str], seconds: float, rounds: int) -> dict:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    payload = request_bytes()
    runs: list[dict] = []
    with ProcessPoolExecutor(CLIENTS, mp_context=mp.get_context("spawn")) as pool:
        for r in range(rounds):
            for kind in kinds:
                res = measure(kind, seconds, payload, pool)
                res["round"] = r
                runs.append(res)
                print(json.dumps(res), file=sys.stderr, flush=True)
    summary: dict[str, dict] = {}
    for kind in kinds:
        mine = [x for x in runs if x["kind"] == kind]
        good = [x for x in mine if "unavailable" not in x]
        if not good:
            summary[kind] = {"unavailable": mine[0].get("unavailable", "")}
            continue
        s: dict = {"calls_s": round(statistics.median(x["calls_s"] for x in good), 1)}
        for key in ("server_us_per_call", "broker_us_per_call", "server_sys_us_per_call"):
            vals = [x[key] for x in good if x.get(key) is not None]
            if vals:
                s[key] = round(statistics.median(vals), 1)
                s[key + "_all"] = vals
        summary[kind] = s
    return {"runs": runs, "summary": summary}


def table(summary: dict, floor_kind: str = "aio_uvloop") -> str:
    """One row per kind; `× floor`: to the grpc.aio echo, and for the kinds on Envoy to the pyvoy echo (their
    own stack's floor) when it ran."""
    floor = summary.get(floor_kind, {}).get("server_us_per_call")
    envoy_floor = summary.get("pyvoy", {}).get("server_us_per_call")
    lines = ["| server | calls/s | server CPU µs/call (median; each round) | × floor | broker behind it µs/call |",
             "|---|---|---|---|---|"]
    for kind, s in summary.items():
        if "unavailable" in s:
            lines.append(f"| {kind} | - | {s['unavailable'][:120]} | | |")
            continue
        us = s.get("server_us_per_call")
        if kind in ON_ENVOY and us and envoy_floor:
            ratio = f"{us / envoy_floor:.2f} (pyvoy echo)"
        else:
            ratio = f"{us / floor:.2f}" if us and floor else ""
        each = ", ".join(f"{v:g}" for v in s.get("server_us_per_call_all", []))
        broker = s.get("broker_us_per_call", "")
        lines.append(f"| {kind} | {s['calls_s']:,.0f} | {us} ({each}) | {ratio} | {broker} |")
    return "\n".join(lines)


def bench_grpc_floor(quick: bool) -> dict:
    seconds, rounds = (3.0, 1) if quick else (5.0, 3)
    res = run(ALL_KINDS, seconds, rounds)
    s = res["summary"]
    floor = s.get("aio_uvloop", {}).get("server_us_per_call")
    head: dict = {}
    for kind in ALL_KINDS:
        if "server_us_per_call" in s.get(kind, {}):
            head[f"{kind}_us"] = s[kind]["server_us_per_call"]
    local = s.get("delaymq_local", {}).get("server_us_per_call")
    proxy = s.get("delaymq_proxy", {}).get("server_us_per_call")
    if floor and local:
        head["local_x_floor"] = round(local / floor, 2)
    if floor and proxy:
        head["proxy_x_floor"] = round(proxy / floor, 2)
    envoy_floor = s.get("pyvoy", {}).get("server_us_per_call")
    proxy_envoy = s.get("delaymq_proxy_envoy", {}).get("server_us_per_call")
    if envoy_floor and proxy_envoy:
        head["proxy_envoy_x_pyvoy"] = round(proxy_envoy / envoy_floor, 2)
    local_envoy = s.get("delaymq_local_envoy", {}).get("server_us_per_call")
    if floor and local_envoy:
        head["local_envoy_x_floor"] = round(local_envoy / floor, 2)
    met = None if not (floor and local and proxy) else bool(local <= 1.5 * floor and proxy <= 1.5 * floor)
    return {"config": {"seconds": seconds, "rounds": rounds, "clients": f"{CLIENTS} processes x 1 grpc.aio channel x "
                       f"{WINDOW} in flight", "request": "SendMessage, one 128 B NORMAL message, pre-serialized"},
            "raw": res, "headline": head, "target": "delaymq (local and proxy) <= 1.5x the grpc.aio echo's CPU per call",
            "met": met}


BENCHES = {"grpc_floor": bench_grpc_floor}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_floor")
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per kind and round (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--kinds", default=",".join(ALL_KINDS), help="comma-separated: " + ",".join(ALL_KINDS))
    a = p.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad:
        p.error(f"unknown kinds {bad}")
    res = run(kinds, a.seconds, a.rounds)
    write_result("grpc_floor", {"config": {"seconds": a.seconds, "rounds": a.rounds, "kinds": kinds}, "raw": res,
                                "headline": {k: v.get("server_us_per_call") for k, v in res["summary"].items()}})
    print(table(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
