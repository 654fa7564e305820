"""storage.table_body.Fragments: a dict of row fragments held in hash shards behaves as one dict."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.table_body import FRAGMENT_SHARDS, Fragments

ops = st.lists(st.tuples(st.booleans(), st.text(max_size=6), st.binary(max_size=4)), max_size=200)


@settings(max_examples=100, deadline=None)
@given(ops)
def test_fragments_behave_as_one_dict(seq):
    frags, ref = Fragments(), {}
    for put, name, frag in seq:
        if put:
            frags[name] = frag
            ref[name] = frag
        else:
            assert frags.pop(name) == ref.pop(name, None)
        assert len(frags) == len(ref)
    assert sorted(frags.values()) == sorted(ref.values())
    assert all(name in frags for name in ref)
    assert not any(name + "\x00" in frags for name in ref if name + "\x00" not in ref)
    frags.clear()
    assert len(frags) == 0 and frags.values() == []


def test_fragments_spread_over_the_shards():
    frags = Fragments()
    for i in range(10_000):
        frags[f"tenant-{i:06d}"] = b"x"
    sizes = [len(s) for s in frags._shards]
    assert len(sizes) == FRAGMENT_SHARDS and max(sizes) < 3 * 10_000 / FRAGMENT_SHARDS


async def test_a_large_snapshot_is_copied_over_several_loop_turns():
    """Fragments.snapshot of a large table equals values() and lets the loop run between shard groups;
    a small one is one copy."""
    import asyncio

    from storage.table_body import INLINE_MAX_ROWS, SNAPSHOT_SHARDS_PER_TURN

    frags = Fragments()
    for i in range(INLINE_MAX_ROWS * 5):
        frags[f"tenant-{i:06d}"] = b"%d" % i
    turns = 0
    running = True

    def tick():
        nonlocal turns
        turns += 1
        if running:
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    snap = await frags.snapshot()
    running = False
    assert sorted(snap) == sorted(frags.values())
    assert turns >= FRAGMENT_SHARDS // SNAPSHOT_SHARDS_PER_TURN - 1
    small = Fragments()
    small["a"] = b"1"
    assert await small.snapshot() == [b"1"]
