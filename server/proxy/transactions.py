"""Transaction check-backs through the proxy, as Apache's proxy does them (ProxyClientRemotingProcessor).

A broker checks a half message nobody ended by sending CHECK_TRANSACTION_STATE to a producer of the half's
group (PGROUP: the topic, for a 5.x producer). So the proxy announces, with HEART_BEAT to the master
brokers of each topic its 5.x producers publish, one producer per such group (its remoting connection
is then the broker's producer channel), and relays a check it receives to one open Telemetry session
publishing that topic (`TelemetryChannel.invoke_oneway`: RecoverOrphanedTransactionCommand). The producer's
answer is an EndTransaction RPC, which any proxy forwards to the broker that stored the half.
"""

from __future__ import annotations

import asyncio
import os
import socket

import structlog

from codec.bodies import HeartbeatData, ProducerData, encode_heartbeat
from codec.codes import RequestCode
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.properties import MessageConst as K
from codec.record import decode_record
from remoting.client import RemotingClient
from remoting.connection import Connection
from remoting.errors import RemotingError
from server.grpc.status import GrpcError
from server.proxy.routes import MASTER_ID, NameServerRoutes
from server.proxy.sessions import ProxySessions

log = structlog.get_logger(__name__)

HEARTBEAT_INTERVAL_S = 10.0


class TransactionRelay:
    def __init__(self, client: RemotingClient, routes: NameServerRoutes, sessions: ProxySessions) -> None:
        self.client = client
        self.routes = routes
        self.sessions = sessions
        self.client_id = f"{socket.gethostname()}@delaymq-proxy-{os.getpid()}"
        self.wake = asyncio.Event()
        self.checks_relayed = 0
        client.register(RequestCode.CHECK_TRANSACTION_STATE, self.on_check)
        sessions.on_new_group = self.wake.set

    def on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        """A broker's CHECK_TRANSACTION_STATE (oneway): to a producer of the half's group, or dropped (the
        broker asks again at its next check)."""
        try:
            rec = decode_record(cmd.body_bytes())[0]
        except CodecError as e:
            log.warning("proxy.check_bad_record", error=str(e))
            return
        group = rec.properties.get(K.PGROUP, "")
        chan = self.sessions.producer(group)
        if chan is None:
            log.info("proxy.check_no_producer", group=group, msg_id=cmd.ext_fields.get("msgId"))
            return
        chan.invoke_oneway(cmd)
        self.checks_relayed += 1

    async def heartbeats(self) -> None:
        """Forever: HEART_BEAT to every master of each producer group's topic, at once when a group is new."""
        while True:
            self.wake.clear()
            await self.heartbeat_once()
            try:
                await asyncio.wait_for(self.wake.wait(), HEARTBEAT_INTERVAL_S)
            except TimeoutError:
                pass

    async def heartbeat_once(self) -> None:
        groups = self.sessions.groups()
        if not groups:
            return
        by_broker: dict[str, list[str]] = {}
        for group in groups:
            try:
                route = await self.routes.route(group)
            except GrpcError as e:
                log.info("proxy.heartbeat_no_route", group=group, error=e.message)
                continue
            for b in route.route.broker_datas:
                addr = b.broker_addrs.get(MASTER_ID)
                if addr:
                    by_broker.setdefault(addr, []).append(group)
        for addr, names in by_broker.items():
            body = encode_heartbeat(HeartbeatData(self.client_id, producers=[ProducerData(g) for g in names]))
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
            except (OSError, RemotingError) as e:
                log.info("proxy.heartbeat_failed", broker=addr, error=repr(e))
