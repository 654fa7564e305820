"""Per-level delivery statistics: counters, next due time, deliver rate, lateness histogram.

Lateness = delivered record's store timestamp - deliver timestamp (ms), in a `codec.histogram.Histogram`
with `LATENESS_BUCKETS_MS`. Recorded per batch with one bisect per message; no allocation per message.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TypedDict

from codec.histogram import Histogram, RecentValues

LATENESS_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000)
_RATE_WINDOW_S = 10.0
# the exact lateness percentiles (runtime info, `delaymq scheduled levels|timers`) are over this many
# most recent deliveries; the histogram keeps the all-time distribution for Prometheus and the exports
LATENESS_WINDOW = 10_000


class LatenessHistogram(TypedDict):
    """A lateness histogram as the exporters read it: cumulative (upper bound ms, count) pairs, sum, count,
    largest value (ms)."""

    buckets: list[tuple[float, int]]
    sum: float
    count: int
    max: float


class LevelStats:
    __slots__ = ("level", "delivered", "skipped", "quarantined", "failed_puts", "resends", "next_due_ms", "lateness",
                 "recent_lateness", "_rate_marks")

    def __init__(self, level: int) -> None:
        self.level = level
        self.delivered = 0
        self.skipped = 0
        self.quarantined = 0
        self.failed_puts = 0
        self.resends = 0
        self.next_due_ms = 0  # 0: no message waiting
        self.lateness = Histogram(LATENESS_BUCKETS_MS)
        self.recent_lateness = RecentValues(LATENESS_WINDOW)
        self._rate_marks: list[tuple[float, int]] = []  # (monotonic s, delivered) ≤ 1 per second

    def record_lateness(self, lateness_ms: int) -> None:
        self.observe_lateness((lateness_ms,))

    def observe_lateness(self, values: Collection[int]) -> None:
        """One delivered batch's lateness (ms): the histogram and the window of exact recent values."""
        self.lateness.observe_many(values)
        self.recent_lateness.extend(values)

    def add_delivered(self, n: int) -> None:
        self.delivered += n
        now = time.monotonic()
        marks = self._rate_marks
        if not marks or now - marks[-1][0] >= 1.0:
            marks.append((now, self.delivered - n))
            if len(marks) > 2 * _RATE_WINDOW_S:
                del marks[0]

    def rate(self) -> float:
        """Messages per second over about the last ten seconds."""
        now = time.monotonic()
        for t, total in self._rate_marks:
            if now - t <= _RATE_WINDOW_S:
                span = now - t
                return (self.delivered - total) / span if span > 0.05 else 0.0
        return 0.0

    def histogram(self) -> LatenessHistogram:
        h = self.lateness
        return {"buckets": h.cumulative(), "sum": h.sum, "count": h.count, "max": h.max}
