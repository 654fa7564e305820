"""The next schedule-queue offset to process per level (delayOffset.json, scheduled-messages.md §1.7).

Where the table is kept is a small seam, `DelayOffsetBackend` (`read()`, `write(table)`), provided by
storage through the MessageStore facade: the broker passes its MetaStore's (`storage.meta_store.DelayOffsetStore`,
one row per level in `meta.db`); a DelayLevelService built alone asks the store for
`store.delay_offset_file(<config>/delayOffset.json)` (RocketMQ's fastjson shape with unquoted integer keys,
`{"offsetTable":{1:12,2:0}}`, written atomically, `.bak` fallback; storage.meta_schema declares the shape).
"""

from __future__ import annotations

from typing import Protocol

import structlog

log = structlog.get_logger(__name__)

FILE_NAME = "delayOffset.json"


class DelayOffsetBackend(Protocol):
    def read(self) -> dict[int, int] | None:
        """The stored table; None when nothing is stored yet."""

    def write(self, table: dict[int, int]) -> None:
        """Store the table durably (blocking: called from an executor thread or at shutdown)."""


class DelayOffsetTable:
    """Level → next schedule-queue offset; persisted only when changed since the last persist."""

    def __init__(self, backend: DelayOffsetBackend | None) -> None:
        self.backend = backend  # None: not persisted
        self.offsets: dict[int, int] = {}
        self._persisted: dict[int, int] = {}

    def load(self) -> bool:
        if self.backend is None:
            return True
        stored = self.backend.read()
        if stored is not None:
            self.offsets = dict(stored)
            self._persisted = dict(stored)
            log.info("delay_offsets.loaded", backend=type(self.backend).__name__, offsets=self.offsets)
        return True

    def get(self, level: int) -> int:
        return self.offsets.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        self.offsets[level] = offset

    def correct(self, level: int, cq_min: int, cq_max: int) -> int:
        """correctDelayOffset: clamp the stored offset into [cq_min, cq_max] (logged when it moves)."""
        old = self.offsets.get(level, 0)
        new = min(max(old, cq_min), cq_max)
        if new != old:
            log.error("delay_offsets.corrected", level=level, old=old, new=new, cq_min=cq_min, cq_max=cq_max)
        self.offsets[level] = new
        return new

    def persist(self, force: bool = False) -> bool:
        data = self.take_snapshot(force)
        if data is None:
            return False
        self.write(data)
        return True

    def take_snapshot(self, force: bool = False) -> dict[int, int] | None:
        """The table to write now (None: unchanged since the last snapshot). Marks it persisted,
        so call `write(snapshot)` next (from any thread)."""
        if self.backend is None or (not force and self.offsets == self._persisted):
            return None
        snapshot = dict(self.offsets)
        self._persisted = snapshot
        return snapshot

    def mark_unpersisted(self) -> None:
        """A `write` failed: the next snapshot writes again."""
        self._persisted = {}

    def write(self, snapshot: dict[int, int]) -> None:
        if self.backend is not None:  # snapshot() is None without one: nothing to write
            self.backend.write(snapshot)
