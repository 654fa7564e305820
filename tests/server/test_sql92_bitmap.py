"""The SQL92 bitmap pre-filter (enableCalcFilterBitMap=true, server.filter_bitmap) against an in-process broker:
the same answers as without it, units a group's bits rule out skipped without reading the CommitLog, and
units it cannot vouch for (before the group registered, after an expression change, after a restart) left
to the exact evaluation."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from codec.consume_queue_unit import UNIT_SIZE as CQ_UNIT_SIZE
from codec.filter_bitmap import UNIT, UNIT_SIZE, group_mask
from codec.sql92 import Selector
from server.broker import BrokerController
from server.filter_bitmap import Registered, UnitGate
from storage.filter_bitmap import FilterBitmapFiles
from tests.codec.strategies import FEW
from tests.helpers.checks import present
from tests.server.helpers import send
from tests.server.raw import RawClient
from tests.server.test_sql92_pull import bodies, sql_pull

EU, BIG = "region = 'eu'", "amount > 100"


async def _send_all(c: RawClient, topic: str, start: int, n: int) -> None:
    for i in range(start, start + n):
        r = await send(c, topic, f"m{i}".encode(), qid=0, region="eu" if i % 5 == 0 else "us", amount=str(i * 10))
        assert r.code == 0, r.remark


async def _pull_all(c: RawClient, group: str, topic: str, expression: str, sub_version: int = 1,
                    start: int = 0) -> list[bytes]:
    got: list[bytes] = []
    offset = start
    while True:
        r = await sql_pull(c, group, topic, offset, expression, sub_version=sub_version)
        if r.code not in (0, 20):
            return got
        got += bodies(r)
        offset = int(r.ext["nextBeginOffset"])


async def test_bitmap_on_answers_as_off_and_skips_what_the_bits_rule_out(make_broker, tmp_path) -> None:
    assert group_mask("GEu", "T") & ~group_mask("GBig", "T"), "the two groups' bloom bits must differ"
    answers = {}
    for on in (False, True):
        b: BrokerController = await make_broker(store=tmp_path / f"s{on}", enable_property_filter=True,
                                                enable_calc_filter_bit_map=on)
        c = await RawClient.connect(b.config.broker_addr)
        try:
            await _send_all(c, "T", 0, 10)  # before any group registered: computed when the queue is first seen
            for g, e in (("GEu", EU), ("GBig", BIG)):
                assert (await sql_pull(c, g, "T", 10, e)).code == 19  # registers the group (bitmap on)
            await _send_all(c, "T", 10, 40)
            answers[on] = {g: await _pull_all(c, g, "T", e) for g, e in (("GEu", EU), ("GBig", BIG))}
            if on:
                bm = present(b.bitmaps)
                assert bm.computed == 50
                # every unit a group does not match was ruled out by its bits, none of those it matches
                eu = sum(1 for i in range(50) if i % 5 == 0)
                big = sum(1 for i in range(50) if i * 10 > 100)
                assert bm.skipped == (50 - eu) + (50 - big)
            else:
                assert b.bitmaps is None
        finally:
            await c.close()
    assert answers[True] == answers[False]
    assert answers[True]["GEu"] == [f"m{i}".encode() for i in range(0, 50, 5)]


async def test_a_new_expression_and_a_restart_fall_back_to_exact_evaluation(make_broker, tmp_path) -> None:
    store = tmp_path / "store"
    b: BrokerController = await make_broker(store=store, enable_property_filter=True, enable_calc_filter_bit_map=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await _send_all(c, "T", 0, 20)
        assert await _pull_all(c, "G", "T", EU) == [f"m{i}".encode() for i in range(0, 20, 5)]  # registers G
        await _send_all(c, "T", 20, 5)  # the queue's first dispatch since: its 25 units computed for EU
        assert present(b.bitmaps).computed == 25
        # the same group now asks for the other expression: the bits computed for EU say nothing about it
        assert await _pull_all(c, "G", "T", BIG, sub_version=2) == [f"m{i}".encode() for i in range(11, 25)]
        assert present(b.bitmaps).skipped == 0
    finally:
        await c.close()
    await b.shutdown()
    b2: BrokerController = await make_broker(store=store, enable_property_filter=True, enable_calc_filter_bit_map=True)
    c2 = await RawClient.connect(b2.config.broker_addr)
    try:
        assert await _pull_all(c2, "G", "T", EU) == [f"m{i}".encode() for i in range(0, 25, 5)]
        assert present(b2.bitmaps).skipped == 0  # units computed before this registration: exact evaluation only
        await _send_all(c2, "T", 25, 5)
        r = await sql_pull(c2, "G", "T", 25, EU)
        assert bodies(r) == [b"m25"] and present(b2.bitmaps).skipped == 4
    finally:
        await c2.close()


async def test_consumers_of_one_group_with_their_own_sub_versions_share_the_bits(make_broker) -> None:
    """Each consumer of a group has its own subVersion: the same expression keeps one registration, and an
    older subVersion with another expression gets no bitmap (exact evaluation) instead of replacing it."""
    b: BrokerController = await make_broker(enable_property_filter=True, enable_calc_filter_bit_map=True)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await _send_all(c, "T", 0, 1)
        assert bodies(await sql_pull(c, "G", "T", 0, EU, sub_version=5)) == [b"m0"]  # registers EU
        await _send_all(c, "T", 1, 10)
        for version in (5, 7):  # two consumers, the same expression: both use the bits
            assert bodies(await sql_pull(c, "G", "T", 1, EU, sub_version=version)) == [b"m5", b"m10"]
        assert present(b.bitmaps).skipped == 2 * 8
        older = await sql_pull(c, "G", "T", 1, BIG, sub_version=3)  # an older consumer's other expression
        assert older.code == 20 and bodies(older) == []  # amounts 10..100: none above 100
        assert present(b.bitmaps).skipped == 2 * 8  # evaluated exactly, its registration left alone
        assert bodies(await sql_pull(c, "G", "T", 1, EU, sub_version=5)) == [b"m5", b"m10"]
        assert present(b.bitmaps).skipped == 3 * 8
    finally:
        await c.close()


def _bitmap_starts(store: Path, topic: str, qid: int) -> set[int]:
    d = store / "filterbitmap" / topic / str(qid)
    return {int(p.name) for p in d.iterdir()} if d.is_dir() else set()


def _cq_starts(store: Path, topic: str, qid: int) -> set[int]:
    """The first unit of each ConsumeQueue file (named by its first byte offset)."""
    return {int(p.name) // CQ_UNIT_SIZE for p in (store / "consumequeue" / topic / str(qid)).iterdir()}


async def test_bitmap_files_follow_the_consume_queue_through_retention_and_topic_deletion(make_broker,
                                                                                          tmp_path) -> None:
    """Bitmap files of 64 units beside ConsumeQueue files of 64 units: retention deleting CommitLog segments and
    the ConsumeQueue files below the new min deletes the bitmap files they describe; the pre-filter still answers
    from the new min; a deleted topic takes its bitmap files along."""
    store = tmp_path / "store"
    b: BrokerController = await make_broker(store=store, enable_property_filter=True, enable_calc_filter_bit_map=True,
                                            mapped_file_size_commit_log=8192,
                                            mapped_file_size_consume_queue=64 * CQ_UNIT_SIZE,
                                            mapped_file_size_consume_queue_ext=64 * UNIT_SIZE)
    c = await RawClient.connect(b.config.broker_addr)
    try:
        await _send_all(c, "T", 0, 1)
        assert (await sql_pull(c, "G", "T", 1, EU)).code == 19  # registers G
        await _send_all(c, "T", 1, 199)
        assert _bitmap_starts(store, "T", 0) == {0, 64, 128, 192} == _cq_starts(store, "T", 0)
        assert b.store is not None
        assert b.store.clean_expired(now=time.time() + 10 * 365 * 86400)  # every CommitLog segment but the last
        low = b.store.min_offset("T", 0)
        assert low > 128, low
        assert _bitmap_starts(store, "T", 0) == _cq_starts(store, "T", 0) == {128, 192}
        skipped = present(b.bitmaps).skipped
        assert await _pull_all(c, "G", "T", EU, start=low) == [f"m{i}".encode() for i in range(low, 200) if i % 5 == 0]
        assert present(b.bitmaps).skipped - skipped == sum(1 for i in range(low, 200) if i % 5)
        assert b.delete_topic("T")
        assert not (store / "filterbitmap" / "T").exists()
    finally:
        await c.close()


@FEW
@given(units=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 20)), max_size=60),
       mask_bits=st.sets(st.integers(0, 63), min_size=1, max_size=3), since=st.integers(0, 20),
       until=st.integers(0, 25), start=st.integers(0, 70), count=st.integers(0, 40))
def test_gate_flags_answer_as_the_gate_unit_by_unit(units: list[tuple[int, int]], mask_bits: set[int], since: int,
                                                   until: int, start: int, count: int) -> None:
    mask = sum(1 << b for b in mask_bits)
    with tempfile.TemporaryDirectory() as d:
        files = FilterBitmapFiles(d, 16)  # files of 16 units: a scan crosses them
        try:
            if units:
                files.write("T", 0, 0, b"".join(UNIT.pack(bits | (mask if i % 3 == 0 else 0), ms)
                                                 for i, (bits, ms) in enumerate(units)))
            reg = Registered(Selector(EU), 1, mask, since)
            reference = UnitGate(files, "T", 0, reg, until)
            want = bytes([reference(o) for o in range(start, start + count)])
            gate = UnitGate(files, "T", 0, reg, until)
            assert gate.flags(start, count) == want
            gate.scanned_to(start + count)
            assert gate.skipped == reference.skipped == want.count(0)
        finally:
            files.close()
