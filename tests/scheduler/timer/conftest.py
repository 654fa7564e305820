"""Real MessageStore + TimerMessageStore in tmp_path, precision 100 ms; helpers to send and collect."""

from __future__ import annotations

import asyncio
import time

import pytest

from codec.record import MessageRecord, decode_record, encode_record
from scheduler.events import on_event
from scheduler.timer import TimerConfig, TimerMessageStore, transform_timer
from storage.message_store import MessageStore, PutRequest, StoreConfig
from tests.helpers.checks import present

PRECISION = 100


def now_ms() -> int:
    return int(time.time() * 1000)


class Harness:
    def __init__(self, root: str, commitlog_size: int = 1 << 26, **timer_kw) -> None:
        self.root = root
        self.commitlog_size = commitlog_size
        self.timer_kw = timer_kw
        self.store: MessageStore | None = None
        self.timer: TimerMessageStore | None = None
        self.arrived = asyncio.Event()

    def open(self) -> None:
        self.store = MessageStore(StoreConfig(store_path=self.root, mapped_file_size_commitlog=self.commitlog_size))
        self.store.load()
        self.store.start()
        self.store.add_dispatch_listener(lambda t, q, m: self.arrived.set())
        kw = {"precision_ms": PRECISION, "store_root": self.root, **self.timer_kw}
        self.timer = TimerMessageStore(self.store, TimerConfig(**kw))
        self.timer.add_listener(on_event(lambda event, **f: self.arrived.set()))
        self.timer.start()

    async def close(self) -> None:
        if self.timer is not None:
            await self.timer.shutdown()
        if self.store is not None:
            await self.store.shutdown()
        self.timer = self.store = None

    def send(self, topic: str, props: dict, body: bytes = b"x", queue_id: int = 0, now: int | None = None):
        rec = MessageRecord(topic=topic, body=body, queue_id=queue_id, born_timestamp=now_ms(),
                            properties=dict(props))
        dec = transform_timer(rec, now_ms() if now is None else now, present(self.timer, "timer (open() first)"))
        if not dec.ok:
            return dec, None
        res = present(self.store).put([PutRequest(encode_record(rec), rec.topic, rec.queue_id)])
        assert res[0].status.name == "PUT_OK"
        return dec, res[0]

    def messages(self, topic: str, queue_id: int = 0) -> list[MessageRecord]:
        store = present(self.store, "store (open() first)")
        out, off = [], store.min_offset(topic, queue_id)
        mx = store.max_offset(topic, queue_id)
        while off < mx:
            got = store.get_messages(topic, queue_id, off, 32, None)
            if not got.buffers:
                break
            for b in got.buffers:
                out.append(decode_record(bytes(b))[0])
            off = got.next_begin_offset
            del got
        return out

    async def wait_until(self, cond, timeout: float) -> None:
        """Wait for `cond()` re-checked on every store dispatch and timer event, bounded by timeout."""
        deadline = time.monotonic() + timeout
        while not cond():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("condition not reached in time")
            self.arrived.clear()
            if cond():
                return
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except TimeoutError:
                pass

    def count(self, topic: str, queue_id: int = 0) -> int:
        return present(self.store, "store (open() first)").max_offset(topic, queue_id)


@pytest.fixture
async def harness(tmp_path):
    h = Harness(str(tmp_path / "store"))
    h.open()
    yield h
    await h.close()


@pytest.fixture
async def make_harness(tmp_path):
    made: list[Harness] = []

    def make(**kw) -> Harness:
        h = Harness(str(tmp_path / "store"), **kw)
        h.open()
        made.append(h)
        return h

    yield make
    for h in made:
        await h.close()
