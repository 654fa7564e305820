"""BrokerController: the composition root (name server + broker in one process).

`_assemble` is the one place the broker's parts are built, in order: the tables, the MessageStore, the
delay-level and timer services, transactions, telemetry and the /metrics page, the HA role, the
RemotingServer on [listenPort, listenPort-2] with its processors, the name-server registration, the
gRPC endpoint. Each is added to a `Lifecycle` (server/lifecycle.py) as it is built, with its start and
stop: `start()` starts them in that order, `shutdown()` stops them in reverse, each step on its own.
The parts read of the broker what their declared views name (`RuntimeInfoView`, `MetricsView`, the
processors' `...Deps` built in server/processor_wiring.py); `wiring.py` names the other packages'
constructors.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import structlog

from codec.codes import ResponseCode
from codec.filter_bitmap import UNIT_SIZE as BITMAP_UNIT_SIZE
from codec.properties import MessageConst
from codec.record import MessageRecord, encode_record
from scheduler.browse import ScheduledBrowser
from scheduler.delay_service import DelayLevelService
from scheduler.levels import parse_delay_levels
from scheduler.timer import TimerMessageStore
from server.client_manager import ClientManager
from server.cluster.controller.replicas import ReplicasManager
from server.cluster.ha.replica_services import ReplicaServices
from server.cluster.ha.service import ReplicaRole
from server.cluster.namesrv.kv_config import KVConfigManager
from server.cluster.registration import BrokerRegistrar
from server.config import BrokerConfig
from server.filter_bitmap import FilterBitmaps
from server.lifecycle import Lifecycle
from server.listeners import bound
from server.observability.broker_stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, BrokerStats
from server.observability.client_errors import ClientErrorLog
from server.observability.http import MetricsHttpServer
from server.observability.prometheus import MetricsView
from server.observability.registry import Registry, RpcLatency
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
from server.runtime_info import RuntimeInfoView
from server.security import Security
from server.security import install as install_security
from server.subscription_filter import SubscriptionFilters
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
    open_message_store,
    put_request,
    timer_config,
)
from storage.filter_bitmap import FilterBitmapFiles
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
        self.filters = SubscriptionFilters(config.enable_property_filter, config.filter_support_retry)
        self.bitmaps: FilterBitmaps | None = None  # enableCalcFilterBitMap: built with the store in _assemble
        self.kv_config = KVConfigManager()  # embedded mode's name-server KV config (in memory)
        self.registrar: BrokerRegistrar | None = None  # [cluster] set when namesrvAddr is configured
        self.metrics = Registry()
        self.replica = ReplicaRole(config)  # brokerRole / brokerId, HA, promotion (server/cluster/ha)
        # enableControllerMode: Apache's controller gives the role (server/cluster/controller)
        self.controller = ReplicasManager(config, self.replica, self.metrics) if config.enable_controller_mode else None
        # built by _assemble (in start()), in this order
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
        self.runtime_view: RuntimeInfoView | None = None  # GET_BROKER_RUNTIME_INFO's reads, built in start()
        self.metrics_view: MetricsView | None = None  # the /metrics page's reads, built in start()
        self.lifecycle = Lifecycle()
        self._closed = False

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        # the effective configuration in one record (broker.conf keys, after the file and the flags)
        log.info("broker.config", config=cfg.to_properties(),
                 delay_table={f"L{i + 1}": ms for i, ms in enumerate(self.levels)})
        cfg.validate()
        self._assemble()
        await self.lifecycle.start()
        log.info("broker.ready", host=cfg.listen_host, port=cfg.listen_port, vip_port=cfg.vip_port,
                 broker_addr=cfg.broker_addr, store=cfg.store_path_root_dir,
                 metrics_port=self.metrics_http.port if self.metrics_http else None,
                 namesrv=cfg.namesrv_addr or "embedded",
                 grpc_port=self.grpc.port if self.grpc else None,
                 delay_levels=len(self.levels), delay_service=self.delay_service is not None,
                 timer_service=self.timer_service is not None)

    def _assemble(self) -> None:
        """Build the broker's parts in order, each added to `self.lifecycle` with its start and stop."""
        cfg, levels, life, replica = self.config, self.levels, self.lifecycle, self.replica
        life.add("tables", start=self._load_tables)
        store = self.store = make_message_store(cfg, levels)
        if cfg.enable_property_filter and cfg.enable_calc_filter_bit_map:  # before the pull hold: a woken pull sees it
            bitmaps = self.bitmaps = FilterBitmaps(FilterBitmapFiles(
                cfg.store_path_root_dir, cfg.mapped_file_size_consume_queue_ext // BITMAP_UNIT_SIZE), store)
            store.add_dispatch_listener(bitmaps.on_dispatch)
            store.add_queue_files_listener(bitmaps.files)  # the bitmap files follow the ConsumeQueues' retention
            life.add("filter_bitmaps", stop=bitmaps.close)  # closed after the store stopped dispatching
        store.add_dispatch_listener(self.pull_hold.on_dispatch)
        life.add("store", start=lambda: open_message_store(store), stop=store.shutdown)
        # a topic whose config a crash lost while its messages were stored (TopicManager.adopt_stored); a slave
        # learns its topics from its master (server/cluster/ha/learned.py)
        life.add("topics.adopt_stored",
                 start=lambda: None if self.replica.is_slave else self.topics.adopt_stored(store.queues.queues))
        if self.bitmaps is not None:  # cut to what the recovered ConsumeQueues hold, before anything dispatches
            life.add("filter_bitmaps.recover", start=self.bitmaps.recover)
        ctl = self.controller
        if ctl is not None:  # the role is the controller's: known before anything below starts
            life.add("controller.join", start=lambda: ctl.join(store))
        # a SLAVE: read-only store, a former master's tail cut; before the scheduler services start
        life.add("replica.prepare", start=lambda: replica.prepare(store))
        # scheduled deliveries count as puts on their real topic (per-topic throughput includes them)
        delay = self.delay_service = make_delay_service(store, cfg, levels, self.meta, self.counters.on_put_topic)
        timer = self.timer_service = make_timer_service(store, cfg, self.counters.on_put_topic)
        self.scheduled = ScheduledBrowser(store, delay, timer, self._put_timer_cancel_marker)
        # the timer hook's flow control reads the live wheel, so it gets the service itself
        self.hooks = PutHooks(cfg, levels, timer or timer_config(cfg))
        tx = self.transactions = TransactionService(cfg, store, self.clients, self.put_record, self.store_host)
        # a SLAVE delivers nothing: its check-backs and delay levels start at promotion, its wheel only follows
        life.add("transactions", start=lambda: None if replica.is_slave else tx.start(), stop=tx.stop)
        life.add("delay_service", start=lambda: None if replica.is_slave else delay.start(),
                 stop=self._stop_delay_levels)
        if timer is not None:
            life.add("timer_service", start=lambda: None if replica.is_slave else timer.start(), stop=timer.shutdown)
        runtime = self.runtime_view = RuntimeInfoView(
            config=cfg, store=store, stats=self.stats, counters=self.counters, pull_hold=self.pull_hold,
            rpc_latency=self.rpc_latency, boot_ms=self.boot_ms)
        runtime.sources.append(("delay_service", delay.runtime_info))
        if timer is not None:
            runtime.sources.append(("timer_service", timer.runtime_info))
        runtime.sources.append(("transactions", tx.runtime_info))
        if self.bitmaps is not None:
            runtime.sources.append(("filter_bitmaps", self.bitmaps.runtime_info))
        telemetry = self.telemetry = Telemetry(cfg, self.metrics, store, self.offsets, delay, timer)
        life.add("telemetry", start=telemetry.start, stop=telemetry.shutdown)
        view = self.metrics_view = MetricsView(
            config=cfg, registry=self.metrics, counters=self.counters, clients=self.clients, offsets=self.offsets,
            topics=self.topics, store=store, rpc_latency=self.rpc_latency, delay_service=delay, timer_service=timer,
            transactions=tx)
        if cfg.metrics_port:
            from server.observability import prometheus
            http = self.metrics_http = MetricsHttpServer(self.metrics, cfg.metrics_host, cfg.metrics_port,
                                                         render=lambda: prometheus.page_sliced(view))
            life.add("metrics_http", start=self._start_metrics_http, stop=http.close)
        # HA before the remoting server: stopped after it, so in-flight SYNC_MASTER sends still get their acks
        life.add("replica", start=replica.start, stop=replica.shutdown)
        life.add("clients", stop=self.clients.shutdown)
        remoting = self.remoting = make_remoting_server(self.clients)
        remoting.server.dispatcher.on_timing = self.rpc_latency.observe
        remoting.server.response_observer = self.client_errors
        self.security = install_security(cfg, store, remoting.server,
                                         lambda t: self.topics.get(t) is not None)  # ACL, TLS, limits
        # pop consumption (server/pop): its state loaded before the remoting port and the gRPC endpoint take
        # requests, stopped after both
        pop = self.pop = PopService(pop_deps(self), PopStore(cfg.store_path_root_dir, sync=cfg.sync_flush))
        replica.attach(ReplicaServices(topics=self.topics, groups=self.groups, offsets=self.offsets,
                                       delay_service=delay, timer_service=timer, transactions=tx, pop=pop))
        life.add("pop", start=self._start_pop, stop=pop.stop)
        runtime.sources.append(("pop", pop.runtime_info))
        register_processors(remoting, self)
        life.add("remoting", start=self._listen,
                 stop=lambda: remoting.close(cfg.shutdown_drain_timeout_ms / 1000.0))
        # held pulls answer first (counted as in-flight by the server, which then drains)
        life.add("pull_hold", stop=self.pull_hold.shutdown)
        if cfg.namesrv_addr_list:  # registered once listening; out of the routes first, so clients stop sending here
            # controller mode: the masterEpoch as the registration's DataVersion.stateVersion (RocketMQ 5)
            epoch_of = self.controller.epoch_of if self.controller is not None else None
            registrar = self.registrar = make_registrar(cfg, self.topics, store.supervisor, epoch_of)
            self.topics.add_change_listener(lambda _tc: registrar.topics_changed())
            replica.attach_registrar(registrar)  # a slave follows the master it names
            runtime.sources.append(("registrar", registrar.stats))
            life.add("registrar", start=registrar.start, stop=registrar.shutdown)
        if ctl is not None:  # heartbeats, role checks, NOTIFY_BROKER_ROLE_CHANGED; stopped before the registrar
            runtime.sources.append(("controller", ctl.runtime_info))
            life.add("controller", start=lambda: ctl.start(remoting), stop=ctl.shutdown)
        life.add("broker_stats", start=self._start_stats, stop=self._stop_stats)
        if cfg.grpc_port > 0:  # RocketMQ 5 clients: gRPC MessagingService over the same store
            from server.grpc.endpoint import GrpcEndpoint
            grpc = self.grpc = GrpcEndpoint(grpc_deps(self), pop)
            runtime.sources.append(("grpc", grpc.stats))
            life.add("grpc", start=grpc.start, stop=grpc.stop)
        runtime.sources.append(("replica", replica.runtime_info))

    async def _start_metrics_http(self) -> None:
        cfg = self.config
        assert self.metrics_http is not None
        with bound("metricsPort", cfg.metrics_host, cfg.metrics_port):
            await self.metrics_http.start()

    async def _listen(self) -> None:
        """The remoting port and the VIP channel, each clash one line naming its key (server.listeners)."""
        cfg, remoting = self.config, self.remoting
        assert remoting is not None  # built by _assemble before the lifecycle starts
        with bound("listenPort", cfg.listen_host, cfg.listen_port):
            await remoting.listen(cfg.listen_host, [cfg.listen_port])
        with bound("listenPort-2", cfg.listen_host, cfg.vip_port):  # the VIP channel
            await remoting.listen(cfg.listen_host, [cfg.vip_port])

    def _load_tables(self) -> None:
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.topic_attributes.load()
        cfg = self.config
        self.topics.ensure_system_topics(len(self.levels), cfg.timer_wheel_enable, cfg.broker_cluster_name,
                                         cfg.broker_name)

    def _start_pop(self) -> None:
        pop = built(self.pop, "pop")
        pop.state.load()
        pop.start(sweep=not self.replica.is_slave)  # the revive sweep is a master's

    async def _stop_delay_levels(self) -> None:
        # a slave's delay levels never ran: their (zero) offsets must not overwrite the synced file
        if not self.replica.is_slave and self.delay_service is not None:
            await self.delay_service.shutdown()

    def _start_stats(self) -> None:
        self._stats_task = self.started_store.supervisor.spawn("broker-stats", self._sample_stats)

    async def _stop_stats(self) -> None:
        if self._stats_task is not None:
            await self._stats_task.stop()

    async def shutdown(self) -> None:
        """Stop the started components in reverse order (stop accepting, drain in-flight requests, stop
        services, flush and checkpoint the store), then commit the tables and release the store."""
        if self._closed:
            return
        self._closed = True
        log.info("broker.stopping", components=self.lifecycle.started)
        await self.lifecycle.stop()
        # meta.close commits what is staged (offsets, topics, groups, delay offsets) and checkpoints;
        # a start that failed half-way keeps what it staged too
        try:
            self.meta.close()
        except OSError as e:
            log.error("broker.shutdown_step_failed", step="meta", error=str(e))
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
        return built(self.runtime_view, "runtime_view").table()
