"""TimerLog.read_chain (numpy block reads of back-to-back units) against its maintained reference, the
unit-by-unit walk TimerLog.read_chain_reference: interleaved slots, runs across file ends, a unit with
a bad size, the step limit."""

from __future__ import annotations

import random

from codec.timer_layout import UNIT, UNIT_SIZE
from scheduler.timer.timerlog import TimerLog


def _chain(tl: TimerLog, pos: int, min_pos: int, limit: int = 1 << 30):
    got, bad = [], None
    while pos >= min_pos and pos >= 0:
        units, pos, bad = tl.read_chain(pos, min_pos, limit)
        got += [tuple(int(x) for x in u) for u in units]
        if bad is not None:
            break
    return got, bad


def _fill(tl: TimerLog, rng: random.Random, n: int, slots: int, burst: float) -> dict[int, int]:
    last: dict[int, int] = {}
    s = 0
    for i in range(n):
        if rng.random() > burst:
            s = rng.randrange(slots)
        prev = last.get(s, -1)
        last[s] = tl.append(prev, rng.choice((1, 2, 4, 6)), 1000 + i, s, 77 * i, 100 + i % 7, s, 5000 + rng.randrange(999))
    return last


def test_chain_matches_unit_walk(tmp_path):
    rng = random.Random(3)
    tl = TimerLog(str(tmp_path), UNIT_SIZE * 300 + 16)  # small files: runs cross file ends
    tl.load()
    last = _fill(tl, rng, 20000, 5, burst=0.97)
    for s, pos in last.items():
        for limit in (1 << 30, 7, 100):
            want, bad = tl.read_chain_reference(pos, tl.min_pos)
            got, gbad = _chain(tl, pos, tl.min_pos, limit)
            assert got == [tuple(u) for u in want] and gbad == bad, (s, limit)
    tl.close()


def test_chain_stops_at_a_bad_unit_and_at_min_pos(tmp_path):
    rng = random.Random(5)
    tl = TimerLog(str(tmp_path), UNIT_SIZE * 4000 + 16)
    tl.load()
    last = _fill(tl, rng, 3000, 1, burst=1.0)
    pos = last[0]
    seg = tl.segments[0]
    broken = pos - 1000 * UNIT_SIZE
    u = list(UNIT.unpack_from(seg.mm, broken))
    u[0] = 51
    UNIT.pack_into(seg.mm, broken, *u)
    want, bad = tl.read_chain_reference(pos, 0)
    got, gbad = _chain(tl, pos, 0)
    assert bad == gbad == broken and got == [tuple(x) for x in want] and len(got) == 1000
    want, _ = tl.read_chain_reference(pos, pos - 10 * UNIT_SIZE)
    got, _ = _chain(tl, pos, pos - 10 * UNIT_SIZE)
    assert got == [tuple(x) for x in want] and len(got) == 11
    tl.close()


def test_walk_chain_steps_down_the_chain_and_stops_at_a_bad_unit(tmp_path):
    """TimerLog.walk_chain (the reader's, recovery's and a cancel's walk): the steps join to the reference
    walk; `more` on every step but the last; a bad unit ends the walk in that step's `bad`."""
    rng = random.Random(7)
    tl = TimerLog(str(tmp_path), UNIT_SIZE * 4000 + 16)
    tl.load()
    last = _fill(tl, rng, 3000, 2, burst=0.9)
    for pos in last.values():
        steps = list(tl.walk_chain(pos, 100))
        want, bad = tl.read_chain_reference(pos, tl.min_pos)
        assert bad is None and len(steps) > 1
        assert [tuple(int(x) for x in u) for s in steps for u in s.units] == [tuple(u) for u in want]
        assert [s.more for s in steps] == [True] * (len(steps) - 1) + [False] and all(s.bad is None for s in steps)
    pos = last[0]
    want, _ = tl.read_chain_reference(pos, tl.min_pos)
    broken = pos  # the chain's 600th unit (walked 100 at a time) is made bad
    for _ in range(599):
        broken = UNIT.unpack_from(tl.segments[0].mm, broken)[1]
    u = list(UNIT.unpack_from(tl.segments[0].mm, broken))
    u[0] = 51
    UNIT.pack_into(tl.segments[0].mm, broken, *u)
    steps = list(tl.walk_chain(pos, 100))
    assert steps[-1].bad == broken and not steps[-1].more and all(s.bad is None for s in steps[:-1])
    assert [tuple(int(x) for x in u) for s in steps for u in s.units] == [tuple(x) for x in want[:599]]
    tl.close()
