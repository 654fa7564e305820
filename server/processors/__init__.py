"""Request processors, one room per concern. Each module declares the few collaborators it uses (a frozen
dataclass, e.g. `send.SendDeps`) and exposes `register(server, deps)`; `server.processor_wiring` builds
every one of them from the broker (the composition root): no processor sees the BrokerController.

`guarded(fn)` wraps a processor so that a bad header (`HeaderError`) is answered with
code 1 SYSTEM_ERROR and RocketMQ's remark, and oneway requests never get a response.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from codec.buffers import Body
from codec.codes import ResponseCode
from codec.command import RemotingCommand
from server.header_spec import HeaderError

if TYPE_CHECKING:
    from storage.meta_store import MetaStore

F = TypeVar("F", bound=Callable[..., Any])  # a processor: guarded keeps its signature


class Registrar(Protocol):
    """Where a processor room registers its handlers (server.wiring.RemotingAdapter, RemotingServer);
    `batch`: the handler of a run of consecutive requests of one read (remoting.dispatch)."""

    def register(self, code: int, processor: Callable[..., Any],
                 batch: Callable[..., list[Any]] | None = None) -> None: ...


class Peer(Protocol):
    """What processors read of a connection: its remote (ip, port) (a remoting Connection, or a
    gRPC client's TelemetryChannel held by the ClientManager)."""

    @property
    def remote_addr(self) -> tuple[str, int]: ...


def error(cmd: RemotingCommand, code: int, remark: str,
          ext_fields: dict[str, Any] | None = None) -> RemotingCommand | None:
    if cmd.is_oneway:
        return None
    return cmd.response(code=code, remark=remark, ext_fields=ext_fields)


def ok(cmd: RemotingCommand, ext_fields: dict[str, Any] | None = None, body: Body = b"") -> RemotingCommand | None:
    if cmd.is_oneway:
        return None
    return cmd.response(code=ResponseCode.SUCCESS, ext_fields=ext_fields, body=body)


def committed(meta: MetaStore, cmd: RemotingCommand) -> Awaitable[object] | None:
    """The SUCCESS response once the broker's metadata changes staged so far are committed (a future the
    dispatcher answers from; MetaStoreError -> SYSTEM_ERROR with its remark); None for oneway requests
    (they are committed with the same batch, nobody waits)."""
    if cmd.is_oneway:
        return None
    return meta.committed(cmd.response(code=ResponseCode.SUCCESS))


def guarded(fn: F) -> F:
    """`fn` (a processor, plain or async) answering a bad header with SYSTEM_ERROR and a oneway request
    with nothing."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(conn: Any, cmd: RemotingCommand) -> Any:
            try:
                resp = await fn(conn, cmd)
            except HeaderError as e:
                return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
            return None if cmd.is_oneway else resp
        return cast(F, run_async)

    @functools.wraps(fn)
    def run(conn: Any, cmd: RemotingCommand) -> Any:
        try:
            resp = fn(conn, cmd)
        except HeaderError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        return None if cmd.is_oneway else resp
    return cast(F, run)


def json_body(obj: object) -> bytes:
    """Compact JSON with sorted keys (fastjson's default field order)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def request_body(cmd: RemotingCommand) -> bytes:
    """The request body as bytes; HeaderError (-> SYSTEM_ERROR "request body is empty") if none."""
    body = cmd.body_bytes()
    if not body:
        raise HeaderError("request body is empty")
    return body


def parse_json_body(cmd: RemotingCommand) -> Any:
    body = request_body(cmd)
    try:
        return json.loads(body)
    except ValueError as e:
        raise HeaderError(f"request body is not valid JSON: {e}") from None


def peer_of(conn: Peer) -> tuple[str, int]:
    """The remote (ip, port) of a connection, IPv4-mapped IPv6 folded back to IPv4; a real IPv6 peer
    becomes 127.0.0.1 (::1) or 0.0.0.0: stored records carry IPv4 for C++/ali-ons readers."""
    host, port = conn.remote_addr
    host = str(host)
    if host.startswith("::ffff:"):
        host = host[7:]
    if ":" in host:
        host = "127.0.0.1" if host == "::1" else "0.0.0.0"
    return host, int(port)
