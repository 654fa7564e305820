"""The master's side parts shared by both HA protocols (master.HAService, autoswitch_master.AutoSwitchHAService).

- `SlaveListener`: the haListenPort server and the registry of connected slaves; wakes every
  connection's write loop when the store dispatches (a new append) and closes them all on a role change
  or at close.
- `AckWaiters`: sends waiting for slaves' acks (SYNC_MASTER, allAckInSyncStateSet), a heap by the end
  offset they wait for; each protocol says when an end offset is reached.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import structlog

if TYPE_CHECKING:
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)


class SlaveConnection(Protocol):
    """What the listener needs of one protocol's per-slave connection."""

    @property
    def transport(self) -> asyncio.Transport: ...

    @property
    def data(self) -> asyncio.Event: ...  # set on every append: the write loop has bytes to send

    def close(self, reason: str) -> None: ...


C = TypeVar("C", bound=SlaveConnection)


class SlaveListener(Generic[C]):
    def __init__(self, store: MessageStore, protocol: str | None = None) -> None:
        self.store = store
        self.protocol = protocol  # named in the log; None for classic HA
        self.connections: set[C] = set()  # the connected slaves (the protocol's connections add themselves)
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int, connection: Callable[[], asyncio.Protocol]) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(connection, host, port)
        self.store.add_dispatch_listener(self._on_dispatch)
        extra = {"protocol": self.protocol} if self.protocol else {}
        log.info("ha.listening", host=host, port=port, **extra)

    @property
    def port(self) -> int:
        """The port listened on (0 before start)."""
        return int(self._server.sockets[0].getsockname()[1]) if self._server is not None else 0

    async def close(self, also: Iterable[C] = ()) -> None:
        """Stop listening and close every connection (and `also`: peers not admitted as slaves yet)."""
        self.store.remove_dispatch_listener(self._on_dispatch)
        if self._server is not None:
            self._server.close()
            for c in list(self.connections) + list(also):
                c.transport.close()
            await self._server.wait_closed()
            self._server = None

    def drop_slaves(self) -> None:
        for c in list(self.connections):
            c.close("role change")

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.wake()

    def wake(self) -> None:
        for c in self.connections:
            c.data.set()


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class AckWaiters:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[bool]]] = []  # (end offset, seq, future)
        self._seq = 0

    async def wait(self, end_offset: int, timeout_s: float) -> bool:
        """True once `release` finds `end_offset` reached, False after `timeout_s` or at `fail_all`.
        (A timer handle answers the timeout: cheaper than asyncio.wait_for, and every SYNC run waits.)"""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._seq += 1
        heapq.heappush(self._heap, (end_offset, self._seq, fut))
        expiry = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            expiry.cancel()

    def release(self, reached: Callable[[int], bool]) -> None:
        """Answer True to the waits whose end offset is `reached` (lowest first); forget finished ones."""
        w = self._heap
        while w and (w[0][2].done() or reached(w[0][0])):
            _, _, fut = heapq.heappop(w)
            if not fut.done():
                fut.set_result(True)

    def fail_all(self) -> None:
        for _, _, fut in self._heap:
            if not fut.done():
                fut.set_result(False)
        self._heap.clear()
