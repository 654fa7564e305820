"""A gRPC service served over ASGI: for an HTTP/2 server that hands requests to Python as ASGI events (pyvoy:
Envoy's HTTP/2 with Python embedded; delaymq-proxy's `grpcServerStack=envoy`).

Why hand-written: Envoy does HTTP/2, HPACK, flow control and TLS; what is left is gRPC's framing over the ASGI
body (codec.grpc_frame), the `grpc-status` trailer (ASGI's http.response.trailers), `grpc-timeout` and the
metadata. connect-python (`connectrpc`), the one maintained gRPC layer over ASGI, costs more Python per call
than Envoy saves (bench/RESULTS.md, 2026-11-29: 1.35x grpc.aio's CPU per call against 0.37x for this framing),
and its codecs take another protobuf runtime's messages.

`GrpcAsgiApp(servicer, service)` routes `/<package.Service>/<Method>` to `servicer.<Method>(request, context)`
as grpc.aio does, with the same handler shapes: unary -> awaitable response, server streaming -> async iterator,
bidi -> (request async iterator, context) -> async iterator. The context is an `AsgiContext`, which satisfies
server.grpc.status.Context like grpc.aio's ServicerContext. A call past its `grpc-timeout` is cancelled and
answers DEADLINE_EXCEEDED; a stream whose client goes away is cancelled; an unknown method answers
UNIMPLEMENTED; a handler's exception UNKNOWN (logged); a body that is not gRPC's framing INTERNAL.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import structlog
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from codec.grpc_frame import FrameError, GrpcStatus, MessageReader, frame, only_message, parse_timeout

log = structlog.get_logger(__name__)

Scope = dict[str, Any]
Event = dict[str, Any]
Receive = Callable[[], Awaitable[Event]]
Send = Callable[[Event], Awaitable[None]]

GRPC_CONTENT_TYPE = b"application/grpc"
RESPONSE_HEADERS = [(b"content-type", GRPC_CONTENT_TYPE)]
OK_TRAILERS = [(b"grpc-status", b"0")]
# request headers that are HTTP/2's or gRPC's own, not the call's metadata (grpc.aio leaves them out too)
NOT_METADATA = frozenset({"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
                          "content-length"})


class AsgiContext:
    """One call's server.grpc.status.Context: its metadata (read from the request headers when asked),
    peer and deadline (the event loop's clock)."""

    __slots__ = ("_headers", "_client", "deadline")

    def __init__(self, headers: Sequence[tuple[bytes, bytes]], client: Sequence[Any] | None,
                 deadline: float | None) -> None:
        self._headers = headers
        self._client = client
        self.deadline = deadline

    def invocation_metadata(self) -> Sequence[tuple[str, str | bytes]]:
        out: list[tuple[str, str | bytes]] = []
        for raw_key, raw_value in self._headers:
            key = raw_key.decode("latin-1")
            if key.startswith(":") or key in NOT_METADATA:
                continue
            if key.endswith("-bin"):
                out.append((key, base64.b64decode(raw_value + b"=" * (-len(raw_value) % 4))))
            else:
                out.append((key, raw_value.decode("latin-1")))
        return out

    def peer(self) -> str:
        if not self._client:
            return ""
        host, port = self._client[0], self._client[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC of the service: how its request is parsed and how its handler is called."""

    name: str
    request: type[Message]
    handler: Callable[..., Any]
    client_streaming: bool
    server_streaming: bool


class Expiry:
    """A unary call's deadline: `fire` cancels the call's task and says so, so that the cancellation it caused
    answers DEADLINE_EXCEEDED (and any other propagates)."""

    __slots__ = ("task", "deadline", "fired")

    def __init__(self, task: asyncio.Task[Any] | None, deadline: float) -> None:
        self.task = task
        self.deadline = deadline
        self.fired = False

    def fire(self) -> None:
        if self.task is not None and not self.task.done():
            self.fired = True
            self.task.cancel()


class Deadlines:
    """The deadlines of one app's unary calls in flight, kept by ONE loop timer, set at the earliest.

    asyncio.timeout_at starts and stops a loop timer per call; on uvloop that is ~4 us (a libuv timer made,
    started, stopped and closed), as much as the rest of a call's deadline handling together. Here a call
    adds its Expiry and removes it when it ends (two dict operations); the timer, when it fires, cancels
    the calls whose deadline has passed and is set again at the earliest left. With the usual clients
    (every call the same grpc-timeout) the earliest is always the oldest call's, so the timer is set once
    per grpc-timeout, not per call. Holds the calls in flight only."""

    __slots__ = ("_calls", "_timer", "_at")

    def __init__(self) -> None:
        self._calls: dict[Expiry, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = float("inf")

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, expiry: Expiry) -> None:
        self._calls[expiry] = None
        if expiry.deadline < self._at:
            self._arm(asyncio.get_running_loop(), expiry.deadline)

    def remove(self, expiry: Expiry) -> None:
        self._calls.pop(expiry, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = at
        self._timer = loop.call_at(at, self._sweep)

    def _sweep(self) -> None:
        self._timer, self._at = None, float("inf")
        loop = asyncio.get_running_loop()
        now = loop.time()
        for expiry in [e for e in self._calls if e.deadline <= now]:
            del self._calls[expiry]
            expiry.fire()
        if self._calls:  # a timer that fired a little early finds its call still here: set again
            self._arm(loop, min(e.deadline for e in self._calls))


class ClientGone(Exception):
    """The client went away before its request was read: nobody to answer."""


class RpcFailed(Exception):
    def __init__(self, status: GrpcStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def methods_of(servicer: object, service: ServiceDescriptor) -> dict[str, Method]:
    """`/<full service name>/<Method>` -> Method, for every method of `service` the servicer has."""
    out: dict[str, Method] = {}
    for m in service.methods:
        handler = getattr(servicer, m.name, None)
        if handler is None:
            continue
        out[f"/{service.full_name}/{m.name}"] = Method(m.name, message_factory.GetMessageClass(m.input_type),
                                                      handler, m.client_streaming, m.server_streaming)
    return out


STREAM_BODY_LIMIT = 1 << 20  # bytes of response frames a stream holds before its handler waits for Envoy
# A stream learns that its client went away from `receive()` (http.disconnect). Once the request has ended, pyvoy
# (1.3.0) answers every further receive() at once with an empty http.request instead of holding it until the
# client goes (as uvicorn and hypercorn do), so a watcher awaiting receive() in a loop spun, for a stream's whole
# life, one round trip per turn through Envoy's worker, pyvoy's executor thread (the GIL) and this loop; every
# long-polling ReceiveMessage kept the loop busy and paced sends queued behind it (issue 24, bench/RESULTS.md
# 2026-11-29 05:40). After an answer that is not the disconnect the watcher asks again after a pause, doubling
# from the first to the most (so a client that goes away is noticed within that).
DISCONNECT_POLL_FIRST_S = 0.005
DISCONNECT_POLL_MAX_S = 0.2


class StreamBody:
    """A streaming call's response body, written as few ASGI sends as the responses allow.

    Under pyvoy each `http.response.body` with more_body costs a round trip (Envoy's worker takes the chunk,
    then resolves the send's future through its executor thread and call_soon_threadsafe): a ReceiveMessage
    of 32 messages, sent a frame at a time, made 34 of them. Here the handler only queues frames (`put`); a
    writer task sends whatever has queued whenever it runs, so frames produced back to back go in one send,
    and a frame the handler produced after waiting goes as soon as the loop turns (a Telemetry command is not
    held back). What is still queued when the handler ends goes with the end of the body (`rest`): a
    ReceiveMessage whose messages are all at hand costs no round trip at all. Bounded: past
    STREAM_BODY_LIMIT queued bytes the handler waits (`room`) for the writer."""

    __slots__ = ("_send", "_queued", "_wake", "_drained", "_writer", "_closing", "_failed")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queued = bytearray()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._failed: Exception | None = None

    def put(self, data: bytes) -> bool:
        """Queues one framed message; True when the handler should wait for `room` before the next."""
        if self._failed is not None:
            raise self._failed
        self._queued += data
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        self._wake.set()
        return len(self._queued) >= STREAM_BODY_LIMIT

    async def room(self) -> None:
        while len(self._queued) >= STREAM_BODY_LIMIT and self._failed is None:
            self._drained.clear()
            await self._drained.wait()
        if self._failed is not None:
            raise self._failed

    async def _write(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._closing:
                    return
                if not self._queued:
                    continue
                data = bytes(self._queued)
                self._queued.clear()
                self._drained.set()
                await self._send({"type": "http.response.body", "body": data, "more_body": True})
        except Exception as e:  # the client went away: the handler learns it at its next put  # noqa: BLE001
            self._failed = e
            self._drained.set()

    def end(self) -> None:
        """The handler's last frame is queued: the writer sends no more (what is queued goes with `rest`)."""
        self._closing = True
        self._wake.set()

    async def rest(self, *, wait: bool = True) -> bytes:
        """What is not sent yet, once the writer's send in flight is done (the body's order kept). `wait=False`
        (the call's deadline passed: its client may have stopped reading, so that send may never complete): the
        writer is cancelled instead; the chunk in flight was handed to the server when its send was called."""
        writer, self._writer = self._writer, None
        if writer is not None:
            self.end()
            if wait:
                await writer
            else:
                writer.cancel()
        data = bytes(self._queued)
        self._queued.clear()
        return data

    def abandon(self) -> None:
        """The stream ends without its body's end (the client went away, or the call was cancelled)."""
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None


def _parse(method: Method, data: bytes) -> Message:
    try:
        return method.request.FromString(data)
    except DecodeError as e:
        raise RpcFailed(GrpcStatus.INTERNAL, f"{method.name}: request does not parse: {e}") from None


def trailers(status: GrpcStatus, message: str = "") -> list[tuple[bytes, bytes]]:
    out = [(b"grpc-status", str(int(status)).encode())]
    if message:  # percent-encoded (gRPC's Status-Message): printable ASCII but '%' as is
        out.append((b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode()))
    return out


class GrpcAsgiApp:
    """The ASGI application. `on_startup` / `on_shutdown` run in the server's lifespan (the composition root's
    start and stop, on the loop that serves the calls)."""

    def __init__(self, servicer: object, service: ServiceDescriptor, *, max_message_bytes: int,
                 on_startup: Callable[[], Awaitable[None]] | None = None,
                 on_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
        self.methods = methods_of(servicer, service)
        self.max_message_bytes = max_message_bytes
        self.on_startup = on_startup
        self.on_shutdown = on_shutdown
        self.calls = 0
        self.failed_calls = 0
        self.deadlines = Deadlines()  # the unary calls'

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        # one call (written here, not in a coroutine of its own: one frame less per call)
        self.calls += 1
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        content_type = timeout = encoding = b""
        for k, v in headers:
            if k == b"content-type":
                content_type = v
            elif k == b"grpc-timeout":
                timeout = v
            elif k == b"grpc-encoding":
                encoding = v
        if scope["method"] != "POST" or not content_type.startswith(GRPC_CONTENT_TYPE):
            await send({"type": "http.response.start", "status": 415,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"gRPC only (content-type application/grpc)"})
            return
        method = self.methods.get(scope["path"])
        if method is None:
            await self._answer_status(send, GrpcStatus.UNIMPLEMENTED, f"unknown method {scope['path']}")
            return
        deadline = None
        if timeout:
            try:
                deadline = asyncio.get_running_loop().time() + parse_timeout(timeout.decode("latin-1"))
            except FrameError as e:
                await self._answer_status(send, GrpcStatus.INTERNAL, str(e))
                return
        context = AsgiContext(headers, scope.get("client"), deadline)
        try:
            if method.client_streaming:
                await self._bidi(method, self._reader(encoding), context, receive, send)
            elif method.server_streaming:
                await self._server_stream(method, await self._request(method, encoding, receive), context,
                                          receive, send)
            else:
                # `_request`'s usual case written out (no coroutine of its own): the body of one uncompressed
                # message, handed over whole
                event = await receive()
                data = None
                if event["type"] == "http.request" and not event.get("more_body", False) and \
                        (not encoding or encoding == b"identity"):
                    data = only_message(event.get("body", b""), self.max_message_bytes)
                request = _parse(method, data) if data is not None else \
                    await self._request(method, encoding, receive, event)
                await self._unary(method, request, context, send)
        except RpcFailed as e:
            self.failed_calls += 1
            await self._answer_status(send, e.status, e.message)
        except ClientGone:
            self.failed_calls += 1

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                try:
                    if self.on_startup is not None:
                        await self.on_startup()
                except Exception as e:
                    log.error("grpc.asgi.startup_failed", error=str(e))
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                if self.on_shutdown is not None:
                    await self.on_shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _reader(self, encoding: bytes) -> MessageReader:
        return MessageReader(encoding.decode("latin-1") if encoding not in (b"", b"identity") else "",
                             self.max_message_bytes)

    async def _request(self, method: Method, encoding: bytes, receive: Receive,
                       event: Event | None = None) -> Message:
        """The one request message of a unary or server-streaming call (`event`: its first, already received).
        The usual body (one uncompressed message, handed over whole) is taken as is
        (codec.grpc_frame.only_message); any other is read by `MessageReader`, the reference, which refuses
        what is not one message."""
        if event is None:
            event = await receive()
        if event["type"] != "http.request":  # http.disconnect
            raise ClientGone
        if not event.get("more_body", False) and (not encoding or encoding == b"identity"):
            data = only_message(event.get("body", b""), self.max_message_bytes)
            if data is not None:
                return _parse(method, data)
        reader = self._reader(encoding)
        messages: list[bytes] = []
        try:
            while True:
                messages += reader.feed(event.get("body", b""))
                if not event.get("more_body", False):
                    break
                event = await receive()
                if event["type"] != "http.request":  # http.disconnect
                    raise ClientGone
        except FrameError as e:
            raise RpcFailed(GrpcStatus.INTERNAL, str(e)) from None
        if len(messages) != 1 or reader.pending:
            raise RpcFailed(GrpcStatus.INTERNAL, f"{method.name}: expected one request message, got "
                                                 f"{len(messages)}{' and a partial one' if reader.pending else ''}")
        return _parse(method, messages[0])

    async def _unary(self, method: Method, request: Message, context: AsgiContext, send: Send) -> None:
        try:
            if context.deadline is None:
                response = await method.handler(request, context)
            else:
                # asyncio.timeout_at's work, on the app's one deadline timer (Deadlines)
                expiry = Expiry(asyncio.current_task(), context.deadline)
                self.deadlines.add(expiry)
                try:
                    response = await method.handler(request, context)
                except asyncio.CancelledError:
                    if expiry.fired and expiry.task is not None and expiry.task.uncancel() == 0:
                        raise RpcFailed(GrpcStatus.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
                    raise
                finally:
                    self.deadlines.remove(expiry)
        except RpcFailed:
            raise
        except Exception as e:
            log.error("grpc.asgi.handler_failed", rpc=method.name, error=repr(e), exc_info=e)
            raise RpcFailed(GrpcStatus.UNKNOWN, f"Unexpected {type(e).__name__}: {e}") from None
        await send({"type": "http.response.start", "status": 200, "headers": RESPONSE_HEADERS, "trailers": True})
        await send({"type": "http.response.body", "body": frame(response.SerializeToString())})
        await send({"type": "http.response.trailers", "headers": OK_TRAILERS})

    async def _server_stream(self, method: Method, request: Message, context: AsgiContext, receive: Receive,
                             send: Send) -> None:
        await self._stream(method, method.handler(request, context), context, receive, send, watch=True)

    async def _bidi(self, method: Method, reader: MessageReader, context: AsgiContext, receive: Receive,
                    send: Send) -> None:
        gone = asyncio.Event()
        watchers: list[asyncio.Future[None]] = []

        async def requests() -> AsyncIterator[Message]:
            while True:
                event = await receive()
                if event["type"] != "http.request":
                    gone.set()
                    return
                try:
                    chunks = reader.feed(event.get("body", b""))
                except FrameError as e:
                    log.warning("grpc.asgi.bad_stream_body", rpc=method.name, error=str(e))
                    gone.set()
                    return
                for data in chunks:
                    yield method.request.FromString(data)
                if not event.get("more_body", False):
                    # the client half-closed: its going away now shows only as http.disconnect
                    watcher = asyncio.ensure_future(self._disconnected(receive))
                    watcher.add_done_callback(lambda _: gone.set())
                    watchers.append(watcher)
                    return

        try:
            await self._stream(method, method.handler(requests(), context), context, receive, send, watch=False,
                               gone=gone)
        finally:
            for w in watchers:
                w.cancel()

    async def _stream(self, method: Method, responses: AsyncIterator[Message], context: AsgiContext,
                      receive: Receive, send: Send, *, watch: bool, gone: asyncio.Event | None = None) -> None:
        """Sends each response as it comes; ends with the status. The stream is cancelled when the client goes
        away (`watch`: read for http.disconnect here; a bidi call learns it from its request reader, `gone`)
        or at its deadline."""
        await send({"type": "http.response.start", "status": 200, "headers": RESPONSE_HEADERS, "trailers": True})
        body = StreamBody(send)

        async def pump() -> None:
            async for response in responses:
                if body.put(frame(response.SerializeToString())):
                    await body.room()
            body.end()

        task = asyncio.ensure_future(pump())
        gone = gone or asyncio.Event()
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(gone.wait())]
        if watch:
            waiters.append(asyncio.ensure_future(self._disconnected(receive)))
        status, message = GrpcStatus.OK, ""
        ended = False
        try:
            timeout = None if context.deadline is None else max(
                0.0, context.deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait([task, *waiters], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if task not in done:
                task.cancel()
                if not done:
                    status, message = GrpcStatus.DEADLINE_EXCEEDED, "Deadline Exceeded"
                else:
                    status, message = GrpcStatus.CANCELLED, "client went away"
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
            else:
                exc = task.exception()
                if exc is not None:
                    log.error("grpc.asgi.handler_failed", rpc=method.name, error=repr(exc), exc_info=exc)
                    status, message = GrpcStatus.UNKNOWN, f"Unexpected {type(exc).__name__}: {exc}"
            ended = True
        finally:
            for w in waiters:
                w.cancel()
            if not task.done():
                task.cancel()
            if not ended or status == GrpcStatus.CANCELLED:
                body.abandon()
        if status == GrpcStatus.CANCELLED:
            return  # nobody reads the status
        try:
            rest = await body.rest(wait=status != GrpcStatus.DEADLINE_EXCEEDED)
            await send({"type": "http.response.body", "body": rest, "more_body": False})
            await send({"type": "http.response.trailers", "headers": trailers(status, message)})
        except Exception:  # the client went away while the status was on its way  # noqa: BLE001
            pass
        finally:
            body.abandon()

    @staticmethod
    async def _disconnected(receive: Receive) -> None:
        """Returns when the client has gone (see DISCONNECT_POLL_FIRST_S)."""
        pause = DISCONNECT_POLL_FIRST_S
        while (await receive())["type"] != "http.disconnect":
            await asyncio.sleep(pause)
            pause = min(pause * 2, DISCONNECT_POLL_MAX_S)

    @staticmethod
    async def _answer_status(send: Send, status: GrpcStatus, message: str) -> None:
        """A call that fails before (or instead of) any response message: headers, no message, the status."""
        await send({"type": "http.response.start", "status": 200, "headers": RESPONSE_HEADERS, "trailers": True})
        await send({"type": "http.response.body", "body": b""})
        await send({"type": "http.response.trailers", "headers": trailers(status, message)})
