"""Memory is O(slots), never O(pending messages): enqueueing 200k timers allocates no per-message
Python objects that stay alive (tracemalloc), and the wheel lives in its mmap."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from codec.record import MessageRecord, encode_record
from scheduler.timer import TIMER_TOPIC, transform_timer
from storage.message_store import PutRequest
from tests.scheduler.timer.conftest import now_ms

N = 200_000


@pytest.mark.slow
async def test_200k_pending_timers_do_not_grow_python_heap(harness):
    rng = random.Random(1)
    now = now_ms()
    template = MessageRecord(topic="MEM", body=b"m" * 16, properties={})
    batch = []
    for i in range(N):
        template.topic, template.queue_id = "MEM", 0
        template.properties = {"TIMER_DELIVER_MS": str(now + 3_600_000 + rng.randint(0, 3_600_000)),
                               "UNIQ_KEY": f"{i:032X}"}
        assert transform_timer(template, now, harness.timer).ok
        batch.append(PutRequest(encode_record(template), TIMER_TOPIC, 0))
        if len(batch) == 2000:
            harness.store.put(batch)
            batch = []
    assert harness.count(TIMER_TOPIC) == N
    harness.timer.metrics.listeners.clear()  # the per-message event path is not under test here
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await harness.timer.wait_enqueued(N, 120)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    s = harness.timer.stats()
    assert s["pending"] == N and s["accepted"] == N
    assert s["occupied_slots"] > 30_000  # spread over an hour of 100 ms slots
    # 200k per-message objects would need >= 200k * 28 bytes (one int each) = 5.6 MB
    assert grown < 2_000_000, f"python heap grew {grown} bytes for {N} pending timers"
