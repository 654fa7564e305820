"""The broker on Envoy (`grpcServerStack=envoy`): one serving process, a stock Envoy (pyvoy) with the whole broker
embedded in its Python, whose gRPC port (grpcListenPort) is Envoy's. Apache's "local mode" is its proxy and broker
in one JVM; this is the broker and Envoy's HTTP/2 in one process, the gRPC framing being server.grpc.asgi_endpoint's
over the same MessagingService + LocalBackend the grpcio stack serves.

Two halves, as delaymq-proxy's (server/proxy/envoy.py), over the launcher they share (server/grpc/envoy_host.py):

- `EnvoyBroker`, what `delaymq-broker` runs: the ports were probed by then (one line naming the key); it starts
  Envoy with the BrokerConfig in its environment, and on SIGTERM stops it (pyvoy runs the ASGI lifespan's
  shutdown: the broker's own graceful stop, store flushed and offsets committed, inside Envoy). Its ready line
  names Envoy's pid. A `kill -9` of the launcher kills Envoy too (PR_SET_PDEATHSIG); the store recovers as usual.
- `app`, what Envoy's embedded Python imports: `HostedBroker`, an ASGI application whose lifespan builds and
  starts the `BrokerController` (store, scheduler, remoting port, HA, everything server/broker.py composes) on
  pyvoy's uvloop loop, in one of Envoy's threads: nothing of it may assume the main thread (signals are the
  launcher's). Its gRPC calls go to a GrpcAsgiApp over the broker's MessagingService. A start that fails logs
  the same one line as the grpcio stack's (server.process.start_failure) and ends Envoy with the exit code.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING

import structlog

from server.config import BrokerConfig
from server.grpc.envoy_host import EnvoyHost, EnvoySpec, EnvoyTls, die_with_launcher, exit_reported, lazy_app
from server.security import tls_mode

if TYPE_CHECKING:
    from server.broker import BrokerController
    from server.grpc.asgi_endpoint import GrpcAsgiApp, Receive, Scope, Send

log = structlog.get_logger(__name__)

CONFIG_ENV = "DELAYMQ_BROKER_CONFIG"  # the BrokerConfig's fields, as JSON, handed to Envoy's embedded Python
LOG_LEVEL_ENV = "DELAYMQ_BROKER_LOG_LEVEL"
APP = "server.envoy_broker:app"


def envoy_tls(cfg: BrokerConfig) -> EnvoyTls | None:
    """The gRPC port's TLS as the grpcio stack's (server.grpc.endpoint): the remoting port's keys whenever
    tls.server.mode is not `disabled`, client certificates as tls.server.need.client.auth asks."""
    if tls_mode(cfg) == "disabled":
        return None
    auth = cfg.tls_server_need_client_auth.strip().lower()
    ca = cfg.tls_server_trust_cert_path if auth != "none" else ""
    return EnvoyTls(cfg.tls_server_cert_path, cfg.tls_server_key_path, ca, require=auth == "require")


class EnvoyBroker:
    """The launcher: a serve_until_signal component whose serving (the whole broker) is done by a child Envoy."""

    def __init__(self, cfg: BrokerConfig, log_level: str) -> None:
        self.cfg = cfg
        self.host = EnvoyHost(EnvoySpec(
            APP, "grpcListenPort", cfg.listen_host, cfg.grpc_port,
            env={CONFIG_ENV: json.dumps(dataclasses.asdict(cfg)), LOG_LEVEL_ENV: log_level},
            tls=envoy_tls(cfg)))

    async def start(self) -> None:
        await self.host.start()  # answers once the embedded broker started and Envoy's listener serves

    @property
    def envoy_pid(self) -> int | None:
        return self.host.envoy_pid

    async def shutdown(self) -> None:
        await self.host.shutdown()

    @property
    def failed(self) -> bool:
        """Envoy (the broker) ended without being stopped: killed, or crashed."""
        return self.host.exited_on_its_own is not None


class HostedBroker:
    """Envoy's side: the broker, started and stopped in the ASGI lifespan, its gRPC calls served over ASGI."""

    def __init__(self, cfg: BrokerConfig) -> None:
        self.cfg = cfg
        self.broker: BrokerController | None = None
        self.grpc: GrpcAsgiApp | None = None  # built once the broker (and its MessagingService) started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        grpc = self.grpc
        if grpc is not None and scope["type"] == "http":
            await grpc(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        # pyvoy hands no call over before the lifespan's startup completed

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await self._start()
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                log.info("broker.lifespan_shutdown")  # the launcher's SIGTERM, passed on by Envoy
                if self.broker is not None:
                    await self.broker.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        from server.broker import BrokerController
        from server.grpc.asgi_endpoint import GrpcAsgiApp
        from server.grpc.endpoint import MAX_MESSAGE_BYTES
        from server.grpc.v2 import service_pb2 as spb
        from server.process import settle_heap, start_failure

        try:
            broker = self.broker = BrokerController(self.cfg)
            await broker.start()
            assert broker.grpc is not None and broker.grpc.service is not None  # grpcListenPort > 0 (validated)
            self.grpc = GrpcAsgiApp(broker.grpc.service, spb.DESCRIPTOR.services_by_name["MessagingService"],
                                    max_message_bytes=MAX_MESSAGE_BYTES)
        except Exception as e:
            if self.broker is not None:
                await self.broker.shutdown()
            exit_status = start_failure(e)
            if exit_status is None:  # a bug: its traceback, and the launcher exits 1
                log.exception("broker.start_failed", error=repr(e))
            exit_reported(1 if exit_status is None else exit_status)
        settle_heap()


def build_app() -> HostedBroker:
    from server.logging import configure

    configure(os.environ.get(LOG_LEVEL_ENV, "info"))
    die_with_launcher()
    return HostedBroker(BrokerConfig(**json.loads(os.environ[CONFIG_ENV])))


__getattr__ = lazy_app(build_app, globals())  # `app`: built in Envoy only
