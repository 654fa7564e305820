"""Read side of the MessageStore (`StoreReads`, a part of the facade): pull lookups with RocketMQ's status table
(remoting-protocol.md §8.2), units, records, offsets, search by time, key queries."""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TYPE_CHECKING

import structlog

from codec.consume_queue_unit import BLANK_SIZE, UNIT, UNIT_SIZE
from storage.commitlog import CommitLog
from storage.consume_queue import ConsumeQueue
from storage.consume_queue_table import ConsumeQueueTable
from storage.index import IndexService
from storage.store_status import StoreCounters
from storage.store_types import GetResult, GetStatus, QueryResult, StoreConfig

if TYPE_CHECKING:
    from codec.record import MessageRecord

log = structlog.get_logger(__name__)

_MIN_SCAN_BYTES = 16000


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


class StoreReads:
    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService,
                 counters: StoreCounters) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.counters = counters

    # ---- pull -----------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_num: int,
                     tag_codes: Container[int] | None = None,
                     record_filter: Callable[[memoryview], bool] | None = None,
                     unit_filter: Callable[[int], bool] | None = None) -> GetResult:
        """Up to `max_num` messages from `offset`: units whose tagsCode is in `tag_codes` (None: any; a set, or
        codec.tags.MultiTagCodes on a MULTI_TAG topic) and whose
        queue offset `unit_filter` does not rule out (isMatchedByConsumeQueue: a bitmap pre-filter), then records
        `record_filter` accepts (isMatchedByCommitLog, e.g. a SQL92 selector; None: any)."""
        self.counters.get_total += 1
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset, cq.max_offset
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
        units = cq.read_units(offset, scan_units)
        if units is None or len(units) == 0:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.file_end_offset(offset), min_off, max_off)
        cfg = self.config
        max_bytes, max_count = cfg.max_get_bytes, min(cfg.max_get_count, max_num)
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        if tag_codes is None and record_filter is None and unit_filter is None:  # most pulls: no filter
            scanned, removed = self.take_all(result, units, offset, max_count, max_bytes)
        else:
            scanned, removed = self.take_matching(result, units, offset, max_count, max_bytes, tag_codes,
                                                  unit_filter, record_filter)
        result.next_begin_offset = offset + scanned
        if result.buffers:
            result.status = GetStatus.FOUND
        elif removed:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
        return result

    def take_matching(self, result: GetResult, units: memoryview, offset: int, max_count: int, max_bytes: int,
                      tag_codes: Container[int] | None, unit_filter: Callable[[int], bool] | None,
                      record_filter: Callable[[memoryview], bool] | None) -> tuple[int, bool]:
        """Scan `units` (from queue offset `offset`) into `result`'s buffers and queue offsets, up to `max_count`
        records / `max_bytes`, keeping those the filters accept: (units scanned, whether a unit pointed at
        removed CommitLog data). The reference of `take_all`."""
        buffers, qoffs = result.buffers, result.queue_offsets
        total_bytes = 0
        removed = False
        cl_min = self.commitlog.min_offset
        find = self.commitlog.queue.find
        # `commitlog.read(phys, size)` with the segment kept across units (a pull's units mostly
        # point into one segment): one `find` per segment instead of one per message
        lo = hi = wrote = 0
        view: memoryview  # bound with the first unit's segment (lo == hi == 0 contains no offset)
        scanned = 0
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

    # ---- units / records --------------------------------------------------------------------------
    def read_units(self, topic: str, queue_id: int, offset: int, max_units: int) -> memoryview | None:
        """Up to `max_units` 20-byte units from `offset` (within one CQ file; call again for more)."""
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
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
        return cq.max_offset if cq is not None else 0

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
        if cq is None or cq.max_offset <= cq.min_offset:
            return None
        return self._unit_store_ts(cq, cq.min_offset)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """RocketMQ's rules: an exact store-time match returns that (first such) offset; otherwise the
        neighbour whose store time is closer (the earlier one on a tie); every message older → the last
        message's offset; every message newer → the first. 0 if the queue does not exist or is empty."""
        cq = self.queues.queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset - 1
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
        for phys, size, _ts in hits:
            buf = self.commitlog.read_record(phys, size)
            if buf is not None:
                buffers.append(buf)
        return QueryResult(buffers, self.index.last_update_ts, self.index.last_update_phys)
