"""NOTIFY_BROKER_ROLE_CHANGED (1008): the controller's push after an election (header: the new master's
id, address and epoch, the SyncStateSet epoch; body: the SyncStateSet). Applied before the answer; a bad
header is answered CONTROLLER_INVALID_REQUEST with a remark."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.controller import NotifyBrokerRoleChangedRequestHeader, SyncStateSet
from codec.errors import CodecError
from remoting.dispatch import Response
from server.processors import Peer, Registrar, error, ok, request_body

# ReplicasManager.on_notify: applies the role the header and body name
OnNotify = Callable[[NotifyBrokerRoleChangedRequestHeader, SyncStateSet], Awaitable[None]]


def register(server: Registrar, on_notify: OnNotify) -> None:
    async def notify_role_changed(conn: Peer, cmd: RemotingCommand) -> Response:
        try:
            header = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
            sse = SyncStateSet.decode(request_body(cmd))
        except CodecError as e:
            return error(cmd, RS.CONTROLLER_INVALID_REQUEST, f"bad NOTIFY_BROKER_ROLE_CHANGED: {e}")
        await on_notify(header, sse)
        return ok(cmd)

    server.register(int(RC.NOTIFY_BROKER_ROLE_CHANGED), notify_role_changed)
