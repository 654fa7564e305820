"""Supervised background tasks of the cluster room: an exception is logged with the task's name and
context, counted, and the body restarts after a backoff (doubling from `min_backoff_s` up to
`max_backoff_s`, reset after a run that lasted longer than the backoff cap). Cancellation stops it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)


class Supervised:
    def __init__(self, name: str, body: Callable[[], Awaitable[None]], *, min_backoff_s: float = 0.2,
                 max_backoff_s: float = 30.0, **context: object) -> None:
        self.name, self.body, self.context = name, body, context
        self.min_backoff_s, self.max_backoff_s = min_backoff_s, max_backoff_s
        self.failures = 0
        self.task: asyncio.Task | None = None

    def start(self) -> Supervised:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.name)
        return self

    async def _run(self) -> None:
        backoff = self.min_backoff_s
        while True:
            started = time.monotonic()
            try:
                await self.body()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.failures += 1
                if time.monotonic() - started > self.max_backoff_s:
                    backoff = self.min_backoff_s
                log.exception("cluster.task_failed", task=self.name, failures=self.failures,
                              retry_in_s=round(backoff, 3), error=repr(e), **self.context)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    async def stop(self) -> None:
        t, self.task = self.task, None
        if t is None or t.done():
            return
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
