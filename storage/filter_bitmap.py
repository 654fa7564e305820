"""Filter bitmap files beside the ConsumeQueue (the layout is codec.filter_bitmap's: `filterbitmap/<topic>/<queueId>/
<first unit>`, `units_per_file` units a file; never-written units read as zeros). The store side only keeps bytes:
what a bit means is the server's (server.filter_bitmap). File descriptors are opened on demand and bounded.

The files follow the ConsumeQueue they describe (a `storage.store_types.QueueFilesListener`): retention deleting
a queue's files below its new min offset deletes the bitmap files wholly below it, a deleted topic takes its
bitmap files along, and `recover` (at start, after the store recovered) makes every queue's files agree with its
ConsumeQueue: files of queues that no longer exist go, files below the min offset go, units at or past the max
offset are cut (they described messages the ConsumeQueue no longer has), and a torn or corrupt tail (a partial
unit, units not `written`) is cut, each with a log line.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import structlog

from codec.filter_bitmap import UNIT, UNIT_SIZE, file_name, file_start, written

log = structlog.get_logger(__name__)

MAX_OPEN = 256
_SCAN_UNITS = 4096  # units read at once when looking back over a tail for the last written unit

QueueBounds = Callable[[str, int], "tuple[int, int] | None"]  # (topic, queue id) -> its (min, max) offset, or None


class FilterBitmapFiles:
    def __init__(self, root: str, units_per_file: int) -> None:
        self.dir = os.path.join(root, "filterbitmap")
        self.units_per_file = units_per_file
        self._fds: dict[tuple[str, int, int], int] = {}  # (topic, queue id, first unit) -> fd

    def _queue_dir(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.dir, topic, str(queue_id))

    def _fd(self, topic: str, queue_id: int, start: int, create: bool) -> int | None:
        key = (topic, queue_id, start)
        fd = self._fds.get(key)
        if fd is None:
            d = self._queue_dir(topic, queue_id)
            path = os.path.join(d, file_name(start))
            if create:
                os.makedirs(d, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                return None
            if len(self._fds) >= MAX_OPEN:
                self.close()
            self._fds[key] = fd
        return fd

    def _starts(self, topic: str, queue_id: int) -> list[int]:
        """The first units of the queue's files, ascending."""
        try:
            names = os.listdir(self._queue_dir(topic, queue_id))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def end(self, topic: str, queue_id: int) -> int:
        """One past the last unit the queue's files hold (0 without files)."""
        starts = self._starts(topic, queue_id)
        if not starts:
            return 0
        last = starts[-1]
        return last + os.path.getsize(os.path.join(self._queue_dir(topic, queue_id), file_name(last))) // UNIT_SIZE

    def write(self, topic: str, queue_id: int, offset: int, units: bytes) -> None:
        pos = 0
        while pos < len(units):
            unit = offset + pos // UNIT_SIZE
            start = file_start(unit, self.units_per_file)
            chunk = units[pos:pos + (start + self.units_per_file - unit) * UNIT_SIZE]
            fd = self._fd(topic, queue_id, start, create=True)
            assert fd is not None
            os.pwrite(fd, chunk, (unit - start) * UNIT_SIZE)
            pos += len(chunk)

    def read(self, topic: str, queue_id: int, offset: int, count: int) -> bytes:
        """Up to `count` units from `offset`, within the file holding it (fewer, or none, past its end)."""
        start = file_start(offset, self.units_per_file)
        fd = self._fd(topic, queue_id, start, create=False)
        if fd is None:
            return b""
        count = min(count, start + self.units_per_file - offset)
        return os.pread(fd, count * UNIT_SIZE, (offset - start) * UNIT_SIZE)

    def _forget(self, topic: str, queue_id: int | None = None) -> None:
        for key in [k for k in self._fds if k[0] == topic and (queue_id is None or k[1] == queue_id)]:
            os.close(self._fds.pop(key))

    # ---- following the ConsumeQueue (storage.store_types.QueueFilesListener) ----------------------------------
    def trimmed(self, topic: str, queue_id: int, min_offset: int) -> None:
        """Retention advanced the queue's min offset: its bitmap files wholly below it are deleted."""
        qdir = self._queue_dir(topic, queue_id)
        starts = self._starts(topic, queue_id)
        # a file ends where the next begins (the last: at its size), whatever units_per_file it was written with
        ends = starts[1:] + [starts[-1] + os.path.getsize(os.path.join(qdir, file_name(starts[-1]))) // UNIT_SIZE
                             if starts else 0]
        gone = [s for s, e in zip(starts, ends, strict=True) if e <= min_offset]
        if not gone:
            return
        self._forget(topic, queue_id)
        for s in gone:
            os.remove(os.path.join(qdir, file_name(s)))
        log.info("filter_bitmap.files_deleted", topic=topic, queue_id=queue_id, files=len(gone),
                 min_offset=min_offset)

    def topic_deleted(self, topic: str) -> None:
        self._forget(topic)
        path = os.path.join(self.dir, topic)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            log.info("filter_bitmap.topic_deleted", topic=topic)

    # ---- start ------------------------------------------------------------------------------------------------
    def recover(self, bounds: QueueBounds, now_ms: int) -> int:
        """Make every queue's files agree with its ConsumeQueue (module docstring). Returns the latest
        computed_ms of the units kept (0: none), so that a registration after the restart is later than all."""
        self.close()
        if not os.path.isdir(self.dir):
            return 0
        latest = 0
        for topic in sorted(os.listdir(self.dir)):
            tdir = os.path.join(self.dir, topic)
            if not os.path.isdir(tdir):
                os.remove(tdir)
                continue
            for name in sorted(os.listdir(tdir)):
                qdir = os.path.join(tdir, name)
                if not name.isdigit() or not os.path.isdir(qdir):  # not ours, or the first cut's one file a queue
                    _remove(qdir)
                    log.warning("filter_bitmap.stray_removed", path=qdir)
                    continue
                b = bounds(topic, int(name))
                if b is None:
                    shutil.rmtree(qdir, ignore_errors=True)
                    log.info("filter_bitmap.queue_gone", topic=topic, queue_id=int(name))
                    continue
                latest = max(latest, self._recover_queue(topic, int(name), b[0], b[1], now_ms))
            if not os.listdir(tdir):
                os.rmdir(tdir)
        return latest

    def _recover_queue(self, topic: str, queue_id: int, min_offset: int, max_offset: int, now_ms: int) -> int:
        qdir = self._queue_dir(topic, queue_id)
        self.trimmed(topic, queue_id, min_offset)
        starts = self._starts(topic, queue_id)
        past = [s for s in starts if s >= max_offset]
        for s in past:
            os.remove(os.path.join(qdir, file_name(s)))
        if past:
            log.warning("filter_bitmap.files_past_consume_queue_deleted", topic=topic, queue_id=queue_id,
                        files=len(past), consume_queue_max_offset=max_offset)
        starts = starts[:len(starts) - len(past)]
        if not starts:
            return 0
        last = starts[-1]
        path = os.path.join(qdir, file_name(last))
        size = os.path.getsize(path)
        keep = min(size // UNIT_SIZE, max_offset - last)  # whole units the ConsumeQueue still has
        latest = 0
        with open(path, "rb") as f:
            while keep > 0:  # back over units not written (zeros, torn, corrupt) to the last written one
                n = min(keep, _SCAN_UNITS)
                f.seek((keep - n) * UNIT_SIZE)
                chunk = f.read(n * UNIT_SIZE)
                for i in range(n - 1, -1, -1):
                    computed_ms = UNIT.unpack_from(chunk, i * UNIT_SIZE)[1]
                    if written(computed_ms, now_ms):
                        latest = computed_ms
                        break
                    keep -= 1
                if latest:
                    break
        if keep * UNIT_SIZE != size:
            os.truncate(path, keep * UNIT_SIZE)
            log.warning("filter_bitmap.tail_cut", topic=topic, queue_id=queue_id, file=path,
                        bytes_cut=size - keep * UNIT_SIZE, units_kept=last + keep,
                        consume_queue_max_offset=max_offset)
        return latest

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.remove(path)
