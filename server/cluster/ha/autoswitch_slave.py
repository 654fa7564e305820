"""AutoSwitchHAClient, the slave side of RocketMQ 5's AutoSwitch HA (controller mode; cluster-ha.md §4.6;
Apache's AutoSwitchHAClient). Classic mode keeps `slave.HAClient`.

Connects to the master's HA address and sends its handshake (its controller brokerId, isSyncFromLastFile).
The master's answer lists its epoch entries and its CommitLog end: with no epoch of its own the slave
keeps what it has; else it cuts its CommitLog (and ConsumeQueues: the store's replica seam) and its epoch
file back to the consistent point (storage.epoch_file.consistent_point), the tail a former master wrote
that the new epoch does not hold (`truncated` lists each cut). Then it acks its end and applies transfer
frames: bytes must continue its CommitLog (else the connection is dropped, as Apache's "master pushed
offset not equal the max phy offset in slave"); a frame of a new epoch appends (epoch, epochStartOffset)
to the epoch file; each applied frame is acked. Each frame's confirmOffset (capped at the local end) is how
far this slave dispatches (`on_confirm`: ReplicaRole hands it to the store), as Apache's slave does. An ack
also goes out after haSendHeartbeatInterval of silence; haHousekeepingInterval without a byte from the
master drops the connection; any error: drop, wait RECONNECT_S, connect and handshake again (that loop and
the keepalive: link.MasterLink).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import structlog

from codec.autoswitch_ha import (
    EpochEntry,
    HAConnectionState,
    MasterFrameDecoder,
    MasterHandshake,
    MasterTransfer,
    SlaveHandshake,
    encode_slave_ack,
    encode_slave_handshake,
)
from codec.errors import CodecError
from server.cluster.ha.link import MasterLink, ReplicaApplier
from storage.epoch_file import EpochFile, consistent_point

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)


class AutoSwitchClientStats(TypedDict):
    protocol: str
    master: str | None
    state: str
    frames: int
    bytes: int
    mismatches: int
    offset: int
    confirm_offset: int
    truncated: list[list[int]]  # [from offset, dropped bytes] of each cut at a handshake
    epochs: list[list[int]]


class AutoSwitchHAClient:
    """The AutoSwitch protocol on a `MasterLink`: handshake, truncation, epochs, acks, transfer frames."""

    def __init__(self, store: MessageStore, config: BrokerConfig, epochs: EpochFile,
                 master_addr: Callable[[], str | None], broker_id: Callable[[], int]) -> None:
        self.store = store
        self.config = config
        self.epochs = epochs
        self.broker_id = broker_id
        # run / stop / connected_to; the counters and on_applied
        self.link = MasterLink(config, master_addr, self, store.commitlog_max_offset, protocol="AutoSwitch")
        self.applier = ReplicaApplier(store, self.link)
        self.decoder = MasterFrameDecoder()
        self.state = HAConnectionState.READY
        self.confirm_offset = 0
        self.received_epoch = -1
        self.truncated: list[list[int]] = []
        self.on_truncated: list[Callable[[int, int], None]] = []  # fn(offset, dropped bytes) after a cut
        self.on_confirm: Callable[[], None] | None = None  # after a frame moved confirm_offset (the dispatch limit)

    # ---- MasterSession ----------------------------------------------------------------------------
    def connecting(self) -> None:
        self.decoder = MasterFrameDecoder()

    def connected(self) -> None:
        self.state = HAConnectionState.HANDSHAKE
        self.received_epoch = -1
        self.link.send(encode_slave_handshake(SlaveHandshake(self.broker_id(), self.config.sync_from_last_file)))

    def heartbeat(self) -> None:
        if self.state == HAConnectionState.TRANSFER:
            self._ack()

    def ended(self) -> None:
        self.state = HAConnectionState.READY

    def _drop(self) -> None:
        self.link.drop()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except CodecError as e:
            log.error("ha.bad_frame", master=self.link.connected_to, error=str(e))
            self._drop()
            return
        applied = False
        for f in frames:
            if isinstance(f, MasterHandshake):
                if self.state != HAConnectionState.HANDSHAKE or not self._truncate(f):
                    self._drop()
                    return
                self.state = HAConnectionState.TRANSFER
                self._ack()
                continue
            if self.state != HAConnectionState.TRANSFER:
                log.error("ha.state_mismatch", master=self.link.connected_to, slave_state=self.state.name)
                self._drop()
                return
            if not self._apply(f):
                self._drop()
                return
            applied = applied or bool(f.body)
        if applied:
            self.applier.applied(self._ack)

    def _truncate(self, h: MasterHandshake) -> bool:
        """doTruncate: cut to the consistent point with the master's epochs; False when there is none."""
        point, dropped = truncate_to_master(self.store, self.epochs, h, self.link.connected_to)
        if point < 0:
            return False
        if dropped:
            self.truncated.append([point, dropped])
            for fn in self.on_truncated:
                fn(point, dropped)
        return True

    def _apply(self, t: MasterTransfer) -> bool:
        store = self.store
        if t.body and not self.applier.continues(t.offset):
            return False
        # a new epoch is recorded on any transfer frame, an empty one too (as Apache's client does): a slave
        # that replicated nothing still holds the master's epoch, so when it is elected its epoch file goes
        # on from it and the old master, rejoining, finds their consistent point instead of none
        if t.epoch != self.received_epoch:
            self.received_epoch = t.epoch
            if not self.epochs.append(EpochEntry(t.epoch, t.epoch_start_offset)):
                return False
        if t.body and not self.applier.append(t.offset, t.body):
            return False
        confirm = min(t.confirm_offset, store.commitlog_max_offset())
        if confirm != self.confirm_offset:
            self.confirm_offset = confirm
            if self.on_confirm is not None:  # before the frames' reput: what the master confirmed dispatches at once
                self.on_confirm()
        return True

    def _ack(self) -> None:
        self.link.send(encode_slave_ack(self.store.commitlog_max_offset()))

    def stats(self) -> AutoSwitchClientStats:
        a = self.applier
        return {"protocol": "AutoSwitch", "master": self.link.connected_to, "state": self.state.name,
                "frames": a.frames, "bytes": a.bytes, "mismatches": a.mismatches, "offset": self.store.commitlog_max_offset(),
                "confirm_offset": self.confirm_offset, "truncated": self.truncated,
                "epochs": [[e.epoch, e.start_offset] for e in self.epochs.entries]}


def truncate_to_master(store: MessageStore, epochs: EpochFile, h: MasterHandshake, master: str | None) -> tuple[int, int]:
    """Cut the CommitLog (and ConsumeQueues) and the epoch file to the consistent point with the master's
    handshake: (the point, bytes dropped); (-1, 0) when there is none. No local epoch: nothing is cut."""
    end = store.commitlog_max_offset()
    if not epochs.entries:
        log.info("ha.autoswitch_handshake", master=master, master_epochs=[tuple(e) for e in h.entries],
                 master_end=h.max_offset, local_end=end, truncate="none: no local epoch")
        return end, 0
    point = consistent_point(epochs.entries, end, list(h.entries), h.max_offset)
    log.info("ha.autoswitch_handshake", master=master, master_epochs=[tuple(e) for e in h.entries],
             master_end=h.max_offset, local_epochs=[tuple(e) for e in epochs.entries], local_end=end,
             consistent_point=point)
    if point < 0:
        log.error("ha.no_consistent_point", master=master, master_epochs=[tuple(e) for e in h.entries],
                  local_epochs=[tuple(e) for e in epochs.entries])
        return -1, 0
    dropped = store.truncate_replica(point) if point < end else 0
    if dropped:
        log.warning("ha.autoswitch_truncated", master=master, to_offset=point, dropped_bytes=dropped)
    epochs.truncate_suffix_by_offset(point)
    return point, dropped


async def truncate_before_start(store: MessageStore, epochs: EpochFile, addr: str, broker_id: int,
                                timeout_s: float = 3.0) -> int:
    """Before the scheduler's parts load (ReplicaRole.prepare): one handshake with the master at `addr` and the
    cut it implies, so no timer state is built on bytes that go. Returns the bytes dropped; 0 when the master
    cannot be reached in `timeout_s` (the running client's handshake cuts instead)."""
    host, _, port = addr.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_s)
    except (OSError, TimeoutError, ValueError) as e:
        log.info("ha.pre_handshake_skipped", master=addr, error=repr(e))
        return 0
    try:
        writer.write(encode_slave_handshake(SlaveHandshake(broker_id)))
        decoder = MasterFrameDecoder()
        deadline = time.monotonic() + timeout_s
        while True:
            data = await asyncio.wait_for(reader.read(1 << 16), max(0.01, deadline - time.monotonic()))
            if not data:
                return 0
            for f in decoder.feed(data):
                if isinstance(f, MasterHandshake):
                    _point, dropped = truncate_to_master(store, epochs, f, addr)
                    return dropped
    except (OSError, TimeoutError, CodecError) as e:
        log.info("ha.pre_handshake_failed", master=addr, error=repr(e))
        return 0
    finally:
        writer.close()
