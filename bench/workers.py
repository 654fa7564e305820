"""Load-generator coroutines. Each runs in its own process (`bench.procs.run_parallel`) on uvloop.

Body layout of every generated message: `>qqB` = send time (µs, wall clock), due time (ms, 0 when
not scheduled), delay level (0 = none), then padding to the requested size. Consumers read it back
from the pulled records, so latency/lateness need no per-message bookkeeping in the producer.
"""

from __future__ import annotations

import asyncio
import time

from bench import wire
from bench.common import percentiles
from codec.codes import ResponseCode
from codec.properties import MessageConst
from codec.record import read_body, read_store_timestamp, read_total_size

BODY_HEAD = __import__("struct").Struct(">qqB")
# the response codes the loops compare with, bound once (an Enum attribute is ~50 ns a lookup on 3.11)
_SUCCESS = ResponseCode.SUCCESS
_PULL_NOT_FOUND = ResponseCode.PULL_NOT_FOUND
_PULL_RETRY_IMMEDIATELY = ResponseCode.PULL_RETRY_IMMEDIATELY
_PULL_OFFSET_MOVED = ResponseCode.PULL_OFFSET_MOVED


def _body(size: int) -> bytes:
    return b"\0" * max(size, BODY_HEAD.size)


def _now_us() -> int:
    return time.time_ns() // 1000


# ---------------------------------------------------------------- 1. sync round trip

async def sync_rtt(addr: str, topic: str, n: int, rate: float, body_size: int = 128, queues: int = 4) -> dict:
    conn = await wire.connect(addr)
    tmpl = [wire.FrameTemplate(wire.send_cmd(topic, _body(body_size), q)) for q in range(queues)]
    loop = asyncio.get_running_loop()
    rtts, errors = [], 0
    interval = 1.0 / rate
    t_next = loop.time()
    for i in range(n):
        fut = loop.create_future()
        op = conn.next_opaque()
        conn.waiters[op] = fut
        t0 = time.perf_counter()
        conn.write(tmpl[i % queues].render(op, BODY_HEAD.pack(_now_us(), 0, 0)))
        resp = await asyncio.wait_for(fut, 5.0)
        rtts.append((time.perf_counter() - t0) * 1e6)
        errors += resp.code != _SUCCESS
        t_next += interval
        delay = t_next - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    conn.close()
    return {"rtt_us": percentiles(rtts), "errors": errors, "n": n}


# ---------------------------------------------------------------- 2. closed-loop pipelined send

async def send_closed_loop(addr: str, topic: str, n: int, conns: int, window: int, body_size: int,
                           queues: int, properties: str = "", timeout_s: float = 120.0) -> dict:
    """Send n messages over `conns` connections keeping `window` requests in flight on each."""
    per = [n // conns + (1 if i < n % conns else 0) for i in range(conns)]
    done = asyncio.get_running_loop().create_future()
    state = {"ok": 0, "err": 0, "codes": {}, "left": conns, "first_err": None}

    async def one(idx: int, count: int) -> None:
        conn = await wire.connect(addr)
        tmpl = [wire.FrameTemplate(wire.send_cmd(topic, _body(body_size), q, properties)) for q in range(queues)]
        sent = 0
        finished = asyncio.get_running_loop().create_future()
        acked = 0

        def on_resp(cmd) -> None:
            nonlocal acked
            acked += 1
            if cmd.code == _SUCCESS:
                state["ok"] += 1
            else:
                state["err"] += 1
                state["codes"][cmd.code] = state["codes"].get(cmd.code, 0) + 1
                state["first_err"] = state["first_err"] or f"{cmd.code} {cmd.remark}"
            if acked == count and not finished.done():
                finished.set_result(None)

        def send_some(k: int) -> None:
            nonlocal sent
            k = min(k, count - sent)
            if k <= 0:
                return
            out = bytearray()
            for _ in range(k):
                op = conn.next_opaque()
                conn.waiters[op] = on_resp
                out += tmpl[(sent + idx) % queues].render(op, BODY_HEAD.pack(_now_us(), 0, 0))
                sent += 1
            conn.write(out)

        conn.on_batch = send_some
        await start.wait()
        send_some(window)
        if count:
            await asyncio.wait_for(finished, timeout_s)
        conn.close()
        state["left"] -= 1
        if state["left"] == 0 and not done.done():
            done.set_result(None)

    start = asyncio.Event()
    tasks = [asyncio.ensure_future(one(i, c)) for i, c in enumerate(per)]
    await asyncio.sleep(0.3)  # let every connection open before the clock starts
    t0 = time.perf_counter()
    c0 = time.process_time()
    start.set()
    await asyncio.gather(*tasks)
    el = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"n": n, "ok": state["ok"], "errors": state["err"], "error_codes": state["codes"],
            "first_error": state["first_err"], "elapsed_s": round(el, 4), "rate": round(state["ok"] / el, 1),
            "generator_cpu_us_per_msg": round(cpu / max(n, 1) * 1e6, 2)}


# ---------------------------------------------------------------- open-loop paced send

async def send_paced(addr: str, topic: str, rate: float, duration_s: float, body_size: int = 128,
                     queues: int = 8, conns: int = 2, levels: list[int] | None = None,
                     level_delays_ms: list[int] | None = None, timer_delay_ms: int | None = None,
                     timer_jitter_ms: int = 0, start_at: float = 0.0) -> dict:
    """Send at a fixed rate for duration_s (count = rate*duration), cycling over `levels` (DELAY=L)
    or with TIMER_DELIVER_MS = now + timer_delay_ms (+ i % timer_jitter_ms). Returns send RT stats."""
    n = int(rate * duration_s)
    levels = levels or [0]
    loop = asyncio.get_running_loop()
    cs = [await wire.connect(addr) for _ in range(conns)]
    tmpls = {}
    for lv in levels:
        for q in range(queues):
            if timer_delay_ms is not None:
                props = wire.props_string({MessageConst.TIMER_DELIVER_MS: wire.FrameTemplate.token("dl", 13)})
                tmpls[lv, q] = wire.FrameTemplate(wire.send_cmd(topic, _body(body_size), q, props), {"dl": 13})
            else:
                props = wire.props_string({MessageConst.DELAY: str(lv)}) if lv else ""
                tmpls[lv, q] = wire.FrameTemplate(wire.send_cmd(topic, _body(body_size), q, props))
    rtts: list[float] = []
    state = {"ok": 0, "err": 0, "codes": {}, "acked": 0}
    finished = loop.create_future()
    sent_at: dict[int, float] = {}

    def make_cb(key):
        def cb(cmd) -> None:
            rtts.append((time.perf_counter() - sent_at.pop(key)) * 1e6)
            state["acked"] += 1
            if cmd.code == _SUCCESS:
                state["ok"] += 1
            else:
                state["err"] += 1
                state["codes"][cmd.code] = state["codes"].get(cmd.code, 0) + 1
            if state["acked"] == n and not finished.done():
                finished.set_result(None)
        return cb

    if start_at:
        await asyncio.sleep(max(0.0, start_at - time.time()))
    t0 = loop.time()
    sent = 0
    tick = 0.001 if rate >= 1000 else 1.0 / rate
    while sent < n:
        due = min(n, int((loop.time() - t0) * rate) + 1)
        outs = [bytearray() for _ in cs]
        while sent < due:
            lv = levels[sent % len(levels)]
            q = (sent // len(levels)) % queues
            ci = sent % conns
            c = cs[ci]
            op = c.next_opaque()
            c.waiters[op] = make_cb((ci, op))
            now_us = _now_us()
            if timer_delay_ms is not None:
                due_ms = now_us // 1000 + timer_delay_ms + (sent % timer_jitter_ms if timer_jitter_ms else 0)
                frame = tmpls[lv, q].render(op, BODY_HEAD.pack(now_us, due_ms, 0), dl=due_ms)
            else:
                due_ms = now_us // 1000 + (level_delays_ms[lv - 1] if lv else 0)
                frame = tmpls[lv, q].render(op, BODY_HEAD.pack(now_us, due_ms, lv))
            sent_at[ci, op] = time.perf_counter()
            outs[ci] += frame
            sent += 1
        for c, out in zip(cs, outs, strict=True):
            if out:
                c.write(out)
        await asyncio.sleep(tick)
    send_el = loop.time() - t0
    try:
        await asyncio.wait_for(finished, 30)
    except TimeoutError:
        pass
    for c in cs:
        c.close()
    return {"n": n, "ok": state["ok"], "errors": state["err"], "error_codes": state["codes"],
            "send_elapsed_s": round(send_el, 3), "achieved_rate": round(n / send_el, 1),
            "send_rtt_us": percentiles(rtts)}


# ---------------------------------------------------------------- long-polling consumer

async def consume(addr: str, topic: str, queues: int, expected: int, deadline_s: float,
                  group: str = "bench_cg", from_max: bool = True, suspend_ms: int = 2000) -> dict:
    """Long-poll every queue until `expected` records arrived or the deadline passed.
    Per record: e2e_ms = receive − send time (body), lateness_ms = store ts − due (body, if due>0),
    e2e_late_ms = receive − due."""
    conn = await wire.connect(addr)
    loop = asyncio.get_running_loop()
    start = [await wire.max_offset(conn, topic, q) if from_max else 0 for q in range(queues)]
    e2e, late, recv_late = [], [], []
    by_level: dict[int, list[float]] = {}
    got = 0
    done = loop.create_future()
    stop_at = loop.time() + deadline_s

    async def poll(q: int) -> None:
        nonlocal got
        off = start[q]
        while not done.done() and loop.time() < stop_at:
            try:
                r = await conn.invoke(wire.pull_cmd(topic, q, off, 32, suspend_ms, group), suspend_ms / 1000 + 5)
            except (TimeoutError, ConnectionError):
                continue
            if r.code == _SUCCESS:
                recv_ms = time.time_ns() / 1e6
                body = r.body
                pos, end = 0, len(body)
                while pos < end:
                    st = read_store_timestamp(body, pos)
                    send_us, due_ms, lv = BODY_HEAD.unpack_from(read_body(body, pos))
                    e2e.append(recv_ms - send_us / 1000)
                    if due_ms:
                        late.append(st - due_ms)
                        recv_late.append(recv_ms - due_ms)
                        by_level.setdefault(lv, []).append(st - due_ms)
                    got += 1
                    pos += read_total_size(body, pos)
                off = int(r.ext_fields["nextBeginOffset"])
                if got >= expected and not done.done():
                    done.set_result(None)
            elif r.code in (_PULL_NOT_FOUND, _PULL_RETRY_IMMEDIATELY):
                off = int(r.ext_fields.get("nextBeginOffset", off))
            elif r.code == _PULL_OFFSET_MOVED:
                off = int(r.ext_fields.get("nextBeginOffset", off))
            else:
                await asyncio.sleep(0.05)

    tasks = [asyncio.ensure_future(poll(q)) for q in range(queues)]
    try:
        await asyncio.wait_for(asyncio.shield(done), deadline_s)
    except TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    conn.close()
    out = {"expected": expected, "received": got, "e2e_ms": percentiles(e2e)}
    if late:
        out["lateness_ms"] = percentiles(late)
        out["receive_lateness_ms"] = percentiles(recv_late)
        out["lateness_by_level_ms"] = {str(k): percentiles(v) for k, v in sorted(by_level.items())}
    return out


# ---------------------------------------------------------------- pull throughput

async def pull_all(addr: str, topic: str, queues: int, per_queue: list[int], window: int = 8,
                   max_nums: int = 32) -> dict:
    """Pipelined PULL_MESSAGE (maxMsgNums=32) over pre-filled queues: `window` pulls in flight per queue."""
    conn = await wire.connect(addr)
    loop = asyncio.get_running_loop()
    total = {"msgs": 0, "bytes": 0, "pulls": 0, "errors": 0}

    async def one(q: int) -> None:
        offsets = list(range(0, per_queue[q], max_nums))
        it = iter(offsets)
        sem = asyncio.Semaphore(window)

        async def req(off: int) -> None:
            try:
                r = await conn.invoke(wire.pull_cmd(topic, q, off, max_nums, 0), 30)
                total["pulls"] += 1
                if r.code == _SUCCESS:
                    total["bytes"] += len(r.body)
                    pos, end, k = 0, len(r.body), 0
                    while pos < end:
                        pos += read_total_size(r.body, pos)
                        k += 1
                    total["msgs"] += k
                else:
                    total["errors"] += 1
            finally:
                sem.release()

        pend = []
        for off in it:
            await sem.acquire()
            pend.append(asyncio.ensure_future(req(off)))
        await asyncio.gather(*pend)

    t0 = loop.time()
    await asyncio.gather(*(one(q) for q in range(queues)))
    el = loop.time() - t0
    conn.close()
    return {**total, "elapsed_s": round(el, 4), "rate": round(total["msgs"] / el, 1),
            "mib_s": round(total["bytes"] / el / 1048576, 2)}


# ---------------------------------------------------------------- max-offset watcher

async def watch_max_offsets(addr: str, topic: str, queues: int, target: int, deadline_s: float,
                            interval_s: float = 0.05, base: int = 0) -> dict:
    """Poll GET_MAX_OFFSET on every queue every interval until the sum reaches base+target."""
    loop = asyncio.get_running_loop()
    conn = await wire.connect(addr)
    series = []
    t0 = loop.time()
    total = base
    while loop.time() - t0 < deadline_s:
        total = await wire.total_max_offset(conn, topic, queues)
        series.append((round(loop.time() - t0, 4), total - base))
        if total - base >= target:
            break
        await asyncio.sleep(interval_s)
    conn.close()
    return {"series": series, "delivered": total - base}


async def store_timestamps(addr: str, topic: str, queues: int, group: str = "bench_ts") -> dict:
    """Every record's STORETIMESTAMP in the topic (pulled from offset 0 of each queue, 32 per pull)."""
    conn = await wire.connect(addr)
    out: list[int] = []

    async def one(q: int) -> None:
        off = 0
        while True:
            r = await conn.invoke(wire.pull_cmd(topic, q, off, 32, 0, group), 30)
            if r.code != _SUCCESS:
                return
            body = r.body
            pos, end = 0, len(body)
            while pos < end:
                out.append(read_store_timestamp(body, pos))
                pos += read_total_size(body, pos)
            off = int(r.ext_fields["nextBeginOffset"])

    await asyncio.gather(*(one(q) for q in range(queues)))
    conn.close()
    return {"store_ts": out}
