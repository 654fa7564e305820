"""One remoting connection: frames in, commands out, opaque correlation, backpressure.

Requests coming in are handed to `on_request(conn, cmd)`; responses resolve the future of the
`invoke` that sent the request. Reading pauses when the peer does not read what we write
(transport pause_writing) and when too many of its requests are in flight, so a client that
pipelines without reading cannot grow the broker's memory.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import structlog

from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.frame import MAX_FRAME, FrameDecoder, encode_frame
from remoting.errors import ConnectionClosedError, RemotingTimeoutError

log = structlog.get_logger(__name__)

_opaque = itertools.count(1)


def next_opaque() -> int:
    return next(_opaque) & 0x7FFFFFFF


def _fold_addr(peer) -> tuple[str, int]:
    if not peer:
        return ("0.0.0.0", 0)
    host, port = peer[0], peer[1]
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return (host, port)


class Connection(asyncio.Protocol):
    def __init__(self, on_request: Callable[[Connection, RemotingCommand], None] | None = None,
                 on_close: Callable[[Connection], None] | None = None, max_frame: int = MAX_FRAME,
                 max_inflight: int = 1024) -> None:
        self.on_request = on_request
        self.on_close = on_close
        self.decoder = FrameDecoder(max_frame)
        self.max_inflight = max_inflight
        self.inflight = 0
        self.transport: asyncio.Transport | None = None
        self.remote_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.local_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.pending: dict[int, asyncio.Future] = {}
        self.attrs: dict = {}
        self.last_activity = time.monotonic()
        self.closed: asyncio.Future = asyncio.get_event_loop().create_future()
        self._write_paused = False
        self._read_paused = False
        self._is_closing = False

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.remote_addr = _fold_addr(transport.get_extra_info("peername"))
        self.local_addr = _fold_addr(transport.get_extra_info("sockname"))

    @property
    def peer(self) -> str:
        return f"{self.remote_addr[0]}:{self.remote_addr[1]}"

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        try:
            cmds = self.decoder.feed(data)
        except CodecError as e:
            log.warning("remoting.bad_frame", peer=self.peer, error=str(e))
            self.close()
            return
        for cmd in cmds:
            if cmd.is_response:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            elif self.on_request is not None:
                self.on_request(self, cmd)

    def connection_lost(self, exc) -> None:
        self._is_closing = True
        err = ConnectionClosedError(f"connection to {self.peer} closed")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        if self.on_close is not None:
            try:
                self.on_close(self)
            except Exception:
                log.exception("remoting.on_close_failed", peer=self.peer)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # ------------------------------------------------------------------ flow control
    def _update_reading(self) -> None:
        if self.transport is None or self._is_closing:
            return
        want_pause = self._write_paused or self.inflight >= self.max_inflight
        if want_pause and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    def request_started(self) -> None:
        self.inflight += 1
        if self.inflight >= self.max_inflight:
            self._update_reading()

    def request_finished(self) -> None:
        self.inflight -= 1
        if self._read_paused:
            self._update_reading()

    # ------------------------------------------------------------------ sending
    @property
    def is_closing(self) -> bool:
        return self._is_closing or self.transport is None or self.transport.is_closing()

    def write_command(self, cmd: RemotingCommand) -> None:
        if self.is_closing:
            return
        self.last_activity = time.monotonic()
        self.transport.writelines(encode_frame(cmd))

    send_response = write_command

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        if self.is_closing:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        cmd.opaque = next_opaque()
        cmd.flag &= ~0x3
        fut = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        self.write_command(cmd)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RemotingTimeoutError(f"no response from {self.peer} in {timeout}s (code {cmd.code})") from None
        finally:
            self.pending.pop(cmd.opaque, None)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag = (cmd.flag & ~0x1) | 0x2
        self.write_command(cmd)

    def close(self) -> None:
        if self.transport is not None and not self._is_closing:
            self._is_closing = True
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self._is_closing = True
            self.transport.abort()
