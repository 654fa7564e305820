"""scheduleProgress, the file: how far this node's scheduled delivery got, exact across kill -9 (no message
delivered twice). (scheduler.progress.SchedulerProgress is the record a master sends its slaves.)

`<store>/config/scheduleProgress`, mmapped, written with every delivery put (a killed process's writes
to a shared mapping stay in the page cache, exactly like the CommitLog's). Big-endian:

    0   magic b"DMQP" | version i32 (1) | level count i32 | reserved i32
    16  timer (TimerRecord, 48 B): read_ms | done_due | done_pos | last_pos | phys | end   (i64 each)
    64  level L at 64 + 32 (L - 1) (LevelRecord): offset | phys | end | reserved            (i64 each)

Delay level L: every SCHEDULE_TOPIC_XXXX queue L-1 record below `offset` is in the CommitLog as its
delivery (or was dropped). Timer: the read clock is at slot `read_ms`; of that slot's units whose
timerlog position is <= `last_pos` (its chain when loaded) every one ordered at or before
(`done_due`, `done_pos`) (delivery order: exact deliver ms, then timerlog position) was put.

The put in flight: `phys` is the CommitLog end recorded just before a delivery put (-1 when none is in
flight). A put and its progress write happen in the same loop step, with nothing else writing the
CommitLog in between, so a process killed between them leaves exactly the first k deliveries of that put
after `phys`; recovery counts them (`count_records_after`) and moves past them. `end` is the CommitLog
end after the last progress write (-1: never written): recovery trusts a record only when the CommitLog
still reaches `end` (a power loss with ASYNC_FLUSH can cut the CommitLog below what the progress saw;
then the level falls back to delayOffset.json and the timer to its timercheck, as before).

The records are small named tuples of ints, `snapshot()` / `restore()` give the whole state as bytes
(for a slave to replicate).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from scheduler.store_port import StorePort

FILE_NAME = "scheduleProgress"
MAGIC = b"DMQP"
VERSION = 1
_HEAD = struct.Struct(">4sii4x")
_TIMER = struct.Struct(">qqqqqq")
_LEVEL = struct.Struct(">qqq8x")
_I64 = struct.Struct(">q")
TIMER_POS = 16
LEVELS_POS = 64
NO_PHYS = -1


class LevelRecord(NamedTuple):
    offset: int  # next schedule-queue offset not yet put into its real topic
    phys: int    # CommitLog end before the put in flight, or -1
    end: int     # CommitLog end after the last progress write, or -1 (never written)


class TimerRecord(NamedTuple):
    read_ms: int   # the slot being delivered (the timer's read clock)
    done_due: int  # last unit put, by (exact deliver ms, timerlog position); -1: none of the slot yet
    done_pos: int
    last_pos: int  # the slot's chain end when it was loaded: later units were not seen then
    phys: int      # CommitLog end before the put in flight, or -1
    end: int       # CommitLog end after the last progress write, or -1 (never written)


def _size(levels: int) -> int:
    return max(4096, LEVELS_POS + 32 * levels)


class ProgressFile:
    """The mmapped progress file. `path=None`: kept in memory only (a store without a config dir)."""

    def __init__(self, config_dir: str | None, levels: int) -> None:
        self.levels = levels
        self.path = os.path.join(config_dir, FILE_NAME) if config_dir else None
        self.existed = False
        size = _size(levels)
        self.mm: bytearray | mmap.mmap  # a file mapping; in memory only without a config dir
        self.fd = -1
        if not config_dir:
            self.mm = bytearray(size)
            self._init()
            return
        os.makedirs(config_dir, exist_ok=True)
        fd = os.open(os.path.join(config_dir, FILE_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            have = os.fstat(fd).st_size
            if have < size:
                os.posix_fallocate(fd, 0, size)  # blocks reserved: a full disk cannot SIGBUS the writes
            self.mm = mmap.mmap(fd, max(have, size))
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd  # kept for fdatasync (scheduler.durable): msync would hold the GIL
        magic, version, had = _HEAD.unpack_from(self.mm, 0)
        self.existed = magic == MAGIC and version == VERSION
        if not self.existed:
            self._init()
        elif had < levels:  # levels added since: never written
            _HEAD.pack_into(self.mm, 0, MAGIC, VERSION, levels)
            for lv in range(had + 1, levels + 1):
                _LEVEL.pack_into(self.mm, LEVELS_POS + 32 * (lv - 1), 0, NO_PHYS, -1)
        else:
            self.levels = had  # the timer opens the file without knowing the levels

    def _init(self) -> None:
        _HEAD.pack_into(self.mm, 0, MAGIC, VERSION, self.levels)
        _TIMER.pack_into(self.mm, TIMER_POS, 0, -1, -1, -1, NO_PHYS, -1)
        for lv in range(1, self.levels + 1):
            _LEVEL.pack_into(self.mm, LEVELS_POS + 32 * (lv - 1), 0, NO_PHYS, -1)

    # ---- delay levels ---------------------------------------------------------------------
    def level(self, level: int) -> LevelRecord:
        return LevelRecord(*_LEVEL.unpack_from(self.mm, LEVELS_POS + 32 * (level - 1)))

    def level_writer(self, level: int) -> tuple[Callable[[int], None], Callable[[int, int], None]]:
        """(begin(phys), commit(offset, end)) for one level: bound pack_into calls for the hot path."""
        pos = LEVELS_POS + 32 * (level - 1)
        mm, pack_phys, pack = self.mm, _I64.pack_into, _LEVEL.pack_into

        def begin(phys: int) -> None:
            pack_phys(mm, pos + 8, phys)

        def commit(offset: int, end: int) -> None:
            pack(mm, pos, offset, NO_PHYS, end)

        return begin, commit

    def set_level(self, level: int, offset: int, end: int) -> None:
        _LEVEL.pack_into(self.mm, LEVELS_POS + 32 * (level - 1), offset, NO_PHYS, end)

    # ---- timer ----------------------------------------------------------------------------
    def timer(self) -> TimerRecord:
        return TimerRecord(*_TIMER.unpack_from(self.mm, TIMER_POS))

    def timer_begin(self, phys: int) -> None:
        _I64.pack_into(self.mm, TIMER_POS + 32, phys)

    def timer_commit(self, read_ms: int, done_due: int, done_pos: int, last_pos: int, end: int) -> None:
        _TIMER.pack_into(self.mm, TIMER_POS, read_ms, done_due, done_pos, last_pos, NO_PHYS, end)

    # ---- whole state ----------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The whole progress state (header, timer, levels) as bytes."""
        return bytes(self.mm[:LEVELS_POS + 32 * self.levels])

    def restore(self, data: bytes) -> None:
        magic, version, n = _HEAD.unpack_from(data, 0)
        if magic != MAGIC or version != VERSION or len(data) < LEVELS_POS + 32 * n:
            raise ValueError("not a scheduleProgress snapshot")
        k = LEVELS_POS + 32 * min(n, self.levels)
        self.mm[TIMER_POS:k] = data[TIMER_POS:k]

    def flush(self) -> None:
        """Durable (fdatasync, which releases the GIL; safe to call from an executor thread)."""
        if self.fd >= 0:
            os.fdatasync(self.fd)

    def sync_fds(self) -> list[int]:
        """Descriptors for a flush in another thread (scheduler.durable.sync_and_close); none in memory."""
        return [os.dup(self.fd)] if self.fd >= 0 else []

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.fdatasync(self.fd)
                if isinstance(self.mm, mmap.mmap):
                    self.mm.close()
            finally:
                os.close(self.fd)
                self.fd = -1


def count_records_after(store: StorePort, phys: int, match: Callable[[memoryview], bool]) -> int:
    """How many CommitLog records from `phys` to its end satisfy `match`."""
    return sum(1 for _p, rec in store.records_from(phys) if match(rec)) if phys >= 0 else 0
