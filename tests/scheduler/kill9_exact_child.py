"""Child process of test_kill9_exact: a real MessageStore + DelayLevelService + TimerMessageStore under
delay-level and timer load, killed with SIGKILL by the test at random points of delivery.

argv: root flush(sync|async) deliver(sync|async) first count [level|timer]
Sends `count` messages M<first>..: a burst (half level 1, half one TIMER_DELAY_MS: large delivery
puts), then a trickle mixing levels 1-3, relative and absolute timers. Each body is the message's
never-early bound in ms (send start + delay, or the absolute deliver ms). Prints READY once started,
SENT when all are sent, then delivers until killed. With count 0: delivers until every message
accepted so far is in topic KX, then stops cleanly and prints DRAINED. With a last argument `level` or
`timer`, the process SIGKILLs itself right after the first delivery put of more than one record by the
delay levels (or the timer wheel) returns: a kill between a put and its progress write, every time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path

import structlog

from codec.record import MessageRecord, encode_record, read_properties
from codec.tags import java_hash
from scheduler.delay_levels import DelayLevelService, transform_delay
from scheduler.levels import SCHEDULE_TOPIC
from scheduler.timer import TimerConfig, TimerMessageStore, transform_timer
from storage.message_store import PutRequest
from tests.scheduler.helpers import delay_config, open_store

TOPIC = "KX"
TIMER_TOPIC = "rmq_sys_wheel_timer"


def _send(store, svc, timer, i: int, kind: str, arg: int) -> None:
    start = time.time() * 1000
    now = int(time.time() * 1000)
    props = {"UNIQ_KEY": f"M{i}"}
    if kind == "level":
        props["DELAY"] = str(arg)
        bound = start + svc.config.levels_ms[arg - 1]
    elif kind == "after":
        props["TIMER_DELAY_MS"] = str(arg)
        bound = start + arg
    else:
        props["TIMER_DELIVER_MS"] = str(now + arg)
        bound = now + arg
    rec = MessageRecord(topic=TOPIC, body=repr(bound).encode(), queue_id=0, born_timestamp=now,
                        born_host=("127.0.0.1", 5555), store_host=("127.0.0.1", 10911), properties=props)
    delay = transform_delay(rec, svc.config.levels_ms)
    if delay is None:
        assert transform_timer(rec, now, timer).ok
    res = store.put([PutRequest(encode_record(rec), rec.topic, rec.queue_id, java_hash("x"), (f"M{i}",),
                                -1 if delay is None else delay)])[0]
    assert res.ok, res.status


def accepted_keys(store) -> set[str]:
    keys = set()
    for topic, queues in ((SCHEDULE_TOPIC, range(4)), (TIMER_TOPIC, range(1))):
        for q in queues:
            off = store.min_offset(topic, q)
            while off < store.max_offset(topic, q):
                got = store.get_messages(topic, q, off, 64, None)
                if not got.buffers:
                    break
                for b in got.buffers:
                    p = read_properties(b)
                    if "TIMER_ROLL_TIMES" not in p:
                        keys.add(p["UNIQ_KEY"])
                off = got.next_begin_offset
                del got
    return keys


def kill_after_first_put(store, which: str) -> None:
    """The fault: SIGKILL this process right after a multi-record delivery put of `which` returned."""
    real = store.put_batch

    def put_batch(batch):
        res = real(batch)
        if len(batch.dests) > 1 and (type(batch).__name__ == "DeliveryBatch") == (which == "level"):
            os.kill(os.getpid(), signal.SIGKILL)
        return res

    store.put_batch = put_batch


async def main(root: str, flush: str, deliver: str, first: int, count: int, fault: str | None = None) -> None:
    path = Path(root)
    store = open_store(path, sync_flush=flush == "sync", commitlog_size=1 << 22)
    if fault:
        kill_after_first_put(store, fault)
    svc = DelayLevelService(store, delay_config(path, async_deliver=deliver == "async"))
    timer = TimerMessageStore(store, TimerConfig(store_root=root, precision_ms=10, flush_interval_ms=200,
                                                 timerlog_file_size=1 << 20))
    svc.start()
    timer.start()
    print("READY", flush=True)
    rng = random.Random(first)
    burst = count // 2
    for i in range(first, first + burst):  # due together: big delivery puts
        _send(store, svc, timer, i, "level", 1) if i % 2 else _send(store, svc, timer, i, "after", 150)
    for n, i in enumerate(range(first + burst, first + count)):
        kind = ("level", "after", "at")[n % 3]
        _send(store, svc, timer, i, kind, rng.randint(1, 3) if kind == "level" else rng.randint(20, 400))
        if n % 10 == 9:
            await asyncio.sleep(0.002)  # producer pacing, not synchronisation
    print("SENT", flush=True)
    if count:
        await asyncio.Event().wait()  # deliver until killed
    want = accepted_keys(store)
    seen: set[str] = set()
    done = asyncio.Event()
    state = {"off": 0}

    def scan(*_a) -> None:
        off = state["off"]
        while off < store.max_offset(TOPIC, 0):
            got = store.get_messages(TOPIC, 0, off, 64, None)
            if not got.buffers:
                break
            seen.update(read_properties(b)["UNIQ_KEY"] for b in got.buffers)
            off = got.next_begin_offset
            del got
        state["off"] = off
        if want <= seen:
            done.set()

    store.add_dispatch_listener(lambda t, q, m: scan() if t == TOPIC else None)
    scan()
    await asyncio.wait_for(done.wait(), 60)
    await svc.shutdown()  # each level finishes its pass: anything it would re-deliver is in KX now
    await timer.shutdown()
    await store.shutdown()
    print(f"DRAINED {len(want)}", flush=True)


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], int(a[3]), int(a[4]), a[5] if len(a) > 5 else None))
