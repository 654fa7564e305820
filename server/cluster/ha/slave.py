"""HAClient, the slave side of RocketMQ 4.x HA (cluster-ha.md §2.6).

Connects to the master's HA address, reports the local CommitLog end at once (as 5.x does), then
applies every frame: the bytes must continue the local CommitLog exactly (else the connection is
closed, as RocketMQ: "master pushed offset not equal the max phy offset in slave"), are appended
through the store's replica seam, their records dispatched (ConsumeQueues, index), and the new end is
reported back (the ack a SYNC_MASTER waits for). A report also goes out after haSendHeartbeatInterval
of silence; haHousekeepingInterval without a byte from the master closes the connection. Any error:
close, wait RECONNECT_S, connect again. With haAuthSecret set, the slave first waits for the master's
challenge and answers it with the HMAC proof (codec.ha AUTH_*), then reports.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict, cast

import structlog

from codec.errors import CodecError
from codec.ha import AUTH_CHALLENGE_SIZE, TransferDecoder, auth_proof, decode_challenge, encode_report
from storage.replica import ReplicaError

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)


class HAClientStats(TypedDict):
    """The slave side's replication figures (`HAClient.stats`)."""

    master: str | None  # the HA address connected to, None while not connected
    frames: int
    bytes: int
    mismatches: int  # pushes that did not continue the local CommitLog
    offset: int  # the local CommitLog end

RECONNECT_S = 1.0


class HAClient(asyncio.Protocol):
    def __init__(self, store: MessageStore, config: BrokerConfig, master_addr: Callable[[], str | None]) -> None:
        self.store = store
        self.config = config
        self.master_addr = master_addr  # the HA address to use now (config or the name server's answer)
        self.transport: asyncio.Transport | None = None
        self.decoder = TransferDecoder()
        self.connected_to: str | None = None
        self.disconnected_at: float | None = None  # time.monotonic() the last connection to a master ended
        self.last_read = 0.0
        self.last_write = 0.0
        self.frames = 0
        self.bytes = 0
        self.mismatches = 0
        self.on_applied: list[Callable[[int], None]] = []  # fn(new CommitLog end) after each frame run
        self._lost: asyncio.Future[Exception | None] | None = None  # the connection is gone (its error)
        self._running = False
        self._challenge: bytearray | None = None  # haAuthSecret: the master's challenge so far

    # ---- supervised task ----------------------------------------------------------------
    async def run(self) -> None:
        self._running = True
        loop = asyncio.get_running_loop()
        while self._running:
            addr = self.master_addr()
            if not addr:
                await asyncio.sleep(RECONNECT_S)
                continue
            host, _, port = addr.rpartition(":")
            try:
                self.decoder = TransferDecoder()
                self._lost = loop.create_future()
                await loop.create_connection(lambda: self, host, int(port))
            except OSError as e:
                log.info("ha.connect_failed", master=addr, error=str(e))
                await asyncio.sleep(RECONNECT_S)
                continue
            self.connected_to = addr
            log.info("ha.connected", master=addr, offset=self.store.commitlog_max_offset())
            try:
                await self._keepalive()
            finally:
                if self.transport is not None:
                    self.transport.close()
                self.connected_to = None
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
        tick = min(heartbeat, 1.0)
        lost = self._lost
        if lost is None:
            return
        while self._running and not lost.done():
            try:
                await asyncio.wait_for(asyncio.shield(lost), tick)
            except TimeoutError:
                pass
            now = time.monotonic()
            if lost.done():
                return
            if now - self.last_read > housekeeping:
                log.warning("ha.master_silent", master=self.connected_to, seconds=housekeeping)
                return
            if now - self.last_write > heartbeat:
                self._report()

    # ---- protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.last_read = time.monotonic()
        if self.config.ha_auth_secret:
            self._challenge = bytearray()  # report only after answering the master's challenge
            return
        self._report()

    def _answer_challenge(self, data: bytes) -> bytes | None:
        """Collect the challenge; once whole, send the proof and the first report. Returns the bytes after it."""
        buf = self._challenge
        assert buf is not None and self.transport is not None
        need = AUTH_CHALLENGE_SIZE - len(buf)
        buf += data[:need]
        if len(buf) < AUTH_CHALLENGE_SIZE:
            return None
        try:
            nonce = decode_challenge(buf)
        except CodecError as e:
            log.error("ha.auth_unexpected", master=self.connected_to, error=str(e))
            self._drop()
            return None
        self._challenge = None
        self.transport.write(auth_proof(self.config.ha_auth_secret.encode(), nonce))
        self._report()
        return data[need:]

    def _drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(exc)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        if self._challenge is not None:
            rest = self._answer_challenge(data)
            if not rest:
                return
            data = rest
        try:
            frames = self.decoder.feed(data)
        except CodecError as e:
            log.error("ha.bad_frame", master=self.connected_to, error=str(e))
            self._drop()
            return
        store = self.store
        applied = False
        for offset, body in frames:
            if not body:
                continue
            end = store.commitlog_max_offset()
            if end != 0 and offset != end:
                self.mismatches += 1
                log.error("ha.offset_mismatch", master=self.connected_to, pushed=offset, local_end=end)
                self._drop()
                return
            try:
                store.append_replica(offset, body)
            except ReplicaError as e:
                self.mismatches += 1
                log.error("ha.append_failed", master=self.connected_to, error=str(e))
                self._drop()
                return
            self.frames += 1
            self.bytes += len(body)
            applied = True
        if applied:
            try:
                store.reput()
            except Exception as e:  # the bytes are stored; the next frame retries the dispatch
                log.exception("ha.reput_failed", error=repr(e))
            self._report()
            end = store.commitlog_max_offset()
            for fn in self.on_applied:
                fn(end)

    def _report(self) -> None:
        if self.transport is not None and not self.transport.is_closing() and self._challenge is None:
            self.transport.write(encode_report(self.store.commitlog_max_offset()))
            self.last_write = time.monotonic()

    def stats(self) -> HAClientStats:
        return {"master": self.connected_to, "frames": self.frames, "bytes": self.bytes,
                "mismatches": self.mismatches, "offset": self.store.commitlog_max_offset()}
