"""timerlog retention: files go only when the CommitLog no longer has the messages they point to.

Small timerlog files (20 units each) and small CommitLog segments (64 KiB) on a real store; CommitLog
retention is forced with `clean_expired(now=far future)` (files are never younger than that)."""

from __future__ import annotations

import os
import time

from codec.timer_layout import BLANK_SIZE, UNIT_SIZE

UNITS_PER_FILE = 20
TIMERLOG_FILE = UNIT_SIZE * UNITS_PER_FILE + BLANK_SIZE
BODY = b"x" * 2000  # ~30 messages per 64 KiB CommitLog segment
FAR = 10 ** 10


def _timerlog_files(h) -> list[str]:
    d = os.path.join(h.root, "timerlog")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.isdigit())  # not a segment made ahead


async def _send_timers(h, n: int, due_ms: int, topic: str = "RT", body: bytes = BODY) -> None:
    before = h.timer.stats()["enqueued"]
    for _ in range(n):
        dec, _ = h.send(topic, {"TIMER_DELIVER_MS": str(due_ms)}, body=body)
        assert dec.ok
    await h.wait_until(lambda: h.timer.stats()["enqueued"] == before + n, 30)


def _fill_to_next_segment(h) -> None:
    """Plain messages until a new CommitLog segment starts: everything before is retention's."""
    from codec.record import MessageRecord, encode_record
    from storage.message_store import PutRequest

    segment = h.store.commitlog_max_offset() // h.commitlog_size
    while h.store.commitlog_max_offset() // h.commitlog_size == segment:
        rec = MessageRecord(topic="Filler", body=BODY, born_timestamp=int(time.time() * 1000))
        assert h.store.put([PutRequest(encode_record(rec), "Filler", 0)])[0].ok


async def test_files_whose_messages_are_in_the_commitlog_stay(make_harness):
    h = make_harness(commitlog_size=1 << 16, timerlog_file_size=TIMERLOG_FILE)
    await _send_timers(h, 3 * UNITS_PER_FILE + 5, int(time.time() * 1000) + 3_600_000)
    files = _timerlog_files(h)
    assert len(files) == 4
    assert h.timer.clean_expired_timerlog() == []  # every referenced message still exists
    assert _timerlog_files(h) == files


async def test_dead_files_are_deleted_oldest_first_and_the_rest_survive_a_restart(make_harness):
    h = make_harness(commitlog_size=1 << 16, timerlog_file_size=TIMERLOG_FILE)
    far = int(time.time() * 1000) + 3_600_000
    await _send_timers(h, 2 * UNITS_PER_FILE, far, topic="Gone")   # timerlog files 0 and 1
    _fill_to_next_segment(h)                                        # the CommitLog moves past them
    soon = int(time.time() * 1000) + 1500
    await _send_timers(h, 10, soon, topic="Kept", body=b"k")        # timerlog file 2, active segment
    files = _timerlog_files(h)
    assert len(files) == 3
    assert h.timer.clean_expired_timerlog() == []  # CommitLog retention has not run yet
    deleted_cl = h.store.clean_expired(now=FAR)
    assert deleted_cl and h.store.commitlog_min_offset() > 0
    deleted = h.timer.clean_expired_timerlog()
    assert deleted == files[:2] and _timerlog_files(h) == files[2:]
    assert h.timer.timerlog.min_pos == int(os.path.basename(files[2]))
    # the timers still backed by the CommitLog are delivered, across a restart
    await h.close()
    h2 = make_harness(commitlog_size=1 << 16, timerlog_file_size=TIMERLOG_FILE)
    assert _timerlog_files(h2) == files[2:]
    await h2.wait_until(lambda: h2.count("Kept") == 10, 15)
    assert all(int(m.store_timestamp) >= soon for m in h2.messages("Kept"))
    assert h2.count("Gone") == 0

