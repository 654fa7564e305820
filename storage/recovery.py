"""Store recovery at load.

Clean stop (no `abort` file, a checkpoint): trust the checkpoint's CommitLog offset, set the write
positions from it, no scan. After a crash (abort file present, or files but no checkpoint): scan the
CommitLog from the segment holding the oldest checkpoint offset (or from the first segment), checking
MAGIC, lengths and BODYCRC of every record; cut at the first invalid one (zero the torn tail, delete
later segments) and log exactly what was cut. Then ConsumeQueue units that point past the CommitLog end
are removed, and units/index keys missing for records past the checkpoint are re-dispatched from the
CommitLog. Nothing below the last fsync is ever cut: fsynced records are valid records.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog

from codec.consume_queue_unit import UNIT
from codec.properties import MessageConst, index_keys
from storage import _record as R
from storage.consume_queue_table import ConsumeQueueTable

# property names, bound once for the per-message path (codec.properties.MessageConst)
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY

if TYPE_CHECKING:
    from storage.checkpoint import CheckpointFile
    from storage.commitlog import CommitLog
    from storage.index import IndexService
    from storage.store_types import TagsCodeOf

log = structlog.get_logger(__name__)

def recover(cl: CommitLog, queues: ConsumeQueueTable, checkpoint: CheckpointFile, index: IndexService,
            tags_code_of: TagsCodeOf) -> None:
    """Load the CommitLog, the ConsumeQueues and the index and make them agree (see the module docstring);
    `tags_code_of` gives a rebuilt unit's tagsCode."""
    cl.load()
    queues.load()
    crashed = checkpoint.crashed_last_time()
    cp = checkpoint.read()
    files = cl.queue.files
    dispatch_from: int | None = None
    abnormal = False
    if not files:
        end = 0
    elif not crashed and cp is not None and cl.min_offset <= cp.commitlog_flushed_offset <= _files_end(cl):
        end = cp.commitlog_flushed_offset
        _set_end(cl, end)
        if min(cp.logics_flushed_offset, cp.index_offset) < end:
            dispatch_from = max(min(cp.logics_flushed_offset, cp.index_offset), cl.min_offset)
        log.info("recovery.normal", commitlog_end=end)
    else:
        start = cl.min_offset
        if cp is not None:
            start = max(start, min(cp.commitlog_flushed_offset, cp.logics_flushed_offset, cp.index_offset))
        first = cl.queue.find(start) or files[0]
        end = _scan_valid_end(cl, files.index(first))
        for path, pos, n in cl.queue.truncate(end):
            log.warning("recovery.commitlog_cut", file=path, from_offset=pos, bytes=n,
                        phys_offset=int(os.path.basename(path)) + pos)
        dispatch_from = first.file_from_offset
        abnormal = True
        log.warning("recovery.abnormal", reason="abort file" if crashed else "no checkpoint",
                    scanned_from=first.file_from_offset, commitlog_end=end)
    for cq in queues.queues.values():
        removed = cq.truncate_past(end)
        if removed:
            log.warning("recovery.consume_queue_cut", topic=cq.topic, queue_id=cq.queue_id, units=removed,
                        max_offset=cq.max_offset)
        cq.correct_min_offset(cl.min_offset)
    index.load(end, crashed=abnormal)  # after a crash: rebuild the last IndexFile's slots
    if dispatch_from is not None and dispatch_from < end:
        _redispatch(cl, queues, index, tags_code_of, dispatch_from, end)
    queues.reset_offsets()


def _files_end(cl: CommitLog) -> int:
    last = cl.queue.files[-1]  # recover() calls this only when there are files
    return last.file_from_offset + last.file_size


def _set_end(cl: CommitLog, end: int) -> None:
    """Positions from a trusted offset: earlier segments full, the one holding `end` up to it."""
    keep = []
    for mf in cl.queue.files:
        start = mf.file_from_offset
        if start + mf.file_size <= end:
            mf.wrote_pos = mf.flushed_pos = mf.file_size
        elif start <= end:
            mf.wrote_pos = mf.flushed_pos = end - start
        else:
            log.warning("recovery.segment_past_checkpoint_deleted", file=mf.path)
            mf.destroy()
            continue
        keep.append(mf)
    cl.queue.files = keep


def _scan_valid_end(cl: CommitLog, first_index: int) -> int:
    """The offset just past the last valid record, scanning from segment `first_index`."""
    files = cl.queue.files
    end = files[first_index].file_from_offset
    for mf in files[first_index:]:
        mm, size, pos = mf.mm, mf.file_size, 0
        while True:
            if pos + R.BLANK_LEN > size:
                return mf.file_from_offset + pos
            total = R.valid_record_size(mm, pos, size)  # type: ignore[arg-type]  # an mmap is a buffer (codec's BytesLike omits it)
            if total == 0 and R.read_head(mm, pos)[0] == size - pos:
                break  # END-OF-FILE blank: continue with the next segment
            if not total:
                return mf.file_from_offset + pos
            pos += total
        mf.wrote_pos = mf.flushed_pos = size
        end = mf.file_from_offset + size
    return end


def iter_records(cl: CommitLog, from_offset: int, end: int) -> Iterator[tuple[int, int, str, bytes, memoryview]]:
    """(phys, total, topic, properties bytes, view) of every record in [from_offset, end), no CRC check."""
    start = cl.queue.find(from_offset)
    if start is None:
        return
    files = cl.queue.files
    for mf in files[files.index(start):]:
        mm, size, pos = mf.mm, mf.file_size, 0
        while pos + R.BLANK_LEN <= size and mf.file_from_offset + pos < end:
            total, magic = R.read_head(mm, pos)
            if magic not in R.RECORD_MAGICS:
                break
            phys = mf.file_from_offset + pos
            if phys >= from_offset:
                view = mf.slice(pos, total)
                yield phys, total, R.read_topic(view), R.read_properties_bytes(view), view
            pos += total


def _redispatch(cl: CommitLog, queues: ConsumeQueueTable, index: IndexService, tags_code_of: TagsCodeOf,
                from_offset: int, end: int) -> None:
    """Write ConsumeQueue units and index keys that are missing for records in [from_offset, end)."""
    index_after = index.last_update_phys if index.entries else -1
    units = keys = 0
    for phys, total, topic, props_raw, view in iter_records(cl, from_offset, end):
        qid = R.read_queue_id(view)
        qoff = R.read_queue_offset(view)
        cq = queues.get(topic, qid, create=True)
        need_unit = qoff >= cq.max_offset
        need_keys = phys > index_after
        if not (need_unit or need_keys):
            continue
        props = R.parse_properties(props_raw)
        store_ts = R.read_store_timestamp(view)
        if need_unit:
            cq.put_units(qoff, UNIT.pack(phys, total, tags_code_of(topic, props, store_ts)), phys + total)
            units += 1
        if need_keys:
            ks = index_keys(props.get(_KEYS), props.get(_UNIQ_KEY))
            if ks:
                index.add(topic, ks, phys, total, store_ts)
                keys += len(ks)
    if units or keys:
        log.warning("recovery.redispatched", from_offset=from_offset, end=end, units=units, index_keys=keys)


