"""kill -9 at random points of delay-level and timer delivery, several times, in both flush modes
(and both delay deliver modes, alternating): afterwards nothing is lost, nothing early, nothing twice.

A killed process keeps its mmap writes (CommitLog, ConsumeQueues, timerlog, scheduleProgress) in the
page cache, so after kill -9 every delivery it put is in the store; the scheduler must resume exactly
past them (scheduler.progress_file). Before scheduleProgress, each kill re-delivered everything since the
last delayOffset.json write (every 10 s) and the timer slot in flight.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import Counter

import pytest

from codec.record import decode_record
from tests.helpers.checks import present
from tests.scheduler.helpers import open_store

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS, PER_ROUND = 4, 600


async def _child(root: str, flush: str, deliver: str, first: int, count: int, *fault: str):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.scheduler.kill9_exact_child", root, flush, deliver, str(first), str(count),
        *fault, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    line = await asyncio.wait_for(present(proc.stdout).readline(), 60)
    assert line.strip() == b"READY", line
    return proc


@pytest.mark.parametrize("flush", ["async", "sync"])
async def test_kill9_during_delay_and_timer_delivery_loses_nothing_early_nothing_twice(tmp_path, flush):
    root = str(tmp_path)
    rng = random.Random(hash(flush) & 0xFFFF)
    for r in range(ROUNDS):
        proc = await _child(root, flush, "async" if r % 2 else "sync", r * PER_ROUND, PER_ROUND)
        try:
            await asyncio.wait_for(proc.wait(), rng.uniform(0.15, 0.9))  # it never exits by itself
        except TimeoutError:
            pass
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        assert proc.returncode == -signal.SIGKILL
    await _drain_and_check(tmp_path, flush, ROUNDS * PER_ROUND)


@pytest.mark.parametrize("flush,deliver,which", [("async", "sync", "level"), ("sync", "async", "level"),
                                                  ("async", "sync", "timer"), ("sync", "sync", "timer")])
async def test_kill9_between_a_delivery_put_and_its_progress_write(tmp_path, flush, deliver, which):
    """The narrowest window: the put is in the CommitLog, scheduleProgress still says "in flight".
    Recovery finds the put's records after the in-flight mark and resumes past them."""
    proc = await _child(str(tmp_path), flush, deliver, 0, PER_ROUND, which)
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL  # killed itself after that put
    await _drain_and_check(tmp_path, flush, PER_ROUND)


async def _drain_and_check(tmp_path, flush: str, first: int) -> None:
    proc = await _child(str(tmp_path), flush, "sync", first, 0)
    out = (await asyncio.wait_for(proc.stdout.read(), 90)).decode()
    assert await proc.wait() == 0 and "DRAINED" in out, out

    store = open_store(tmp_path, sync_flush=flush == "sync", commitlog_size=1 << 22)
    try:
        accepted = int(out.split("DRAINED")[1].split()[0])
        count: Counter = Counter()
        early = []
        off = 0
        while off < store.max_offset("KX", 0):
            got = store.get_messages("KX", 0, off, 64, None)
            for b in got.buffers:
                rec = decode_record(bytes(b))[0]
                key = rec.properties["UNIQ_KEY"]
                count[key] += 1
                if rec.store_timestamp < float(rec.body):
                    early.append((key, float(rec.body) - rec.store_timestamp))
            off = got.next_begin_offset
            del got
        dups = {k: n - 1 for k, n in count.items() if n > 1}
        assert len(count) == accepted, f"lost {accepted - len(count)} of {accepted}"
        assert not early, f"{len(early)} delivered early: {early[:5]}"
        assert not dups, f"{len(dups)} delivered twice ({sum(dups.values())} extra copies): {sorted(dups)[:10]}"
        assert accepted >= PER_ROUND // 2  # the kills landed after the burst was sent
    finally:
        await store.shutdown()
