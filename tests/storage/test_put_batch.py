"""MessageStore.put_batch (one buffer of delivery records) stores exactly what put would."""

from __future__ import annotations

from codec.delivery_batch import build_delivery_batch
from codec.record import decode_record
from storage.message_store import PutRequest, PutStatus
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
            got_rec, _ = decode_record(a.read_record(p), 0)
            want_rec, _ = decode_record(b.read_record(w.phys_offset), 0)
            assert got_rec.queue_offset == want_rec.queue_offset and got_rec.commitlog_offset == p
            assert got_rec.store_timestamp == res.store_timestamp
            assert (got_rec.topic, got_rec.queue_id, got_rec.body, got_rec.properties) == (
                want_rec.topic, want_rec.queue_id, want_rec.body, want_rec.properties)
        for q in range(3):
            assert a.max_offset("R", q) == b.max_offset("R", q)
            assert bytes(a.read_units("R", q, 0, 10))[12::20] == bytes(b.read_units("R", q, 0, 10))[12::20]
        assert sorted(seen) == [("R", q, a.max_offset("R", q)) for q in range(3)]
        assert len(a.query_by_key("R", "k2", 32).buffers) == 10 and len(a.query_by_key("R", "U00003", 32).buffers) == 1
        more = a.put_batch(_batch(4))  # queue offsets continue
        assert more.all_ok and a.max_offset("R", 0) == 4 + 2
    finally:
        a.close()
        b.close()


def _reqs_for_batch(batch):
    return [PutRequest(batch.record(j), *batch.dests[j], batch.tags_codes[j], batch.keys[j], -1)
            for j in range(len(batch))]


def test_segment_roll_goes_through_put(tmp_path):
    s = open_store(tmp_path / "s")
    try:
        big = build_delivery_batch([_schedule("R", 0, i, body=b"z" * 9000) for i in range(10)])
        res = s.put_batch(big)
        assert res.all_ok and res.count == 10 and any(p >= SEG for p in res.phys)
        assert [decode_record(s.read_record(p), 0)[0].queue_offset for p in res.phys] == list(range(10))
    finally:
        s.close()


def test_faults_give_per_record_statuses(tmp_path):
    s = open_store(tmp_path / "s")
    try:
        s.faults.fail_next(2, PutStatus.OS_PAGE_CACHE_BUSY)
        res = s.put_batch(_batch(5))
        assert not res.all_ok and res.count == 3
        assert res.statuses[:2] == [PutStatus.OS_PAGE_CACHE_BUSY] * 2 and res.phys[:2] == [-1, -1]
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
        assert s.commitlog.flushed_offset >= res.phys[-1] + len(s.read_record(res.phys[-1]))
    finally:
        await s.shutdown()
