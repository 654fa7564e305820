"""Read side of the MessageStore (`StoreReads`, a part of the facade): pull lookups with RocketMQ's status table
(remoting-protocol.md §8.2), units, records, offsets, search by time, key queries.

Readers see what is dispatched: a queue's max offset is the gate's visible one (storage.dispatch.DispatchGate,
units of records past the dispatch limit are not read), and a key query skips records past the limit."""

from __future__ import annotations

import mmap
from bisect import bisect_right
from collections.abc import Callable, Container
from typing import TYPE_CHECKING

import structlog

from codec.consume_queue_unit import BLANK_SIZE, UNIT, UNIT_PHYS_SIZE, UNIT_SIZE
from storage.commitlog import CommitLog
from storage.consume_queue import ConsumeQueue
from storage.consume_queue_table import ConsumeQueueTable
from storage.dispatch import DispatchGate
from storage.index import IndexService
from storage.store_status import StoreCounters
from storage.store_types import GetResult, GetStatus, QueryResult, StoreConfig

if TYPE_CHECKING:
    from codec.record import MessageRecord
    from storage.mapped_file import MappedFile

log = structlog.get_logger(__name__)

_MIN_SCAN_BYTES = 16000


def _find_all(mm: mmap.mmap, literal: bytes, start: int, end: int, base: int) -> list[int]:
    """`base` + each position in mm[start:end] where `literal` starts (overlapping ones too), ascending."""
    out: list[int] = []
    find = mm.find
    i = find(literal, start, end)
    while i >= 0:
        out.append(base + i)
        i = find(literal, i + 1, end)
    return out


def _candidates(units: memoryview, flags: bytes | None, literal: bytes | None,
                find: Callable[[int], MappedFile | None]) -> bytearray | None:
    """One byte per unit, 1 where the unit may match: its `flags` byte when given, else (with a `literal`) a
    record holding the literal (searched once over the scan's CommitLog span); the scan evaluates exactly
    those. None when the literal cannot be placed (the span crosses a segment, is not written yet, or the units
    do not ascend): the unit-by-unit scan decides then."""
    n = len(units) // UNIT_SIZE
    if flags is not None:  # the bitmap already leaves few units: placing the literal on units would cost more
        return bytearray(flags)
    if literal is None:
        return None
    cols = list(UNIT_PHYS_SIZE.iter_unpack(units))
    first, (last, last_size) = cols[0][0], cols[-1]
    mf = find(first)
    if mf is None or last_size <= 0:
        return None
    lo = mf.file_from_offset
    if not (lo <= first and last + last_size <= lo + mf.wrote_pos):
        return None
    phys = [p for p, _ in cols]
    if phys != sorted(phys) or len(set(phys)) != n:  # ascending, no repeats (C-speed checks)
        return None
    cand = bytearray(n)
    for h in _find_all(mf.mm, literal, first - lo, last + last_size - lo, lo):
        k = bisect_right(phys, h) - 1
        if k >= 0 and h < phys[k] + cols[k][1]:
            cand[k] = 1
    return cand


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


class StoreReads:
    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService,
                 counters: StoreCounters, gate: DispatchGate) -> None:
        self.config = config
        self.gate = gate
        self.held = gate.held  # the visible max offset of each queue with units past the dispatch limit
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.counters = counters

    # ---- pull -----------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_num: int,
                     tag_codes: Container[int] | None = None,
                     record_filter: Callable[[memoryview], bool] | None = None,
                     unit_filter: Callable[[int], bool] | None = None,
                     record_literal: bytes | None = None,
                     unit_flags: Callable[[int, int], bytes] | None = None) -> GetResult:
        """Up to `max_num` messages from `offset`: units whose tagsCode is in `tag_codes` (None: any; a set, or
        codec.tags.MultiTagCodes on a MULTI_TAG topic) and whose
        queue offset `unit_filter` does not rule out (isMatchedByConsumeQueue: a bitmap pre-filter), then records
        `record_filter` accepts (isMatchedByCommitLog, e.g. a SQL92 selector; None: any).

        `record_literal` (with a record_filter): bytes every record the filter accepts contains (codec.sql92's
        Selector.literal). The scan's CommitLog span is searched for them once (mmap.find, in C) and a record
        holding none is passed over without calling the filter; the result is the same as without it
        (tests/storage/test_store_literal_scan.py runs both).

        `unit_flags` is unit_filter's bulk form (the bitmap gate's): called once with (offset, units in the scan),
        one byte per unit, 0 where the unit is ruled out; the same answer as unit_filter unit by unit, one call."""
        self.counters.get_total += 1
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
        if self.held:
            max_off = self.gate.visible_max((topic, queue_id), max_off)
        if max_off == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        max_num = max(1, max_num)
        scan_units = max(_MIN_SCAN_BYTES, max_num * UNIT_SIZE) // UNIT_SIZE
        units = cq.read_units(offset, min(scan_units, max_off - offset))
        if units is None or len(units) == 0:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.file_end_offset(offset), min_off, max_off)
        cfg = self.config
        max_bytes, max_count = cfg.max_get_bytes, min(cfg.max_get_count, max_num)
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        if tag_codes is None and record_filter is None and unit_filter is None and unit_flags is None:
            scanned, removed = self.take_all(result, units, offset, max_count, max_bytes)  # most pulls: no filter
        else:
            scanned, removed = self.take_matching(result, units, offset, max_count, max_bytes, tag_codes,
                                                  unit_filter, record_filter, record_literal, unit_flags)
        result.next_begin_offset = offset + scanned
        if result.buffers:
            result.status = GetStatus.FOUND
        elif removed:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
        return result

    def take_matching(self, result: GetResult, units: memoryview, offset: int, max_count: int, max_bytes: int,
                      tag_codes: Container[int] | None, unit_filter: Callable[[int], bool] | None,
                      record_filter: Callable[[memoryview], bool] | None, record_literal: bytes | None = None,
                      unit_flags: Callable[[int, int], bytes] | None = None) -> tuple[int, bool]:
        """Scan `units` (from queue offset `offset`) into `result`'s buffers and queue offsets, up to `max_count`
        records / `max_bytes`, keeping those the filters accept: (units scanned, whether a unit pointed at
        removed CommitLog data). The reference of `take_all`."""
        buffers, qoffs = result.buffers, result.queue_offsets
        total_bytes = 0
        removed = False
        cl_min = self.commitlog.min_offset
        find = self.commitlog.queue.find
        literal = record_literal if record_filter is not None and record_literal else None
        flags = None if unit_flags is None else unit_flags(offset, len(units) // UNIT_SIZE)
        if record_filter is not None and tag_codes is None and unit_filter is None \
                and (flags is not None or literal is not None):
            cand = _candidates(units, flags, literal, find)
            if cand is not None:  # the units left to evaluate are known: step from one to the next
                self._scan_candidates(result, units, offset, cand, max_count, max_bytes, record_filter)
                return result.next_begin_offset - offset, result.status is GetStatus.MESSAGE_WAS_REMOVING
        # `commitlog.read(phys, size)` with the segment kept across units (a pull's units mostly
        # point into one segment): one `find` per segment instead of one per message
        lo = hi = wrote = 0
        view: memoryview  # bound with the first unit's segment (lo == hi == 0 contains no offset)
        mm: mmap.mmap
        scanned = 0
        hits: list[int] = []  # where `literal` starts in the CommitLog, ascending, within [hits_lo, hits_hi)
        hits_lo = hits_hi = next_hit = hit_at = 0
        span_end = 0
        if literal is not None:  # the scan's last record's end (units ascend in the CommitLog)
            last_phys, last_size, _ = UNIT.unpack_from(units, len(units) - UNIT.size)
            span_end = last_phys + max(0, last_size)
        for phys, size, tags in UNIT.iter_unpack(units):
            if buffers and (len(buffers) >= max_count or total_bytes + size > max_bytes):
                break
            scanned += 1
            if size == BLANK_SIZE or size <= 0:
                continue
            if tag_codes is not None and _int32(tags) not in tag_codes:
                continue
            if unit_filter is not None and not unit_filter(offset + scanned - 1):
                continue
            if flags is not None and not flags[scanned - 1]:
                continue
            if phys < cl_min:
                removed = True
                continue
            if not lo <= phys < hi:
                mf = find(phys)
                if mf is None:
                    lo = hi = 0
                    removed = True
                    continue
                lo = mf.file_from_offset
                hi = lo + mf.file_size
                wrote = mf.wrote_pos
                view = mf.view
                mm = mf.mm
                hits_lo = hits_hi = 0  # this segment's span is searched when a record first needs it
            pos = phys - lo
            if pos + size > wrote:
                removed = True
                continue
            if literal is not None:
                if not hits_lo <= phys < hits_hi:  # search from here to the span's end within this segment
                    hits_lo, hits_hi = phys, lo + min(wrote, span_end - lo)
                    hits = _find_all(mm, literal, pos, hits_hi - lo, lo)
                    hits.append(hits_hi)  # a sentinel past every record the search covered
                    next_hit, hit_at = 0, hits[0]
                if phys + size <= hits_hi:  # the search covered the record: no hit in it, no match
                    while hit_at < phys:
                        next_hit += 1
                        hit_at = hits[next_hit]
                    if hit_at >= phys + size:
                        continue
            rec = view[pos:pos + size]
            if record_filter is not None and not record_filter(rec):
                continue
            buffers.append(rec)
            qoffs.append(offset + scanned - 1)
            total_bytes += size
        result.buffer_total_size = total_bytes
        return scanned, removed

    def take_all(self, result: GetResult, units: memoryview, offset: int, max_count: int,
                 max_bytes: int) -> tuple[int, bool]:
        """`take_matching` with no filter (a pull without tags or SQL92, most of them), without the per-unit
        filter checks; tests/storage/test_reads.py checks the two agree."""
        append, append_qoff = result.buffers.append, result.queue_offsets.append
        total_bytes = taken = 0
        removed = False
        cl_min = self.commitlog.min_offset
        find = self.commitlog.queue.find
        lo = hi = wrote = 0
        view: memoryview
        qoff = offset - 1  # the queue offset of the unit in hand
        for phys, size, _tags in UNIT.iter_unpack(units):
            if taken and (taken >= max_count or total_bytes + size > max_bytes):
                break
            qoff += 1
            if size == BLANK_SIZE or size <= 0:
                continue
            if phys < cl_min:
                removed = True
                continue
            if not lo <= phys < hi:
                mf = find(phys)
                if mf is None:
                    lo = hi = 0
                    removed = True
                    continue
                lo = mf.file_from_offset
                hi = lo + mf.file_size
                wrote = mf.wrote_pos
                view = mf.view
            pos = phys - lo
            if pos + size > wrote:
                removed = True
                continue
            append(view[pos:pos + size])
            append_qoff(qoff)
            total_bytes += size
            taken += 1
        result.buffer_total_size = total_bytes
        return qoff + 1 - offset, removed

    def _scan_candidates(self, result: GetResult, units: memoryview, offset: int, cand: bytearray, max_count: int,
                         max_bytes: int, record_filter: Callable[[memoryview], bool]) -> None:
        """get_messages' scan when the units that may match are known (`cand`, one byte per unit; see
        `_candidates`): the others are stepped over in bulk, with the same stops as the unit-by-unit scan (a
        full batch stops at the next unit whatever it is; a unit too large for the bytes left stops it even
        when ruled out). The unit-by-unit loop is its reference (tests/storage/test_store_literal_scan.py)."""
        buffers, qoffs = result.buffers, result.queue_offsets
        total_bytes = 0
        removed = False
        cl_min = self.commitlog.min_offset
        find = self.commitlog.queue.find
        n = len(cand)
        raw = bytes(units)
        # every unit's size in 0..65535 (its two high bytes zero): a ruled-out unit cannot stop the scan on bytes
        # while 65536 more would fit
        small = raw[8::UNIT_SIZE].count(0) == n and raw[9::UNIT_SIZE].count(0) == n
        i = 0
        while i < n:
            j = cand.find(1, i)
            if j < 0:
                j = n
            if j > i:  # units i .. j-1 are ruled out
                if buffers:
                    if len(buffers) >= max_count:
                        break
                    if not small or total_bytes + 65536 > max_bytes:
                        stop = next((k for k in range(i, j)
                                     if total_bytes + UNIT.unpack_from(units, k * UNIT_SIZE)[1] > max_bytes), -1)
                        if stop >= 0:
                            i = stop
                            break
                i = j
                continue
            phys, size, _ = UNIT.unpack_from(units, i * UNIT_SIZE)
            if buffers and (len(buffers) >= max_count or total_bytes + size > max_bytes):
                break
            i += 1
            if size == BLANK_SIZE or size <= 0:
                continue
            mf = find(phys) if phys >= cl_min else None
            if mf is None:
                removed = True
                continue
            pos = phys - mf.file_from_offset
            if pos + size > mf.wrote_pos:
                removed = True
                continue
            rec = mf.view[pos:pos + size]
            if not record_filter(rec):
                continue
            buffers.append(rec)
            qoffs.append(offset + i - 1)
            total_bytes += size
        result.next_begin_offset = offset + i
        result.buffer_total_size = total_bytes
        if buffers:
            result.status = GetStatus.FOUND
        elif removed:
            result.status = GetStatus.MESSAGE_WAS_REMOVING

    # ---- units / records --------------------------------------------------------------------------
    def read_units(self, topic: str, queue_id: int, offset: int, max_units: int) -> memoryview | None:
        """Up to `max_units` 20-byte units from `offset` (within one CQ file; call again for more)."""
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return None
        if self.held:
            max_units = min(max_units, self.gate.visible_max((topic, queue_id), cq.max_offset) - offset)
            if max_units <= 0:
                return None
        return cq.read_units(offset, max_units)

    def lookup_message_by_offset(self, phys_offset: int) -> MessageRecord | None:
        """The decoded `codec.record.MessageRecord` at `phys_offset`, or None."""
        raw = self.commitlog.read_record(phys_offset)
        if raw is None:
            return None
        from codec.record import decode_record

        return decode_record(raw, 0)[0]

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return 0
        return self.gate.visible_max((topic, queue_id), cq.max_offset) if self.held else cq.max_offset

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.queues.queues if t == topic)

    # ---- time -----------------------------------------------------------------------------------
    def _unit_store_ts(self, cq: ConsumeQueue, logic_offset: int) -> int | None:
        u = cq.unit(logic_offset)
        if u is None or u[1] == BLANK_SIZE:
            return None
        return self.commitlog.store_ts_at(u[0])

    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None or self.max_offset(topic, queue_id) <= cq.min_offset:
            return None
        return self._unit_store_ts(cq, cq.min_offset)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """RocketMQ's rules: an exact store-time match returns that (first such) offset; otherwise the
        neighbour whose store time is closer (the earlier one on a tie); every message older → the last
        message's offset; every message newer → the first. 0 if the queue does not exist or is empty."""
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, self.max_offset(topic, queue_id) - 1
        # skip units whose CommitLog data is gone
        while lo <= hi and self._unit_store_ts(cq, lo) is None:
            lo += 1
        if lo > hi:
            return 0
        first, last = lo, hi
        # leftmost offset with store time >= timestamp
        while lo <= hi:
            mid = (lo + hi) // 2
            ts = self._unit_store_ts(cq, mid)
            if ts is None or ts < timestamp:
                lo = mid + 1
            else:
                hi = mid - 1
        if lo > last:
            return last
        right_ts = self._unit_store_ts(cq, lo)
        if right_ts is None or right_ts == timestamp or lo == first:
            return lo
        left = lo - 1
        left_ts = self._unit_store_ts(cq, left)
        if left_ts is None:
            return lo
        return lo if abs(timestamp - left_ts) > abs(timestamp - right_ts) else left

    # ---- keys -----------------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int, begin: int = 0,
                     end: int = (1 << 63) - 1) -> QueryResult:
        hits = self.index.query(topic, key, max(1, max_num), begin, end, self.commitlog.min_offset)
        buffers = []
        limit = self.gate.limit if self.gate.writes else None  # held records are not indexed yet
        for phys, size, _ts in hits:
            if limit is not None and phys + size > limit:
                continue
            buf = self.commitlog.read_record(phys, size)
            if buf is not None:
                buffers.append(buf)
        return QueryResult(buffers, self.index.last_update_ts, self.index.last_update_phys)
