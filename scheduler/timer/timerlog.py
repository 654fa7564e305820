"""timerlog: append-only mmapped segments of 52-byte units (scheduled-messages.md §4.4).

The unit and blank layouts are declared in codec.timer_layout (delaymq keeps each message's EXACT
deliver ms in the unit's reserved field, so a slot's messages are delivered each at its own millisecond).
Files are `<root>/timerlog/<20-digit start offset>`; when `52 + 16 > remaining` a 16-byte blank
`[i32 remaining][i64 0][i32 BLANK_MAGIC_CODE]` ends the file.

The next segment is made ahead of need on the store's allocate pool (`MessageStore.made_ahead`, RocketMQ's
AllocateMappedFileService) as `<name>.ahead.spare`, asked for once the active one is half written (and at
load for a missing first one), so the append that rolls over only renames it: reserving 100 MiB writes
every page on tmpfs. One not ready in time is made inline (`ahead.missed`); `load` removes leftovers.

Written pages are dropped from this process's mapping after each flush (madvise DONTNEED on a shared
file mapping only unmaps; the data stays in the page cache and the file), so RSS stays bounded no
matter how many timers are pending.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import structlog

from codec.timer_layout import (
    BLANK,
    BLANK_MAGIC_CODE,
    BLANK_SIZE,
    UNIT,
    UNIT_DTYPE,
    UNIT_SIZE,
    UnitArray,
    UnitTuple,
    is_magic_ok,
)
from scheduler.durable import sync_and_close
from scheduler.timer.timerlog_segment import Segment, segment_name, zero_tail
from storage.mapped_file import DONTNEED, reserve_blocks
from storage.store_types import AHEAD_SUFFIX, MadeAhead

log = structlog.get_logger(__name__)

_PAGE = mmap.PAGESIZE
_RUN_MIN, _RUN_MAX = 64, 65536  # units per block read while following a contiguous chain


class ChainStep(NamedTuple):
    """One read of a slot's chain (`TimerLog.walk_chain`)."""

    units: UnitArray  # in chain order (newest first)
    more: bool  # the chain goes on after these units
    bad: int | None  # the position of a unit whose size is not 52: the walk stopped there (not in `units`)


DIR_NAME = "timerlog"  # <storeRoot>/timerlog/
CHAIN_WALK_STEP = 20000  # units per read of a chain walk; a caller may yield to the loop between reads
MAKE_RETRY_S = 1.0  # after a segment could not be made (a full disk), room_for leaves retries to the pool


class TimerLog:
    def __init__(self, root: str, file_size: int, ahead: MadeAhead[Segment] | None = None) -> None:
        """`ahead`: where the next segment is made ahead of need (`MessageStore.made_ahead(...,
        Segment.destroy)`); None makes every segment on the append that needs it."""
        if file_size < UNIT_SIZE + BLANK_SIZE:
            raise ValueError("timerlog file size too small")
        self.dir = os.path.join(root, DIR_NAME)
        self.file_size = file_size
        self.segments: list[Segment] = []
        self.write_pos = 0  # absolute position of the next unit
        self.flushed_pos = 0
        self.ahead = ahead
        self.made_for_room = 0  # segments room_for made inline that nobody had asked the pool for
        self._make_retry_at = 0.0  # room_for: monotonic time before which no segment is made inline
        self._ahead_at = 1 << 62  # the write position past which `allocate_ahead` asks for a segment
        os.makedirs(self.dir, exist_ok=True)

    # ---- files -------------------------------------------------------------------------
    def load(self) -> None:
        for n in os.listdir(self.dir):
            if n.endswith(AHEAD_SUFFIX):  # made ahead by a run that was killed before it was needed
                os.unlink(os.path.join(self.dir, n))
        names = sorted(n for n in os.listdir(self.dir) if n.isdigit() and len(n) == 20)
        for n in names:
            self.segments.append(Segment(os.path.join(self.dir, n), int(n), self.file_size))
        if self.segments:
            self.write_pos = self.segments[-1].start + self.file_size  # refined by recover()

    def _new_segment(self, start: int) -> Segment:
        """The segment made ahead, renamed, if it is ready; else made here. Raises OSError (ENOSPC on a
        full disk) before anything was written: the caller retries."""
        path = os.path.join(self.dir, segment_name(start))
        seg = self.ahead.take(start) if self.ahead is not None else None
        if seg is None:
            seg = Segment(path, start, self.file_size, create=True)
        else:
            try:
                os.rename(seg.path, path)  # blocks already reserved: a rename needs none
            except BaseException:
                seg.destroy()
                raise
            seg.path = path
        self.segments.append(seg)
        return seg

    def allocate_ahead(self) -> None:
        """Ask for the segment the appends will need next: the one holding `write_pos` when it does not
        exist (a fresh timerlog, or the last segment full), else the one after it once `write_pos` is
        half way through. Called after recovery, then by `append` each time `write_pos` passes
        `_ahead_at`; without `ahead`, never again."""
        if self.ahead is None:
            self._ahead_at = 1 << 62
            return
        size = self.file_size
        pos = self.write_pos
        start = pos - pos % size
        if self._segment_for(start) is not None and pos - start >= size >> 1:
            start += size  # past half of the active segment: the next one
        self._ahead_at = start + (size >> 1)
        if self._segment_for(start) is None:
            path = os.path.join(self.dir, segment_name(start) + AHEAD_SUFFIX)
            self.ahead.request(start, lambda: Segment(path, start, size, create=True))

    def room_for(self, units: int) -> bool:
        """Whether `units` more units fit in blocks reserved for them (the admission check of a timer
        send: nothing is acknowledged that the timerlog cannot take). The rest of the segment holding
        `write_pos` counts, then the segments after it, made here when missing (the one made ahead if
        ready, else inline, as `append` would on a miss). A segment that cannot be made (ENOSPC) is
        False; for the next MAKE_RETRY_S only the allocate pool tries again (a refused send costs no
        inline attempt), so room comes back by itself once the disk has space."""
        size = self.file_size
        per_segment = (size - BLANK_SIZE) // UNIT_SIZE
        pos = self.write_pos
        start = pos - pos % size
        fit = 0
        seg = self._segment_for(start)
        if seg is not None:
            if not self._reserve(seg):
                return False
            fit = max(0, (size - BLANK_SIZE - (pos - start)) // UNIT_SIZE)
            start += size
        while units > fit:
            seg = self._segment_for(start)
            if seg is None:
                if self.segments and start != self.segments[-1].start + size:
                    return False  # not contiguous (a log being recovered): never made out of order
                if time.monotonic() < self._make_retry_at and not (self.ahead and self.ahead.ready(start)):
                    self._ask_ahead(start)  # a no-op while being made; asked again if that failed
                    return False
                counted = self.ahead.used + self.ahead.missed if self.ahead is not None else 0
                try:
                    seg = self._new_segment(start)
                except OSError as e:
                    self._make_retry_at = time.monotonic() + MAKE_RETRY_S
                    log.warning("timerlog.no_room", start=start, error=str(e))
                    self._ask_ahead(start)
                    return False
                if self.ahead is None or self.ahead.used + self.ahead.missed == counted:
                    self.made_for_room += 1  # nothing was asked for it: not counted by the pool
            elif not self._reserve(seg):
                return False
            fit += per_segment
            start += size
        return True

    def _ask_ahead(self, start: int) -> None:
        """Have the segment at `start` made on the allocate pool (asked again if it failed before)."""
        if self.ahead is not None:
            path = os.path.join(self.dir, segment_name(start) + AHEAD_SUFFIX)
            size = self.file_size
            self.ahead.request(start, lambda: Segment(path, start, size, create=True))

    def _reserve(self, seg: Segment) -> bool:
        """A segment written sparse by an older run gets its blocks now; False when the disk is full."""
        if not seg.reserved:
            try:
                reserve_blocks(seg.fd, self.file_size)
            except OSError:
                return False
            seg.reserved = True
        return True

    def _segment_for(self, pos: int) -> Segment | None:
        if not self.segments:
            return None
        i = (pos - self.segments[0].start) // self.file_size
        if 0 <= i < len(self.segments):
            return self.segments[i]
        return None

    @property
    def min_pos(self) -> int:
        return self.segments[0].start if self.segments else 0

    # ---- append / read -----------------------------------------------------------------
    def append(self, prev: int, magic: int, write_ms: int, delta: int, offset_py: int, size_py: int,
               topic_hash: int, exact_ms: int) -> int:
        pos = self.write_pos
        seg = self._segment_for(pos) if self.segments else None
        if seg is None:
            seg = self._new_segment(pos - pos % self.file_size)
        if not seg.reserved:
            reserve_blocks(seg.fd, self.file_size)  # OSError (disk still full): nothing written
            seg.reserved = True
        rel = pos - seg.start
        remaining = self.file_size - rel
        if UNIT_SIZE + BLANK_SIZE > remaining:
            nxt = self._segment_for(seg.start + self.file_size) or self._new_segment(seg.start + self.file_size)
            BLANK.pack_into(seg.mm, rel, remaining, 0, BLANK_MAGIC_CODE)  # only once the next file exists
            pos = seg.start + self.file_size
            seg = nxt
            rel = 0
        UNIT.pack_into(seg.mm, rel, UNIT_SIZE, prev, magic, write_ms, delta, offset_py, size_py, topic_hash,
                       exact_ms)
        self.write_pos = pos + UNIT_SIZE
        if self.write_pos >= self._ahead_at:
            self.allocate_ahead()
        return pos

    def read(self, pos: int) -> UnitTuple:
        """(size, prevPos, magic, writeMs, delta, offsetPy, sizePy, topicHash, exactMs)."""
        seg = self._segment_for(pos)
        if seg is None:
            raise IndexError(f"timerlog position {pos} is not mapped")
        unit: UnitTuple = UNIT.unpack_from(seg.mm, pos - seg.start)
        return unit

    def walk_chain(self, last: int, step: int = CHAIN_WALK_STEP) -> Iterator[ChainStep]:
        """A slot's chain from its end `last` (prevPos links, newest first), `step` units per `read_chain`,
        down to the chain's start or `min_pos` (as it was when the walk began); a bad unit ends the walk
        (that step's `bad`). A caller may yield to the loop between steps while `more`."""
        min_pos = self.min_pos
        pos = last
        while pos >= min_pos and pos >= 0:
            units, pos, bad = self.read_chain(pos, min_pos, step)
            yield ChainStep(units, bad is None and pos >= min_pos and pos >= 0, bad)
            if bad is not None:
                return

    def read_chain(self, pos: int, min_pos: int, limit: int) -> tuple[UnitArray, int, int | None]:
        """Follow a slot chain (prevPos links, newest first) from pos for about `limit` units.

        Returns (units as a UNIT_DTYPE array in chain order, the next position to follow (below
        min_pos or -1 when the chain ended), the position of a unit whose size is not 52 or None; the
        chain stops at such a unit, which is not returned). A unit whose prevPos is the unit just
        before it (units appended back to back, e.g. a burst into one slot) starts a block read: a
        run of units is checked link by link with numpy and taken at once; other units are read
        one by one."""
        pieces: list[UnitArray] = []
        single: list[UnitTuple] = []
        block = _RUN_MIN
        n = 0
        while pos >= min_pos and pos >= 0 and n < limit:
            seg = self._segment_for(pos)
            if seg is None:
                raise IndexError(f"timerlog position {pos} is not mapped")
            rel = pos - seg.start
            unit: UnitTuple = UNIT.unpack_from(seg.mm, rel)
            if unit[0] != UNIT_SIZE:
                return self._chain(pieces, single), pos, pos
            prev = unit[1]
            if prev != pos - UNIT_SIZE or rel < UNIT_SIZE:
                single.append(unit)
                n += 1
                pos = prev
                block = _RUN_MIN
                continue
            if single:
                pieces.append(np.array(single, dtype=UNIT_DTYPE))
                single = []
            k = min(block, rel // UNIT_SIZE + 1, (pos - min_pos) // UNIT_SIZE + 1)
            lo = rel - (k - 1) * UNIT_SIZE
            run = np.frombuffer(seg.mm[lo:rel + UNIT_SIZE], dtype=UNIT_DTYPE)
            where = np.arange(seg.start + lo, seg.start + rel + 1, UNIT_SIZE, dtype=np.int64)
            prevs = run["prev"]
            broken = np.flatnonzero(prevs[1:] != where[:-1])  # unit i+1 does not link to unit i
            j = int(broken[-1]) + 1 if broken.size else 0
            bad = np.flatnonzero(run["size"][j:] != UNIT_SIZE)
            if bad.size:
                b = j + int(bad[-1])
                pieces.append(run[b + 1:][::-1])
                return self._chain(pieces, single), int(where[b]), int(where[b])
            pieces.append(run[j:][::-1])
            n += k - j
            pos = int(prevs[j])
            block = min(block * 2, _RUN_MAX) if j == 0 else _RUN_MIN
        return self._chain(pieces, single), pos, None

    @staticmethod
    def _chain(pieces: list[UnitArray], single: list[UnitTuple]) -> UnitArray:
        if single:
            pieces.append(np.array(single, dtype=UNIT_DTYPE))
        if not pieces:
            return np.empty(0, dtype=UNIT_DTYPE)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def mapped(self, pos: int) -> tuple[mmap.mmap, int] | None:
        seg = self._segment_for(pos)
        return None if seg is None else (seg.mm, pos - seg.start)

    def read_chain_reference(self, pos: int, min_pos: int) -> tuple[list[tuple[int, ...]], int | None]:
        """The slow reference of `read_chain` (nothing hot calls it): one `read` per unit down the whole chain.
        Returns (the units in chain order, the position of a unit whose size is not 52, where it stopped, or
        None); tests/scheduler/timer/test_chain.py checks `read_chain` gives the same units and stop."""
        out: list[tuple[int, ...]] = []
        while pos >= min_pos and pos >= 0:
            unit = tuple(self.read(pos))
            if unit[0] != UNIT_SIZE:
                return out, pos
            out.append(unit)
            pos = unit[1]
        return out, None

    # ---- retention ---------------------------------------------------------------------
    def last_unit_rel(self) -> int:
        """Position inside a full file of its last unit (units fill a file until 52 + 16 no longer fit)."""
        return (self.file_size - UNIT_SIZE - BLANK_SIZE) // UNIT_SIZE * UNIT_SIZE

    def delete_expired(self, min_offset_py: int) -> list[str]:
        """RocketMQ's deleteExpiredFileByOffsetForTimerLog: oldest first and never the active file,
        delete a file whose last unit references a CommitLog offset below the CommitLog's minimum.
        Units are appended in CommitLog order (enqueue follows the timer ConsumeQueue, roll-overs are
        re-put first), so every message such a file points to is gone from the CommitLog and none of
        its timers can be delivered any more. Stops at the first file that must stay. Slot chains that
        ran into a deleted file end there (readers stop below `min_pos`)."""
        deleted: list[str] = []
        rel = self.last_unit_rel()
        while len(self.segments) > 1:
            seg = self.segments[0]
            size, _prev, magic, _w, _d, offset_py, _sz, _h, _ex = UNIT.unpack_from(seg.mm, rel)
            if size != UNIT_SIZE or not is_magic_ok(magic) or magic == 0:
                log.warning("timerlog.retention_bad_last_unit", file=seg.path, pos=seg.start + rel)
                break
            if offset_py >= min_offset_py:
                break
            seg.close()
            os.unlink(seg.path)
            self.segments.pop(0)
            deleted.append(seg.path)
            log.info("timerlog.deleted", file=seg.path, last_offset_py=offset_py, commitlog_min_offset=min_offset_py)
        return deleted

    # ---- durability --------------------------------------------------------------------
    def flush(self) -> int:
        """fdatasync what was written since the last flush, then drop those pages from RSS."""
        target, fds = self.flush_plan()
        sync_and_close(fds)
        self.flushed(target)
        return target

    def flush_plan(self) -> tuple[int, list[int]]:
        """(the position to flush to, descriptors of the segments written below it since the last
        flush): sync them in a thread (scheduler.durable.sync_and_close), then `flushed(target)`."""
        target = self.write_pos
        fds = [os.dup(seg.fd) for seg in self.segments
               if seg.start + self.file_size > self.flushed_pos and seg.start < target]
        return target, fds

    def flushed(self, target: int) -> None:
        """Everything below `target` is durable: record it and drop those pages from this process."""
        self.flushed_pos = max(self.flushed_pos, target)
        self._drop_pages()

    def _drop_pages(self) -> None:
        if DONTNEED is None:
            return
        for seg in self.segments:
            hi = min(self.flushed_pos, seg.start + self.file_size) - seg.start
            hi -= hi % _PAGE
            if hi > seg.dropped:
                seg.mm.madvise(DONTNEED, 0, hi)
                seg.dropped = hi

    def forget_read_pages(self) -> None:
        """After a slot was read, pages faulted in by the chain walk may be dropped again."""
        if DONTNEED is None:
            return
        for seg in self.segments:
            hi = min(self.flushed_pos, seg.start + self.file_size) - seg.start
            hi -= hi % _PAGE
            if hi > 0:
                seg.mm.madvise(DONTNEED, 0, hi)

    # ---- recovery (§4.7 step 2) --------------------------------------------------------
    def scan(self, from_pos: int) -> Iterator[tuple[int, UnitTuple]]:
        """Yield (pos, unit) for valid units from the file containing from_pos (scanned from its start).

        Stops at the first unit with a wrong size or magic; `self.write_pos` is left at the end of
        the valid data. Files are scanned from their start, as stock does.
        """
        seg = self._segment_for(from_pos) or (self.segments[0] if self.segments else None)
        if seg is None:
            self.write_pos = from_pos - from_pos % self.file_size
            return
        idx = self.segments.index(seg)
        end = seg.start
        while idx < len(self.segments):
            seg = self.segments[idx]
            rel = 0
            end = seg.start
            blank = False
            while rel + BLANK_SIZE <= self.file_size:
                size, _zero, bmagic = BLANK.unpack_from(seg.mm, rel)
                if size == self.file_size - rel and bmagic == BLANK_MAGIC_CODE:
                    blank = True
                    break
                if size != UNIT_SIZE or rel + UNIT_SIZE > self.file_size:
                    self.write_pos = end
                    return
                magic = UNIT.unpack_from(seg.mm, rel)[2]
                if not is_magic_ok(magic) or magic == 0:
                    self.write_pos = end
                    return
                unit: UnitTuple = UNIT.unpack_from(seg.mm, rel)
                yield seg.start + rel, unit
                rel += UNIT_SIZE
                end = seg.start + rel
            if not blank:
                self.write_pos = end
                return
            idx += 1
            end = seg.start + self.file_size
        self.write_pos = end

    def truncate_dirty(self) -> int:
        """Zero everything after write_pos in its file and delete later files; returns bytes cut."""
        cut = 0
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.start + self.file_size <= self.write_pos:
                keep.append(seg)
            elif seg.start <= self.write_pos:
                cut += zero_tail(seg, self.write_pos - seg.start, self.file_size)
                keep.append(seg)
            else:
                cut += self.file_size
                seg.close()
                os.unlink(seg.path)
        self.segments = keep
        if keep and keep[-1].start + self.file_size == self.write_pos:
            pass  # next append opens a new file
        self.flushed_pos = self.write_pos
        return cut

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []
        if self.ahead is not None:
            self.ahead.close()  # waits for the pool: a segment it made and nobody took is removed
