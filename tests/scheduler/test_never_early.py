"""Never early, to the millisecond, measured as a producer would: against the instant the send call
started (a float on the broker's own clock, taken just before the put), with no slack.

A delay-level message and a relative timer must be stored in their real topic, and be visible there
(the dispatch that makes a held pull answer), no sooner than start + delay; an absolute
TIMER_DELIVER_MS no sooner than that ms. Before the fix a message was delivered in the millisecond
storeTimestamp + delay itself, i.e. up to 1 ms before start + delay (most messages whose level was not
busy). Messages are sent one by one a few ms apart so that many land in every position of a ms.
"""

from __future__ import annotations

import asyncio
import random
import time

from codec.record import MessageRecord, encode_record
from scheduler.delay_levels import DelayLevelService
from scheduler.timer import TimerConfig, TimerMessageStore, transform_timer
from storage.message_store import PutRequest
from tests.scheduler.helpers import QueueWatcher, delay_config, open_store, put_delayed, read_queue

N = 120


class Arrivals:
    """When each queue offset of a topic became visible (the store's dispatch listener, float ms)."""

    def __init__(self, store, topic: str) -> None:
        self.topic = topic
        self.seen = 0
        self.at: list[float] = []
        store.add_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic, queue_id, max_offset) -> None:
        if topic == self.topic:
            now = time.time() * 1000
            while self.seen < max_offset:
                self.at.append(now)
                self.seen += 1


def _early(store, topic: str, arrivals: Arrivals, due: dict[str, float]) -> list:
    out = []
    for qoff, (_tags, rec) in enumerate(read_queue(store, topic)):
        d = due[rec.properties["UNIQ_KEY"]]
        if rec.store_timestamp < d or arrivals.at[qoff] < d:
            out.append((rec.properties["UNIQ_KEY"], round(d - rec.store_timestamp, 3), round(d - arrivals.at[qoff], 3)))
    return out


async def test_delay_level_messages_are_never_early(tmp_path):
    store = open_store(tmp_path)
    svc = DelayLevelService(store, delay_config(tmp_path))
    arrivals = Arrivals(store, "NE")
    watch = QueueWatcher(store, "NE", 0)
    svc.start()
    rng = random.Random(7)
    due: dict[str, float] = {}
    try:
        for _ in range(N):
            start = time.time() * 1000
            [(uniq, _res)] = put_delayed(store, svc.config.levels_ms, "NE", 1)
            due[uniq] = start + svc.config.levels_ms[0]
            await asyncio.sleep(rng.uniform(0, 0.004))  # pacing: spread sends over the ms
        await watch.wait_for(N, timeout=20)
        early = _early(store, "NE", arrivals, due)
        assert not early, f"{len(early)} of {N} early (uniq, ms early stored, ms early visible): {early[:5]}"
    finally:
        await svc.shutdown()
        await store.shutdown()


async def test_timers_relative_and_absolute_are_never_early(tmp_path):
    store = open_store(tmp_path)
    timer = TimerMessageStore(store, TimerConfig(store_root=str(tmp_path), precision_ms=100))
    arrivals = Arrivals(store, "NT")
    watch = QueueWatcher(store, "NT", 0)
    timer.start()
    rng = random.Random(8)
    due: dict[str, float] = {}
    try:
        for i in range(N):
            start = time.time() * 1000
            now = int(time.time() * 1000)  # the broker's clock reading in the put hook (truncated)
            kind = i % 3
            if kind == 0:
                props, d = {"TIMER_DELAY_MS": "150"}, start + 150
            elif kind == 1:
                props, d = {"TIMER_DELAY_SEC": "1"}, start + 1000
            else:
                at = now + rng.randint(100, 300)
                props, d = {"TIMER_DELIVER_MS": str(at)}, at
            uniq = f"T{i:04d}"
            rec = MessageRecord(topic="NT", body=b"t", born_timestamp=now, properties={**props, "UNIQ_KEY": uniq})
            assert transform_timer(rec, now, timer).ok
            assert store.put([PutRequest(encode_record(rec), rec.topic, rec.queue_id)])[0].ok
            due[uniq] = d
            await asyncio.sleep(rng.uniform(0, 0.004))
        await watch.wait_for(N, timeout=20)
        early = _early(store, "NT", arrivals, due)
        assert not early, f"{len(early)} of {N} early (uniq, ms early stored, ms early visible): {early[:5]}"
    finally:
        await timer.shutdown()
        await store.shutdown()
