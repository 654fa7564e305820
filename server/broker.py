"""BrokerController: the composition root (name server + broker in one process).

Builds the MessageStore, the topic / subscription-group / consumer-offset tables, the client
manager, long-poll hold, delay-level and timer services and the RemotingServer listening on
[listenPort, listenPort-2]; registers the processors; creates the system topics.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import structlog

from codec.codes import ResponseCode
from codec.properties import MessageConst
from codec.record import MessageRecord, encode_record
from scheduler.browse import ScheduledBrowser
from scheduler.delay_service import DelayLevelService
from scheduler.levels import parse_delay_levels
from scheduler.timer import TimerMessageStore
from server.client_manager import ClientManager
from server.cluster.ha.service import ReplicaRole, ReplicaServices
from server.cluster.namesrv.kv_config import KVConfigManager
from server.cluster.registration import BrokerRegistrar
from server.config import BrokerConfig
from server.observability.broker_stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, BrokerStats
from server.observability.client_errors import ClientErrorLog
from server.observability.http import MetricsHttpServer
from server.observability.prometheus import RpcLatency
from server.observability.registry import Registry
from server.observability.telemetry import Telemetry
from server.observability.traffic import TrafficCounters
from server.offsets_table import ConsumerOffsetManager
from server.pop.service import PopService
from server.pop.state import PopStore
from server.processor_wiring import built, grpc_deps, pop_deps, register_processors
from server.processors.send_common import PUT_STATUS_CODES
from server.pull_hold import PullHoldService
from server.put_hooks import PutHooks
from server.rebalance_lock import RebalanceLockManager
from server.runtime_info import broker_runtime_info
from server.security import Security
from server.security import install as install_security
from server.topic_attributes import TopicAttributes
from server.topics import TopicManager
from server.transactions import TransactionService
from server.wiring import (
    RemotingAdapter,
    make_delay_service,
    make_message_store,
    make_registrar,
    make_remoting_server,
    make_timer_service,
    notify_consumer_ids_changed,
    put_request,
    timer_config,
)
from storage.message_store import MessageStore
from storage.meta_store import MetaStore
from storage.store_lock import StoreLock
from storage.subscription_group import SubscriptionGroupTable
from storage.supervisor import SupervisedTask
from storage.topic_config import TopicConfigTable

if TYPE_CHECKING:
    from server.grpc.endpoint import GrpcEndpoint  # imported in start() only when grpcListenPort > 0

log = structlog.get_logger(__name__)


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.boot_ms = int(time.time() * 1000)
        root = config.store_path_root_dir
        os.makedirs(root, exist_ok=True)
        # one broker per store: taken before anything of the store is read or written (a second broker
        # on the same directory raises StoreLockedError here, its abort file and tables untouched)
        self.store_lock = StoreLock(root)
        self.store_lock.acquire()
        self.levels = parse_delay_levels(config.message_delay_level)
        # persistent tables in <root>/config/meta.db (storage.meta_store: one writer thread commits every
        # change; SYNC_FLUSH also fsyncs each commit); the broker's rules sit on top
        self.meta = MetaStore(os.path.join(root, "config"), sync=config.sync_flush)
        self.topics = TopicManager(TopicConfigTable(root, self.meta), config.auto_create_topic_enable,
                                   config.default_topic_queue_nums)
        self.groups = SubscriptionGroupTable(root, config.auto_create_subscription_group, self.meta)
        self.offsets = ConsumerOffsetManager(root, self.meta)
        self.topic_attributes = TopicAttributes(root)  # RocketMQ 5's message.type, beside the topic table
        self.clients = ClientManager(notify_consumer_ids_changed,
                                     expired_timeout_s=config.client_channel_expired_timeout / 1000.0)
        self.locks = RebalanceLockManager(config.channel_lock_max_live_time_ms)
        self.pull_hold = PullHoldService()
        self.kv_config = KVConfigManager()  # embedded mode's name-server KV config (in memory)
        self.registrar: BrokerRegistrar | None = None  # [cluster] set when namesrvAddr is configured
        self.metrics = Registry()
        self.replica = ReplicaRole(config)  # brokerRole / brokerId, HA, promotion (server/cluster/ha)
        # built in start(), in this order
        self.store: MessageStore | None = None
        self.delay_service: DelayLevelService | None = None
        self.timer_service: TimerMessageStore | None = None  # None: timerWheelEnable=false
        self.scheduled: ScheduledBrowser | None = None
        self.hooks: PutHooks | None = None
        self.transactions: TransactionService | None = None
        self.remoting: RemotingAdapter | None = None
        self.security: Security | None = None  # the connection guard and the ACL validator
        self.metrics_http: MetricsHttpServer | None = None  # when metricsPort > 0
        self.telemetry: Telemetry | None = None
        self.grpc: GrpcEndpoint | None = None  # when grpcListenPort > 0
        self.pop: PopService | None = None  # pop consumption: the gRPC endpoint and the remoting pop codes
        self.counters = TrafficCounters(self.metrics)
        c = self.counters
        self.stats = BrokerStats(lambda: (c.put_total, c.get_total), {
            TOPIC_PUT_NUMS: lambda: {t: v[0].value for t, v in c.put_counters.items()},
            TOPIC_PUT_SIZE: lambda: {t: v[1].value for t, v in c.put_counters.items()},
            GROUP_GET_NUMS: lambda: {f"{t}@{g}": v.value for (t, g), v in c.pull_counters.items()},
        }, self.boot_ms)
        self._stats_task: SupervisedTask | None = None
        self.rpc_latency = RpcLatency()
        self.client_errors = ClientErrorLog()
        self._started = False

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        # the effective configuration in one record (broker.conf keys, after the file and the flags)
        log.info("broker.config", config=cfg.to_properties(),
                 delay_table={f"L{i + 1}": ms for i, ms in enumerate(self.levels)})
        cfg.validate()
        self.topics.load()
        self.topic_attributes.load()
        self.groups.load()
        self.offsets.load()
        self.topics.ensure_system_topics(len(self.levels), cfg.timer_wheel_enable, cfg.broker_cluster_name,
                                         cfg.broker_name)
        self.store = make_message_store(cfg, self.levels)
        self.store.add_dispatch_listener(self.pull_hold.on_dispatch)
        await self.replica.prepare(self.store)  # a SLAVE: read-only store, a former master's tail cut
        # scheduled deliveries count as puts on their real topic (per-topic throughput includes them)
        self.delay_service = make_delay_service(self.store, cfg, self.levels, self.meta,
                                                self.counters.on_put_topic)
        self.timer_service = make_timer_service(self.store, cfg, self.counters.on_put_topic)
        self.scheduled = ScheduledBrowser(self.store, self.delay_service, self.timer_service,
                                          self._put_timer_cancel_marker)
        # the timer hook's flow control reads the live wheel, so it gets the service itself
        self.hooks = PutHooks(cfg, self.levels, self.timer_service or timer_config(cfg))
        self.transactions = TransactionService(cfg, self.store, self.clients, self.put_record, self.store_host)
        self.replica.attach(ReplicaServices(topics=self.topics, groups=self.groups, offsets=self.offsets,
                                            delay_service=self.delay_service, timer_service=self.timer_service,
                                            transactions=self.transactions))
        if not self.replica.is_slave:  # a slave's check-backs start at promotion
            self.transactions.start()
        # a SLAVE delivers nothing: its delay levels start at promotion, its wheel only follows
        if not self.replica.is_slave:
            self.delay_service.start()
            if self.timer_service is not None:
                self.timer_service.start()
        self.remoting = make_remoting_server(self.clients)
        self.remoting.server.dispatcher.on_timing = self.rpc_latency.observe
        self.remoting.server.response_observer = self.client_errors
        self.security = install_security(cfg, self.store, self.remoting.server,
                                         lambda t: self.topics.get(t) is not None)  # ACL, TLS, limits
        pop_state = PopStore(cfg.store_path_root_dir, sync=cfg.sync_flush)
        pop_state.load()
        self.pop = PopService(pop_deps(self), pop_state)
        self.pop.start()
        register_processors(self.remoting, self)
        await self.remoting.listen(cfg.listen_host, [cfg.listen_port, cfg.vip_port])
        await self.replica.start()
        if cfg.namesrv_addr_list:
            registrar = self.registrar = make_registrar(cfg, self.topics, self.started_store.supervisor)
            self.topics.add_change_listener(lambda _tc: registrar.topics_changed())
            self.replica.attach_registrar(registrar)  # a slave follows the master it names
            await registrar.start()
        if cfg.metrics_port:
            from server.observability import prometheus
            self.metrics_http = MetricsHttpServer(self.metrics, cfg.metrics_host, cfg.metrics_port,
                                                  render=lambda: prometheus.page_sliced(self))
            await self.metrics_http.start()
        self.telemetry = Telemetry(cfg, self.metrics, self.store, self.offsets, self.delay_service, self.timer_service)
        self.telemetry.start()
        self._stats_task = self.store.supervisor.spawn("broker-stats", self._sample_stats)
        if cfg.grpc_listen_port > 0:  # RocketMQ 5 clients: gRPC MessagingService over the same store
            from server.grpc.endpoint import GrpcEndpoint
            self.grpc = GrpcEndpoint(grpc_deps(self), self.pop)
            await self.grpc.start()
        self._started = True
        log.info("broker.ready", host=cfg.listen_host, port=cfg.listen_port, vip_port=cfg.vip_port,
                 broker_addr=cfg.broker_addr, store=cfg.store_path_root_dir,
                 metrics_port=self.metrics_http.port if self.metrics_http else None,
                 namesrv=cfg.namesrv_addr or "embedded",
                 grpc_port=self.grpc.port if self.grpc else None,
                 delay_levels=len(self.levels), delay_service=self.delay_service is not None,
                 timer_service=self.timer_service is not None)

    async def shutdown(self) -> None:
        """Stop accepting, drain in-flight requests, stop services, flush and checkpoint the store."""
        if not self._started:
            self.meta.close()  # a start that failed half-way: keep what it staged
            self.store_lock.release()
            return
        self._started = False
        log.info("broker.stopping")
        if self._stats_task is not None:
            await self._stats_task.stop()
        if self.registrar is not None:  # out of the routes first, so clients stop sending here
            await self.registrar.shutdown()
        self.pull_hold.shutdown()  # held pulls answer now (counted as in-flight by the server)
        if self.remoting is not None:
            await self.remoting.close(self.config.shutdown_drain_timeout_ms / 1000.0)
        if self.grpc is not None:
            await self.grpc.stop()
        if self.pop is not None:
            await self.pop.stop()
        self.clients.shutdown()
        if self.transactions is not None:
            self.transactions.stop()
        await self.replica.shutdown()
        # a slave's delay levels never ran: their (zero) offsets must not overwrite the synced file
        for svc in (self.timer_service,) if self.replica.is_slave else (self.timer_service, self.delay_service):
            if svc is not None:
                try:
                    await svc.shutdown()
                except Exception as e:
                    log.error("broker.service_shutdown_failed", service=type(svc).__name__, error=repr(e))
        # each step runs whatever the one before met (a full disk fails writes, not the shutdown);
        # meta.close commits what is staged (offsets, topics, groups, delay offsets), checkpoints
        try:
            self.meta.close()
        except OSError as e:
            log.error("broker.shutdown_step_failed", step="meta", error=str(e))
        for step, close in (("telemetry", self.telemetry.shutdown if self.telemetry is not None else None),
                            ("store", self.store.shutdown if self.store is not None else None)):
            if close is None:
                continue
            try:
                await close()
            except OSError as e:
                log.error("broker.shutdown_step_failed", step=step, error=str(e))
        if self.metrics_http is not None:
            await self.metrics_http.close()
        self.store_lock.release()
        log.info("broker.stopped")

    async def _sample_stats(self) -> None:
        """Once a second: the rate windows of `self.stats` (putTps, VIEW_BROKER_STATS_DATA); supervised."""
        while True:
            await asyncio.sleep(1.0)
            self.stats.sample(int(time.time() * 1000))

    async def _put_timer_cancel_marker(self, topic: str, uniq_key: str, deliver_ms: int) -> str | None:
        """The timer wheel's cancel marker (TIMER_DEL_UNIQKEY, as a 5.x producer sends it), stored by the
        broker itself for `scheduled cancel`. None, or what went wrong."""
        host = self.store_host
        now = int(time.time() * 1000)
        rec = MessageRecord(topic=topic, body=b"0", queue_id=0, born_timestamp=now, born_host=host, store_host=host,
                            properties={MessageConst.TAGS: "_RECALL_TAG_", MessageConst.TIMER_DEL_UNIQKEY: f"{topic}+{uniq_key}",
                                        MessageConst.UNIQ_KEY: uniq_key, MessageConst.TIMER_DELIVER_MS: str(int(deliver_ms)),
                                        MessageConst.CLUSTER: self.config.broker_cluster_name})
        code, remark = await self.put_record(rec)
        return None if code == ResponseCode.SUCCESS else f"code {code}: {remark}"

    def delete_topic(self, topic: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: the topic's config, its consumer offsets, ConsumeQueues and stats."""
        existed = self.topics.table.delete(topic)
        self.topic_attributes.delete(topic)
        for group in list(self.offsets.groups_of(topic)):
            self.offsets.remove_group(group, topic)
        self.offsets.persist()
        self.started_store.delete_consume_queues(topic)
        self.counters.forget_topic(topic)
        for name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            self.stats.forget(name, lambda k: k == topic)
        self.stats.forget(GROUP_GET_NUMS, lambda k: k.partition("@")[0] == topic)
        return existed

    # ---- what the broker's own parts use (transactions, pop, telemetry) ---------------------
    @property
    def store_host(self) -> tuple[str, int]:
        host, _, port = self.config.broker_addr.rpartition(":")
        return host, int(port)

    async def put_record(self, rec: MessageRecord, hooks: bool = True) -> tuple[int, str | None]:
        """Store one broker-made record (transaction commit, op record) as a send would: put hooks
        (delay level, timer) unless `hooks=False`, encode, put, wait for SYNC_FLUSH. (code, remark)."""
        delay = -1
        if hooks:
            hooked = built(self.hooks, "hooks").apply(rec)
            if isinstance(hooked, tuple):
                return hooked
            delay = hooked
        [result] = self.started_store.put([put_request(encode_record(rec), rec.topic, rec.queue_id, rec.properties, delay)])
        if not result.ok:
            return PUT_STATUS_CODES[result.status], result.remark or result.status.name
        if result.flushed is not None:
            try:
                await asyncio.wait_for(asyncio.shield(result.flushed), 5.0)
            except Exception as e:
                return ResponseCode.FLUSH_DISK_TIMEOUT, f"flush not confirmed: {e!r}"
        self.counters.on_put([rec.topic], [result])
        if self.replica.sync_master:  # SYNC_MASTER: a slave has it before the answer (11 / 12 if not)
            gate = self.replica.gate(result.phys_offset + result.size)
            return gate if isinstance(gate, tuple) else await gate
        return ResponseCode.SUCCESS, None

    def commitlog_max_offset(self) -> int:
        return self.started_store.commitlog_max_offset()

    def commitlog_min_offset(self) -> int:
        return self.started_store.commitlog_min_offset()

    @property
    def started_store(self) -> MessageStore:
        if self.store is None:
            raise RuntimeError("the store is built in BrokerController.start()")
        return self.store

    def runtime_info(self) -> dict[str, object]:
        """GET_BROKER_RUNTIME_INFO's table (server.runtime_info)."""
        return broker_runtime_info(self)
