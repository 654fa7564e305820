"""The longest event-loop turn of a remoting server under two bad days (issue 26 item 4; not part of
`run_all`; one process, real sockets on loopback, bounded in count and time).

    .venv/bin/python -m bench.loop_stall [--connections 4000] [--headers 200] [--peers 4]

- mass disconnect: `--connections` clients connected, then all closed at once;
- large headers: `--peers` connections each pipelining `--headers` requests whose JSON header is just
  under the 256 KiB limit.
A ticker re-arms itself with call_soon and records the gap between its runs: the longest gap is the
longest loop turn the server's work made. Printed, and written to bench/results/loop_stall.json.
The target (no turn over 50 ms) is read here, never asserted in a test.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from typing import Any

from bench.common import percentiles, write_result
from codec.command import RemotingCommand
from codec.frame import MAX_HEADER, encode_frame_bytes
from remoting.loop import run
from remoting.server import RemotingServer

ECHO = 100


class Ticker:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.gaps_ms: list[float] = []
        self.last = time.perf_counter()
        self.on = True
        self.loop.call_soon(self.tick)

    def tick(self) -> None:
        now = time.perf_counter()
        self.gaps_ms.append((now - self.last) * 1000)
        self.last = now
        if self.on:
            self.loop.call_soon(self.tick)

    def stop(self) -> dict[str, Any]:
        self.on = False
        return percentiles(self.gaps_ms)


def json_frame(code: int, opaque: int, ext: dict[str, str]) -> bytes:
    cmd = RemotingCommand.request(code, ext)
    cmd.opaque = opaque
    return encode_frame_bytes(cmd)


def _read_frames(sock: socket.socket, n: int) -> None:
    f = sock.makefile("rb")
    for _ in range(n):
        size = int.from_bytes(f.read(4), "big")
        f.read(size)


async def mass_disconnect(n: int) -> dict[str, Any]:
    """The clients are plain sockets on a thread: only the server's work is on the measured loop."""
    srv = RemotingServer("127.0.0.1", (0,), {}, max_connections=n + 16)
    closed = asyncio.Event()
    lost = 0

    def on_close(_conn: object) -> None:
        nonlocal lost
        lost += 1
        if lost == n:
            closed.set()

    srv.on_close = on_close
    port = (await srv.start())[0]
    socks = await asyncio.to_thread(lambda: [socket.create_connection(("127.0.0.1", port)) for _ in range(n)])
    while len(srv.connections) < n:
        await asyncio.sleep(0.01)  # the server accepting them (bench set-up, not measured)
    t = Ticker()
    t0 = time.perf_counter()
    def close_all() -> None:
        for s in socks:
            s.close()

    await asyncio.to_thread(close_all)
    await asyncio.wait_for(closed.wait(), 60)
    took = time.perf_counter() - t0
    gaps = t.stop()
    await srv.close(0.5)
    return {"connections": n, "all_cleaned_up_s": round(took, 3), "loop_turn_ms": gaps}


async def large_headers(peers: int, headers: int) -> dict[str, Any]:
    srv = RemotingServer("127.0.0.1", (0,), {ECHO: lambda conn, cmd: cmd.response(0)})
    port = (await srv.start())[0]
    pad = "x" * (MAX_HEADER - 200)
    frames = b"".join(json_frame(ECHO, i + 1, {"pad": pad}) for i in range(headers))
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(peers)]
    t = Ticker()
    t0 = time.perf_counter()

    def one(sock: socket.socket) -> None:
        sender = threading.Thread(target=sock.sendall, args=(frames,))
        sender.start()
        _read_frames(sock, headers)
        sender.join()

    await asyncio.wait_for(asyncio.gather(*(asyncio.to_thread(one, s) for s in socks)), 120)
    took = time.perf_counter() - t0
    gaps = t.stop()
    for s in socks:
        s.close()
    await srv.close(0.5)
    return {"peers": peers, "headers_each": headers, "header_bytes": len(pad) + 100, "all_answered_s": round(took, 3),
            "loop_turn_ms": gaps}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    return {"mass_disconnect": await mass_disconnect(args.connections),
            "large_headers": await large_headers(args.peers, args.headers), "target_max_turn_ms": 50}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=4000)
    ap.add_argument("--headers", type=int, default=200)
    ap.add_argument("--peers", type=int, default=4)
    res = run(main(ap.parse_args()))
    for name in ("mass_disconnect", "large_headers"):
        print(f"{name}: longest loop turn {res[name]['loop_turn_ms']['max']} ms "
              f"(p99 {res[name]['loop_turn_ms'].get('p99')} ms)")
    print(write_result("loop_stall", res))
