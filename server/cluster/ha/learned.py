"""A slave's topics learned from replication (issue 25 item 4, "no silent gaps").

A slave copies its master's topic table only every slaveSynchronizeIntervalMs (SlaveSynchronize), but
it replicates records at once. A topic auto-created on the master since the last sync would be unknown
to the slave, and to the slave once promoted: consumers get TOPIC_NOT_EXIST (17) for messages it
holds. `ReplicatedTopics` closes that gap as a dispatch listener on the slave's store: when a replicated
record lands in a (topic, queue) no topic config covers, or names one as its destination (a scheduled
message's or a transaction half's REAL_TOPIC / REAL_QID, delivered there later), the topic is created (or widened) from what the
ConsumeQueues show -- queue count = highest queue id + 1 (never more queues than the master has shown:
a promoted slave must not spread a 2-queue topic's producers over queues the master never had), perm as
TBW102 gives (its READ/WRITE bits) -- and marked as
learned. The next metadata sync replaces it with the master's real config (`after_sync`); a topic learned
after the master's answer was taken survives that sync; one learned before it and absent from the
master's table was deleted there and goes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import structlog

from codec.codes import DEFAULT_TOPIC
from server.topics import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig, TopicManager

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class LearnedTopic:
    """A topic config this slave made from replicated records: when (`seq`), and the queue ids it saw
    replicated (`seen`: the highest + 1)."""

    seq: int
    seen: int


class ReplicatedTopics:
    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics
        self.learned: dict[str, LearnedTopic] = {}
        self.seq = 0  # moves on every learned topic (a sync compares it with the value before its request)

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener: after a reput wrote units to (topic, queue_id)."""
        cfg = self.topics.get(topic)
        if cfg is not None and queue_id < cfg.read_queue_nums:
            return
        self.learn(topic, queue_id + 1)

    def on_destinations(self, destinations: set[tuple[str, int]]) -> None:
        """The store's replica destination listener: the real topics of replicated scheduled messages and
        transaction halves, known before the first delivery there (and before a promotion)."""
        for topic, queue_id in destinations:
            self.on_dispatch(topic, queue_id, -1)

    def queue_nums_for(self, topic: str, seen: int) -> int:
        return seen

    def perm(self) -> int:
        default = self.topics.get(DEFAULT_TOPIC)
        perm = (default.perm if default is not None else PERM_READ | PERM_WRITE) & ~PERM_INHERIT
        return perm or PERM_READ | PERM_WRITE

    def learn(self, topic: str, seen: int) -> TopicConfig:
        """Create `topic`, or widen it, so that it covers queue ids below `seen`."""
        cfg = self.topics.get(topic)
        if cfg is None:
            n = self.queue_nums_for(topic, seen)
            new = TopicConfig(topic, n, n, self.perm())
        else:
            new = dataclasses.replace(cfg, read_queue_nums=max(cfg.read_queue_nums, seen),
                                      write_queue_nums=max(cfg.write_queue_nums, seen))
        self.seq += 1
        old = self.learned.get(topic)
        self.learned[topic] = LearnedTopic(self.seq, max(seen, old.seen if old is not None else 0))
        log.warning("topics.learned_from_replication", topic=topic, queues=new.queue_nums, perm=new.perm,
                    known_before=cfg is not None)
        return self.topics.put(new)

    def after_sync(self, master_topics: set[str], since: int) -> None:
        """After the master's table (`master_topics`, requested when `seq` was `since`) replaced the
        local one: a learned topic the master has is the master's now (widened if the master's answer
        predates a queue this slave already replicated); one learned since the request is put back; the
        rest were deleted on the master."""
        for name, lt in list(self.learned.items()):
            cfg = self.topics.get(name)
            if name in master_topics and cfg is not None:
                if cfg.read_queue_nums < lt.seen and lt.seq > since:
                    self.learn(name, lt.seen)
                else:
                    del self.learned[name]
            elif lt.seq > since:
                self.learn(name, lt.seen)
            else:
                del self.learned[name]
                log.info("topics.learned_dropped", topic=name, reason="not in the master's table")
