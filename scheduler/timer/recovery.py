"""Recovery at load (scheduled-messages.md §4.7).

1. Revise the wheel from the timerlog, scanning from one file before the checkpoint's flush position:
   every valid unit re-points its slot's lastPos; a bad size/magic ends the valid data and the rest
   is truncated (torn units).
2. curr_queue_offset = QUEUEOFFSET of the record behind the last valid unit + 1 (the record carries
   its own timer-topic queue offset), at least the checkpoint's, clamped into the CQ's [min, max].
3. The read clock resumes at the checkpoint's lastReadTimeMs, never earlier than the ring's lookback
   (floor(now) - slotsTotal·precision + 60·precision). Slots read but not committed are read again
   (their messages may repeat; nothing is lost).
4. Slots whose lastPos points past the valid log are re-pointed by a second revise pass from the
   smallest firstPos among them (or dropped when all their units were cut).
"""

from __future__ import annotations

import struct
import time

import structlog

from scheduler.timer.config import TIMER_BLANK_SLOTS, TIMER_TOPIC
from scheduler.timer.timerlog import num_delta
from scheduler.timer.wheel import SLOT, SLOT_SIZE

log = structlog.get_logger(__name__)

_QOFF = struct.Struct(">q")
_POS_QUEUE_OFFSET = 20


def recover(svc) -> None:
    cfg, tl, wheel, cp, store = svc.config, svc.timerlog, svc.wheel, svc.checkpoint, svc.store
    prec = cfg.precision_ms
    tl.load()
    start = max(tl.min_pos, cp.last_timerlog_flush_pos - tl.file_size) if cp.existed else tl.min_pos
    start = max(start, 0)
    last_unit = None
    revised = 0
    for pos, unit in tl.scan(start):
        wheel.revise(unit[3] + unit[4], pos, num_delta(unit[2]))
        last_unit = unit
        revised += 1
    cut = tl.truncate_dirty()
    process_offset = tl.write_pos

    # step 2: the timer CQ offset to resume enqueueing from
    q = cp.last_timer_queue_offset if cp.existed else 0
    if last_unit is not None:
        rec = store.read_record(last_unit[5], last_unit[6])
        if rec is not None:
            q = max(q, _QOFF.unpack_from(rec, _POS_QUEUE_OFFSET)[0] + 1)
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
    repointed = _repoint_dangling(svc, read_ms, process_offset)

    wheel.rebuild_occupancy(read_ms)
    svc.curr_queue_offset = svc.commit_queue_offset = q
    svc.read_cursor_ms = svc.commit_read_ms = read_ms
    svc.curr_write_ms = floor_now
    log.info("timer.recovered", units_revised=revised, timerlog_bytes_cut=cut, timerlog_end=process_offset,
             queue_offset=q, read_ms=read_ms, pending=wheel.pending, slots=wheel.occupied,
             dangling_slots=repointed)


def _repoint_dangling(svc, read_ms: int, end: int) -> int:
    import numpy as np

    wheel, tl = svc.wheel, svc.timerlog
    slots = np.frombuffer(wheel.mm, dtype=">i8").reshape(wheel.ring, 4)
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
        for pos, unit in tl.scan(min_first):
            wheel.revise(unit[3] + unit[4], pos, num_delta(unit[2]))
    return len(bad)
