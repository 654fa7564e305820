"""Per-level delivery statistics: counters, next due time, deliver rate, lateness histogram.

Lateness = delivered record's store timestamp - deliver timestamp (ms). Recorded per batch with
one bisect per message; no allocation per message. `LatenessHistogram` is also the timer wheel's.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Collection
from typing import Any

LATENESS_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000)
_RATE_WINDOW_S = 10.0


class LatenessHistogram:
    """Fixed-bucket histogram of lateness in ms (negative values count as 0), with sum, count and max."""

    __slots__ = ("bounds", "counts", "sum", "count", "max")

    def __init__(self, bounds: tuple[int, ...] = LATENESS_BUCKETS_MS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last: +Inf
        self.sum = 0
        self.count = 0
        self.max = 0

    def observe(self, ms: int) -> None:
        if ms < 0:
            ms = 0
        self.counts[bisect_left(self.bounds, ms)] += 1
        self.sum += ms
        self.count += 1
        if ms > self.max:
            self.max = ms

    def observe_many(self, values: Collection[int]) -> None:
        """`observe` for each value (one call per delivered batch)."""
        counts, bounds = self.counts, self.bounds
        total = 0
        top = self.max
        for ms in values:
            if ms < 0:
                ms = 0
            counts[bisect_left(bounds, ms)] += 1
            total += ms
            if ms > top:
                top = ms
        self.sum += total
        self.count += len(values)
        self.max = top

    def cumulative(self) -> list[tuple[float, int]]:
        out, acc = [], 0
        for le, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += c
            out.append((le, acc))
        return out

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile q (the max seen for the +Inf bucket; 0 when empty)."""
        if not self.count:
            return 0.0
        target = q * self.count
        for le, acc in self.cumulative():
            if acc >= target:
                return float(self.max if le == float("inf") else le)
        return float(self.max)


class LevelStats:
    __slots__ = ("level", "delivered", "skipped", "quarantined", "failed_puts", "resends", "next_due_ms", "lateness",
                 "_rate_marks")

    def __init__(self, level: int) -> None:
        self.level = level
        self.delivered = 0
        self.skipped = 0
        self.quarantined = 0
        self.failed_puts = 0
        self.resends = 0
        self.next_due_ms = 0  # 0: no message waiting
        self.lateness = LatenessHistogram()
        self._rate_marks: list[tuple[float, int]] = []  # (monotonic s, delivered) ≤ 1 per second

    def record_lateness(self, lateness_ms: int) -> None:
        self.lateness.observe(lateness_ms)

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

    def histogram(self) -> dict[str, Any]:
        h = self.lateness
        return {"buckets": h.cumulative(), "sum": h.sum, "count": h.count, "max": h.max}
