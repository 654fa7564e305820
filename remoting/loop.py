"""Event loop set-up: uvloop.

`install()` sets the uvloop policy for every loop created afterwards (call it before
`asyncio.run`); `new_event_loop()` makes one uvloop loop; `run(coro)` runs a coroutine on uvloop.
"""

from __future__ import annotations

import asyncio


def install() -> bool:
    """Set the uvloop event-loop policy; False (and the default loop) if uvloop is unavailable."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(coro):
    """asyncio.run on a uvloop loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
