"""Child process for the kill -9 test: a MessageStore + DelayLevelService delivering level-1 messages
while new ones keep arriving. Reports progress on stdout ("delivered <n>") until SIGKILLed."""

from __future__ import annotations

import asyncio
import logging
import sys

import structlog

from scheduler.delay_levels import DelayLevelService
from scheduler.events import on_event as event_listener
from tests.scheduler.helpers import delay_config, open_store, put_delayed


async def main(path: str, total: int, per_tick: int) -> None:
    from pathlib import Path

    root = Path(path)
    store = open_store(root)
    svc = DelayLevelService(store, delay_config(root, flush_offset_interval_ms=100))
    delivered = 0

    def on_event(event: str, **_fields) -> None:
        nonlocal delivered
        if event == "delivered":
            delivered += 1
            if delivered % 100 == 0:
                sys.stdout.write(f"delivered {delivered}\n")
                sys.stdout.flush()

    svc.add_listener(event_listener(on_event))
    svc.start()
    sent = 0
    while sent < total:
        put_delayed(store, svc.config.levels_ms, "K9", 1, n=per_tick)
        sent += per_tick
        await asyncio.sleep(0.005)  # producer pacing (not synchronisation)
    sys.stdout.write("sent all\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # deliver until killed


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
