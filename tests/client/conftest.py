"""Client tests run against a real broker subprocess (the shared `broker` / `broker_factory` fixtures
from tests/conftest.py); this file adds names and an event-driven message collector."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from client import ConsumeStatus, MessageExt

# Short delay levels so a send-back retry (level 3 + reconsumeTimes) arrives in well under a second.
FAST_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s"


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class Collector:
    """A push-consumer listener that records messages and wakes waiters when a count is reached."""

    def __init__(self, fail_first: int = 0) -> None:
        self.messages: list[MessageExt] = []
        self.fail_first = fail_first
        self._cond = asyncio.Condition()

    async def __call__(self, msg: MessageExt) -> ConsumeStatus:
        async with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()
        if len(self.messages) <= self.fail_first:
            return ConsumeStatus.RETRY
        return ConsumeStatus.SUCCESS

    async def wait_for(self, n: int, timeout: float = 20.0) -> list[MessageExt]:
        async with asyncio.timeout(timeout):
            async with self._cond:
                await self._cond.wait_for(lambda: len(self.messages) >= n)
        return self.messages

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


@pytest.fixture
def topic(broker) -> str:
    name = uniq("T")
    broker.create_topic(name, queues=4)
    return name
