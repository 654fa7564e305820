"""The remoting server: listeners on several ports, one dispatch table (request code -> processor).

A processor is `fn(conn, cmd) -> RemotingCommand | None`, plain (run inline: the fast path) or a
coroutine function (run as its own task, so a held pull never blocks the connection). A processor
that answers later returns None and calls `conn.send_response(cmd.response(...))` itself.
Unknown codes get 3, exceptions get 1 with the error text; oneway requests never get a response.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl as _ssl
import time
from collections.abc import Callable

import structlog

from codec.codes import ResponseCode
from codec.command import RemotingCommand
from codec.frame import MAX_FRAME
from remoting.connection import Connection

log = structlog.get_logger(__name__)

Processor = Callable[[Connection, RemotingCommand], object]


class RemotingServer:
    def __init__(self, idle_timeout: float = 120.0, max_connections: int = 10_000,
                 max_inflight_per_connection: int = 1024, max_frame: int = MAX_FRAME,
                 ssl: _ssl.SSLContext | None = None) -> None:
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_inflight = max_inflight_per_connection
        self.max_frame = max_frame
        self.ssl = ssl
        self.processors: dict[int, tuple[Processor, bool]] = {}
        self.connections: set[Connection] = set()
        self.on_connect: Callable[[Connection], None] | None = None
        self.on_close: Callable[[Connection], None] | None = None
        # before_request(conn, cmd) -> RemotingCommand | None: an error response short-circuits (ACL).
        self.before_request: Callable[[Connection, RemotingCommand], RemotingCommand | None] | None = None
        self.protocol_factory_wrapper: Callable | None = None  # TLS permissive mode wraps the factory
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self.ports: list[int] = []

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = (processor, inspect.iscoroutinefunction(processor)
                                      or inspect.iscoroutinefunction(type(processor).__call__))

    # ------------------------------------------------------------------ lifecycle
    def _make_connection(self) -> Connection:
        return Connection(self._on_request, self._on_connection_lost, self.max_frame, self.max_inflight)

    def _factory(self) -> asyncio.Protocol:
        conn = self._make_connection()
        orig_made = conn.connection_made

        def made(transport, _orig=orig_made, _conn=conn):
            _orig(transport)
            if len(self.connections) >= self.max_connections:
                log.warning("remoting.too_many_connections", peer=_conn.peer, limit=self.max_connections)
                _conn.abort()
                return
            self.connections.add(_conn)
            self._arm_idle(_conn)
            if self.on_connect is not None:
                self.on_connect(_conn)

        conn.connection_made = made
        return conn

    async def start(self, host: str = "127.0.0.1", ports: list[int] | tuple[int, ...] = (0,)) -> list[int]:
        loop = asyncio.get_running_loop()
        factory = self._factory if self.protocol_factory_wrapper is None else self.protocol_factory_wrapper(self._factory)
        for port in ports:
            srv = await loop.create_server(factory, host, port, ssl=self.ssl, backlog=1024, reuse_address=True)
            self._servers.append(srv)
            self.ports.append(srv.sockets[0].getsockname()[1])
        log.info("remoting.listening", host=host, ports=self.ports)
        return self.ports

    def stop_accepting(self) -> None:
        for srv in self._servers:
            srv.close()

    async def drain(self, timeout: float = 5.0) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def close(self, drain_timeout: float = 5.0) -> None:
        self.stop_accepting()
        await self.drain(drain_timeout)
        for conn in list(self.connections):
            conn.close()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()

    # ------------------------------------------------------------------ idle close
    def _arm_idle(self, conn: Connection) -> None:
        if self.idle_timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        due = conn.last_activity + self.idle_timeout
        conn.attrs["_idle_handle"] = loop.call_at(loop.time() + max(0.0, due - time.monotonic()), self._idle_check, conn)

    def _idle_check(self, conn: Connection) -> None:
        if conn.is_closing:
            return
        idle = time.monotonic() - conn.last_activity
        if idle >= self.idle_timeout and conn.inflight == 0:
            log.info("remoting.idle_close", peer=conn.peer, idle_s=round(idle, 1))
            conn.close()
        else:
            self._arm_idle(conn)

    def _on_connection_lost(self, conn: Connection) -> None:
        h = conn.attrs.pop("_idle_handle", None)
        if h is not None:
            h.cancel()
        if conn in self.connections:
            self.connections.discard(conn)
            if self.on_close is not None:
                self.on_close(conn)

    # ------------------------------------------------------------------ dispatch
    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        if self.before_request is not None:
            try:
                denied = self.before_request(conn, cmd)
            except Exception as e:
                log.exception("remoting.before_request_failed", code=cmd.code)
                denied = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
            if denied is not None:
                if not cmd.is_oneway:
                    conn.send_response(denied)
                return
        entry = self.processors.get(cmd.code)
        if entry is None:
            if not cmd.is_oneway:
                conn.send_response(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                f" request type {cmd.code} not supported"))
            return
        fn, is_async = entry
        if not is_async:
            try:
                resp = fn(conn, cmd)
            except Exception as e:
                self._fail(conn, cmd, e)
                return
            if inspect.isawaitable(resp):
                self._spawn(conn, cmd, resp)
            elif resp is not None and not cmd.is_oneway:
                conn.send_response(resp)
            return
        try:
            coro = fn(conn, cmd)
        except Exception as e:
            self._fail(conn, cmd, e)
            return
        self._spawn(conn, cmd, coro)

    def _spawn(self, conn: Connection, cmd: RemotingCommand, awaitable) -> None:
        conn.request_started()
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)

        def done(t: asyncio.Task, conn=conn, cmd=cmd) -> None:
            self._tasks.discard(t)
            conn.request_finished()
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                self._fail(conn, cmd, exc)
                return
            resp = t.result()
            if resp is not None and not cmd.is_oneway:
                conn.send_response(resp)

        task.add_done_callback(done)

    @staticmethod
    def _fail(conn: Connection, cmd: RemotingCommand, e: BaseException) -> None:
        log.warning("remoting.processor_failed", code=cmd.code, peer=conn.peer, error=f"{type(e).__name__}: {e}")
        if not cmd.is_oneway:
            conn.send_response(cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}"))
