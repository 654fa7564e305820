"""Broker hardening: plain ACL, TLS on the broker port, connection and memory limits.

`install(config, store, server) -> Security` is the one entry point the broker calls (server/broker.py)
after it built its RemotingServer and before it listens. Config keys (broker.conf):
  aclEnable, aclFile (alias rocketmq.acl.plain.file; default <storePathRootDir>/config/plain_acl.yml)
  tlsEnable, tls.server.mode (disabled|permissive|enforcing), tls.server.certPath, tls.server.keyPath,
  tls.server.need.client.auth / tlsServerNeedClientAuth (none|optional|require) + tls.server.trustCertPath
  maxConnections, maxConnectionsPerIp, maxInflightPerConnection, maxFrameSize, maxHeaderSize,
  maxBufferedFrameBytes
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from codec.codes import RMQ_SYS_TRANS_HALF_TOPIC, ResponseCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.properties import MessageConst, parse_properties
from codec.record import read_properties_bytes, read_topic
from server.config import BrokerConfig, ConfigError
from server.security.acl import AclConfigError, AclDenied, PlainAclValidator, load_acl_file
from server.security.guard import GuardState, RateLimitedLog
from server.security.resources import OPEN_CODES, Lookups
from server.security.tls import server_context

if TYPE_CHECKING:
    from remoting.connection import Connection
    from remoting.dispatch import BeforeRequest
    from remoting.server import RemotingServer
    from storage.message_store import MessageStore

log = structlog.get_logger(__name__)

__all__ = ["Security", "install", "preflight", "acl_file_path", "tls_mode", "make_acl_hook", "store_lookups"]


def acl_file_path(cfg: BrokerConfig) -> str:
    return cfg.acl_file or os.path.join(cfg.store_path_root_dir, "config", "plain_acl.yml")


def tls_mode(cfg: BrokerConfig) -> str:
    mode = (cfg.tls_server_mode or "").strip().lower()
    if mode not in ("", "disabled", "permissive", "enforcing"):
        raise ValueError(f"tls.server.mode must be disabled, permissive or enforcing, got {cfg.tls_server_mode!r}")
    if mode == "":
        return "permissive" if cfg.tls_enable else "disabled"
    return mode


def preflight(cfg: BrokerConfig) -> None:
    """Before the store is opened: the ACL file parses and the TLS files load, or ConfigError names
    the key (the broker exits 2 with that one line)."""
    if cfg.acl_enable:
        try:
            load_acl_file(acl_file_path(cfg))
        except AclConfigError as e:
            raise ConfigError("aclFile", str(e)) from None
        except OSError as e:
            raise ConfigError("aclFile", f"cannot read {acl_file_path(cfg)}: {e.strerror or e}") from None
    mode = tls_mode(cfg)
    if mode == "disabled":
        return
    for key, path in (("tls.server.certPath", cfg.tls_server_cert_path),
                      ("tls.server.keyPath", cfg.tls_server_key_path)):
        if not path:
            raise ConfigError(key, f"tls.server.mode={mode} needs a file")
        if not os.path.isfile(path):
            raise ConfigError(key, f"{path} does not exist or is not a file")
    if cfg.tls_server_trust_cert_path and not os.path.isfile(cfg.tls_server_trust_cert_path):
        raise ConfigError("tls.server.trustCertPath", f"{cfg.tls_server_trust_cert_path} does not exist")
    if client_auth(cfg) != ssl.CERT_NONE and not cfg.tls_server_trust_cert_path:
        raise ConfigError("tls.server.need.client.auth",
                          "verifying client certificates needs tls.server.trustCertPath (the CA bundle)")
    try:
        make_server_context(cfg)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError("tls.server.certPath", f"cannot load the TLS certificate/key/CA files: {e}") from None


def client_auth(cfg: BrokerConfig) -> ssl.VerifyMode:
    return {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
            "require": ssl.CERT_REQUIRED}[cfg.tls_server_need_client_auth.strip().lower()]


def make_server_context(cfg: BrokerConfig) -> ssl.SSLContext:
    return server_context(cfg.tls_server_cert_path, cfg.tls_server_key_path,
                          verify=client_auth(cfg), trust_path=cfg.tls_server_trust_cert_path or None)


def make_acl_hook(validator: PlainAclValidator) -> BeforeRequest:
    """The remoting ACL check of every request (broker and name-server roles): OPEN_CODES pass; every other
    code is authenticated and authorized against server.security.resources' table."""
    denied_log = RateLimitedLog()

    def before_request(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code in OPEN_CODES:
            return None
        try:
            validator.validate(conn.remote_addr[0], cmd.code, cmd.ext_fields, cmd.body)
        except AclDenied as e:
            denied_log.warning("acl.denied", peer=conn.peer, code=cmd.code, reason=str(e))
            return cmd.response(ResponseCode.NO_PERMISSION, str(e))
        return None

    return before_request


def store_lookups(store: MessageStore, topic_exists: Callable[[str], bool]) -> Lookups:
    """The resolver's questions answered by the broker's store and topic table."""
    def record_topic(offset: int) -> str | None:
        try:
            rec = store.read_record(offset) if offset >= 0 else None
            if rec is None or not len(rec):
                return None
            topic = read_topic(rec)
            if topic == RMQ_SYS_TRANS_HALF_TOPIC:  # END_TRANSACTION names a half: its real topic is what it publishes
                return parse_properties(read_properties_bytes(rec)).get(MessageConst.REAL_TOPIC) or topic
            return topic
        except (ValueError, IndexError, OSError, CodecError):
            return None
    return Lookups(record_topic, topic_exists)


@dataclass(frozen=True, slots=True)
class Security:
    """What `install` set up: the connection guard and the ACL validator (None: aclEnable=false), which
    the gRPC endpoint checks its calls against too."""

    guard: GuardState
    acl: PlainAclValidator | None


def install(cfg: BrokerConfig, store: MessageStore, server: RemotingServer,
            topic_exists: Callable[[str], bool]) -> Security:
    """Apply limits, TLS and ACL from broker.conf to a RemotingServer that is not listening yet."""
    if cfg.max_connections > 0:
        server.max_connections = cfg.max_connections
    if cfg.max_inflight_per_connection > 0:
        server.max_inflight = cfg.max_inflight_per_connection
    if cfg.max_frame_size > 0:
        server.max_frame = cfg.max_frame_size
    server.max_header = cfg.max_header_size
    mode = tls_mode(cfg)
    ctx = None
    if mode != "disabled":
        if not (cfg.tls_server_cert_path and cfg.tls_server_key_path):
            raise ValueError(f"tls.server.mode={mode} needs tls.server.certPath and tls.server.keyPath")
        ctx = make_server_context(cfg)
    state = GuardState(max_per_ip=max(0, cfg.max_connections_per_ip),
                       frame_budget=max(0, cfg.max_buffered_frame_bytes), tls_mode=mode, tls_context=ctx)
    server.protocol_factory_wrapper = state.wrap_factory
    validator = None
    if cfg.acl_enable:
        validator = PlainAclValidator(acl_file_path(cfg), lookups=store_lookups(store, topic_exists))
        server.before_request = make_acl_hook(validator)
    log.info("security.installed", acl=cfg.acl_enable, acl_file=acl_file_path(cfg) if cfg.acl_enable else None,
             tls_mode=mode, max_connections=server.max_connections, max_connections_per_ip=state.max_per_ip,
             max_inflight_per_connection=server.max_inflight, max_frame=server.max_frame, max_header=server.max_header,
             max_buffered_frame_bytes=state.frame_budget)
    return Security(state, validator)
