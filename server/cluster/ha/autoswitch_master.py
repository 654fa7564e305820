"""AutoSwitchHAService, the master side of RocketMQ 5's AutoSwitch HA (controller mode; cluster-ha.md
§4.5-4.6; Apache's AutoSwitchHAService / AutoSwitchHAConnection). Classic mode keeps `master.HAService`.

On haListenPort, per slave (`AutoSwitchConnection`):
1. the slave's handshake names its brokerId (the controller's id) and whether an empty slave starts at
   the last CommitLog file; the master answers its epoch entries, max offset and last epoch;
2. the slave truncates to the consistent point and reports its offset (an ack frame): the transfer
   starts there (an empty slave: the master's first, or with isSyncFromLastFile its last, file);
3. transfer frames carry (epoch, epochStartOffset) of the bytes they hold and never cross an epoch's end,
   plus the master's confirmOffset; an empty one after haSendHeartbeatInterval of silence;
4. every ack is that slave's ack offset.

SyncStateSet (the controller's, given by `members()`: (set, this broker's id)): a slave outside it whose
ack reaches the confirmOffset and the start of the current epoch is proposed (`on_expand(id)`); a member
not caught up (ack at the master's end) for haMaxTimeSlaveNotCatchup, or not connected, is dropped by
`shrink()`. confirmOffset = min(own end, the connected members' acks); a member not connected keeps the
previous value. With allAckInSyncStateSet a send waits (`wait_all_acked`) for every member's ack, and the
store dispatches only up to the confirmOffset (`dispatch_limit`, RocketMQ 5.3's getReputEndOffset /
CommitLog.getConfirmOffset: the end of a lone master or without allAckInSyncStateSet); every ack and every
change of the set calls `on_confirm` (ReplicaRole hands the new limit to the store), so consumers see a
message once every member holds it, woken by the ack that completes it. Transfer frames carry that same
confirmOffset: a slave dispatches up to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict, cast

import structlog

from codec.autoswitch_ha import (
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    encode_master_handshake,
    encode_transfer_header,
)
from codec.errors import CodecError
from server.cluster.ha.slaves import AckWaiters, SlaveListener
from storage.epoch_file import NO_END, EpochFile

if TYPE_CHECKING:
    from server.config import BrokerConfig
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

WAIT_DATA_S = 0.1  # a connection with nothing to send sleeps at most this long (woken by appends and acks)
# fn() -> (the SyncStateSet's broker ids, this broker's controller id)
Members = Callable[[], tuple[frozenset[int], int]]


class AutoSwitchStats(TypedDict):
    protocol: str
    slaves: int
    push2slave_max: int
    confirm_offset: int
    slave_acks: dict[str, int]  # by the slave's brokerId
    epochs: list[list[int]]


class AutoSwitchConnection(asyncio.Protocol):
    def __init__(self, service: AutoSwitchHAService) -> None:
        self.svc = service
        self.transport: asyncio.Transport  # connection_made
        self.peer: object = None
        self.decoder = SlaveFrameDecoder()
        self.state = HAConnectionState.HANDSHAKE
        self.slave_id = -1
        self.sync_from_last_file = False
        self.async_learner = False
        self.request_offset = -1
        self.ack_offset = -1
        self.last_read = time.monotonic()
        self.closed = False
        self.handshaken = asyncio.Event()  # the slave's handshake came: answer it
        self.reported = asyncio.Event()  # its first ack came: transfer from there
        self.data = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        self.svc.slaves.connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._write_loop(), name=f"autoswitch-write-{self.peer}")

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except CodecError as e:
            self.close(f"bad frame: {e}")
            return
        for f in frames:
            if isinstance(f, SlaveHandshake):
                self.slave_id, self.sync_from_last_file, self.async_learner = (
                    f.slave_broker_id, f.sync_from_last_file, f.async_learner)
                self.state = HAConnectionState.HANDSHAKE
                self.request_offset = -1  # a new exchange: the transfer starts where the next ack says
                self.reported.clear()
                log.info("ha.autoswitch_handshake", peer=self.peer, slave_id=f.slave_broker_id,
                         sync_from_last_file=f.sync_from_last_file, async_learner=f.async_learner)
                self.handshaken.set()
            elif isinstance(f, SlaveAck):
                self._on_ack(f.max_offset)

    def _on_ack(self, offset: int) -> None:
        end = self.svc.store.commitlog_max_offset()
        if offset > end:
            self.close(f"slave {self.slave_id} acked {offset}, beyond the master's CommitLog end {end}")
            return
        self.state = HAConnectionState.TRANSFER
        self.ack_offset = offset
        if self.request_offset < 0:
            self.request_offset = offset
            self.reported.set()
        self.svc.on_ack(self, offset, end)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.svc.slaves.connections.discard(self)
        self.svc.on_disconnect(self)
        self.handshaken.set()
        self.reported.set()
        self.writable.set()
        if self.task is not None:
            self.task.cancel()
        log.info("ha.slave_disconnected", peer=self.peer, slave_id=self.slave_id, ack=self.ack_offset,
                 error=repr(exc) if exc else None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def close(self, reason: str) -> None:
        if not self.closed:
            log.warning("ha.connection_dropped", peer=self.peer, slave_id=self.slave_id, reason=reason)
            self.closed = True
            self.transport.close()

    async def _wait_data(self, timeout: float) -> None:
        if not self.data.is_set():
            try:
                await asyncio.wait_for(self.data.wait(), timeout)
            except TimeoutError:
                return
        self.data.clear()

    def _start_offset(self) -> int:
        store = self.svc.store
        if self.request_offset != 0:
            return self.request_offset
        if self.sync_from_last_file:
            end = store.commitlog_max_offset()
            return max(0, end - end % store.commitlog.file_size)
        return store.commitlog_min_offset()

    async def _write_loop(self) -> None:
        svc, cfg = self.svc, self.svc.config
        heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        housekeeping_s = cfg.ha_housekeeping_interval / 1000.0
        try:
            while not self.closed:  # a slave may handshake again (a new handshake restarts the exchange)
                await self.handshaken.wait()
                if self.closed:
                    return
                self.handshaken.clear()
                epochs = svc.epochs
                self.transport.write(encode_master_handshake(MasterHandshake(
                    svc.store.commitlog_max_offset(), epochs.last_epoch, tuple(epochs.entries))))
                while not self.reported.is_set():
                    try:
                        await asyncio.wait_for(self.reported.wait(), housekeeping_s)
                    except TimeoutError:
                        self.close(f"no report for {housekeeping_s:.0f}s after the handshake")
                        return
                if self.closed:
                    return
                await self._transfer(self._start_offset(), heartbeat_s, housekeeping_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the connection ends; the slave reconnects
            log.exception("ha.transfer_failed", peer=self.peer, error=repr(e))
            self.close(f"transfer failed: {e!r}")

    async def _transfer(self, nxt: int, heartbeat_s: float, housekeeping_s: float) -> None:
        svc = self.svc
        store, epochs, batch = svc.store, svc.epochs, svc.config.ha_transfer_batch_size
        entry = epochs.find_by_offset(nxt) or epochs.first() or EpochEntry(0, 0)
        end = epochs.end_of(entry.epoch) if epochs.entries else NO_END
        last_write = 0.0
        log.info("ha.autoswitch_transfer_from", slave_id=self.slave_id, offset=nxt, epoch=entry.epoch)
        while not self.closed and not self.handshaken.is_set():
            if nxt >= end:
                following = epochs.next_after(entry.epoch)
                if following is None:
                    end = NO_END
                else:
                    entry, end = following, epochs.end_of(following.epoch)
                continue
            data = store.replica_data(nxt, min(batch, end - nxt))
            now = time.monotonic()
            if data:
                n = len(data)
                svc.last_master_max[self] = store.commitlog_max_offset()
                self.transport.write(encode_transfer_header(nxt, n, entry.epoch, entry.start_offset,
                                                            svc.confirm_for_slaves()) + bytes(data))
                nxt += n
                last_write = now
                if not self.writable.is_set():
                    await self.writable.wait()
                continue
            if self.ack_offset >= nxt:
                svc.caught_up(self)  # nothing to send and the slave has it all
            if now - self.last_read > housekeeping_s:
                self.close(f"no report for {housekeeping_s:.0f}s")
                return
            if now - last_write > heartbeat_s:
                self.transport.write(encode_transfer_header(nxt, 0, entry.epoch, entry.start_offset,
                                                            svc.confirm_for_slaves()))
                last_write = now
            await self._wait_data(WAIT_DATA_S)


class AutoSwitchHAService:
    def __init__(self, store: MessageStore, config: BrokerConfig, epochs: EpochFile, members: Members) -> None:
        self.store = store
        self.config = config
        self.epochs = epochs
        self.members = members
        self.slaves: SlaveListener[AutoSwitchConnection] = SlaveListener(store, protocol="AutoSwitch")
        self.caught_up_at: dict[int, float] = {}  # slave brokerId -> time.monotonic() it last had everything
        self.last_master_max: dict[AutoSwitchConnection, int] = {}  # the master's end at its last transfer
        self.on_expand: Callable[[int], None] | None = None  # propose adding a caught-up slave to the set
        self.on_confirm: Callable[[], None] | None = None  # after an ack or a change of the set: the limit may move
        self.push2slave_max = 0
        self._confirm = store.commitlog_max_offset()  # what this broker held when it became master (reset_confirm)
        self.waiters = AckWaiters()

    async def start(self, host: str, port: int) -> None:
        await self.slaves.start(host, port, lambda: AutoSwitchConnection(self))

    async def close(self) -> None:
        await self.slaves.close()
        self.waiters.fail_all()

    # ---- acks -----------------------------------------------------------------------------------
    def on_ack(self, conn: AutoSwitchConnection, offset: int, end: int) -> None:
        self.push2slave_max = max(self.push2slave_max, offset)
        if not conn.async_learner and offset >= self.last_master_max.get(conn, end):
            self.caught_up(conn)
            members, _me = self.members()
            if (conn.slave_id not in members and offset >= self.confirm_offset()
                    and offset >= (self.epochs.last() or EpochEntry(0, 0)).start_offset
                    and self.on_expand is not None):
                self.on_expand(conn.slave_id)
        conn.data.set()
        self.release()

    def on_disconnect(self, conn: AutoSwitchConnection) -> None:
        self.last_master_max.pop(conn, None)
        if conn.slave_id >= 0 and not any(c.slave_id == conn.slave_id for c in self.slaves.connections):
            self.caught_up_at.pop(conn.slave_id, None)

    def caught_up(self, conn: AutoSwitchConnection) -> None:
        if conn.slave_id >= 0 and not conn.async_learner:
            self.caught_up_at[conn.slave_id] = time.monotonic()

    def release(self) -> None:
        """Answer the waits every member has acked and move the dispatch limit (after an ack, or when the
        set changed)."""
        self.waiters.release(self.all_acked)
        if self.on_confirm is not None:
            self.on_confirm()

    def _acks(self) -> dict[int, int]:
        acks: dict[int, int] = {}
        for c in self.slaves.connections:
            if not c.closed and c.slave_id >= 0:
                acks[c.slave_id] = max(acks.get(c.slave_id, -1), c.ack_offset)
        return acks

    def confirm_offset(self) -> int:
        """computeConfirmOffset: min(own end, acks of the connected members); kept while a member is away."""
        members, me = self.members()
        return self._compute_confirm(members, me)

    def _compute_confirm(self, members: frozenset[int], me: int) -> int:
        acks = self._acks()
        value = self.store.commitlog_max_offset()
        for m in members:  # one pass, no generator: this runs on every ack
            if m != me:
                ack = acks.get(m)
                if ack is None:
                    return self._confirm
                if 0 < ack < value:
                    value = ack
        self._confirm = value
        return value

    def reset_confirm(self, offset: int) -> None:
        """This broker becomes master holding CommitLog bytes up to `offset`: all of it is confirmed (Apache's
        changeToMaster sets the confirmOffset with no slave connected, i.e. to its end, and dispatches it all)."""
        self._confirm = offset

    def dispatch_limit(self) -> int | None:
        """How far a master dispatches (RocketMQ 5.3's getReputEndOffset): None -- its whole CommitLog -- when
        allAckInSyncStateSet is off, readUnCommitted is on or the SyncStateSet is this broker alone; else the
        confirmOffset."""
        cfg = self.config
        if not cfg.all_ack_in_sync_state_set or cfg.read_uncommitted:
            return None
        members, me = self.members()
        if len(members) <= 1 and (not members or me in members):
            return None
        return self._compute_confirm(members, me)

    def confirm_for_slaves(self) -> int:
        """The confirmOffset a transfer frame carries (Apache 5.3's getConfirmOffset): the CommitLog end of a
        lone master or one without allAckInSyncStateSet, else the confirmOffset. A slave dispatches up to it."""
        cfg = self.config
        if cfg.all_ack_in_sync_state_set:
            members, me = self.members()
            if len(members) > 1 or (members and me not in members):
                return self._compute_confirm(members, me)
        return self.store.commitlog_max_offset()

    def all_acked(self, end_offset: int) -> bool:
        members, me = self.members()
        acks = self._acks()
        return all(acks.get(m, -1) >= end_offset for m in members if m != me)

    async def wait_all_acked(self, end_offset: int, timeout_s: float) -> bool:
        """allAckInSyncStateSet: True once every SyncStateSet member acked `end_offset`."""
        if self.all_acked(end_offset):
            return True
        return await self.waiters.wait(end_offset, timeout_s)

    # ---- the SyncStateSet -------------------------------------------------------------------------
    def shrink(self) -> frozenset[int]:
        """maybeShrinkSyncStateSet: the set without members not caught up for haMaxTimeSlaveNotCatchup
        or not connected."""
        members, me = self.members()
        limit = self.config.ha_max_time_slave_not_catchup / 1000.0
        now = time.monotonic()
        return frozenset(m for m in members
                         if m == me or (m in self.caught_up_at and now - self.caught_up_at[m] <= limit))

    # ---- the classic service's surface (ReplicaRole, runtime info) --------------------------------
    def slave_ok(self, end_offset: int) -> bool:
        return bool(self.slaves.connections)

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> bool:
        return await self.wait_all_acked(end_offset, timeout_s)

    def stats(self) -> AutoSwitchStats:
        return {"protocol": "AutoSwitch", "slaves": len(self.slaves.connections), "push2slave_max": self.push2slave_max,
                "confirm_offset": self.confirm_offset(),
                "slave_acks": {str(k): v for k, v in self._acks().items()},
                "epochs": [[e.epoch, e.start_offset] for e in self.epochs.entries]}
