"""`GET /metrics` in Prometheus text format on `--metrics-port` (loopback by default).

A deliberately tiny HTTP/1.1 responder on asyncio streams: one route, no keep-alive, bounded
request size, so it adds no dependency and cannot be used to hold broker memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from server.observability.registry import Registry, collect_sliced, render_prometheus_sliced

log = structlog.get_logger(__name__)

MAX_REQUEST_HEAD = 8192


class MetricsHttpServer:
    def __init__(self, registry: Registry, host: str = "127.0.0.1", port: int = 0,
                 render: Callable[[], Awaitable[str]] | None = None) -> None:
        """`await render()` makes the page (the broker's RocketMQ-named families, prometheus.page_sliced);
        default: the registry as is. Both collect and render in slices with yields to the loop between."""
        self.registry = registry
        self.render = render
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_REQUEST_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics.listening", host=self.host, port=self.port)
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            parts = head.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
            if method == b"GET" and path.split(b"?")[0] in (b"/metrics", b"/"):
                page = await self.render() if self.render is not None else \
                    await render_prometheus_sliced(await collect_sliced(self.registry))
                body = page.encode()
                status, ctype = b"200 OK", b"text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
            writer.writelines([  # the body is not copied into one buffer with the head (1.5 MB at 10,000 groups)
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n", body])
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
