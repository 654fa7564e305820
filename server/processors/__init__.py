"""Request processors, one room per concern. Each module exposes `register(server, broker)`.

`guarded(fn)` wraps a processor so that a bad header (`HeaderError`) is answered with
code 1 SYSTEM_ERROR and RocketMQ's remark, and oneway requests never get a response.
"""

from __future__ import annotations

import functools
import inspect
import json

from codec.codes import ResponseCode
from server.headers import HeaderError


def error(cmd, code: int, remark: str, ext_fields: dict | None = None):
    if cmd.is_oneway:
        return None
    return cmd.response(code=code, remark=remark, ext_fields=ext_fields)


def ok(cmd, ext_fields: dict | None = None, body=b""):
    if cmd.is_oneway:
        return None
    return cmd.response(code=ResponseCode.SUCCESS, ext_fields=ext_fields, body=body)


def committed(broker, cmd):
    """The SUCCESS response once the broker's metadata changes staged so far are committed (a future the
    dispatcher answers from; MetaStoreError -> SYSTEM_ERROR with its remark); None for oneway requests
    (they are committed with the same batch, nobody waits)."""
    if cmd.is_oneway:
        return None
    return broker.meta.committed(cmd.response(code=ResponseCode.SUCCESS))


def guarded(fn):
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(conn, cmd):
            try:
                resp = await fn(conn, cmd)
            except HeaderError as e:
                return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
            return None if cmd.is_oneway else resp
        return run_async

    @functools.wraps(fn)
    def run(conn, cmd):
        try:
            resp = fn(conn, cmd)
        except HeaderError as e:
            return error(cmd, ResponseCode.SYSTEM_ERROR, str(e))
        return None if cmd.is_oneway else resp
    return run


def json_body(obj) -> bytes:
    """Compact JSON with sorted keys (fastjson's default field order)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def request_body(cmd) -> bytes:
    """The request body as bytes; HeaderError (-> SYSTEM_ERROR "request body is empty") if none."""
    body = cmd.body
    if isinstance(body, list):
        body = b"".join(bytes(p) for p in body)
    if not body:
        raise HeaderError("request body is empty")
    return bytes(body)


def parse_json_body(cmd):
    body = request_body(cmd)
    try:
        return json.loads(body)
    except ValueError as e:
        raise HeaderError(f"request body is not valid JSON: {e}") from None


def peer_of(conn) -> tuple[str, int]:
    """The remote (ip, port) of a connection, IPv4-mapped IPv6 folded back to IPv4."""
    addr = None
    for attr in ("peer", "remote_addr", "peername"):
        addr = getattr(conn, attr, None)
        if addr:
            break
    if addr is None:
        transport = getattr(conn, "transport", None)
        if transport is not None:
            addr = transport.get_extra_info("peername")
    if isinstance(addr, str):
        host, _, port = addr.rpartition(":")
        addr = (host, int(port or 0))
    if not addr:
        return ("127.0.0.1", 0)
    host, port = str(addr[0]), int(addr[1])
    if host.startswith("::ffff:"):
        host = host[7:]
    if ":" in host:  # a real IPv6 peer: stored records must carry IPv4 for C++/ali-ons readers
        host = "127.0.0.1" if host == "::1" else "0.0.0.0"
    return host, port
