"""What the two console scripts (`delaymq-broker`, `delaymq-namesrv`) share: `--set KEY=VALUE` overrides and
running one component until SIGTERM / Ctrl-C."""

from __future__ import annotations

import asyncio
import importlib.metadata
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import structlog

log = structlog.get_logger("server")


class Component(Protocol):
    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


def version() -> str:
    """The installed distribution's version (`--version` of every entry point)."""
    try:
        return importlib.metadata.version("delaymq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def overrides_from(set_items: Iterable[str], flags: Mapping[str, object]) -> dict[str, object]:
    """`--set KEY=VALUE` items, then the dedicated flags that were given (a flag not given leaves --set alone)."""
    overrides: dict[str, object] = {}
    for item in set_items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return overrides


async def serve_until_signal(component: Component, ready_line: Callable[[], str], what: str,
                             after_start: Callable[[], None] | None = None) -> int:
    """Start `component`, print its ready line (tests and scripts wait for it), serve until SIGTERM or
    SIGINT, shut it down; a failed start shuts down what it had opened and re-raises."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await component.start()
    except BaseException:
        await component.shutdown()
        raise
    if after_start is not None:
        after_start()
    sys.stdout.write(ready_line() + "\n")
    sys.stdout.flush()
    await stop.wait()
    log.info(f"{what}.signal", action="shutdown")
    await component.shutdown()
    return 0
