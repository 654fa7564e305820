"""The request processors' collaborators, each room's built here from the broker (the composition root).

Every room in server/processors/ (and server/cluster/ha/processors.py) declares what it uses as a frozen
dataclass (`SendDeps`, `PullDeps`, ...) and registers its handlers with `register(server, deps)`; no
processor sees the BrokerController. This module is the one place that knows which broker part goes where.
`register_processors` runs in `BrokerController.start()` once the store and the services exist; what it
reads of the broker is declared here (`BrokerParts`), so this module does not import the broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from server.cluster.ha import processors as ha_processors
from server.cluster.ha.processors import HaDeps
from server.grpc.deps import GrpcDeps
from server.pop.service import PopDeps
from server.processors import (
    Registrar,
    admin,
    admin_ops,
    admin_stats,
    clients,
    consumer_send_back,
    namesrv,
    offsets,
    pop,
    pull,
    scheduled,
    send,
    topic_group_config,
    transaction,
)
from server.processors.admin import AdminDeps
from server.processors.admin_ops import AdminOpsDeps
from server.processors.admin_stats import AdminStatsDeps
from server.processors.clients import ClientsDeps
from server.processors.consumer_send_back import SendBackDeps
from server.processors.namesrv import NamesrvDeps
from server.processors.offsets import OffsetsDeps
from server.processors.pop import PopProcessorDeps
from server.processors.pull import PullDeps
from server.processors.scheduled import ScheduledDeps
from server.processors.send_common import SendDeps
from server.processors.topic_group_config import TopicGroupConfigDeps

if TYPE_CHECKING:
    from codec.record import MessageRecord
    from scheduler.browse import ScheduledBrowser
    from scheduler.delay_service import DelayLevelService
    from scheduler.timer import TimerMessageStore
    from server.client_manager import ClientManager
    from server.cluster.ha.service import ReplicaRole
    from server.cluster.namesrv.kv_config import KVConfigManager
    from server.config import BrokerConfig
    from server.filter_bitmap import FilterBitmaps
    from server.observability.broker_stats import BrokerStats
    from server.observability.traffic import TrafficCounters
    from server.offsets_table import ConsumerOffsetManager
    from server.pop.service import PopService
    from server.pull_hold import PullHoldService
    from server.put_hooks import PutHooks
    from server.rebalance_lock import RebalanceLockManager
    from server.runtime_info import RuntimeInfoView
    from server.security import Security
    from server.subscription_filter import SubscriptionFilters
    from server.topic_attributes import TopicAttributes
    from server.topics import TopicManager
    from server.transactions import TransactionService
    from storage.message_store import MessageStore
    from storage.meta_store import MetaStore
    from storage.subscription_group import SubscriptionGroupTable

T = TypeVar("T")


class BrokerParts(Protocol):
    """The broker parts the processors' collaborators are built from (`server.broker.BrokerController` is
    the one that has them): read here, never kept. Parts made in `start()` are None until then (`built`)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MessageStore | None: ...
    @property
    def meta(self) -> MetaStore: ...
    @property
    def topics(self) -> TopicManager: ...
    @property
    def topic_attributes(self) -> TopicAttributes: ...
    @property
    def groups(self) -> SubscriptionGroupTable: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def locks(self) -> RebalanceLockManager: ...
    @property
    def pull_hold(self) -> PullHoldService: ...
    @property
    def filters(self) -> SubscriptionFilters: ...
    @property
    def bitmaps(self) -> FilterBitmaps | None: ...
    @property
    def kv_config(self) -> KVConfigManager: ...
    @property
    def replica(self) -> ReplicaRole: ...
    @property
    def levels(self) -> Sequence[int]: ...
    @property
    def counters(self) -> TrafficCounters: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def boot_ms(self) -> int: ...
    @property
    def hooks(self) -> PutHooks | None: ...
    @property
    def delay_service(self) -> DelayLevelService | None: ...
    @property
    def timer_service(self) -> TimerMessageStore | None: ...
    @property
    def scheduled(self) -> ScheduledBrowser | None: ...
    @property
    def transactions(self) -> TransactionService | None: ...
    @property
    def pop(self) -> PopService | None: ...
    @property
    def runtime_view(self) -> RuntimeInfoView | None: ...
    @property
    def security(self) -> Security | None: ...
    @property
    def store_host(self) -> tuple[str, int]: ...

    def delete_topic(self, topic: str) -> bool: ...

    async def put_record(self, rec: MessageRecord, hooks: bool = True) -> tuple[int, str | None]: ...


def built(value: T | None, name: str) -> T:
    """A broker part made in `start()`; processors are wired only after it exists."""
    if value is None:
        raise RuntimeError(f"broker.{name} is not built yet: processors are registered in BrokerController.start()")
    return value


def send_deps(b: BrokerParts) -> SendDeps:
    return SendDeps(config=b.config, store=built(b.store, "store"), topics=b.topics, groups=b.groups,
                    hooks=built(b.hooks, "hooks"), replica=b.replica, levels=b.levels,
                    on_put=b.counters.on_put, on_put_sizes=b.counters.on_put_sizes)


def pull_deps(b: BrokerParts) -> PullDeps:
    return PullDeps(config=b.config, store=built(b.store, "store"), topics=b.topics, groups=b.groups,
                    clients=b.clients, offsets=b.offsets, replica=b.replica, pull_hold=b.pull_hold,
                    on_pull=b.counters.on_pull, filters=b.filters, bitmaps=b.bitmaps)


def send_back_deps(b: BrokerParts) -> SendBackDeps:
    return SendBackDeps(config=b.config, store=built(b.store, "store"), topics=b.topics, groups=b.groups,
                        hooks=built(b.hooks, "hooks"), on_put=b.counters.on_put)


def grpc_deps(b: BrokerParts) -> GrpcDeps:
    """The RocketMQ 5 endpoint's view of the broker (server/grpc)."""
    return GrpcDeps(config=b.config, store=built(b.store, "store"), topics=b.topics, groups=b.groups,
                    offsets=b.offsets, clients=b.clients, transactions=built(b.transactions, "transactions"),
                    send=send_deps(b), put_record=b.put_record, levels=b.levels,
                    timer_enabled=b.timer_service is not None, acl=b.security.acl if b.security else None,
                    store_host=b.store_host, attributes=b.topic_attributes, filters=b.filters)


def _no_pop_channels(conn: object) -> bool:
    return False


def pop_deps(b: BrokerParts) -> PopDeps:
    """Pop consumption's view of the broker (server/pop): its gRPC sessions pop when the endpoint runs."""
    is_pop_channel = _no_pop_channels
    if b.config.grpc_port > 0:
        from server.grpc.telemetry import TelemetryChannel  # grpc is imported only when the endpoint runs

        def is_pop_channel(conn: object) -> bool:
            return isinstance(conn, TelemetryChannel)
    return PopDeps(store=built(b.store, "store"), topics=b.topics, groups=b.groups, offsets=b.offsets,
                   clients=b.clients, put_record=b.put_record, store_host=b.store_host,
                   is_pop_channel=is_pop_channel, bitmaps=b.bitmaps)


def register_processors(server: Registrar, b: BrokerParts) -> None:
    """Every processor room on `server`, each with its own collaborators."""
    store = built(b.store, "store")
    cfg = b.config
    if not cfg.namesrv_addr_list:  # embedded mode: this process is its own name server
        namesrv.register(server, NamesrvDeps(config=cfg, topics=b.topics, kv_config=b.kv_config))
    send.register(server, send_deps(b))
    pull.register(server, pull_deps(b))
    offsets.register(server, OffsetsDeps(store=store, offsets=b.offsets, meta=b.meta))
    clients.register(server, ClientsDeps(clients=b.clients, groups=b.groups, topics=b.topics, locks=b.locks))
    consumer_send_back.register(server, send_back_deps(b))
    transaction.register(server, built(b.transactions, "transactions"))
    admin.register(server, AdminDeps(config=cfg, store=store, topics=b.topics, meta=b.meta,
                                     runtime_info=built(b.runtime_view, "runtime_view").table, filters=b.filters,
                                     attributes=b.topic_attributes))
    admin_stats.register(server, AdminStatsDeps(config=cfg, store=store, topics=b.topics, groups=b.groups,
                                                offsets=b.offsets, clients=b.clients, meta=b.meta,
                                                boot_ms=b.boot_ms))
    ha_processors.register(server, HaDeps(config=cfg, store=store, replica=b.replica,
                                          delay_service=built(b.delay_service, "delay_service"),
                                          timer_service=b.timer_service))
    admin_ops.register(server, AdminOpsDeps(config=cfg, store=store, topics=b.topics, groups=b.groups,
                                            offsets=b.offsets, clients=b.clients, stats=b.stats,
                                            delete_topic=b.delete_topic))
    scheduled.register(server, ScheduledDeps(scheduled=built(b.scheduled, "scheduled"), levels=b.levels))
    topic_group_config.register(server, TopicGroupConfigDeps(topics=b.topics, groups=b.groups,
                                                                  attributes=b.topic_attributes))
    pop.register(server, PopProcessorDeps(pop=built(b.pop, "pop"), broker_name=cfg.broker_name, filters=b.filters))
