"""One remoting connection: frames in, commands out, opaque correlation, backpressure.

Requests coming in go to `on_request(conn, cmd)` (a `RequestHandler`, in practice a `remoting.dispatch.Dispatcher`); responses
resolve the future of the `invoke` that sent the request (opaque -> future, per connection).

Backpressure: reading pauses while
- the transport's write buffer is above its high-water mark (`pause_writing`), i.e. the peer does
  not read what we send it, and
- `max_inflight` requests of this peer are being processed (processor tasks),
so a client that pipelines requests without reading cannot grow our memory: requests decoded but
not yet handled wait in a backlog (at most one read chunk), and the write buffer overshoots the
high-water mark by at most one response.

Work per loop turn is bounded, not only sizes: with a `decode_budget` (remoting.turn.TurnBudget, one
per server) all connections together decode at most that many header bytes per turn; a read holding
more whole frames keeps the rest in its decoder, reading paused, for a later turn.

Fairness: one connection's requests are handled at most `turn_budget` per loop turn; the rest of a
large read waits in the backlog (reading paused) and is worked through in later turns, so a peer
that sends a burst of a thousand pipelined requests delays everyone else by one share of it.

A malformed or oversized frame is logged once (peer and reason) and closes this connection only.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import structlog

from codec.codes import RPC_ONEWAY, RPC_TYPE_RESPONSE
from codec.command import RemotingCommand
from codec.errors import CodecError
from codec.frame import MAX_FRAME, NO_HEADER_LIMIT, FrameDecoder, encode_frame
from remoting.errors import ConnectionClosedError, RemotingTimeoutError
from remoting.turn import TurnBudget

log = structlog.get_logger(__name__)

_opaque = itertools.count(1)
_monotonic = time.monotonic
_FRAME_LEN = struct.Struct(">i")  # the length prefix that starts encode_frame's first piece
TURN_BUDGET = 128  # requests of one connection handled per loop turn (~1 ms of offset commits)
_OUT_FLUSH_BYTES = 65536  # queued output past this is written at once (the default high-water mark)


def next_opaque() -> int:
    """Process-wide request id, kept in Java's positive int range."""
    return next(_opaque) & 0x7FFFFFFF


def fold_addr(peer: tuple[Any, ...] | None) -> tuple[str, int]:
    """(ip, port) of a socket address; IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes plain IPv4."""
    if not peer:
        return ("0.0.0.0", 0)
    host, port = str(peer[0]), int(peer[1])
    if host.lower().startswith("::ffff:") and "." in host:
        host = host[7:]
    return (host, port)


# a batch processor as a connection sees it: handed whole to `RequestHandler.dispatch_run`
RunProcessor = Callable[["Connection", list[RemotingCommand]], list[Any]]


class RequestHandler(Protocol):
    """What a connection hands its requests to (`remoting.dispatch.Dispatcher` is the one we have):
    each request alone, or a run of consecutive requests of one batch processor's code together."""

    @property
    def batch_processors(self) -> Mapping[int, RunProcessor]: ...

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None: ...

    def dispatch_run(self, conn: Connection, batch: RunProcessor, cmds: list[RemotingCommand]) -> None: ...


class Connection(asyncio.Protocol):
    """`on_made(conn)` runs once the transport is attached; `on_close(conn)` once it is lost."""

    def __init__(self, on_request: RequestHandler | None = None,
                 on_close: Callable[[Connection], None] | None = None, max_frame: int = MAX_FRAME,
                 max_inflight: int = 1024, on_made: Callable[[Connection], None] | None = None,
                 max_header: int = NO_HEADER_LIMIT, turn_budget: int = TURN_BUDGET,
                 decode_budget: TurnBudget | None = None) -> None:
        self.on_request = on_request
        # header bytes this and the server's other connections decode per loop turn (None: unbounded);
        # past it the rest of a read waits, reading paused, for a later turn (`_decode_more`)
        self.decode_budget = decode_budget
        self._decode_waiting = False
        self._quiesced = False  # a server stopping: no request is read or handled any more (quiesce)
        # requests handled per loop turn at most: a read of a thousand pipelined requests is worked
        # through in shares, so one peer's burst delays the others by one share, not by all of it
        self.turn_budget = max(1, turn_budget)
        # code -> batch processor (a Dispatcher's `batch_processors`): runs of such requests in one
        # read are handed over together (`Dispatcher.dispatch_run`)
        self._batch_processors: Mapping[int, RunProcessor] = \
            on_request.batch_processors if on_request is not None else {}
        self.on_close = on_close
        self.on_made = on_made
        # response_observer(conn, cmd): sees every non-SUCCESS command written (the broker logs the
        # error codes clients get); None costs one attribute test per error response
        self.response_observer: Callable[[Connection, RemotingCommand], None] | None = None
        self.decoder = FrameDecoder(max_frame, max_header)
        self.max_inflight = max_inflight
        self.inflight = 0
        self.transport: asyncio.Transport | None = None
        self.remote_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.local_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.attrs: dict[str, Any] = {}  # for the server layer: client id, ACL state, idle timer handle, ...
        self.last_activity = _monotonic()
        self.loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = self.loop.create_future()  # result None once the connection is lost
        self._write_paused = False
        self._read_paused = False
        self._is_closing = False
        self._backlog: deque[RemotingCommand] = deque()  # decoded, not yet handled (flow control)
        self._drain_scheduled = False
        self._out: list[Any] | None = None  # frame pieces written this loop tick, flushed by one writelines
        self._out_bytes = 0

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop TCP, TLS, or server.security's sniffing wrapper)
        self.transport = cast(asyncio.Transport, transport)
        self.remote_addr = fold_addr(transport.get_extra_info("peername"))
        self.local_addr = fold_addr(transport.get_extra_info("sockname"))
        if self.on_made is not None:
            self.on_made(self)

    @property
    def peer(self) -> str:
        return f"{self.remote_addr[0]}:{self.remote_addr[1]}"

    def data_received(self, data: bytes) -> None:
        self.last_activity = _monotonic()
        if self._quiesced:
            return  # stopping: what was not read before is never handled (nor stored)
        budget = self.decode_budget
        try:
            if budget is None:
                cmds = self.decoder.feed(data)
            elif self._decode_waiting or budget.left <= 0:
                self.decoder.buffer(data)  # decoded in a later turn
                self._wait_decode()
                return
            else:
                cmds = self.decoder.feed(data, budget.left)
                budget.spend(self.decoder.cost)
                if self.decoder.more:
                    self._wait_decode()
        except CodecError as e:
            self._reject(str(e))
            return
        except Exception as e:  # a decoder bug must still only cost this one connection
            self._reject(f"{type(e).__name__}: {e}")
            return
        self._take(cmds)

    def _wait_decode(self) -> None:
        """Whole frames wait in the decoder for the next turn's budget: reading pauses until then."""
        if not self._decode_waiting and self.decode_budget is not None:
            self._decode_waiting = True
            self.decode_budget.later(self._decode_more)
            self._update_reading()

    def _decode_more(self) -> None:
        """The next share of what the decoder holds, in a later loop turn (TurnBudget.later)."""
        self._decode_waiting = False
        budget = self.decode_budget
        if self._is_closing or self._quiesced or budget is None:
            return
        if budget.left <= 0:
            self._wait_decode()
            return
        try:
            cmds = self.decoder.feed(b"", budget.left)
        except CodecError as e:
            self._reject(str(e))
            return
        budget.spend(self.decoder.cost)
        if self.decoder.more:
            self._wait_decode()
        if cmds:
            self._take(cmds)
        else:
            self._update_reading()

    def _take(self, cmds: list[RemotingCommand]) -> None:
        if self._backlog:
            self._backlog.extend(cmds)
            self._update_reading()
            return
        done = self._handle_cmds(cmds, self.turn_budget)
        if done < len(cmds) and not self._is_closing:
            # blocked (peer not reading, inflight cap) or this turn's budget spent: the rest waits
            # in the backlog and reading pauses; `_update_reading` drains it in later loop turns
            self._backlog.extend(cmds[done:])
            self._update_reading()
        elif self._read_paused:
            self._update_reading()

    def _handle_cmds(self, cmds: list[RemotingCommand], budget: int) -> int:
        """Handle `cmds` from the first (runs of one batch processor's requests together) until all
        are done, the connection is blocked or closing, or `budget` were handled; returns how many."""
        runs = self._batch_processors
        i, n = 0, min(len(cmds), budget)
        while i < n:
            if self._write_paused or self.inflight >= self.max_inflight or self._is_closing:
                # a pipelining peer overshoots the high-water mark by at most one response (or
                # one run of batched requests)
                break
            cmd = cmds[i]
            batch = runs.get(cmd.code) if runs and not cmd.flag & RPC_TYPE_RESPONSE else None
            if batch is not None:
                j = i + 1
                while j < n and runs.get(cmds[j].code) is batch and not cmds[j].flag & RPC_TYPE_RESPONSE:
                    j += 1
                if j - i > 1 and self.on_request is not None:
                    self.on_request.dispatch_run(self, batch, cmds[i:j])
                    i = j
                    continue
            self._handle(cmd)
            i += 1
        return i

    def _handle(self, cmd: RemotingCommand) -> None:
        if cmd.flag & RPC_TYPE_RESPONSE:
            fut = self.pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
        elif self.on_request is not None:
            self.on_request(self, cmd)

    def _drain_backlog(self) -> None:
        """One loop turn's share of the backlog (at most `turn_budget` requests); `_update_reading`
        schedules the next share, so other connections' reads are served in between."""
        self._drain_scheduled = False
        bl = self._backlog
        if self._is_closing or self._quiesced:
            bl.clear()
            return
        take = min(len(bl), self.turn_budget)
        chunk = [bl.popleft() for _ in range(take)]
        done = self._handle_cmds(chunk, take)
        if self._is_closing:
            bl.clear()
            return
        if done < take:  # blocked: resume_writing / request_finished come back through _update_reading
            bl.extendleft(reversed(chunk[done:]))
        self._update_reading()

    def _reject(self, reason: str) -> None:
        log.warning("remoting.bad_frame", peer=self.peer, reason=reason)
        self.abort()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._is_closing = True
        self._backlog.clear()
        if self.pending:
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
    def quiesce(self) -> None:
        """A graceful stop's first step: hand no further request to a processor (the backlog and what
        the decoder holds are dropped, and whatever arrives from now on: never handled, so never
        stored, never answered); requests already handed over finish and are answered before the
        connection closes (`RemotingServer.close`). Reading goes on, discarding, so the close is a FIN
        after the answers, not a reset that could drop them (unread data at close makes a reset)."""
        self._quiesced = True
        self._backlog.clear()
        self._decode_waiting = False
        if self.transport is not None and not self._is_closing and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    def _update_reading(self) -> None:
        if self.transport is None or self._is_closing or self._quiesced:
            return
        blocked = self._write_paused or self.inflight >= self.max_inflight
        if self._backlog and not blocked and not self._drain_scheduled:
            self._drain_scheduled = True
            self.loop.call_soon(self._drain_backlog)
        want_pause = blocked or bool(self._backlog) or self._decode_waiting
        if want_pause and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    @property
    def writing_paused(self) -> bool:
        return self._write_paused

    def request_started(self, n: int = 1) -> None:
        """Count a request (or `n`) being processed; public so a processor answering later may count itself."""
        self.inflight += n
        if self.inflight >= self.max_inflight:
            self._update_reading()

    def request_finished(self, n: int = 1) -> None:
        self.inflight -= n
        if self._read_paused or self._backlog:
            self._update_reading()

    # ------------------------------------------------------------------ sending
    @property
    def is_closing(self) -> bool:
        return self._is_closing or self.transport is None or self.transport.is_closing()

    def write_command(self, cmd: RemotingCommand) -> bool:
        """Frame `cmd` and queue it for this loop tick's single writelines (header and body pieces,
        body slices uncopied; `close()` flushes the queue first). False if the connection is already
        closing (the command is dropped)."""
        if self.is_closing:
            return False
        if cmd.code and self.response_observer is not None:
            self.response_observer(self, cmd)
        return self.write_frame_pieces(encode_frame(cmd))

    def write_frames(self, data: bytes) -> bool:
        """`write_command` for frames already encoded (one or several, length prefixes included)."""
        return self._queue_out([data], len(data))

    def write_frame_pieces(self, parts: list[Any]) -> bool:
        """`write_command` for one frame already encoded as pieces (`encode_frame`'s shape: the first
        starts with the length prefix; body slices uncopied). The list may be extended in place."""
        return self._queue_out(parts, _FRAME_LEN.unpack_from(parts[0])[0])

    def _queue_out(self, parts: list[Any], nbytes: int) -> bool:
        if self.is_closing:
            return False
        self.last_activity = _monotonic()
        out = self._out
        if out is None:
            # first frame of this tick: the rest of the tick's frames join it and go out with one
            # writelines (one send syscall for a pipelined burst instead of one per response)
            self._out = parts
            self._out_bytes = 0
            self.loop.call_soon(self._flush_out)
        else:
            out += parts
        self._out_bytes += nbytes
        if self._out_bytes >= _OUT_FLUSH_BYTES:
            self._flush_out()  # big output goes to the transport now, so pause_writing stays exact
        return True

    def _flush_out(self) -> None:
        out, self._out = self._out, None
        self._out_bytes = 0
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def send_response(self, cmd: RemotingCommand) -> bool:
        return self.write_command(cmd)

    def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> asyncio.Future[RemotingCommand]:
        """Send `cmd` as a request; the returned future resolves to the response. Awaiting it raises
        RemotingTimeoutError after `timeout` s, ConnectionClosedError if the connection goes first."""
        fut: asyncio.Future[RemotingCommand] = self.loop.create_future()
        if self.is_closing:
            fut.set_exception(ConnectionClosedError(f"connection to {self.peer} is closed"))
            return fut
        opaque = cmd.opaque = next_opaque()
        cmd.flag &= ~(RPC_TYPE_RESPONSE | RPC_ONEWAY)
        self.pending[opaque] = fut
        timer = self.loop.call_later(timeout, self._expire, opaque, cmd.code, timeout)
        def settled(_f: asyncio.Future[RemotingCommand]) -> None:
            timer.cancel()
            self.pending.pop(opaque, None)

        fut.add_done_callback(settled)
        self.write_command(cmd)
        return fut

    def invoke_into(self, cmd: RemotingCommand, fut: asyncio.Future[RemotingCommand]) -> None:
        """`invoke` for a caller that owns the answer's future and its timeout (server.proxy.coalesce: one
        wait per flight, not a timer per request): `fut` gets the response, or ConnectionClosedError;
        the caller `forget`s the request when it stops waiting (answered ones are forgotten already)."""
        if self.is_closing:
            if not fut.done():
                fut.set_exception(ConnectionClosedError(f"connection to {self.peer} is closed"))
            return
        cmd.opaque = next_opaque()
        cmd.flag &= ~(RPC_TYPE_RESPONSE | RPC_ONEWAY)
        self.pending[cmd.opaque] = fut
        self.write_command(cmd)

    def forget(self, cmds: list[RemotingCommand], timeout: float) -> None:
        """`cmds` (sent by `invoke_into`) are no longer waited for: a future still unanswered fails as
        `invoke`'s timer fails it."""
        pending = self.pending
        for cmd in cmds:
            if cmd.opaque in pending:
                self._expire(cmd.opaque, cmd.code, timeout)

    def _expire(self, opaque: int, code: int, timeout: float) -> None:
        fut = self.pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(RemotingTimeoutError(f"no response from {self.peer} in {timeout}s (code {code})"))

    def invoke_oneway(self, cmd: RemotingCommand) -> bool:
        cmd.opaque = next_opaque()
        cmd.flag = (cmd.flag & ~RPC_TYPE_RESPONSE) | RPC_ONEWAY
        return self.write_command(cmd)

    def close(self) -> None:
        """Close after the write buffer is flushed; `closed` resolves when the connection is lost."""
        if self.transport is not None and not self._is_closing:
            if self._out:
                self._flush_out()
            self._is_closing = True
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent data."""
        if self.transport is not None:
            self._is_closing = True
            self._out = None
            self.transport.abort()
