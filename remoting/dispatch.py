"""Request dispatch shared by the server and the client: request code -> processor.

A processor is called as `processor(conn, cmd)` and is either
- a plain function returning `RemotingCommand | None`: called inline in `data_received` (the fast
  path: no task, no future); or
- a coroutine function (or a plain function returning an awaitable): run as its own task so a
  processor that waits (a held pull) never blocks the connection it came from. While the task runs
  it counts as an in-flight request of that connection (see `Connection.max_inflight`).

A processor may also be registered with a batch processor (`register(code, processor, batch=...)`),
`batch(conn, cmds) -> list[RemotingCommand | None | awaitable]` (one result per command, in order): a connection hands it each run of consecutive
requests of one read that share the processor (`dispatch_run`), so per-request work that can be
shared (one store put for a run of sends) is done once. Results follow the same rules as above,
plus: an entry may be `bytes`, response frames already encoded (for any of the run's requests, oneway
ones excluded by the processor), written as they are (`Connection.write_frames`), so a run's
responses can go out as one piece; or a `LaterFrames`: the encoded frames of several of the run's
requests, produced together by one awaitable (run as ONE task that counts as that many in-flight
requests), for answers that all wait on the same thing (a run of SYNC_MASTER sends: one replication
wait). Any processor (plain, batch or awaited) may also answer with a `list`: ONE response frame already
encoded as pieces (`encode_frame`'s shape, length prefix first, body slices uncopied), written by
`Connection.write_frame_pieces`.

The returned command, if any, is sent as the response. Returning None means "no response now": a
processor that answers later (long-polling pull) keeps `conn` and `cmd` and later calls
`conn.send_response(cmd.response(...))` itself; `cmd.response` copies the opaque and serialize type.

Rules (remoting-protocol.md §1, §9): unknown code -> 3 REQUEST_CODE_NOT_SUPPORTED with remark
" request type <code> not supported"; a processor exception -> 1 SYSTEM_ERROR with the exception
text as remark (logged); a oneway request (flag & 2) never gets a response, not even an error.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import structlog

from codec.codes import ResponseCode
from codec.command import RemotingCommand

if TYPE_CHECKING:
    from remoting.connection import Connection

log = structlog.get_logger(__name__)

# what a processor answers: a response, ONE frame already encoded as pieces, an awaitable of either
# (run as a task), or None (no response now)
Response = RemotingCommand | list[Any] | Awaitable[Any] | None
Processor = Callable[["Connection", RemotingCommand], Response]


class LaterFrames(NamedTuple):
    """A batch result standing for `requests` requests of the run: `frames` resolves to their response
    frames, encoded (bytes, written as they are); its task counts as `requests` in-flight requests."""

    frames: Awaitable[bytes]
    requests: int


# batch(conn, cmds) -> one result per command, in order: a Response, bytes (whole frames, written as they
# are) or a LaterFrames
BatchProcessor = Callable[["Connection", list[RemotingCommand]], list[Response | bytes | LaterFrames]]
# before_request(conn, cmd) -> RemotingCommand | None: a returned command is sent instead of
# running the processor (ACL denial, server busy, ...).
BeforeRequest = Callable[["Connection", RemotingCommand], "RemotingCommand | None"]


def _is_async(fn: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Dispatcher:
    """One dispatch table plus the set of processor tasks still running."""

    def __init__(self) -> None:
        self.processors: dict[int, tuple[Processor, bool]] = {}
        self.batch_processors: dict[int, BatchProcessor] = {}  # code -> its batch processor
        self.before_request: BeforeRequest | None = None
        # on_timing(code, seconds, n): how long a request (or a run of n) took to handle, answer
        # written or handed to the connection; None (the default) costs nothing
        self.on_timing: Callable[[int, float, int], None] | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    def register(self, code: int, processor: Processor, batch: BatchProcessor | None = None) -> None:
        """`processor` answers one request; `batch`, if given, each run of consecutive requests of this
        code in one read (`dispatch_run`)."""
        self.processors[int(code)] = (processor, _is_async(processor))
        if batch is not None:
            self.batch_processors[int(code)] = batch
        else:
            self.batch_processors.pop(int(code), None)

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        """The `on_request` callback of a Connection."""
        if self.before_request is not None:
            try:
                early = self.before_request(conn, cmd)
            except Exception as e:
                log.warning("remoting.before_request_failed", code=cmd.code, peer=conn.peer, error=error_text(e))
                early = cmd.response(ResponseCode.SYSTEM_ERROR, error_text(e))
            if early is not None:
                if not cmd.is_oneway:
                    conn.send_response(early)
                return
        entry = self.processors.get(cmd.code)
        if entry is None:
            if not cmd.is_oneway:
                conn.send_response(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                                f" request type {cmd.code} not supported"))
            return
        fn, is_async = entry
        timing = self.on_timing
        t0 = perf_counter() if timing is not None else 0.0
        try:
            resp = fn(conn, cmd)
        except Exception as e:
            self.fail(conn, cmd, e)
            return
        if is_async or inspect.isawaitable(resp):
            self.spawn(conn, cmd, cast(Awaitable[Any], resp), t0)
            return
        if resp is not None and not cmd.is_oneway:
            if isinstance(resp, list):
                conn.write_frame_pieces(resp)
            else:
                conn.send_response(resp)
        if timing is not None:
            timing(cmd.code, perf_counter() - t0, 1)

    def dispatch_run(self, conn: Connection, batch: BatchProcessor, cmds: list[RemotingCommand]) -> None:
        """Requests `cmds` (consecutive, all for processor batch `batch`) in one call; `before_request`
        still runs per request, and a request it answers is left out of the run."""
        if self.before_request is not None:
            kept = []
            for cmd in cmds:
                try:
                    early = self.before_request(conn, cmd)
                except Exception as e:
                    log.warning("remoting.before_request_failed", code=cmd.code, peer=conn.peer, error=error_text(e))
                    early = cmd.response(ResponseCode.SYSTEM_ERROR, error_text(e))
                if early is None:
                    kept.append(cmd)
                elif not cmd.is_oneway:
                    conn.send_response(early)
            cmds = kept
            if not cmds:
                return
        timing = self.on_timing
        t0 = perf_counter() if timing is not None else 0.0
        try:
            results = batch(conn, cmds)
        except Exception as e:
            for cmd in cmds:
                self.fail(conn, cmd, e)
            return
        send = conn.send_response
        for cmd, resp in zip(cmds, results, strict=True):
            if resp is None:
                continue
            if isinstance(resp, bytes):
                conn.write_frames(resp)
            elif isinstance(resp, LaterFrames):
                self.spawn(conn, cmd, resp.frames, requests=resp.requests)
            elif inspect.isawaitable(resp):
                self.spawn(conn, cmd, resp)
            elif not cmd.is_oneway:
                if isinstance(resp, list):
                    conn.write_frame_pieces(resp)
                else:
                    send(resp)
        if timing is not None:
            timing(cmds[0].code, perf_counter() - t0, len(cmds))

    def spawn(self, conn: Connection, cmd: RemotingCommand, awaitable: Awaitable[Any],
              t0: float = 0.0, requests: int = 1) -> asyncio.Task[Any]:
        """Run `awaitable` as a task answering `cmd` (or, with `requests` > 1, a LaterFrames' requests:
        it counts as that many in-flight requests)."""
        conn.request_started(requests)
        task = asyncio.ensure_future(awaitable)
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            conn.request_finished(requests)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                self.fail(conn, cmd, exc)
                return
            resp = t.result()
            if type(resp) is bytes:  # frames already encoded (a batch's answers once its work is done)
                conn.write_frames(resp)
            elif resp is not None and not cmd.is_oneway:
                if type(resp) is list:
                    conn.write_frame_pieces(resp)
                else:
                    conn.send_response(resp)
            if t0 and self.on_timing is not None:
                self.on_timing(cmd.code, perf_counter() - t0, 1)

        task.add_done_callback(done)
        return task

    @staticmethod
    def fail(conn: Connection, cmd: RemotingCommand, e: BaseException) -> None:
        log.warning("remoting.processor_failed", code=cmd.code, peer=conn.peer, error=error_text(e),
                    exc_info=e)
        if not cmd.is_oneway:
            conn.send_response(cmd.response(ResponseCode.SYSTEM_ERROR, error_text(e)))

    async def drain(self, timeout: float) -> bool:
        """Wait for running processor tasks, and for those they start meanwhile, up to `timeout` s in
        all; True if none is left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.tasks:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(list(self.tasks), timeout=left)
        return not self.tasks

    def cancel_all(self) -> None:
        for t in list(self.tasks):
            t.cancel()
