"""Event loop set-up: uvloop where available."""

import asyncio


def install() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
