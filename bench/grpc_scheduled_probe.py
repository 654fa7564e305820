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
import json
import multiprocessing as mp
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

from bench.grpc_floor import CLIENTS
from bench.grpc_topology import Setup, _cpu, phase_scheduled, start


def _warm(_: int) -> None:
    """A pool worker started and its imports done before the first probe's clock runs (spawning them inside
    the first probe's 1.5 s lead put its senders behind their slots on a loaded host)."""
    import grpc  # noqa: F401
    import uvloop  # noqa: F401

    import server.grpc.v2.service_pb2  # noqa: F401


def probe(s: Setup, seconds: float, pool: ProcessPoolExecutor, load: int) -> dict:
    """bench.grpc_topology's scheduled phase, with `load` busy loops running and the CPU of each process."""
    spin = [subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds + 6}\n"
                              "while time.time() < end: pass"]) for _ in range(load)]
    c0 = _cpu(s.pids)
    try:
        out = phase_scheduled(s, seconds, pool)
    finally:
        for p in spin:
            p.kill()
            p.wait()
    c1 = _cpu(s.pids)
    return {**out, "loadavg": round(os.getloadavg()[0], 1), "cpu_s": {k: round(c1[k] - c0[k], 2) for k in c0}}


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
