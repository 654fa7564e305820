"""The one fixed-bucket histogram (RPC latency, put latency, delay-level and timer lateness).

The bucket layout is the caller's: each metric keeps the bounds its Prometheus page and msgpack export
have always shown. Observing is one `bisect_left` on the bounds (at most `MAX_BUCKETS`), an increment,
an add and a compare; `observe_many` does a delivered batch in one call. Rendering (`cumulative`,
`quantile`) happens off the hot path.

It lives in `codec/` because it is pure (no I/O, no asyncio) and every package may import codec: the
scheduler (which reaches storage only through the MessageStore facade) and the server both use it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Collection, Iterable

MAX_BUCKETS = 64  # bounds per histogram: a bisect over at most 6 comparisons


class Histogram:
    """Counts of non-negative values (latency, lateness) in fixed buckets, with sum, count and max.

    `bounds` are the buckets' inclusive upper bounds (Prometheus `le`), finite and sorted here once; the last
    bucket (+Inf) takes everything above. A negative value (a clock step) counts as 0.
    """

    __slots__ = ("bounds", "counts", "sum", "count", "max")

    def __init__(self, bounds: Iterable[float]) -> None:
        b = tuple(sorted(bounds))
        if not b or len(b) > MAX_BUCKETS or not all(math.isfinite(x) for x in b) or len(set(b)) != len(b):
            raise ValueError(f"histogram bounds must be 1..{MAX_BUCKETS} distinct finite numbers, got {b!r}")
        self.bounds = b
        self.counts = [0] * (len(b) + 1)  # last: +Inf
        self.sum: float = 0  # stays an int while only ints are observed (the ms lateness histograms)
        self.count = 0
        self.max: float = 0  # the largest value observed; 0 when empty

    def observe(self, v: float) -> None:
        if v < 0:
            v = 0
        self.counts[bisect_left(self.bounds, v)] += 1
        self.sum += v
        self.count += 1
        if v > self.max:
            self.max = v

    def observe_many(self, values: Collection[float]) -> None:
        """`observe` for each value (one call per delivered batch)."""
        counts, bounds = self.counts, self.bounds
        total: float = 0
        top = self.max
        for v in values:
            if v < 0:
                v = 0
            counts[bisect_left(bounds, v)] += 1
            total += v
            if v > top:
                top = v
        self.sum += total
        self.count += len(values)
        self.max = top

    def observe_repeated(self, v: float, n: int) -> None:
        """`observe(v)` n times in one step (a run of n requests handled in one call, each taking v)."""
        if v < 0:
            v = 0
        self.counts[bisect_left(self.bounds, v)] += n
        self.sum += v * n
        self.count += n
        if n > 0 and v > self.max:
            self.max = v

    def cumulative(self) -> list[tuple[float, int]]:
        """(le, cumulative count) per bucket, the last one (inf, count): Prometheus' `_bucket` series."""
        out: list[tuple[float, int]] = []
        acc = 0
        for le, c in zip((*self.bounds, math.inf), self.counts, strict=True):
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
                return float(self.max if le == math.inf else le)
        return float(self.max)


class RecentValues:
    """The last `size` values observed (a bounded ring), for exact quantiles where a histogram gives only
    its bucket's upper bound: `quantile(q)` is the nearest-rank q-quantile of those values, each a value
    that was observed. Appending is one C-level `deque.extend`; sorting happens when a figure is asked for."""

    __slots__ = ("_ring",)

    def __init__(self, size: int) -> None:
        self._ring: deque[float] = deque(maxlen=size)

    def extend(self, values: Iterable[float]) -> None:
        self._ring.extend(values)

    def __len__(self) -> int:
        return len(self._ring)

    def quantile(self, q: float) -> float:
        """Nearest rank: the smallest kept value with at least q of the kept values at or below it; 0 when empty."""
        if not self._ring:
            return 0.0
        ordered = sorted(self._ring)
        return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])
