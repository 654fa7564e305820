"""Real MessageStore + DelayLevelService helpers for the delay-level tests (no mocks)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codec.consume_queue_unit import UNIT, UNIT_SIZE
from codec.record import MessageRecord, decode_record, encode_record
from codec.tags import java_hash
from scheduler.delay_levels import DelayConfig, DelayLevelService, transform_delay
from scheduler.events import EventCallback
from scheduler.levels import SCHEDULE_TOPIC, parse_delay_levels, schedule_tags_code
from storage.message_store import MessageStore, PutRequest, PutResult, StoreConfig
from tests.helpers.checks import present

FAST_LEVELS = "100ms 200ms 300ms 1s"
_seq = itertools.count()


def store_config(path: str | os.PathLike[str], sync_flush: bool = False, **kw: Any) -> StoreConfig:
    return StoreConfig(store_path=str(path), mapped_file_size_commitlog=kw.pop("commitlog_size", 1 << 20),
                       mapped_file_size_consume_queue=20 * 4096,
                       flush_disk_type="SYNC_FLUSH" if sync_flush else "ASYNC_FLUSH",
                       **kw)


def open_store(path: str | os.PathLike[str], **kw: Any) -> MessageStore:
    # recovery rebuilds schedule units with the FAST levels' deliver times, as the broker's wiring does
    store = MessageStore(store_config(path, **kw), tags_code_of=schedule_tags_code(parse_delay_levels(FAST_LEVELS)))
    store.load()
    store.start()
    return store


def delay_config(path: Path, **kw: Any) -> DelayConfig:
    kw.setdefault("flush_offset_interval_ms", 10_000)
    return DelayConfig(levels_ms=parse_delay_levels(FAST_LEVELS), config_dir=str(path / "config"), **kw)


def make_record(topic: str, level: int, body: bytes = b"x", queue_id: int = 0, tags: str | None = "TagA",
                extra: dict[str, str] | None = None, sys_flag: int = 0, reconsume: int = 0) -> MessageRecord:
    props = {"UNIQ_KEY": f"U{next(_seq):08d}", "KEYS": "k1 k2"}
    if level:
        props["DELAY"] = str(level)
    if tags:
        props["TAGS"] = tags
    props.update(extra or {})
    return MessageRecord(topic=topic, body=body, queue_id=queue_id, flag=7, sys_flag=sys_flag,
                         born_timestamp=int(time.time() * 1000), born_host=("10.1.2.3", 5555),
                         store_host=("127.0.0.1", 10911), reconsume_times=reconsume, properties=props)


def put_delayed(store: MessageStore, levels_ms: list[int], topic: str, level: int, n: int = 1,
                **kw: Any) -> list[tuple[str, PutResult]]:
    """Put `n` messages through the put hook, one store.put; returns [(uniq, PutResult)]."""
    reqs, uniqs = [], []
    for i in range(n):
        rec = make_record(topic, level, body=kw.get("body", b"body-%d" % i), **{
            k: v for k, v in kw.items() if k != "body"})
        delay = transform_delay(rec, levels_ms)
        tags = rec.properties.get("TAGS")
        reqs.append(PutRequest(encode_record(rec), rec.topic, rec.queue_id, java_hash(tags) if tags else 0,
                               (rec.properties["UNIQ_KEY"],), -1 if delay is None else delay))
        uniqs.append(rec.properties["UNIQ_KEY"])
    results = store.put(reqs)
    assert all(r.ok for r in results), [r.status for r in results]
    return list(zip(uniqs, results, strict=True))


def read_queue(store: MessageStore, topic: str, queue_id: int = 0, start: int = 0) -> list[tuple[int, MessageRecord]]:
    """[(unit tagsCode, MessageRecord)] of a ConsumeQueue, in queue order."""
    out: list[tuple[int, MessageRecord]] = []
    off = start
    while True:
        units = store.read_units(topic, queue_id, off, 256)
        if not units:
            return out
        for phys, size, tags in UNIT.iter_unpack(units):
            out.append((tags, decode_record(present(store.read_record(phys, size)), 0)[0]))
        off += len(units) // UNIT_SIZE


class QueueWatcher:
    """Wakes when a ConsumeQueue's max offset reaches a target (dispatch listener, no polling)."""

    def __init__(self, store: MessageStore, topic: str, queue_id: int = 0) -> None:
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        store.add_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == self.topic and queue_id == self.queue_id:
            for n, fut in self._waiters:
                if max_offset >= n and not fut.done():
                    fut.set_result(None)

    async def wait_for(self, n: int, timeout: float = 30.0) -> int:  # a hang guard
        if self.store.max_offset(self.topic, self.queue_id) < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((n, fut))
            try:
                await asyncio.wait_for(fut, timeout)
            finally:
                self._waiters.remove((n, fut))
        return self.store.max_offset(self.topic, self.queue_id)


class EventRecorder(EventCallback):
    """A DelayLevelService listener that records events and wakes waiters on a predicate."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._waiters: list[tuple[Callable[[EventRecorder], bool], asyncio.Future[None]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))
        for pred, fut in self._waiters:
            if not fut.done() and pred(self):
                fut.set_result(None)

    def named(self, event: str) -> list[dict[str, Any]]:
        return [f for e, f in self.events if e == event]

    async def wait(self, pred: Callable[[EventRecorder], bool], timeout: float = 30.0) -> None:  # a hang guard
        if pred(self):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((pred, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            self._waiters.remove((pred, fut))


__all__ = ["SCHEDULE_TOPIC", "DelayLevelService", "FAST_LEVELS", "open_store", "delay_config", "put_delayed",
           "read_queue", "QueueWatcher", "make_record", "EventRecorder"]
