"""Cancelled delay-level messages: (level, schedule-queue offset) -> UNIQ_KEY, in `config/delayCancel.json`.

A delay level's delivery pass drops the units whose offset is in its table (one set lookup per unit,
only while the level has cancellations) and forgets them once delivery has passed them. The table
stays small: it holds only cancellations whose due time has not come yet. Written atomically on
every change (cancels are rare, operator-driven) to a `CancelFile` the MessageStore facade provides
(`store.config_file(<config>/delayCancel.json)`).
"""

from __future__ import annotations

from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

FILE_NAME = "delayCancel.json"


class CancelFile(Protocol):
    """Where the table is kept (storage.config_store.ConfigFile, from `MessageStore.config_file`)."""

    path: str

    def read(self) -> Any:
        """The stored JSON document (its `.bak` when the file is unreadable); None when neither exists."""

    def write(self, obj: object) -> None:
        """Store the document durably and atomically (blocking)."""


class DelayCancelTable:
    def __init__(self, file: CancelFile | None) -> None:
        self.file = file  # None: not persisted
        self.by_level: dict[int, dict[int, str]] = {}
        self.cancelled_total = 0  # skipped at delivery since start

    def load(self) -> None:
        if self.file is None:
            return
        try:
            data = self.file.read() or {}
            self.by_level = {int(lv): {int(off): str(k) for off, k in offs.items()}
                             for lv, offs in data.get("levels", {}).items() if offs}
        except (ValueError, TypeError, AttributeError, OSError) as e:
            log.error("delay.cancel_table_unreadable", path=self.file.path, error=repr(e))

    def _persist(self) -> None:
        if self.file is not None:
            self.file.write({"levels": {str(lv): {str(o): k for o, k in offs.items()}
                                        for lv, offs in self.by_level.items() if offs}})

    def add(self, level: int, offset: int, uniq_key: str) -> bool:
        """False if that message was already cancelled."""
        offs = self.by_level.setdefault(level, {})
        if offset in offs:
            return False
        offs[offset] = uniq_key
        self._persist()
        return True

    def is_cancelled(self, level: int, offset: int) -> bool:
        offs = self.by_level.get(level)
        return offs is not None and offset in offs

    def of_level(self, level: int) -> dict[int, str] | None:
        """The level's cancelled offsets, None when it has none (the delivery pass's fast check)."""
        return self.by_level.get(level) or None

    def passed(self, level: int, below: int) -> int:
        """Delivery of `level` moved to `below`: forget its cancellations under it."""
        offs = self.by_level.get(level)
        if not offs:
            return 0
        gone = [o for o in offs if o < below]
        for o in gone:
            del offs[o]
        if gone:
            self._persist()
        return len(gone)

    def count(self) -> int:
        return sum(len(v) for v in self.by_level.values())
