"""The remoting server: listeners on several ports, one dispatch table (request code -> processor).

Processors and the response rules are described in `remoting.dispatch`: a plain processor runs
inline, a coroutine processor as its own task; unknown code -> 3, exception -> 1, oneway -> never
answered. To answer later (long-polling pull) a processor returns None, keeps `conn` and `cmd`,
and calls `conn.send_response(cmd.response(...))` when the answer is ready (a no-op if the
connection closed meanwhile).

Hooks (attributes, set before `start()`):
- `on_connect(conn)` / `on_close(conn)`: accepted / lost connections (client manager);
- `before_request(conn, cmd) -> RemotingCommand | None`: runs before every processor; a returned
  command is the response and the processor is skipped (ACL);
- `protocol_factory_wrapper(factory) -> factory`: wraps the protocol factory (TLS permissive mode).

Idle close: a connection without reads or writes for `idle_timeout` s is closed. Each connection
has one `loop.call_at` timer; when it fires it looks at `last_activity` and re-arms for the time
remaining, so activity costs one float store, not a timer reschedule.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
import time
from collections.abc import Callable, Mapping, Sequence

import structlog

from codec.command import RemotingCommand
from codec.frame import MAX_FRAME, MAX_HEADER
from remoting.connection import Connection
from remoting.dispatch import BatchProcessor, BeforeRequest, Dispatcher, Processor
from remoting.turn import CLOSES_PER_TURN, DECODE_BYTES_PER_TURN, TurnBudget, TurnQueue

log = structlog.get_logger(__name__)


class RemotingServer:
    def __init__(self, host: str = "127.0.0.1", ports: Sequence[int] = (0,),
                 processors: Mapping[int, Processor] | None = None, *, idle_timeout: float = 120.0,
                 max_connections: int = 10_000, max_inflight_per_connection: int = 1024,
                 max_frame: int = MAX_FRAME, ssl: _ssl.SSLContext | None = None, backlog: int = 1024,
                 max_header: int = MAX_HEADER, decode_bytes_per_turn: int = DECODE_BYTES_PER_TURN,
                 closes_per_turn: int = CLOSES_PER_TURN) -> None:
        self.host = host
        self.listen_ports = list(ports)
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_inflight = max_inflight_per_connection
        self.max_frame = max_frame
        self.max_header = max_header  # a longer header closes the connection before it is parsed
        self.ssl = ssl
        self.backlog = backlog
        self.dispatcher = Dispatcher()
        for code, fn in (processors or {}).items():
            self.dispatcher.register(code, fn)
        self.connections: set[Connection] = set()
        # the accepted connections of each client address, oldest first (the fair share at the limit)
        self.by_host: dict[str, dict[Connection, None]] = {}
        self.evicted = 0  # idle connections closed to let a client with fewer connections in
        # work per loop turn across every connection: header bytes decoded, closed connections cleaned up
        self.decode_budget = TurnBudget(decode_bytes_per_turn) if decode_bytes_per_turn > 0 else None
        self.close_queue = TurnQueue(closes_per_turn)
        self.on_connect: Callable[[Connection], None] | None = None
        self.response_observer: Callable[[Connection, RemotingCommand], None] | None = None  # set on each connection
        self.on_close: Callable[[Connection], object] | None = None
        # wraps each connection's protocol factory (server.security: TLS sniffing, per-IP limits)
        self.protocol_factory_wrapper: Callable[[Callable[[], asyncio.BaseProtocol]],
                                                Callable[[], asyncio.BaseProtocol]] | None = None
        self._servers: list[asyncio.Server] = []
        self.ports: list[int] = []  # bound ports, in the order given (ephemeral 0 resolved)

    # ------------------------------------------------------------------ registry
    def register(self, code: int, processor: Processor, batch: BatchProcessor | None = None) -> None:
        self.dispatcher.register(code, processor, batch)

    @property
    def processors(self) -> dict[int, tuple[Processor, bool]]:
        return self.dispatcher.processors

    @property
    def before_request(self) -> BeforeRequest | None:
        return self.dispatcher.before_request

    @before_request.setter
    def before_request(self, fn: BeforeRequest | None) -> None:
        self.dispatcher.before_request = fn

    @property
    def inflight(self) -> int:
        return len(self.dispatcher.tasks)

    # ------------------------------------------------------------------ lifecycle
    def _factory(self) -> Connection:
        return Connection(self.dispatcher, self._connection_lost, self.max_frame, self.max_inflight,
                          on_made=self._connection_made, max_header=self.max_header,
                          decode_budget=self.decode_budget)

    def _connection_made(self, conn: Connection) -> None:
        host = conn.remote_addr[0]
        if len(self.connections) >= self.max_connections and not self._evict_for(host):
            log.warning("remoting.too_many_connections", peer=conn.peer, limit=self.max_connections)
            conn.abort()
            return
        self.connections.add(conn)
        self.by_host.setdefault(host, {})[conn] = None
        conn.response_observer = self.response_observer
        self._arm_idle(conn, self.idle_timeout)
        if self.on_connect is not None:
            try:
                self.on_connect(conn)
            except Exception:
                log.exception("remoting.on_connect_failed", peer=conn.peer)

    def _evict_for(self, host: str) -> bool:
        """At the connection limit: one client cannot keep the others out. When the address holding the
        most connections holds at least two more than `host`, its connection idle the longest (nothing
        in flight) is closed to make room; True if one was. A client spread over many addresses each
        at the same count as the newcomer's is not evicted for it (no churn)."""
        mine = len(self.by_host.get(host, ()))
        _heavy, conns = max(self.by_host.items(), key=lambda kv: len(kv[1]), default=("", {}))
        if len(conns) < mine + 2:
            return False
        victim = min((c for c in conns if not c.inflight and not c.is_closing), key=lambda c: c.last_activity,
                     default=None)
        if victim is None:
            return False
        log.warning("remoting.connection_evicted", peer=victim.peer, host_connections=len(conns),
                    for_host=host, host_connections_of_newcomer=mine, limit=self.max_connections)
        self.evicted += 1
        self._forget(victim)
        victim.attrs["_evicted"] = True  # its on_close still runs when it is lost
        victim.abort()
        return True

    def _forget(self, conn: Connection) -> bool:
        """Drop `conn` from the counts; True if it was counted."""
        if conn not in self.connections:
            return False
        self.connections.discard(conn)
        host = conn.remote_addr[0]
        conns = self.by_host.get(host)
        if conns is not None:
            conns.pop(conn, None)
            if not conns:
                del self.by_host[host]
        return True

    async def start(self, host: str | None = None, ports: Sequence[int] | None = None) -> list[int]:
        """Listen on every port (0 = ephemeral); returns the bound ports."""
        if host is not None:
            self.host = host
        if ports is not None:
            self.listen_ports = list(ports)
        loop = asyncio.get_running_loop()
        factory = self._factory if self.protocol_factory_wrapper is None else self.protocol_factory_wrapper(self._factory)
        try:
            for port in self.listen_ports:
                srv = await loop.create_server(factory, self.host, port, ssl=self.ssl, backlog=self.backlog,
                                               reuse_address=True)
                self._servers.append(srv)
                self.ports.append(srv.sockets[0].getsockname()[1])
        except BaseException:
            self.stop_accepting()
            raise
        log.info("remoting.listening", host=self.host, ports=self.ports, tls=self.ssl is not None)
        return self.ports

    def stop_accepting(self) -> None:
        for srv in self._servers:
            srv.close()

    async def drain(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` s for processor tasks in flight; True if all finished."""
        return await self.dispatcher.drain(timeout)

    async def close(self, drain_timeout: float = 5.0) -> None:
        """Graceful stop: stop accepting; stop reading every connection (a request not yet handed to a
        processor is dropped, never stored); let the requests in flight finish (bounded by
        `drain_timeout`), each answered: a send that was stored, SYNC_FLUSH included, gets its
        response; then close every connection once its answers are written (bounded as well)."""
        self.stop_accepting()
        for conn in list(self.connections):
            conn.quiesce()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        if not await self.drain(drain_timeout):
            log.warning("remoting.drain_timeout", left=len(self.dispatcher.tasks))
            self.dispatcher.cancel_all()
        conns = list(self.connections)
        for conn in conns:
            conn.close()
        if conns:
            # close() flushes first; a peer that never reads would hold us forever, so bound it
            # (by what is left of the drain time, at least 1 s: answers to a pipelining peer go out)
            _, slow = await asyncio.wait([c.closed for c in conns], timeout=max(1.0, deadline - loop.time()))
            for conn in conns:
                if not conn.closed.done():
                    log.warning("remoting.close_unflushed", peer=conn.peer)
                    conn.abort()
            if slow:
                await asyncio.wait([c.closed for c in conns], timeout=1.0)
        self.close_queue.run_all()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()

    # ------------------------------------------------------------------ idle close
    def _arm_idle(self, conn: Connection, delay: float) -> None:
        if self.idle_timeout <= 0:
            return
        loop = conn.loop
        conn.attrs["_idle_handle"] = loop.call_at(loop.time() + delay, self._idle_check, conn)

    def _idle_check(self, conn: Connection) -> None:
        if conn.is_closing:
            return
        idle = time.monotonic() - conn.last_activity
        remaining = self.idle_timeout - idle
        if remaining > 0:
            self._arm_idle(conn, remaining)
        elif conn.inflight:
            # a held request is still being processed: not idle from our side, look again later
            self._arm_idle(conn, self.idle_timeout)
        else:
            log.info("remoting.idle_close", peer=conn.peer, idle_s=round(idle, 3))
            if conn.transport is not None and conn.transport.get_write_buffer_size():
                conn.abort()  # a peer that stopped reading would keep a graceful close pending forever
            else:
                conn.close()

    def _connection_lost(self, conn: Connection) -> None:
        # a mass disconnect is cleaned up CLOSES_PER_TURN connections per loop turn, not all in one:
        # the counts, the idle timer and on_close (the client manager) run from the close queue
        self.close_queue.add(self._clean_up, conn)

    def _clean_up(self, conn: Connection) -> None:
        h = conn.attrs.pop("_idle_handle", None)
        if h is not None:
            h.cancel()
        counted = self._forget(conn)
        if self.on_close is not None and (counted or conn.attrs.pop("_evicted", False)):
            self.on_close(conn)

    # ------------------------------------------------------------------ helpers
    async def invoke(self, conn: Connection, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Server-initiated request over an accepted connection."""
        return await conn.invoke(cmd, timeout)
