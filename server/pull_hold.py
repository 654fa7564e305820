"""Long polling: PULL_MESSAGE requests that found nothing wait here for new messages.

A held pull parks a future under (topic, queueId) together with the offset it waits beyond. The
store's dispatch listener (`on_dispatch(topic, queue_id, max_offset)`, called in the same loop tick
as the put) resolves every waiter whose offset is below the new max offset; a per-request
`loop.call_at` resolves it at its suspend deadline. Nothing polls. The pull processor then re-runs
the request without the suspend flag and answers.
"""

from __future__ import annotations

import asyncio

import structlog

log = structlog.get_logger(__name__)


class _Waiter:
    __slots__ = ("offset", "future", "timer")

    def __init__(self, offset: int, future: asyncio.Future[bool]) -> None:
        self.offset = offset
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class PullHoldService:
    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[_Waiter]] = {}
        self._closed = False
        self.woken_by_message = 0
        self.woken_by_timeout = 0

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Park until a message lands at/after `offset` (True) or the timeout passes (False)."""
        if self._closed:
            return False
        loop = asyncio.get_running_loop()
        w = _Waiter(offset, loop.create_future())
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(w)
        w.timer = loop.call_at(loop.time() + max(0.0, timeout_s), self._expire, key, w)
        try:
            return bool(await w.future)
        finally:
            w.timer.cancel()
            lst = self._held.get(key)
            if lst is not None:
                try:
                    lst.remove(w)
                except ValueError:
                    pass
                if not lst:
                    self._held.pop(key, None)

    def _expire(self, key: tuple[str, int], w: _Waiter) -> None:
        if not w.future.done():
            self.woken_by_timeout += 1
            w.future.set_result(False)

    def on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store dispatch listener: new max offset for (topic, queue)."""
        lst = self._held.get((topic, queue_id))
        if not lst:
            return
        keep = []
        for w in lst:
            if w.offset < max_offset:
                if not w.future.done():
                    self.woken_by_message += 1
                    w.future.set_result(True)
            else:
                keep.append(w)
        if keep:
            self._held[(topic, queue_id)] = keep
        else:
            del self._held[(topic, queue_id)]

    def shutdown(self) -> None:
        """Answer every held pull now (each re-runs once and responds)."""
        self._closed = True
        for lst in self._held.values():
            for w in lst:
                if not w.future.done():
                    w.future.set_result(False)
        self._held.clear()
