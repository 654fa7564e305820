"""Broker instructions per message, phase by phase, under callgrind: a figure a noisy shared host
cannot move, for comparing two trees (`cd TREE && python -m bench.instr_probe [N] [--window W]
[--out PREFIX] [--keep]`; the same file runs unchanged in older trees: it only uses `bench.wire`,
`bench.common` and `bench.broker_core._create`).

One broker (ASYNC_FLUSH, levels 1s 2s 3s 4s, gRPC off) runs under `valgrind --tool=callgrind`; an
ordinary client process (this one, uvloop, not under valgrind) drives it in lock-step phases, and after
each phase `callgrind_control --dump=PHASE` writes the counts since the previous dump, so every phase
has its own total Ir (PREFIX.1, PREFIX.2, ... in phase order):

1. `start`: start-up, CREATE_TOPIC for both topics (the fixed cost);
2. `send`: N plain 128 B SEND_MESSAGE_V2 to topic `InstrPlain` (8 queues) over 2 connections, in
   bursts: each connection writes W frames in one write, waits for their W responses, then the next
   burst, so every run of pipelined sends the broker reads has the same shape in every run and tree;
3. `send_delay`: the same with DELAY=1..4 (cycling) to `InstrDelay`: the CommitLog put into
   SCHEDULE_TOPIC_XXXX;
4. `deliver`: wait (GET_MAX_OFFSET every 0.5 s) until all N were delivered into `InstrDelay`'s queues;
5. `pull`: PULL_MESSAGE of everything in `InstrPlain` (maxMsgNums 32, no suspend; one pull per queue in
   flight, 8 at a time written together);
6. `pull_delay`: the same for `InstrDelay`;
7. `stop`: SIGTERM and shutdown.

Prints one JSON line: each phase's Ir, and Ir per message for the per-message phases. Under callgrind
the delayed sends take longer than the 4 s levels, so most deliveries happen during `send_delay`:
compare `send_delay + deliver` (the scheduled message's whole cost), not the two apart; `deliver`
also holds idle ticking for however long the wait takes (a few million Ir per 10 s). Run it twice per
tree to see the spread (0.3 % for `send`, ~1 % for `send_delay + deliver` here).

`--sends-only` stops after phase 2 (for bisecting the send path by instruction counts).
`--cprofile OUT` runs the broker under cProfile instead (no callgrind): the call counts (`ncalls`) are as
deterministic as the instruction counts, so diffing them between two trees shows which Python calls a
message gained."""

from __future__ import annotations

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

from bench import wire
from bench.broker_core import _create
from bench.common import HOST, pick_port, start_broker_under, store_base
from codec.codes import ResponseCode
from codec.properties import MessageConst

PLAIN, DELAYED = "InstrPlain", "InstrDelay"
QUEUES = 8
BODY = b"\0" * 128


class _Done(Exception):
    """--sends-only: the phases after `send` are skipped."""


def _dump(pid: int, label: str) -> None:
    subprocess.run(["callgrind_control", f"--dump={label}", str(pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


async def _send(addr: str, topic: str, n: int, window: int, conns: int, levels: list[int]) -> int:
    cs = [await wire.connect(addr) for _ in range(conns)]
    tmpls = {(lv, q): wire.FrameTemplate(wire.send_cmd(
        topic, BODY, q, wire.props_string({MessageConst.DELAY: str(lv)}) if lv else ""))
        for lv in levels for q in range(QUEUES)}
    per = [n // conns + (1 if i < n % conns else 0) for i in range(conns)]
    errors = 0

    async def one(ci: int, count: int) -> None:
        nonlocal errors
        c, sent = cs[ci], 0
        loop = asyncio.get_running_loop()
        while sent < count:
            k = min(window, count - sent)
            futs, out = [], bytearray()
            for _ in range(k):
                i = sent * conns + ci
                op = c.next_opaque()
                fut = loop.create_future()
                c.waiters[op] = fut
                futs.append(fut)
                out += tmpls[levels[i % len(levels)], i % QUEUES].render(op)
                sent += 1
            c.write(out)
            for r in await asyncio.gather(*futs):
                errors += r.code != ResponseCode.SUCCESS

    await asyncio.gather(*(one(i, k) for i, k in enumerate(per)))
    for c in cs:
        c.close()
    return errors


async def _pull(addr: str, topic: str) -> int:
    c = await wire.connect(addr)
    ends = [await wire.max_offset(c, topic, q) for q in range(QUEUES)]
    offs = [0] * QUEUES
    got = 0
    loop = asyncio.get_running_loop()
    while any(o < e for o, e in zip(offs, ends, strict=True)):
        qs = [q for q in range(QUEUES) if offs[q] < ends[q]]
        futs, out = [], bytearray()
        for q in qs:
            cmd = wire.pull_cmd(topic, q, offs[q], 32, 0)
            cmd.opaque = c.next_opaque()
            cmd.serialize_type = wire.SERIALIZE_ROCKETMQ
            fut = loop.create_future()
            c.waiters[cmd.opaque] = fut
            futs.append(fut)
            out += wire.encode_frame_bytes(cmd)
        c.write(out)
        for q, r in zip(qs, await asyncio.gather(*futs), strict=True):
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"pull {topic}/{q}@{offs[q]}: {r.code} {r.remark}")
            offs[q] = int(r.ext_fields["nextBeginOffset"])
            pos, body = 0, r.body
            while pos < len(body):
                pos += int.from_bytes(body[pos:pos + 4], "big")
                got += 1
    c.close()
    return got


async def _wait_delivered(addr: str, n: int, deadline_s: float) -> None:
    c = await wire.connect(addr)
    stop = time.monotonic() + deadline_s
    while await wire.total_max_offset(c, DELAYED, QUEUES) < n:
        if time.monotonic() > stop:
            raise RuntimeError("delayed messages not delivered in time")
        await asyncio.sleep(0.5)
    c.close()


def _ir(path: str) -> int:
    with open(path) as f:
        for line in f:
            m = re.match(r"^(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no totals in {path}")


def probe(n: int, window: int, out: str, keep: bool, cprofile: str | None = None, sends_only: bool = False) -> dict:
    import uvloop

    work = tempfile.mkdtemp(prefix="instr-probe-", dir=store_base())
    port = pick_port()
    conf = os.path.join(work, "broker.conf")
    with open(conf, "w") as f:
        f.write("flushDiskType=ASYNC_FLUSH\nmessageDelayLevel=1s 2s 3s 4s\ngrpcListenPort=0\n")
    for old in [out, *(f"{out}.{i}" for i in range(1, 10))]:
        if os.path.exists(old):
            os.unlink(old)
    py_args = ["-m", "cProfile", "-o", cprofile] if cprofile else []
    wrap = [] if cprofile else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    phases = ["start", "send", "stop"] if sends_only else \
        ["start", "send", "send_delay", "deliver", "pull", "pull_delay", "stop"]
    res: dict = {"n": n, "window": window, "conns": 2}
    p = start_broker_under(wrap, py_args, work, port, conf)
    try:
        addr = f"{HOST}:{port}"
        _create(addr, PLAIN, QUEUES)
        _create(addr, DELAYED, QUEUES)

        def dump(label: str) -> None:
            if not cprofile:  # under cProfile: no phases, one profile at exit
                _dump(p.pid, label)

        dump("start")
        res["send_errors"] = uvloop.run(_send(addr, PLAIN, n, window, 2, [0]))
        dump("send")
        if sends_only:
            raise _Done
        res["send_delay_errors"] = uvloop.run(_send(addr, DELAYED, n, window, 2, [1, 2, 3, 4]))
        dump("send_delay")
        uvloop.run(_wait_delivered(addr, n, 600))
        dump("deliver")
        res["pulled"] = uvloop.run(_pull(addr, PLAIN))
        dump("pull")
        res["pulled_delay"] = uvloop.run(_pull(addr, DELAYED))
        dump("pull_delay")
    except _Done:
        pass
    except RuntimeError:
        keep = True
        raise
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(300)
        if keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if cprofile:
        return res
    files = [f"{out}.{i}" for i in range(1, len(phases))] + [out]
    ir = {ph: _ir(f) for ph, f in zip(phases, files, strict=True)}
    res["ir"] = ir
    res["ir_per_msg"] = {ph: round(ir[ph] / n) for ph in phases[1:-1]}
    return res


def main(argv: list[str]) -> None:
    window, out, keep = 64, "/tmp/instr_probe.cg", False
    if "--window" in argv:
        i = argv.index("--window")
        window = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if "--out" in argv:
        i = argv.index("--out")
        out = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    cprofile = None
    if "--cprofile" in argv:
        i = argv.index("--cprofile")
        cprofile = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    sends_only = "--sends-only" in argv
    if sends_only:
        argv.remove("--sends-only")
    if "--keep" in argv:
        keep = True
        argv.remove("--keep")
    n = int(argv[0]) if argv else 8000
    print(json.dumps(probe(n, window, out, keep, cprofile, sends_only)))


if __name__ == "__main__":
    main(sys.argv[1:])
