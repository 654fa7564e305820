"""Adapters from the broker to the other packages' entry points (ARCHITECTURE.md contract).

Everything that names another package's constructor lives here, so an interface change touches
one file. Construction is explicit: each config value is passed by name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog

from codec.codes import RequestCode
from codec.properties import MessageConst, index_keys
from codec.tags import tags_code
from remoting.connection import Connection
from remoting.dispatch import BatchProcessor, Processor
from remoting.server import RemotingServer
from scheduler.delay_config import DelayConfig
from scheduler.delay_levels import DelayLevelService
from scheduler.levels import schedule_tags_code
from scheduler.timer import TimerMessageStore
from scheduler.timer.config import TimerConfig, snap_precision
from server.config import BrokerConfig
from storage.message_store import MessageStore
from storage.meta_store import DelayOffsetStore
from storage.store_types import PutRequest, StoreConfig

# property names, bound once for the per-message path (codec.properties.MessageConst)
_KEYS = MessageConst.KEYS
_TAGS = MessageConst.TAGS
_UNIQ_KEY = MessageConst.UNIQ_KEY

if TYPE_CHECKING:
    from scheduler.events import PutObserver
    from server.client_manager import ClientConn, ClientManager
    from server.cluster.registration import BrokerRegistrar
    from server.topics import TopicManager
    from storage.meta_store import MetaStore
    from storage.supervisor import Supervisor

log = structlog.get_logger(__name__)



# ---- storage ---------------------------------------------------------------------------------
def store_config(cfg: BrokerConfig) -> StoreConfig:
    """The store's configuration from the broker's, key by key (a renamed field is a type error here,
    never a silent default)."""
    sc = StoreConfig(
        store_path=cfg.store_path_root_dir,
        mapped_file_size_commitlog=cfg.mapped_file_size_commit_log,
        mapped_file_size_consume_queue=cfg.mapped_file_size_consume_queue,
        flush_disk_type=cfg.flush_disk_type,
        flush_interval_ms=cfg.flush_interval_commit_log,
        flush_consume_queue_interval_ms=cfg.flush_interval_consume_queue,
        file_reserved_time_hours=cfg.file_reserved_time,
        max_message_size=cfg.max_message_size,
        max_hash_slot_num=cfg.max_hash_slot_num,
        max_index_num=cfg.max_index_num,
    )
    if cfg.disk_max_used_space_ratio > 0:  # 0: the store's default (90 %, or DELAYMQ_DISK_MAX_USED_RATIO)
        sc.disk_max_used_ratio = cfg.disk_max_used_space_ratio / 100.0
    return sc


def make_message_store(cfg: BrokerConfig, levels_ms: list[int]) -> MessageStore:
    """The store (not loaded yet: `open_message_store`), told the scheduler's tagsCode rule for the schedule
    units it rebuilds (recovery, HA)."""
    return MessageStore(store_config(cfg), tags_code_of=schedule_tags_code(levels_ms))


def open_message_store(store: MessageStore) -> None:
    """Load the store's files (recovery) and start its flush and clean-up."""
    store.load()
    store.start()


def put_request(raw: bytearray, topic: str, queue_id: int, properties: Mapping[str, str],
                deliver_delay_ms: int) -> PutRequest:
    """The store request of an encoded record: tagsCode of TAGS, index keys KEYS (space separated)
    and UNIQ_KEY (called once per sent message: keep it lean)."""
    tags = properties.get(_TAGS)
    keys = index_keys(properties.get(_KEYS), properties.get(_UNIQ_KEY))
    return PutRequest(raw, topic, queue_id, tags_code(tags), keys, deliver_delay_ms)


# ---- scheduler -------------------------------------------------------------------------------
def delay_config(cfg: BrokerConfig, levels: list[int]) -> DelayConfig:
    """The delay-level service's settings from broker.conf, key by key (`levels`: the parsed
    messageDelayLevel table)."""
    root = cfg.store_path_root_dir
    return DelayConfig(
        levels_ms=list(levels),
        async_deliver=cfg.enable_schedule_async_deliver,
        max_pending=cfg.schedule_async_deliver_max_pending_limit,
        max_resend_blocked=cfg.schedule_async_deliver_max_resend_num2_blocked,
        flush_offset_interval_ms=cfg.flush_delay_offset_interval,
        config_dir=os.path.join(root, "config") if root else None,
        broker_addr=cfg.broker_addr,
        coalesce_ms=cfg.schedule_deliver_coalesce_ms,
    )


def make_delay_service(store: MessageStore, cfg: BrokerConfig, levels: list[int], meta: MetaStore | None = None,
                       on_put: PutObserver | None = None) -> DelayLevelService:
    """The delay levels, their progress kept in the broker's MetaStore when one is given; `on_put`
    counts their deliveries as puts of the real topic (as RocketMQ's store statistics do)."""
    return DelayLevelService(store, delay_config(cfg, levels), offset_backend=DelayOffsetStore(meta) if meta is not None else None,
                             on_put=on_put)


def timer_config(cfg: BrokerConfig) -> TimerConfig:
    """The timer wheel's settings from broker.conf, key by key."""
    return TimerConfig(
        timer_wheel_enable=cfg.timer_wheel_enable,
        precision_ms=snap_precision(cfg.timer_precision_ms),
        max_delay_sec=cfg.timer_max_delay_sec,
        roll_window_slots=cfg.timer_roll_window_slot,
        congest_num_each_slot=cfg.timer_congest_num_each_slot,
        store_root=cfg.store_path_root_dir,
        timerlog_file_size=cfg.mapped_file_size_timer_log,
    )


def make_timer_service(store: MessageStore, cfg: BrokerConfig,
                       on_put: PutObserver | None = None) -> TimerMessageStore | None:
    if not cfg.timer_wheel_enable:
        return None
    return TimerMessageStore(store, timer_config(cfg), on_put=on_put)


# ---- cluster ---------------------------------------------------------------------------------
def make_registrar(cfg: BrokerConfig, topics: TopicManager, supervisor: Supervisor,
                   state_version: Callable[[], int] | None = None) -> BrokerRegistrar:
    """The broker's name-server registration. The body is the topic table's own, remembered per data
    version (storage), unless brokerPermission is not read-write or `state_version` (controller mode:
    the masterEpoch, RocketMQ 5's DataVersion.stateVersion) is set: then it is built for the round, every
    perm masked as routes show it (RocketMQ rewrites the perms too)."""
    from codec.namesrv_bodies import DataVersion, RegisterBrokerBody, TopicConfigData, encode_register_body
    from server.cluster.registration import BrokerRegistrar
    from server.topics import PERM_READ, PERM_WRITE, advertised_perm

    rw = PERM_READ | PERM_WRITE

    async def snapshot(compressed: bool) -> tuple[DataVersion, bytes]:
        version = DataVersion(*topics.data_version(), state_version() if state_version is not None else 0)
        if cfg.broker_permission & rw == rw and not version.state_version:
            return version, await topics.register_body(compressed)
        masked = {t.topic_name: TopicConfigData(t.topic_name, t.read_queue_nums, t.write_queue_nums,
                                                advertised_perm(t.perm, cfg.broker_permission),
                                                t.topic_filter_type, t.topic_sys_flag, t.order)
                  for t in topics.topics.values()}
        return version, encode_register_body(RegisterBrokerBody(version, masked), compressed)

    return BrokerRegistrar(cfg, snapshot, supervisor=supervisor)


# ---- remoting --------------------------------------------------------------------------------
def notify_consumer_ids_changed(conn: ClientConn, group: str) -> None:
    from codec.command import RemotingCommand

    conn.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))


class RemotingAdapter:
    """One dispatch table served on several ports (listenPort and the VIP channel listenPort-2)."""

    def __init__(self, on_connection_lost: Callable[[Connection], None]) -> None:
        self.server = RemotingServer()
        self.server.on_close = on_connection_lost

    def register(self, code: int, processor: Processor, batch: BatchProcessor | None = None) -> None:
        self.server.register(code, processor, batch)

    async def listen(self, host: str, ports: list[int]) -> None:
        await self.server.start(host, ports)

    async def close(self, drain_timeout_s: float) -> None:
        await self.server.close(drain_timeout_s)


def make_remoting_server(clients: ClientManager) -> RemotingAdapter:
    """The broker's remoting server; a closed connection leaves the client tables."""
    return RemotingAdapter(clients.channel_closed)
