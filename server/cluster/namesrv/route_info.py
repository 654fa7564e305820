"""RouteInfoManager: the name server's route tables and RocketMQ 4.9.8's rules on them
(cluster-ha.md §1.5, §1.9, §1.10, §1.11).

Tables (RocketMQ's names):
- `topic_queue_table`   topic -> brokerName -> QueueData (written only by masters, brokerId 0)
- `broker_addr_table`   brokerName -> BrokerData (cluster, brokerAddrs brokerId -> addr: masters and slaves)
- `cluster_addr_table`  cluster -> {brokerName}
- `broker_live_table`   brokerAddr -> BrokerLiveInfo (last registration, DataVersion, channel, haServerAddr)
- `filter_server_table` brokerAddr -> [filter server addr]

Single-threaded (the asyncio loop): no locks. A broker expires `broker_channel_expired_ms` (120 s)
after its last registration (`scan_not_active_broker`), or at once when the connection it registered
on closes (`on_channel_destroy`). The clock is injectable (monotonic ms) so tests need no sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from codec.bodies import BrokerData, QueueData, TopicRouteData
from codec.namesrv_bodies import DataVersion, RegisterBrokerBody, encode_topic_list

log = structlog.get_logger(__name__)

MASTER_ID = 0
BROKER_CHANNEL_EXPIRED_MS = 120_000
PERM_READ, PERM_WRITE = 4, 2
# QueueData.topicSysFlag bits (TopicSysFlag): unit topic 1, unit-sub 2
FLAG_UNIT, FLAG_UNIT_SUB = 1, 2


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class BrokerChannel(Protocol):
    """The connection a broker registered on (a remoting Connection): closed when the broker expires."""

    def close(self) -> None: ...


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    data_version: DataVersion
    channel: BrokerChannel | None
    ha_server_addr: str | None
    cluster: str = ""
    broker_name: str = ""
    broker_id: int = 0


@dataclass(slots=True)
class RegisterBrokerResult:
    """REGISTER_BROKER's answer for a slave: its master's address and HA address (None for masters, or
    while the master is not registered)."""
    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    clock_ms: Callable[[], int] = _monotonic_ms
    broker_channel_expired_ms: int = BROKER_CHANNEL_EXPIRED_MS
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    # ---- registration --------------------------------------------------------------------
    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str | None, body: RegisterBrokerBody,
                        channel: BrokerChannel | None = None) -> RegisterBrokerResult:
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        bd = self.broker_addr_table.get(broker_name)
        register_first = bd is None
        if bd is None:
            bd = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name, {})
        # a slave switching to master: the same address keeps one entry, under its new id
        for bid in [k for k, v in bd.broker_addrs.items() if v == broker_addr and k != broker_id]:
            del bd.broker_addrs[bid]
        old_addr = bd.broker_addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            # RocketMQ 5 (controller mode): a broker whose stateVersion (masterEpoch) is older than the
            # live holder's of that id -- a replaced master registering late -- does not take its place
            holder = self.broker_live_table.get(old_addr)
            if holder is not None and holder.data_version.state_version > body.data_version.state_version:
                log.warning("namesrv.register_conflict_ignored", cluster=cluster, broker_name=broker_name,
                            broker_id=broker_id, holder=old_addr, holder_state_version=holder.data_version.state_version,
                            broker_addr=broker_addr, state_version=body.data_version.state_version)
                self.broker_live_table.pop(broker_addr, None)
                return RegisterBrokerResult()
        bd.broker_addrs[broker_id] = broker_addr
        register_first = register_first or old_addr is None
        if broker_id == MASTER_ID and old_addr != broker_addr:
            log.info("namesrv.master_addr", cluster=bd.cluster, broker_name=broker_name, old=old_addr,
                     new=broker_addr)
        if broker_id == MASTER_ID and (register_first or self.is_broker_topic_config_changed(
                broker_addr, body.data_version)):
            for tc in body.topic_configs.values():
                self.topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = QueueData(
                    broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.clock_ms(), body.data_version, channel, ha_server_addr, cluster, broker_name, broker_id)
        if prev is None:
            log.info("namesrv.broker_registered", cluster=cluster, broker_name=broker_name, broker_id=broker_id,
                     broker_addr=broker_addr, ha_server_addr=ha_server_addr, topics=len(body.topic_configs))
        if body.filter_server_list:
            self.filter_server_table[broker_addr] = list(body.filter_server_list)
        else:
            self.filter_server_table.pop(broker_addr, None)
        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master = bd.broker_addrs.get(MASTER_ID)
            live = self.broker_live_table.get(master) if master is not None else None
            if live is not None:
                result.master_addr, result.ha_server_addr = master, live.ha_server_addr
        return result

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.broker_live_table.get(broker_addr)
        return prev is None or prev.data_version != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        prev = self.broker_live_table.get(broker_addr)
        return prev.data_version if prev is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        prev = self.broker_live_table.get(broker_addr)
        if prev is not None:
            prev.last_update_ms = self.clock_ms()

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        bd = self.broker_addr_table.get(broker_name)
        removed_name = False
        if bd is not None:
            bd.broker_addrs.pop(broker_id, None)
            if not bd.broker_addrs:
                del self.broker_addr_table[broker_name]
                removed_name = True
        log.info("namesrv.broker_unregistered", cluster=cluster, broker_name=broker_name, broker_id=broker_id,
                 broker_addr=broker_addr, was_live=live is not None)
        if removed_name:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topics_of(broker_name)

    # ---- expiry ----------------------------------------------------------------------------
    def scan_not_active_broker(self) -> list[BrokerLiveInfo]:
        """Remove every broker whose last registration is older than the expiry; returns them (the
        controller closes their channels)."""
        now = self.clock_ms()
        expired = [(addr, info) for addr, info in self.broker_live_table.items()
                   if info.last_update_ms + self.broker_channel_expired_ms < now]
        for addr, info in expired:
            log.warning("namesrv.broker_expired", broker_addr=addr, broker_name=info.broker_name,
                        idle_ms=now - info.last_update_ms)
            self._destroy(addr)
        return [info for _, info in expired]

    def on_channel_destroy(self, channel: object) -> list[str]:
        """The connection a broker registered on closed: remove every broker address registered on it."""
        addrs = [addr for addr, info in self.broker_live_table.items() if info.channel is channel]
        for addr in addrs:
            log.info("namesrv.broker_channel_closed", broker_addr=addr)
            self._destroy(addr)
        return addrs

    def _destroy(self, broker_addr: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for name, bd in list(self.broker_addr_table.items()):
            for bid in [k for k, v in bd.broker_addrs.items() if v == broker_addr]:
                del bd.broker_addrs[bid]
            if bd.broker_addrs:
                continue
            del self.broker_addr_table[name]
            for cluster, names in list(self.cluster_addr_table.items()):
                names.discard(name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topics_of(name)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic, qmap in list(self.topic_queue_table.items()):
            qmap.pop(broker_name, None)
            if not qmap:
                del self.topic_queue_table[topic]

    # ---- write permission ----------------------------------------------------------------------
    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        n = 0
        for qmap in self.topic_queue_table.values():
            qd = qmap.get(broker_name)
            if qd is not None:
                qd.perm &= ~PERM_WRITE
                n += 1
        return n

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        n = 0
        for qmap in self.topic_queue_table.values():
            qd = qmap.get(broker_name)
            if qd is not None:
                qd.perm = PERM_READ | PERM_WRITE
                n += 1
        return n

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if not cluster:
            self.topic_queue_table.pop(topic, None)
            return
        qmap = self.topic_queue_table.get(topic)
        if qmap is None:
            return
        for name in self.cluster_addr_table.get(cluster, ()):
            qmap.pop(name, None)
        if not qmap:
            del self.topic_queue_table[topic]

    # ---- RouteSource (server.cluster.namesrv.processor) --------------------------------------
    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """Every broker's QueueData of the topic and the BrokerData (all ids) of those brokers; None if
        the topic has no queue or none of its brokers is known (TOPIC_NOT_EXIST)."""
        qmap = self.topic_queue_table.get(topic)
        if not qmap:
            return None
        route = TopicRouteData()
        for name in sorted(qmap):
            q = qmap[name]
            route.queue_datas.append(QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm,
                                               q.topic_sys_flag))
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            route.broker_datas.append(BrokerData(bd.cluster, bd.broker_name, dict(bd.broker_addrs)))
            for addr in bd.broker_addrs.values():
                fs = self.filter_server_table.get(addr)
                if fs:
                    route.filter_server_table[addr] = list(fs)
        return route if route.broker_datas else None

    def cluster_info(self) -> tuple[list[BrokerData], dict[str, list[str]]]:
        brokers = [BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
                   for _, b in sorted(self.broker_addr_table.items())]
        return brokers, {c: sorted(names) for c, names in self.cluster_addr_table.items()}

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, qmap in self.topic_queue_table.items() if names & qmap.keys())

    async def all_topics_body(self) -> bytes:
        return encode_topic_list(self.all_topics())

    async def topics_by_cluster_body(self, cluster: str) -> bytes:
        return encode_topic_list(self.topics_by_cluster(cluster))

    def system_topic_list(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: the cluster names and broker names (RocketMQ lists them as the
        "system topics"), and one broker address to ask for the rest."""
        out: list[str] = []
        for cluster, names in sorted(self.cluster_addr_table.items()):
            out.append(cluster)
            out.extend(sorted(names))
        addr = None
        for _, bd in sorted(self.broker_addr_table.items()):
            if bd.broker_addrs:
                addr = bd.broker_addrs[min(bd.broker_addrs)]
                break
        return out, addr

    def topics_with_flag(self, want: Callable[[int], bool]) -> list[str]:
        return sorted(t for t, qmap in self.topic_queue_table.items()
                      if any(want(q.topic_sys_flag) for q in qmap.values()))
