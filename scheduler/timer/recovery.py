"""Recovery at load (scheduled-messages.md §4.7).

1. Revise the wheel from the timerlog, scanning from one file before the checkpoint's flush position:
   every valid unit re-points its slot's lastPos; a bad size/magic ends the valid data and the rest
   is truncated (torn units).
2. curr_queue_offset = QUEUEOFFSET of the record behind the last valid unit + 1 (the record carries
   its own timer-topic queue offset), at least the checkpoint's, clamped into the CQ's [min, max].
3. The read clock resumes at the checkpoint's lastReadTimeMs, never earlier than the ring's lookback
   (floor(now) - slotsTotal·precision + 60·precision). A slot read but not committed is read again
   (step 5 skips what of it was already put).
4. Slots whose lastPos points past the valid log are re-pointed by a second revise pass from the
   smallest firstPos among them (or dropped when all their units were cut).
5. The slot at the read clock resumes where scheduleProgress says its delivery got (`_resume_slot`):
   nothing put before a kill -9 is put again.

`recover(files, store, config) -> Recovered`: the facade's load() sets the clocks from it and hands the
resume point to the SlotReader and the Putter.
"""

from __future__ import annotations

import struct
import time
from typing import NamedTuple

import numpy as np
import structlog

from codec.codes import SCHEDULE_QUARANTINE_TOPIC, TIMER_TOPIC
from codec.properties import MessageConst
from codec.record import POS_QUEUE_OFFSET, read_properties_bytes, read_topic
from codec.timer_layout import MAGIC_ROLL, SLOT, SLOT_DTYPE, SLOT_SIZE, num_delta
from codec.timer_rewrite import build_timer_deliveries
from scheduler.progress_file import count_records_after
from scheduler.store_port import StorePort
from scheduler.timer.config import TIMER_BLANK_SLOTS, TimerConfig
from scheduler.timer.reader import already_put, order_slot, walk_slot
from scheduler.timer.state import ResumePoint, TimerFiles

log = structlog.get_logger(__name__)

_QOFF = struct.Struct(">q")
TIMER_DEQUEUE_MS = MessageConst.TIMER_DEQUEUE_MS.encode() + b"\x01"  # name + NAME_VALUE_SEPARATOR


class Recovered(NamedTuple):
    """Where the wheel resumes: the timer-topic queue offset to enqueue from, the read clock, the write
    clock, and the slot a kill interrupted (None: nothing of the slot at the read clock was put)."""

    queue_offset: int
    read_ms: int
    write_ms: int
    resume: ResumePoint | None


def recover(files: TimerFiles, store: StorePort, cfg: TimerConfig) -> Recovered:
    tl, wheel, cp = files.timerlog, files.wheel, files.checkpoint
    prec = cfg.precision_ms
    tl.load()
    start = max(tl.min_pos, cp.last_timerlog_flush_pos - tl.file_size) if cp.existed else tl.min_pos
    start = max(start, 0)
    last_record: tuple[int, int] | None = None  # (offsetPy, sizePy) of the last valid unit
    revised = 0
    for pos, (_size, _prev, magic, write_ms, delta, offset_py, size_py, _hash, _exact) in tl.scan(start):
        wheel.revise(write_ms + delta, pos, num_delta(magic))
        last_record = offset_py, size_py
        revised += 1
    cut = tl.truncate_dirty()
    process_offset = tl.write_pos

    # step 2: the timer CQ offset to resume enqueueing from
    q = cp.last_timer_queue_offset if cp.existed else 0
    if last_record is not None:
        rec = store.read_record(*last_record)
        if rec is not None:
            q = max(q, _QOFF.unpack_from(rec, POS_QUEUE_OFFSET)[0] + 1)
    mn, mx = store.min_offset(TIMER_TOPIC, 0), store.max_offset(TIMER_TOPIC, 0)
    q = min(max(q, mn), mx)

    # step 3: the read clock
    now = int(time.time() * 1000)
    floor_now = now - now % prec
    lookback = floor_now - cfg.slots_total * prec + TIMER_BLANK_SLOTS * prec
    read_ms = cp.last_read_time_ms if cp.existed and cp.last_read_time_ms > 0 else floor_now
    if read_ms < lookback:
        log.warning("timer.recover_lookback", checkpoint_read_ms=read_ms, resumed_at=lookback)
        read_ms = lookback
    read_ms -= read_ms % prec

    # step 4: slots pointing past the valid log
    repointed = _repoint_dangling(files, process_offset)

    wheel.rebuild_occupancy(read_ms)
    resume = _resume_slot(files, store, read_ms)
    log.info("timer.recovered", units_revised=revised, timerlog_bytes_cut=cut, timerlog_end=process_offset,
             queue_offset=q, read_ms=read_ms, pending=wheel.pending, slots=wheel.occupied,
             dangling_slots=repointed)
    return Recovered(q, read_ms, floor_now, resume)


def _is_timer_put(rec: memoryview) -> bool:
    return TIMER_DEQUEUE_MS in read_properties_bytes(rec) and read_topic(rec) != SCHEDULE_QUARANTINE_TOPIC


def _resume_slot(files: TimerFiles, store: StorePort, read_ms: int) -> ResumePoint | None:
    """Step 5 (scheduleProgress, scheduler.progress_file): the slot at the read clock was being delivered
    when the process stopped; what of it was put stays put (the ResumePoint returned, applied when the
    SlotReader loads it). A put cut short by a kill: its records after the in-flight mark are matched, in order,
    to the slot's units it was putting (those that produce a record), and the slot resumes after them."""
    prog = files.progress_file
    tp = prog.timer()
    cl_end = store.commitlog_max_offset()
    if tp.end < 0 or tp.read_ms != read_ms or (tp.last_pos < 0 and tp.phys < 0) or tp.end > cl_end:
        if tp.end > cl_end:
            log.warning("timer.progress_ahead_of_commitlog", progress_end=tp.end, commitlog_end=cl_end)
        prog.timer_commit(read_ms, -1, -1, -1, cl_end)  # nothing of the slot at the read clock known put
        return None
    done, last_pos = (tp.done_due, tp.done_pos), tp.last_pos
    k = count_records_after(store, tp.phys, _is_timer_put) if tp.phys >= 0 else 0
    if k:
        done, last_pos = _skip_put(files, store, read_ms, done, last_pos, k)
    prog.timer_commit(read_ms, *done, last_pos, cl_end)
    log.info("timer.progress_resumed", slot=read_ms, done_due=done[0], done_pos=done[1], last_pos=last_pos,
             inflight_put_found=k)
    return ResumePoint(read_ms, done[0], done[1], last_pos)


def _skip_put(files: TimerFiles, store: StorePort, s: int, done: tuple[int, int], last_pos: int,
              k: int) -> tuple[tuple[int, int], int]:
    """The progress key after the first k records the in-flight put stored (see _resume_slot)."""
    last, parts = walk_slot(files, s)
    if last_pos < 0:
        last_pos = last  # the slot's first put was in flight: nothing was linked into it since its load
    c = order_slot(store, s, last, parts, markers_upto=last_pos)
    c = c.take((c.pos <= last_pos) & ~already_put(c, *done, last_pos))
    now = int(time.time() * 1000)
    found = 0
    for lo in range(0, len(c), 1024):
        hi = min(len(c), lo + 1024)
        raws = store.read_records(zip(c.offset[lo:hi].tolist(), c.size[lo:hi].tolist(), strict=True))
        try:
            built = build_timer_deliveries(raws, (c.magic[lo:hi] & MAGIC_ROLL).tolist(), c.exact[lo:hi].tolist(),
                                           c.write_ms[lo:hi].tolist(), now, c.cancel)
        except Exception as e:  # cannot tell: re-deliver rather than lose
            log.error("timer.progress_inflight_unresolved", slot=s, error=repr(e))
            return done, last_pos
        for j, b in enumerate(built):
            if type(b) is not int:
                found += 1
                if found == k:
                    i = lo + j
                    return (int(c.due[i]), int(c.pos[i])), last_pos
    log.error("timer.progress_inflight_mismatch", slot=s, found=k, units=len(c))
    return done, last_pos


def _repoint_dangling(files: TimerFiles, end: int) -> int:
    wheel, tl = files.wheel, files.timerlog
    slots = np.frombuffer(wheel.mm, dtype=SLOT_DTYPE).reshape(wheel.ring, 4)
    bad = np.nonzero((slots[:, 2] >= end) & (slots[:, 0] != 0))[0].tolist()  # vectorised: 1.2M slots
    del slots
    if not bad:
        return 0
    min_first = None
    for i in bad:
        stime, first, last, num, magic = SLOT.unpack_from(wheel.mm, i * SLOT_SIZE)
        if first >= end:
            SLOT.pack_into(wheel.mm, i * SLOT_SIZE, 0, -1, -1, 0, 0)  # every unit was cut
        else:
            SLOT.pack_into(wheel.mm, i * SLOT_SIZE, stime, first, first, num, magic)
            min_first = first if min_first is None else min(min_first, first)
    if min_first is not None:
        for pos, (_size, _prev, magic, write_ms, delta, _off, _sz, _hash, _exact) in tl.scan(min_first):
            wheel.revise(write_ms + delta, pos, num_delta(magic))
    return len(bad)
