"""MessageStore.put_batch (one buffer of delivery records) stores exactly what put would."""

from __future__ import annotations

from codec.delivery_batch import DeliveryBatch, build_delivery_batch
from codec.put_run import PutRun, put_run
from codec.record import decode_record
from storage.message_store import PutRequest, PutStatus
from tests.helpers.checks import present
from tests.storage.conftest import SEG, open_store, record


def _schedule(real: str, qid: int, i: int, keys: str | None = "k1 k2", body: bytes = b"hello") -> bytearray:
    props = {"REAL_TOPIC": real, "REAL_QID": str(qid), "UNIQ_KEY": f"U{i:05d}", "DELAY": "1", "TAGS": "TagA"}
    if keys:
        props["KEYS"] = keys
    return record("SCHEDULE_TOPIC_XXXX", 0, body, props=props)


def _batch(n: int, **kw):
    return build_delivery_batch([_schedule("R", i % 3, i, **kw) for i in range(n)])


def test_fast_path_matches_put(tmp_path):
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    seen = []
    a.add_dispatch_listener(lambda t, q, m: seen.append((t, q, m)))
    try:
        res = a.put_batch(_batch(10))
        want = b.put(_reqs_for_batch(_batch(10)))
        assert res.all_ok and res.count == 10 and res.flushed is None
        assert res.phys == [r.phys_offset for r in want]
        for p, w in zip(res.phys, want, strict=True):
            got_rec, _ = decode_record(present(a.read_record(p)), 0)
            want_rec, _ = decode_record(present(b.read_record(w.phys_offset)), 0)
            assert got_rec.queue_offset == want_rec.queue_offset and got_rec.commitlog_offset == p
            assert got_rec.store_timestamp == res.store_timestamp
            assert (got_rec.topic, got_rec.queue_id, got_rec.body, got_rec.properties) == (
                want_rec.topic, want_rec.queue_id, want_rec.body, want_rec.properties)
        for q in range(3):
            assert a.max_offset("R", q) == b.max_offset("R", q)
            assert bytes(present(a.read_units("R", q, 0, 10)))[12::20] == bytes(present(b.read_units("R", q, 0, 10)))[12::20]
        assert sorted(seen) == [("R", q, a.max_offset("R", q)) for q in range(3)]
        assert len(a.query_by_key("R", "k2", 32).buffers) == 10 and len(a.query_by_key("R", "U00003", 32).buffers) == 1
        more = a.put_batch(_batch(4))  # queue offsets continue
        assert more.all_ok and a.max_offset("R", 0) == 4 + 2
    finally:
        a.close()
        b.close()


def _reqs_for_batch(batch: DeliveryBatch) -> list[PutRequest]:
    return [PutRequest(batch.record(j), *batch.dests[j], batch.tags_codes[j], batch.keys[j], -1)
            for j in range(len(batch))]


def test_segment_roll_goes_through_put(tmp_path):
    s = open_store(tmp_path / "s")
    try:
        big = build_delivery_batch([_schedule("R", 0, i, body=b"z" * 9000) for i in range(10)])
        res = s.put_batch(big)
        assert res.all_ok and res.count == 10 and any(p >= SEG for p in res.phys)
        assert [decode_record(present(s.read_record(p)), 0)[0].queue_offset for p in res.phys] == list(range(10))
    finally:
        s.close()


def test_faults_give_per_record_statuses(tmp_path):
    s = open_store(tmp_path / "s")
    try:
        s.faults.fail_next(2, PutStatus.OS_PAGE_CACHE_BUSY)
        res = s.put_batch(_batch(5))
        assert not res.all_ok and res.count == 3
        assert present(res.statuses)[:2] == [PutStatus.OS_PAGE_CACHE_BUSY] * 2 and res.phys[:2] == [-1, -1]
        assert all(p >= 0 for p in res.phys[2:])
    finally:
        s.close()


async def test_sync_flush_one_future_per_batch(tmp_path):
    s = open_store(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    s.start()
    try:
        res = s.put_batch(_batch(6))
        assert res.all_ok and res.flushed is not None
        assert (await res.flushed) is not False
        assert s.commitlog.flushed_offset >= res.phys[-1] + len(present(s.read_record(res.phys[-1])))
    finally:
        await s.shutdown()


def _run(reqs: list[PutRequest]) -> PutRun:
    """A put_batch input with per-record deliver delays (a run of sends), built by codec.put_run."""
    return put_run([r.record for r in reqs], [(r.topic, r.queue_id) for r in reqs], [r.tags_code for r in reqs],
                   [r.keys for r in reqs], [r.deliver_delay_ms for r in reqs])


def _send_reqs(n: int, body: bytes = b"hello"):
    reqs = []
    for i in range(n):
        delayed = i % 3 == 0
        topic, qid = ("SCHEDULE_TOPIC_XXXX", 1) if delayed else ("T", i % 2)
        reqs.append(PutRequest(record(topic, qid, body, props={"UNIQ_KEY": f"U{i:05d}"}), topic, qid, 7 + i,
                               (f"U{i:05d}",), 5000 + i if delayed else -1))
    return reqs


def test_queue_offsets_and_deliver_delays_match_put(tmp_path):
    """Returned queue offsets and the CQ tagsCode of delayed records (store time + delay) are put's,
    on the fast path and through the slow one (segment roll)."""
    for body in (b"hello", b"z" * 9000):
        a, b = open_store(tmp_path / f"a{len(body)}"), open_store(tmp_path / f"b{len(body)}")
        a.now_ms = b.now_ms = lambda: 1_700_000_000_000
        try:
            for _ in range(2):  # the second round continues the queue offsets
                res = a.put_batch(_run(_send_reqs(8, body)))
                want = b.put(_send_reqs(8, body))
                assert res.all_ok and res.count == 8
                assert res.queue_offsets == [r.queue_offset for r in want]
                assert res.phys == [r.phys_offset for r in want]
            for key in (("T", 0), ("T", 1), ("SCHEDULE_TOPIC_XXXX", 1)):
                assert bytes(present(a.read_units(*key, 0, 32))) == bytes(present(b.read_units(*key, 0, 32)))
        finally:
            a.close()
            b.close()


def test_failed_records_have_no_queue_offset(tmp_path):
    s = open_store(tmp_path / "s")
    try:
        s.faults.fail_next(1, PutStatus.OS_PAGE_CACHE_BUSY)
        res = s.put_batch(_run(_send_reqs(3)))
        queue_offsets, statuses = present(res.queue_offsets), present(res.statuses)
        assert queue_offsets[0] == -1 and statuses[0] is PutStatus.OS_PAGE_CACHE_BUSY
        assert queue_offsets[1:] == [0, 0]  # ("T", 1) and ("T", 0): the first of each queue
    finally:
        s.close()
