"""Work shared out per event-loop turn, across connections (issue 26 item 4: no loop turn held long by
one peer's burst or by many connections at once).

`TurnBudget`: how much of one kind of work (header bytes decoded) every connection of a server may do
together in one loop turn; spent, the connections that still have work wait for the next turn
(`later(fn)`), in the order they asked. `TurnQueue`: calls `fn(arg)` (a closed connection's clean-up) run at
most `per_turn` per loop turn, the rest in later turns, so a mass disconnect is spread out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

# header bytes all connections of one server decode per loop turn: ~4 headers at the 256 KiB limit
# (a JSON header of that size decodes in ~2-5 ms here), many thousands of small ones
DECODE_BYTES_PER_TURN = 1 << 20
CLOSES_PER_TURN = 256
_A = TypeVar("_A")  # closed connections cleaned up per loop turn


class TurnBudget:
    """`left` units for this loop turn; refilled to `per_turn` at the next turn once something was spent."""

    __slots__ = ("per_turn", "left", "_loop", "_refill_scheduled", "_waiting")

    def __init__(self, per_turn: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.per_turn = per_turn
        self.left = per_turn
        self._loop = loop
        self._refill_scheduled = False
        self._waiting: deque[Callable[[], None]] = deque()

    def spend(self, n: int) -> None:
        self.left -= n
        self._schedule_refill()

    def later(self, fn: Callable[[], None]) -> None:
        """Run `fn` at a later turn, when the budget is refilled (in the order asked)."""
        self._waiting.append(fn)
        self._schedule_refill()

    def _schedule_refill(self) -> None:
        if not self._refill_scheduled:
            self._refill_scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._refill)  # runs in the next loop iteration

    def _refill(self) -> None:
        self._refill_scheduled = False
        self.left = self.per_turn
        waiting = self._waiting
        for _ in range(len(waiting)):  # those waiting now; one that has to wait again goes to the back
            if self.left <= 0:
                break
            waiting.popleft()()
        if waiting:
            self._schedule_refill()


class TurnQueue:
    """Callbacks run at most `per_turn` per loop turn, in order."""

    __slots__ = ("per_turn", "_items", "_scheduled", "_loop", "turns")

    def __init__(self, per_turn: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.per_turn = max(1, per_turn)
        self._items: deque[tuple[Callable[[Any], object], Any]] = deque()
        self._scheduled = False
        self._loop = loop
        self.turns = 0  # loop turns that ran callbacks (for tests and stats)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, fn: Callable[[_A], object], arg: _A) -> None:
        self._items.append((fn, arg))
        if not self._scheduled:
            self._scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        self.turns += 1
        items = self._items
        for _ in range(min(len(items), self.per_turn)):
            fn, arg = items.popleft()
            try:
                fn(arg)
            except Exception:
                log.exception("remoting.turn_callback_failed")
        if items:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._run)

    def run_all(self) -> None:
        """Run everything queued now (a server closing)."""
        items = self._items
        while items:
            fn, arg = items.popleft()
            try:
                fn(arg)
            except Exception:
                log.exception("remoting.turn_callback_failed")
