"""ConsumeQueue: per topic/queue index of 20-byte units (message-format.md §7).

Unit = (commitLogOffset int64, size int32, tagsCode int64). Files of 300000 units under
`consumequeue/<topic>/<queueId>/<20-digit start byte offset>`. The unit of logical offset n lives at
byte n*20. A queue that starts past 0 (after retention, or a rebuild) fills the gap at the start of its
first file with blank units (0, Integer.MAX_VALUE, 0).
"""

from __future__ import annotations

import os

import structlog

from codec.buffers import BytesLike
from codec.consume_queue_unit import BLANK_SIZE, BLANK_UNIT, UNIT, UNIT_SIZE
from storage.mapped_file import MappedFileQueue

log = structlog.get_logger(__name__)

UNITS_PER_FILE = 300000


class QueueRun:
    """The ConsumeQueue units one put (or one reput pass) gathers for one queue before its one write:
    `first` the queue offset of the first unit, `next_offset` the one the next unit gets, `units` the
    units back to back (UNIT_SIZE bytes each), `end` the CommitLog end of the last record. A slotted
    record on the send append's and the replica apply's per-message path."""

    __slots__ = ("first", "next_offset", "units", "end")

    def __init__(self, first: int, units: bytearray, end: int) -> None:
        self.first = first
        self.next_offset = first + len(units) // UNIT_SIZE
        self.units = units
        self.end = end


class ConsumeQueue:
    __slots__ = ("topic", "queue_id", "directory", "file_size", "files", "min_logic_offset", "max_phys_end")

    def __init__(self, root: str, topic: str, queue_id: int, file_size: int = UNITS_PER_FILE * UNIT_SIZE) -> None:
        if file_size % UNIT_SIZE:
            raise ValueError("consume queue file size must be a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root, topic, str(queue_id))
        self.file_size = file_size
        self.files = MappedFileQueue(self.directory, file_size)
        self.min_logic_offset = 0  # byte offset of the first unit whose CommitLog data exists
        self.max_phys_end = 0  # commitLogOffset + size of the last unit

    # ---- load / recover -------------------------------------------------------------------------
    def load(self) -> None:
        """Open the files and find the end: the first unit with size <= 0 (never written)."""
        self.files.load()
        files = self.files.files
        if not files:
            return
        # only the last file can be partially written; earlier ones are full by construction
        for mf in files[:-1]:
            mf.wrote_pos = mf.flushed_pos = mf.file_size
        last = files[-1]
        end = 0
        mm = last.mm
        while end < last.file_size:
            phys, size, _tags = UNIT.unpack_from(mm, end)
            if size <= 0 or phys < 0:
                break
            end += UNIT_SIZE
        last.wrote_pos = last.flushed_pos = end
        if end == 0 and len(files) > 1:
            prev = files[-2]
            last_unit_at = prev.file_size - UNIT_SIZE
        elif end > 0:
            prev, last_unit_at = last, end - UNIT_SIZE
        else:
            prev = None
        if prev is not None:
            phys, size, _ = UNIT.unpack_from(prev.mm, last_unit_at)
            if size != BLANK_SIZE:
                self.max_phys_end = phys + size
        self.min_logic_offset = files[0].file_from_offset
        self._skip_blank_head()

    def _skip_blank_head(self) -> None:
        """min offset = first unit that is not a gap filler."""
        mf = self.files.files[0] if self.files.files else None
        if mf is None:
            return
        pos = self.min_logic_offset - mf.file_from_offset
        while 0 <= pos < mf.wrote_pos:
            if UNIT.unpack_from(mf.mm, pos)[1] != BLANK_SIZE:
                break
            pos += UNIT_SIZE
        self.min_logic_offset = mf.file_from_offset + pos

    # ---- offsets --------------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """Next logical offset to be written (number of units)."""
        return self.files.max_offset // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT_SIZE

    # ---- write ----------------------------------------------------------------------------------
    def put_units(self, logic_offset: int, units: BytesLike, max_phys_end: int) -> None:
        """Write `units` (bytes, a multiple of 20) starting at logical offset `logic_offset`.

        If the queue is empty and `logic_offset` > 0 the gap is filled with blank units in that file.
        Raises OSError if a file cannot be created.
        """
        byte_off = logic_offset * UNIT_SIZE
        expected = self.files.max_offset
        if not self.files.files:
            self.min_logic_offset = byte_off
        elif byte_off != expected:
            if byte_off < expected:
                log.warning("consume_queue.rewrite_ignored", topic=self.topic, queue_id=self.queue_id,
                            offset=logic_offset, max_offset=expected // UNIT_SIZE)
                return
            log.warning("consume_queue.gap", topic=self.topic, queue_id=self.queue_id,
                        offset=logic_offset, max_offset=expected // UNIT_SIZE)
        view = memoryview(units)
        i = 0
        total = len(view)
        while i < total:
            mf = self.files.last_writable(byte_off)
            fill_to = byte_off - mf.file_from_offset
            if fill_to > mf.wrote_pos:  # blank units for the gap
                mf.write_at(mf.wrote_pos, BLANK_UNIT * ((fill_to - mf.wrote_pos) // UNIT_SIZE))
                mf.wrote_pos = fill_to
            n = min(total - i, mf.file_size - mf.wrote_pos)
            mf.append(view[i:i + n])
            i += n
            byte_off += n
        self.max_phys_end = max_phys_end

    def takes_unit_at(self, logic_offset: int) -> bool:
        """Does a unit at `logic_offset` go right at the end of the last file, which has room for it (then
        `ensure_room` has nothing to do and `put_unit` writes it in place)?"""
        files = self.files.files
        if not files:
            return False
        mf = files[-1]
        pos = mf.wrote_pos
        return pos < mf.file_size and mf.file_from_offset + pos == logic_offset * UNIT_SIZE

    def put_unit(self, logic_offset: int, unit: BytesLike, max_phys_end: int) -> None:
        """`put_units` of ONE unit (its reference): when it goes right at the end of the last file and that
        file has room (`takes_unit_at`), one write here; anything else (no file, a gap, a rewrite, a full
        file) through `put_units`."""
        files = self.files.files
        if files:
            mf = files[-1]
            pos = mf.wrote_pos
            if pos < mf.file_size and mf.file_from_offset + pos == logic_offset * UNIT_SIZE:
                mf.mm[pos:pos + UNIT_SIZE] = unit
                mf.wrote_pos = pos + UNIT_SIZE
                self.max_phys_end = max_phys_end
                return
        self.put_units(logic_offset, unit, max_phys_end)

    def ensure_room(self, logic_offset: int, count: int) -> None:
        """Reserve now the file that `count` units from `logic_offset` will need, so `put_units` after
        the CommitLog append cannot fail for want of space. Raises OSError (ENOSPC)."""
        self.files.ensure_room(count * UNIT_SIZE, logic_offset * UNIT_SIZE)

    # ---- read -----------------------------------------------------------------------------------
    def read_units(self, logic_offset: int, max_units: int) -> memoryview | None:
        """Up to `max_units` units from `logic_offset`, never crossing a file end (callers loop).
        None if `logic_offset` is outside [min, max)."""
        byte_off = logic_offset * UNIT_SIZE
        if byte_off < self.min_logic_offset or byte_off >= self.files.max_offset:
            return None
        mf = self.files.find(byte_off)
        if mf is None:
            return None
        pos = byte_off - mf.file_from_offset
        end = min(mf.wrote_pos, pos + max_units * UNIT_SIZE)
        return mf.slice(pos, end - pos)

    def unit(self, logic_offset: int) -> tuple[int, int, int] | None:
        mv = self.read_units(logic_offset, 1)
        if mv is None or len(mv) < UNIT_SIZE:
            return None
        return UNIT.unpack_from(mv, 0)

    def file_end_offset(self, logic_offset: int) -> int:
        """First logical offset of the file after the one that holds `logic_offset`."""
        byte_off = logic_offset * UNIT_SIZE
        mf = self.files.find(byte_off)
        if mf is not None:  # files keep the size they were made with (the setting may have changed)
            return (mf.file_from_offset + mf.file_size) // UNIT_SIZE
        return (byte_off - byte_off % self.file_size + self.file_size) // UNIT_SIZE

    # ---- maintenance ----------------------------------------------------------------------------
    def truncate_past(self, commitlog_max: int) -> int:
        """Remove units whose record ends past `commitlog_max`; returns the number of units removed."""
        removed = 0
        while self.files.files:
            last = self.files.files[-1]
            if last.wrote_pos == 0:
                if len(self.files.files) == 1:
                    break
                self.files.files.pop().destroy()
                continue
            phys, size, _ = UNIT.unpack_from(last.mm, last.wrote_pos - UNIT_SIZE)
            if size != BLANK_SIZE and phys + size <= commitlog_max:
                self.max_phys_end = phys + size
                break
            last.mm[last.wrote_pos - UNIT_SIZE:last.wrote_pos] = bytes(UNIT_SIZE)
            last.wrote_pos -= UNIT_SIZE
            last.flushed_pos = min(last.flushed_pos, last.wrote_pos)
            removed += 1
        if self.files.max_offset < self.min_logic_offset:
            self.min_logic_offset = self.files.max_offset
        if removed and self.files.max_offset <= self.min_logic_offset:
            self.max_phys_end = 0
        return removed

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Advance the min offset past units whose data was deleted; delete files wholly below it."""
        files = self.files.files
        while len(files) > 1 and files[0].is_full:
            # the last unit of the first file below the CommitLog min: the whole file is dead
            if UNIT.unpack_from(files[0].mm, files[0].file_size - UNIT_SIZE)[0] >= commitlog_min:
                break
            self.files.delete_first(1)
            self.min_logic_offset = max(self.min_logic_offset, files[0].file_from_offset)
        if not files:
            return
        mf = files[0]
        pos = max(self.min_logic_offset - mf.file_from_offset, 0)
        while pos < mf.wrote_pos:
            phys, size, _ = UNIT.unpack_from(mf.mm, pos)
            if size != BLANK_SIZE and phys >= commitlog_min:
                break
            pos += UNIT_SIZE
        self.min_logic_offset = mf.file_from_offset + pos

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()
