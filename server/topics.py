"""Topic rules the broker applies: name validation, system topics, auto-creation (§7.1, §8.1, §8.7).

`TopicManager` sits on the persistent topic table (storage) and adds the broker's policies:
system topics at start, auto-create from TBW102 on send, `%RETRY%`/`%DLQ%` creation on demand.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import structlog

from codec.codes import (
    DEFAULT_TOPIC,
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    RETRY_PREFIX,
    SCHEDULE_QUARANTINE_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRACE_TOPIC,
)
from storage.topic_config import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    SYSTEM_TOPICS,
    TopicConfig,
    TopicConfigTable,
)

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_TOPIC", "DLQ_PREFIX", "NOT_ALLOWED_SEND", "PERM_INHERIT", "PERM_PRIORITY", "PERM_READ",
           "PERM_WRITE", "RETRY_PREFIX", "SCHEDULE_TOPIC", "SYSTEM_TOPICS", "TIMER_TOPIC", "TRACE_TOPIC",
           "TopicConfig", "TopicManager", "is_system_topic", "topic_error"]

SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TOPIC_MAX_LENGTH = 127

_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")

# Clients may not send to these (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, plus the timer topic and
# the scheduler's quarantine).
NOT_ALLOWED_SEND = NOT_ALLOWED_SEND_TOPICS | {TIMER_TOPIC, SCHEDULE_QUARANTINE_TOPIC}


def topic_error(topic: str | None) -> str | None:
    """None if the name is valid, else the remark RocketMQ answers with (code 1)."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}."
    if not _VALID.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


def advertised_perm(topic_perm: int, broker_perm: int) -> int:
    """A topic's perm as routes show it: READ/WRITE masked by the broker's brokerPermission, the
    INHERIT bit kept (TBW102 must stay inheritable on a writable broker)."""
    return topic_perm & broker_perm | (topic_perm & PERM_INHERIT)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


class TopicManager:
    """The broker's topic policies on storage's persistent `TopicConfigTable` (`table`)."""

    def __init__(self, table: TopicConfigTable, auto_create_topic_enable: bool = True,
                 default_queue_nums: int = 8) -> None:
        self.table = table
        self.auto_create = auto_create_topic_enable
        self.default_queue_nums = default_queue_nums
        self._listeners: list[Callable[[TopicConfig], None]] = []

    def add_change_listener(self, fn: Callable[[TopicConfig], None]) -> None:
        """`fn(cfg)` after every created or updated topic (name-server registration)."""
        self._listeners.append(fn)

    def data_version(self) -> tuple[int, int]:
        """The table's DataVersion (counter, timestamp): moves on every change, persisted with it."""
        return self.table.data_version.as_tuple()

    async def register_body(self, compressed: bool = False) -> bytes:
        """The whole table as a REGISTER_BROKER body, remembered per data version (storage)."""
        return await self.table.register_body(compressed)

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.table.table

    def load(self) -> None:
        self.table.load()

    def persist(self) -> None:
        self.table.persist()

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def names(self) -> list[str]:
        return sorted(self.topics)

    def put(self, cfg: TopicConfig, persist: bool = True) -> TopicConfig:
        self.table.put(cfg, persist)
        log.info("topics.updated", topic=cfg.topic_name, queues=cfg.write_queue_nums, perm=cfg.perm)
        for fn in self._listeners:
            try:
                fn(cfg)
            except Exception:
                log.exception("topics.listener_failed", topic=cfg.topic_name)
        return cfg

    def ensure_system_topics(self, delay_levels: int, timer_enabled: bool, cluster_name: str | None = None,
                             broker_name: str | None = None) -> None:
        """`cluster_name` / `broker_name`: topics named after the broker's cluster (16 queues) and the broker
        (1 queue), as Apache's broker makes them (clusterTopicEnable / brokerTopicEnable): a route lookup of a
        cluster's name finds its brokers, which is how Apache's 5.x proxy creates its system topics."""
        changed = False
        wanted = [TopicConfig(name, nums, nums, PERM_READ | PERM_WRITE | PERM_INHERIT)
                  for name, nums in ((cluster_name, 16), (broker_name, 1)) if name]
        wanted += [TopicConfig(SCHEDULE_TOPIC, delay_levels, delay_levels, PERM_READ | PERM_WRITE),
                  TopicConfig(TRACE_TOPIC, 1, 1, PERM_READ | PERM_WRITE),
                  TopicConfig(SELF_TEST_TOPIC, 1, 1, PERM_READ | PERM_WRITE),
                  TopicConfig(OFFSET_MOVED_EVENT, 1, 1, PERM_READ | PERM_WRITE),
                  TopicConfig(SCHEDULE_QUARANTINE_TOPIC, 1, 1, PERM_READ | PERM_WRITE)]
        if self.auto_create:
            wanted.append(TopicConfig(DEFAULT_TOPIC, self.default_queue_nums, self.default_queue_nums,
                                      PERM_READ | PERM_WRITE | PERM_INHERIT))
        if timer_enabled:
            wanted.append(TopicConfig(TIMER_TOPIC, 1, 1, PERM_READ | PERM_WRITE))
        for cfg in wanted:
            old = self.topics.get(cfg.topic_name)
            if old is None or (cfg.topic_name == SCHEDULE_TOPIC and old.queue_nums < delay_levels):
                self.table.put(cfg, persist=False)
                changed = True
        if changed:
            self.persist()

    def create_in_send(self, topic: str, default_topic: str, client_queue_nums: int,
                       topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create `topic` from `default_topic` when that one carries PERM_INHERIT."""
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg
        default = self.topics.get(default_topic)
        if default is None:
            return None
        perm = default.perm
        if default_topic == DEFAULT_TOPIC and not self.auto_create:
            perm = PERM_READ | PERM_WRITE
        if not perm & PERM_INHERIT:
            return None
        nums = max(1, min(client_queue_nums, default.write_queue_nums))
        cfg = TopicConfig(topic, nums, nums, perm & ~PERM_INHERIT, "SINGLE_TAG", topic_sys_flag, False)
        log.info("topics.auto_created", topic=topic, default_topic=default_topic, queues=nums)
        return self.put(cfg)

    def adopt_stored(self, stored: Iterable[tuple[str, int]]) -> list[str]:
        """After recovery: a topic whose ConsumeQueues the store holds but whose config is gone gets one again
        (queues = highest queue id + 1, perm = TBW102's read/write bits), with a warning line. A send that
        auto-created a topic is answered before the metadata writer commits the topic (storage.meta_store),
        so a kill -9 in between lost the topic while its messages stayed stored and unconsumable (seen
        with a gRPC pop test under load). Apache writes the config file before it answers; here the stored
        queues are the record that the topic existed."""
        highest: dict[str, int] = {}
        for topic, qid in stored:
            if topic not in self.topics and qid >= 0:
                highest[topic] = max(highest.get(topic, -1), qid)
        if not highest:
            return []
        default = self.topics.get(DEFAULT_TOPIC)
        perm = (default.perm & (PERM_READ | PERM_WRITE)) if default is not None else PERM_READ | PERM_WRITE
        for topic, qid in sorted(highest.items()):
            log.warning("topics.adopted_from_store", topic=topic, queues=qid + 1,
                        why="ConsumeQueues stored, topic config missing (lost in a crash)")
            self.put(TopicConfig(topic, qid + 1, qid + 1, perm or PERM_READ | PERM_WRITE))
        return sorted(highest)

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE,
                            topic_sys_flag: int = 0) -> TopicConfig:
        cfg = self.topics.get(topic)
        if cfg is not None:
            return cfg
        return self.put(TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag, False))
