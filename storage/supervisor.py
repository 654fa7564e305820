"""One failure policy for the broker's background work (delay levels, timer enqueue / dequeue / put,
flushes, exports, transaction check-back).

`Supervisor.spawn(name, factory, **context)` runs `await factory()` as a task: when it raises, the
error is logged once with its context and traceback (structlog `task.failed`), counted per task name
(`restarts`, exposed as `delaymq_task_restarts_total{task}`), and the coroutine is started again
after a back-off (100 ms doubling to 10 s; back to 100 ms after a run that lasted 30 s). A factory
that returns ends its task. `SupervisedTask.stop()` cancels and waits; an error the task ended with
is logged (`task.stop_failed`), never swallowed. `failed(name, exc)` applies the same policy (log +
count) to work that is not a task of its own: a timer callback or a one-shot job (`run_once`).

It lives in storage, the lowest package that may use asyncio, so the store's own flush tasks use it
too; the scheduler and the server reach it through the `MessageStore.supervisor` facade attribute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 10.0
HEALTHY_AFTER_S = 30.0


class SupervisedTask:
    """One supervised coroutine; `task` is the asyncio task running it (and its restarts)."""

    def __init__(self, sup: Supervisor, name: str, factory: Callable[[], Awaitable[None]], context: dict) -> None:
        self.sup = sup
        self.name = name
        self.factory = factory
        self.context = context
        self.restarts = 0
        self.last_error: BaseException | None = None
        self.task: asyncio.Task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        sup = self.sup
        backoff = sup.backoff_initial_s
        while True:
            started = loop.time()
            try:
                await self.factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if asyncio.current_task().cancelling():  # it failed while being stopped: no restart,
                    raise  # the error ends the task and stop() / reap() logs it
                self.restarts += 1
                self.last_error = e
                if loop.time() - started >= sup.healthy_after_s:
                    backoff = sup.backoff_initial_s
                sup.failed(self.name, e, restarts=self.restarts, backoff_s=backoff, **self.context)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, sup.backoff_max_s)

    def done(self) -> bool:
        return self.task.done()

    def cancel(self) -> None:
        self.task.cancel()

    async def stop(self) -> None:
        """Cancel and wait. An error the task ended with is logged (and counted), not swallowed."""
        self.task.cancel()
        await self.sup.reap([self])


class Supervisor:
    def __init__(self, backoff_initial_s: float = BACKOFF_INITIAL_S, backoff_max_s: float = BACKOFF_MAX_S,
                 healthy_after_s: float = HEALTHY_AFTER_S) -> None:
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.healthy_after_s = healthy_after_s
        self.restarts: dict[str, int] = {}  # task name -> failures (each followed by a restart)
        self.tasks: list[SupervisedTask] = []

    def spawn(self, name: str, factory: Callable[[], Awaitable[None]], **context) -> SupervisedTask:
        """Run `await factory()` under the failure policy (call on the running loop)."""
        self.tasks = [t for t in self.tasks if not t.done()]
        self.restarts.setdefault(name, 0)
        t = SupervisedTask(self, name, factory, context)
        self.tasks.append(t)
        return t

    def run_once(self, name: str, coro: Awaitable[None], **context) -> asyncio.Task:
        """A one-shot job: an error is logged and counted (no restart: the caller decides)."""

        async def job() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.failed(name, e, **context)

        return asyncio.get_running_loop().create_task(job(), name=name)

    def failed(self, name: str, exc: BaseException, **context) -> None:
        """Log (with traceback and context) and count one failure of background work `name`."""
        self.restarts[name] = self.restarts.get(name, 0) + 1
        log.error("task.failed", task=name, error=repr(exc), exc_info=exc, **context)

    async def reap(self, tasks: list[SupervisedTask]) -> None:
        """Wait for (already cancelled or finishing) tasks; log any error one ended with."""
        if not tasks:
            return
        await asyncio.wait([t.task for t in tasks])
        for t in tasks:
            if t.task.cancelled():
                continue
            exc = t.task.exception()
            if exc is not None:
                self.failed(t.name, exc, at="stop")
                log.error("task.stop_failed", task=t.name, error=repr(exc))

    def stats(self) -> dict[str, int]:
        """{task name: failures} for every task spawned and all other work that failed."""
        return dict(self.restarts)
