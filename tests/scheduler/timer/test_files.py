"""On-disk formats: 52-byte timerlog units with a 16-byte blank at file end, 32-byte wheel slots,
the 4096-byte timercheck, and recovery truncating torn units."""

from __future__ import annotations

import asyncio
import os
import struct

from codec.timer_layout import BLANK_MAGIC_CODE, CHECK, MAGIC_DEFAULT, SLOT, SLOT_SIZE, UNIT, UNIT_SIZE
from scheduler.timer import TIMER_TOPIC
from scheduler.timer.checkpoint import TimerCheckpoint
from scheduler.timer.timerlog import TimerLog
from scheduler.timer.wheel import TimerWheel
from tests.scheduler.timer.conftest import now_ms


def test_timerlog_units_and_blank_at_file_end(tmp_path):
    size = 3 * UNIT_SIZE + 16
    tl = TimerLog(str(tmp_path), size)
    positions = [tl.append(-1 if i == 0 else (i - 1) * 0, MAGIC_DEFAULT, 1000, 500 + i, 77 + i, 90, 12, 1500 + i)
                 for i in range(4)]
    assert positions[:3] == [0, 52, 104] and positions[3] == size  # 4th unit opens the next file
    tl.flush()
    files = sorted(os.listdir(tmp_path / "timerlog"))
    assert files == [f"{0:020d}", f"{size:020d}"]
    raw = (tmp_path / "timerlog" / files[0]).read_bytes()
    assert len(raw) == size
    assert struct.unpack_from(">iqi", raw, 156) == (16, 0, BLANK_MAGIC_CODE)
    assert UNIT.unpack_from(raw, 52) == (52, 0, MAGIC_DEFAULT, 1000, 501, 78, 90, 12, 1501)
    assert UNIT.size == UNIT_SIZE == 52
    tl.close()


def test_wheel_slots_are_32_bytes_in_a_fixed_file(tmp_path):
    w = TimerWheel(str(tmp_path), 604800, 100)
    assert os.path.getsize(tmp_path / "timerwheel") == 2 * 604800 * 32 == 38_707_200
    t = 1_700_000_000_300
    w.put_slot(t, 52, 104, 2)
    w.flush()
    idx = (t // 100) % (2 * 604800)
    with open(tmp_path / "timerwheel", "rb") as f:
        f.seek(idx * SLOT_SIZE)
        assert SLOT.unpack(f.read(32)) == (t // 100, 52, 104, 2, 0)
    assert w.get_slot(t) == (52, 104, 2)
    assert w.get_slot(t + 2 * 604800 * 100) == (-1, -1, 0)  # same index, other time: empty
    assert w.next_nonempty(t - 5000) == t
    w.close()
    with open(tmp_path / "timerwheel", "r+b") as f:
        f.truncate(1000)
    try:
        TimerWheel(str(tmp_path), 604800, 100)
        raise AssertionError("a wheel file of the wrong length must not load")
    except RuntimeError:
        pass


async def test_checkpoint_layout_after_flush(harness):
    harness.send("T", {"TIMER_DELAY_SEC": "3600"})
    await harness.wait_until(lambda: harness.timer.commit_queue_offset == 1, 30)
    harness.timer.flush()
    raw = (os.path.join(harness.root, "config", "timercheck"))
    data = open(raw, "rb").read()
    assert len(data) == 4096
    read_ms, flush_pos, qoff, master, _v, ts, counter = CHECK.unpack_from(data, 0)
    assert flush_pos == 52 and qoff == master == 1 and counter >= 1 and ts > 0
    assert read_ms % 100 == 0 and read_ms <= now_ms()


async def test_the_flush_task_makes_the_checkpoint_name_the_flushed_timerlog(make_harness):
    """The running service's flush task (fdatasync in a thread, no explicit flush()) writes timercheck
    with the timerlog position it made durable, again and again."""
    h = make_harness(flush_interval_ms=20)
    h.send("T", {"TIMER_DELAY_SEC": "3600"})
    await h.wait_until(lambda: h.timer.commit_queue_offset == 1, 30)
    path = os.path.join(h.root, "config", "timercheck")

    def on_disk():
        with open(path, "rb") as f:
            return CHECK.unpack_from(f.read(), 0)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30  # a hang guard
    while on_disk()[1] != 52:  # bounded poll: the checkpoint file has no event of its own
        assert loop.time() < deadline, "the flush task never wrote the checkpoint"
        await asyncio.sleep(0.01)
    first = on_disk()[6]
    while on_disk()[6] < first + 2:
        assert loop.time() < deadline, "the flush task stopped"
        await asyncio.sleep(0.01)
    _read_ms, flush_pos, qoff, _master, _v, _ts, _counter = on_disk()
    assert flush_pos == h.timer.files().timerlog.flushed_pos == 52 and qoff == 1
    assert h.store.supervisor.restarts.get("timer-flush") == 0
    await h.close()


async def test_a_flush_never_moves_the_checkpoint_read_clock_back(make_harness):
    """The putter advances the read clock while a flush's sync runs in its thread: the checkpoint the
    flush then writes keeps the newer clock (a kill -9 after it must not re-deliver those slots)."""
    h = make_harness(flush_interval_ms=3_600_000)  # the periodic flush stays out of the way
    cp = h.timer.files().checkpoint
    flushing = asyncio.ensure_future(h.timer.flush_async())
    await asyncio.sleep(0)  # the flush took its positions and waits for the sync thread
    newer = h.timer.commit_read_ms + 10 * h.timer.config.precision_ms
    h.timer.commit_read_ms = newer  # what the putter does when a slot is done (dequeue.py)
    cp.set_read_time(newer)
    await flushing
    with open(os.path.join(h.root, "config", "timercheck"), "rb") as f:
        assert CHECK.unpack_from(f.read(), 0)[0] == newer == cp.last_read_time_ms
    await h.close()


async def test_restart_truncates_torn_units_and_revises_wheel(make_harness, tmp_path):
    h = make_harness()
    t = now_ms() + 1500
    t = t - t % 100 + 10  # three deliver times inside one slot
    for i in range(3):
        h.send("R", {"TIMER_DELIVER_MS": str(t + i), "UNIQ_KEY": f"U{i}"})
    await h.wait_until(lambda: h.timer.commit_queue_offset == 3, 30)
    tl_file = os.path.join(h.root, "timerlog", f"{0:020d}")
    wheel_path = os.path.join(h.root, "timerwheel")
    await h.close()
    with open(tl_file, "r+b") as f:  # a torn 4th unit: size written, the rest garbage
        f.seek(3 * 52)
        f.write(struct.pack(">i", 52) + b"\x07" * 10)
    slot = t - 10
    with open(wheel_path, "r+b") as f:  # the wheel lost its slot (not flushed)
        f.seek(((slot // 100) % (2 * 604800)) * 32)
        f.write(bytes(32))
    cp = TimerCheckpoint(h.root)
    assert cp.last_timerlog_flush_pos == 156
    cp.close()
    h2 = make_harness()
    assert h2.timer.timerlog.write_pos == 156
    assert open(tl_file, "rb").read()[156:200] == bytes(44)  # torn unit zeroed
    assert h2.timer.wheel.get_slot(slot)[1] == 104  # revised from the timerlog
    await h2.wait_until(lambda: h2.count("R") == 3, 30)
    assert sorted(m.properties["UNIQ_KEY"] for m in h2.messages("R")) == ["U0", "U1", "U2"]
    assert h2.count(TIMER_TOPIC) == 3


def test_first_nonzero_matches_a_plain_scan():
    """The occupancy search behind next_nonempty (chunked count + lstrip) against the obvious loop."""
    import random

    from scheduler.timer.wheel import _first_nonzero

    rnd = random.Random(7)
    for _ in range(200):
        n = rnd.choice([1, 100, 65535, 65537, 200000])
        buf = bytearray(n)
        for _ in range(rnd.randint(0, 3)):
            buf[rnd.randrange(n)] = rnd.randint(1, 255)
        lo = rnd.randrange(n)
        hi = rnd.randint(lo, n)
        want = next((i for i in range(lo, hi) if buf[i]), None)
        assert _first_nonzero(buf, lo, hi, step=rnd.choice([7, 4096, 65536])) == want
