"""ReplicasManager: a broker's membership of a replica group run by Apache's controller (cluster-ha.md
§4.2, 4.7; Apache's broker/controller/ReplicasManager).

`join(store)`, before the broker's ReplicaRole prepares (so the role is known before anything of the
scheduler starts):
1. find the leader controller; 2. the broker id: brokerIdentity, else brokerIdentity-temp (apply it
again), else CONTROLLER_GET_NEXT_BROKER_ID + temp file + CONTROLLER_APPLY_BROKER_ID (on refusal the temp
file goes and the flow starts again); 3. CONTROLLER_REGISTER_BROKER; 4. one heartbeat, then, when the set
has no master, CONTROLLER_ELECT_MASTER; 5. the answer sets the role: the master runs as brokerId 0
(ASYNC_MASTER: sends do not wait for the SyncStateSet, see below), a slave as SLAVE with its controller id,
following the master the controller names. Each step is retried (JOIN_RETRY_S) until it succeeds: like
Apache's, the broker serves nothing before it knows its role.

`start(server)` then runs, supervised: BROKER_HEARTBEAT to every controller each
`brokerHeartbeatInterval`; CONTROLLER_GET_REPLICA_INFO each `syncBrokerMetadataPeriod` (a newer
masterEpoch changes the role; CONTROLLER_BROKER_METADATA_NOT_EXIST registers again); the leader lookup
each `syncControllerMetadataPeriod`; on the master, the SyncStateSet check (ALTER_SYNC_STATE_SET).
NOTIFY_BROKER_ROLE_CHANGED (processor.py) applies a role at once.

Role changes (only for a masterEpoch newer than the one known):
- this broker named master while a SLAVE: first the hand-over (`_hand_over_from`, HAND_OVER_MASTER to
  the master it followed: a live one checks the controller, steps down -- fenced, so it writes and
  delivers nothing more -- and answers its CommitLog end, which this replica reaches within
  HAND_OVER_CATCH_UP_S; a dead one answers nothing and is skipped), then ReplicaRole.promote (delay
  levels and the timer wheel start from the replicated progress and skip the deliveries the replica
  holds after it, so an orderly hand-over repeats nothing; brokerId 0 registered with the name
  servers), timed by FailoverClock;
- another broker named master while a SLAVE: follow it (its HA address comes with the next name-server
  answer);
- another broker named master while this one is master: fenced at once (ReplicaRole.fence: writes
  refused, registered under its controller id), then demoted live (ReplicaRole.demote: the delay levels
  and the timer wheel stop, the store turns replica, the AutoSwitch handshake cuts it back to the
  consistent point and it replicates from the new master); if the demotion fails it stays fenced and a
  restart rejoins it as a slave.

Replication is RocketMQ 5's AutoSwitch HA (server/cluster/ha/autoswitch_*): becoming master appends the
masterEpoch to `epochFileCheckpoint`; the master's HA service knows each slave by its brokerId, proposes a
caught-up slave for the SyncStateSet at once and drops members not caught up for haMaxTimeSlaveNotCatchup
(ALTER_SYNC_STATE_SET, checked every SYNC_STATE_CHECK_S); allAckInSyncStateSet makes sends wait for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypedDict

import structlog

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    EpochEntryCache,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
    register_check_code,
)
from codec.errors import CodecError
from server.cluster.controller.client import ControllerClient, ControllerUnavailable, parse_controller_addrs
from server.cluster.controller.failover import FailoverClock
from server.cluster.controller.identity import BrokerIdentityFiles
from server.cluster.controller.processor import register as register_notify
from server.cluster.ha.autoswitch_master import AutoSwitchHAService
from server.cluster.ha.autoswitch_slave import AutoSwitchHAClient
from storage.supervisor import SupervisedTask

if TYPE_CHECKING:
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.cluster.ha.service import ReplicaRole
    from server.config import BrokerConfig
    from server.observability.registry import Registry
    from server.processors import Registrar
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

JOIN_RETRY_S = 1.0
REGISTER_ATTEMPTS = 5
SYNC_STATE_CHECK_S = 0.5  # the master looks at its slaves' acks this often (Apache: on every ack)
INITIAL_REPLICA_INFO_S = 3.0  # Apache's initial delay of the GET_REPLICA_INFO task
MASTER_ROLE = "ASYNC_MASTER"
HAND_OVER_TIMEOUT_S = 1.0  # the old master's answer (it asks the controller first); a dead one refuses at once
HAND_OVER_CATCH_UP_S = 5.0  # the replica reaching the stepped-down master's CommitLog end


class ControllerStats(TypedDict):
    """In GET_BROKER_RUNTIME_INFO (controller*)."""

    controllerLeader: str
    brokerControllerId: int
    masterBrokerId: int
    masterAddress: str
    masterEpoch: int
    syncStateSet: list[int]
    syncStateSetEpoch: int
    failoverMasterSeconds: float
    failoverFirstDeliverySeconds: float


class RoleAnswer:
    """What a register / replica-info / elect / notify answer says about the set's master."""

    __slots__ = ("master_id", "master_addr", "master_epoch", "sse")

    def __init__(self, master_id: int | None, master_addr: str | None, master_epoch: int | None,
                 sse: SyncStateSet | None) -> None:
        self.master_id, self.master_addr, self.master_epoch, self.sse = master_id, master_addr, master_epoch, sse


class ReplicasManager:
    def __init__(self, config: BrokerConfig, replica: ReplicaRole, registry: Registry) -> None:
        self.config = config
        self.replica = replica
        self.controllers = ControllerClient(parse_controller_addrs(config.controller_addr))
        self.identity = BrokerIdentityFiles(config.store_path_root_dir, config.broker_cluster_name, config.broker_name)
        self.clock = FailoverClock(registry)
        self.broker_controller_id = -1
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.master_epoch = 0
        self.sse = SyncStateSet()
        self._store: MessageStore | None = None
        self._tasks: list[SupervisedTask] = []
        self._role_lock = asyncio.Lock()
        self._altering = False  # an ALTER_SYNC_STATE_SET in flight
        self._expand_tried: dict[int, float] = {}  # slave id -> time.monotonic() of its last proposal
        self._expanding: set[asyncio.Task[None]] = set()
        self._demoting: set[asyncio.Task[None]] = set()
        replica.sync_state = lambda: (self.sse.sync_state_set, self.broker_controller_id)
        replica.on_expand = self._expand_soon

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("ReplicasManager.join(store) comes first")
        return self._store

    def epoch_of(self) -> int:
        """The masterEpoch this broker knows: its name-server registration's stateVersion (RocketMQ 5)."""
        return self.master_epoch

    @property
    def is_master(self) -> bool:
        return self.master_id is not None and self.master_id == self.broker_controller_id

    # ---- join ---------------------------------------------------------------------------------
    async def join(self, store: MessageStore) -> None:
        self._store = store
        while True:
            try:
                await self.controllers.find_leader()
                await self._obtain_broker_id()
                answer = await self._register()
                await self._heartbeat_once()
                if answer.master_id is None:
                    answer = await self._elect() or answer
                break
            except (ControllerUnavailable, CodecError, OSError, TimeoutError) as e:
                log.warning("controller.join_retry", error=str(e), retry_s=JOIN_RETRY_S)
                await asyncio.sleep(JOIN_RETRY_S)
        self._adopt(answer)
        cfg = self.config
        if self.is_master:
            cfg.broker_role, cfg.broker_id = MASTER_ROLE, 0
            self.replica.begin_epoch(store, self.master_epoch)
        else:
            cfg.broker_role, cfg.broker_id = "SLAVE", self.broker_controller_id
            self.replica.follow(self.master_addr)
        log.info("controller.joined", broker_controller_id=self.broker_controller_id, role=cfg.broker_role,
                 master_id=self.master_id, master=self.master_addr, master_epoch=self.master_epoch,
                 sync_state_set=sorted(self.sse.sync_state_set), leader=self.controllers.leader)

    async def _obtain_broker_id(self) -> None:
        applied = self.identity.applied()
        if applied is not None:
            self.broker_controller_id = applied.broker_id
            return
        cfg = self.config
        while True:
            pending = self.identity.pending()
            if pending is None:
                resp = await self.controllers.invoke(
                    int(RC.CONTROLLER_GET_NEXT_BROKER_ID),
                    GetNextBrokerIdRequestHeader(cfg.broker_cluster_name, cfg.broker_name).to_ext())
                if resp.code != ResponseCode.SUCCESS:
                    raise ControllerUnavailable(f"GET_NEXT_BROKER_ID: code {resp.code} {resp.remark}")
                next_id = GetNextBrokerIdResponseHeader.from_ext(resp.ext_fields).nextBrokerId
                if next_id is None:
                    raise ControllerUnavailable("GET_NEXT_BROKER_ID: no nextBrokerId in the answer")
                pending = self.identity.write_pending(next_id, register_check_code(cfg.broker_addr,
                                                                                   int(time.time() * 1000)))
            check = pending.register_check_code or ""
            resp = await self.controllers.invoke(
                int(RC.CONTROLLER_APPLY_BROKER_ID),
                ApplyBrokerIdRequestHeader(cfg.broker_cluster_name, cfg.broker_name, pending.broker_id, check).to_ext())
            if resp.code == ResponseCode.SUCCESS:
                self.identity.write_applied(pending.broker_id)
                self.broker_controller_id = pending.broker_id
                log.info("controller.broker_id_applied", broker_controller_id=pending.broker_id)
                return
            log.warning("controller.broker_id_refused", broker_id=pending.broker_id, code=resp.code, remark=resp.remark)
            self.identity.drop_pending()

    async def _register(self) -> RoleAnswer:
        cfg = self.config
        ext = RegisterBrokerToControllerRequestHeader(cfg.broker_cluster_name, cfg.broker_name,
                                                      self.broker_controller_id, cfg.broker_addr).to_ext()
        last = ""
        for _ in range(REGISTER_ATTEMPTS):
            resp = await self.controllers.invoke(int(RC.CONTROLLER_REGISTER_BROKER), ext)
            if resp.code == ResponseCode.SUCCESS:
                h = RegisterBrokerToControllerResponseHeader.from_ext(resp.ext_fields)
                return RoleAnswer(h.masterBrokerId, h.masterAddress, h.masterEpoch,
                                  SyncStateSet.decode(resp.body_bytes()))
            last = f"code {resp.code} {resp.remark}"
            log.warning("controller.register_refused", code=resp.code, remark=resp.remark)
            await asyncio.sleep(JOIN_RETRY_S / 4)
        raise ControllerUnavailable(f"REGISTER_BROKER: {last}")

    async def _elect(self) -> RoleAnswer | None:
        """CONTROLLER_ELECT_MASTER as a broker trigger (the set has no master); None if none could be elected."""
        cfg = self.config
        resp = await self.controllers.invoke(
            int(RC.CONTROLLER_ELECT_MASTER),
            ElectMasterRequestHeader(cfg.broker_cluster_name, cfg.broker_name, self.broker_controller_id).to_ext())
        if resp.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            log.info("controller.elect_refused", code=resp.code, remark=resp.remark)
            return None
        h = ElectMasterResponseHeader.from_ext(resp.ext_fields)
        return RoleAnswer(h.masterBrokerId, h.masterAddress, h.masterEpoch,
                          SyncStateSet(frozenset({h.masterBrokerId}) if h.masterBrokerId is not None else frozenset(),
                                       h.syncStateSetEpoch or 0))

    def _adopt(self, a: RoleAnswer) -> None:
        self.master_id, self.master_addr = a.master_id, a.master_addr
        self.master_epoch = a.master_epoch if a.master_epoch is not None else self.master_epoch
        if a.sse is not None and (a.sse.sync_state_set or a.sse.sync_state_set_epoch):
            self.sse = a.sse

    # ---- periodic -----------------------------------------------------------------------------
    def start(self, server: Registrar) -> None:
        register_notify(server, self.on_notify, self.on_hand_over, self.epoch_cache)
        cfg, sup = self.config, self.store.supervisor
        self._tasks = [
            sup.spawn("controller-heartbeat", self._every(cfg.broker_heartbeat_interval / 1000.0, 0.0,
                                                          self._heartbeat_once)),
            sup.spawn("controller-replica-info", self._every(cfg.sync_broker_metadata_period / 1000.0,
                                                             INITIAL_REPLICA_INFO_S, self.sync_replica_info)),
            sup.spawn("controller-metadata", self._every(cfg.sync_controller_metadata_period / 1000.0,
                                                         cfg.sync_controller_metadata_period / 1000.0,
                                                         self._find_leader)),
            sup.spawn("controller-sync-state-set", self._every(SYNC_STATE_CHECK_S, SYNC_STATE_CHECK_S,
                                                               self.check_sync_state_set)),
        ]

    @staticmethod
    def _every(period_s: float, initial_s: float, step: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
        async def loop() -> None:
            await asyncio.sleep(initial_s)
            while True:
                try:
                    await step()
                except (ControllerUnavailable, OSError, TimeoutError, CodecError) as e:
                    log.info("controller.step_failed", step=getattr(step, "__name__", repr(step)), error=str(e))
                await asyncio.sleep(period_s)
        return loop

    async def shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await self.store.supervisor.reap(self._tasks)
        self._tasks = []
        self.controllers.close()

    async def _find_leader(self) -> None:
        await self.controllers.find_leader()

    async def _heartbeat_once(self) -> None:
        cfg = self.config
        end = self.store.commitlog_max_offset()
        # as Apache's: the last epoch of the epoch file and the confirmOffset (the election orders by both)
        last = self.replica.epochs.last()
        epoch = last.epoch if last is not None else self.master_epoch
        svc, client = self.replica.ha_service, self.replica.ha_client
        confirm = end
        if isinstance(svc, AutoSwitchHAService) and self.is_master:
            confirm = svc.confirm_offset()
        elif isinstance(client, AutoSwitchHAClient):
            confirm = client.confirm_offset
        await self.controllers.heartbeat(BrokerHeartbeatRequestHeader(
            cfg.broker_cluster_name, cfg.broker_addr, cfg.broker_name, brokerId=self.broker_controller_id,
            epoch=epoch, maxOffset=end, confirmOffset=confirm,
            heartbeatTimeoutMills=cfg.controller_heart_beat_timeout_mills,
            electionPriority=cfg.broker_election_priority).to_ext())

    async def sync_replica_info(self) -> None:
        resp = await self.controllers.invoke(int(RC.CONTROLLER_GET_REPLICA_INFO),
                                             GetReplicaInfoRequestHeader(self.config.broker_name).to_ext())
        if resp.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            log.warning("controller.metadata_lost", action="register again")
            await self.apply_role(await self._register())
            return
        if resp.code != ResponseCode.SUCCESS:
            log.info("controller.replica_info_refused", code=resp.code, remark=resp.remark)
            return
        h = GetReplicaInfoResponseHeader.from_ext(resp.ext_fields)
        await self.apply_role(RoleAnswer(h.masterBrokerId, h.masterAddress, h.masterEpoch,
                                         SyncStateSet.decode(resp.body_bytes())))

    async def on_notify(self, h: NotifyBrokerRoleChangedRequestHeader, sse: SyncStateSet) -> None:
        log.info("controller.notified", master_id=h.masterBrokerId, master=h.masterAddress, master_epoch=h.masterEpoch,
                 sync_state_set=sorted(sse.sync_state_set))
        await self.apply_role(RoleAnswer(h.masterBrokerId, h.masterAddress, h.masterEpoch, sse))

    # ---- role changes -------------------------------------------------------------------------
    async def apply_role(self, a: RoleAnswer) -> None:
        async with self._role_lock:
            if a.master_id is None or a.master_epoch is None:
                if not self.is_master:  # no master: ask for an election (the controller picks from the set)
                    elected = await self._elect()
                    if elected is not None and elected.master_id is not None:
                        await self._change(elected)
                return
            if a.master_epoch < self.master_epoch:
                return  # stale
            if a.master_epoch == self.master_epoch:
                if self.is_master and a.sse is not None and a.sse.sync_state_set_epoch > self.sse.sync_state_set_epoch:
                    self.sse = a.sse
                    svc = self._autoswitch()
                    if svc is not None:
                        svc.release()  # waits and the dispatch limit follow the controller's set
                return
            await self._change(a)

    async def _change(self, a: RoleAnswer) -> None:
        if a.master_epoch is not None and a.master_epoch <= self.master_epoch and a.master_id == self.master_id:
            return
        followed = self.master_addr if not self.is_master else None
        self._adopt(a)
        replica = self.replica
        if self.is_master:
            if replica.is_slave:
                ha = replica.ha_client
                lost_at = ha.link.disconnected_at if ha is not None and ha.link.connected_to is None else None
                if followed and followed != self.config.broker_addr:
                    await self._hand_over_from(followed)
                await replica.promote(MASTER_ROLE, self.master_epoch)
                svcs = replica.services
                watched: list[DelayLevelService | TimerMessageStore] = [svcs.delay_service]
                if svcs.timer_service is not None:
                    watched.append(svcs.timer_service)
                self.clock.became_master(self.master_epoch, lost_at, watched)
            else:  # elected again, or the same master in a newer epoch
                replica.begin_epoch(self.store, self.master_epoch)
                if replica.fenced:
                    await replica.fence(False, 0)
            log.warning("controller.role_master", master_epoch=self.master_epoch,
                        sync_state_set=sorted(self.sse.sync_state_set))
            return
        if not replica.is_slave:
            if not replica.fenced:  # at once: a hand-over's answer (the CommitLog end) must be final
                await replica.fence(True, self.broker_controller_id)
            self._demote_soon()
            return
        replica.follow(self.master_addr)
        log.warning("controller.role_slave", master=self.master_addr, master_id=self.master_id,
                    master_epoch=self.master_epoch)

    def _demote_soon(self) -> None:
        """The fenced master becomes a slave of the new one (ReplicaRole.demote) after this role change
        returns, so HAND_OVER_MASTER is answered before the scheduler's services have stopped."""
        task = asyncio.get_running_loop().create_task(self._demote())
        self._demoting.add(task)  # a reference until done (the loop keeps only a weak one)
        task.add_done_callback(self._demoting.discard)

    async def _demote(self) -> None:
        async with self._role_lock:
            replica = self.replica
            if self.is_master or replica.is_slave or not replica.fenced:
                return  # elected again meanwhile, or already demoted
            try:
                await replica.demote(self.broker_controller_id, self.master_addr)
            except Exception as e:  # stays fenced (no write, no delivery); a restart rejoins as a slave
                log.error("controller.demotion_failed", new_master=self.master_addr, error=repr(e),
                          detail="fenced: writes refused; restart it to rejoin as a slave")
                return
            log.warning("controller.role_slave", master=self.master_addr, master_id=self.master_id,
                        master_epoch=self.master_epoch, demoted=True)

    # ---- epochs (GET_BROKER_EPOCH_CACHE) --------------------------------------------------------
    def epoch_cache(self) -> EpochEntryCache:
        """mqadmin getBrokerEpoch: this broker's epoch file (storage.epoch_file) and CommitLog end."""
        cfg, epochs = self.config, self.replica.epochs
        epochs.load()
        return EpochEntryCache(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, tuple(epochs.entries),
                               self.store.commitlog_max_offset())

    # ---- orderly hand-over ----------------------------------------------------------------------
    async def _hand_over_from(self, old: str) -> bool:
        """Before promoting: the master this broker followed steps down and this replica catches up with
        its last byte (True), so the deliveries it put are all here. False: it did not answer (dead) or
        refused, or the replica did not catch up in time (then what it delivered after the last
        replicated byte may repeat, as after a kill -9)."""
        t0 = time.monotonic()
        ext = {"masterEpoch": str(self.master_epoch), "masterBrokerId": str(self.broker_controller_id)}
        try:
            resp = await self.replica.client.invoke(old, RemotingCommand.request(int(RC.HAND_OVER_MASTER), ext),
                                                    HAND_OVER_TIMEOUT_S)
        except Exception as e:  # a dead master: refused at once, or no answer in time
            log.info("controller.hand_over_no_answer", old_master=old, error=repr(e))
            return False
        if resp.code != ResponseCode.SUCCESS:
            log.warning("controller.hand_over_refused", old_master=old, code=resp.code, remark=resp.remark)
            return False
        try:
            end = int(str((resp.ext_fields or {}).get("commitLogMaxOffset")))
        except ValueError:
            log.warning("controller.hand_over_bad_answer", old_master=old, ext=resp.ext_fields)
            return False
        deadline = t0 + HAND_OVER_CATCH_UP_S
        while self.store.commitlog_max_offset() < end and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # replication applies frames on this loop; no event to wait on here
        caught_up = self.store.commitlog_max_offset() >= end
        log.warning("controller.hand_over", old_master=old, old_end=end, replica_end=self.store.commitlog_max_offset(),
                    caught_up=caught_up, ms=round((time.monotonic() - t0) * 1000, 1))
        return caught_up

    async def on_hand_over(self, master_epoch: int, new_master_id: int) -> int | str:
        """HAND_OVER_MASTER from the broker elected in our place: the controller is asked now (its answer
        fences this master if replaced); stepped down, the CommitLog end, else why not."""
        if master_epoch > self.master_epoch:
            try:
                await self.sync_replica_info()
            except (ControllerUnavailable, OSError, TimeoutError, CodecError) as e:
                return f"cannot ask the controller: {e}"
        if self.is_master or (not self.replica.is_slave and not self.replica.fenced):
            return (f"still the master by the controller (masterEpoch {self.master_epoch}, brokerId "
                    f"{self.master_id}); asked for epoch {master_epoch} by {new_master_id}")
        end = self.store.commitlog_max_offset()
        log.warning("controller.stepped_down", new_master_id=new_master_id, master_epoch=master_epoch, commitlog_end=end)
        return end

    # ---- SyncStateSet (master) ----------------------------------------------------------------
    def _autoswitch(self) -> AutoSwitchHAService | None:
        svc = self.replica.ha_service
        if not self.is_master or self.replica.is_slave or self.replica.fenced:
            return None
        return svc if isinstance(svc, AutoSwitchHAService) else None

    def _expand_soon(self, slave_id: int) -> None:
        """The HA service saw a slave outside the set catch up: propose it now (Apache: on that ack), at most
        once per SYNC_STATE_CHECK_S for one slave (a refused proposal is not repeated on every ack)."""
        now = time.monotonic()
        if self._altering or self._autoswitch() is None or now - self._expand_tried.get(slave_id, -1e9) < SYNC_STATE_CHECK_S:
            return
        self._expand_tried[slave_id] = now
        task = asyncio.get_running_loop().create_task(self._expand(slave_id))
        self._expanding.add(task)  # a reference until done (the loop keeps only a weak one)
        task.add_done_callback(self._expanding.discard)

    async def _expand(self, slave_id: int) -> None:
        me = self.broker_controller_id
        proposed = frozenset(set(self.sse.sync_state_set) | {me, slave_id})
        if proposed != self.sse.sync_state_set:
            try:
                await self._alter(proposed)
            except (ControllerUnavailable, OSError, TimeoutError, CodecError) as e:
                log.info("controller.expand_failed", slave_id=slave_id, error=str(e))
            except Exception as e:  # a one-shot task: nothing awaits it, so an unexpected error is logged here
                log.error("controller.expand_failed", slave_id=slave_id, error=repr(e), unexpected=True)

    async def check_sync_state_set(self) -> None:
        """maybeShrinkSyncStateSet, and the expansion of caught-up slaves an earlier proposal missed."""
        svc = self._autoswitch()
        if svc is None or self._altering:
            return
        me = self.broker_controller_id
        members = frozenset(set(self.sse.sync_state_set) | {me})
        kept = svc.shrink() | {me}
        confirm = svc.confirm_offset()
        limit = self.config.ha_max_time_slave_not_catchup / 1000.0
        now = time.monotonic()
        joining = {c.slave_id for c in svc.slaves.connections
                   if not c.closed and not c.async_learner and c.slave_id >= 0 and c.slave_id not in members
                   and c.ack_offset >= confirm and now - svc.caught_up_at.get(c.slave_id, -limit - 1) <= limit}
        new = frozenset(kept | joining)
        if new != members:
            await self._alter(new)

    async def _alter(self, proposed: frozenset[int]) -> None:
        body = SyncStateSet(proposed, self.sse.sync_state_set_epoch).encode()
        self._altering = True
        try:
            resp = await self.controllers.invoke(
                int(RC.CONTROLLER_ALTER_SYNC_STATE_SET),
                AlterSyncStateSetRequestHeader(self.config.broker_name, self.broker_controller_id,
                                               self.master_epoch).to_ext(),
                body)
        finally:
            self._altering = False
        if resp.code != ResponseCode.SUCCESS:
            log.info("controller.alter_sync_state_set_refused", proposed=sorted(proposed), code=resp.code,
                     remark=resp.remark)
            return
        new = SyncStateSet.decode(resp.body_bytes())
        epoch = AlterSyncStateSetResponseHeader.from_ext(resp.ext_fields).newSyncStateSetEpoch
        self.sse = SyncStateSet(new.sync_state_set or proposed, epoch if epoch is not None else new.sync_state_set_epoch)
        log.info("controller.sync_state_set", sync_state_set=sorted(self.sse.sync_state_set),
                 sync_state_set_epoch=self.sse.sync_state_set_epoch)
        svc = self._autoswitch()
        if svc is not None:
            svc.release()  # sends waiting for a member that left can be answered

    def stats(self) -> ControllerStats:
        return {"controllerLeader": self.controllers.leader or "", "brokerControllerId": self.broker_controller_id,
                "masterBrokerId": self.master_id if self.master_id is not None else -1,
                "masterAddress": self.master_addr or "", "masterEpoch": self.master_epoch,
                "syncStateSet": sorted(self.sse.sync_state_set), "syncStateSetEpoch": self.sse.sync_state_set_epoch,
                "failoverMasterSeconds": self.clock.master_s, "failoverFirstDeliverySeconds": self.clock.first_delivery_s}


    def runtime_info(self) -> dict[str, str]:
        """Flat GET_BROKER_RUNTIME_INFO entries (controller*)."""
        return {f"controller{k[:1].upper()}{k[1:]}" if not k.startswith("controller") else k:
                ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in self.stats().items()}


def notify_command(h: NotifyBrokerRoleChangedRequestHeader, sse: SyncStateSet) -> RemotingCommand:
    """A NOTIFY_BROKER_ROLE_CHANGED request as the controller sends it (tools, tests)."""
    return RemotingCommand.request(int(RC.NOTIFY_BROKER_ROLE_CHANGED), h.to_ext(), sse.encode())
