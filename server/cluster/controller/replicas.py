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
- another broker named master while this one is master: not switched live (needs AutoSwitch HA's
  truncation): fenced (ReplicaRole.fence: writes refused, registered under its controller id), logged as
  `controller.demotion_needs_restart`; a restart rejoins as a slave and cuts the unreplicated tail
  (ReplicaRole.rejoin); elected again, it is unfenced.

Limits of this foundation (issue 25): replication is the classic 4.x HA transfer, whose handshake
carries no slave brokerId, so the master adds the controller's live, out-of-set replicas to the
SyncStateSet as far as it has caught-up HA connections for them (exact with one slave); no
allAckInSyncStateSet, no epoch file (epochFileCheckpoint), no DataVersion stateVersion = masterEpoch.
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
    EpochEntry,
    EpochEntryCache,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
    decode_broker_replicas_info,
    encode_broker_names,
    register_check_code,
)
from codec.errors import CodecError
from server.cluster.controller.client import ControllerClient, ControllerUnavailable, parse_controller_addrs
from server.cluster.controller.failover import FailoverClock
from server.cluster.controller.identity import BrokerIdentityFiles
from server.cluster.controller.processor import register as register_notify
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
        # masterEpoch -> where this broker's CommitLog was when it became master in it (GET_BROKER_EPOCH_CACHE;
        # this process's view: AutoSwitch HA's epoch file, replicated to slaves, is other work of issue 25)
        self.epochs: list[EpochEntry] = []
        self._store: MessageStore | None = None
        self._tasks: list[SupervisedTask] = []
        self._role_lock = asyncio.Lock()
        self._last_max = 0  # the CommitLog end at the previous SyncStateSet check
        self._last_caught_up = time.monotonic()

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
            self._epoch_started()
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
        await self.controllers.heartbeat(BrokerHeartbeatRequestHeader(
            cfg.broker_cluster_name, cfg.broker_addr, cfg.broker_name, brokerId=self.broker_controller_id,
            epoch=self.master_epoch, maxOffset=end, confirmOffset=end,
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
                lost_at = ha.disconnected_at if ha is not None and ha.connected_to is None else None
                if followed and followed != self.config.broker_addr:
                    await self._hand_over_from(followed)
                await replica.promote(MASTER_ROLE)
                self._epoch_started()
                svcs = replica.services
                watched: list[DelayLevelService | TimerMessageStore] = [svcs.delay_service]
                if svcs.timer_service is not None:
                    watched.append(svcs.timer_service)
                self.clock.became_master(self.master_epoch, lost_at, watched)
            elif replica.fenced:
                await replica.fence(False, 0)
                self._epoch_started()
            log.warning("controller.role_master", master_epoch=self.master_epoch,
                        sync_state_set=sorted(self.sse.sync_state_set))
            return
        if not replica.is_slave:
            if not replica.fenced:
                await replica.fence(True, self.broker_controller_id)
            log.error("controller.demotion_needs_restart", new_master=self.master_addr, master_epoch=self.master_epoch,
                      detail="fenced: writes refused; a live master cannot become a slave yet (AutoSwitch HA "
                             "truncation, issue 25 item 2); restart it to rejoin as a slave")
            return
        replica.follow(self.master_addr)
        log.warning("controller.role_slave", master=self.master_addr, master_id=self.master_id,
                    master_epoch=self.master_epoch)

    # ---- epochs (GET_BROKER_EPOCH_CACHE) --------------------------------------------------------
    def _epoch_started(self) -> None:
        start = self.store.commitlog_max_offset()
        if self.epochs and self.epochs[-1].epoch >= self.master_epoch:
            return
        if self.epochs:
            last = self.epochs[-1]
            self.epochs[-1] = EpochEntry(last.epoch, last.start_offset, start)
        self.epochs.append(EpochEntry(self.master_epoch, start))

    def epoch_cache(self) -> EpochEntryCache:
        cfg = self.config
        return EpochEntryCache(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, tuple(self.epochs),
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
    async def check_sync_state_set(self) -> None:
        if not self.is_master or self.replica.is_slave or self.replica.fenced or self.replica.ha_service is None:
            return
        end = self.store.commitlog_max_offset()
        conns = [c for c in self.replica.ha_service.connections if not c.closed]
        caught = [c for c in conns if c.ack_offset >= 0 and c.ack_offset >= self._last_max]
        self._last_max = end
        me = self.broker_controller_id
        members = set(self.sse.sync_state_set) | {me}
        others = members - {me}
        if caught:
            self._last_caught_up = time.monotonic()
        if len(caught) > len(others):
            candidates = await self._alive_out_of_set(members)
            new = members | set(candidates[:len(caught) - len(others)])
            if new != members:
                await self._alter(frozenset(new))
        elif others and not conns and (time.monotonic() - self._last_caught_up) * 1000 > self.config.ha_max_time_slave_not_catchup:
            await self._alter(frozenset({me}))

    async def _alive_out_of_set(self, members: set[int]) -> list[int]:
        name = self.config.broker_name
        resp = await self.controllers.invoke(int(RC.CONTROLLER_GET_SYNC_STATE_DATA), {}, encode_broker_names([name]))
        if resp.code != ResponseCode.SUCCESS:
            return []
        info = decode_broker_replicas_info(resp.body_bytes()).get(name)
        if info is None:
            return []
        return sorted(r.broker_id for r in info.not_in_sync_replicas if r.alive and r.broker_id not in members)

    async def _alter(self, proposed: frozenset[int]) -> None:
        body = SyncStateSet(proposed, self.sse.sync_state_set_epoch).encode()
        resp = await self.controllers.invoke(
            int(RC.CONTROLLER_ALTER_SYNC_STATE_SET),
            AlterSyncStateSetRequestHeader(self.config.broker_name, self.broker_controller_id, self.master_epoch).to_ext(),
            body)
        if resp.code != ResponseCode.SUCCESS:
            log.info("controller.alter_sync_state_set_refused", proposed=sorted(proposed), code=resp.code,
                     remark=resp.remark)
            return
        new = SyncStateSet.decode(resp.body_bytes())
        epoch = AlterSyncStateSetResponseHeader.from_ext(resp.ext_fields).newSyncStateSetEpoch
        self.sse = SyncStateSet(new.sync_state_set or proposed, epoch if epoch is not None else new.sync_state_set_epoch)
        log.info("controller.sync_state_set", sync_state_set=sorted(self.sse.sync_state_set),
                 sync_state_set_epoch=self.sse.sync_state_set_epoch)

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
