"""Broker configuration: a dataclass whose fields map to RocketMQ's broker.conf key names.

`load_properties(path)` reads a Java properties file (javaproperties: escapes, continuations, comments);
`BrokerConfig.from_mapping()` applies known keys (camelCase, as in RocketMQ) and logs unknown ones.
CLI flags are applied after the file (see `server.__main__`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import javaproperties
import structlog

log = structlog.get_logger(__name__)

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# Field names whose camelCase key is not the mechanical conversion of the snake_case name.
_KEY_OVERRIDES = {
    "broker_ip1": "brokerIP1",
    "tls_enable": "tlsEnable",
    "message_delay_level": "messageDelayLevel",
}

# [security] RocketMQ's own spellings accepted as aliases of our keys.
_KEY_ALIASES = {
    "tls.server.certPath": "tls_server_cert_path",
    "tls.server.keyPath": "tls_server_key_path",
    "tls.server.mode": "tls_server_mode",
    "rocketmq.acl.plain.file": "acl_file",
}


@dataclass(slots=True)
class BrokerConfig:
    store_path_root_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    listen_port: int = 9876
    listen_host: str = "127.0.0.1"
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_ip1: str = "127.0.0.1"
    broker_id: int = 0
    broker_permission: int = 6
    flush_disk_type: str = "ASYNC_FLUSH"
    disk_max_used_space_ratio: int = 0  # percent; puts are refused past it (0 = store default, 90)
    mapped_file_size_commit_log: int = 1073741824
    file_reserved_time: int = 72
    max_hash_slot_num: int = 5000000  # key index: hash slots per IndexFile (storage/index.py)
    max_index_num: int = 20000000  # key index: entries per IndexFile
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    max_message_size: int = 4194304
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    enable_schedule_async_deliver: bool = False
    schedule_async_deliver_max_pending_limit: int = 2000
    schedule_async_deliver_max_resend_num2_blocked: int = 3
    flush_delay_offset_interval: int = 10000
    schedule_deliver_coalesce_ms: int = 5  # ours: a level delivering >= 4 per pass wakes at most this often
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 259200
    timer_roll_window_slot: int = 172800
    timer_congest_num_each_slot: int = 2147483647
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    server_channel_max_idle_time_seconds: int = 120
    client_channel_expired_timeout: int = 120000
    channel_lock_max_live_time_ms: int = 60000
    default_query_max_num: int = 32
    max_reconsume_times_default: int = 16
    transaction_time_out: int = 6000          # ms before an unfinished half message is checked back
    transaction_check_max: int = 15           # check-backs before the half is discarded
    transaction_check_interval: int = 60000   # ms between check-backs of one half message
    acl_enable: bool = False
    tls_enable: bool = False
    tls_test_mode_enable: bool = False
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    # [security] server/security: ACL file, TLS mode and resource limits (0 = remoting default / off)
    acl_file: str = ""
    tls_server_mode: str = ""
    max_connections: int = 4096
    max_connections_per_ip: int = 1024
    max_inflight_per_connection: int = 1024
    max_frame_size: int = 16777216
    max_buffered_frame_bytes: int = 268435456
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    metrics_export_interval_ms: int = 10000
    export_interval_ms: int = 10000
    shutdown_drain_timeout_ms: int = 5000
    # [cluster-ha] master/slave replication (server/cluster/ha; RocketMQ 4.x HA, cluster-ha.md §2)
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    ha_listen_port: int = 0  # 0 = listenPort + 1
    ha_master_address: str = ""  # ip:haPort of the master (slaves; else the name server's answer)
    ha_send_heartbeat_interval: int = 5000  # ms of silence before an empty frame / a report
    ha_housekeeping_interval: int = 20000  # ms without bytes from the peer before it is dropped
    ha_transfer_batch_size: int = 32768  # max CommitLog bytes per HA frame
    ha_slave_fallbehind_max: int = 268435456  # SYNC_MASTER: a slave further behind is not available
    slave_timeout: int = 3000  # SYNC_MASTER: ms a send waits for the slave's ack (FLUSH_SLAVE_TIMEOUT)
    slave_synchronize_interval_ms: int = 10000  # slave: pull topics, offsets, groups, timer checkpoint
    scheduler_sync_interval_ms: int = 40  # ours: slave pulls the master's scheduler progress this often

    # ---- derived -------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        """The advertised `ip:port` (route `brokerAddrs[0]`, STOREHOST of stored records)."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def vip_port(self) -> int:
        return self.listen_port - 2

    @property
    def ha_port(self) -> int:
        return self.ha_listen_port if self.ha_listen_port > 0 else self.listen_port + 1

    @property
    def ha_server_addr(self) -> str:
        """`brokerIP2:haListenPort` as registered (haServerAddr); brokerIP1 here."""
        return f"{self.broker_ip1}:{self.ha_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    def validate(self) -> None:
        """Cross-key checks; a ValueError names the key (the broker stops with that one line)."""
        role = self.broker_role.strip().upper()
        if role not in BROKER_ROLES:
            raise ValueError(f"config key brokerRole: expected one of {', '.join(BROKER_ROLES)}, "
                             f"got {self.broker_role!r}")
        self.broker_role = role
        if role == "SLAVE" and self.broker_id <= 0:
            raise ValueError("config key brokerId: a SLAVE needs brokerId >= 1")
        if role != "SLAVE":
            self.broker_id = 0  # RocketMQ forces a master's brokerId to 0
        if self.ha_master_address and ":" not in self.ha_master_address:
            raise ValueError(f"config key haMasterAddress: expected ip:port, got {self.ha_master_address!r}")
        if self.scheduler_sync_interval_ms <= 0 or self.scheduler_sync_interval_ms > 50:
            raise ValueError("config key schedulerSyncIntervalMs: expected 1..50 (ms)")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type.upper() == "SYNC_FLUSH"

    # ---- key mapping ---------------------------------------------------------------------
    @staticmethod
    def key_for(field_name: str) -> str:
        if field_name in _KEY_OVERRIDES:
            return _KEY_OVERRIDES[field_name]
        head, *rest = field_name.split("_")
        return head + "".join(p[:1].upper() + p[1:] for p in rest)

    @classmethod
    def key_map(cls) -> dict[str, dataclasses.Field]:
        return {cls.key_for(f.name): f for f in dataclasses.fields(cls)}

    def apply(self, values: Mapping[str, object], source: str = "config") -> list[str]:
        """Set fields from camelCase keys (or snake_case names); returns the unknown keys (logged)."""
        by_key = self.key_map()
        by_name = {f.name: f for f in dataclasses.fields(self)}
        unknown = []
        for key, raw in values.items():
            f = by_key.get(key) or by_name.get(key) or by_name.get(_KEY_ALIASES.get(key, ""))
            if f is None:
                unknown.append(key)
                log.warning("config.unknown_key", key=key, source=source)
                continue
            setattr(self, f.name, _coerce(f, raw, key))
        return unknown

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], source: str = "config") -> BrokerConfig:
        cfg = cls()
        cfg.apply(values, source)
        return cfg

    def to_properties(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[self.key_for(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


def _coerce(f: dataclasses.Field, raw: object, key: str):
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        return str(raw).strip().lower() == "true"
    if kind == "int":
        if isinstance(raw, bool):
            raise ValueError(f"config key {key}: expected an integer, got {raw!r}")
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ValueError(f"config key {key}: expected an integer, got {raw!r}") from None
    return str(raw).strip() if isinstance(raw, str) else str(raw)


def parse_properties(text: str) -> dict[str, str]:
    """A Java .properties text as Java's `Properties.load` reads it (escapes, `\\uXXXX`, continuations,
    `=`/`:`/space separators, `#`/`!` comments), values stripped as RocketMQ's broker trims them."""
    return {k: v.strip() for k, v in javaproperties.loads(text).items()}


def load_properties(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def load_config(path: str | None = None, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
    cfg = BrokerConfig()
    if path:
        cfg.apply(load_properties(path), source=path)
    if overrides:
        cfg.apply({k: v for k, v in overrides.items() if v is not None}, source="cli")
    cfg.validate()
    return cfg
