"""Adapters from the broker to the other packages' entry points (ARCHITECTURE.md contract).

Everything that names another package's constructor lives here, so an interface change touches
one file. Optional packages (scheduler services) are imported guardedly.
"""

from __future__ import annotations

import dataclasses
import inspect

import structlog

from codec.properties import index_keys
from codec.tags import java_hash
from storage.store_types import PutRequest

log = structlog.get_logger(__name__)

NOTIFY_CONSUMER_IDS_CHANGED = 40


# ---- storage ---------------------------------------------------------------------------------
_STORE_FIELD_SOURCES = {
    # StoreConfig field name candidates → BrokerConfig attribute
    "store_path_root_dir": "store_path_root_dir", "store_path": "store_path_root_dir",
    "root_dir": "store_path_root_dir", "store_dir": "store_path_root_dir", "path": "store_path_root_dir",
    "mapped_file_size_commit_log": "mapped_file_size_commit_log",
    "mapped_file_size_commitlog": "mapped_file_size_commit_log",
    "file_reserved_time_hours": "file_reserved_time",
    "commitlog_file_size": "mapped_file_size_commit_log",
    "flush_disk_type": "flush_disk_type", "file_reserved_time": "file_reserved_time",
    "max_message_size": "max_message_size", "message_delay_level": "message_delay_level",
    "broker_addr": "broker_addr", "store_host": "broker_addr",
    "flush_interval_ms": "flush_interval_commit_log",
    "flush_consume_queue_interval_ms": "flush_interval_consume_queue",
}


def build_kwargs(cls, cfg, sources: dict[str, str]) -> dict:
    """Constructor kwargs for a config class from BrokerConfig values, by matching field names."""
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    else:
        names = [p for p in inspect.signature(cls).parameters if p != "self"]
    kwargs = {}
    broker_fields = {f.name for f in dataclasses.fields(cfg)}
    for name in names:
        src = sources.get(name) or (name if name in broker_fields else None)
        if src is not None:
            kwargs[name] = getattr(cfg, src)
    if "flush_disk_type" in kwargs:
        ftype = getattr(dataclasses.fields(cls)[names.index("flush_disk_type")], "type", "str") \
            if dataclasses.is_dataclass(cls) else "str"
        if "bool" in str(ftype):
            kwargs["flush_disk_type"] = cfg.sync_flush
    if "sync_flush" in names:
        kwargs["sync_flush"] = cfg.sync_flush
    return kwargs


def make_message_store(cfg):
    from storage import message_store as ms

    store_config_cls = getattr(ms, "StoreConfig", None)
    if store_config_cls is None:
        from storage.config import StoreConfig as store_config_cls  # type: ignore[no-redef]
    kwargs = build_kwargs(store_config_cls, cfg, _STORE_FIELD_SOURCES)
    if cfg.disk_max_used_space_ratio > 0:
        kwargs["disk_max_used_ratio"] = cfg.disk_max_used_space_ratio / 100.0
    store = ms.MessageStore(store_config_cls(**kwargs))
    store.load()
    store.start()
    return store


def put_request(raw, topic: str, queue_id: int, properties: dict, deliver_delay_ms: int):
    """The store request of an encoded record: tagsCode of TAGS, index keys KEYS (space separated)
    and UNIQ_KEY (called once per sent message: keep it lean)."""
    tags = properties.get("TAGS")
    keys = index_keys(properties.get("KEYS"), properties.get("UNIQ_KEY"))
    return PutRequest(raw, topic, queue_id, java_hash(tags) if tags else 0, keys, deliver_delay_ms)


# ---- scheduler -------------------------------------------------------------------------------
def make_delay_service(store, cfg, levels, meta=None):
    """The delay levels, their progress kept in the broker's MetaStore when one is given."""
    try:
        from scheduler.delay_levels import DelayLevelService
    except ImportError:
        log.warning("broker.delay_service_missing")
        return None
    from storage.meta_store import DelayOffsetStore

    return DelayLevelService(store, cfg, offset_backend=DelayOffsetStore(meta) if meta is not None else None)


def make_timer_service(store, cfg):
    if not cfg.timer_wheel_enable:
        return None
    try:
        from scheduler.timer import TimerMessageStore
    except ImportError:
        log.warning("broker.timer_service_missing")
        return None
    return TimerMessageStore(store, cfg)


# ---- cluster ---------------------------------------------------------------------------------
def make_registrar(broker):
    """The broker's name-server registration: its topic table as RocketMQ registers it (perms masked by
    brokerPermission, DataVersion of the table)."""
    from codec.namesrv_bodies import DataVersion, TopicConfigData
    from server.cluster.registration import BrokerRegistrar
    from server.topics import advertised_perm

    cfg = broker.config

    def snapshot():
        counter, timestamp = broker.topics.data_version()
        topics = [TopicConfigData(t.topic_name, t.read_queue_nums, t.write_queue_nums,
                                  advertised_perm(t.perm, cfg.broker_permission), t.topic_filter_type,
                                  t.topic_sys_flag, t.order)
                  for t in broker.topics.topics.values()]
        return DataVersion(counter, timestamp), topics

    return BrokerRegistrar(cfg, snapshot)


# ---- remoting --------------------------------------------------------------------------------
def notify_consumer_ids_changed(conn, group: str) -> None:
    from codec.command import RemotingCommand

    conn.invoke_oneway(RemotingCommand.request(NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))


class RemotingAdapter:
    """One dispatch table served on several ports (listenPort and the VIP channel listenPort-2)."""

    def __init__(self, broker) -> None:
        from remoting.server import RemotingServer

        self.broker = broker
        self.server = RemotingServer()
        for hook in ("on_connection_lost", "on_close", "on_disconnect"):
            if hasattr(self.server, hook):
                setattr(self.server, hook, self._connection_lost)
                break

    def _connection_lost(self, conn, *args) -> None:
        self.broker.clients.channel_closed(conn)

    def register(self, code: int, processor) -> None:
        self.server.register(code, processor)

    async def listen(self, host: str, ports: list[int]) -> None:
        await self.server.start(host, ports)

    async def close(self, drain_timeout_s: float) -> None:
        await self.server.close(drain_timeout_s)


def make_remoting_server(broker) -> RemotingAdapter:
    return RemotingAdapter(broker)
