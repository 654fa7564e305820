"""BrokerController: the composition root (name server + broker in one process).

Builds the MessageStore, the topic / subscription-group / consumer-offset tables, the client
manager, long-poll hold, delay-level and timer services and the RemotingServer listening on
[listenPort, listenPort-2]; registers the processors; creates the system topics.
"""

from __future__ import annotations

import asyncio
import os
import time

import structlog

from codec.codes import ResponseCode
from codec.record import MessageRecord, encode_record, read_store_timestamp
from scheduler.browse import ScheduledBrowser
from scheduler.levels import parse_delay_levels
from server.client_manager import ClientManager
from server.cluster.ha.service import ReplicaRole
from server.cluster.namesrv.kv_config import KVConfigManager
from server.cluster.registration import BrokerRegistrar
from server.config import BrokerConfig
from server.observability.broker_stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, BrokerStats
from server.observability.client_errors import ClientErrorLog
from server.observability.prometheus import RpcLatency
from server.observability.registry import Registry
from server.offsets_table import ConsumerOffsetManager
from server.processors.send_common import PUT_STATUS_CODES
from server.pull_hold import PullHoldService
from server.put_hooks import PutHooks
from server.rebalance_lock import RebalanceLockManager
from server.topics import TopicManager
from server.transactions import TransactionService
from server.wiring import (
    make_delay_service,
    make_message_store,
    make_registrar,
    make_remoting_server,
    make_timer_service,
    notify_consumer_ids_changed,
    put_request,
    timer_config,
)
from storage.meta_store import MetaStore
from storage.store_lock import StoreLock
from storage.subscription_group import SubscriptionGroupTable
from storage.topic_config import TopicConfigTable

log = structlog.get_logger(__name__)

BROKER_VERSION = 409


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
        self.clients = ClientManager(notify_consumer_ids_changed,
                                     expired_timeout_s=config.client_channel_expired_timeout / 1000.0)
        self.locks = RebalanceLockManager(config.channel_lock_max_live_time_ms)
        self.pull_hold = PullHoldService()
        self.kv_config = KVConfigManager()  # embedded mode's name-server KV config (in memory)
        self.registrar: BrokerRegistrar | None = None  # [cluster] set when namesrvAddr is configured
        self.metrics = Registry()
        self.replica = ReplicaRole(self)  # brokerRole / brokerId, HA, promotion (server/cluster/ha)
        self.store = None
        self.transactions = None
        self.hooks: PutHooks | None = None
        self.delay_service = None
        self.timer_service = None
        self.scheduled: ScheduledBrowser | None = None
        self.remoting = None
        self.metrics_http = None
        self.grpc = None  # server.grpc.endpoint.GrpcEndpoint when grpcListenPort > 0
        self.put_total = 0
        self.get_total = 0
        self._put_counters: dict[str, tuple] = {}
        self._pull_counters: dict[tuple[str, str], object] = {}  # (topic, group) -> Counter
        self.stats = BrokerStats(lambda: (self.put_total, self.get_total), {
            TOPIC_PUT_NUMS: lambda: {t: c[0].value for t, c in self._put_counters.items()},
            TOPIC_PUT_SIZE: lambda: {t: c[1].value for t, c in self._put_counters.items()},
            GROUP_GET_NUMS: lambda: {f"{t}@{g}": c.value for (t, g), c in self._pull_counters.items()},
        }, self.boot_ms)
        self._stats_task = None  # storage.supervisor.SupervisedTask
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
        self.groups.load()
        self.offsets.load()
        self.topics.ensure_system_topics(len(self.levels), cfg.timer_wheel_enable)
        self.store = make_message_store(cfg, self.levels)
        self.store.add_dispatch_listener(self.pull_hold.on_dispatch)
        await self.replica.prepare(self.store)  # a SLAVE: read-only store, a former master's tail cut
        # scheduled deliveries count as puts on their real topic (per-topic throughput includes them)
        self.delay_service = make_delay_service(self.store, cfg, self.levels, self.meta, self.on_put_topic)
        self.timer_service = make_timer_service(self.store, cfg, self.on_put_topic)
        self.scheduled = ScheduledBrowser(self.store, self.delay_service, self.timer_service,
                                          self._put_timer_cancel_marker)
        # the timer hook's flow control reads the live wheel, so it gets the service itself
        self.hooks = PutHooks(cfg, self.levels, self.timer_service or timer_config(cfg))
        self.transactions = TransactionService(self)
        if not self.replica.is_slave:  # a slave's check-backs start at promotion
            self.transactions.start()
        # a SLAVE delivers nothing: its delay levels start at promotion, its wheel only follows
        for svc in () if self.replica.is_slave else (self.delay_service, self.timer_service):
            if svc is not None:
                r = svc.start()
                if asyncio.iscoroutine(r):
                    await r
        self.remoting = make_remoting_server(self)
        self.remoting.server.dispatcher.on_timing = self.rpc_latency.observe
        self.remoting.server.response_observer = self.client_errors
        from server.security import install as install_security  # [security] ACL, TLS, limits
        install_security(self, self.remoting.server)
        from server.cluster.ha import processors as ha_processors
        from server.processors import (
            admin,
            admin_ops,
            admin_stats,
            clients,
            consumer_send_back,
            namesrv,
            offsets,
            pull,
            scheduled,
            send,
            transaction,
        )
        rooms = [send, pull, offsets, clients, consumer_send_back, transaction, admin, admin_stats, ha_processors,
                 admin_ops, scheduled]
        if not cfg.namesrv_addr_list:
            rooms.insert(0, namesrv)  # embedded mode: this process is its own name server
        for room in rooms:
            room.register(self.remoting, self)
        await self.remoting.listen(cfg.listen_host, [cfg.listen_port, cfg.vip_port])
        await self.replica.start()
        if cfg.namesrv_addr_list:
            self.registrar = make_registrar(self)
            self.topics.add_change_listener(lambda _tc: self.registrar.topics_changed())
            self.replica.attach_registrar(self.registrar)  # a slave follows the master it names
            await self.registrar.start()
        if cfg.metrics_port:
            from server.observability import prometheus
            from server.observability.http import MetricsHttpServer
            self.metrics_http = MetricsHttpServer(self.metrics, cfg.metrics_host, cfg.metrics_port,
                                                  render=lambda: prometheus.page_sliced(self))
            await self.metrics_http.start()
        from server.observability.telemetry import Telemetry
        self.telemetry = Telemetry(self)
        self.telemetry.start()
        self._stats_task = self.store.supervisor.spawn("broker-stats", self._sample_stats)
        if cfg.grpc_listen_port > 0:  # RocketMQ 5 clients: gRPC MessagingService over the same store
            from server.grpc.endpoint import GrpcEndpoint
            self.grpc = GrpcEndpoint(self)
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
        self.clients.shutdown()
        self.transactions.stop()
        await self.replica.shutdown()
        # a slave's delay levels never ran: their (zero) offsets must not overwrite the synced file
        for svc in (self.timer_service,) if self.replica.is_slave else (self.timer_service, self.delay_service):
            if svc is not None:
                try:
                    await svc.shutdown()
                except Exception as e:
                    log.error("broker.service_shutdown_failed", service=type(svc).__name__, error=repr(e))
        telemetry = getattr(self, "telemetry", None)
        # each step runs whatever the one before met (a full disk fails writes, not the shutdown);
        # meta.close commits what is staged (offsets, topics, groups, delay offsets), checkpoints
        for step, fn in (("meta", self.meta.close),
                         ("telemetry", telemetry.shutdown if telemetry is not None else None),
                         ("store", self.store.shutdown if self.store is not None else None)):
            if fn is None:
                continue
            try:
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
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
                            properties={"TAGS": "_RECALL_TAG_", "TIMER_DEL_UNIQKEY": f"{topic}+{uniq_key}",
                                        "UNIQ_KEY": uniq_key, "TIMER_DELIVER_MS": str(int(deliver_ms)),
                                        "CLUSTER": self.config.broker_cluster_name})
        code, remark = await self.put_record(rec)
        return None if code == 0 else f"code {code}: {remark}"

    def delete_topic(self, topic: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: the topic's config, its consumer offsets, ConsumeQueues and stats."""
        existed = self.topics.table.delete(topic)
        for group in list(self.offsets.groups_of(topic)):
            self.offsets.remove_group(group, topic)
        self.offsets.persist()
        self.store.delete_consume_queues(topic)
        self._put_counters.pop(topic, None)
        for key in [k for k in self._pull_counters if k[0] == topic]:
            del self._pull_counters[key]
        for name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            self.stats.forget(name, lambda k: k == topic)
        self.stats.forget(GROUP_GET_NUMS, lambda k: k.partition("@")[0] == topic)
        return existed

    # ---- helpers used by processors ------------------------------------------------------
    def put_request(self, raw, topic: str, queue_id: int, properties: dict, deliver_delay_ms: int):
        return put_request(raw, topic, queue_id, properties, deliver_delay_ms)

    @property
    def store_host(self) -> tuple[str, int]:
        host, _, port = self.config.broker_addr.rpartition(":")
        return host, int(port)

    async def put_record(self, rec, hooks: bool = True) -> tuple[int, str | None]:
        """Store one broker-made record (transaction commit, op record) as a send would: put hooks
        (delay level, timer) unless `hooks=False`, encode, put, wait for SYNC_FLUSH. (code, remark)."""
        delay = -1
        if hooks:
            hooked = self.hooks.apply(rec)
            if isinstance(hooked, tuple):
                return hooked
            delay = hooked
        [result] = self.store.put([put_request(encode_record(rec), rec.topic, rec.queue_id, rec.properties, delay)])
        if not result.ok:
            return PUT_STATUS_CODES[result.status], result.remark or result.status.name
        if result.flushed is not None:
            try:
                await asyncio.wait_for(asyncio.shield(result.flushed), 5.0)
            except Exception as e:
                return ResponseCode.FLUSH_DISK_TIMEOUT, f"flush not confirmed: {e!r}"
        self.on_put([rec.topic], [result])
        if self.replica.sync_master:  # SYNC_MASTER: a slave has it before the answer (11 / 12 if not)
            gate = self.replica.gate(result.phys_offset + result.size)
            return gate if type(gate) is tuple else await gate
        return ResponseCode.SUCCESS, None

    def commitlog_max_offset(self) -> int:
        return self.store.commitlog_max_offset()

    def commitlog_min_offset(self) -> int:
        return self.store.commitlog_min_offset()

    def on_put(self, topics: list[str], results) -> None:
        self.put_total += len(results)
        for topic, r in zip(topics, results, strict=False):
            c = self._put_counters.get(topic)
            if c is None:
                c = self._put_counters[topic] = (
                    self.metrics.counter("delaymq_put_messages_total", {"topic": topic}),
                    self.metrics.counter("delaymq_put_bytes_total", {"topic": topic}))
            c[0].inc()
            c[1].inc(getattr(r, "size", 0) or 0)

    def on_put_sizes(self, topics: list[str], sizes: list[int]) -> None:
        """`on_put` for a run of stored sends given their topics and record sizes (one counter
        update per topic of the run)."""
        self.put_total += len(sizes)
        per: dict[str, list[int]] = {}
        for topic, size in zip(topics, sizes, strict=True):
            e = per.get(topic)
            if e is None:
                per[topic] = [1, size]
            else:
                e[0] += 1
                e[1] += size
        for topic, (n, nbytes) in per.items():
            c = self._put_counters.get(topic)
            if c is None:
                c = self._put_counters[topic] = (
                    self.metrics.counter("delaymq_put_messages_total", {"topic": topic}),
                    self.metrics.counter("delaymq_put_bytes_total", {"topic": topic}))
            c[0].inc(n)
            c[1].inc(nbytes)

    def on_put_topic(self, topic: str, n: int, nbytes: int) -> None:
        """`n` records of `nbytes` in all stored in `topic` by the broker itself (scheduled deliveries:
        scheduler.events.PutObserver); they count as puts of that topic, as in RocketMQ."""
        self.put_total += n
        c = self._put_counters.get(topic)
        if c is None:
            c = self._put_counters[topic] = (
                self.metrics.counter("delaymq_put_messages_total", {"topic": topic}),
                self.metrics.counter("delaymq_put_bytes_total", {"topic": topic}))
        c[0].inc(n)
        c[1].inc(nbytes)

    def on_pull(self, topic: str, group: str, n: int) -> None:
        self.get_total += n
        c = self._pull_counters.get((topic, group))
        if c is None:
            c = self._pull_counters[(topic, group)] = self.metrics.counter(
                "delaymq_pull_messages_total", {"topic": topic, "group": group})
        c.inc(n)

    def _earliest_store_time(self) -> int:
        """STORETIMESTAMP of the oldest record still in the CommitLog (0: none, or not a record there)."""
        try:
            raw = self.store.read_record(self.commitlog_min_offset())
        except (ValueError, IndexError, OSError):
            return 0
        return read_store_timestamp(raw) if raw is not None and len(raw) > 64 else 0

    def runtime_info(self) -> dict[str, object]:
        """GET_BROKER_RUNTIME_INFO's table: RocketMQ's keys (mqadmin clusterList / brokerStatus and the
        Dashboard read them; thread-pool figures are 0: requests run on the event loop, not in pools),
        the store's and the scheduled services' own."""
        now = int(time.time() * 1000)
        puts, gets = self.stats.tps(now)
        info: dict[str, object] = {
            "brokerVersion": BROKER_VERSION, "brokerVersionDesc": "V4_9_8",
            "msgPutTotalTodayNow": self.put_total, "msgGetTotalTodayNow": self.get_total,
            "msgPutTotalTodayMorning": self.stats.today_morning[0],
            "msgGetTotalTodayMorning": self.stats.today_morning[1],
            "msgPutTotalYesterdayMorning": self.stats.yesterday_morning[0],
            "msgGetTotalYesterdayMorning": self.stats.yesterday_morning[1],
            "putTps": " ".join(f"{v:.2f}" for v in puts),
            "getTransferedTps": " ".join(f"{v:.2f}" for v in gets),
            "commitLogMinOffset": self.commitlog_min_offset(), "commitLogMaxOffset": self.commitlog_max_offset(),
            "bootTimestamp": self.boot_ms, "runtime": f"{(now - self.boot_ms) // 1000}s",
            "startAcceptSendRequestTimeStamp": 0,
            "flushDiskType": self.config.flush_disk_type, "brokerName": self.config.broker_name,
            "pullHoldCount": self.pull_hold.held_count,
            "brokerRole": self.config.broker_role, "brokerId": self.config.broker_id,
            "pageCacheLockTimeMills": 0, "dispatchBehindBytes": 0,
            "remainHowManyDataToFlush": "0 B", "remainTransientStoreBufferNumbs": 0,
            "EndTransactionQueueSize": 0, "EndTransactionThreadPoolQueueCapacity": 0,
        }
        for pool in ("send", "pull", "query"):
            info[f"{pool}ThreadPoolQueueSize"] = 0
            info[f"{pool}ThreadPoolQueueCapacity"] = 0
            info[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = 0
        info.update(self.store.runtime_info())
        info.update(_disk_info(self.config.store_path_root_dir))
        info["earliestMessageTimeStamp"] = self._earliest_store_time() or self.boot_ms
        info["consumeQueueDiskRatio"] = info.get("commitLogDiskRatio", "0")  # one disk holds the whole store
        sends = [h for code, h in self.rpc_latency.by_code.items() if code in (10, 310, 320)]
        n = sum(h.count for h in sends)
        if n:  # upper bounds of the buckets holding the quantiles, in ms (RocketMQ's putLatency99/999)
            for key, q in (("putLatency99", 0.99), ("putLatency999", 0.999)):
                info[key] = f"{max(h.quantile(q) for h in sends if h.count) * 1000:.2f}"
        for svc in (self.delay_service, self.timer_service, self.transactions, self.registrar, self.grpc,
                    self.replica):
            if svc is None:
                continue
            fn = getattr(svc, "runtime_info", None) or getattr(svc, "stats", None)
            if callable(fn):
                try:
                    info.update({str(k): v for k, v in (fn() or {}).items()})
                except Exception as e:
                    log.warning("broker.runtime_info_failed", service=type(svc).__name__, error=repr(e))
        return info


def _disk_info(path: str) -> dict[str, str]:
    """commitLogDirCapacity as RocketMQ words it."""
    try:
        st = os.statvfs(path)
    except OSError:
        return {}
    gib = 1024 ** 3
    return {"commitLogDirCapacity": f"Total : {st.f_blocks * st.f_frsize / gib:.1f} GiB, "
                                    f"Free : {st.f_bavail * st.f_frsize / gib:.1f} GiB."}
