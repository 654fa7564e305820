"""IndexFile: one memory-mapped hash index file under `<store>/index/` (RocketMQ's IndexFile).

Layout (little-endian, fixed size `HEADER + 4 * hashSlotNum + 24 * indexNum` bytes):

    header (40 bytes)   beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 | endPhyOffset i64 |
                        hashSlotCount i32 | indexCount i32
    hash slots          hashSlotNum x u32: the number of the newest index entry whose key hashes to
                        the slot (0 = none)
    index entries       indexNum x 24 bytes: keyHash u32 | phyOffset i64 | timeDiff i32 | prevIndex u32 |
                        size i32

Entries are numbered from 1 (entry n lives at `entries_base + 24 * (n - 1)`); `prevIndex` is the
number of the previous (older) entry of the same slot, 0 ending the chain, so a slot's chain is walked
newest first. `timeDiff` is the entry's store time in seconds since `beginTimestamp` (the first entry's
store time, ms); `endTimestamp`/`endPhyOffset` are the last entry's. Differences from RocketMQ's file:
little-endian, a 24-byte entry that also holds the record size, `hashSlotCount` is the file's number of
slots (RocketMQ counts the used ones; ours keeps a file readable when maxHashSlotNum changes) and
`indexCount` is the number of entries (RocketMQ's starts at 1). The index capacity follows from the
file size.

Disk: the file is sparse; the header and slot pages are allocated (posix_fallocate) at creation and
the entry region ahead of the write position in ALLOC_CHUNK steps, so a full disk shows up as ENOSPC
there, never as SIGBUS on a mapped write. Memory: entry pages below the flushed count are dropped from
this process after each flush (madvise DONTNEED, like mapped_file); a file no longer written (rotated)
is dropped entirely. Resident: the active file's slot pages (4 x hashSlotNum bytes at most) and the
entry pages written since the last flush.
"""

from __future__ import annotations

import calendar
import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog

from storage.mapped_file import DONTNEED, allocate_blocks, release_mapping, unlink_quietly

if TYPE_CHECKING:
    import numpy as np

log = structlog.get_logger(__name__)

HEADER = struct.Struct("<qqqqii")
HEADER_SIZE = 40
ENTRY = struct.Struct("<IqiIi")  # keyHash, phyOffset, timeDiff, prevIndex, size
ENTRY_SIZE = 24
ALLOC_CHUNK = 1 << 20
NAME_DIGITS = 17  # yyyyMMddHHmmssSSS (UTC)
PAGE = mmap.PAGESIZE

if sys.byteorder != "little":  # slots are a memoryview cast('I') (host order) of a little-endian file
    raise ImportError("storage.index_file needs a little-endian host")


def file_name(ms: int) -> str:
    """yyyyMMddHHmmssSSS of epoch `ms` in UTC (RocketMQ names index files by creation time)."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(ms // 1000)) + f"{ms % 1000:03d}"


def name_ms(name: str) -> int:
    return calendar.timegm(time.strptime(name[:14], "%Y%m%d%H%M%S")) * 1000 + int(name[14:17])


def is_index_file_name(name: str) -> bool:
    return len(name) == NAME_DIGITS and name.isdigit()


class IndexFile:
    __slots__ = ("path", "fd", "mm", "slots", "slot_num", "capacity", "entries_base", "count", "begin_ts",
                 "end_ts", "begin_phys", "end_phys", "allocated", "flushed_count", "dropped_pos", "lock")

    def __init__(self, path: str, fd: int, mm: mmap.mmap, slot_num: int, capacity: int) -> None:
        self.path = path
        self.fd = fd
        self.mm = mm
        self.slot_num = slot_num
        self.capacity = capacity
        self.entries_base = HEADER_SIZE + 4 * slot_num
        self.slots = memoryview(mm)[HEADER_SIZE:self.entries_base].cast("I")
        self.count = 0
        self.begin_ts = self.end_ts = 0
        self.begin_phys = self.end_phys = 0
        self.allocated = 0  # entries whose bytes are allocated on disk
        self.flushed_count = 0
        self.dropped_pos = self._first_entry_page()
        self.lock = threading.Lock()  # fd use by the flush thread vs close/destroy on the loop thread

    # ---- create / open --------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str, slot_num: int, index_num: int, begin_ts: int, begin_phys: int) -> IndexFile:
        size = HEADER_SIZE + 4 * slot_num + ENTRY_SIZE * index_num
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            allocate_blocks(fd, 0, HEADER_SIZE + 4 * slot_num)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        f = cls(path, fd, mm, slot_num, index_num)
        f.begin_ts = f.end_ts = begin_ts
        f.begin_phys = f.end_phys = begin_phys
        f.write_header()
        return f

    @classmethod
    def open(cls, path: str) -> IndexFile | None:
        """Open an existing file; None (file left alone) if its header is not a valid geometry."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                os.close(fd)
                return None
            begin_ts, end_ts, begin_phys, end_phys, slot_num, count = HEADER.unpack(head)
            capacity = (size - HEADER_SIZE - 4 * slot_num) // ENTRY_SIZE if slot_num > 0 else 0
            if slot_num <= 0 or capacity <= 0 or not 0 <= count <= capacity:
                os.close(fd)
                return None
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        f = cls(path, fd, mm, slot_num, capacity)
        f.begin_ts, f.end_ts, f.begin_phys, f.end_phys = begin_ts, end_ts, begin_phys, end_phys
        f.count = f.allocated = f.flushed_count = count
        return f

    # ---- writes (loop thread) -------------------------------------------------------------------
    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys, self.end_phys,
                         self.slot_num, self.count)

    def allocate_more(self) -> int:
        """Allocate the next ALLOC_CHUNK of the entry region; returns the entries now allocated.
        Raises OSError (ENOSPC) when the disk is full."""
        start = self.entries_base + ENTRY_SIZE * self.allocated
        end = min(start + ALLOC_CHUNK, self.entries_base + ENTRY_SIZE * self.capacity)
        allocate_blocks(self.fd, start, end - start)
        self.allocated = (end - self.entries_base) // ENTRY_SIZE
        return self.allocated

    def commit(self, buf: bytes | bytearray, count: int, end_phys: int, end_ts: int) -> None:
        """Entries `buf` (packed, numbered from self.count + 1 to `count`) into the mapping, header after."""
        pos = self.entries_base + ENTRY_SIZE * self.count
        self.mm[pos:pos + len(buf)] = buf
        self.count = count
        self.end_phys = end_phys
        self.end_ts = end_ts
        HEADER.pack_into(self.mm, 0, self.begin_ts, end_ts, self.begin_phys, end_phys, self.slot_num, count)

    # ---- reads ----------------------------------------------------------------------------------
    def entry(self, n: int) -> tuple[int, int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex, size) of entry number n (1-based)."""
        return ENTRY.unpack_from(self.mm, self.entries_base + ENTRY_SIZE * (n - 1))

    def chain(self, key_hash: int) -> Iterator[tuple[int, int, int]]:
        """(phyOffset, size, timeDiff) of the entries with `key_hash` in its slot's chain, newest first."""
        count = self.count
        n = self.slots[key_hash % self.slot_num]
        unpack, mm, base = ENTRY.unpack_from, self.mm, self.entries_base - ENTRY_SIZE
        while 0 < n <= count:
            h, phys, tdiff, prev, size = unpack(mm, base + ENTRY_SIZE * n)
            if h == key_hash:
                yield phys, size, tdiff
            if prev >= n:  # chains only point backwards; anything else is damage
                return
            n = prev

    # ---- flush (any thread) ---------------------------------------------------------------------
    def sync(self, count: int, drop_all: bool, sweep: bool) -> None:
        """fdatasync, then drop entry pages below `count` (all pages if `drop_all`) from this process;
        `sweep` re-drops from the first entry page (pages faulted back in by queries)."""
        with self.lock:
            if self.fd < 0:
                return
            os.fdatasync(self.fd)
            # a plan taken before a cut (cut_and_rebuild) names entries that are gone
            self.flushed_count = max(self.flushed_count, min(count, self.count))
            if DONTNEED is None:
                return
            if drop_all:
                lo, hi = 0, len(self.mm)
            else:
                hi = self.entries_base + ENTRY_SIZE * count
                hi -= hi % PAGE
                lo = self._first_entry_page() if sweep else self.dropped_pos
            if hi > lo:
                try:
                    self.mm.madvise(DONTNEED, lo, hi - lo)
                except (ValueError, OSError):
                    return
                self.dropped_pos = max(self.dropped_pos, hi)

    def _first_entry_page(self) -> int:
        return -(-self.entries_base // PAGE) * PAGE

    # ---- recovery -------------------------------------------------------------------------------
    def valid_prefix(self, commitlog_max: int) -> int:
        """How many leading entries are sound: size > 0, phyOffset not below beginPhyOffset nor the
        previous entry's, the record below `commitlog_max`, prevIndex pointing backwards."""
        import numpy as np

        n = self.count
        if n == 0:
            return 0
        arr = np.frombuffer(self.mm, dtype=_entry_dtype(), count=n, offset=self.entries_base)
        phys = arr["phys"]
        bad = (arr["size"] <= 0) | (phys + arr["size"] > commitlog_max) | (phys < self.begin_phys)
        bad |= arr["prev"] >= np.arange(1, n + 1, dtype=np.uint32)
        bad[1:] |= phys[1:] < phys[:-1]
        return int(np.argmax(bad)) if bad.any() else n

    def cut_and_rebuild(self, keep: int) -> None:
        """Keep the first `keep` entries and rebuild every hash slot and prevIndex from them, so no
        slot or chain can point at a cut (or never completed) entry. Used after a crash, and when a
        replica's CommitLog is cut back (under the lock: the flush thread may be syncing this file)."""
        with self.lock:
            self._cut_and_rebuild(keep)

    def _cut_and_rebuild(self, keep: int) -> None:
        import numpy as np

        slots = np.frombuffer(self.mm, dtype="<u4", count=self.slot_num, offset=HEADER_SIZE)
        slots[:] = 0
        if keep:
            arr = np.frombuffer(self.mm, dtype=_entry_dtype(), count=keep, offset=self.entries_base)
            slot = arr["hash"] % np.uint32(self.slot_num)
            order = np.argsort(slot, kind="stable")  # by slot, entry order kept within a slot
            ss = slot[order]
            nums = (order + 1).astype(np.uint32)
            same = ss[1:] == ss[:-1]
            prev_sorted = np.zeros(keep, dtype=np.uint32)
            prev_sorted[1:][same] = nums[:-1][same]
            prev = np.empty(keep, dtype=np.uint32)
            prev[order] = prev_sorted
            arr["prev"] = prev
            last = np.append(~same, True)
            slots[ss[last]] = nums[last]
            del arr, prev, order
        del slots
        self.count = self.flushed_count = self.allocated = keep
        if keep:
            _h, self.end_phys, tdiff, _p, _s = self.entry(keep)
            self.end_ts = self.begin_ts + tdiff * 1000
        else:
            self.end_phys, self.end_ts = self.begin_phys, self.begin_ts
        self.write_header()
        os.fdatasync(self.fd)

    def last_entry(self) -> tuple[int, int, int, int, int] | None:
        return self.entry(self.count) if self.count else None

    # ---- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        with self.lock:
            if self.fd < 0:
                return
            release_mapping(self.slots, self.mm, self.fd, self.path, "index_file.close_busy")
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        unlink_quietly(self.path)


_DTYPE: np.dtype[np.void] | None = None


def _entry_dtype() -> np.dtype[np.void]:
    global _DTYPE
    if _DTYPE is None:
        import numpy as np

        _DTYPE = np.dtype([("hash", "<u4"), ("phys", "<i8"), ("tdiff", "<i4"), ("prev", "<u4"), ("size", "<i4")])
    return _DTYPE
