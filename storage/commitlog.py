"""CommitLog: records appended back to back in fixed-size segments (message-format.md §6).

A record never spans two segments. When `len + 8 > remaining`, an END-OF-FILE blank
`[int32 remaining][int32 BLANK_MAGIC_CODE]` is written and the record goes to offset 0 of the next
segment. The stored bytes are exactly the pull/view wire format, so reads return memoryview slices of
the mapping that a response concatenates without copying.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from concurrent.futures import Executor

import structlog

from codec.buffers import BytesLike
from storage import _record as R
from storage.mapped_file import MappedFile, MappedFileQueue

log = structlog.get_logger(__name__)


class AppendError(Exception):
    """The active segment could not be created (ENOSPC, permissions...)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class CommitLog:
    def __init__(self, directory: str, file_size: int, allocator: Executor | None = None) -> None:
        """`allocator`: where the next segment is made ahead of need (MappedFileQueue.allocate_ahead),
        asked once the active one is half written; None makes every segment on the put that needs it."""
        self.directory = directory
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, allocator)
        self.allocator = allocator
        self._blank = bytearray(R.BLANK_LEN)
        self._error_logged_at = -1e9

    def load(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self.queue.load()

    # ---- append ---------------------------------------------------------------------------------
    def append_batch(self, records: list[bytearray], queue_offsets: list[int], store_ts: int) -> tuple[list[int], AppendError | None]:
        """Place, patch and copy `records` (bytearrays, encoded) in order.

        Each record gets QUEUEOFFSET/PHYSICALOFFSET/STORETIMESTAMP patched in place before its bytes are
        copied; consecutive records that land in the same segment are copied with one write. Returns the
        physical offsets of the records stored (a prefix of the batch) and the error that stopped the rest.
        """
        phys: list[int] = []
        mf = self._active()
        if isinstance(mf, AppendError):
            return phys, mf
        run: list[bytearray] = []
        run_start = mf.wrote_pos
        pos = run_start
        fsize = mf.file_size  # per segment: one made before a size change keeps its size
        for rec, qoff in zip(records, queue_offsets, strict=True):
            n = len(rec)
            if n + R.BLANK_LEN > fsize - pos:
                self._write_run(mf, run_start, run, pos)
                R.BLANK.pack_into(self._blank, 0, fsize - pos, R.BLANK_MAGIC_CODE)
                mf.write_at(pos, self._blank)
                mf.wrote_pos = fsize
                run = []
                mf = self._active()
                if isinstance(mf, AppendError):
                    return phys, mf
                run_start = pos = mf.wrote_pos
                fsize = mf.file_size
                if n + R.BLANK_LEN > fsize - pos:  # cannot fit even an empty segment: caller checks sizes
                    return phys, AppendError(ValueError(f"record of {n} bytes exceeds the segment size"))
            p = mf.file_from_offset + pos
            R.patch_append_fields(rec, 0, qoff, p, store_ts)
            run.append(rec)
            phys.append(p)
            pos += n
        self._write_run(mf, run_start, run, pos)
        return phys, None

    def reserve(self, nbytes: int) -> tuple[MappedFile, int] | AppendError | None:
        """(active segment, position) where a run of `nbytes` of records fits (the END-OF-FILE blank's
        room kept, as `append_batch` does per record); None when it does not fit (use `append_batch`,
        which rolls to the next segment). Nothing is written until `commit`."""
        files = self.queue.files
        if files:  # the usual case without `_active`'s calls: the last segment, not full, nothing to make ahead
            last = files[-1]
            pos, size = last.wrote_pos, last.file_size
            if pos < (size >> 1 if self.allocator is not None else size):
                return (last, pos) if nbytes + R.BLANK_LEN <= size - pos else None
        mf = self._active()
        if isinstance(mf, AppendError):
            return mf
        pos = mf.wrote_pos
        if nbytes + R.BLANK_LEN > mf.file_size - pos:
            return None
        return mf, pos

    @staticmethod
    def commit(mf: MappedFile, pos: int, run: BytesLike) -> None:
        """Copy a reserved run of records (already patched) with one write."""
        mf.write_at(pos, run)
        mf.wrote_pos = pos + len(run)

    @staticmethod
    def _write_run(mf: MappedFile, start: int, run: list[bytearray], end: int) -> None:
        if not run:
            return
        mf.write_at(start, run[0] if len(run) == 1 else b"".join(run))
        mf.wrote_pos = end

    def allocate_first(self) -> None:
        """After recovery: an empty CommitLog has its first segment made ahead (the first put renames it)."""
        if self.allocator is not None and self.queue.last is None:
            self.queue.allocate_ahead(0)

    def allocate_next(self, mf: MappedFile) -> None:
        """Once the active segment `mf` is half written, the one after it is asked for (a no-op after
        the first time). Called per put batch and per replicated run."""
        if mf.wrote_pos >= mf.file_size >> 1 and self.allocator is not None:
            self.queue.allocate_ahead(mf.file_from_offset + mf.file_size)

    def _active(self) -> MappedFile | AppendError:
        try:
            mf = self.queue.last_writable()
            self.allocate_next(mf)
            return mf
        except OSError as e:
            now = time.monotonic()
            if now - self._error_logged_at >= 10.0:  # callers retry (the schedulers every 100 ms)
                self._error_logged_at = now
                log.error("commitlog.create_segment_failed", directory=self.directory, error=str(e),
                          errno=e.errno)
            return AppendError(e)

    # ---- reads ----------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        files = self.queue.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def read(self, phys_offset: int, size: int) -> memoryview | None:
        """`size` bytes at `phys_offset`, inside one segment and below the write position; else None."""
        mf = self.queue.find(phys_offset)
        if mf is None:
            return None
        pos = phys_offset - mf.file_from_offset
        if size <= 0 or pos + size > mf.wrote_pos:
            return None
        return mf.slice(pos, size)

    def read_record(self, phys_offset: int, size: int | None = None) -> memoryview | None:
        """The whole record starting at `phys_offset` (None if there is no record there)."""
        mf = self.queue.find(phys_offset)
        if mf is None:
            return None
        pos = phys_offset - mf.file_from_offset
        if pos + 8 > mf.wrote_pos:
            return None
        total, magic = R.read_head(mf.mm, pos)
        if magic not in R.RECORD_MAGICS or total < R.MIN_RECORD or pos + total > mf.wrote_pos:
            return None
        if size is not None and size != total:
            return None
        return mf.slice(pos, total)

    def read_records(self, spans: Iterable[tuple[int, int]]) -> list[memoryview | None]:
        """`read_record(phys, size)` for each (phys, size), in one loop that keeps the current
        segment (a batch of ConsumeQueue units mostly points into one segment)."""
        out: list[memoryview | None] = []
        append = out.append
        head = R.read_head
        magics = R.RECORD_MAGICS
        min_rec = R.MIN_RECORD
        lo = hi = 0
        mf: MappedFile  # set on the first span: lo == hi == 0 contains no offset
        for phys, size in spans:
            if not lo <= phys < hi:
                found = self.queue.find(phys)
                if found is None:
                    append(None)
                    lo = hi = 0
                    continue
                mf = found
                lo = mf.file_from_offset
                hi = lo + mf.file_size
            pos = phys - lo
            end = pos + size
            if size < min_rec or end > mf.wrote_pos:
                append(None)
                continue
            total, magic = head(mf.mm, pos)
            append(mf.view[pos:end] if total == size and magic in magics else None)
        return out

    def store_ts_at(self, phys_offset: int) -> int | None:
        rec = self.read(phys_offset, R.MIN_RECORD)
        return None if rec is None else R.read_store_timestamp(rec)

    # ---- flush ----------------------------------------------------------------------------------
    def flush(self) -> int:
        return self.queue.flush()

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_offset

    def close(self) -> None:
        self.queue.close()
