"""scheduler.level_scan: `scan_due` (the rule inlined) agrees with `scan_due_reference` (scheduler.due and
scheduler.levels, unit by unit), and neither takes a unit before its due ms."""

from __future__ import annotations

import random

from codec.consume_queue_unit import UNIT
from scheduler.level_scan import DueScan, scan_due, scan_due_reference

NOW = 1_700_000_000_000
DELAY = 5_000


def _units(tags_codes: list[int]) -> bytes:
    return b"".join(UNIT.pack(1000 + 100 * k, 90 + k, t) for k, t in enumerate(tags_codes))


def test_never_early_at_the_boundary():
    # tagsCode = storeTimestamp + delay; due the first ms strictly after it
    units = _units([NOW - 2, NOW - 1, NOW, NOW + 1])
    got = scan_due(units, 4, NOW, DELAY)
    assert got == DueScan([1000, 1100], [90, 91], [NOW - 1, NOW], 2, NOW + 1)
    assert scan_due(units, 4, NOW + 1, DELAY).scanned == 3


def test_a_deliver_time_beyond_the_delay_is_due_now():
    # correctDeliverTimestamp: a tagsCode further away than the level's delay (clock jump) is now
    got = scan_due(_units([NOW + DELAY + 1, NOW + DELAY]), 2, NOW, DELAY)
    assert got == DueScan([1000], [90], [NOW], 1, NOW + DELAY + 1)


def test_fast_path_agrees_with_reference():
    rng = random.Random(27)
    for _ in range(2000):
        n = rng.randrange(0, 40)
        tags = sorted(NOW + rng.randrange(-50, 30) for _ in range(n))
        if n and rng.random() < 0.3:  # an out-of-range tagsCode somewhere
            tags[rng.randrange(n)] = NOW + DELAY + rng.randrange(1, 10**6)
        units = _units(tags)
        limit = rng.randrange(1, 45)
        now = NOW + rng.randrange(-5, 5)
        fast = scan_due(units, limit, now, DELAY)
        assert fast == scan_due_reference(units, limit, now, DELAY), (tags, limit, now)
        assert all(d <= now for d in fast.dues) and (fast.wait_due == 0 or fast.wait_due > now)
