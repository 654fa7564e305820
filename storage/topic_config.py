"""TopicConfigTable persisted as `<store>/config/topics.json`:
`{"topicConfigTable": {name: {topicName, readQueueNums, writeQueueNums, perm, topicFilterType,
topicSysFlag, order}}, "dataVersion": {...}}` (remoting-protocol.md §8.7)."""

from __future__ import annotations

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
from storage._json_table import JsonTableFile

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
    def __init__(self, store_path: str) -> None:
        self.file = JsonTableFile(store_path, "topics.json", "topicConfigTable")
        self.table: dict[str, TopicConfig] = {}

    def load(self) -> None:
        table: dict[str, TopicConfig] = {}
        for name, d in self.file.read().items():
            try:
                table[name] = TopicConfig.from_json(name, d)
            except (AttributeError, TypeError, ValueError) as e:
                log.warning("topic_config.bad_entry", topic=name, error=str(e))
        self.table = table

    def persist(self) -> None:
        self.file.write({name: tc.to_json() for name, tc in sorted(self.table.items())})

    def get(self, name: str) -> TopicConfig | None:
        return self.table.get(name)

    def put(self, tc: TopicConfig, persist: bool = True) -> None:
        self.table[tc.topic_name] = tc
        self.file.bump()
        if persist:
            self.persist()

    def delete(self, name: str) -> bool:
        if self.table.pop(name, None) is None:
            return False
        self.file.bump()
        self.persist()
        return True

    def ensure_system_topics(self, delay_levels: int = 18, timer: bool = True) -> None:
        added = False
        for tc in default_system_topics(delay_levels, timer):
            if tc.topic_name not in self.table:
                self.table[tc.topic_name] = tc
                added = True
        if added:
            self.file.bump()
            self.persist()

    def __contains__(self, name: str) -> bool:
        return name in self.table

    def __len__(self) -> int:
        return len(self.table)
