"""Event loop set-up: every loop of ours is a uvloop loop, made by a factory (no global policy).

`new_event_loop()` makes one uvloop loop; `run(coro)` runs a coroutine on a fresh one
(`asyncio.Runner(loop_factory=...)`, the replacement for the deprecated event-loop policy API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    return uvloop.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on a uvloop loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
