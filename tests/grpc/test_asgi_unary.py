"""server.grpc.asgi_endpoint's unary calls, driven through the ASGI interface (the events pyvoy hands the app):
the usual body (one uncompressed message, handed over whole) and the same request split in chunks, compressed,
or malformed answer as the reference reader decides; a call past its grpc-timeout answers DEADLINE_EXCEEDED
and its handler is cancelled; a handler's own cancellation by someone else is not a deadline."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

from codec.grpc_frame import MESSAGE_PREFIX, frame
from server.grpc.asgi_endpoint import GrpcAsgiApp
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"


def request() -> spb.SendMessageRequest:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x" * 128)
    m.system_properties.message_id = "M1"
    return spb.SendMessageRequest(messages=[m])


class Echo:
    """Answers each SendMessage with its message ids; `hold` makes it wait until cancelled."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self.cancelled = 0
        self.waiting = asyncio.Event()

    async def SendMessage(self, req: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        if self.hold:
            self.waiting.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return spb.SendMessageResponse(status=pb.Status(code=pb.OK), entries=[
            spb.SendResultEntry(message_id=m.system_properties.message_id) for m in req.messages])


def make_app(servicer: Any) -> GrpcAsgiApp:
    return GrpcAsgiApp(servicer, spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 20)


async def call(servicer: Any, chunks: list[bytes], headers: list[tuple[bytes, bytes]] | None = None,
               app: GrpcAsgiApp | None = None) -> tuple[bytes, bytes]:
    """(the response body, grpc-status) of one call whose request body arrives in `chunks`."""
    app = app or make_app(servicer)
    events = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0) if events else {"type": "http.disconnect"}

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    scope = {"type": "http", "method": "POST", "path": SEND, "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/grpc"), *(headers or [])]}
    await asyncio.wait_for(app(scope, receive, send), 10)
    body = b"".join(e.get("body", b"") for e in sent if e["type"] == "http.response.body")
    return body, dict(sent[-1]["headers"])[b"grpc-status"]


async def test_the_whole_body_and_every_split_of_it_answer_alike():
    body = frame(request().SerializeToString())
    whole = await call(Echo(), [body])
    assert whole[1] == b"0"
    answer = spb.SendMessageResponse.FromString(whole[0][MESSAGE_PREFIX.size:])
    assert [e.message_id for e in answer.entries] == ["M1"]
    for cut in (0, 1, 5, 6, len(body) // 2, len(body)):
        assert await call(Echo(), [body[:cut], body[cut:]]) == whole, cut


async def test_a_compressed_request_is_read_by_its_grpc_encoding():
    data = gzip.compress(request().SerializeToString())
    got = await call(Echo(), [MESSAGE_PREFIX.pack(1, len(data)) + data], [(b"grpc-encoding", b"gzip")])
    assert got == await call(Echo(), [frame(request().SerializeToString())])


async def test_a_body_that_is_not_one_message_answers_internal():
    one = frame(request().SerializeToString())
    for chunks in ([one + one], [one[:-1]], [one + b"x"], [b""], [MESSAGE_PREFIX.pack(0, 3) + b"\xff\xff\xff"]):
        assert (await call(Echo(), chunks))[1] == b"13", chunks  # INTERNAL


async def test_a_call_past_its_deadline_answers_deadline_exceeded_and_its_handler_is_cancelled():
    held = Echo(hold=True)
    got = await call(held, [frame(request().SerializeToString())], [(b"grpc-timeout", b"50m")])
    assert got == (b"", b"4")  # DEADLINE_EXCEEDED, no message
    assert held.cancelled == 1
    # a deadline that is not reached leaves the call alone
    assert (await call(Echo(), [frame(request().SerializeToString())], [(b"grpc-timeout", b"10S")]))[1] == b"0"


async def test_a_cancellation_that_is_not_the_deadline_propagates():
    held = Echo(hold=True)
    app = GrpcAsgiApp(held, spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 20)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": frame(request().SerializeToString()), "more_body": False}

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    scope = {"type": "http", "method": "POST", "path": SEND, "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/grpc"), (b"grpc-timeout", b"10S")]}
    task = asyncio.ensure_future(app(scope, receive, send))
    await held.waiting.wait()
    task.cancel()
    try:
        await task
        raise AssertionError("the call was not cancelled")
    except asyncio.CancelledError:
        pass
    assert held.cancelled == 1 and sent == []


async def test_calls_of_different_deadlines_each_end_at_their_own_and_none_is_left_behind():
    """The app's one deadline timer: a call with a later deadline started first, one with an earlier after
    it (the timer is set again, earlier), one that ends in time; each held call answers DEADLINE_EXCEEDED,
    and the app keeps no deadline of a call that ended."""
    held = Echo(hold=True)
    app = make_app(held)
    body = [frame(request().SerializeToString())]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    late = asyncio.ensure_future(call(held, body, [(b"grpc-timeout", b"400m")], app))
    await held.waiting.wait()
    early = asyncio.ensure_future(call(held, body, [(b"grpc-timeout", b"50m")], app))
    in_time = await call(Echo(), body, [(b"grpc-timeout", b"10S")], make_app(Echo()))
    assert in_time[1] == b"0"
    assert await early == (b"", b"4")
    assert not late.done()  # its own deadline is later
    assert len(app.deadlines) == 1
    assert await late == (b"", b"4")
    assert loop.time() - t0 >= 0.4
    assert held.cancelled == 2 and len(app.deadlines) == 0
