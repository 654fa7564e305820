"""Filter bitmap files: `<store>/filterbitmap/<topic>/<queueId>`, one `codec.filter_bitmap` unit per queue offset
(unit i at byte i * UNIT_SIZE; never-written units read as zeros). The store side only keeps bytes: what a bit
means is the server's (server.filter_bitmap). File descriptors are opened on demand and bounded."""

from __future__ import annotations

import os

import structlog

from codec.filter_bitmap import UNIT_SIZE

log = structlog.get_logger(__name__)

MAX_OPEN = 256


class FilterBitmapFiles:
    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "filterbitmap")
        self._fds: dict[tuple[str, int], int] = {}

    def _fd(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        fd = self._fds.get(key)
        if fd is None:
            if len(self._fds) >= MAX_OPEN:
                self.close()
            d = os.path.join(self.dir, topic)
            os.makedirs(d, exist_ok=True)
            fd = os.open(os.path.join(d, str(queue_id)), os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[key] = fd
        return fd

    def end(self, topic: str, queue_id: int) -> int:
        """Units the file holds (its size / UNIT_SIZE)."""
        return os.fstat(self._fd(topic, queue_id)).st_size // UNIT_SIZE

    def write(self, topic: str, queue_id: int, offset: int, units: bytes) -> None:
        os.pwrite(self._fd(topic, queue_id), units, offset * UNIT_SIZE)

    def read(self, topic: str, queue_id: int, offset: int, count: int) -> bytes:
        """Up to `count` units from `offset` (fewer, or none, past the file's end)."""
        return os.pread(self._fd(topic, queue_id), count * UNIT_SIZE, offset * UNIT_SIZE)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
