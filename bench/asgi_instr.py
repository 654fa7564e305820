"""Instructions per SendMessage of the Python that Envoy runs under `grpcServerStack=envoy`, without Envoy:
the ASGI app driven in-process with the events pyvoy hands it, under callgrind (issue 24 item 3; a figure a
noisy shared host cannot move; `python -m bench.asgi_instr [N] [--kinds echo,proxy] [--window W]
[--cprofile OUT]`; run it in two trees to A/B).

Under Envoy each call's CPU is Envoy's C++ (HTTP/2, HPACK, the dynamic-module glue: the same for every app)
plus the app's Python. This counts the Python: a driver process runs the app on uvloop and makes, per call,
what pyvoy 1.3.0 makes (captured from a live pyvoy serving grpcio's client): a scope (`http`, HTTP/2, POST,
the path, the 10 request headers grpc.aio and the official clients send, client/server addresses, the
trailers extension), one `http.request` event with the whole framed body, and it takes the three sends
(`http.response.start`, `.body`, `.trailers`). W calls in flight (default 64, the bench load's window).

Kinds: `echo` is bench.grpc_echo's `asgi_app` (what `pyvoy` serves in bench.grpc_floor: the floor on this
stack); `proxy` is server.proxy.envoy's app (GrpcAsgiApp over the Proxy, started by its lifespan) sending to
a real broker (a name server and a broker run as usual, not under valgrind, topic created and routed
first; routeCacheTtlMs=3600000 as in bench.grpc_instr); `null` is an app that only takes the request and
sends three prepared events: the driver's own cost per call, to subtract from both.

The driver runs under `valgrind --tool=callgrind --instr-atstart=no`; after a warm-up of 200 calls this
process turns instrumentation on, the driver makes N calls, a dump, then as long idle and a second dump
(the proxy's timers by the clock): Ir per call = (calls' Ir - idle Ir per second x the calls' seconds) / N.
`--cprofile OUT` runs the driver under cProfile instead (the N calls only; OUT.KIND, pstats).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from bench.common import store_base
from bench.grpc_instr import TOPIC, WARMUP, _control, _ir, _proxy_backends, requests

KINDS = ("null", "echo", "proxy")
SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
App = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def headers(client: int) -> list[tuple[bytes, bytes]]:
    """The request headers pyvoy hands the app for one grpc.aio SendMessage with the 5.x clients' metadata."""
    return [(b"host", b"127.0.0.1:8081"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
            (b"grpc-accept-encoding", b"identity, deflate, gzip"), (b"grpc-timeout", b"9999m"),
            (b"user-agent", b"grpc-python-asyncio/1.85.3 grpc-c/58.0.0 (linux; chttp2)"),
            (b"x-mq-client-id", f"bench-instr-{client}".encode()), (b"x-mq-language", b"PYTHON"),
            (b"x-mq-protocol", b"v2"), (b"x-mq-client-version", b"5.1.2")]


def scope(client: int, port: int) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.5"},
            "extensions": {"http.response.trailers": {}}, "state": {}, "http_version": "2", "method": "POST",
            "scheme": "http", "query_string": b"", "path": SEND_METHOD, "raw_path": SEND_METHOD.encode(),
            "root_path": "", "headers": headers(client), "client": ("127.0.0.1", port),
            "server": ("127.0.0.1", 8081)}


async def null_app(scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
    """Takes the request and answers three prepared events: what the driver costs per call."""
    if scope["type"] != "http":
        from bench.grpc_echo import asgi_app  # its lifespan: nothing to start
        return await asgi_app(scope, receive, send)
    await receive()
    await send(NULL_START)
    await send(NULL_BODY)
    await send(NULL_TRAILERS)


NULL_START = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/grpc")],
              "trailers": True}
NULL_BODY = {"type": "http.response.body", "body": b"\0\0\0\0\0", "more_body": False}
NULL_TRAILERS = {"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False}


def _app(kind: str, namesrv: str) -> App:
    if kind == "null":
        return null_app
    if kind == "echo":
        from bench.grpc_echo import asgi_app
        return asgi_app
    from server.proxy import envoy
    os.environ[envoy.CONFIG_ENV] = json.dumps({"namesrv_addr": namesrv, "grpc_port": 8081,
                                               "route_ttl_ms": 3_600_000})
    os.environ[envoy.LOG_LEVEL_ENV] = "warning"
    from server.grpc.envoy_host import LAUNCHER_PID_ENV
    os.environ[LAUNCHER_PID_ENV] = str(os.getppid())  # build_app arms "die with the launcher": this driver's parent
    app: App = envoy.build_app()
    return app


class Lifespan:
    """The app's lifespan as pyvoy runs it: one `lifespan` call that takes startup, later shutdown."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.events: asyncio.Queue[dict] = asyncio.Queue()
        self.sent: asyncio.Queue[dict] = asyncio.Queue()
        self.task: asyncio.Future[None] | None = None

    async def _send(self, event: dict) -> None:
        await self.sent.put(event)

    async def step(self, phase: str) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self.app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                       self.events.get, self._send))
        await self.events.put({"type": f"lifespan.{phase}"})
        event = await self.sent.get()
        if event["type"] != f"lifespan.{phase}.complete":
            raise RuntimeError(f"lifespan {phase}: {event}")
        if phase == "shutdown":
            await self.task


class Call:
    """One call's receive (the whole framed request, as pyvoy hands a body that came in one DATA frame) and
    send (kept, to check the answer)."""

    __slots__ = ("request", "sent")

    def __init__(self, body: bytes) -> None:
        self.request = {"type": "http.request", "body": body, "more_body": False}
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        return self.request

    async def send(self, event: dict) -> None:
        self.sent.append(event)

    def ok(self) -> bool:
        s = self.sent
        return len(s) == 3 and s[2].get("headers") == [(b"grpc-status", b"0")] and len(s[1]["body"]) >= 5


async def _calls(app: App, bodies: list[bytes], window: int) -> int:
    """Each body through the app as one call, `window` in flight; the count of calls not answered grpc-status 0
    with one response message."""
    it = iter(bodies)
    errors = 0

    async def worker(w: int) -> None:
        nonlocal errors
        for body in it:
            call = Call(body)
            await app(scope(w, 40000 + w), call.receive, call.send)
            errors += not call.ok()

    await asyncio.gather(*(worker(w) for w in range(window)))
    return errors


def _framed(n: int) -> list[bytes]:
    from codec.grpc_frame import frame
    return [frame(r) for r in requests(n, TOPIC)]


async def _child(kind: str, n: int, window: int, namesrv: str, cprofile: str) -> None:
    loop = asyncio.get_running_loop()
    app = _app(kind, namesrv)
    lifespan = Lifespan(app)
    await lifespan.step("startup")
    bodies = _framed(WARMUP + n)
    warm_errors = await _calls(app, bodies[:WARMUP], window)
    print(f"warm {warm_errors}", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the parent turned callgrind's instrumentation on
    prof = cProfile.Profile(time.process_time) if cprofile else None  # CPU, not the wall clock
    if prof is not None:
        prof.enable()
    t0 = time.monotonic()
    errors = await _calls(app, bodies[WARMUP:], window)
    seconds = time.monotonic() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(cprofile)
    print(f"done {errors} {seconds}", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the parent dumped the calls and the idle time
    await lifespan.step("shutdown")


def probe(kind: str, n: int, window: int, out: str, cprofile: str) -> dict:
    closers: list = []
    work = tempfile.mkdtemp(prefix="asgi-instr-", dir=store_base())
    try:
        namesrv = _proxy_backends(closers) if kind == "proxy" else ""
        wrap = [] if cprofile else ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                    f"--callgrind-out-file={out}"]
        for f in (out, f"{out}.1", f"{out}.2"):
            if os.path.exists(f):
                os.unlink(f)
        argv = [*wrap, sys.executable, "-m", "bench.asgi_instr", "--child", kind, str(n), "--window", str(window),
                "--namesrv", namesrv, "--cprofile", f"{cprofile}.{kind}" if cprofile else ""]
        with open(os.path.join(work, "stderr"), "wb") as err:
            p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        assert p.stdin is not None and p.stdout is not None
        try:
            def line(expect: str) -> list[str]:
                assert p.stdout is not None
                text = p.stdout.readline().decode()
                if not text.startswith(expect):
                    raise RuntimeError(f"{kind}: the driver said {text!r}, not {expect!r} (stderr in {work})")
                return text.split()

            warm_errors = int(line("warm")[1])
            if not cprofile:
                _control(p.pid, "--zero")
                _control(p.pid, "-i", "on")
            p.stdin.write(b"go\n")
            p.stdin.flush()
            _, errors, seconds = line("done")
            calls_s = float(seconds)
            idle_s = 0.0
            if not cprofile:
                _control(p.pid, "--dump=calls")
                t0 = time.monotonic()
                time.sleep(calls_s)  # as long idle: what the app's timers cost by the clock, not by the calls
                _control(p.pid, "--dump=idle")
                idle_s = time.monotonic() - t0
            p.stdin.write(b"stop\n")
            p.stdin.flush()
            p.wait(300)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(300)
        res: dict = {"kind": kind, "n": n, "window": window, "errors": int(errors), "warm_errors": warm_errors,
                     "calls_s": round(calls_s, 2)}
        if not cprofile:
            ir, idle = _ir(f"{out}.1"), _ir(f"{out}.2")
            res.update({"ir_idle_per_s": round(idle / idle_s), "ir_per_call_gross": round(ir / n),
                        "ir_per_call": round((ir - idle * calls_s / idle_s) / n)})
        shutil.rmtree(work, ignore_errors=True)
        return res
    finally:
        for close in reversed(closers):
            close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.asgi_instr")
    p.add_argument("n", type=int, nargs="?", default=2000)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--out", default="/tmp/asgi_instr.cg")
    p.add_argument("--cprofile", default="", help="profile the calls with cProfile (no callgrind) into OUT.KIND")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--namesrv", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        import uvloop
        uvloop.run(_child(a.child, a.n, a.window, a.namesrv, a.cprofile))
        return 0
    res: dict[str, dict] = {}
    for kind in a.kinds.split(","):
        if kind not in KINDS:
            p.error(f"unknown kind {kind!r}")
        res[kind] = probe(kind, a.n, a.window, f"{a.out}.{kind}", a.cprofile)
        print(json.dumps(res[kind]), flush=True)
    if not a.cprofile and "echo" in res and "proxy" in res:
        base = res["null"]["ir_per_call"] if "null" in res else 0
        echo, proxy = res["echo"]["ir_per_call"] - base, res["proxy"]["ir_per_call"] - base
        print(json.dumps({"proxy_x_echo": round(res["proxy"]["ir_per_call"] / res["echo"]["ir_per_call"], 3),
                          "net_of_driver": {"echo": echo, "proxy": proxy, "proxy_x_echo": round(proxy / echo, 3)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
