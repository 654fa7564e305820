"""Consumer offsets as the broker uses them: the persistent table is storage's
`ConsumerOffsetTable` (`config/consumerOffset.json`); the broker adds the persist policy.

A commit marks the table dirty and schedules one persist `PERSIST_DELAY_S` later (a single
`loop.call_later`, armed only while dirty); shutdown persists synchronously.
"""

from __future__ import annotations

import asyncio

import structlog

from storage.consumer_offsets import ConsumerOffsetTable

log = structlog.get_logger(__name__)

PERSIST_DELAY_S = 5.0


class ConsumerOffsetManager(ConsumerOffsetTable):
    def __init__(self, store_path: str) -> None:
        super().__init__(store_path)
        self._timer: asyncio.TimerHandle | None = None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        super().commit(group, topic, queue_id, offset)
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(PERSIST_DELAY_S, self._persist_due)

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
        super().persist()
