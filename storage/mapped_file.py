"""Fixed-size memory-mapped segment files and the ordered queue of them (CommitLog and ConsumeQueue).

A segment is named by its start offset in the queue's address space, 20-digit zero-padded decimal.
Each segment tracks `wrote_pos` (bytes appended) and `flushed_pos` (bytes known durable). Flushing
uses `os.fdatasync` on the file descriptor: on Linux a shared mapping's dirty pages are the file's page
cache, so this is equivalent to msync(MS_SYNC) and, unlike `mmap.flush`, releases the GIL (it runs in
an executor thread for SYNC_FLUSH group commit).

Touched pages of a shared file mapping count in the process's RSS until unmapped. After a flush the
pages below the flushed position (page-aligned, never the write tail) are dropped from this process
with madvise(MADV_DONTNEED): the data stays in the page cache and the file, a later read faults it
back in. Flushes drop only what they just made durable (`dropped_pos` onwards); every SWEEP_INTERVAL_S
a flush also re-drops whole flushed prefixes, so pages faulted back by reads (pulls, due deliveries)
do not accumulate. RSS therefore stays bounded however many messages the store holds (issue 4).
"""

from __future__ import annotations

import bisect
import errno
import mmap
import os
import time
from concurrent.futures import Executor

import structlog

from codec.buffers import BytesLike

# `<name>.spare` (ensure_room) and `<name>.ahead.spare` (allocate_ahead): `load` removes both kinds
from storage.allocate import AHEAD_SUFFIX as AHEAD_SUFFIX
from storage.allocate import SPARE_SUFFIX as SPARE_SUFFIX
from storage.allocate import AllocateAhead

log = structlog.get_logger(__name__)

NAME_DIGITS = 20
PAGE = mmap.PAGESIZE
SWEEP_INTERVAL_S = 5.0
# madvise(MADV_DONTNEED) where the platform has it, else None: the one place that asks (the CommitLog and
# ConsumeQueue segments, the IndexFiles and the timer wheel's files all drop pages with it)
DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def segment_name(start_offset: int) -> str:
    return f"{start_offset:0{NAME_DIGITS}d}"


_NO_FALLOCATE = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def allocate_blocks(fd: int, offset: int, length: int) -> bool:
    """posix_fallocate of [offset, offset + length): a full disk is OSError(ENOSPC) here, never a SIGBUS
    on a later store through a mapping. False when the file system cannot allocate (nothing done)."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in _NO_FALLOCATE:
            raise
        return False
    return True


def reserve_blocks(fd: int, size: int) -> None:
    """Allocate a file's first `size` bytes before it is written through a mapping (allocate_blocks);
    without fallocate on this file system, at least the length (never shortened). Already allocated
    files cost a no-op call."""
    if not allocate_blocks(fd, 0, size) and os.fstat(fd).st_size < size:
        os.ftruncate(fd, size)


def mount_point(path: str) -> str:
    """The mount point of the file system holding `path` (or its nearest existing parent)."""
    p = os.path.realpath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def space_on(path: str) -> str:
    """The file system holding `path` and its free space, for a "disk full" remark or log line:
    `file system /mnt/store: 1.5 MiB free of 64.0 MiB`."""
    where = mount_point(path)
    try:
        st = os.statvfs(where)
    except OSError as e:
        return f"file system {where}: free space unknown ({e.strerror})"
    mib = 1 << 20
    return (f"file system {where}: {st.f_bavail * st.f_frsize / mib:.1f} MiB free of "
            f"{st.f_blocks * st.f_frsize / mib:.1f} MiB")


class MappedFile:
    __slots__ = ("path", "file_from_offset", "file_size", "fd", "mm", "view", "wrote_pos", "flushed_pos",
                 "dropped_pos")

    def __init__(self, path: str, file_from_offset: int, file_size: int, create: bool = False) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            on_disk = 0 if create else os.fstat(self.fd).st_size
            if on_disk:
                # an existing segment keeps the size it has on disk, whatever the configured size now
                # is: a smaller setting must never cut records off (the setting applies to new segments)
                file_size = self.file_size = on_disk
            else:  # new, or created by a run that died before reserving it
                reserve_blocks(self.fd, file_size)
            self.mm = mmap.mmap(self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            if create:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise
        self.view = memoryview(self.mm)
        self.wrote_pos = 0
        self.flushed_pos = 0
        self.dropped_pos = 0  # pages below it were advised away (reads may have faulted some back)

    # ---- positions ------------------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_pos

    @property
    def is_full(self) -> bool:
        return self.wrote_pos >= self.file_size

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.wrote_pos

    # ---- writes ---------------------------------------------------------------------------------
    def write_at(self, pos: int, data: BytesLike) -> None:
        n = len(data)
        self.mm[pos:pos + n] = data

    def append(self, data: BytesLike) -> int:
        """Copy `data` at the write position; returns the file position it was written at."""
        pos = self.wrote_pos
        n = len(data)
        self.mm[pos:pos + n] = data
        self.wrote_pos = pos + n
        return pos

    def flush(self) -> int:
        """Make everything up to wrote_pos durable; returns the new flushed position."""
        target = self.wrote_pos
        if target > self.flushed_pos:
            os.fdatasync(self.fd)
            self.flushed_pos = target
        return self.flushed_pos

    def drop_pages(self, upto: int, full: bool = False) -> None:
        """Unmap the pages below `upto` (rounded down to a page) from this process; `full` starts at 0
        instead of `dropped_pos`. Call only for bytes already flushed. Safe from a flush thread."""
        hi = upto - upto % PAGE
        lo = 0 if full else self.dropped_pos
        if hi <= lo or DONTNEED is None:
            return
        try:
            self.mm.madvise(DONTNEED, lo, hi - lo)
        except (ValueError, OSError):  # closed meanwhile (retention, shutdown)
            return
        if hi > self.dropped_pos:
            self.dropped_pos = hi

    def zero_from(self, pos: int) -> int:
        """Erase bytes from `pos` to the end of the file and move the positions back to `pos`.
        Returns the number of non-zero bytes that were there (from `pos` to the last non-zero byte)."""
        end = self.file_size
        step = 1 << 20
        dirty_end = pos
        p = pos
        while p < end:
            n = min(step, end - p)
            chunk = self.mm[p:p + n]
            if chunk.count(0) != n:
                dirty_end = p + len(chunk.rstrip(b"\0"))
                self.mm[p:p + n] = bytes(n)
            p += n
        self.wrote_pos = pos
        self.flushed_pos = min(self.flushed_pos, pos)
        self.dropped_pos = min(self.dropped_pos, pos - pos % PAGE)
        os.fdatasync(self.fd)
        return dirty_end - pos

    # ---- reads ----------------------------------------------------------------------------------
    def slice(self, pos: int, size: int) -> memoryview:
        return self.view[pos:pos + size]

    # ---- lifecycle ------------------------------------------------------------------------------
    def last_modified(self) -> float:
        return os.fstat(self.fd).st_mtime

    def close(self) -> None:
        if self.fd < 0:
            return
        release_mapping(self.view, self.mm, self.fd, self.path, "mapped_file.close_busy")
        self.fd = -1

    def destroy(self) -> None:
        self.close()
        unlink_quietly(self.path)


def release_mapping(view: memoryview, mm: mmap.mmap, fd: int, path: str, busy_event: str) -> None:
    """Release `view`, close `mm` and `fd`. If a caller still holds a slice (e.g. a pull response in
    flight) the mapping stays until that slice goes; that is logged at debug as `busy_event`."""
    view.release()
    try:
        mm.close()
    except BufferError:
        log.debug(busy_event, path=path)
    os.close(fd)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _start(mf: MappedFile) -> int:
    return mf.file_from_offset


class MappedFileQueue:
    """The ordered segments of one log directory; offsets are global (segment start + position)."""

    def __init__(self, directory: str, file_size: int, pool: Executor | None = None) -> None:
        """`pool`: where `allocate_ahead` has the next segment made (None: every segment inline)."""
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.spare: MappedFile | None = None  # the next segment, reserved ahead (`ensure_room`)
        # the next segment, being made on a pool thread (`allocate_ahead`)
        self.ahead: AllocateAhead[MappedFile] = AllocateAhead(pool, MappedFile.destroy, directory)
        self._swept_at = time.monotonic()

    def load(self) -> None:
        """Open existing segments (positions start full; recovery sets the real write position)."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.endswith(SPARE_SUFFIX):  # reserved by a run that ended before it was needed
                unlink_quietly(os.path.join(self.directory, name))
        names = sorted(n for n in os.listdir(self.directory) if len(n) == NAME_DIGITS and n.isdigit())
        for name in names:
            path = os.path.join(self.directory, name)
            mf = MappedFile(path, int(name), self.file_size)
            if mf.file_size != self.file_size:
                log.info("mapped_file.size_kept", path=path, size=mf.file_size, configured=self.file_size)
            mf.wrote_pos = mf.flushed_pos = mf.file_size
            self.files.append(mf)

    # ---- access ---------------------------------------------------------------------------------
    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def create_file(self, start_offset: int) -> MappedFile:
        path = os.path.join(self.directory, segment_name(start_offset))
        self._take_ahead(start_offset)
        spare, self.spare = self.spare, None
        if spare is not None and spare.file_from_offset == start_offset:
            os.rename(spare.path, path)  # blocks already reserved; a rename needs none
            spare.path = path
            mf = spare
        else:
            if spare is not None:
                spare.destroy()
            os.makedirs(self.directory, exist_ok=True)
            mf = MappedFile(path, start_offset, self.file_size, create=True)
        self.files.append(mf)
        return mf

    def ensure_room(self, nbytes: int, start_if_empty: int = 0) -> None:
        """Make sure `nbytes` can be appended without creating a file then: when the active segment
        lacks the room, the next one is created and its blocks reserved now, under a temporary name
        (`<name>.spare`, invisible to `load`), and `create_file` renames it when it is needed. Raises
        OSError (ENOSPC on a full disk): the caller refuses the write before anything is stored."""
        last = self.last
        if last is not None:
            if last.file_size - last.wrote_pos >= nbytes:
                return
            start = last.file_from_offset + last.file_size
        else:
            start = start_if_empty - start_if_empty % self.file_size
        self._take_ahead(start)
        spare = self.spare
        if spare is not None:
            if spare.file_from_offset == start:
                return
            self.spare = None
            spare.destroy()
        os.makedirs(self.directory, exist_ok=True)
        self.spare = MappedFile(os.path.join(self.directory, segment_name(start) + SPARE_SUFFIX), start,
                                self.file_size, create=True)

    def allocate_ahead(self, start: int) -> None:
        """Have the segment at `start` made on the pool under `<name>.ahead.spare` (storage.allocate), so the
        put that rolls onto it only renames it. Does nothing when that segment is already asked for or
        reserved. One not ready when needed is created inline as before (`ahead.missed`); a failure there
        (a full disk) is left to the inline creation to report."""
        if self.spare is not None and self.spare.file_from_offset == start:
            return
        path = os.path.join(self.directory, segment_name(start) + AHEAD_SUFFIX)
        self.ahead.request(start, lambda: MappedFile(path, start, self.file_size, create=True))

    def _take_ahead(self, start: int) -> None:
        """The segment made ahead becomes the spare if it is the one at `start` and ready."""
        mf = self.ahead.take(start)
        if mf is not None:
            if self.spare is not None:
                self.spare.destroy()
            self.spare = mf

    def last_writable(self, start_if_empty: int = 0) -> MappedFile:
        """The active segment, creating the next one if there is none or the last one is full."""
        last = self.last
        if last is None:
            return self.create_file(start_if_empty - start_if_empty % self.file_size)
        if last.is_full:
            return self.create_file(last.file_from_offset + last.file_size)
        return last

    def find(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        idx = (offset - first) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + mf.file_size:
                return mf
        # segments of another size (the setting changed between runs) or gaps (manual deletion)
        i = bisect.bisect_right(files, offset, key=_start) - 1
        if i >= 0:
            mf = files[i]
            if offset < mf.file_from_offset + mf.file_size:
                return mf
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        last = self.last
        return last.end_offset if last is not None else 0

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_pos > 0:
                return mf.file_from_offset + mf.flushed_pos
        return self.min_offset

    def flush(self) -> int:
        """Flush every segment with unflushed bytes (in order); returns the flushed offset."""
        for mf in self.files:
            if mf.flushed_pos < mf.wrote_pos:
                mf.flush()
        return self.flushed_offset

    def drop_flushed_pages(self) -> None:
        """After a flush: drop newly flushed pages from RSS; every SWEEP_INTERVAL_S whole flushed
        prefixes (pages faulted back in by reads). See the module docstring."""
        now = time.monotonic()
        full = now - self._swept_at >= SWEEP_INTERVAL_S
        if full:
            self._swept_at = now
        for mf in list(self.files):
            if mf.flushed_pos >= PAGE and (full or mf.flushed_pos - mf.dropped_pos >= PAGE):
                mf.drop_pages(mf.flushed_pos, full)

    def truncate(self, offset: int) -> list[tuple[str, int, int]]:
        """Drop everything at or past `offset`: later segments are deleted, the segment holding
        `offset` is zeroed from there. Returns (file, from_pos, bytes_cut) for each cut."""
        cuts: list[tuple[str, int, int]] = []
        keep: list[MappedFile] = []
        for mf in self.files:
            start = mf.file_from_offset
            if start + mf.file_size <= offset:
                keep.append(mf)
            elif start <= offset:
                pos = offset - start
                cut = mf.zero_from(pos)
                if cut:
                    cuts.append((mf.path, pos, cut))
                keep.append(mf)
            else:
                cuts.append((mf.path, 0, mf.file_size))
                mf.destroy()
        self.files = keep
        return cuts

    def delete_first(self, n: int) -> list[str]:
        gone = []
        for mf in self.files[:n]:
            mf.destroy()
            gone.append(mf.path)
        del self.files[:n]
        return gone

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.ahead.close()  # waits for the pool thread: its file is gone before close returns
        if self.spare is not None:
            self.spare.destroy()
            self.spare = None
