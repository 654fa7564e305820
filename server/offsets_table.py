"""Consumer offsets (`topic@group` → {queueId: next offset to consume}), persisted to
`config/consumerOffset.json` (`{"offsetTable": {...}}`).

A commit marks the table dirty and schedules one persist `PERSIST_DELAY_S` later (a single
`loop.call_later`, armed only while dirty); shutdown persists synchronously.
"""

from __future__ import annotations

import asyncio

import structlog

from server.tables import JsonTable

log = structlog.get_logger(__name__)

PERSIST_DELAY_S = 5.0


class ConsumerOffsetManager:
    def __init__(self, path: str) -> None:
        self.table = JsonTable(path, "offsetTable")
        self.offsets: dict[str, dict[int, int]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def load(self) -> None:
        for key, queues in (self.table.load() or {}).items():
            if isinstance(queues, dict):
                self.offsets[key] = {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(PERSIST_DELAY_S, self._persist_due)

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get(f"{topic}@{group}", {}).get(queue_id)

    def _persist_due(self) -> None:
        self._timer = None
        try:
            self.persist()
        except OSError as e:
            log.error("offsets.persist_failed", error=str(e))

    def persist(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.table.save({k: {str(q): o for q, o in v.items()} for k, v in self.offsets.items()})
