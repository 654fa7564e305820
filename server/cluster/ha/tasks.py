"""A supervised background task: an exception is logged with its context, counted, and the task
restarts after a growing back-off (0.1 s doubling to 5 s, reset after a minute without failure).
Cancellation ends it. (To be replaced by the project-wide supervisor once it lands.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

FAILURES: dict[str, int] = {}


def supervise(name: str, fn: Callable[[], Awaitable[None]]) -> asyncio.Task:
    async def run() -> None:
        backoff = 0.1
        while True:
            started = time.monotonic()
            try:
                await fn()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                FAILURES[name] = FAILURES.get(name, 0) + 1
                if time.monotonic() - started > 60:
                    backoff = 0.1
                log.exception("task.failed", task=name, failures=FAILURES[name], restart_in_s=backoff,
                              error=repr(e))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    return asyncio.get_running_loop().create_task(run(), name=name)
