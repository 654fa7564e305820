"""NOTIFY_BROKER_ROLE_CHANGED (1008): the controller's push after an election (header: the new master's
id, address and epoch, the SyncStateSet epoch; body: the SyncStateSet). Applied before the answer; a bad
header is answered CONTROLLER_INVALID_REQUEST with a remark.

HAND_OVER_MASTER (3104, delaymq's): an elected slave asks the master it followed to step down before it
starts delivering (header: `masterEpoch`, `masterBrokerId` of the election). The master asks the
controller at once; replaced, it is fenced (no write, no scheduled delivery) and answers its CommitLog
end (`commitLogMaxOffset`), which the new master's replica reaches before it promotes. Still the master
by the controller's word: CONTROLLER_MASTER_STILL_EXIST with a remark.

GET_BROKER_EPOCH_CACHE (1007, mqadmin getBrokerEpoch): the broker's EpochEntryCache (no header)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from codec.codes import RequestCode as RC
from codec.codes import ResponseCode as RS
from codec.command import RemotingCommand
from codec.controller import EpochEntryCache, NotifyBrokerRoleChangedRequestHeader, SyncStateSet
from codec.errors import CodecError
from remoting.dispatch import Response
from server.processors import Peer, Registrar, error, ok, request_body

# ReplicasManager.on_notify: applies the role the header and body name
OnNotify = Callable[[NotifyBrokerRoleChangedRequestHeader, SyncStateSet], Awaitable[None]]
# ReplicasManager.on_hand_over(masterEpoch, masterBrokerId): the CommitLog end once stepped down, or why not
OnHandOver = Callable[[int, int], Awaitable[int | str]]


def _int_field(cmd: RemotingCommand, key: str) -> int:
    v = (cmd.ext_fields or {}).get(key)
    try:
        return int(str(v))
    except ValueError:
        raise CodecError(f"{key} must be an integer, got {v!r}") from None


def register(server: Registrar, on_notify: OnNotify, on_hand_over: OnHandOver | None = None,
             epoch_cache: Callable[[], EpochEntryCache] | None = None) -> None:
    async def notify_role_changed(conn: Peer, cmd: RemotingCommand) -> Response:
        try:
            header = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
            sse = SyncStateSet.decode(request_body(cmd))
        except CodecError as e:
            return error(cmd, RS.CONTROLLER_INVALID_REQUEST, f"bad NOTIFY_BROKER_ROLE_CHANGED: {e}")
        await on_notify(header, sse)
        return ok(cmd)

    server.register(int(RC.NOTIFY_BROKER_ROLE_CHANGED), notify_role_changed)
    if epoch_cache is not None:
        cache = epoch_cache

        async def get_epoch_cache(conn: Peer, cmd: RemotingCommand) -> Response:
            return ok(cmd, body=cache().encode())

        server.register(int(RC.GET_BROKER_EPOCH_CACHE), get_epoch_cache)
    if on_hand_over is None:
        return
    step_down = on_hand_over

    async def hand_over(conn: Peer, cmd: RemotingCommand) -> Response:
        try:
            epoch, new_id = _int_field(cmd, "masterEpoch"), _int_field(cmd, "masterBrokerId")
        except CodecError as e:
            return error(cmd, RS.CONTROLLER_INVALID_REQUEST, f"bad HAND_OVER_MASTER: {e}")
        got = await step_down(epoch, new_id)
        if isinstance(got, str):
            return error(cmd, RS.CONTROLLER_MASTER_STILL_EXIST, got)
        return ok(cmd, {"commitLogMaxOffset": str(got)})

    server.register(int(RC.HAND_OVER_MASTER), hand_over)
