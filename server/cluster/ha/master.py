"""HAService, the master side of RocketMQ 4.x HA (cluster-ha.md §2.5, §2.7).

Listens on haListenPort. A slave connects and reports its max CommitLog offset (8 bytes); the
connection then streams `[phyOffset][size][raw CommitLog bytes]` from that offset (from the start of
the master's last CommitLog file when the slave reports 0), at most haTransferBatchSize per frame, a
frame never crossing a file; an empty frame after haSendHeartbeatInterval of silence. Every report
is an ack: `push2slave_max` is the furthest offset any slave confirmed (one value for all slaves, as
RocketMQ); SYNC_MASTER sends wait on it (`wait_replicated`). A report beyond the master's end drops
the connection (apache/rocketmq#3015); so does haHousekeepingInterval without a byte from the slave.

With haAuthSecret set (ours; codec.ha's AUTH_* layout) the master first sends a random challenge and
nothing else until the peer's HMAC proof arrives and matches; a wrong proof, or none within
AUTH_TIMEOUT_S, drops the peer (`ha.auth_failed`). Only an authenticated peer counts as a slave.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, TypedDict, cast

import structlog

from codec.errors import CodecError
from codec.ha import (
    AUTH_NONCE_SIZE,
    AUTH_PROOF_SIZE,
    ReportDecoder,
    encode_challenge,
    encode_header,
    proof_matches,
)
from server.cluster.ha.slaves import AckWaiters, SlaveListener

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)


class HAServiceStats(TypedDict):
    """The master side's replication figures (`HAService.stats`)."""

    slaves: int
    push2slave_max: int  # the furthest CommitLog offset any slave confirmed
    slave_acks: dict[str, int]  # each connected slave's confirmed offset, by its address


WAIT_DATA_S = 0.1  # a connection with nothing to send sleeps at most this long (woken by appends)
AUTH_TIMEOUT_S = 5.0  # haAuthSecret: a peer that has not proved the secret by then is dropped


class HAConnection(asyncio.Protocol):
    def __init__(self, service: HAService) -> None:
        self.svc = service
        self.transport: asyncio.Transport  # connection_made
        self.peer = None
        self.decoder = ReportDecoder()
        self.request_offset = -1  # the first report
        self.ack_offset = -1
        self.last_read = time.monotonic()
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = False
        self.reported = asyncio.Event()
        self.data = asyncio.Event()  # set by the service on every append
        self.task: asyncio.Task[None] | None = None
        secret = service.config.ha_auth_secret
        self.secret = secret.encode() if secret else None
        self.nonce = b""
        self.proof = bytearray()  # the peer's proof so far (haAuthSecret)
        self.authenticated = self.secret is None
        self.auth_timer: asyncio.TimerHandle | None = None

    # ---- protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        if self.authenticated:
            self._admit()
            return
        self.svc.pending.add(self)
        self.nonce = os.urandom(AUTH_NONCE_SIZE)
        self.transport.write(encode_challenge(self.nonce))
        self.auth_timer = asyncio.get_running_loop().call_later(AUTH_TIMEOUT_S, self._auth_failed,
                                                                f"no proof within {AUTH_TIMEOUT_S:.0f}s")

    def _admit(self) -> None:
        self.svc.pending.discard(self)
        self.svc.slaves.connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._write_loop(), name=f"ha-write-{self.peer}")
        log.info("ha.slave_connected", peer=self.peer, slaves=len(self.svc.slaves.connections),
                 authenticated=self.secret is not None)

    def _auth_failed(self, reason: str) -> None:
        if not self.closed:
            log.warning("ha.auth_failed", peer=self.peer, reason=reason)
            self.svc.auth_failures += 1
            self.closed = True
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        if not self.authenticated:
            if self.closed or self.secret is None:
                return
            need = AUTH_PROOF_SIZE - len(self.proof)
            self.proof += data[:need]
            data = data[need:]
            if len(self.proof) < AUTH_PROOF_SIZE:
                return
            if self.auth_timer is not None:
                self.auth_timer.cancel()
            if not proof_matches(self.secret, self.nonce, self.proof):
                self._auth_failed("wrong proof of the HA secret")
                return
            self.authenticated = True
            self._admit()
            if not data:
                return
        try:
            value = self.decoder.feed(data)
        except CodecError as e:
            self.close(f"bad report: {e}")
            return
        if value is None:
            return
        if value > self.svc.store.commitlog_max_offset():
            self.close(f"slave reported {value}, beyond the master's CommitLog end "
                       f"{self.svc.store.commitlog_max_offset()}")
            return
        if self.request_offset < 0:
            self.request_offset = value
            self.reported.set()
        self.ack_offset = value
        self.svc.on_ack(value)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        if not self.authenticated:
            self.svc.pending.discard(self)
            self.closed = True
            return
        self.closed = True
        self.svc.slaves.connections.discard(self)
        self.writable.set()
        self.reported.set()
        self.svc.slaves.wake()
        if self.task is not None:
            self.task.cancel()
        log.info("ha.slave_disconnected", peer=self.peer, ack=self.ack_offset, error=repr(exc) if exc else None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def close(self, reason: str) -> None:
        if not self.closed:
            log.warning("ha.connection_dropped", peer=self.peer, reason=reason)
            self.closed = True
            self.transport.close()

    async def wait_data(self, timeout: float) -> None:
        ev = self.data
        if not ev.is_set():
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except TimeoutError:
                return
        ev.clear()

    # ---- transfer -----------------------------------------------------------------------
    async def _write_loop(self) -> None:
        svc = self.svc
        cfg = svc.config
        try:
            await self.reported.wait()
            if self.closed:
                return
            store = svc.store
            if self.request_offset == 0:
                end = store.commitlog_max_offset()
                nxt = max(0, end - end % store.commitlog.file_size)
            else:
                nxt = self.request_offset
            heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
            housekeeping_s = cfg.ha_housekeeping_interval / 1000.0
            batch = cfg.ha_transfer_batch_size
            last_write = 0.0
            while not self.closed:
                data = store.replica_data(nxt, batch)
                now = time.monotonic()
                if data:
                    n = len(data)
                    self.transport.write(encode_header(nxt, n) + bytes(data))
                    nxt += n
                    last_write = now
                    if not self.writable.is_set():
                        await self.writable.wait()
                    continue
                if now - self.last_read > housekeeping_s:
                    self.close(f"no report for {housekeeping_s:.0f}s")
                    return
                if now - last_write > heartbeat_s:
                    self.transport.write(encode_header(nxt, 0))
                    last_write = now
                await self.wait_data(WAIT_DATA_S)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the connection ends; the slave reconnects
            log.exception("ha.transfer_failed", peer=self.peer, error=repr(e))
            self.close(f"transfer failed: {e!r}")


class HAService:
    def __init__(self, store: MessageStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config
        self.slaves: SlaveListener[HAConnection] = SlaveListener(store)
        self.pending: set[HAConnection] = set()  # connected, the HA secret not proved yet
        self.auth_failures = 0  # peers dropped for a wrong or missing proof (haAuthSecret)
        self.push2slave_max = 0
        self.waiters = AckWaiters()

    async def start(self, host: str, port: int) -> None:
        await self.slaves.start(host, port, lambda: HAConnection(self))

    async def close(self) -> None:
        await self.slaves.close(also=self.pending)
        self.waiters.fail_all()

    # ---- acks / SYNC_MASTER ---------------------------------------------------------------
    def on_ack(self, offset: int) -> None:
        if offset > self.push2slave_max:
            self.push2slave_max = offset
            self.waiters.release(lambda end: end <= offset)

    def slave_ok(self, end_offset: int) -> bool:
        """isSlaveOK: a slave is connected and not more than haSlaveFallbehindMax behind."""
        return bool(self.slaves.connections) and end_offset - self.push2slave_max < self.config.ha_slave_fallbehind_max

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> bool:
        """True once a slave acked `end_offset`, False after `timeout_s`."""
        if self.push2slave_max >= end_offset:
            return True
        return await self.waiters.wait(end_offset, timeout_s)

    def stats(self) -> HAServiceStats:
        return {"slaves": len(self.slaves.connections), "push2slave_max": self.push2slave_max,
                "slave_acks": {str(c.peer): c.ack_offset for c in self.slaves.connections}}
