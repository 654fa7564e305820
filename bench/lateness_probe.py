"""A short probe of the delay_lateness 10k scenario for alternating A/B runs of two trees:
`python -m bench.lateness_probe [rate] [seconds] [--profile OUT]` (run from the tree to measure).

One broker (ASYNC_FLUSH, levels 1s 2s 3s 4s), the paced sender and the long-poll consumer of
`bench.delay.lateness_run`, `rate` msg/s for `seconds` (10,000 for 10 s: 100,000 messages); prints one
JSON line: lateness percentiles (delivered STORETIMESTAMP - send time - level delay), the sender's round
trip p99 and the broker's CPU seconds for the whole run (start-up included: a run at 10 msg/s gives the
baseline). `--profile OUT` runs the broker under cProfile (stats in OUT; lateness then means nothing).
`DELAYMQ_PROBE_WRAP="valgrind --tool=callgrind --callgrind-out-file=F"` runs it under that command: at a
low rate (batches of one either way) the instruction count per message compares two trees without the
noise of a shared host; `DELAYMQ_PROBE_KEEP=1` keeps the store and the broker's stderr."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time

from bench.broker_core import _create
from bench.common import HOST, pick_port, start_broker_under, store_base
from bench.procs import run_parallel

TOPIC = "BenchLate"
QUEUES = 8


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(rate: int, seconds: float, profile: str | None = None) -> dict:
    work = tempfile.mkdtemp(prefix="lateness-probe-", dir=store_base())
    port = pick_port()
    conf = os.path.join(work, "broker.conf")
    with open(conf, "w") as f:
        f.write("flushDiskType=ASYNC_FLUSH\nmessageDelayLevel=1s 2s 3s 4s\ngrpcListenPort=0\n")
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    wrap = os.environ.get("DELAYMQ_PROBE_WRAP", "").split()  # e.g. valgrind --tool=callgrind (instruction counts)
    p = start_broker_under(wrap, prof, work, port, conf)
    try:
        addr = f"{HOST}:{port}"
        _create(addr, TOPIC, QUEUES)
        n = int(rate * seconds)
        cons, prod = run_parallel([
            ("consume", dict(addr=addr, topic=TOPIC, queues=QUEUES, expected=n, deadline_s=seconds * 3 + 30)),
            ("send_paced", dict(addr=addr, topic=TOPIC, rate=rate, duration_s=seconds, queues=QUEUES, conns=2,
                                levels=[1, 2, 3, 4], level_delays_ms=[1000, 2000, 3000, 4000],
                                start_at=time.time() + 2.0))])
        cpu = _cpu_s(p.pid)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        if os.environ.get("DELAYMQ_PROBE_KEEP"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return {"rate": rate, "n": n, "received": cons.get("received"), "lateness_ms": cons.get("lateness_ms"),
            "send_rtt_p99_us": prod.get("send_rtt_us", {}).get("p99"), "broker_cpu_s": cpu}


def main(argv: list[str]) -> None:
    profile = None
    if "--profile" in argv:
        i = argv.index("--profile")
        profile = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    rate = int(argv[0]) if argv else 10000
    seconds = float(argv[1]) if len(argv) > 1 else 10.0
    print(json.dumps(probe(rate, seconds, profile)))


if __name__ == "__main__":
    main(sys.argv[1:])
