"""get_messages status table (remoting-protocol.md §8.2), limits, tag filter, time search (§8.3)."""

from __future__ import annotations

from codec.record import decode_record
from codec.tags import java_hash
from storage.message_store import GetStatus
from storage.store_types import GetResult
from tests.helpers.checks import present
from tests.storage.conftest import open_store, request


def test_status_table(store):
    g = store.get_messages("T", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    store.put([request(body=b"%d" % i) for i in range(10)])
    g = store.get_messages("T", 0, 3, 4)
    assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (GetStatus.FOUND, 7, 0, 10)
    assert [decode_record(b, 0)[0].body for b in g.buffers] == [b"3", b"4", b"5", b"6"]
    assert g.queue_offsets == [3, 4, 5, 6]
    g = store.get_messages("T", 0, 10, 4)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
    g = store.get_messages("T", 0, 15, 4)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)


def test_offset_too_small_and_no_message_in_queue(tmp_path):
    s = open_store(tmp_path, mapped_file_size_consume_queue=20 * 10)
    cq = present(s.consume_queue("E", 0, create=True))
    g = s.get_messages("E", 0, 0, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    assert cq.max_offset == 0
    # a queue that starts at 12 (as after retention)
    from codec.consume_queue_unit import UNIT
    cq.put_units(12, UNIT.pack(0, 10, 0), 10)
    g = s.get_messages("E", 0, 3, 32)
    assert (g.status, g.next_begin_offset, g.min_offset) == (GetStatus.OFFSET_TOO_SMALL, 12, 12)
    s.close()


def test_tag_filter_counts_scanned_units(store):
    store.put([request(tags="A" if i % 3 == 0 else "B", body=b"%d" % i) for i in range(9)])
    g = store.get_messages("T", 0, 0, 32, {java_hash("A")})
    assert [decode_record(b, 0)[0].body for b in g.buffers] == [b"0", b"3", b"6"]
    assert g.next_begin_offset == 9
    g = store.get_messages("T", 0, 7, 32, {java_hash("A")})
    assert (g.status, g.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 9)


def test_byte_and_count_limits(tmp_path):
    s = open_store(tmp_path, max_get_bytes=3000, max_get_count=32)
    s.put([request(body=b"x" * 1000) for _ in range(40)])
    g = s.get_messages("T", 0, 0, 32)
    assert len(g.buffers) == 2 and g.next_begin_offset == 2  # 2 * ~1.1 KiB fit 3000 bytes
    s.close()
    s = open_store(tmp_path, max_get_count=5)
    g = s.get_messages("T", 0, 0, 32)
    assert len(g.buffers) == 5 and g.next_begin_offset == 5
    g = s.get_messages("T", 0, 0, 3)
    assert len(g.buffers) == 3
    s.close()


def test_offset_found_null_rolls_to_next_file(tmp_path):
    s = open_store(tmp_path, mapped_file_size_consume_queue=20 * 10)
    s.put([request() for _ in range(25)])
    cq = present(s.consume_queue("T", 0))
    del cq.files.files[1]  # a CQ file missing in the middle
    g = s.get_messages("T", 0, 12, 5)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, 20)
    s.close()


def _clocked(store, times):
    it = iter(times)
    store.now_ms = lambda: next(it)


def test_search_offset_by_timestamp_rules(store):
    assert store.search_offset_by_timestamp("T", 0, 123) == 0  # no queue
    _clocked(store, [1000, 2000, 2000, 3000, 5000])
    for _ in range(5):
        store.put([request()])
    search = lambda ts: store.search_offset_by_timestamp("T", 0, ts)  # noqa: E731
    assert search(2000) == 1  # exact match: the first one with that time
    assert search(3000) == 3
    assert search(500) == 0  # every message newer → first
    assert search(9000) == 4  # every message older → last (not max)
    assert search(4200) == 4  # closer to 5000
    assert search(3900) == 3  # closer to 3000
    assert search(3100) == 3  # closer to 3000
    assert search(4000) == 3  # tie → the earlier one
    assert store.earliest_store_time("T", 0) == 1000
    assert store.earliest_store_time("T", 9) is None


def test_read_records_batch_matches_read_record(tmp_path):
    s = open_store(tmp_path / "s")
    res = s.put([request(body=b"x" * i) for i in range(1, 40)])
    spans = [(r.phys_offset, r.size) for r in res]
    bad = [(res[0].phys_offset, res[0].size + 1), (res[1].phys_offset + 1, res[1].size), (1 << 40, 100),
           (s.commitlog_max_offset(), 100)]
    got = s.read_records(spans + bad)
    assert [bytes(present(g)) for g in got[:len(spans)]] == [bytes(present(s.read_record(p, n))) for p, n in spans]
    assert got[len(spans):] == [None] * len(bad)
    s.close()


def _take_both(s, units: bytes, offset: int, max_count: int, max_bytes: int):
    """(take_all's result, take_matching's with no filter) for the same units: buffers as bytes, offsets, totals."""
    out = []
    for take in (lambda r: s.reads.take_all(r, memoryview(units), offset, max_count, max_bytes),
                 lambda r: s.reads.take_matching(r, memoryview(units), offset, max_count, max_bytes, None, None, None)):
        r = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, 0, 0)
        scanned, removed = take(r)
        out.append((scanned, removed, [bytes(b) for b in r.buffers], r.queue_offsets, r.buffer_total_size))
    return out


def test_unfiltered_fast_loop_agrees_with_the_filtering_reference(tmp_path):
    """StoreReads.take_all (a pull with no filter) takes exactly what take_matching with no filter takes: across
    CommitLog segments, blank and zero-size units, units into deleted or unwritten CommitLog data, every count
    and byte limit."""
    from codec.consume_queue_unit import BLANK_UNIT, UNIT

    s = open_store(tmp_path, mapped_file_size_commitlog=16 * 1024)
    res = s.put([request(body=b"b" * (300 + 997 * i % 2500)) for i in range(60)])  # ~6 segments
    units = bytes(present(s.read_units("T", 0, 0, 60)))
    assert len({r.phys_offset // (16 * 1024) for r in res}) >= 4
    last = res[-1]
    odd = [BLANK_UNIT, UNIT.pack(res[3].phys_offset, 0, 0),  # a hole, a zero-size unit
           UNIT.pack(last.phys_offset, last.size + 64, 0),  # past what the last segment has written
           UNIT.pack(1 << 40, 100, 0)]  # no segment at all
    mixed = units[:20 * 7] + odd[0] + units[20 * 7:20 * 20] + odd[1] + odd[2] + units[20 * 20:] + odd[3]
    cases = [(units, 0), (mixed, 0), (mixed, 5), (units[20 * 30:], 30), (b"".join(odd), 7), (odd[0], 0)]
    limits = [(32, 1 << 20), (1, 1 << 20), (5, 1 << 20), (64, 4000), (64, 1), (64, 3 * 1024 * 1024)]
    for buf, offset in cases:
        for max_count, max_bytes in limits:
            fast, ref = _take_both(s, buf, offset, max_count, max_bytes)
            assert fast == ref, (offset, max_count, max_bytes)
    # the first segments' data deleted (retention): their units count as removed in both
    del s.commitlog.queue.files[:2]
    for max_count, max_bytes in limits:
        fast, ref = _take_both(s, mixed, 0, max_count, max_bytes)
        assert fast == ref and fast[1] is True
    s.close()


def test_get_messages_takes_the_fast_loop_only_without_filters(store):
    """A pull with no filter and one whose filters accept everything answer the same."""
    store.put([request(tags="A", body=b"%d" % i) for i in range(40)])
    for offset, n in ((0, 32), (10, 5), (39, 32)):
        plain = store.get_messages("T", 0, offset, n)
        ref = store.get_messages("T", 0, offset, n, record_filter=lambda rec: True, unit_filter=lambda q: True)
        assert [bytes(b) for b in plain.buffers] == [bytes(b) for b in ref.buffers] != []
        assert (plain.status, plain.next_begin_offset, plain.queue_offsets, plain.buffer_total_size) == \
            (ref.status, ref.next_begin_offset, ref.queue_offsets, ref.buffer_total_size)
