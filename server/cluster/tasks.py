"""A supervised background task of the cluster room, run by the project's one supervisor
(storage.supervisor): an exception is logged with the task's name and context, counted
(delaymq_task_restarts_total{task} when it is the broker's supervisor), and the body restarts after
a back-off. `stop()` cancels it and reports an error it ended with. The name server process has no
store: it passes no supervisor and gets one of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from storage.supervisor import SupervisedTask, Supervisor


class Supervised:
    def __init__(self, name: str, body: Callable[[], Awaitable[None]], *, supervisor: Supervisor | None = None,
                 **context: object) -> None:
        self.name, self.body, self.context = name, body, context
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self._run: SupervisedTask | None = None

    @property
    def failures(self) -> int:
        return self._run.restarts if self._run is not None else 0

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._run.task if self._run is not None else None

    def start(self) -> Supervised:
        self._run = self.supervisor.spawn(self.name, self.body, **self.context)
        return self

    async def stop(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            await run.stop()
