"""ReplicaRole: a broker's place in a master/slave pair (brokerRole, brokerId) and everything that
follows from it. Composed by server.broker.BrokerController.

- Every broker listens on haListenPort (HAService): a master streams its CommitLog to slaves; a
  SYNC_MASTER's sends wait for a slave's ack (`gate`).
- A SLAVE: the store is read-only and fed by HAClient; SlaveSynchronize pulls the master's tables
  and its scheduler progress; the delay levels do not run and the timer wheel only follows.
- `promote()` (PROMOTE_BROKER, `delaymq broker promote -b ADDR`): the slave becomes the master live:
  HA client and sync stop, the torn tail (if any) is cut, writes are accepted, a new HA epoch starts
  at the CommitLog end (config/haEpoch.json), the master-only services start (transaction check-backs,
  pop's revive sweep, and:) the delay levels from the last synced offsets and
  the wheel from the synced read position (skipping what the old master had put of the slot in
  progress), brokerId becomes 0 and the role listeners run (name-server re-registration).
- A SLAVE whose own epoch is older than its master's (a former master coming back) first cuts its
  CommitLog back to the master's epoch start offset (`rejoin`), logging how many bytes it dropped.
- Controller mode (enableControllerMode) speaks RocketMQ 5's AutoSwitch HA instead (autoswitch_master,
  autoswitch_slave): the epochs are the controller's masterEpochs in `epochFileCheckpoint`
  (storage.epoch_file; `begin_epoch` when this broker becomes master), a slave truncates to the
  consistent point at each handshake, and with allAckInSyncStateSet a send waits for every member of
  the SyncStateSet the controller keeps (`sync_state`, set by the ReplicasManager), and consumers see only
  what every member holds: `dispatch_limit` is RocketMQ 5.3's getReputEndOffset for the current role (a
  master's confirmOffset, a slave's master's), handed to the store's dispatch gate
  (storage.dispatch.DispatchGate) on every ack, frame, change of the set and role change.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import structlog

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.controller import ExchangeHAInfoRequestHeader, ExchangeHAInfoResponseHeader
from remoting.client import RemotingClient
from scheduler.progress import SchedulerProgress
from server.cluster.ha.autoswitch_master import AutoSwitchHAService, AutoSwitchStats, Members
from server.cluster.ha.autoswitch_slave import (
    AutoSwitchClientStats,
    AutoSwitchHAClient,
    truncate_before_start,
)
from server.cluster.ha.learned import ReplicatedTopics
from server.cluster.ha.master import HAService, HAServiceStats
from server.cluster.ha.replica_services import ReplicaServices
from server.cluster.ha.slave import HAClient, HAClientStats
from server.cluster.ha.sync import SlaveSynchronize, SlaveSyncStats
from server.listeners import bound
from storage.config_store import atomic_write_json, read_json
from storage.epoch_file import EpochFile
from storage.message_store import MessageStore
from storage.supervisor import SupervisedTask

if TYPE_CHECKING:
    from server.cluster.registration import BrokerRegistrar, RegisterResult
    from server.config import BrokerConfig
    from storage.store_types import PutStatus

log = structlog.get_logger(__name__)

# a SYNC_MASTER send's replication outcome: (response code, remark), (0, None) once a slave has the bytes
ReplicaAck = tuple[int, str | None]


class ReplicaStats(TypedDict):
    """The broker's HA role and, for the parts running, their figures (`ReplicaRole.stats`)."""

    brokerRole: str
    brokerId: int
    epoch: int
    epochStartOffset: int
    master: NotRequired[HAServiceStats | AutoSwitchStats]
    slave: NotRequired[HAClientStats | AutoSwitchClientStats]
    sync: NotRequired[SlaveSyncStats]

EPOCH_FILE = "haEpoch.json"


class ReplicaRole:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._services: ReplicaServices | None = None  # attach()
        self._store: MessageStore | None = None  # prepare()
        self.ha_service: HAService | AutoSwitchHAService | None = None
        self.ha_client: HAClient | AutoSwitchHAClient | None = None
        # controller mode: RocketMQ 5's AutoSwitch HA, its epoch file and the controller's SyncStateSet
        self.autoswitch = config.enable_controller_mode
        self.epochs = EpochFile(config.store_path_root_dir)
        self.sync_state: Members | None = None  # fn() -> (SyncStateSet, own controller id); ReplicasManager
        self.on_expand: Callable[[int], None] | None = None  # a caught-up slave to add to the set
        self.sync: SlaveSynchronize | None = None
        self.learned: ReplicatedTopics | None = None  # a slave's topics learned from replicated records
        self._client: RemotingClient | None = None  # prepare()
        self.master_addr_from_ns: str | None = None  # RegisterBrokerResult.masterAddr
        # the master's HA address: RegisterBrokerResult.haServerAddr, or the master's own EXCHANGE_BROKER_HA_INFO
        # answer (`learn_master_ha`); never derived from its listenPort (haListenPort is its own key)
        self.ha_addr_from_ns: str | None = None
        self.init_max_offset = 0  # the CommitLog end when the store opened (Apache's brokerInitMaxOffset)
        self.pinned_master: str | None = None  # controller mode: the master the controller named (follow())
        self.fenced = False  # controller mode: a master the controller replaced (fence())
        # async fn(brokerRole, brokerId), awaited after a promotion
        self.role_listeners: list[Callable[[str, int], Awaitable[object]]] = []
        self._tasks: list[SupervisedTask] = []
        self._wheel_rebuild: asyncio.Task[None] | None = None  # _on_truncated's, awaited by promote
        self.epoch = 0
        self.epoch_start = 0
        self.promoted_at_ms = 0

    def attach(self, services: ReplicaServices) -> None:
        self._services = services

    @property
    def services(self) -> ReplicaServices:
        if self._services is None:
            raise RuntimeError("ReplicaRole.attach(services) comes before start()")
        return self._services

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("ReplicaRole.prepare(store) comes first")
        return self._store

    @property
    def client(self) -> RemotingClient:
        if self._client is None:
            raise RuntimeError("ReplicaRole.prepare(store) comes first")
        return self._client

    # ---- addresses ----------------------------------------------------------------------
    def master_ha_addr(self) -> str | None:
        cfg = self.config
        if len(cfg.ha_master_address) >= 6:
            return cfg.ha_master_address
        return self.ha_addr_from_ns

    def master_broker_addr(self) -> str | None:
        if self.master_addr_from_ns:
            return self.master_addr_from_ns
        ha = self.config.ha_master_address
        if ha:  # no name server: RocketMQ's fixed relation haListenPort = listenPort + 1
            host, _, port = ha.rpartition(":")
            return f"{host}:{int(port) - 1}"
        return None

    @property
    def is_slave(self) -> bool:
        return self.config.broker_role == "SLAVE"

    # ---- name servers ([cluster] registration) ---------------------------------------------
    def attach_registrar(self, registrar: BrokerRegistrar) -> None:
        """A slave learns its master from REGISTER_BROKER's answer; a promoted broker re-registers as
        brokerId 0 at once (the name server replaces the <1, addr> entry by <0, addr>)."""
        self._registrar = registrar
        registrar.add_result_listener(self.on_register_result)
        registrar.want_answer_while(lambda: self.is_slave and self.master_ha_addr() is None)
        self.role_listeners.append(lambda _role, _id: registrar.register_all(force=True))

    def follow(self, master_addr: str | None) -> None:
        """Controller mode: follow the master the controller names. Its HA address comes with the next
        name-server answer that names the same master (an answer naming another, stale one is ignored)."""
        if master_addr == self.pinned_master:
            return
        self.pinned_master = self.master_addr_from_ns = master_addr
        self.ha_addr_from_ns = None
        log.info("ha.follow", master=master_addr)

    async def fence(self, fenced: bool, broker_id: int) -> None:
        """Controller mode, a master the controller replaced while it runs: it refuses every write (the
        store read-only: sends answer SERVICE_NOT_AVAILABLE, the scheduler's puts fail and are retried,
        so nothing is delivered twice from here) and registers with the name servers under `broker_id`
        instead of 0, until it is elected again (`fence(False, 0)`) or restarted (then it rejoins as a
        slave). A live switch to slave needs AutoSwitch HA's truncation (issue 25 item 2)."""
        self.fenced = fenced
        self.store.run.read_only = fenced  # storage.store_status.RunState: puts refused, as on a slave
        self.config.broker_id = broker_id
        log.warning("ha.fenced" if fenced else "ha.unfenced", broker_id=broker_id)
        await self._announce()

    async def _announce(self) -> None:
        for fn in self.role_listeners:
            try:
                await fn(self.config.broker_role, self.config.broker_id)
            except Exception as e:
                log.error("ha.role_listener_failed", listener=repr(fn), error=repr(e))

    def on_register_result(self, result: RegisterResult) -> None:
        if not self.is_slave:
            return
        if self.pinned_master is not None and result.master_addr != self.pinned_master:
            return  # the name server still routes the master the controller replaced
        if result.master_addr and result.master_addr != self.master_addr_from_ns:
            log.info("ha.master_from_namesrv", master=result.master_addr, ha=result.ha_server_addr)
            self.master_addr_from_ns = result.master_addr
        if result.ha_server_addr:
            self.ha_addr_from_ns = result.ha_server_addr

    async def _master_from_namesrv(self) -> None:
        """Before the first registration: the master of this brokerName from a name server's cluster
        info (GET_BROKER_CLUSTER_INFO), so a former master can compare epochs before it follows."""
        from codec.fastjson import loads_lenient

        for ns in self.config.namesrv_addr_list:
            try:
                resp = await self.client.invoke(ns, RemotingCommand.request(int(RC.GET_BROKER_CLUSTER_INFO), {}), 3.0)
                if resp.code != ResponseCode.SUCCESS:
                    continue
                info = loads_lenient(resp.body_bytes())
                data = (info.get("brokerAddrTable") or {}).get(self.config.broker_name) or {}
                addrs = {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}
            except Exception as e:
                log.info("ha.namesrv_unreachable", namesrv=ns, error=repr(e))
                continue
            if 0 in addrs and addrs[0] != self.config.broker_addr:
                self.master_addr_from_ns = addrs[0]
                return

    async def learn_master_ha(self) -> str | None:
        """The HA address of the master this slave follows, asked of the master itself (EXCHANGE_BROKER_HA_INFO,
        as Apache's retrieveBrokerHaInfo): its brokerIP2:haListenPort, whatever its listenPort. None when
        it does not answer one (unreachable, not the master, or a 4.x broker): the name server's answer to
        the next registration brings it (on_register_result)."""
        if len(self.config.ha_master_address) >= 6:
            return self.config.ha_master_address
        master = self.master_addr_from_ns
        if not master:
            return None
        try:
            resp = await self.client.invoke(master, RemotingCommand.request(
                int(RC.EXCHANGE_BROKER_HA_INFO), ExchangeHAInfoRequestHeader().to_ext()), 3.0)
            ha = ExchangeHAInfoResponseHeader.from_ext(resp.ext_fields).masterHaAddress \
                if resp.code == ResponseCode.SUCCESS else None
        except Exception as e:  # unreachable, or an answer that is not one
            log.info("ha.master_ha_unknown", master=master, error=repr(e))
            return None
        if not ha:
            log.info("ha.master_ha_unknown", master=master, code=resp.code, remark=resp.remark)
            return None
        if master == self.master_addr_from_ns:  # still the master followed (a role change may have come meanwhile)
            self.ha_addr_from_ns = ha
        log.info("ha.master_ha_learned", master=master, ha=ha)
        return ha

    # ---- lifecycle ----------------------------------------------------------------------
    def load_epoch(self) -> None:
        path = os.path.join(self.config.store_path_root_dir, "config", EPOCH_FILE)
        doc = read_json(path)
        if isinstance(doc, dict):
            self.epoch = int(doc.get("epoch") or 0)
            self.epoch_start = int(doc.get("startOffset") or 0)

    def save_epoch(self) -> None:
        path = os.path.join(self.config.store_path_root_dir, "config", EPOCH_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write_json(path, {"epoch": self.epoch, "startOffset": self.epoch_start})

    async def prepare(self, store: MessageStore) -> None:
        """After the store loaded, before the scheduler services start."""
        self._store = store
        self._client = RemotingClient()
        self.init_max_offset = store.commitlog_max_offset()
        self.load_epoch()
        if self.autoswitch:
            self.epochs.load()
            last = self.epochs.last()
            if last is not None:
                self.epoch, self.epoch_start = last
        if self.autoswitch and not self.config.read_uncommitted and (
                self.is_slave or (self.config.all_ack_in_sync_state_set and len(self._members()[0]) > 1)):
            # what recovery dispatched stays; what this broker writes (a master's scheduler starts before its
            # HA service) or replicates from now on waits for the confirmOffset (`refresh_dispatch_limit`)
            store.set_dispatch_limit(store.commitlog_max_offset())
        if self.is_slave:
            if not self.config.ha_master_address:
                if self.pinned_master is None and self.config.namesrv_addr_list:
                    await self._master_from_namesrv()
                await self.learn_master_ha()
            if not self.autoswitch:
                await self.rejoin()
            store.start_replica()
            if self.autoswitch:  # AutoSwitch cuts at its handshake, against the master's epochs: once now,
                await self._pre_handshake()  # before the timer wheel loads state built on the bytes that go

    async def _pre_handshake(self) -> None:
        addr = self.master_ha_addr()
        if not addr:
            return
        dropped = await truncate_before_start(self.store, self.epochs, addr, self.config.broker_id)
        if dropped and self.config.timer_wheel_enable:  # units may point at the bytes just cut
            from scheduler.timer import discard_local_state
            discard_local_state(self.config.store_path_root_dir)
        last = self.epochs.last()
        if last is not None:
            self.epoch, self.epoch_start = last
        if dropped:
            log.warning("ha.rejoin", protocol="AutoSwitch", master_ha=addr, dropped_bytes=dropped,
                        timer_wheel_rebuilt=self.config.timer_wheel_enable)

    async def rejoin(self) -> None:
        """A slave with an older epoch than its master's cuts its CommitLog back to where the master's
        epoch started (the unreplicated tail of a former master)."""
        addr = self.master_broker_addr()
        if not addr:
            return
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(int(RC.GET_HA_EPOCH), {}), 3.0)
        except Exception as e:
            log.info("ha.rejoin_master_unreachable", master=addr, error=repr(e))
            return
        if resp.code != ResponseCode.SUCCESS:
            return  # an Apache master: no epochs
        doc = json.loads(resp.body_bytes())
        m_epoch, m_start = int(doc["epoch"]), int(doc["startOffset"])
        if m_epoch <= self.epoch:
            return
        end = self.store.commitlog_max_offset()
        dropped = self.store.truncate_replica(m_start) if end > m_start else 0
        timer_files = []
        if dropped and self.config.timer_wheel_enable:  # units may point at the bytes just cut
            from scheduler.timer import discard_local_state
            timer_files = discard_local_state(self.config.store_path_root_dir)
        log.warning("ha.rejoin", master=addr, master_epoch=m_epoch, own_epoch=self.epoch,
                    epoch_start_offset=m_start, old_end=end, dropped_bytes=dropped,
                    timer_wheel_rebuilt=bool(timer_files))
        self.epoch, self.epoch_start = m_epoch, m_start
        self.save_epoch()

    def begin_epoch(self, store: MessageStore, master_epoch: int) -> None:
        """Controller mode, this broker becomes master of `master_epoch`: (epoch, CommitLog end) goes to
        the epoch file (entries of that epoch or later dropped first), as Apache's changeToMaster."""
        self.epochs.load()
        end = store.commitlog_max_offset()
        self.epochs.begin_epoch(master_epoch, end)
        self.epoch, self.epoch_start = master_epoch, end
        if isinstance(self.ha_service, AutoSwitchHAService):
            self.ha_service.reset_confirm(end)
        log.info("ha.epoch_begun", master_epoch=master_epoch, start_offset=end,
                 epochs=[list(e) for e in self.epochs.entries])

    # ---- the dispatch limit (controller mode) -----------------------------------------------
    def dispatch_limit(self) -> int | None:
        """How far this broker dispatches (RocketMQ 5.3's getReputEndOffset: None is the CommitLog end):
        classic mode or readUnCommitted, None; a slave, its master's confirmOffset from the last frame; a
        master, its own (AutoSwitchHAService.dispatch_limit: None when alone in the set or without
        allAckInSyncStateSet)."""
        if not self.autoswitch or self.config.read_uncommitted:
            return None
        if self.is_slave:
            client = self.ha_client
            return client.confirm_offset if isinstance(client, AutoSwitchHAClient) else self.store.dispatch_limit
        svc = self.ha_service
        return svc.dispatch_limit() if isinstance(svc, AutoSwitchHAService) else self.store.dispatch_limit

    def refresh_dispatch_limit(self) -> None:
        """Hand `dispatch_limit()` to the store (the writes it now covers are dispatched in this call)."""
        if self._store is not None and self.autoswitch:
            self._store.set_dispatch_limit(self.dispatch_limit())

    def _members(self) -> tuple[frozenset[int], int]:
        if self.sync_state is None:
            return frozenset(), self.config.broker_id
        return self.sync_state()

    async def start(self) -> None:
        """After the scheduler services exist (started for a master, not for a slave)."""
        cfg = self.config
        if self.autoswitch:
            svc = AutoSwitchHAService(self.store, cfg, self.epochs, self._members)
            svc.on_expand = lambda slave_id: self.on_expand(slave_id) if self.on_expand is not None else None
            svc.on_confirm = self.refresh_dispatch_limit
            self.ha_service = svc
        else:
            self.ha_service = HAService(self.store, cfg)
        with bound("haListenPort", cfg.listen_host, cfg.ha_port):  # a taken HA port stops the start
            await self.ha_service.start(cfg.listen_host, cfg.ha_port)
        if self.is_slave:
            self._start_slave()

    def _start_slave(self) -> None:
        b, cfg = self.services, self.config
        if self.autoswitch:
            client = AutoSwitchHAClient(self.store, cfg, self.epochs, self.master_ha_addr, lambda: cfg.broker_id)
            client.on_truncated.append(self._on_truncated)
            client.on_confirm = self.refresh_dispatch_limit
            self.ha_client = client
        else:
            self.ha_client = HAClient(self.store, cfg, self.master_ha_addr)
        # a topic whose records arrive before the next metadata sync is known at once (learned.py)
        self.learned = ReplicatedTopics(b.topics)
        self.store.add_dispatch_listener(self.learned.on_dispatch)
        self.store.add_replica_destination_listener(self.learned.on_destinations)
        self.sync = SlaveSynchronize(cfg, self.store, b, self.client, self.master_broker_addr, self.learned)
        self.ha_client.applier.on_applied.append(self.sync.try_adopt)
        if b.timer_service is not None:
            b.timer_service.start_follower()
        sup = self.store.supervisor  # storage.supervisor: log with context, count, back off, restart
        self._tasks = [sup.spawn("ha-client", self.ha_client.link.run),
                       sup.spawn("slave-sync", self.sync.run_metadata),
                       sup.spawn("scheduler-sync", self.sync.run_progress)]
        log.info("ha.slave_started", master_ha=self.master_ha_addr(), master=self.master_broker_addr(),
                 offset=self.store.commitlog_max_offset())

    def _on_truncated(self, offset: int, dropped: int) -> None:
        last = self.epochs.last()
        if last is not None:
            self.epoch, self.epoch_start = last
        log.warning("ha.rejoin", protocol="AutoSwitch", to_offset=offset, dropped_bytes=dropped, epoch=self.epoch)
        timer = self.services.timer_service
        if timer is not None and self._wheel_rebuild is None:
            self._wheel_rebuild = asyncio.get_running_loop().create_task(self._rebuild_wheel())

    async def _rebuild_wheel(self) -> None:
        """A cut at the running client's handshake (the one before start could not reach the master): the
        following wheel loaded units that may point at the bytes cut, so it is closed, its own files go
        and it follows again, rebuilt from the timer topic's ConsumeQueue (cut with the CommitLog), as
        `_pre_handshake` does before it loads. A promotion waits for it."""
        timer = self.services.timer_service
        try:
            if timer is None or not self.is_slave:
                return
            # the master's progress is asked with the wheel's queue offset, and its cursor history from there:
            # no answer to a question asked before the rebuild (a history that does not reach back to the
            # first unit) may be adopted after it, so the progress sync stops meanwhile
            syncing = [t for t in self._tasks if t.name == "scheduler-sync"]
            for t in syncing:
                await t.stop()
            gone = await timer.refollow()
            if self.sync is not None and syncing:
                self.sync.pending_records.clear()
                self._tasks = [t for t in self._tasks if t not in syncing]
                self._tasks.append(self.store.supervisor.spawn("scheduler-sync", self.sync.run_progress))
            log.warning("ha.timer_wheel_rebuilt", files=gone)
        except Exception as e:  # a one-shot task: nothing else would see its error
            log.error("ha.timer_wheel_rebuild_failed", error=repr(e))
        finally:
            self._wheel_rebuild = None

    async def _stop_slave(self) -> None:
        if self._wheel_rebuild is not None:  # a cut's wheel rebuild (it restarts the progress sync) ends first:
            await self._wheel_rebuild  # a promotion's wheel then follows the whole master history
        if self.ha_client is not None:
            self.ha_client.link.stop()
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await self.store.supervisor.reap(self._tasks)  # an error a task ended with is logged
        self._tasks = []

    async def shutdown(self) -> None:
        await self._stop_slave()
        if self.ha_service is not None:
            await self.ha_service.close()
        if self._client is not None:
            self._client.close()

    # ---- SYNC_MASTER ----------------------------------------------------------------------
    @property
    def sync_master(self) -> bool:
        cfg = self.config
        if self.autoswitch:  # Apache: with allAckInSyncStateSet a master waits for its whole SyncStateSet
            return cfg.all_ack_in_sync_state_set and not self.is_slave and not self.fenced
        return cfg.broker_role == "SYNC_MASTER"

    def gate(self, end_offset: int) -> ReplicaAck | Coroutine[Any, Any, ReplicaAck]:
        """For a SYNC_MASTER send whose records end at `end_offset`: None (answer now) is never
        returned; (code, remark) when no slave can take it, else an awaitable of (code, remark)."""
        svc = self.ha_service
        if isinstance(svc, AutoSwitchHAService):  # every SyncStateSet member, however many are connected
            return self._wait(svc, end_offset)
        if svc is None or not svc.slave_ok(end_offset):
            return ResponseCode.SLAVE_NOT_AVAILABLE, "SLAVE_NOT_AVAILABLE"
        return self._wait(svc, end_offset)

    def gate_for_run(self, starts: Sequence[int], phys: Sequence[int], statuses: Sequence[PutStatus] | None,
                     shared: bool = True) -> ReplicaAck | Awaitable[ReplicaAck] | None:
        """`gate` for a run of sends stored by one put_batch: one wait for the end of the last stored
        record, a (code, remark) tuple or, `shared` by the run's requests, a task; not `shared` (the one
        answer of the whole run awaits it), the coroutine itself."""
        end = -1
        for j, p in enumerate(phys):
            if statuses is None or statuses[j].name == "PUT_OK":
                end = max(end, p + starts[j + 1] - starts[j])
        if end < 0:
            return None
        g = self.gate(end)
        return g if isinstance(g, tuple) or not shared else asyncio.ensure_future(g)

    async def _wait(self, svc: HAService | AutoSwitchHAService, end_offset: int) -> ReplicaAck:
        ok = await svc.wait_replicated(end_offset, self.config.slave_timeout / 1000.0)
        return (ResponseCode.SUCCESS, None) if ok else (ResponseCode.FLUSH_SLAVE_TIMEOUT, "FLUSH_SLAVE_TIMEOUT")

    # ---- scheduler progress (master side) ---------------------------------------------------
    def progress(self, timer_from_queue_offset: int = -1) -> SchedulerProgress:
        b = self.services
        p = SchedulerProgress(int(time.time() * 1000), self.store.commitlog_max_offset())
        if b.delay_service is not None:
            p.delay_offsets = b.delay_service.progress()
        if b.timer_service is not None:
            p.timer = b.timer_service.progress(timer_from_queue_offset)
        return p

    # ---- promotion ------------------------------------------------------------------------
    async def promote(self, role: str = "ASYNC_MASTER", master_epoch: int | None = None) -> dict[str, object]:
        """`master_epoch`: the controller's (controller mode: the epoch file gets it); else one more."""
        if not self.is_slave:
            raise ValueError(f"this broker is already a master ({self.config.broker_role})")
        t0 = time.monotonic()
        b, cfg = self.services, self.config
        await self._stop_slave()
        if self.sync is not None and self.sync.pending is not None:
            self.sync.try_adopt(self.store.commitlog_max_offset())
        synced = self.sync.progress if self.sync is not None else None
        self.store.stop_replica()  # its last reput still teaches topics (learned.py)
        # everything it holds is dispatched before it takes over, also past the old master's confirmOffset
        # (Apache's changeToMaster: confirmOffset = its CommitLog end, then it waits until the reput is done)
        self.store.set_dispatch_limit(None)
        learned = sorted(self.learned.learned) if self.learned is not None else []
        if self.learned is not None:
            self.store.remove_dispatch_listener(self.learned.on_dispatch)
            self.store.remove_replica_destination_listener(self.learned.on_destinations)
            self.learned = None
        if self.autoswitch and master_epoch is not None:
            self.begin_epoch(self.store, master_epoch)
        else:
            self.epoch += 1
            self.epoch_start = self.store.commitlog_max_offset()
            self.save_epoch()
        cfg.broker_role = role
        cfg.broker_id = 0
        self.refresh_dispatch_limit()  # a master's from now on, before its scheduler delivers anything
        self.promoted_at_ms = int(time.time() * 1000)
        delay_offsets = synced.delay_offsets if synced is not None else (self.sync.delay_offsets if self.sync else {})
        skipped: dict[int, int] = {}
        timer_skipped = 0
        b.transactions.start()
        b.pop.start_sweep()
        if b.delay_service is not None:
            # the deliveries the old master put after its last adopted record are in the replica: skipped
            skipped = b.delay_service.resume_from(delay_offsets, synced.commitlog_offset if synced is not None else -1)
            b.delay_service.start()
        if b.timer_service is not None:
            timer_p = synced.timer if synced is not None else None
            cp = self.sync.timer_checkpoint if self.sync is not None else None
            if timer_p is None and cp is not None:  # an Apache master: its timer checkpoint (code 60)
                from scheduler.progress import TimerProgress
                timer_p = TimerProgress(read_ms=cp[0], queue_offset=cp[3], cursor_ms=cp[0], slot_ms=cp[0])
            tail = b.timer_service.promote(timer_p, synced.commitlog_offset if synced is not None else -1)
            timer_skipped = tail.delivered if tail is not None else 0
        await self._announce()
        info = {"brokerRole": role, "brokerId": 0, "epoch": self.epoch, "epochStartOffset": self.epoch_start,
                "syncedProgressAgeMs": (self.promoted_at_ms - synced.taken_ms) if synced else -1,
                "syncedTakenMs": synced.taken_ms if synced else 0,
                "delayOffsets": {str(k): v for k, v in delay_offsets.items()},
                "delaySkippedDelivered": {str(k): v for k, v in skipped.items()},
                "timerReadMs": synced.timer.read_ms if synced and synced.timer else -1,
                "timerSlotMs": synced.timer.slot_ms if synced and synced.timer else -1,
                "timerPutInSlot": synced.timer.put_in_slot if synced and synced.timer else -1,
                "timerSkippedDelivered": timer_skipped,
                "learnedTopics": learned,  # known from replicated records only, not yet from a sync
                "tookMs": round((time.monotonic() - t0) * 1000, 2)}
        log.warning("ha.promoted", **info)
        return info

    # ---- demotion (controller mode) ----------------------------------------------------------
    async def demote(self, broker_id: int, master_addr: str | None) -> dict[str, object]:
        """Controller mode, a running master the controller replaced becomes a slave of `master_addr`
        without a restart: writes refused first (the store read-only, as `fence`), then every master-only
        service stops (`master_services`: the delay levels and the timer wheel, their progress persisted;
        the transaction check-backs; pop's revive sweep), the store turns replica, and the AutoSwitch
        handshake with the new master (its HA address asked of it: `learn_master_ha`) cuts the CommitLog,
        ConsumeQueues and index back to the consistent point, and the wheel's own files when that cut
        anything, before it replicates from it; the wheel only follows from then on; registered with the
        name servers as `broker_id`. A later promotion starts each of them again."""
        if self.is_slave:
            raise ValueError("this broker is already a slave")
        if not self.autoswitch:
            raise ValueError("a live demotion needs controller mode (AutoSwitch HA's truncation)")
        t0 = time.monotonic()
        b, cfg = self.services, self.config
        self.store.run.read_only = True  # nothing more is written here from now (also when already fenced)
        if b.delay_service is not None:
            await b.delay_service.shutdown()
        if b.timer_service is not None:
            await b.timer_service.shutdown()  # closed; _start_slave reopens it as a follower
        b.transactions.stop()
        await b.pop.stop_sweep()
        end = self.store.commitlog_max_offset()
        self.store.start_replica()
        cfg.broker_role, cfg.broker_id = "SLAVE", broker_id
        if self.store.dispatch_limit is None and not cfg.read_uncommitted:  # replicated bytes wait for the
            self.store.set_dispatch_limit(self.store.commitlog_max_offset())  # new master's confirmOffset
        self.fenced = False
        self.pinned_master = None
        self.follow(master_addr)
        if master_addr and await self.learn_master_ha():  # else the name server's answer brings it, and the
            await self._pre_handshake()  # running client cuts; here the cut comes before the wheel reopens
        self._start_slave()
        await self._announce()
        info: dict[str, object] = {"brokerRole": "SLAVE", "brokerId": broker_id, "master": master_addr,
                                   "commitLogEnd": end, "tookMs": round((time.monotonic() - t0) * 1000, 2)}
        log.warning("ha.demoted", **info)
        return info

    def master_services(self) -> list[str]:
        """The master-only services running now: each starts at a promotion and stops at a demotion
        (a slave runs none; its wheel only follows)."""
        if self._services is None:
            return []
        b = self._services
        running = {"delayLevels": b.delay_service.running,
                   "timerWheel": b.timer_service is not None and b.timer_service.delivering,
                   "transactionCheck": b.transactions.running, "popRevive": b.pop.sweeping}
        return [name for name, on in running.items() if on]

    def runtime_info(self) -> dict[str, str]:
        """Flat GET_BROKER_RUNTIME_INFO entries (ha*)."""
        info = {"haEpoch": str(self.epoch), "haEpochStartOffset": str(self.epoch_start),
                "haMasterServices": ",".join(self.master_services())}
        if self._store is not None:  # the dispatch limit (-1: none) and the writes it holds from readers
            gate = self._store.gate
            info["haDispatchLimit"] = str(-1 if gate.limit is None else gate.limit)
            info["haDispatchHeldWrites"] = str(len(gate.writes))
        if self.ha_service is not None:
            info["haSlaveCount"] = str(len(self.ha_service.slaves.connections))
            info["haPush2SlaveMaxOffset"] = str(self.ha_service.push2slave_max)
        if self.ha_client is not None:
            info["haMasterAddress"] = self.ha_client.link.connected_to or ""
        if self.sync is not None:
            p = self.sync.progress
            info["haSchedulerProgressAgeMs"] = str(int(time.time() * 1000) - p.taken_ms if p else -1)
            gaps = self.sync.adopt_gaps_ms
            info["haSchedulerProgressMaxGapMs"] = str(max(gaps) if gaps else -1)
        return info

    def stats(self) -> ReplicaStats:
        out: ReplicaStats = {"brokerRole": self.config.broker_role, "brokerId": self.config.broker_id, "epoch": self.epoch,
               "epochStartOffset": self.epoch_start}
        if self.ha_service is not None:
            out["master"] = self.ha_service.stats()
        if self.ha_client is not None:
            out["slave"] = self.ha_client.stats()
        if self.sync is not None:
            out["sync"] = self.sync.stats()
        return out
