"""What of a delay level's ConsumeQueue units is due now (scheduled-messages.md §1.4), pure: units in,
the due run out, never early (scheduler.due's rule: the first ms strictly after tagsCode =
storeTimestamp + delay; a tagsCode further away than the level's delay is corrected to now).

`scan_due` is the hot path (the rule inlined); `scan_due_reference` says the same with scheduler.due
and scheduler.levels, one call per unit (tests/scheduler/test_level_scan.py: they agree).
"""

from __future__ import annotations

from typing import NamedTuple

# a schedule queue unit: phys offset, size, tagsCode (= deliverTimestamp = storeTimestamp + delay)
from codec.consume_queue_unit import UNIT, UNIT_SIZE
from scheduler.due import AFTER_MS, is_due, level_due_ms
from scheduler.levels import correct_deliver_timestamp


class DueScan(NamedTuple):
    """The due run at the head of the units scanned, column by column (message k is unit k)."""

    phys: list[int]  # the schedule record's CommitLog offset
    sizes: list[int]  # its size
    dues: list[int]  # the ms it became due
    scanned: int  # units taken (the due run's length: the first not-due unit is not taken)
    wait_due: int  # the first not-due unit's due ms; 0: every unit scanned was due


def scan_due(units: bytes | memoryview, limit: int, now: int, delay_ms: int) -> DueScan:
    """The due run among the first `limit` units of `units` at wall-clock ms `now`."""
    late_bound = now + delay_ms
    phys: list[int] = []
    sizes: list[int] = []
    dues: list[int] = []
    add_phys, add_size, add_due = phys.append, sizes.append, dues.append
    for p, size, tags_code in UNIT.iter_unpack(units[:limit * UNIT_SIZE]):
        due = tags_code + AFTER_MS  # scheduler.due.level_due_ms, inlined
        if tags_code > late_bound:  # correctDeliverTimestamp
            due = now
        if due > now:
            return DueScan(phys, sizes, dues, len(dues), due)
        add_phys(p)
        add_size(size)
        add_due(due)
    return DueScan(phys, sizes, dues, len(dues), 0)


def scan_due_reference(units: bytes | memoryview, limit: int, now: int, delay_ms: int) -> DueScan:
    """`scan_due` unit by unit through scheduler.due and scheduler.levels (called by nothing hot)."""
    phys: list[int] = []
    sizes: list[int] = []
    dues: list[int] = []
    for k in range(min(limit, len(units) // UNIT_SIZE)):
        p, size, tags_code = UNIT.unpack_from(units, k * UNIT_SIZE)
        corrected = correct_deliver_timestamp(now, tags_code, delay_ms)
        due = level_due_ms(tags_code) if corrected == tags_code else corrected  # corrected: due now
        if not is_due(due, now):
            return DueScan(phys, sizes, dues, k, due)
        phys.append(p)
        sizes.append(size)
        dues.append(due)
    return DueScan(phys, sizes, dues, len(dues), 0)
