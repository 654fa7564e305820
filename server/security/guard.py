"""The per-connection guard in front of every remoting Connection the broker accepts.

It wraps the server's protocol factory (RemotingServer.protocol_factory_wrapper) and adds what a
single Connection cannot see:
  - connections per remote IP (a flood from one host cannot take every slot of maxConnections);
  - one budget for all bytes held in partial frames across connections (N peers each sending the
    first 15 MiB of a 16 MiB frame cannot add up): a connection that grows its partial frame while
    the budget is spent is closed;
  - TLS (permissive / enforcing) through server.security.tls.TlsTransport.
It stays the raw transport's protocol and forwards every callback; its cost is one call per chunk.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import structlog

from server.security.tls import TLS_HANDSHAKE_RECORD, TlsTransport

if TYPE_CHECKING:
    from remoting.connection import Connection

log = structlog.get_logger(__name__)

_SNIFF, _PLAIN, _TLS, _REFUSED = range(4)


class RateLimitedLog:
    """At most `per_s` log lines per second per event; the rest are counted and summarised."""

    def __init__(self, per_s: int = 5) -> None:
        self.per_s = per_s
        self._window = 0
        self._n: dict[str, int] = {}
        self.suppressed: dict[str, int] = {}

    def warning(self, event: str, **kw: Any) -> None:
        now = int(time.monotonic())
        if now != self._window:
            self._window = now
            self._n.clear()
            for ev, n in self.suppressed.items():
                if n:
                    log.warning("guard.suppressed_logs", suppressed_event=ev, count=n)
            self.suppressed.clear()
        n = self._n.get(event, 0)
        self._n[event] = n + 1
        if n < self.per_s:
            log.warning(event, **kw)
        else:
            self.suppressed[event] = self.suppressed.get(event, 0) + 1


class GuardState:
    """Shared by all guards of one server: per-IP counts, frame budget, TLS settings, counters."""

    def __init__(self, max_per_ip: int = 0, frame_budget: int = 0, tls_mode: str = "disabled",
                 tls_context: ssl.SSLContext | None = None) -> None:
        self.max_per_ip = max_per_ip
        self.frame_budget = frame_budget
        self.tls_mode = tls_mode if tls_context is not None else "disabled"
        self.tls_context = tls_context
        self.per_ip: dict[str, int] = {}
        self.buffered = 0
        self.refused_per_ip = 0
        self.closed_over_budget = 0
        self.refused_plain = 0
        self.log = RateLimitedLog()

    def wrap_factory(self, factory: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.BaseProtocol]:
        # the remoting server's factory makes Connections (the guard reads their peer, transport and decoder)
        return lambda: GuardProtocol(cast("Connection", factory()), self)


def _host(peer: Any) -> str:
    """The peer's IP (get_extra_info("peername"): an address tuple, or None), IPv4-mapped folded."""
    if not peer:
        return "0.0.0.0"
    host = str(peer[0])
    return host[7:] if host.startswith("::ffff:") and "." in host else host


class GuardProtocol(asyncio.Protocol):
    __slots__ = ("inner", "state", "raw", "host", "mode", "tls", "_buffered", "_made")

    def __init__(self, inner: Connection, state: GuardState) -> None:
        self.inner = inner
        self.state = state
        self.raw: asyncio.Transport  # connection_made
        self.host = "0.0.0.0"
        self.mode = _SNIFF if state.tls_mode != "disabled" else _PLAIN
        self.tls: TlsTransport | None = None
        self._buffered = 0
        self._made = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        st = self.state
        self.raw = cast(asyncio.Transport, transport)
        self.host = _host(transport.get_extra_info("peername"))
        if st.max_per_ip and st.per_ip.get(self.host, 0) >= st.max_per_ip:
            st.refused_per_ip += 1
            st.log.warning("guard.too_many_connections_from_ip", host=self.host, limit=st.max_per_ip)
            self.mode = _REFUSED
            self.raw.abort()
            return
        st.per_ip[self.host] = st.per_ip.get(self.host, 0) + 1
        self._made = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        mode = self.mode
        if mode == _PLAIN:
            self.inner.data_received(data)
        elif mode == _TLS and self.tls is not None:
            self.tls.feed(data)
        elif mode == _SNIFF:
            if not data:
                return
            ctx = self.state.tls_context
            if data[0] == TLS_HANDSHAKE_RECORD and ctx is not None:  # sniffing runs only with a context
                self.mode = _TLS
                tls = self.tls = TlsTransport(self.raw, ctx, self.inner, self.inner.peer)
                self.inner.transport = tls
                tls.feed(data)
            elif self.state.tls_mode == "enforcing":
                self.state.refused_plain += 1
                self.state.log.warning("tls.plain_connection_refused", peer=self.inner.peer, mode="enforcing")
                self.mode = _REFUSED
                self.raw.abort()
                return
            else:
                self.mode = _PLAIN
                self.inner.data_received(data)
        else:
            return
        self._account()

    def _account(self) -> None:
        st = self.state
        if not st.frame_budget:
            return
        now = self.inner.decoder.buffered()
        delta = now - self._buffered
        if not delta:
            return
        self._buffered = now
        st.buffered += delta
        if delta > 0 and st.buffered > st.frame_budget:
            st.closed_over_budget += 1
            st.log.warning("guard.frame_budget_exceeded", peer=self.inner.peer, partial_bytes=now,
                           total_partial_bytes=st.buffered, budget=st.frame_budget)
            self.mode = _REFUSED
            self.raw.abort()

    def _release(self) -> None:
        st = self.state
        st.buffered -= self._buffered
        self._buffered = 0
        if self._made:
            self._made = False
            n = st.per_ip.get(self.host, 1) - 1
            if n <= 0:
                st.per_ip.pop(self.host, None)
            else:
                st.per_ip[self.host] = n

    def connection_lost(self, exc: Exception | None) -> None:
        made = self._made
        self._release()
        if made:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def eof_received(self) -> bool | None:
        return None  # close the transport
