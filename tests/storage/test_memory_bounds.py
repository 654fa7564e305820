"""Issue 4: memory must not grow with pending scheduled messages (index entries, mapped pages)."""

from __future__ import annotations

import pytest

from codec.codes import SCHEDULE_TOPIC, TIMER_TOPIC
from codec.record import decode_record
from storage.message_store import PutStatus
from tests.helpers.checks import present
from tests.storage.conftest import open_store, request


def test_scheduled_records_are_indexed_under_their_system_topic_apart_from_the_real_topic(tmp_path):
    """`scheduled cancel --id UNIQ_KEY` finds a pending record under SCHEDULE_TOPIC_XXXX / the timer topic;
    the same key under the real topic finds only the real topic's record."""
    s = open_store(tmp_path / "s")
    res = s.put([request(topic=SCHEDULE_TOPIC, keys="k1", uniq="U1"),
                 request(topic=TIMER_TOPIC, keys="k2", uniq="U2"),
                 request(topic="Real", keys="k1", uniq="U1")])
    assert all(r.status is PutStatus.PUT_OK for r in res)
    assert s.index.entries == 6

    def found(topic, key):
        return [decode_record(b, 0)[0].commitlog_offset for b in s.query_by_key(topic, key, 10).buffers]

    assert found(SCHEDULE_TOPIC, "U1") == [res[0].phys_offset] and found(TIMER_TOPIC, "U2") == [res[1].phys_offset]
    assert found("Real", "U1") == [res[2].phys_offset] and found("Real", "k2") == []
    s.close()
    s = open_store(tmp_path / "s")  # reload from the IndexFile
    assert s.index.entries == 6 and found("Real", "k1") == [res[2].phys_offset]
    s.close()


def _mapped_rss_kib(path: str) -> int:
    """Resident KiB of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's header line
                inside = line.rstrip("\n").endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(head[1])
    return total


def test_flushed_commitlog_and_consume_queue_pages_leave_rss_and_stay_readable(tmp_path, monkeypatch):
    from storage import mapped_file
    from storage.flush import flush_segments_blocking

    s = open_store(tmp_path / "s", mapped_file_size_commitlog=8 << 20, mapped_file_size_consume_queue=20 * 200_000)
    bodies = [bytes([i % 251]) * 2000 for i in range(2000)]  # ~4 MiB of records
    res = s.put([request(body=b) for b in bodies])
    cl_path = s.commitlog.queue.files[0].path
    cq = present(s.consume_queue("T", 0))
    cq_path = cq.files.files[0].path
    assert _mapped_rss_kib(cl_path) > 3000 and _mapped_rss_kib(cq_path) >= 36
    flush_segments_blocking(s.commitlog.queue)
    flush_segments_blocking(cq.files)
    # left: the write-tail page (and at most a read fault-around window of 64 KiB next to it)
    assert _mapped_rss_kib(cl_path) <= 64 and _mapped_rss_kib(cq_path) <= 64
    # reads fault the pages back in with the data intact ...
    for r, b in zip(res, bodies, strict=True):
        assert decode_record(present(s.read_record(r.phys_offset, r.size)), 0)[0].body == b
    assert _mapped_rss_kib(cl_path) > 3000
    # ... and the periodic sweep after a flush drops them again
    monkeypatch.setattr(mapped_file, "SWEEP_INTERVAL_S", 0.0)
    s.put([request(body=b"tail")])
    flush_segments_blocking(s.commitlog.queue)
    assert _mapped_rss_kib(cl_path) <= 64
    g = s.get_messages("T", 0, 1999, 2)
    assert [decode_record(b, 0)[0].body for b in g.buffers] == [bodies[-1], b"tail"]
    s.close()
    s = open_store(tmp_path / "s", mapped_file_size_commitlog=8 << 20, mapped_file_size_consume_queue=20 * 200_000)
    assert s.max_offset("T", 0) == 2001
    assert decode_record(present(s.read_record(res[0].phys_offset, res[0].size)), 0)[0].body == bodies[0]
    s.close()


def test_index_accepts_utf8_bytes_keys_like_str_keys(tmp_path):
    s = open_store(tmp_path / "s")
    a = s.put([request(topic="Real", keys="k1", uniq="U1")])[0]
    b_req = request(topic="Real", keys="k1", uniq="U2")
    b_req.keys = (b"k1", b"U2")
    b = s.put([b_req])[0]
    assert s.index.entries == 4
    assert len(s.query_by_key("Real", "U1", 10).buffers) == 1
    hits = s.query_by_key("Real", "k1", 10).buffers
    assert [decode_record(h, 0)[0].commitlog_offset for h in hits] == [a.phys_offset, b.phys_offset]
    s.close()
    s = open_store(tmp_path / "s")
    assert s.index.entries == 4 and len(s.query_by_key("Real", "U2", 10).buffers) == 1
    s.close()


@pytest.mark.slow
def test_index_python_memory_stays_flat_with_300k_keys(tmp_path):
    """Keys live in mapped IndexFiles, not in Python objects: tracemalloc sees no growth per key."""
    import tracemalloc

    from storage.index import IndexService

    idx = IndexService(str(tmp_path), None, max_hash_slot_num=65536, max_index_num=100_000)
    idx.load(0)
    phys = 0

    def add(batches: int) -> None:
        nonlocal phys
        for b in range(batches):
            entries = [("Real", (f"C0A8000112AB{phys + i:020X}",), phys + i * 200, 200) for i in range(512)]
            idx.add_batch(entries, 1_700_000_000_000 + phys)
            phys += 512 * 200
            if b % 50 == 49:
                idx.flush()  # the logics flush: fdatasync, flushed entry pages leave RSS

    tracemalloc.start()
    try:
        add(200)  # ~100k keys: a rotation done, the caches (and one-time imports) warm
        before = tracemalloc.get_traced_memory()[0]
        add(386)  # ~200k more keys, across 2 more rotations (300,032 keys in all)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert idx.entries == 586 * 512 and len(idx.files) == 4
    assert after - before < 16 * 1024, after - before  # the old dict: ~40 MB for these keys
    # mapped pages: after a flush, rotated files are dropped whole, the active one keeps its slots
    idx.flush()
    assert all(_mapped_rss_kib(f.path) <= 64 for f in idx.files[:-1])
    assert _mapped_rss_kib(idx.files[-1].path) <= 65536 * 4 // 1024 + 64
    idx.close()
