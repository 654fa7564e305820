"""Recovery after simulated crashes: torn tails, garbage, CQ units past the end, re-dispatch."""

from __future__ import annotations

import os
import shutil

from structlog.testing import capture_logs

from codec.record import decode_record
from storage.message_store import MessageStore
from storage.store_types import tags_hash_code
from tests.helpers.checks import present
from tests.storage.conftest import config, open_store, request


def _crash(store: MessageStore) -> None:
    """Leave the files as a killed process would: no flush/checkpoint, abort marker kept."""
    for cq in store.queues.queues.values():
        cq.close()
    store.index.close()  # unmapped without a flush: the page cache keeps what was written
    store.commitlog.close()
    store.run.closed = True


def _cuts(logs):
    return [e for e in logs if e["event"] == "recovery.commitlog_cut"]


def test_clean_restart_trusts_checkpoint(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(body=b"x" * 500, keys="k") for _ in range(300)])
    s.close()
    assert not os.path.exists(tmp_path / "abort")
    with capture_logs() as logs:
        s = open_store(tmp_path)
    assert any(e["event"] == "recovery.normal" for e in logs) and not _cuts(logs)
    assert s.commitlog.max_offset == res[-1].phys_offset + res[-1].size
    assert s.max_offset("T", 0) == 300 and len(s.query_by_key("T", "k", 1000).buffers) == 300
    s.close()


def test_torn_tail_is_cut_at_last_valid_record(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(body=f"m{i}".encode() * 200, keys=f"k{i}") for i in range(40)])
    last = res[-1]
    mf = present(s.commitlog.queue.find(last.phys_offset))
    pos = last.phys_offset - mf.file_from_offset
    mf.mm[pos + last.size - 10:pos + last.size] = b"\xff" * 10  # tear the last record's tail (body CRC)
    _crash(s)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    cuts = _cuts(logs)
    assert len(cuts) == 1
    assert cuts[0]["file"] == mf.path and cuts[0]["from_offset"] == pos and cuts[0]["bytes"] == last.size
    assert s.commitlog.max_offset == last.phys_offset
    assert s.max_offset("T", 0) == 39  # CQ unit for the torn record removed
    assert s.read_record(last.phys_offset) is None
    assert s.query_by_key("T", "k39", 10).buffers == []
    # the queue offset is reused by the next put, at the cut position
    r = s.put([request(body=b"new")])[0]
    assert (r.phys_offset, r.queue_offset) == (last.phys_offset, 39)
    s.close()


def test_garbage_after_last_record_is_zeroed(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(body=b"ok" * 50) for _ in range(5)])
    end = res[-1].phys_offset + res[-1].size
    mf = present(s.commitlog.queue.last)
    mf.mm[end:end + 333] = os.urandom(333).replace(b"\0", b"\1")
    _crash(s)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    cut = _cuts(logs)
    assert [(c["from_offset"], c["bytes"]) for c in cut] == [(end, 333)]
    assert s.commitlog.max_offset == end and s.max_offset("T", 0) == 5
    assert bytes(present(s.commitlog.queue.last).mm[end:end + 333]) == bytes(333)
    s.close()


def test_truncated_segment_and_later_files_removed(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(body=b"q" * 3000) for _ in range(60)])  # ~3 segments
    files = [f.path for f in s.commitlog.queue.files]
    assert len(files) >= 3
    victim = next(r for r in res if r.phys_offset >= 65536)  # first record of segment 2
    mf = present(s.commitlog.queue.find(victim.phys_offset))
    mf.mm[0:8] = b"\0" * 8  # destroy its header
    _crash(s)
    with capture_logs() as logs:
        s = open_store(tmp_path)
    cuts = _cuts(logs)
    assert cuts[0]["file"] == files[1] and cuts[0]["from_offset"] == 0
    assert {c["file"] for c in cuts[1:]} == set(files[2:])
    assert [os.path.basename(f.path) for f in s.commitlog.queue.files] == [os.path.basename(p) for p in files[:2]]
    assert s.commitlog.max_offset == 65536
    kept = sum(1 for r in res if r.phys_offset < 65536)
    assert s.max_offset("T", 0) == kept
    g = s.get_messages("T", 0, kept - 1, 5)
    assert len(g.buffers) == 1
    s.close()


def _schedule_rule(topic: str, props: dict[str, str], store_ts: int) -> int:
    """A stand-in for the scheduler's tagsCode rule (storage only applies what it is given)."""
    return store_ts + 10_000 if topic == "SCHEDULE_TOPIC_XXXX" else tags_hash_code(topic, props, store_ts)


def test_lost_consume_queue_is_rebuilt_from_commitlog(tmp_path):
    s = open_store(tmp_path)
    res = s.put([request(queue_id=q, tags="TagA", keys=f"key{i}") for i in range(20) for q in (0, 1)])
    res += s.put([request(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, props={"DELAY": "3"}, deliver_delay_ms=10_000)])
    _crash(s)
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    with capture_logs() as logs:
        s = open_store(tmp_path, tags_code_of=_schedule_rule)
    assert any(e["event"] == "recovery.redispatched" for e in logs)
    assert s.max_offset("T", 0) == 20 and s.max_offset("T", 1) == 20
    g = s.get_messages("T", 1, 0, 32, {2598919})  # "TagA".hashCode()
    assert len(g.buffers) == 20
    assert [decode_record(b, 0)[0].queue_offset for b in g.buffers] == list(range(20))
    assert len(s.query_by_key("T", "key7", 10).buffers) == 2
    # the schedule unit's tagsCode is the injected rule's (the broker passes scheduler.levels.schedule_tags_code)
    u = present(present(s.consume_queue("SCHEDULE_TOPIC_XXXX", 2)).unit(0))
    assert u[2] == res[-1].store_timestamp + 10_000
    s.close()


def test_no_checkpoint_scans_everything(tmp_path):
    s = open_store(tmp_path)
    s.put([request() for _ in range(10)])
    s.close()
    os.unlink(tmp_path / "checkpoint")
    with capture_logs() as logs:
        s = MessageStore(config(tmp_path))
        s.load()
    assert any(e["event"] == "recovery.abnormal" and e["reason"] == "no checkpoint" for e in logs)
    assert s.max_offset("T", 0) == 10
    s.close()
