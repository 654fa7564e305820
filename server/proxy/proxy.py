"""The proxy process's composition root: the remoting client to name servers and brokers, the route cache,
the remote brokers, the sessions, and the gRPC server serving server.grpc's one `MessagingService` over a
`RemoteBackend`."""

from __future__ import annotations

import grpc
import structlog

from remoting.client import RemotingClient
from server.grpc import convert
from server.grpc.auth import Authenticator
from server.grpc.endpoint import MAX_MESSAGE_BYTES, tls_credentials
from server.grpc.service import MessagingService
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2_grpc as sgrpc
from server.listeners import Listener, ListenError, probe
from server.proxy.backend import RemoteBackend
from server.proxy.brokers import RemoteBrokers
from server.proxy.coalesce import SendCoalescer
from server.proxy.config import ProxyConfig
from server.proxy.metadata import BrokerMetadata
from server.proxy.routes import NameServerRoutes
from server.proxy.sessions import ProxySessions
from server.proxy.transactions import TransactionRelay
from server.security.acl import PlainAclValidator
from storage.supervisor import SupervisedTask, Supervisor

log = structlog.get_logger(__name__)

GRACE_S = 1.0


class Proxy:
    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        # enableAclRpcHookForClusterMode: every request to brokers and name servers signed with aclToolsFile's account
        credentials = cfg.credentials()
        self.client = RemotingClient(credentials=credentials)
        self.signs_as = credentials.access_key if credentials else None
        self.routes = NameServerRoutes(self.client, cfg.namesrv_addrs, cfg.route_ttl_ms)
        self.sends = SendCoalescer(self.client, cfg.send_coalesce_max_frames, cfg.send_coalesce_linger_ms) \
            if cfg.send_coalesce else None
        self.brokers = RemoteBrokers(self.client, sends=self.sends)
        self.port = 0
        self.server: grpc.aio.Server | None = None
        self.sessions = ProxySessions()
        self.transactions = TransactionRelay(self.client, self.routes, self.sessions)
        self.metadata = BrokerMetadata(self.client, self.routes, cfg.route_ttl_ms)
        self.backend = RemoteBackend(cfg, self.routes, self.brokers, self.sessions, self.metadata)
        # the brokers' plain-ACL accounts (server.security); AclConfigError (a ValueError) names the file
        acl = PlainAclValidator(cfg.acl_file) if cfg.acl_enable else None
        self.service = MessagingService(self.backend, Authenticator(acl), self.endpoints)
        self.supervisor = Supervisor()
        self.tasks: list[SupervisedTask] = []

    def endpoints(self) -> pb.Endpoints:
        """What a route names when the client gave no endpoints: this proxy."""
        host = self.cfg.listen_host if self.cfg.listen_host not in ("0.0.0.0", "::") else "127.0.0.1"
        return convert.endpoints(host, self.port)

    async def start(self) -> None:
        """Serve gRPC with grpc.aio in this process (grpcServerStack=grpcio)."""
        cfg = self.cfg
        # one line, before grpc logs its own; with reusePort a port held by another SO_REUSEPORT listener is
        # shared, one held without it is still refused
        probe([Listener("grpcServerPort", cfg.listen_host, cfg.grpc_port, "gRPC (5.x clients)")],
              reuse_port=cfg.reuse_port)
        # SO_REUSEPORT only when asked (reusePort): otherwise a second proxy on a taken port must fail, not
        # silently share it
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 1 if cfg.reuse_port else 0),
        ])
        addr = f"{cfg.listen_host}:{cfg.grpc_port}"
        try:
            if cfg.tls:
                self.port = self.server.add_secure_port(addr, tls_credentials(cfg.tls_cert_path, cfg.tls_key_path))
            else:
                self.port = self.server.add_insecure_port(addr)
        except RuntimeError as e:
            raise ListenError("grpcServerPort", cfg.listen_host, cfg.grpc_port, str(e)) from None
        if not self.port:
            raise ListenError("grpcServerPort", cfg.listen_host, cfg.grpc_port, "address already in use")
        sgrpc.add_MessagingServiceServicer_to_server(self.service, self.server)
        await self.server.start()
        await self.start_backend()

    async def start_backend(self) -> None:
        """What serves the calls whichever stack takes them: the brokers' side (and, under grpcServerStack=envoy,
        all that runs in Envoy's embedded Python, the gRPC port being Envoy's; `port` is then the one the
        launcher gave it)."""
        cfg = self.cfg
        if not self.port:
            self.port = cfg.grpc_port
        self.tasks.append(self.supervisor.spawn("proxy-producer-heartbeat", self.transactions.heartbeats))
        log.info("proxy.listening", addr=f"{cfg.listen_host}:{self.port}", namesrv=cfg.namesrv_addr, tls=cfg.tls,
                 acl=cfg.acl_enable, reuse_port=cfg.reuse_port, stack=cfg.grpc_server_stack,
                 signs_as=self.signs_as)

    async def shutdown(self) -> None:
        for t in self.tasks:
            await t.stop()
        self.tasks = []
        if self.server is not None:
            await self.server.stop(GRACE_S)
            self.server = None
        if self.sends is not None:
            self.sends.cancel_all()
            if self.sends.flights_sent:  # a start that failed says one line, its reason, and nothing else
                log.info("proxy.send_coalesce", flights=self.sends.flights_sent, requests=self.sends.requests_sent)
        self.client.close()
