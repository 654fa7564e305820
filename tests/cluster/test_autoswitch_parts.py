"""AutoSwitch HA's two sides (server.cluster.ha.autoswitch_*) over loopback between two real stores in
tmp_path, no broker process: the slave's handshake names its id, the master's epochs reach the slave's
epoch file through the transfer headers, a caught-up slave is proposed for the SyncStateSet, a member that stops
taking bytes drops out of the set after haMaxTimeSlaveNotCatchup, a send's wait for every member (allAckInSyncStateSet) is answered by the slave's ack and, once the slave is gone
and shrunk out of the set, at once; a slave holding a divergent tail cuts it at the next handshake
(live, and before start) and then holds the master's bytes exactly."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from codec.autoswitch_ha import EpochEntry
from server.cluster.ha.autoswitch_master import AutoSwitchHAService
from server.cluster.ha.autoswitch_slave import AutoSwitchHAClient, truncate_before_start
from server.config import BrokerConfig
from storage.epoch_file import EpochFile
from storage.message_store import GetStatus, MessageStore
from tests.storage.conftest import open_store, request


def commitlog(store: MessageStore) -> bytes:
    out, off = bytearray(), store.commitlog_min_offset()
    while (chunk := store.replica_data(off, 1 << 20)) is not None:
        out += chunk
        off += len(chunk)
    return bytes(out)


def put(store: MessageStore, n: int, prefix: str) -> int:
    for i in range(n):
        [r] = store.put([request(body=f"{prefix}{i}".encode(), uniq=f"{prefix}{i}")])
        assert r.status.name == "PUT_OK", r.status
    return store.commitlog_max_offset()


class Slave:
    """An AutoSwitchHAClient on its own store, with an event per CommitLog end it reaches."""

    def __init__(self, root: Path, addr: str) -> None:
        self.store = open_store(root)
        self.store.start_replica()
        self.epochs = EpochFile(str(root))
        self.epochs.load()
        self.client = AutoSwitchHAClient(self.store, config(), self.epochs, lambda: addr, lambda: 2)
        self.target = -1
        self.reached = asyncio.Event()
        self.client.applier.on_applied.append(self._applied)
        self.task: asyncio.Task[None] | None = None

    def _applied(self, end: int) -> None:
        if end >= self.target:
            self.reached.set()

    async def run_until(self, end: int) -> None:
        self.target, self.reached = end, asyncio.Event()
        if self.store.commitlog_max_offset() >= end:
            return
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.client.link.run())
        await asyncio.wait_for(self.reached.wait(), 30)

    async def stop(self) -> None:
        self.client.link.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)
            self.task = None


def config() -> BrokerConfig:
    cfg = BrokerConfig()
    cfg.ha_send_heartbeat_interval = 200
    cfg.ha_max_time_slave_not_catchup = 1000
    return cfg


async def test_replicate_expand_all_ack_and_shrink(tmp_path: Path) -> None:
    m = open_store(tmp_path / "m")
    m_epochs = EpochFile(str(tmp_path / "m"))
    m_epochs.begin_epoch(1, 0)
    members = {1}
    expanded: list[int] = []
    svc = AutoSwitchHAService(m, config(), m_epochs, lambda: (frozenset(members), 1))
    svc.on_expand = expanded.append
    await svc.start("127.0.0.1", 0)
    s = Slave(tmp_path / "s", f"127.0.0.1:{svc.slaves.port}")
    try:
        end = put(m, 30, "a")
        await s.run_until(end)
        assert commitlog(s.store) == commitlog(m)
        assert s.epochs.entries == [EpochEntry(1, 0)] and s.epochs.load() == [EpochEntry(1, 0)]
        assert 2 in expanded  # caught up, outside the set: proposed
        members.add(2)

        end = put(m, 5, "b")
        assert await svc.wait_all_acked(end, 30)  # answered by the slave's ack
        assert s.store.commitlog_max_offset() >= end

        # a connected slave that stops taking bytes is out once not caught up for haMaxTimeSlaveNotCatchup
        transport = s.client.link.transport
        assert transport is not None
        transport.pause_reading()
        behind_since = time.monotonic()
        put(m, 200, "l")
        assert svc.shrink() == frozenset({1, 2})
        deadline = behind_since + 10
        while svc.shrink() != frozenset({1}):  # polling the master's view: the set is computed on demand
            assert time.monotonic() < deadline, svc.caught_up_at
            await asyncio.sleep(0.05)
        assert time.monotonic() - behind_since >= config().ha_max_time_slave_not_catchup / 1000 - 0.05
        transport.resume_reading()
        await s.run_until(m.commitlog_max_offset())

        [conn] = svc.slaves.connections
        assert conn.slave_id == 2
        await s.stop()
        assert conn.task is not None
        await asyncio.wait_for(asyncio.wait({conn.task}), 30)  # the master saw the connection go
        end = put(m, 1, "c")
        assert not await svc.wait_all_acked(end, 0.2)  # a member that is gone holds the send
        assert svc.shrink() == frozenset({1})  # not connected: out
        members.discard(2)
        svc.release()
        assert await svc.wait_all_acked(end, 0.2)
    finally:
        await s.stop()
        await svc.close()
        s.store.close()
        m.close()


async def test_a_divergent_tail_is_cut_at_the_handshake(tmp_path: Path) -> None:
    m = open_store(tmp_path / "m")
    m_epochs = EpochFile(str(tmp_path / "m"))
    m_epochs.begin_epoch(1, 0)
    svc = AutoSwitchHAService(m, config(), m_epochs, lambda: (frozenset({1}), 1))
    await svc.start("127.0.0.1", 0)
    addr = f"127.0.0.1:{svc.slaves.port}"
    s = Slave(tmp_path / "s", addr)
    try:
        common = put(m, 20, "a")
        await s.run_until(common)
        await s.stop()
        # the slave, master for a moment of epoch 1 still, writes what the master never gets
        s.store.stop_replica()
        tail_end = put(s.store, 7, "x")
        s.store.start_replica()
        # the master goes on in epoch 2
        m_epochs.begin_epoch(2, common)
        end = put(m, 9, "b")
        await s.run_until(end)
        assert s.client.truncated == [[common, tail_end - common]]
        assert commitlog(s.store) == commitlog(m)
        assert s.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, common)]
        cq = s.store.consume_queue("T", 0)
        assert cq is not None and cq.max_offset == 29  # 20 + 9 units: the 7 cut ones are gone
        await s.stop()

        # before start: a second divergent tail goes with one handshake, no transfer
        s.store.stop_replica()
        put(s.store, 3, "y")
        s.store.start_replica()
        dropped = await truncate_before_start(s.store, s.epochs, addr, 2)
        assert dropped > 0 and commitlog(s.store) == commitlog(m)
    finally:
        await s.stop()
        await svc.close()
        s.store.close()
        m.close()


async def test_consumers_see_only_what_every_member_holds(tmp_path: Path) -> None:
    """allAckInSyncStateSet (issue 25): the master dispatches only up to the confirmOffset, moved by the
    slave's ack (no timer); the slave dispatches only up to the confirmOffset its master's frames carry."""
    cfg = config()
    cfg.all_ack_in_sync_state_set = True
    m = open_store(tmp_path / "m")
    m_epochs = EpochFile(str(tmp_path / "m"))
    m_epochs.begin_epoch(1, 0)
    members = {1}
    svc = AutoSwitchHAService(m, cfg, m_epochs, lambda: (frozenset(members), 1))
    svc.on_confirm = lambda: m.set_dispatch_limit(svc.dispatch_limit())  # as ReplicaRole.refresh_dispatch_limit
    await svc.start("127.0.0.1", 0)
    s = Slave(tmp_path / "s", f"127.0.0.1:{svc.slaves.port}")
    s.store.set_dispatch_limit(0)
    s.client.on_confirm = lambda: s.store.set_dispatch_limit(s.client.confirm_offset)
    heard: dict[str, asyncio.Event] = {"m": asyncio.Event(), "s": asyncio.Event()}
    m.add_dispatch_listener(lambda t, q, n: heard["m"].set() if (t, n) == ("T", 31) else None)
    s.store.add_dispatch_listener(lambda t, q, n: heard["s"].set() if (t, n) == ("T", 31) else None)
    try:
        end = put(m, 30, "a")
        assert m.dispatch_limit is None and m.max_offset("T", 0) == 30  # alone in the set: no limit
        await s.run_until(end)
        members.add(2)
        svc.release()  # the set changed (ReplicasManager after ALTER_SYNC_STATE_SET)
        assert m.dispatch_limit == end

        transport = s.client.link.transport
        assert transport is not None
        transport.pause_reading()  # the slave takes nothing: the master's next message stays unconfirmed
        end = put(m, 1, "held")
        assert m.get_messages("T", 0, 30, 32).status is GetStatus.OFFSET_OVERFLOW_ONE  # "no new message"
        assert m.max_offset("T", 0) == 30 and not heard["m"].is_set()
        assert m.queues.offsets[("T", 0)] == 31  # stored all the same
        transport.resume_reading()
        await asyncio.wait_for(heard["m"].wait(), 30)  # dispatched by the slave's ack
        assert m.dispatch_limit == end
        got = m.get_messages("T", 0, 30, 32)
        assert got.status is GetStatus.FOUND and len(got.buffers) == 1
        # the slave held the record until a frame carried a confirmOffset past it (the next heartbeat here)
        await asyncio.wait_for(heard["s"].wait(), 30)
        assert s.client.confirm_offset == end and s.store.max_offset("T", 0) == 31
    finally:
        await s.stop()
        await svc.close()
        s.store.close()
        m.close()
