import math

import pytest

from codec.histogram import MAX_BUCKETS, Histogram

LATENESS_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 60_000)


def test_observe_many_equals_observe_each():
    values = [-5, 0, 1, 3, 7, 49, 50, 51, 999, 70_000, 12]
    one, many = Histogram(LATENESS_BUCKETS_MS), Histogram(LATENESS_BUCKETS_MS)
    for v in values:
        one.observe(v)
    many.observe_many(values)
    assert (many.counts, many.sum, many.count, many.max) == (one.counts, one.sum, one.count, one.max)
    assert isinstance(many.sum, int)  # ms lateness stays integral in the exports


def test_buckets_are_inclusive_upper_bounds_and_negative_counts_as_zero():
    h = Histogram((10, 1, 5))  # sorted once
    for v in (-3, 0, 1, 1.5, 5, 10, 10.5):
        h.observe(v)
    assert h.bounds == (1, 5, 10)
    assert h.cumulative() == [(1, 3), (5, 5), (10, 6), (math.inf, 7)]
    assert (h.count, h.sum, h.max) == (7, 28, 10.5)


def test_quantile_is_the_bucket_bound_or_the_max_in_the_inf_bucket():
    h = Histogram((1, 10))
    assert h.quantile(0.99) == 0.0
    h.observe_many([0.5, 5, 50])
    assert h.quantile(0.3) == 1 and h.quantile(0.5) == 10 and h.quantile(0.99) == 50.0


@pytest.mark.parametrize("bounds", [(), (1, 1), (1, math.inf), (float("nan"),), range(MAX_BUCKETS + 1)])
def test_bad_bounds_are_refused(bounds):
    with pytest.raises(ValueError):
        Histogram(bounds)
