"""The next timerlog segment is made ahead of need on the store's allocate pool (RocketMQ's
AllocateMappedFileService, storage.allocate): real files, a real pool; a pool held busy by a gate proves
"not ready in time"; `pool.shutdown(wait=True)` (or a no-op queued behind the work on the one thread) is
the barrier that says the pool's work is done."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from codec.timer_layout import BLANK_SIZE, MAGIC_DEFAULT, UNIT_SIZE
from scheduler.timer.timerlog import TimerLog
from scheduler.timer.timerlog_segment import Segment
from storage.allocate import AllocateAhead
from storage.message_store import MessageStore, StoreConfig
from storage.store_types import AHEAD_SUFFIX

UNITS = 20
SIZE = UNIT_SIZE * UNITS + BLANK_SIZE  # 20 units a file; half written after the 11th


def _timerlog(root, pool) -> TimerLog:
    tl = TimerLog(str(root), SIZE, AllocateAhead(pool, Segment.destroy, "timerlog"))
    tl.load()
    tl.allocate_ahead()  # as TimerMessageStore.load does after recovery
    return tl


def _append(tl: TimerLog, n: int) -> list[int]:
    return [tl.append(-1, MAGIC_DEFAULT, 1000, 0, 100 + i, 90, 0, 1000) for i in range(n)]


def _names(root) -> list[str]:
    return sorted(os.listdir(root / "timerlog"))


def _barrier(pool: ThreadPoolExecutor) -> None:
    pool.submit(lambda: None).result()  # one thread, FIFO: everything asked before has run


def test_segments_are_made_ahead_and_renamed_at_the_roll(tmp_path):
    pool = ThreadPoolExecutor(1)
    tl = _timerlog(tmp_path, pool)
    _barrier(pool)
    assert _names(tmp_path) == [f"{0:020d}{AHEAD_SUFFIX}"]  # a fresh timerlog's first segment, made ahead
    assert _append(tl, 1) == [0]
    assert _names(tmp_path) == [f"{0:020d}"] and tl.ahead is not None and tl.ahead.used == 1
    _append(tl, 10)  # 11 units: past half
    _barrier(pool)
    assert _names(tmp_path) == [f"{0:020d}", f"{SIZE:020d}{AHEAD_SUFFIX}"]
    pos = _append(tl, 10)  # the 21st unit rolls: the segment made ahead is renamed, not made here
    assert pos[-1] == SIZE
    assert (tl.ahead.used, tl.ahead.missed) == (2, 0)
    assert _names(tmp_path) == [f"{0:020d}", f"{SIZE:020d}"]
    assert [s.path for s in tl.segments] == [str(tmp_path / "timerlog" / f"{s:020d}") for s in (0, SIZE)]
    assert tl.read(SIZE)[5] == 109  # the unit written into the renamed segment reads back
    tl.flush()
    tl.close()
    pool.shutdown(wait=True)
    # reopened (no pool): the units are there, the roll's blank ends the first file
    tl2 = TimerLog(str(tmp_path), SIZE)
    tl2.load()
    assert [pos for pos, _ in tl2.scan(0)] == [UNIT_SIZE * i for i in range(UNITS)] + [SIZE]
    tl2.close()


def test_a_segment_not_ready_in_time_is_made_inline_and_the_late_one_removed(tmp_path):
    pool = ThreadPoolExecutor(1)
    gate = threading.Event()
    pool.submit(gate.wait)  # the pool is busy: what is asked next cannot be ready
    try:
        tl = _timerlog(tmp_path, pool)
        _append(tl, 11)  # the first segment made inline; past half the second is asked for (queued)
        _append(tl, 10)  # rolls: made inline too
        assert tl.ahead is not None and (tl.ahead.used, tl.ahead.missed) == (0, 2)
    finally:
        gate.set()  # (a failed assertion must not leave the pool's thread waiting at exit)
    pool.shutdown(wait=True)  # (the abandoned ones were still queued: cancelled, never made)
    assert _names(tmp_path) == [f"{0:020d}", f"{SIZE:020d}"]
    assert tl.read(SIZE)[5] == 109
    tl.close()


def test_a_segment_abandoned_while_the_pool_makes_it_is_removed_once_made(tmp_path):
    pool = ThreadPoolExecutor(1)
    running, gate = threading.Event(), threading.Event()

    def slow_make() -> Segment:
        running.set()
        gate.wait()
        return Segment(str(tmp_path / "timerlog" / f"{0:020d}{AHEAD_SUFFIX}"), 0, SIZE, create=True)

    ahead: AllocateAhead[Segment] = AllocateAhead(pool, Segment.destroy, "timerlog")
    tl = TimerLog(str(tmp_path), SIZE, ahead)
    tl.load()
    ahead.request(0, slow_make)
    try:
        assert running.wait(10)
        assert _append(tl, 1) == [0]  # the pool is still making it: made inline
        assert (ahead.used, ahead.missed) == (0, 1)
    finally:
        gate.set()
    _barrier(pool)  # the late one was made, then removed by its done callback (on the pool thread)
    assert _names(tmp_path) == [f"{0:020d}"]
    tl.close()
    pool.shutdown()


def test_a_failure_on_the_pool_is_left_to_the_inline_creation(tmp_path):
    """The pool cannot make the file (here its spare name is taken by a directory; on a full disk,
    ENOSPC): it is logged and counted, and the segment is made inline, which reports its own error."""
    pool = ThreadPoolExecutor(1)
    (tmp_path / "timerlog").mkdir()
    tl = TimerLog(str(tmp_path), SIZE, AllocateAhead(pool, Segment.destroy, "timerlog"))
    tl.load()
    (tmp_path / "timerlog" / f"{0:020d}{AHEAD_SUFFIX}").mkdir()
    tl.allocate_ahead()
    _barrier(pool)
    assert _append(tl, 1) == [0]
    assert tl.ahead is not None and (tl.ahead.used, tl.ahead.missed) == (0, 1)
    assert os.path.getsize(tmp_path / "timerlog" / f"{0:020d}") == SIZE
    tl.close()
    pool.shutdown()


def test_close_removes_what_the_pool_made_or_is_making_and_load_removes_a_crash_leftover(tmp_path):
    pool = ThreadPoolExecutor(1)
    tl = _timerlog(tmp_path, pool)
    _barrier(pool)
    tl.close()  # the first segment, made and never taken: removed
    assert _names(tmp_path) == []
    # a make in flight when close runs: close waits for it, then removes its file
    running, gate = threading.Event(), threading.Event()
    made: list[Segment] = []

    def slow_make() -> Segment:
        running.set()
        gate.wait()
        made.append(Segment(str(tmp_path / "timerlog" / f"{0:020d}{AHEAD_SUFFIX}"), 0, SIZE, create=True))
        return made[0]

    ahead: AllocateAhead[Segment] = AllocateAhead(pool, Segment.destroy, "timerlog")
    tl = TimerLog(str(tmp_path), SIZE, ahead)
    tl.load()
    ahead.request(0, slow_make)
    assert running.wait(10)
    closer = threading.Thread(target=tl.close)
    closer.start()
    gate.set()
    closer.join(10)
    assert not closer.is_alive() and len(made) == 1 and _names(tmp_path) == []
    # kill -9 leaves a segment made ahead (a real one, blocks reserved): the next load removes it
    Segment(str(tmp_path / "timerlog" / f"{SIZE:020d}{AHEAD_SUFFIX}"), SIZE, SIZE, create=True).close()
    tl = TimerLog(str(tmp_path), SIZE)
    tl.load()
    assert _names(tmp_path) == [] and tl.segments == []
    tl.close()
    pool.shutdown()


def test_the_store_facade_makes_timerlog_segments_on_its_allocate_pool(tmp_path):
    """`MessageStore.made_ahead` (the declared seam the scheduler uses): the segment is made on the
    store's `allocate-mapped-file` thread, and a timerlog asking after the store closed makes inline."""
    store = MessageStore(StoreConfig(store_path=str(tmp_path / "s"), mapped_file_size_commitlog=1 << 16))
    store.load()
    threads: list[str] = []

    def destroy(seg: Segment) -> None:
        seg.destroy()

    ahead = store.made_ahead("timerlog", destroy)
    tl = TimerLog(str(tmp_path), SIZE, ahead)
    tl.load()
    def make() -> Segment:  # on the pool's thread
        threads.append(threading.current_thread().name)
        return Segment(str(tmp_path / "timerlog" / f"{0:020d}{AHEAD_SUFFIX}"), 0, SIZE, True)

    ahead.request(0, make)
    store.close()  # shuts the pool down after its work: the segment is made
    assert threads and threads[0].startswith("allocate-mapped-file")
    _append(tl, 11)
    assert (ahead.used, ahead.missed) == (1, 0)
    _append(tl, 10)  # the next one could not be asked for (the pool is shut down): made inline
    assert (ahead.used, ahead.missed) == (1, 0) and _names(tmp_path) == [f"{0:020d}", f"{SIZE:020d}"]
    tl.close()


async def test_timers_are_delivered_across_timerlog_rolls_onto_segments_made_ahead(make_harness):
    """A real store and timer wheel with 20-unit timerlog files: every segment the enqueue rolls onto
    was asked for ahead (taken ready, or made inline when the pool was late), the timers written across
    the rolls are all delivered, and a close leaves no segment made ahead behind."""
    import time

    h = make_harness(commitlog_size=1 << 20, timerlog_file_size=SIZE)
    due = int(time.time() * 1000) + 1200
    n = 2 * UNITS + 15  # three files, the third past half: the fourth is asked for
    for _ in range(n):
        dec, _ = h.send("AheadT", {"TIMER_DELIVER_MS": str(due)})
        assert dec.ok
    await h.wait_until(lambda: h.timer.stats()["enqueued"] == n, 30)
    tl = h.timer.timerlog
    assert [s.start for s in tl.segments] == [0, SIZE, 2 * SIZE]
    # each made ahead or, not ready in time, inline (by the append, or by a send's admission: room_for)
    assert tl.ahead.used + tl.ahead.missed + tl.made_for_room == 3
    await h.wait_until(lambda: h.count("AheadT") == n, 15)
    assert all(int(m.store_timestamp) >= due for m in h.messages("AheadT"))
    await h.close()
    assert _names_at(h.root) == [f"{s:020d}" for s in (0, SIZE, 2 * SIZE)]


def _names_at(root: str) -> list[str]:
    return sorted(os.listdir(os.path.join(root, "timerlog")))


def test_room_for_refuses_while_no_segment_can_be_made_and_returns_by_itself(tmp_path):
    """Issue 26 item 3: the admission check counts only reserved room. The active segment's rest
    admits; past it, while the next segment can be made neither on the pool nor inline (both names
    taken by directories here, as a full disk fails the creation), it refuses and asks the pool again;
    once the names are free, the pool makes the segment and room returns without an inline try."""
    pool = ThreadPoolExecutor(1)
    tl = _timerlog(tmp_path, pool)
    ahead = tl.ahead
    assert ahead is not None
    _barrier(pool)
    _append(tl, 1)  # the first segment is taken (made ahead)
    assert tl.room_for(UNITS - 1) and not tl.segments[1:]
    # block the second segment, pool and inline alike
    spare = tmp_path / "timerlog" / (f"{SIZE:020d}" + AHEAD_SUFFIX)
    final = tmp_path / "timerlog" / f"{SIZE:020d}"
    spare.mkdir()
    final.mkdir()
    assert not tl.room_for(UNITS)  # one more than the first segment holds
    assert tl.segments[-1].start == 0
    _barrier(pool)  # the pool's try failed too
    assert not ahead.ready(SIZE)
    spare.rmdir()
    final.rmdir()
    assert not tl.room_for(UNITS)  # within MAKE_RETRY_S no inline try: the pool is asked again
    _barrier(pool)
    assert ahead.ready(SIZE)
    assert tl.room_for(UNITS)  # the segment made ahead is taken: the room is reserved
    assert [s.start for s in tl.segments] == [0, SIZE]
    _append(tl, UNITS)  # the append rolls onto it
    assert tl.write_pos == SIZE + UNIT_SIZE  # 20 units fill the first segment, the 21st starts the second
    tl.close()
    pool.shutdown(wait=True)
