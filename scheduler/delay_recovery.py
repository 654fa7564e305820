"""Where a delay level resumes after a restart (scheduler.progress_file, delayOffset.json as the fallback).

`resume_offset(store, level, progress, fallback, batch_size)`: the level's scheduleProgress record when
the CommitLog still reaches what it saw; if a delivery put was in flight when the process died, the
deliveries of that put already in the CommitLog (counted from the record's `phys`) are matched, in
order, to the schedule records from the record's offset (dropped ones produce none, as in the drain),
and the level resumes just past the last one found. So a kill -9 at any point re-delivers nothing.

`deliveries_after(store, phys)` / `skip_delivered(...)`: the same idea for a promoted slave (issue 25
item 3). The master's last scheduler progress record the slave adopted (scheduler.progress) says, per
level, the next schedule offset not put and the CommitLog end when it was taken; every delivery the old
master put after that record is in the replicated CommitLog after that end, in schedule-queue order. The
new master counts them per level and resumes just past the last one, so only deliveries put after the
last replicated byte can repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import structlog

from codec.codes import RMQ_SYS_TRANS_HALF_TOPIC, SCHEDULE_QUARANTINE_TOPIC
from codec.consume_queue_unit import UNIT_SIZE
from codec.delivery_batch import build_delivery_batch
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes, read_topic
from scheduler.levels import SCHEDULE_TOPIC
from scheduler.progress_file import ProgressFile, count_records_after
from scheduler.store_port import StorePort

log = structlog.get_logger(__name__)

HALF_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
_NOT_DELIVERIES = (SCHEDULE_TOPIC, SCHEDULE_QUARANTINE_TOPIC, HALF_TOPIC)


def _is_delivery_of(level: int) -> Callable[[memoryview], bool]:
    want = str(level)

    def match(rec: memoryview) -> bool:
        return read_topic(rec) not in _NOT_DELIVERIES and parse_properties(read_properties_bytes(rec)).get(MessageConst.DELAY) == want
    return match


def resume_offset(store: StorePort, level: int, progress: ProgressFile, fallback: int, batch_size: int,
                  cancelled: Collection[int] | None = None) -> tuple[int, str]:
    """(schedule offset to resume level `level` from, where it came from). `cancelled`: the level's
    operator-cancelled offsets (scheduler.delay_cancel), which the drain skips without a delivery."""
    rec = progress.level(level)
    cl_end = store.commitlog_max_offset()
    if rec.end < 0:
        return fallback, "delayOffset.json"
    if rec.end > cl_end:
        log.warning("delay.progress_ahead_of_commitlog", level=level, progress_end=rec.end, commitlog_end=cl_end,
                    resumed_from=fallback)
        return fallback, "delayOffset.json"
    if rec.phys < 0:
        return rec.offset, "scheduleProgress"
    k = count_records_after(store, rec.phys, _is_delivery_of(level))
    if k == 0:
        return rec.offset, "scheduleProgress"
    units = store.read_units(SCHEDULE_TOPIC, level - 1, rec.offset, batch_size) or memoryview(b"")
    n = len(units) // UNIT_SIZE
    offsets = [rec.offset + i for i in range(n) if not cancelled or rec.offset + i not in cancelled]
    spans = [(int.from_bytes(units[i:i + 8], "big"), int.from_bytes(units[i + 8:i + 12], "big"))
             for i in ((o - rec.offset) * UNIT_SIZE for o in offsets)]
    batch = build_delivery_batch(store.read_records(spans), HALF_TOPIC)
    if k > len(batch):  # more than one put's worth: should not happen; never re-deliver what is there
        log.error("delay.progress_inflight_mismatch", level=level, offset=rec.offset, found=k, batch=len(batch))
        resumed = rec.offset + n
    else:
        resumed = offsets[batch.source[k - 1]] + 1
    log.warning("delay.progress_inflight_recovered", level=level, offset=rec.offset, delivered_before_kill=k,
                resumed_from=resumed)
    return resumed, "scheduleProgress"


def deliveries_after(store: StorePort, phys: int) -> dict[int, int]:
    """Per delay level, how many of its deliveries the CommitLog holds from `phys` to its end (a
    delivery: a record in a real topic that still carries its DELAY level)."""
    counts: dict[int, int] = {}
    if phys < 0:
        return counts
    for _p, rec in store.records_from(phys):
        if read_topic(rec) in _NOT_DELIVERIES:
            continue
        level = parse_properties(read_properties_bytes(rec)).get(MessageConst.DELAY)
        if level is not None and level.isdigit():
            counts[int(level)] = counts.get(int(level), 0) + 1
    return counts


def skip_delivered(store: StorePort, level: int, offset: int, delivered: int, batch_size: int,
                   cancelled: Collection[int] | None = None) -> int:
    """The schedule offset just past the `delivered`-th delivery level `level` makes from `offset` on
    (its schedule records in order; dropped ones and operator-cancelled offsets make none). Past the
    queue's end (more deliveries than records: should not happen) it stops at the end; an unreadable
    record stops the walk where it is (a repeat rather than a loss)."""
    o, left = offset, delivered
    while left > 0:
        units = store.read_units(SCHEDULE_TOPIC, level - 1, o, batch_size)
        if not units:
            log.error("delay.promotion_more_deliveries_than_records", level=level, offset=o, left=left)
            return o
        n = len(units) // UNIT_SIZE
        offsets = [o + i for i in range(n) if not cancelled or o + i not in cancelled]
        spans = [(int.from_bytes(units[i:i + 8], "big"), int.from_bytes(units[i + 8:i + 12], "big"))
                 for i in ((x - o) * UNIT_SIZE for x in offsets)]
        try:
            batch = build_delivery_batch(store.read_records(spans), HALF_TOPIC)
        except CodecError as e:
            log.error("delay.promotion_unreadable_record", level=level, offset=o, error=str(e))
            return o
        if left <= len(batch):
            return offsets[batch.source[left - 1]] + 1
        left -= len(batch)
        o += n
    return o
