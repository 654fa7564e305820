"""TopicConfigTable: the topic configs in memory (the read path) and in the MetaStore (`<store>/config/meta.db`,
one row per topic, written by the MetaStore's writer thread). `topics.json` in RocketMQ's shape
(`{"topicConfigTable": {name: {topicName, readQueueNums, writeQueueNums, perm, topicFilterType,
topicSysFlag, order}}, "dataVersion": {...}}`, remoting-protocol.md §8.7) is exported on demand
(MetaStore.export_json) and migrated from at the first start."""

from __future__ import annotations

import os
from dataclasses import dataclass

import structlog

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
from storage.meta_store import DataVersion, MetaStore

log = structlog.get_logger(__name__)

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

    def to_json(self) -> dict:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    def to_row(self) -> tuple:
        return (self.topic_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_filter_type,
                self.topic_sys_flag, int(self.order))

    @classmethod
    def from_row(cls, row) -> TopicConfig:
        name, rq, wq, perm, ftype, sysflag, order = row
        return cls(name, rq, wq, perm, ftype, sysflag, bool(order))

    @classmethod
    def from_json(cls, name: str, d: dict) -> TopicConfig:
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

    @property
    def data_version(self) -> DataVersion:
        return self.meta.versions["topic"]

    def load(self) -> None:
        self.meta.open()
        table: dict[str, TopicConfig] = {}
        for row in self.meta.load_topics():
            table[row[0]] = TopicConfig.from_row(row)
        self.table = table

    def persist(self) -> None:
        self.meta.flush()

    def get(self, name: str) -> TopicConfig | None:
        return self.table.get(name)

    def put(self, tc: TopicConfig, persist: bool = True) -> None:
        """Store `tc` (replacing the topic's config); staged for the writer thread either way (`persist`
        is kept for callers of the old API)."""
        self.table[tc.topic_name] = tc
        self.meta.stage_topic(tc.to_row(), tc.topic_name)

    def delete(self, name: str) -> bool:
        if self.table.pop(name, None) is None:
            return False
        self.meta.stage_topic(None, name)
        return True

    def ensure_system_topics(self, delay_levels: int = 18, timer: bool = True) -> None:
        for tc in default_system_topics(delay_levels, timer):
            if tc.topic_name not in self.table:
                self.put(tc)

    def __contains__(self, name: str) -> bool:
        return name in self.table

    def __len__(self) -> int:
        return len(self.table)
