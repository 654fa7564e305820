"""get_messages' `record_literal` (a SQL92 selector's literal searched once over the scan's CommitLog span) against
the same lookup without it, the reference: every pull step of every queue answers the same (status, next offset,
queue offsets, record bytes), across CommitLog segments, with a bitmap-like unit filter in front (unit by unit
and in bulk, `unit_flags`) and with the literal in bodies and other properties."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from codec.sql92 import Selector
from storage.message_store import MessageStore
from tests.codec.strategies import FEW
from tests.storage.conftest import open_store, request

EXPRESSIONS = ["region = 'eu'", "region = 'eu' AND amount > 3", "a = 'x' AND region = 'eu'", "region = 'e'"]
REGIONS = ["eu", "us", "", "eu2", "xeu", "e"]

messages = st.lists(st.tuples(
    st.integers(0, 2),  # queue
    st.sampled_from(REGIONS),
    st.sampled_from(["1", "5", "lots"]),  # amount
    st.sampled_from([b"b", b"region\x01eu", b"x" * 300]),  # a body that holds the literal is still evaluated
), min_size=1, max_size=12).flatmap(  # a pattern repeated to up to 200 messages: ~10 segments of 8 KiB
    lambda pattern: st.integers(1, 200).map(lambda n: (pattern * n)[:n]))


def _fill(s: MessageStore, msgs: list[tuple[int, str, str, bytes]]) -> None:
    for i, (q, region, amount, body) in enumerate(msgs):
        props = {"region": region, "amount": amount, "a": "x"} if region else {"amount": amount, "a": "x"}
        s.put([request(queue_id=q, body=body + b"%d" % i, props=props)])


def _answers(s: MessageStore, sel: Selector, q: int, max_num: int, skip_every: int, literal: bytes | None,
             bulk: bool = False) -> list[tuple[str, int, list[int], list[bytes]]]:
    """Every pull step; `skip_every` rules out the units `off % skip_every == 1` as a bitmap gate would, unit by
    unit (unit_filter) or, `bulk`, in one call per scan (unit_flags)."""
    def ruled_in(off: int) -> bool:
        return off % skip_every != 1

    def flags(off: int, n: int) -> bytes:
        return bytes([ruled_in(o) for o in range(off, off + n)])

    out = []
    offset = 0
    end = s.get_messages("T", q, 0, 1).max_offset
    while offset < end:
        g = s.get_messages("T", q, offset, max_num, None, sel.matches_record,
                           ruled_in if skip_every and not bulk else None, literal,
                           flags if skip_every and bulk else None)
        out.append((g.status.name, g.next_begin_offset, list(g.queue_offsets), [bytes(b) for b in g.buffers]))
        if g.next_begin_offset <= offset:
            break
        offset = g.next_begin_offset
    return out


@FEW
@given(msgs=messages, expression=st.sampled_from(EXPRESSIONS), max_num=st.sampled_from([1, 3, 32]),
       skip_every=st.sampled_from([0, 2, 5]), max_bytes=st.sampled_from([1500, 256 * 1024]),
       segment=st.sampled_from([8 * 1024, 1 << 20]))
def test_the_literal_scan_answers_as_the_plain_scan(msgs: list[tuple[int, str, str, bytes]], expression: str,
                                                    max_num: int, skip_every: int, max_bytes: int,
                                                    segment: int) -> None:
    sel = Selector(expression)
    assert sel.literal is not None
    with tempfile.TemporaryDirectory() as d:  # 8 KiB segments: scans cross them; 1 MiB: the bulk step decides
        s = open_store(Path(d) / "store", mapped_file_size_commitlog=segment, max_get_bytes=max_bytes)
        try:
            _fill(s, msgs)
            for q in range(3):
                want = _answers(s, sel, q, max_num, skip_every, None)
                assert _answers(s, sel, q, max_num, skip_every, sel.literal) == want
                assert _answers(s, sel, q, max_num, skip_every, sel.literal, bulk=True) == want
                assert _answers(s, sel, q, max_num, skip_every, None, bulk=True) == want
        finally:
            s.close()


def test_a_scan_across_segments_finds_the_matches_and_passes_over_the_rest(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store")
    try:
        for i in range(600):  # ~200 KiB of records: the scan spans several 64 KiB segments
            s.put([request(body=b"y" * 200, props={"region": "eu" if i % 50 == 7 else "us", "n": str(i)})])
        sel = Selector("region = 'eu'")
        calls = 0

        def counting(rec: memoryview) -> bool:
            nonlocal calls
            calls += 1
            return sel.matches_record(rec)

        got, offset = [], 0
        while offset < 600:
            g = s.get_messages("T", 0, offset, 32, None, counting, None, sel.literal)
            got += g.queue_offsets
            offset = g.next_begin_offset
        assert got == [i for i in range(600) if i % 50 == 7]
        assert calls == len(got)  # only the records holding the literal were evaluated
    finally:
        s.close()


def test_a_ruled_out_unit_too_large_for_the_bytes_left_stops_the_scan_as_unit_by_unit(tmp_path: Path) -> None:
    s = open_store(tmp_path / "store", max_get_bytes=1000)
    try:
        for region, body in (("eu", b"x" * 300), ("eu", b"x" * 300), ("us", b"y" * 600), ("us", b"b"), ("eu", b"z")):
            s.put([request(body=body, props={"region": region})])
        sel = Selector("region = 'eu'")
        plain = s.get_messages("T", 0, 0, 32, None, sel.matches_record)
        assert (plain.queue_offsets, plain.next_begin_offset) == ([0, 1], 2)  # stopped at the large 'us' unit
        for flags in (None, lambda off, n: b"\x01" * n):
            fast = s.get_messages("T", 0, 0, 32, None, sel.matches_record, None, sel.literal, flags)
            assert (fast.queue_offsets, fast.next_begin_offset) == ([0, 1], 2)
    finally:
        s.close()
