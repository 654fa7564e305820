"""Orderly-consumption queue locks (RebalanceLockManager semantics).

A lock belongs to (group, message queue) → clientId and expires `max_live_ms` (60 s) after its last
renewal. Expiry is checked lazily on access (a stale lock is simply free), so nothing runs between
requests. `try_lock_batch` returns the queues now held by, or already belonging to, the client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

MessageQueue = tuple[str, str, int]  # (topic, brokerName, queueId)


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = 60000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_live_s = max_live_ms / 1000.0
        self.clock = clock
        self._locks: dict[str, dict[MessageQueue, list[Any]]] = {}  # group -> mq -> [clientId, lastUpdate]

    def _live(self, entry: list[Any], now: float) -> bool:
        return bool(now - entry[1] <= self.max_live_s)

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        entry = self._locks.get(group, {}).get(mq)
        return entry is not None and entry[0] == client_id and self._live(entry, self.clock())

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        now = self.clock()
        table = self._locks.setdefault(group, {})
        locked = []
        for mq in mqs:
            entry = table.get(mq)
            if entry is None or not self._live(entry, now) or entry[0] == client_id:
                table[mq] = [client_id, now]
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group)
        if not table:
            return
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry[0] == client_id:
                del table[mq]
        if not table:
            del self._locks[group]

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        entry = self._locks.get(group, {}).get(mq)
        return entry[0] if entry is not None and self._live(entry, self.clock()) else None
