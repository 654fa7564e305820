"""Client side: one connection per "ip:port", dialled lazily, reused, re-dialled after a failure.

Server-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...) go to
processors registered with `register(code, processor)`, dispatched by the same rules as the
server (`remoting.dispatch`).
"""

from __future__ import annotations

import asyncio
import ssl as _ssl

import structlog

from codec.acl import SessionCredentials
from codec.command import RemotingCommand
from codec.frame import MAX_FRAME
from remoting.connection import Connection
from remoting.dispatch import BatchProcessor, Dispatcher, Processor
from remoting.errors import ConnectionClosedError

log = structlog.get_logger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    """"ip:port" (or "[v6]:port") -> (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bad remoting address {addr!r}, expected ip:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(self, ssl: _ssl.SSLContext | None = None, connect_timeout: float = 3.0,
                 max_frame: int = MAX_FRAME, credentials: SessionCredentials | None = None) -> None:
        self.ssl = ssl
        # RocketMQ's AclClientRPCHook: with credentials, every request is signed (AccessKey, Signature) as it goes
        self.credentials = credentials
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.dispatcher = Dispatcher()
        self._conns: dict[str, Connection] = {}
        self._dialing: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False

    def register(self, code: int, processor: Processor, batch: BatchProcessor | None = None) -> None:
        self.dispatcher.register(code, processor, batch)

    @property
    def processors(self) -> dict[int, tuple[Processor, bool]]:
        return self.dispatcher.processors

    async def connection(self, addr: str) -> Connection:
        """The live connection to `addr`, dialling it if there is none (concurrent callers share one dial)."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.is_closing:
            return conn
        if self._closed:
            raise ConnectionClosedError("remoting client is closed")
        fut = self._dialing.get(addr)
        if fut is None:
            fut = self._dialing[addr] = asyncio.ensure_future(self._dial(addr))
            fut.add_done_callback(lambda f: self._dial_done(addr, f))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if fut.cancelled() and not (task is not None and task.cancelling()):
                # the dial was cancelled by close(), not this caller
                raise ConnectionClosedError(f"connect to {addr} abandoned: client closed") from None
            raise

    def _dial_done(self, addr: str, fut: asyncio.Future[Connection]) -> None:
        self._dialing.pop(addr, None)
        if not fut.cancelled():
            # a failed dial whose callers all gave up (cancelled while shielded) would otherwise be logged at
            # garbage collection as "Task exception was never retrieved"; each caller still sees the error
            fut.exception()

    async def _dial(self, addr: str) -> Connection:
        loop = asyncio.get_running_loop()
        host, port = split_addr(addr)

        def factory() -> Connection:
            # a client has no in-flight cap of its own: it only processes what the server asks
            return Connection(self.dispatcher, self._connection_lost, self.max_frame, max_inflight=1 << 30)

        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(factory, host, port, ssl=self.ssl,
                                       server_hostname=host if self.ssl else None),
                self.connect_timeout)
        except TimeoutError:
            raise ConnectionClosedError(f"connect to {addr} timed out after {self.connect_timeout}s") from None
        except OSError as e:
            raise ConnectionClosedError(f"connect to {addr} failed: {e}") from e
        conn.attrs["addr"] = addr
        if self._closed:
            conn.abort()
            raise ConnectionClosedError("remoting client is closed")
        self._conns[addr] = conn
        log.debug("remoting.connected", addr=addr)
        return conn

    def _connection_lost(self, conn: Connection) -> None:
        addr = conn.attrs.get("addr")
        if addr is not None and self._conns.get(addr) is conn:
            del self._conns[addr]

    def sign(self, cmd: RemotingCommand) -> None:
        """With credentials, sign `cmd` as RocketMQ's AclClientRPCHook does; every request this client writes
        passes here (also those the proxy's send coalescer writes on this client's connections)."""
        if self.credentials is not None:
            self.credentials.sign(cmd.ext_fields, cmd.body)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        self.sign(cmd)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        self.sign(cmd)
        conn.invoke_oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every connection (pending invokes fail with ConnectionClosedError) and stop dialling."""
        self._closed = True
        for fut in list(self._dialing.values()):
            fut.cancel()
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        self.dispatcher.cancel_all()
