"""The broker's start and stop as one ordered list of components.

`Lifecycle.add(name, start, stop)` appends a component (either step may be absent, either may be plain or
async). `start()` starts them in order; `stop()` stops the started ones in reverse order, each step on
its own: a step that fails is logged (`broker.shutdown_step_failed`, naming it) and the next one still
runs, so a full disk or a stuck service never keeps the rest (the store's flush, the lock) from closing.
A step that does not finish within `stop_timeout_s` is abandoned the same way (`broker.shutdown_step_timed_out`):
SIGTERM always ends the process.
A start that fails half-way leaves exactly the components before it to `stop()`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

Step = Callable[[], Awaitable[object] | object]


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    start: Step | None = None
    stop: Step | None = None


async def _run(step: Step) -> None:
    result = step()
    if inspect.isawaitable(result):
        await result


class Lifecycle:
    """Components started in the order they were added, stopped in reverse."""

    def __init__(self, stop_timeout_s: float = 60.0) -> None:
        self.stop_timeout_s = stop_timeout_s
        self.components: list[Component] = []
        self._started: list[Component] = []

    def add(self, name: str, start: Step | None = None, stop: Step | None = None) -> None:
        if any(c.name == name for c in self.components):
            raise ValueError(f"component {name} is added twice")
        self.components.append(Component(name, start, stop))

    @property
    def started(self) -> list[str]:
        return [c.name for c in self._started]

    async def start(self) -> None:
        """Each component's start, in order; a failure propagates (the ones before it are started)."""
        for c in self.components[len(self._started):]:
            if c.start is not None:
                await _run(c.start)
            self._started.append(c)

    async def stop(self) -> None:
        """The started components' stops, in reverse order, each whatever the one before met."""
        while self._started:
            c = self._started.pop()
            if c.stop is None:
                continue
            log.info("broker.shutdown_step", step=c.name)
            try:
                await asyncio.wait_for(_run(c.stop), self.stop_timeout_s)
            except TimeoutError:
                log.error("broker.shutdown_step_timed_out", step=c.name, timeout_s=self.stop_timeout_s)
            except Exception as e:
                log.error("broker.shutdown_step_failed", step=c.name, error=repr(e))
