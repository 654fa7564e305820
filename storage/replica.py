"""The replica seam of the MessageStore (`ReplicaAppender`, a part of the facade): CommitLog bytes from elsewhere, appended verbatim.

A slave's CommitLog is byte-identical to its master's (cluster-ha.md §2.6): `append_replica(offset,
data)` copies raw CommitLog bytes (records, END-OF-FILE blanks, a record split over two calls) at
exactly `offset`, which must be the current CommitLog end (or anything when the CommitLog is empty:
the first segment starts at the file boundary below `offset`). `reput()` then does what RocketMQ's
ReputMessageService does: it walks the complete records between the reput offset and the CommitLog
end and writes their ConsumeQueue units (SCHEDULE_TOPIC_XXXX units carry the deliver time as
tagsCode, as on the master) and index keys, then calls the dispatch listeners once per queue (through the
dispatch gate: a controller-mode slave dispatches up to its master's confirmOffset), and the
destination listeners with the (topic, queue) pairs the pass's records name as where they go later
(REAL_TOPIC / REAL_QID: scheduled messages, transaction halves; a slave learns those topics before
anything is delivered there).
`truncate_replica(offset)` cuts the CommitLog, the ConsumeQueues, the index and the reput offset back to
`offset` (a former master joining the new one drops its unreplicated tail).

`read_only` makes `put` / `put_batch` refuse every write with SERVICE_NOT_AVAILABLE (a slave);
replicated appends are not affected. Storage knows nothing of who sends the bytes or how.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from codec.buffers import BytesLike
from codec.consume_queue_unit import UNIT
from codec.properties import MessageConst, index_keys
from storage import _record as R
from storage.commitlog import CommitLog
from storage.consume_queue import QueueRun
from storage.consume_queue_table import ConsumeQueueTable
from storage.dispatch import DispatchGate
from storage.index import IndexService
from storage.store_status import RunState, StoreCounters
from storage.store_types import TagsCodeOf

# property names, bound once for the per-message path (codec.properties.MessageConst)
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY
_REAL_TOPIC = MessageConst.REAL_TOPIC
_REAL_QID = MessageConst.REAL_QID

# fn({(topic, queue_id)}): the destinations replicated records name (REAL_TOPIC / REAL_QID: a scheduled
# message, a transaction's half) after a reput pass that met some
DestinationListener = Callable[[set[tuple[str, int]]], None]


def _queue_id(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0

log = structlog.get_logger(__name__)


class ReplicaError(ValueError):
    """Replicated bytes that do not continue the CommitLog (wrong offset)."""


class ReplicaAppender:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService,
                 gate: DispatchGate, run: RunState, counters: StoreCounters,
                 tags_code_of: TagsCodeOf) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.gate = gate  # the dispatch listeners, behind the dispatch limit (storage.dispatch)
        self.run = run
        self.counters = counters
        self.tags_code_of = tags_code_of
        self.reput_offset = -1  # -1: the CommitLog end at the first replica call (everything before is dispatched)
        self.destination_listeners: list[DestinationListener] = []

    def start_replica(self) -> int:
        """Become read-only and set the reput offset just past the last record a ConsumeQueue holds
        (a record torn over a restart is dispatched once its rest arrives). Returns the reput offset."""
        self.run.read_only = True
        cl = self.commitlog
        ends = [cq.max_phys_end for cq in self.queues.queues.values()]
        self.reput_offset = min(max(ends, default=cl.max_offset), cl.max_offset) if cl.queue.files else -1
        if ends and self.reput_offset < cl.min_offset:
            self.reput_offset = cl.min_offset
        return self.reput_offset

    def stop_replica(self) -> None:
        """Dispatch what is complete, drop a torn record at the end (the rest never came), then
        accept writes again (promotion)."""
        self.reput()
        if 0 <= self.reput_offset < self.commitlog.max_offset:
            self.truncate_replica(self.reput_offset)
        self.run.read_only = False
        self.reput_offset = -1

    def replica_data(self, offset: int, max_bytes: int) -> memoryview | None:
        """getCommitLogData: up to `max_bytes` written CommitLog bytes from `offset`, within the one
        segment holding it (a memoryview of the mapping), or None when there are none yet."""
        cl = self.commitlog
        mf = cl.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        n = min(mf.wrote_pos - pos, max_bytes)
        if n <= 0:
            return None
        return mf.slice(pos, n)

    def append_replica(self, offset: int, data: BytesLike) -> int:
        """Append raw CommitLog bytes at `offset`; returns the new CommitLog end. Raises ReplicaError
        when `offset` is not the end (nothing written). Records are dispatched by `reput`."""
        cl = self.commitlog
        end = cl.max_offset
        fsize = cl.file_size
        if not cl.queue.files:
            if self.reput_offset < 0 or self.reput_offset != offset:
                self.reput_offset = offset
            end = offset
        elif offset != end:
            raise ReplicaError(f"replicated bytes at {offset}, CommitLog ends at {end}")
        if self.reput_offset < 0:
            self.reput_offset = end
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            at = offset + pos
            last = cl.queue.last
            if last is None or last.is_full:
                # after a full segment the next starts at its end (segments keep their on-disk size
                # when mappedFileSizeCommitLog changes); the first one on its size boundary
                start = last.file_from_offset + last.file_size if last is not None else at - at % fsize
                mf = cl.queue.create_file(start)
                mf.wrote_pos = mf.flushed_pos = at - start
            else:
                mf = last
            if mf.file_from_offset + mf.wrote_pos != at:
                raise ReplicaError(f"replicated bytes at {at}, active segment ends at "
                                   f"{mf.file_from_offset + mf.wrote_pos}")
            n = min(len(view) - pos, mf.file_size - mf.wrote_pos)
            mf.write_at(mf.wrote_pos, view[pos:pos + n])
            mf.wrote_pos += n
            pos += n
        if pos:
            cl.allocate_next(mf)
        self.counters.put_bytes_total += len(view)
        return cl.max_offset

    def reput(self) -> int:
        """Dispatch every complete record in [reput_offset, CommitLog end): ConsumeQueue units, index
        keys, dispatch listeners. Returns the number of records dispatched."""
        cl = self.commitlog
        if self.reput_offset < 0:
            self.reput_offset = cl.max_offset
            return 0
        end = cl.max_offset
        off = self.reput_offset
        tags_code_of = self.tags_code_of
        units: dict[tuple[str, int], QueueRun] = {}  # the units this pass adds, per queue
        index_entries = []
        destinations: set[tuple[str, int]] = set()
        count = 0
        while off < end:
            mf = cl.queue.find(off)
            if mf is None:
                break
            pos = off - mf.file_from_offset
            if pos + R.BLANK_LEN > mf.wrote_pos:
                if mf.wrote_pos >= mf.file_size:  # a segment's unusable tail (< 8 bytes): next segment
                    off = mf.file_from_offset + mf.file_size
                    continue
                break
            total, magic = R.read_head(mf.mm, pos)
            if magic == R.BLANK_MAGIC_CODE:
                off = mf.file_from_offset + mf.file_size
                continue
            if magic not in R.RECORD_MAGICS or total < R.MIN_RECORD:
                log.error("reput.bad_record", phys_offset=off, total=total, magic=magic)
                break
            if pos + total > mf.wrote_pos:
                break  # the rest of this record comes with the next replicated bytes
            view = mf.slice(pos, total)
            topic = R.read_topic(view)
            qid = R.read_queue_id(view)
            qoff = R.read_queue_offset(view)
            props = R.parse_properties(R.read_properties_bytes(view))
            store_ts = R.read_store_timestamp(view)
            unit = UNIT.pack(off, total, tags_code_of(topic, props, store_ts))
            key = (topic, qid)
            run = units.get(key)
            if run is None:
                units[key] = QueueRun(qoff, bytearray(unit), off + total)
            else:
                run.units += unit
                run.next_offset += 1
                run.end = off + total
            ks = index_keys(props.get(_KEYS), props.get(_UNIQ_KEY))  # every topic, as a put indexes it
            if ks:
                index_entries.append((topic, ks, off, total, store_ts))
            real = props.get(_REAL_TOPIC)
            if real is not None:
                destinations.add((real, _queue_id(props.get(_REAL_QID))))
            off += total
            count += 1
        self.reput_offset = off
        for e in index_entries:
            self.index.add(*e)
        queues = self.queues
        for key, run in units.items():
            queues.write_units(key, run.first, run.units, run.end)
        if units:
            self.gate.after_write(units, queues.offsets, off)
        if destinations:
            for fn in self.destination_listeners:
                try:
                    fn(destinations)
                except Exception as e:
                    log.error("reput.destination_listener_failed", listener=repr(fn), error=repr(e))
        if count:
            self.counters.put_ok_total += count
        return count

    def truncate_replica(self, offset: int) -> int:
        """Cut the CommitLog, ConsumeQueues and index back to `offset` (no-op when the end is not past it).
        Returns the number of CommitLog bytes dropped (logged with every cut)."""
        cl = self.commitlog
        end = cl.max_offset
        if end <= offset:
            return 0
        cuts = cl.queue.truncate(offset)
        for path, pos, n in cuts:
            log.warning("replica.commitlog_cut", file=path, from_pos=pos, bytes=n)
        for cq in self.queues.queues.values():
            removed = cq.truncate_past(offset)
            if removed:
                log.warning("replica.consume_queue_cut", topic=cq.topic, queue_id=cq.queue_id, units=removed)
        self.queues.reset_offsets()
        self.gate.truncated(offset, self.queues.offsets)
        cut = self.index.truncate(offset)
        if cut:
            log.warning("replica.index_cut", entries=cut, to_offset=offset)
        self.reput_offset = min(self.reput_offset, offset) if self.reput_offset >= 0 else offset
        dropped = end - offset
        log.warning("replica.truncated", to_offset=offset, dropped_bytes=dropped, old_end=end)
        return dropped
