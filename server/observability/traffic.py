"""The broker's traffic counters: messages and bytes stored per topic, messages pulled per (topic, group).

Fed by the send paths (`on_put`, `on_put_sizes`), the scheduled deliveries (`on_put_topic`, a
scheduler.events.PutObserver: a delivery counts as a put of its real topic, as in RocketMQ) and
PULL_MESSAGE (`on_pull`); read by the /metrics page (server.observability.prometheus), the rate
windows (broker_stats.BrokerStats) and GET_BROKER_RUNTIME_INFO (msgPutTotalTodayNow, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from server.observability.registry import Counter, Registry
from storage.store_types import PutResult


class TrafficCounters:
    def __init__(self, metrics: Registry) -> None:
        self.metrics = metrics
        self.put_total = 0
        self.get_total = 0
        self.put_counters: dict[str, tuple[Counter, Counter]] = {}  # topic -> (messages, bytes)
        self.pull_counters: dict[tuple[str, str], Counter] = {}  # (topic, group) -> messages

    def _topic(self, topic: str) -> tuple[Counter, Counter]:
        c = self.put_counters.get(topic)
        if c is None:
            c = self.put_counters[topic] = (
                self.metrics.counter("delaymq_put_messages_total", {"topic": topic}),
                self.metrics.counter("delaymq_put_bytes_total", {"topic": topic}))
        return c

    def on_put(self, topics: Sequence[str], results: Sequence[PutResult]) -> None:
        """Stored records (one PutResult each) of the given topics."""
        self.put_total += len(results)
        for topic, r in zip(topics, results, strict=False):
            c = self._topic(topic)
            c[0].inc()
            c[1].inc(r.size)

    def on_put_sizes(self, topics: Sequence[str], sizes: Sequence[int]) -> None:
        """`on_put` for a run of stored sends given their topics and record sizes (one counter
        update per topic of the run)."""
        self.put_total += len(sizes)
        if len(sizes) == 1:  # a run of one (a gRPC send, a sync producer's): no per-topic sums
            c = self._topic(topics[0])
            c[0].inc()
            c[1].inc(sizes[0])
            return
        per: dict[str, list[int]] = {}
        for topic, size in zip(topics, sizes, strict=True):
            e = per.get(topic)
            if e is None:
                per[topic] = [1, size]
            else:
                e[0] += 1
                e[1] += size
        for topic, (n, nbytes) in per.items():
            c = self._topic(topic)
            c[0].inc(n)
            c[1].inc(nbytes)

    def on_put_topic(self, topic: str, n: int, nbytes: int) -> None:
        """`n` records of `nbytes` in all stored in `topic` by the broker itself (scheduled deliveries:
        scheduler.events.PutObserver); they count as puts of that topic, as in RocketMQ."""
        self.put_total += n
        c = self._topic(topic)
        c[0].inc(n)
        c[1].inc(nbytes)

    def on_pull(self, topic: str, group: str, n: int) -> None:
        self.get_total += n
        c = self.pull_counters.get((topic, group))
        if c is None:
            c = self.pull_counters[(topic, group)] = self.metrics.counter(
                "delaymq_pull_messages_total", {"topic": topic, "group": group})
        c.inc(n)

    def forget_topic(self, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER: the topic's counters go (the registry keeps its exported series)."""
        self.put_counters.pop(topic, None)
        for key in [k for k in self.pull_counters if k[0] == topic]:
            del self.pull_counters[key]
