"""Broker configuration: a dataclass whose fields map to RocketMQ's broker.conf key names.

`load_properties(path)` reads a Java properties file (javaproperties: escapes, continuations, comments);
`BrokerConfig.from_mapping()` applies known keys (camelCase, as in RocketMQ) and logs unknown ones.
CLI flags are applied after the file (see `server.__main__`).

`BrokerConfig.validate()` checks every value against `VALIDATORS` (field name -> check, one row per
key; a room that adds keys adds its rows) and raises `ConfigError` naming the first bad key: the
broker refuses to start with that one line (exit 2) before it opens the store.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import javaproperties
import structlog

from codec.codes import DEFAULT_CLUSTER
from codec.consume_queue_unit import UNIT_SIZE
from codec.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from codec.filter_bitmap import UNIT_SIZE as BITMAP_UNIT_SIZE
from server.grpc.envoy_host import GRPC_SERVER_STACKS
from server.listeners import Listener, clash

log = structlog.get_logger(__name__)

# the default grpcListenPort is listenPort - GRPC_PORT_OFFSET (9876 -> 8081)
GRPC_PORT_OFFSET = 1795

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

# Field names whose camelCase key is not the mechanical conversion of the snake_case name.
_KEY_OVERRIDES = {
    "broker_ip1": "brokerIP1",
    "broker_ip2": "brokerIP2",
    "tls_enable": "tlsEnable",
    "message_delay_level": "messageDelayLevel",
    "read_uncommitted": "readUnCommitted",
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
    broker_cluster_name: str = DEFAULT_CLUSTER
    broker_ip1: str = "127.0.0.1"
    broker_id: int = 0
    # [cluster] name servers to register with ("a:p;b:p"); empty = embedded mode (this process answers
    # the name-server requests itself). server/cluster/registration.py
    namesrv_addr: str = ""
    register_name_server_period: int = 30000  # ms; RocketMQ clamps to [10 s, 60 s], ours to [1 s, 60 s]
    register_name_server_initial_delay: int = 10000  # ours: ms before the first periodic round (RocketMQ's 10 s)
    register_broker_timeout_mills: int = 6000
    force_register: bool = False  # RocketMQ: true; ours: ask QUERY_DATA_VERSION, re-send the table only if changed
    compressed_register: bool = False
    broker_ip2: str = ""  # HA address host (empty = brokerIP1)
    ha_listen_port: int = 0  # 0 = listenPort + 1 (RocketMQ 4.x forces listenPort + 1)
    broker_permission: int = 6
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500  # ms between CommitLog flushes with ASYNC_FLUSH (RocketMQ's key)
    flush_interval_consume_queue: int = 1000  # ms between ConsumeQueue / index / checkpoint flushes
    disk_max_used_space_ratio: int = 0  # percent; puts are refused past it (0 = store default, 90)
    mapped_file_size_commit_log: int = 1073741824
    mapped_file_size_consume_queue: int = 6000000  # 300,000 units of 20 bytes per ConsumeQueue file
    mapped_file_size_consume_queue_ext: int = 50331648  # 48 MiB (Apache's default): bytes per filter bitmap file
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
    enable_property_filter: bool = False  # SQL92 subscriptions (Apache's default: refused)
    filter_support_retry: bool = False  # a %RETRY% topic filtered by the group's SQL92 subscription too
    enable_calc_filter_bit_map: bool = False  # SQL92 bitmap pre-filter computed at dispatch (server.filter_bitmap)
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
    # [cluster-ha] master/slave replication (server/cluster/ha; RocketMQ 4.x HA, cluster-ha.md §2)
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    ha_master_address: str = ""  # ip:haPort of the master (slaves; else the name server's answer)
    ha_send_heartbeat_interval: int = 5000  # ms of silence before an empty frame / a report
    ha_housekeeping_interval: int = 20000  # ms without bytes from the peer before it is dropped
    ha_transfer_batch_size: int = 32768  # max CommitLog bytes per HA frame
    ha_slave_fallbehind_max: int = 268435456  # SYNC_MASTER: a slave further behind is not available
    # ours: the HA port's shared secret; master and slave both set it and the slave answers an HMAC challenge
    # before the master sends a CommitLog byte. "" = off (an Apache slave/master cannot answer/ask it)
    ha_auth_secret: str = ""
    slave_timeout: int = 3000  # SYNC_MASTER: ms a send waits for the slave's ack (FLUSH_SLAVE_TIMEOUT)
    slave_synchronize_interval_ms: int = 10000  # slave: pull topics, offsets, groups, timer checkpoint
    scheduler_sync_interval_ms: int = 10  # ours: slave pulls the master's scheduler progress this often
    # [controller] RocketMQ 5 controller mode (server/cluster/controller; cluster-ha.md §4): Apache's
    # controller elects the master; brokerRole / brokerId are then the controller's, not the file's
    enable_controller_mode: bool = False
    controller_addr: str = ""  # the controllers' DLedger peer addresses, "a:p;b:p"
    broker_heartbeat_interval: int = 1000  # ms between BROKER_HEARTBEATs to every controller
    controller_heart_beat_timeout_mills: int = 10000  # told to the controller: expire us after this silence
    sync_broker_metadata_period: int = 5000  # ms between GET_REPLICA_INFO checks of the role
    sync_controller_metadata_period: int = 10000  # ms between leader-controller lookups
    broker_election_priority: int = 2147483647  # lower wins a tie of epoch and CommitLog offset
    ha_max_time_slave_not_catchup: int = 15000  # ms without a caught-up slave before the master shrinks the set
    all_ack_in_sync_state_set: bool = False  # controller mode: a SYNC send waits for every SyncStateSet member
    # and consumers see only what every member holds (dispatch stops at the confirmOffset), unless
    read_uncommitted: bool = False  # RocketMQ 5.3's readUnCommitted: dispatch up to the CommitLog end regardless
    sync_from_last_file: bool = False  # controller-mode slave: an empty one starts at its master's last CommitLog file
    # RocketMQ 5 gRPC MessagingService (server/grpc); 0 = off; -1 (default) = listenPort - 1795, which is
    # 8081 (the RocketMQ 5 proxy's port) for the default listenPort 9876 and moves with listenPort, so
    # brokers on one host given only their own --port never share it
    grpc_listen_port: int = -1
    # the gRPC port's HTTP/2 + gRPC server: `grpcio` (grpc.aio on this process's loop) or `envoy` (the whole broker
    # embedded in a stock Envoy, which serves grpcListenPort; server/envoy_broker.py)
    grpc_server_stack: str = "grpcio"
    # Apache's proxy key: a 5.x send whose message type (NORMAL / FIFO / DELAY / TRANSACTION) is not one its topic's
    # message.type attribute accepts is refused, MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (server/grpc/service.py)
    enable_topic_message_type_check: bool = True

    # ---- derived -------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        """The advertised `ip:port` (route `brokerAddrs[0]`, STOREHOST of stored records)."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.replace(",", ";").split(";") if a.strip()]

    @property
    def vip_port(self) -> int:
        return self.listen_port - 2

    @property
    def ha_port(self) -> int:
        return self.ha_listen_port if self.ha_listen_port > 0 else self.listen_port + 1

    @property
    def grpc_port(self) -> int:
        """The gRPC port: grpcListenPort, or listenPort - GRPC_PORT_OFFSET when it is -1; 0 = off."""
        return self.grpc_listen_port if self.grpc_listen_port >= 0 else self.listen_port - GRPC_PORT_OFFSET

    def listeners(self) -> list[Listener]:
        """Every port this broker listens on, each named by the key that sets it (the quick start's list)."""
        h = self.listen_host
        out = [Listener("listenPort", h, self.listen_port, "remoting: 4.x clients, name server, admin tools"),
               Listener("listenPort-2", h, self.vip_port, "the VIP channel (vipChannelEnabled clients)"),
               Listener("haListenPort", h, self.ha_port, "HA: slaves replicate from here")]
        if self.grpc_port > 0:
            out.append(Listener("grpcListenPort", h, self.grpc_port, "gRPC: RocketMQ 5 clients"))
        if self.metrics_port > 0:
            out.append(Listener("metricsPort", self.metrics_host, self.metrics_port, "Prometheus /metrics"))
        return out

    def _validate_ports(self) -> None:
        """The derived gRPC port in range, and no two listeners on one port; ConfigError names the key."""
        if self.grpc_listen_port < 0 and not 0 < self.grpc_port < 65536:
            raise ConfigError("grpcListenPort", f"the default listenPort - {GRPC_PORT_OFFSET} = {self.grpc_port} "
                              "is no port: set grpcListenPort (0 = off)")
        if self.grpc_server_stack == "envoy" and self.grpc_port == 0:
            raise ConfigError("grpcServerStack", "envoy serves the gRPC port, and grpcListenPort=0 turns it off")
        pair = clash(self.listeners())
        if pair is not None:
            first, second = pair
            raise ConfigError(second.key, f"port {second.port} is also {first.key}'s ({first.purpose})")

    @property
    def ha_server_addr(self) -> str:
        """`brokerIP2:haListenPort`, the HA address a broker registers (slaves get their master's)."""
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    def _validate_roles(self) -> None:
        """Cross-key checks of the HA role; ConfigError names the key."""
        role = self.broker_role.strip().upper()
        if role not in BROKER_ROLES:
            raise ConfigError("brokerRole", f"expected one of {', '.join(BROKER_ROLES)}, got {self.broker_role!r}")
        self.broker_role = role
        if self.enable_controller_mode:
            if not self.controller_addr.strip():
                raise ConfigError("controllerAddr", "enableControllerMode=true needs controllerAddr=host:port[;host:port]")
            return  # the role and the id are the controller's (brokerId=-1 as in Apache's examples)
        if role == "SLAVE" and self.broker_id <= 0:
            raise ConfigError("brokerId", "a SLAVE needs brokerId >= 1")
        if role != "SLAVE":
            self.broker_id = 0  # RocketMQ forces a master's brokerId to 0
        if self.ha_master_address and ":" not in self.ha_master_address:
            raise ConfigError("haMasterAddress", f"expected ip:port, got {self.ha_master_address!r}")
        if self.scheduler_sync_interval_ms <= 0 or self.scheduler_sync_interval_ms > 50:
            raise ConfigError("schedulerSyncIntervalMs", "expected 1..50 (ms)")

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
    def key_map(cls) -> dict[str, dataclasses.Field[Any]]:
        return {cls.key_for(f.name): f for f in dataclasses.fields(cls)}

    def apply(self, values: Mapping[str, object], source: str = "config") -> list[str]:
        """Set fields from camelCase keys (or snake_case names); returns the unknown keys (logged)."""
        return apply_keys(self, values, source, _KEY_ALIASES)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], source: str = "config") -> BrokerConfig:
        cfg = cls()
        cfg.apply(values, source)
        return cfg

    def validate(self) -> None:
        """Raise ConfigError for the first value `VALIDATORS` refuses, then for a bad HA role combination."""
        for f in dataclasses.fields(self):
            check = VALIDATORS.get(f.name)
            if check is None:
                continue
            problem = check(getattr(self, f.name))
            if problem:
                raise ConfigError(self.key_for(f.name), problem)
        self._validate_roles()
        self._validate_ports()

    def public_properties(self) -> dict[str, str]:
        """`to_properties` with the values of `PRIVATE_KEYS` (key and ACL file paths) left out: what
        GET_BROKER_CONFIG answers."""
        return {k: ("" if k in PRIVATE_KEYS and v else v) for k, v in self.to_properties().items()}

    def to_properties(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[self.key_for(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
        for key in SECRET_KEYS:  # never in a log line or an answer
            if out.get(key):
                out[key] = "******"
        return out


# keys whose values GET_BROKER_CONFIG never shows (where the TLS private key and the ACL live)
PRIVATE_KEYS = frozenset({"tlsServerKeyPath", "aclFile", "tlsServerTrustCertPath"})
# keys whose values are secrets: masked in `to_properties` itself (the broker.config log line included)
SECRET_KEYS = frozenset({"haAuthSecret"})
HA_AUTH_SECRET_MIN = 16


class ConfigError(ValueError):
    """A bad configuration value; `key` is its broker.conf name."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key {key}: {problem}")
        self.key = key


# ---- validation table: field name -> check(value) -> problem or None --------------------------
Check = Callable[[Any], "str | None"]  # a field's value (of the field's type) -> the problem, or None


def one_of(*choices: str) -> Check:
    def check(v: object) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"
    return check


def int_range(lo: int, hi: int | None = None) -> Check:
    def check(v: int) -> str | None:
        if v < lo or (hi is not None and v > hi):
            want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            return f"must be {want}, got {v}"
        return None
    return check


def _delay_levels(v: str) -> str | None:
    try:
        levels = parse_delay_levels(v)
    except ValueError as e:
        return str(e)
    if any(ms <= 0 for ms in levels):
        return f"every level must be longer than 0 ms, got {v!r}"
    return None


_PORT = int_range(0, 65535)


def _namesrv_addrs(v: object) -> str | None:
    """namesrvAddr: empty, or `host:port` entries separated by `;`."""
    for addr in (a.strip() for a in str(v).replace(",", ";").split(";")):
        host, sep, port = addr.rpartition(":")
        if addr and (not sep or not host or not port.isdigit() or not 0 < int(port) < 65536):
            return f"expected host:port[;host:port...], got {addr!r}"
    return None


_POSITIVE = int_range(1)
_NON_NEGATIVE = int_range(0)
VALIDATORS: dict[str, Check] = {
    "ha_auth_secret": lambda v: None if not v or len(v) >= HA_AUTH_SECRET_MIN else
    f"must be empty (off) or at least {HA_AUTH_SECRET_MIN} characters, got {len(v)}",
    "listen_port": int_range(3, 65535),  # the VIP channel listens on listenPort - 2
    "broker_id": int_range(-1),  # -1: controller mode's "the controller assigns it"
    "controller_addr": _namesrv_addrs,
    "broker_heartbeat_interval": _POSITIVE,
    "controller_heart_beat_timeout_mills": _POSITIVE,
    "sync_broker_metadata_period": _POSITIVE,
    "sync_controller_metadata_period": _POSITIVE,
    "ha_max_time_slave_not_catchup": _POSITIVE,
    "broker_permission": int_range(0, 7),
    "flush_disk_type": one_of("ASYNC_FLUSH", "SYNC_FLUSH"),
    "flush_interval_commit_log": _POSITIVE,
    "flush_interval_consume_queue": _POSITIVE,
    "disk_max_used_space_ratio": int_range(0, 100),
    "mapped_file_size_commit_log": int_range(4096, 2**31 - 1),
    "mapped_file_size_consume_queue": lambda v: int_range(UNIT_SIZE * 64, 2**31 - 1)(v) or (
        None if v % UNIT_SIZE == 0 else f"must be a multiple of {UNIT_SIZE} (the unit size), got {v}"),
    "mapped_file_size_consume_queue_ext": lambda v: int_range(BITMAP_UNIT_SIZE * 64, 2**31 - 1)(v) or (
        None if v % BITMAP_UNIT_SIZE == 0 else f"must be a multiple of {BITMAP_UNIT_SIZE} (the unit size), got {v}"),
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
    "grpc_listen_port": int_range(-1, 65535),
    "grpc_server_stack": one_of(*GRPC_SERVER_STACKS),
    "ha_listen_port": _PORT,
    "metrics_export_interval_ms": _POSITIVE,
    "export_interval_ms": _POSITIVE,
    "shutdown_drain_timeout_ms": _NON_NEGATIVE,
    "namesrv_addr": _namesrv_addrs,
    "register_name_server_period": _POSITIVE,
    "register_name_server_initial_delay": _NON_NEGATIVE,
    "register_broker_timeout_mills": _POSITIVE,
}



def coerce_value(f: dataclasses.Field[Any], raw: object, key: str) -> bool | int | str:
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
        try:
            values = load_properties(path)
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError("--config", f"cannot read {path}: {e.strerror if isinstance(e, OSError) and e.strerror else e}") from None
        cfg.apply(values, source=path)
    if overrides:
        cfg.apply({k: v for k, v in overrides.items() if v is not None}, source="cli")
    return cfg


def apply_keys(cfg: Any, values: Mapping[str, object], source: str,
               aliases: Mapping[str, str] | None = None) -> list[str]:
    """Set the dataclass `cfg`'s fields from camelCase keys (BrokerConfig.key_for), snake_case names or
    `aliases` (key -> field name), each value coerced to its field's type; returns the unknown keys
    (each logged). The broker's and the name server's configs both read keys this way."""
    fields = dataclasses.fields(cfg)
    by_key = {BrokerConfig.key_for(f.name): f for f in fields}
    by_name = {f.name: f for f in fields}
    unknown = []
    for key, raw in values.items():
        f = by_key.get(key) or by_name.get(key) or by_name.get((aliases or {}).get(key, ""))
        if f is None:
            unknown.append(key)
            log.warning("config.unknown_key", key=key, source=source)
            continue
        setattr(cfg, f.name, coerce_value(f, raw, key))
    return unknown
