"""Broker configuration: a dataclass whose fields map to RocketMQ's broker.conf key names.

`load_properties(path)` reads a Java properties file (`key=value` or `key: value`, `#`/`!` comments);
`BrokerConfig.from_mapping()` applies known keys (camelCase, as in RocketMQ) and logs unknown ones.
CLI flags are applied after the file (see `server.__main__`).

`BrokerConfig.validate()` checks every value against `VALIDATORS` (field name -> check, one row per
key; a room that adds keys adds its rows) and raises `ConfigError` naming the first bad key: the
broker refuses to start with that one line (exit 2) before it opens the store.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)

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
    "tls.server.need.client.auth": "tls_server_need_client_auth",
    "tls.server.trustCertPath": "tls_server_trust_cert_path",
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
    flush_interval_commit_log: int = 500  # ms between CommitLog flushes with ASYNC_FLUSH (RocketMQ's key)
    flush_interval_consume_queue: int = 1000  # ms between ConsumeQueue / index / checkpoint flushes
    disk_max_used_space_ratio: int = 0  # percent; puts are refused past it (0 = store default, 90)
    mapped_file_size_commit_log: int = 1073741824
    mapped_file_size_consume_queue: int = 6000000  # 300,000 units of 20 bytes per ConsumeQueue file
    mapped_file_size_timer_log: int = 104857600  # timerlog segment size (RocketMQ's key)
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
    tls_server_need_client_auth: str = "none"  # none | optional | require (client certificates)
    tls_server_trust_cert_path: str = ""  # CA bundle that verifies client certificates
    max_connections: int = 4096
    max_connections_per_ip: int = 1024
    max_inflight_per_connection: int = 1024
    max_frame_size: int = 16777216
    max_header_size: int = 262144  # a frame whose header length word is over this closes the connection
    max_buffered_frame_bytes: int = 268435456
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    metrics_export_interval_ms: int = 10000
    export_interval_ms: int = 10000
    shutdown_drain_timeout_ms: int = 5000

    # ---- derived -------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        """The advertised `ip:port` (route `brokerAddrs[0]`, STOREHOST of stored records)."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def vip_port(self) -> int:
        return self.listen_port - 2

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

    def validate(self) -> None:
        """Raise ConfigError for the first value `VALIDATORS` refuses."""
        for f in dataclasses.fields(self):
            check = VALIDATORS.get(f.name)
            if check is None:
                continue
            problem = check(getattr(self, f.name))
            if problem:
                raise ConfigError(self.key_for(f.name), problem)

    def public_properties(self) -> dict[str, str]:
        """`to_properties` with the values of `PRIVATE_KEYS` (key and ACL file paths) left out: what
        GET_BROKER_CONFIG answers."""
        return {k: ("" if k in PRIVATE_KEYS and v else v) for k, v in self.to_properties().items()}

    def to_properties(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[self.key_for(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


# keys whose values GET_BROKER_CONFIG never shows (where the TLS private key and the ACL live)
PRIVATE_KEYS = frozenset({"tlsServerKeyPath", "aclFile", "tlsServerTrustCertPath"})


class ConfigError(ValueError):
    """A bad configuration value; `key` is its broker.conf name."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key {key}: {problem}")
        self.key = key


# ---- validation table: field name -> check(value) -> problem or None --------------------------
Check = Callable[[object], "str | None"]


def one_of(*choices: str) -> Check:
    def check(v) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"
    return check


def int_range(lo: int, hi: int | None = None) -> Check:
    def check(v) -> str | None:
        if v < lo or (hi is not None and v > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            return f"must be {want}, got {v}"
        return None
    return check


def _delay_levels(v) -> str | None:
    from scheduler.levels import parse_delay_levels

    try:
        levels = parse_delay_levels(v)
    except ValueError as e:
        return str(e)
    if any(ms <= 0 for ms in levels):
        return f"every level must be longer than 0 ms, got {v!r}"
    return None


_PORT = int_range(0, 65535)
_POSITIVE = int_range(1)
_NON_NEGATIVE = int_range(0)
VALIDATORS: dict[str, Check] = {
    "listen_port": int_range(3, 65535),  # the VIP channel listens on listenPort - 2
    "broker_id": _NON_NEGATIVE,
    "broker_permission": int_range(0, 7),
    "flush_disk_type": one_of("ASYNC_FLUSH", "SYNC_FLUSH"),
    "flush_interval_commit_log": _POSITIVE,
    "flush_interval_consume_queue": _POSITIVE,
    "disk_max_used_space_ratio": int_range(0, 100),
    "mapped_file_size_commit_log": int_range(4096, 2**31 - 1),
    "mapped_file_size_consume_queue": lambda v: int_range(20 * 64, 2**31 - 1)(v) or (
        None if v % 20 == 0 else f"must be a multiple of 20 (the unit size), got {v}"),
    "mapped_file_size_timer_log": int_range(4096, 2**31 - 1),
    "file_reserved_time": _NON_NEGATIVE,
    "max_hash_slot_num": _POSITIVE,
    "max_index_num": _POSITIVE,
    "default_topic_queue_nums": int_range(1, 1024),
    "max_message_size": _POSITIVE,
    "message_delay_level": _delay_levels,
    "schedule_async_deliver_max_pending_limit": _POSITIVE,
    "schedule_async_deliver_max_resend_num2_blocked": _NON_NEGATIVE,
    "flush_delay_offset_interval": _POSITIVE,
    "schedule_deliver_coalesce_ms": _NON_NEGATIVE,
    "timer_precision_ms": _POSITIVE,
    "timer_max_delay_sec": _POSITIVE,
    "timer_roll_window_slot": _POSITIVE,
    "timer_congest_num_each_slot": _POSITIVE,
    "short_polling_time_mills": _NON_NEGATIVE,
    "server_channel_max_idle_time_seconds": _NON_NEGATIVE,
    "client_channel_expired_timeout": _POSITIVE,
    "channel_lock_max_live_time_ms": _POSITIVE,
    "default_query_max_num": _POSITIVE,
    "max_reconsume_times_default": _NON_NEGATIVE,
    "transaction_time_out": _POSITIVE,
    "transaction_check_max": _NON_NEGATIVE,
    "transaction_check_interval": _POSITIVE,
    "tls_server_mode": lambda v: one_of("", "disabled", "permissive", "enforcing")(v.strip().lower()),
    "tls_server_need_client_auth": lambda v: one_of("none", "optional", "require")(v.strip().lower()),
    "max_connections": _NON_NEGATIVE,
    "max_connections_per_ip": _NON_NEGATIVE,
    "max_inflight_per_connection": _NON_NEGATIVE,
    "max_frame_size": int_range(0, 2**31 - 1),
    "max_header_size": int_range(1024, 0xFFFFFF),
    "max_buffered_frame_bytes": _NON_NEGATIVE,
    "metrics_port": _PORT,
    "metrics_export_interval_ms": _POSITIVE,
    "export_interval_ms": _POSITIVE,
    "shutdown_drain_timeout_ms": _NON_NEGATIVE,
}


def _coerce(f: dataclasses.Field, raw: object, key: str):
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(key, f"expected true or false, got {raw!r}")
        return text == "true"
    if kind == "int":
        if isinstance(raw, bool):
            raise ConfigError(key, f"expected an integer, got {raw!r}")
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ConfigError(key, f"expected an integer, got {raw!r}") from None
    return str(raw).strip() if isinstance(raw, str) else str(raw)


_LINE_CONT = re.compile(r"(?<!\\)(\\\\)*\\$")


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: `key=value` / `key:value` / `key value`, `#`/`!` comments, `\\` continuation."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if _LINE_CONT.search(line):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m is None:
            out[line] = ""
            continue
        out[m.group(1)] = m.group(2).strip()
    if pending:
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", pending)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def load_properties(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def load_config(path: str | None = None, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
    cfg = BrokerConfig()
    if path:
        try:
            values = load_properties(path)
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError("--config", f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
        cfg.apply(values, source=path)
    if overrides:
        cfg.apply({k: v for k, v in overrides.items() if v is not None}, source="cli")
    return cfg
