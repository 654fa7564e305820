"""`codec.histogram.RecentValues` (the exact lateness percentiles of `scheduled levels|timers`) against the
plain reference: nearest-rank quantiles of the last `size` values, computed from the whole list."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from codec.histogram import RecentValues


def reference(values: list[int], size: int, q: float) -> float:
    kept = sorted(values[-size:])
    return float(kept[max(0, math.ceil(q * len(kept)) - 1)]) if kept else 0.0


@given(st.lists(st.lists(st.integers(-5, 100_000), max_size=40), max_size=30), st.integers(1, 64),
       st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
def test_quantile_is_the_nearest_rank_of_the_last_values(batches, size, q):
    r = RecentValues(size)
    seen: list[int] = []
    for batch in batches:
        r.extend(batch)
        seen += batch
        assert len(r) == min(size, len(seen))
        assert r.quantile(q) == reference(seen, size, q)


def test_a_figure_is_an_observed_value_not_a_bucket_edge():
    r = RecentValues(1000)
    r.extend([119, 130, 163, 2, 3] * 20)
    assert r.quantile(0.99) == 163 and r.quantile(0.5) == 119
