"""CommitLog and ConsumeQueue round trips with real files and small segments."""

from __future__ import annotations

import os
import struct

from codec.consume_queue_unit import UNIT
from codec.record import BLANK_MAGIC_CODE, decode_record
from storage.consume_queue import ConsumeQueue
from storage.message_store import GetStatus, PutStatus
from tests.helpers.checks import present
from tests.storage.conftest import SEG, open_store, record, request


def test_round_trip_across_segments(store):
    reqs = [request(queue_id=i % 2, body=f"m{i}".encode() * 300) for i in range(150)]
    res = store.put(reqs)
    assert all(r.status is PutStatus.PUT_OK for r in res)
    assert len(store.commitlog.queue.files) >= 2  # crossed a 64 KiB boundary
    for i, r in enumerate(res):
        raw = store.read_record(r.phys_offset)
        rec, _ = decode_record(raw, 0)
        assert rec.body == f"m{i}".encode() * 300
        assert rec.commitlog_offset == r.phys_offset
        assert rec.queue_offset == r.queue_offset == i // 2
        assert rec.store_timestamp == r.store_timestamp
        # a record never spans segments
        assert r.phys_offset // SEG == (r.phys_offset + r.size - 1) // SEG
    assert store.max_offset("T", 0) == 75 and store.max_offset("T", 1) == 75


def test_blank_end_of_file_marker(store):
    body = b"z" * 9000
    res = store.put([request(body=body) for _ in range(10)])
    second = next(r for r in res if r.phys_offset >= SEG)
    prev = res[res.index(second) - 1]
    gap_at = prev.phys_offset + prev.size
    mf = store.commitlog.queue.files[0]
    remaining, magic = struct.unpack_from(">ii", mf.mm, gap_at)
    assert magic == BLANK_MAGIC_CODE and remaining == SEG - gap_at
    assert second.phys_offset == SEG  # the record went to offset 0 of the next file
    assert store.read_record(gap_at) is None


def test_one_write_batch_reads_back_without_copy(store):
    res = store.put([request(body=b"a" * 100), request(body=b"b" * 100)])
    g = store.get_messages("T", 0, 0, 32)
    assert g.status is GetStatus.FOUND and len(g.buffers) == 2
    assert all(isinstance(b, memoryview) for b in g.buffers)
    joined = b"".join(g.buffers)
    assert len(joined) == res[0].size + res[1].size
    assert decode_record(joined, res[0].size)[0].body == b"b" * 100


def test_consume_queue_across_file_boundary(tmp_path):
    s = open_store(tmp_path / "s", mapped_file_size_consume_queue=20 * 10)
    res = s.put([request(body=b"x") for _ in range(25)])
    cq = present(s.consume_queue("T", 0))
    assert len(cq.files.files) == 3
    assert sorted(os.listdir(os.path.join(s.queues.root, "T", "0"))) == [
        "00000000000000000000", "00000000000000000200", "00000000000000000400"]
    # read_units never crosses a file; callers loop
    got = []
    off = 0
    while off < 25:
        mv = present(s.read_units("T", 0, off, 100))
        n = len(mv) // 20
        assert n <= 10
        got += [UNIT.unpack_from(mv, i * 20)[0] for i in range(n)]
        off += n
    assert got == [r.phys_offset for r in res]
    s.close()
    # reopen: units survive
    s = open_store(tmp_path / "s", mapped_file_size_consume_queue=20 * 10)
    assert s.max_offset("T", 0) == 25 and s.min_offset("T", 0) == 0
    assert s.put([request()])[0].queue_offset == 25
    s.close()


def test_consume_queue_gap_fill_when_starting_past_zero(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "T", 3, 20 * 10)
    cq.put_units(13, UNIT.pack(500, 100, 7), 600)
    assert cq.min_offset == 13 and cq.max_offset == 14
    assert cq.unit(13) == (500, 100, 7)
    cq.close()
    cq = ConsumeQueue(str(tmp_path), "T", 3, 20 * 10)
    cq.load()
    assert cq.min_offset == 13 and cq.max_offset == 14  # blank units (0, MAX_INT, 0) skipped
    assert cq.unit(10) is None
    cq.close()


def test_deliver_delay_sets_tags_code_to_deliver_time(store):
    r = store.put([request(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, deliver_delay_ms=10_000)])[0]
    phys, size, tags = UNIT.unpack_from(store.read_units("SCHEDULE_TOPIC_XXXX", 2, 0, 1), 0)
    assert (phys, size, tags) == (r.phys_offset, r.size, r.store_timestamp + 10_000)


def test_dispatch_listener_once_per_queue_per_batch(store):
    calls = []
    store.add_dispatch_listener(lambda t, q, m: calls.append((t, q, m)))
    store.put([request(queue_id=0), request(queue_id=1), request(queue_id=0), request(topic="U")])
    assert sorted(calls) == [("T", 0, 2), ("T", 1, 1), ("U", 0, 1)]


def test_illegal_record_refused_and_nothing_stored(store):
    bad = request()
    bad.record[4:8] = b"\0\0\0\0"  # magic
    big = request(body=b"x" * 70_000)  # does not fit a 64 KiB segment
    ok = request()
    res = store.put([bad, big, ok])
    assert [r.status for r in res] == [PutStatus.MESSAGE_ILLEGAL, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
    assert res[2].queue_offset == 0 and store.max_offset("T", 0) == 1


def test_query_by_key_topic_qualified_and_time_range(store):
    res = store.put([request(keys="order-1 k2", uniq="U1"), request(topic="Other", keys="order-1"),
                     request(keys="order-1")])
    q = store.query_by_key("T", "order-1", 10)
    assert [decode_record(b, 0)[0].commitlog_offset for b in q.buffers] == [res[0].phys_offset, res[2].phys_offset]
    assert len(store.query_by_key("T", "U1", 10).buffers) == 1
    assert len(store.query_by_key("T", "order-1", 1).buffers) == 1  # newest first under max_num
    ts = res[0].store_timestamp
    assert store.query_by_key("T", "order-1", 10, ts + 1, ts + 2).buffers == []
    assert store.lookup_message_by_offset(res[1].phys_offset).topic == "Other"


# ---- segments made ahead of need (RocketMQ's AllocateMappedFileService) ----------------------------

def _fill(cl, n: int, size: int = 1000) -> None:
    recs = [record(body=b"p" * (size - 120)) for _ in range(n)]
    phys, err = cl.append_batch(recs, list(range(n)), 1_700_000_000_000)
    assert err is None and len(phys) == n


def test_next_segment_is_made_ahead_once_the_active_one_is_half_written(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from storage.commitlog import CommitLog
    from storage.mapped_file import AHEAD_SUFFIX
    pool = ThreadPoolExecutor(1)
    cl = CommitLog(str(tmp_path / "cl"), SEG, pool)
    cl.load()
    cl.allocate_first()
    _fill(cl, 1)  # the first segment came from the pool (or, not ready yet, was made inline)
    assert cl.queue.ahead.used + cl.queue.ahead.missed == 1
    used = cl.queue.ahead.used
    _fill(cl, 40)  # past half of 64 KiB: the next batch asks for the next segment
    _fill(cl, 1)
    pool.shutdown(wait=True)  # the pool's work is done: the next segment waits under its spare name
    assert sorted(os.listdir(tmp_path / "cl")) == ["00000000000000000000", f"{SEG:020d}{AHEAD_SUFFIX}"]
    _fill(cl, 30)  # rolls: the ready segment is renamed, not made on this thread
    assert cl.queue.ahead.used == used + 1 and len(cl.queue.files) == 2
    assert cl.queue.files[1].path.endswith(f"{SEG:020d}")
    cl.close()
    assert sorted(os.listdir(tmp_path / "cl")) == ["00000000000000000000", f"{SEG:020d}"]


def test_a_segment_not_ready_in_time_is_made_inline_and_the_late_one_removed(tmp_path):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from storage.commitlog import CommitLog
    pool = ThreadPoolExecutor(1)
    gate = threading.Event()
    pool.submit(gate.wait)  # the pool is busy: what is asked next cannot be ready
    try:
        cl = CommitLog(str(tmp_path / "cl"), SEG, pool)
        cl.load()
        cl.allocate_first()
        _fill(cl, 1)  # the first segment: made inline
        _fill(cl, 40)
        _fill(cl, 1)  # asks for the second one (queued behind the gate)
        _fill(cl, 30)  # rolls: made inline too
        assert (cl.queue.ahead.used, cl.queue.ahead.missed) == (0, 2)
    finally:
        gate.set()  # (a failed assertion must not leave the pool's thread waiting at exit)
    pool.shutdown(wait=True)  # the abandoned ones are made, then removed by their done callback
    assert sorted(os.listdir(tmp_path / "cl")) == ["00000000000000000000", f"{SEG:020d}"]
    assert cl.read_record(0) is not None
    cl.close()


def test_close_removes_a_segment_made_ahead_and_load_removes_one_left_by_a_crash(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from storage.commitlog import CommitLog
    from storage.mapped_file import AHEAD_SUFFIX
    pool = ThreadPoolExecutor(1)
    cl = CommitLog(str(tmp_path / "cl"), SEG, pool)
    cl.load()
    cl.allocate_first()
    cl.close()  # waits for the pool's segment and removes it
    assert os.listdir(tmp_path / "cl") == []
    (tmp_path / "cl" / f"{0:020d}{AHEAD_SUFFIX}").write_bytes(b"\0" * 4096)  # as kill -9 leaves it
    cl2 = CommitLog(str(tmp_path / "cl"), SEG, pool)
    cl2.load()
    assert os.listdir(tmp_path / "cl") == [] and cl2.queue.last is None
    pool.shutdown()
