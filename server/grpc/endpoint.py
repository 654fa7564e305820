"""The gRPC endpoint: a grpc.aio server on the broker's own event loop (uvloop), port `grpcListenPort`.

Built and started by the composition root (server/broker.py) after the remoting server, the ACL and
the store are up; stopped before the store shuts down. Cleartext HTTP/2, or TLS with the remoting
port's keys (tls.server.certPath / tls.server.keyPath) whenever tls.server.mode is not `disabled`: a
gRPC port cannot sniff the first byte as the remoting port does, so `permissive` means TLS here.
Under grpcServerStack=envoy the port is Envoy's (server/envoy_broker.py): `start()` then builds the
MessagingService only, which Envoy's embedded Python serves over ASGI (server.grpc.asgi_endpoint).
"""

from __future__ import annotations

import grpc
import structlog

from server.grpc import convert
from server.grpc.auth import Authenticator
from server.grpc.deps import GrpcDeps
from server.grpc.local_backend import LocalBackend
from server.grpc.service import MessagingService
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.listeners import ListenError
from server.pop.service import PopService
from server.security import tls_mode

log = structlog.get_logger(__name__)

GRACE_S = 1.0
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def tls_credentials(cert_path: str, key_path: str, client_auth: str = "none",
                    trust_path: str = "") -> grpc.ServerCredentials:
    """A gRPC port's TLS keys (the broker's and delaymq-proxy's). Client certificates as on the remoting port
    (tls.server.need.client.auth): gRPC requests one when given the CA bundle, and refuses the handshake
    without one on `require`. OSError when a file cannot be read."""
    with open(key_path, "rb") as f:
        key = f.read()
    with open(cert_path, "rb") as f:
        cert = f.read()
    auth = client_auth.strip().lower()
    roots = None
    if auth != "none":
        with open(trust_path, "rb") as f:
            roots = f.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=roots, require_client_auth=auth == "require")


class GrpcEndpoint:
    """`pop`: the broker's pop engine (server.pop, shared with the remoting pop processors)."""

    def __init__(self, deps: GrpcDeps, pop: PopService) -> None:
        self.deps = deps
        self.port = 0
        self.tls = False
        self.server: grpc.aio.Server | None = None
        self.pop = pop
        self.service: MessagingService | None = None

    async def start(self) -> None:
        cfg = self.deps.config
        if cfg.grpc_server_stack == "envoy":  # Envoy listens (and does TLS); the service is what it serves
            self.port = cfg.grpc_port
            self.tls = tls_mode(cfg) != "disabled"
            self.service = self._service()
            return
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ])
        addr = f"{cfg.listen_host}:{cfg.grpc_port}"
        try:
            if tls_mode(cfg) != "disabled":
                creds = tls_credentials(cfg.tls_server_cert_path, cfg.tls_server_key_path,
                                        cfg.tls_server_need_client_auth, cfg.tls_server_trust_cert_path)
                self.port = self.server.add_secure_port(addr, creds)
                self.tls = True
            else:
                self.port = self.server.add_insecure_port(addr)
        except RuntimeError as e:  # grpc: "Failed to bind to address"
            raise ListenError("grpcListenPort", cfg.listen_host, cfg.grpc_port, str(e)) from None
        if not self.port:
            raise ListenError("grpcListenPort", cfg.listen_host, cfg.grpc_port, "address already in use")
        self.service = self._service()
        sgrpc.add_MessagingServiceServicer_to_server(self.service, self.server)
        await self.server.start()
        log.info("grpc.listening", addr=f"{cfg.listen_host}:{self.port}", tls=self.tls)

    def _service(self) -> MessagingService:
        deps = self.deps
        return MessagingService(LocalBackend(deps, self.pop), Authenticator(deps.acl),
                                lambda: convert.endpoints(deps.config.broker_ip1, self.port))

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(GRACE_S)
            self.server = None

    def stats(self) -> dict[str, int]:
        out = dict(self.pop.stats())
        if self.service is not None:
            out["grpcRpcErrors"] = self.service.rpc_errors
            out["grpcTelemetrySessions"] = len(self.service.telemetry.sessions)
        return out
