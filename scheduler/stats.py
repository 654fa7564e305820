"""Per-level delivery statistics: counters, next due time, deliver rate, lateness histogram.

Lateness = delivered record's store timestamp - deliver timestamp (ms). Recorded per batch with
one bisect per message; no allocation per message.
"""

from __future__ import annotations

import time
from bisect import bisect_left

LATENESS_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000)
_RATE_WINDOW_S = 10.0


class LevelStats:
    __slots__ = ("level", "delivered", "skipped", "failed_puts", "resends", "next_due_ms",
                 "bucket_counts", "lateness_sum", "lateness_max", "_rate_marks")

    def __init__(self, level: int) -> None:
        self.level = level
        self.delivered = 0
        self.skipped = 0
        self.failed_puts = 0
        self.resends = 0
        self.next_due_ms = 0  # 0: no message waiting
        self.bucket_counts = [0] * (len(LATENESS_BUCKETS_MS) + 1)  # last: +Inf
        self.lateness_sum = 0
        self.lateness_max = 0
        self._rate_marks: list[tuple[float, int]] = []  # (monotonic s, delivered) ≤ 1 per second

    def record_lateness(self, lateness_ms: int) -> None:
        if lateness_ms < 0:
            lateness_ms = 0
        self.bucket_counts[bisect_left(LATENESS_BUCKETS_MS, lateness_ms)] += 1
        self.lateness_sum += lateness_ms
        if lateness_ms > self.lateness_max:
            self.lateness_max = lateness_ms

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

    def histogram(self) -> dict:
        cum, buckets = 0, []
        for le, n in zip(LATENESS_BUCKETS_MS + (float("inf"),), self.bucket_counts, strict=True):
            cum += n
            buckets.append((le, cum))
        return {"buckets": buckets, "sum": self.lateness_sum, "count": cum, "max": self.lateness_max}
