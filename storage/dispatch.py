"""The dispatch listeners (RocketMQ's CommitLogDispatcher after the ConsumeQueue write): called once per
(topic, queue) a put, a batch put or a reput wrote to, with that queue's new max offset. A listener that
raises is logged; the others still run."""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from storage.store_types import DispatchListener

log = structlog.get_logger(__name__)


class DispatchListeners:
    def __init__(self) -> None:
        self.listeners: list[DispatchListener] = []

    def add(self, fn: DispatchListener) -> None:
        self.listeners.append(fn)

    def remove(self, fn: DispatchListener) -> None:
        if fn in self.listeners:
            self.listeners.remove(fn)

    def dispatch(self, keys: Iterable[tuple[str, int]], queue_offsets: dict[tuple[str, int], int]) -> None:
        """Each listener once per key, with `queue_offsets[key]` (the queue's max offset after the write)."""
        for key in keys:
            max_offset = queue_offsets[key]
            for fn in self.listeners:
                try:
                    fn(key[0], key[1], max_offset)
                except Exception as e:
                    log.error("store.dispatch_listener_failed", listener=repr(fn), error=repr(e))
