"""HAClient, the slave side of RocketMQ 4.x HA (cluster-ha.md §2.6).

Connects to the master's HA address, reports the local CommitLog end at once (as 5.x does), then
applies every frame: the bytes must continue the local CommitLog exactly (else the connection is
closed, as RocketMQ: "master pushed offset not equal the max phy offset in slave"), are appended
through the store's replica seam, their records dispatched (ConsumeQueues, index), and the new end is
reported back (the ack a SYNC_MASTER waits for). A report also goes out after haSendHeartbeatInterval
of silence; haHousekeepingInterval without a byte from the master closes the connection. Any error:
close, wait RECONNECT_S, connect again (that loop and the keepalive: link.MasterLink). With
haAuthSecret set, the slave first waits for the master's challenge and answers it with the HMAC proof
(codec.ha AUTH_*), then reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import structlog

from codec.errors import CodecError
from codec.ha import AUTH_CHALLENGE_SIZE, TransferDecoder, auth_proof, decode_challenge, encode_report
from server.cluster.ha.link import MasterLink, ReplicaApplier

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


class HAClient:
    """The classic protocol on a `MasterLink`: reports, the auth answer, and applying transfer frames."""

    def __init__(self, store: MessageStore, config: BrokerConfig, master_addr: Callable[[], str | None]) -> None:
        self.store = store
        self.config = config
        self.link = MasterLink(config, master_addr, self, store.commitlog_max_offset)  # run / stop / connected_to
        self.applier = ReplicaApplier(store, self.link)  # the counters and on_applied
        self.decoder = TransferDecoder()
        self._challenge: bytearray | None = None  # haAuthSecret: the master's challenge so far

    # ---- MasterSession --------------------------------------------------------------------
    def connecting(self) -> None:
        self.decoder = TransferDecoder()

    def connected(self) -> None:
        if self.config.ha_auth_secret:
            self._challenge = bytearray()  # report only after answering the master's challenge
            return
        self._report()

    def heartbeat(self) -> None:
        self._report()

    def ended(self) -> None:
        pass

    def _answer_challenge(self, data: bytes) -> bytes | None:
        """Collect the challenge; once whole, send the proof and the first report. Returns the bytes after it."""
        buf = self._challenge
        assert buf is not None
        need = AUTH_CHALLENGE_SIZE - len(buf)
        buf += data[:need]
        if len(buf) < AUTH_CHALLENGE_SIZE:
            return None
        try:
            nonce = decode_challenge(buf)
        except CodecError as e:
            log.error("ha.auth_unexpected", master=self.link.connected_to, error=str(e))
            self._drop()
            return None
        self._challenge = None
        self.link.send(auth_proof(self.config.ha_auth_secret.encode(), nonce))
        self._report()
        return data[need:]

    def _drop(self) -> None:
        self.link.drop()

    def data_received(self, data: bytes) -> None:
        if self._challenge is not None:
            rest = self._answer_challenge(data)
            if not rest:
                return
            data = rest
        try:
            frames = self.decoder.feed(data)
        except CodecError as e:
            log.error("ha.bad_frame", master=self.link.connected_to, error=str(e))
            self._drop()
            return
        applied = False
        for offset, body in frames:
            if not body:
                continue
            if not self.applier.continues(offset) or not self.applier.append(offset, body):
                self._drop()
                return
            applied = True
        if applied:
            self.applier.applied(self._report)

    def _report(self) -> None:
        if self._challenge is None:
            self.link.send(encode_report(self.store.commitlog_max_offset()))

    def stats(self) -> HAClientStats:
        a = self.applier
        return {"master": self.link.connected_to, "frames": a.frames, "bytes": a.bytes,
                "mismatches": a.mismatches, "offset": self.store.commitlog_max_offset()}
