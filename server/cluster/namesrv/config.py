"""`delaymq-namesrv` settings: NamesrvConfig (RocketMQ NamesrvConfig / NettyServerConfig key names where they
exist), read from a properties file and the command line the way broker.conf is (server.config)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from server.config import BrokerConfig, ConfigError, apply_keys, load_properties

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class NamesrvConfig:
    """`delaymq-namesrv` settings (RocketMQ NamesrvConfig / NettyServerConfig key names where they exist)."""
    listen_port: int = 9876
    listen_host: str = "127.0.0.1"
    kv_config_path: str = ""  # kvConfig.json; empty = KV config in memory only
    scan_not_active_broker_interval: int = 10000  # ms between expiry scans (4.9.8: 10 s)
    broker_channel_expired_time: int = 120000  # ours: ms without registration before a broker expires
    server_channel_max_idle_time_seconds: int = 120
    max_frame_size: int = 16777216
    acl_enable: bool = False  # ours (Apache's name server checks nothing): the broker's plain ACL, same table
    acl_file: str = ""  # plain_acl.yml; required with aclEnable (brokers registering must be white-listed or admin)

    def apply(self, values: Mapping[str, object], source: str = "config") -> list[str]:
        return apply_keys(self, values, source)

    def validate(self) -> None:
        """Raise ConfigError naming the first bad key (the name server stops with that one line)."""
        if self.acl_enable:
            from server.security.acl import AclConfigError, load_acl_file
            if not self.acl_file:
                raise ConfigError("aclFile", "aclEnable=true needs the plain_acl.yml path")
            try:
                load_acl_file(self.acl_file)
            except AclConfigError as e:
                raise ConfigError("aclFile", str(e)) from None
            except OSError as e:
                raise ConfigError("aclFile", f"cannot read {self.acl_file}: {e.strerror or e}") from None
        if not 0 < self.listen_port < 65536:
            raise ConfigError("listenPort", f"expected 1..65535, got {self.listen_port}")
        for name, value in (("scan_not_active_broker_interval", self.scan_not_active_broker_interval),
                            ("broker_channel_expired_time", self.broker_channel_expired_time),
                            ("server_channel_max_idle_time_seconds", self.server_channel_max_idle_time_seconds),
                            ("max_frame_size", self.max_frame_size)):
            if value <= 0:
                raise ConfigError(BrokerConfig.key_for(name), f"expected > 0, got {value}")


def load_namesrv_config(path: str | None = None, overrides: Mapping[str, object] | None = None) -> NamesrvConfig:
    cfg = NamesrvConfig()
    if path:
        cfg.apply(load_properties(path), source=path)
    if overrides:
        cfg.apply({k: v for k, v in overrides.items() if v is not None}, source="cli")
    cfg.validate()  # a bad value: ConfigError naming the key (delaymq-namesrv exits 2 with that line)
    return cfg
