"""The proxy's configuration: flags over a `key=value` file (--config), RocketMQ's key names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from codec.acl import SessionCredentials
from codec.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from server.grpc.envoy_host import GRPC_SERVER_STACKS

DEFAULT_GRPC_PORT = 8081


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    namesrv_addr: str = ""  # namesrvAddr: "host:port[;host:port]" (required)
    grpc_port: int = DEFAULT_GRPC_PORT  # grpcServerPort (Apache's proxy key)
    listen_host: str = "0.0.0.0"  # listenHost
    timer_wheel_enable: bool = True  # the brokers' timerWheelEnable: a delivery time goes as TIMER_DELIVER_MS
    message_delay_level: str = DEFAULT_DELAY_LEVELS  # the brokers' levels, used when timerWheelEnable=false
    max_message_size: int = 4 * 1024 * 1024  # maxMessageSize, announced to producers in their settings
    route_ttl_ms: int = 3_000  # routeCacheTtlMs: how long a topic's route is reused
    acl_enable: bool = False  # aclEnable: 5.x clients sign their calls, checked against aclFile's accounts
    acl_file: str = ""  # aclFile: the brokers' plain_acl.yml (server.security.acl)
    tls_cert_path: str = ""  # tls.server.certPath (--tls-cert): with the key, the gRPC port speaks TLS only
    tls_key_path: str = ""  # tls.server.keyPath (--tls-key)
    reuse_port: bool = False  # reusePort: SO_REUSEPORT on the gRPC port, so several proxies on one host share it
    # sendCoalesce: sends to a broker wait while one flight of them is out and go together (server.proxy.coalesce);
    # false: one write per send (the reference path)
    send_coalesce: bool = True
    send_coalesce_max_frames: int = 128  # sendCoalesceMaxFrames: requests in one flight at most
    send_coalesce_linger_ms: int = 10  # sendCoalesceLingerMs: least time between two flights to a broker under load
    # enableTopicMessageTypeCheck (Apache's key and default): a send whose message type is not one its topic's
    # message.type accepts is refused with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    enable_topic_message_type_check: bool = True
    # enableAclRpcHookForClusterMode (Apache's key, default false): sign every request to the brokers (and name
    # servers) with the account of aclToolsFile, a tools.yml (`accessKey:` / `secretKey:`), as Apache's proxy signs
    # with $ROCKETMQ_HOME/conf/tools.yml, the default here too when ROCKETMQ_HOME is set
    enable_acl_rpc_hook_for_cluster_mode: bool = False
    acl_tools_file: str = ""  # aclToolsFile (ours: Apache's path is fixed)
    # grpcServerStack: the HTTP/2 + gRPC server of the gRPC port. `envoy` (the default): an Envoy process (pyvoy)
    # with this proxy's Python embedded, gRPC's framing over ASGI (server.grpc.asgi_endpoint), ~0.45x grpc.aio's CPU
    # per send; `grpcio`: grpc.aio in this process (bench/RESULTS.md 2026-11-29 05:40 for the side by side)
    grpc_server_stack: str = "envoy"

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_path and self.tls_key_path)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def credentials(self) -> SessionCredentials | None:
        """enableAclRpcHookForClusterMode: the account every request to brokers is signed with (aclToolsFile's)."""
        return load_tools_credentials(self.acl_tools_file) if self.enable_acl_rpc_hook_for_cluster_mode else None

    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)


_KEYS = {"namesrvAddr": "namesrv_addr", "grpcServerPort": "grpc_port", "listenHost": "listen_host",
         "timerWheelEnable": "timer_wheel_enable", "messageDelayLevel": "message_delay_level",
         "maxMessageSize": "max_message_size", "routeCacheTtlMs": "route_ttl_ms", "aclEnable": "acl_enable",
         "aclFile": "acl_file", "tls.server.certPath": "tls_cert_path", "tls.server.keyPath": "tls_key_path",
         "reusePort": "reuse_port", "grpcServerStack": "grpc_server_stack", "sendCoalesce": "send_coalesce",
         "sendCoalesceMaxFrames": "send_coalesce_max_frames", "sendCoalesceLingerMs": "send_coalesce_linger_ms",
         "enableTopicMessageTypeCheck": "enable_topic_message_type_check",
         "enableAclRpcHookForClusterMode": "enable_acl_rpc_hook_for_cluster_mode", "aclToolsFile": "acl_tools_file"}


def _value(key: str, text: str, like: object) -> object:
    if isinstance(like, bool):
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise ValueError(f"{key}: {text!r} is neither true nor false")
        return low == "true"
    if isinstance(like, int):
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{key}: {text!r} is not a whole number") from None
    return text.strip()


def load_proxy_config(path: str | None, overrides: Mapping[str, str | int | None]) -> ProxyConfig:
    """The file's keys, then the flags' (`overrides`, by key name; None: not given). ValueError names the key."""
    raw: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ValueError(f"--config: cannot read {path}: {e.strerror}") from None
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            k, sep, v = line.partition("=")
            if not sep:
                raise ValueError(f"--config: line {line!r} is not key=value")
            raw[k.strip()] = v
    raw.update({k: str(v) for k, v in overrides.items() if v is not None})
    defaults = ProxyConfig()
    kwargs: dict[str, object] = {}
    for key, text in raw.items():
        attr = _KEYS.get(key)
        if attr is None:
            raise ValueError(f"{key}: unknown key (known: {', '.join(_KEYS)})")
        kwargs[attr] = _value(key, text, getattr(defaults, attr))
    cfg = ProxyConfig(**kwargs)  # type: ignore[arg-type]  # values typed by _value from the defaults
    if not cfg.namesrv_addrs:
        raise ValueError("namesrvAddr: no name server given (--namesrv ADDR)")
    if not 0 <= cfg.grpc_port <= 65535:
        raise ValueError(f"grpcServerPort: {cfg.grpc_port} is not a port")
    if cfg.grpc_server_stack not in GRPC_SERVER_STACKS:
        raise ValueError(f"grpcServerStack: {cfg.grpc_server_stack!r} is none of {', '.join(GRPC_SERVER_STACKS)}")
    if cfg.send_coalesce_max_frames < 1:
        raise ValueError(f"sendCoalesceMaxFrames: {cfg.send_coalesce_max_frames} is not a positive number")
    if not 0 <= cfg.send_coalesce_linger_ms <= 1000:
        raise ValueError(f"sendCoalesceLingerMs: {cfg.send_coalesce_linger_ms} is not 0..1000")
    if cfg.acl_enable and not cfg.acl_file:
        raise ValueError("aclFile: aclEnable=true needs the plain_acl.yml file (aclFile=PATH)")
    if bool(cfg.tls_cert_path) != bool(cfg.tls_key_path):
        raise ValueError("tls.server.keyPath: TLS needs both a certificate and a key (--tls-cert and --tls-key)")
    try:
        cfg.delay_levels_ms()
    except ValueError as e:
        raise ValueError(f"messageDelayLevel: {e}") from None
    cfg.credentials()  # a missing or incomplete aclToolsFile stops the start here, naming the key
    return cfg


def load_tools_credentials(path: str) -> SessionCredentials:
    """The account of a tools.yml (`accessKey`, `secretKey`: AclUtils.getAclRPCHook's file); `path` "" is
    $ROCKETMQ_HOME/conf/tools.yml. ValueError names aclToolsFile."""
    if not path:
        home = os.environ.get("ROCKETMQ_HOME", "")
        if not home:
            raise ValueError("aclToolsFile: enableAclRpcHookForClusterMode=true needs the proxy's account, a tools.yml "
                             "with accessKey and secretKey (aclToolsFile=PATH, or $ROCKETMQ_HOME/conf/tools.yml)")
        path = os.path.join(home, "conf", "tools.yml")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"aclToolsFile: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"aclToolsFile: {path} is not YAML: {e}") from None
    ak = data.get("accessKey") if isinstance(data, dict) else None
    sk = data.get("secretKey") if isinstance(data, dict) else None
    if not isinstance(ak, str) or not ak.strip() or not isinstance(sk, str) or not sk.strip():
        raise ValueError(f"aclToolsFile: {path} needs a non-blank accessKey and secretKey")
    return SessionCredentials(ak.strip(), sk.strip())
