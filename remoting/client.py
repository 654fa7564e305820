"""Client side: one connection per "ip:port", created lazily, reused, re-dialled after a failure.
Server-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED, ...) go to registered processors."""

from __future__ import annotations

import asyncio
import inspect
import ssl as _ssl

import structlog

from codec.codes import ResponseCode
from codec.command import RemotingCommand
from remoting.connection import Connection

log = structlog.get_logger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(self, ssl: _ssl.SSLContext | None = None, connect_timeout: float = 3.0) -> None:
        self.ssl = ssl
        self.connect_timeout = connect_timeout
        self.processors: dict[int, object] = {}
        self._conns: dict[str, Connection] = {}
        self._dialing: dict[str, asyncio.Future] = {}

    def register(self, code: int, processor) -> None:
        self.processors[int(code)] = processor

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        fn = self.processors.get(cmd.code)
        if fn is None:
            if not cmd.is_oneway:
                conn.send_response(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                f" request type {cmd.code} not supported"))
            return
        try:
            resp = fn(conn, cmd)
        except Exception as e:
            log.warning("remoting.client_processor_failed", code=cmd.code, error=str(e))
            return
        if inspect.isawaitable(resp):
            async def finish(aw=resp):
                r = await aw
                if r is not None and not cmd.is_oneway:
                    conn.send_response(r)
            asyncio.ensure_future(finish())
        elif resp is not None and not cmd.is_oneway:
            conn.send_response(resp)

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.is_closing:
            return conn
        fut = self._dialing.get(addr)
        if fut is not None:
            return await asyncio.shield(fut)
        loop = asyncio.get_running_loop()
        fut = self._dialing[addr] = loop.create_future()
        try:
            host, port = split_addr(addr)
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self._on_request, None, max_inflight=1 << 30), host, port,
                                       ssl=self.ssl, server_hostname=host if self.ssl else None),
                self.connect_timeout)
            self._conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e if isinstance(e, Exception) else ConnectionError(str(e)))
            fut.exception()  # mark retrieved
            raise
        finally:
            self._dialing.pop(addr, None)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        conn.invoke_oneway(cmd)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
