"""TopicConfigTable: the topic configs in memory (the read path) and in the MetaStore (`<store>/config/meta.db`,
one row per topic, written by the MetaStore's writer thread). `topics.json` in RocketMQ's shape
(`{"topicConfigTable": {name: {topicName, readQueueNums, writeQueueNums, perm, topicFilterType,
topicSysFlag, order}}, "dataVersion": {...}}`, remoting-protocol.md §8.7) is exported on demand
(MetaStore.export_json) and migrated from at the first start."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import structlog

from codec import table_bodies as TB
from codec.codes import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    PermName,
)
from storage.meta_store import DataVersion, MetaStore, TopicRow
from storage.table_body import CachedBody, Fragments

log = structlog.get_logger(__name__)

RENDER_SLICE = 1000  # loaded rows rendered between two yields (~1 ms)
INLINE_ALWAYS_THREAD = 1 << 30  # added to a row count: always build in the executor (deflate is slow)

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = PermName.PRIORITY, PermName.READ, PermName.WRITE, PermName.INHERIT
SYSTEM_TOPICS = frozenset({
    DEFAULT_TOPIC, SCHEDULE_TOPIC, BENCHMARK_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, TRACE_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def queue_nums(self) -> int:
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    def to_row(self) -> TopicRow:
        return (self.topic_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_filter_type,
                self.topic_sys_flag, int(self.order))

    @classmethod
    def from_row(cls, row: TopicRow) -> TopicConfig:
        name, rq, wq, perm, ftype, sysflag, order = row
        return cls(name, rq, wq, perm, ftype, sysflag, bool(order))

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> TopicConfig:
        return cls(str(name or d.get("topicName")), int(d.get("readQueueNums", 16)),
                   int(d.get("writeQueueNums", 16)), int(d.get("perm", PERM_READ | PERM_WRITE)),
                   str(d.get("topicFilterType") or "SINGLE_TAG"),
                   int(d.get("topicSysFlag") or d.get("topicSynFlag") or 0),
                   bool(d.get("order", False)))


def default_system_topics(delay_levels: int = 18, timer: bool = True) -> list[TopicConfig]:
    """RocketMQ's built-in topics: TBW102 (8 queues, perm 7), SCHEDULE_TOPIC_XXXX (one queue per
    delay level), the timer topic, and the other system topics with one queue."""
    out = [TopicConfig(DEFAULT_TOPIC, 8, 8, PERM_READ | PERM_WRITE | PERM_INHERIT),
           TopicConfig(SCHEDULE_TOPIC, delay_levels, delay_levels)]
    if timer:
        out.append(TopicConfig(TIMER_TOPIC, 1, 1))
    for name in sorted(SYSTEM_TOPICS - {DEFAULT_TOPIC, SCHEDULE_TOPIC}):
        out.append(TopicConfig(name, 1, 1))
    return out


class TopicConfigTable:
    """name -> TopicConfig. Changes are staged in the MetaStore (O(1)); `meta.committed()` says when
    they are durable; `persist()` blocks until they are (shutdown, tests)."""

    def __init__(self, store_path: str, meta: MetaStore | None = None) -> None:
        self.meta = meta or MetaStore(os.path.join(store_path, "config"))
        self.table: dict[str, TopicConfig] = {}
        # per-topic serialised fragments (codec.table_bodies), kept with the row; bodies per data version
        self._members = Fragments()   # "name":{TopicConfig JSON}
        self._compact = Fragments()   # int32 length + TopicConfig.encode() (compressed registration)
        self._unsafe_names = 0                 # rendered names that need JSON escaping (none made by this broker)
        self._rendered = True                  # False after load until the first body renders the loaded rows
        self._rendering: asyncio.Future[None] | None = None
        self._wrapper = CachedBody()
        self._list = CachedBody()
        self._register = CachedBody()
        self._register_z = CachedBody()

    def _render(self, tc: TopicConfig) -> None:
        name = tc.topic_name
        if name not in self._members and not TB.is_plain_name(name):
            self._unsafe_names += 1
        self._members[name] = TB.topic_member(name, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                              tc.topic_filter_type, tc.topic_sys_flag, tc.order)
        self._compact[name] = TB.topic_compact(name, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                               tc.topic_filter_type)

    @property
    def data_version(self) -> DataVersion:
        return self.meta.versions["topic"]

    async def _ensure_rendered(self) -> None:
        """Fragments for the rows loaded at start, made when a body first needs them (a restart with
        100,000 topics does not pay for them), RENDER_SLICE rows at a time with a yield between."""
        if self._rendered:
            return
        if self._rendering is not None:
            await asyncio.shield(self._rendering)
            return
        fut = self._rendering = asyncio.get_running_loop().create_future()
        try:
            names = list(self.table)
            for i in range(0, len(names), RENDER_SLICE):
                if i:
                    await asyncio.sleep(0)
                for name in names[i:i + RENDER_SLICE]:
                    tc = self.table.get(name)
                    if tc is not None and name not in self._members:
                        self._render(tc)
            self._rendered = True
        finally:
            self._rendering = None
            fut.set_result(None)

    def load(self) -> None:
        self.meta.open()
        table: dict[str, TopicConfig] = {}
        for row in self.meta.load_topics():
            table[row[0]] = TopicConfig.from_row(row)
        self.table = table
        self._members.clear()
        self._compact.clear()
        self._unsafe_names = 0
        self._rendered = not table

    def persist(self) -> None:
        self.meta.flush()

    def get(self, name: str) -> TopicConfig | None:
        return self.table.get(name)

    def put(self, tc: TopicConfig, persist: bool = True) -> None:
        """Store `tc` (replacing the topic's config); staged for the writer thread either way (`persist`
        is kept for callers of the old API)."""
        name = tc.topic_name
        self.table[name] = tc
        self._render(tc)
        self.meta.stage_topic(tc.to_row(), name)

    def delete(self, name: str) -> bool:
        if self.table.pop(name, None) is None:
            return False
        if self._members.pop(name) is not None and not TB.is_plain_name(name):
            self._unsafe_names -= 1
        self._compact.pop(name)
        self.meta.stage_topic(None, name)
        return True

    # ---- whole-table bodies (GET_ALL_TOPIC_CONFIG, topic lists, broker registration) ---------
    def _key(self) -> tuple[int, int]:
        return self.data_version.as_tuple()

    async def wrapper_body(self) -> bytes:
        """TopicConfigSerializeWrapper JSON of the current data version (remembered until it changes;
        built off the loop when large)."""
        await self._ensure_rendered()
        key = self._key()
        body = self._wrapper.peek(key)
        if body is not None:
            return body
        version = TB.version_json(*key)
        members = await self._members.snapshot()
        return await self._wrapper.get(key, len(members), lambda: members,
                                       lambda members: TB.topic_wrapper(version, members))

    async def topic_list_body(self) -> bytes:
        """TopicList JSON `{"topicList":[...]}` of every topic (insertion order; Java reads it as a Set)."""
        await self._ensure_rendered()
        plain = self._unsafe_names == 0
        return await self._list.get(self._key(), len(self.table), lambda: list(self.table),
                                    lambda names: TB.topic_list(names, plain))

    async def register_body(self, compressed: bool = False) -> bytes:
        """RegisterBrokerBody of the whole table for REGISTER_BROKER: JSON, or RocketMQ's deflated form
        (`compressed=true` header). Remembered per data version: re-sending an unchanged table costs nothing;
        compare `data_version` to skip sending it at all."""
        await self._ensure_rendered()
        key = self._key()
        if compressed:
            body = self._register_z.peek(key)
            if body is not None:
                return body
            version = TB.version_json(*key)
            compact = await self._compact.snapshot()
            return await self._register_z.get(key, len(compact) + INLINE_ALWAYS_THREAD, lambda: compact,
                                              lambda entries: TB.register_body_compressed(version, entries))
        wrapper = await self.wrapper_body()
        return await self._register.get(key, len(wrapper) // 100, lambda: wrapper, TB.register_body)

    async def replace_all(self, configs: dict[str, TopicConfig], slice_n: int = 1000) -> int:
        """Make the table equal to `configs` (a slave adopting its master's table): changed and new rows are
        put, missing ones deleted, each staged like any change, `slice_n` rows between two yields to the
        loop. Returns the number of rows changed."""
        changed = 0
        names = list(configs)
        for i in range(0, len(names), slice_n):
            if i:
                await asyncio.sleep(0)
            for name in names[i:i + slice_n]:
                tc = configs[name]
                if self.table.get(name) != tc:
                    self.put(tc)
                    changed += 1
        gone = [name for name in self.table if name not in configs]
        for i in range(0, len(gone), slice_n):
            if i:
                await asyncio.sleep(0)
            for name in gone[i:i + slice_n]:
                changed += self.delete(name)
        return changed

    def ensure_system_topics(self, delay_levels: int = 18, timer: bool = True) -> None:
        for tc in default_system_topics(delay_levels, timer):
            if tc.topic_name not in self.table:
                self.put(tc)

    def __contains__(self, name: str) -> bool:
        return name in self.table

    def __len__(self) -> int:
        return len(self.table)
