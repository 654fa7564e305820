"""MasterLink, a slave's connection to its master's HA port, and ReplicaApplier, the store side of what it
receives: shared by both HA protocols.

The link owns what does not depend on the protocol: the supervised loop that connects to the address
the slave should follow now (config or the name server's / controller's answer), waits RECONNECT_S after
a failure or a lost connection and connects again; the future that says the connection is gone; the
keepalive that drops a master silent for haHousekeepingInterval and asks for a heartbeat after
haSendHeartbeatInterval without a write; and the connection's logging. What goes over the wire is the
`MasterSession`'s: classic 4.x HA (slave.HAClient) or AutoSwitch HA (autoswitch_slave.AutoSwitchHAClient).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

import structlog

from storage.replica import ReplicaError

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

RECONNECT_S = 1.0


class MasterSession(Protocol):
    """What one HA protocol's slave side does with a connection its `MasterLink` holds."""

    def connecting(self) -> None:
        """Before each connection attempt: fresh decoder."""

    def connected(self) -> None:
        """The connection is made (`link.transport` is set): the protocol's first bytes."""

    def data_received(self, data: bytes) -> None:
        """Bytes from the master (`link.last_read` already updated)."""

    def heartbeat(self) -> None:
        """haSendHeartbeatInterval passed without a write."""

    def ended(self) -> None:
        """The connection is over: back to the protocol's state before a connection."""


class MasterLink(asyncio.Protocol):
    def __init__(self, config: BrokerConfig, master_addr: Callable[[], str | None], session: MasterSession,
                 local_end: Callable[[], int], protocol: str | None = None) -> None:
        self.config = config
        self.master_addr = master_addr  # the HA address to use now
        self.session = session
        self.local_end = local_end  # the local CommitLog end, for the log
        self.protocol = protocol  # named in the log; None for classic HA
        self.transport: asyncio.Transport | None = None
        self.connected_to: str | None = None  # the HA address connected to, None while not connected
        self.disconnected_at: float | None = None  # time.monotonic() the last connection to a master ended
        self.last_read = 0.0
        self.last_write = 0.0
        self._lost: asyncio.Future[Exception | None] | None = None  # the connection is gone (its error)
        self._running = False

    # ---- supervised task ----------------------------------------------------------------
    async def run(self) -> None:
        self._running = True
        loop = asyncio.get_running_loop()
        extra = {"protocol": self.protocol} if self.protocol else {}
        while self._running:
            addr = self.master_addr()
            if not addr:
                await asyncio.sleep(RECONNECT_S)
                continue
            host, _, port = addr.rpartition(":")
            try:
                self.session.connecting()
                self._lost = loop.create_future()
                await loop.create_connection(lambda: self, host, int(port))
            except OSError as e:
                log.info("ha.connect_failed", master=addr, error=str(e))
                await asyncio.sleep(RECONNECT_S)
                continue
            self.connected_to = addr
            log.info("ha.connected", master=addr, offset=self.local_end(), **extra)
            try:
                await self._keepalive()
            finally:
                if self.transport is not None:
                    self.transport.close()
                self.connected_to = None
                self.session.ended()
                self.disconnected_at = time.monotonic()
            if self._running:
                await asyncio.sleep(RECONNECT_S)

    def stop(self) -> None:
        self._running = False
        if self.transport is not None:
            self.transport.close()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    async def _keepalive(self) -> None:
        heartbeat = self.config.ha_send_heartbeat_interval / 1000.0
        housekeeping = self.config.ha_housekeeping_interval / 1000.0
        lost = self._lost
        if lost is None:
            return
        while self._running and not lost.done():
            try:
                await asyncio.wait_for(asyncio.shield(lost), min(heartbeat, 1.0))
            except TimeoutError:
                pass
            if lost.done():
                return
            now = time.monotonic()
            if now - self.last_read > housekeeping:
                log.warning("ha.master_silent", master=self.connected_to, seconds=housekeeping)
                return
            if now - self.last_write > heartbeat:
                self.session.heartbeat()

    # ---- the connection -------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write to the master unless the connection is closing."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.last_write = time.monotonic()

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.last_read = time.monotonic()
        self.session.connected()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(exc)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        self.session.data_received(data)


class ReplicaApplier:
    """A slave's bytes from the master into its store, for either protocol: each push must continue the
    local CommitLog exactly (else the connection is dropped, as Apache's "master pushed offset not equal
    the max phy offset in slave"), is appended through the store's replica seam, and after a run of
    frames the protocol acks, the records are dispatched (ConsumeQueues, index) and `on_applied` hears
    the new end."""

    def __init__(self, store: MessageStore, link: MasterLink) -> None:
        self.store = store
        self.link = link  # names the master in the log
        self.frames = 0
        self.bytes = 0
        self.mismatches = 0  # pushes that did not continue the local CommitLog
        self.on_applied: list[Callable[[int], None]] = []  # fn(new CommitLog end) after each frame run

    def continues(self, offset: int) -> bool:
        """Whether a push at `offset` continues the local CommitLog (an empty one continues anything)."""
        end = self.store.commitlog_max_offset()
        if end != 0 and offset != end:
            self.mismatches += 1
            log.error("ha.offset_mismatch", master=self.link.connected_to, pushed=offset, local_end=end)
            return False
        return True

    def append(self, offset: int, body: bytes) -> bool:
        try:
            self.store.append_replica(offset, body)
        except ReplicaError as e:
            self.mismatches += 1
            log.error("ha.append_failed", master=self.link.connected_to, error=str(e))
            return False
        self.frames += 1
        self.bytes += len(body)
        return True

    def applied(self, ack: Callable[[], None]) -> None:
        """After a run of appended frames: `ack`, dispatch them, tell `on_applied`.

        The ack goes out first (as Apache's slave reports right after the append; its reput is another
        thread), so the master answers its waiting SYNC sends while this slave dispatches: the two
        brokers work side by side instead of in turn. Nothing here can see the difference: the ack
        covers bytes already in the CommitLog, and the dispatch finishes in this same callback, before
        this broker's loop serves any request (a pull, a query) that came after the ack."""
        store = self.store
        ack()
        try:
            store.reput()
        except Exception as e:  # the bytes are stored; the next frame retries the dispatch
            log.exception("ha.reput_failed", error=repr(e))
        end = store.commitlog_max_offset()
        for fn in self.on_applied:
            fn(end)
