"""Remoting tests run on uvloop (the production loop) with real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from remoting.server import RemotingServer


def pytest_asyncio_loop_factories(config, item):
    """Every async test in this directory runs on a uvloop loop (the production loop)."""
    return {"uvloop": uvloop.new_event_loop}


class Started:
    """A started RemotingServer plus the connections it accepted, in order."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.accepted: asyncio.Queue = asyncio.Queue()
        self.lost: asyncio.Queue = asyncio.Queue()
        server.on_connect = self.accepted.put_nowait
        server.on_close = self.lost.put_nowait

    @property
    def port(self) -> int:
        return self.server.ports[0]

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def next_conn(self, timeout: float = 5.0):
        return await asyncio.wait_for(self.accepted.get(), timeout)


@pytest.fixture
async def make_server():
    made: list[RemotingServer] = []

    async def make(processors: dict | None = None, ports=(0,), **kw) -> Started:
        srv = RemotingServer("127.0.0.1", ports, processors, **kw)
        started = Started(srv)
        await srv.start()
        made.append(srv)
        return started

    yield make
    for srv in made:
        await srv.close(drain_timeout=0.5)

