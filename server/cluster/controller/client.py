"""The broker's line to Apache's controllers: which one leads, requests to the leader, heartbeats to all.

A request goes to the leader; when it answers CONTROLLER_NOT_LEADER or cannot be reached, the leader is
looked up again (CONTROLLER_GET_METADATA_INFO to each controller in turn) and the request is sent once
more. `controllerAddr` lists the controllers' DLedger peer addresses (`a:p;b:p`).
"""

from __future__ import annotations

import structlog

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.controller import GetMetaDataResponseHeader
from codec.errors import CodecError
from remoting.client import RemotingClient

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 3.0  # every broker -> controller request in Apache's BrokerOuterAPI


class ControllerUnavailable(Exception):
    """No controller named itself (or a peer) leader, or the leader did not answer."""


def parse_controller_addrs(value: str) -> list[str]:
    return [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]


class ControllerClient:
    def __init__(self, addrs: list[str], client: RemotingClient | None = None) -> None:
        self.addrs = addrs
        self.client = client or RemotingClient(connect_timeout=REQUEST_TIMEOUT_S)
        self.leader: str | None = None
        self.leader_changes = 0

    async def find_leader(self) -> str:
        """Ask each controller who leads; the first answer naming a leader wins."""
        for addr in self.addrs:
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(int(RC.CONTROLLER_GET_METADATA_INFO), {}),
                                                REQUEST_TIMEOUT_S)
                meta = GetMetaDataResponseHeader.from_ext(resp.ext_fields)
            except (OSError, TimeoutError, CodecError) as e:
                log.info("controller.unreachable", controller=addr, error=repr(e))
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            leader = addr if meta.isLeader else meta.controllerLeaderAddress
            if leader:
                if leader != self.leader:
                    self.leader_changes += 1
                    log.info("controller.leader", leader=leader, asked=addr, group=meta.group)
                self.leader = leader
                return leader
        self.leader = None
        raise ControllerUnavailable(f"no controller leader among {';'.join(self.addrs)}")

    async def invoke(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        """`code` to the leader; once more to the leader found again when it moved or did not answer."""
        for attempt in (0, 1):
            leader = self.leader if self.leader and attempt == 0 else await self.find_leader()
            try:
                resp = await self.client.invoke(leader, RemotingCommand.request(code, dict(ext), body),
                                                REQUEST_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                log.info("controller.request_failed", controller=leader, code=code, error=repr(e))
                self.leader = None
                continue
            if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
                self.leader = None
                continue
            return resp
        raise ControllerUnavailable(f"request {code}: the controller leader did not answer")

    async def heartbeat(self, ext: dict[str, str]) -> None:
        """BROKER_HEARTBEAT, oneway, to every controller (a follower forwards nothing: each keeps its own view)."""
        for addr in self.addrs:
            try:
                cmd = RemotingCommand.request(int(RC.BROKER_HEARTBEAT), dict(ext), oneway=True)
                await self.client.invoke_oneway(addr, cmd)
            except (OSError, TimeoutError) as e:
                log.debug("controller.heartbeat_failed", controller=addr, error=repr(e))

    def close(self) -> None:
        self.client.close()
