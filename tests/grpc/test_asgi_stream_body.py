"""server.grpc.asgi_endpoint's streaming responses: GrpcAsgiApp driven through the ASGI interface itself (the
events an ASGI server hands it, a `send` whose more_body futures resolve later, as pyvoy's do). The body it
writes is byte for byte the reference, one frame per message in order, however the sends coalesce it; frames
produced back to back go in one send, a frame produced after a wait goes before the handler goes on, and a
handler that outruns its client waits at the bound. A stream still learns that its client went away from a server
that, like pyvoy, answers every receive after the request's end at once, without spinning on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from codec.grpc_frame import frame
from server.grpc import asgi_endpoint
from server.grpc.asgi_endpoint import GrpcAsgiApp
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb

RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
TELEMETRY = "/apache.rocketmq.v2.MessagingService/Telemetry"


def responses(n: int, body: bytes = b"x" * 128) -> list[spb.ReceiveMessageResponse]:
    out = [spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK))]
    for i in range(n):
        m = pb.Message(topic=pb.Resource(name="T"), body=body)
        m.system_properties.message_id = f"M{i:08d}"
        out.append(spb.ReceiveMessageResponse(message=m))
    return out


def reference_body(messages: list[spb.ReceiveMessageResponse]) -> bytes:
    """What one send per frame writes."""
    return b"".join(frame(m.SerializeToString()) for m in messages)


class Server:
    """The ASGI server's side of one call: the request body, then nothing until the call ends; the response
    events as sent. A more_body send is complete when `complete_sends` says so (Envoy took the chunk)."""

    def __init__(self, request: bytes, *, hold_sends: bool = False) -> None:
        self.request = request
        self.events: list[dict[str, Any]] = []
        self.hold_sends = hold_sends
        self.held: list[asyncio.Future[None]] = []
        self.sent = asyncio.Event()
        self.finished = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.request:
            body, self.request = self.request, b""
            return {"type": "http.request", "body": body, "more_body": False}
        await self.finished.wait()
        return {"type": "http.disconnect"}

    async def send(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.sent.set()
        if event["type"] == "http.response.trailers":
            self.finished.set()
        if event.get("more_body") and self.hold_sends:
            f = asyncio.get_running_loop().create_future()
            self.held.append(f)
            await f

    def complete_sends(self) -> None:
        for f in self.held:
            if not f.done():
                f.set_result(None)
        self.held.clear()

    @property
    def body(self) -> bytes:
        return b"".join(e.get("body", b"") for e in self.events if e["type"] == "http.response.body")

    @property
    def more_body_sends(self) -> int:
        return sum(1 for e in self.events if e["type"] == "http.response.body" and e.get("more_body"))

    @property
    def status(self) -> bytes:
        return dict(self.events[-1]["headers"])[b"grpc-status"]


def scope(path: str) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "client": ("127.0.0.1", 1),
            "headers": [(b"content-type", b"application/grpc")]}


def receive_request() -> bytes:
    return frame(spb.ReceiveMessageRequest(group=pb.Resource(name="G"), batch_size=32).SerializeToString())


async def test_frames_produced_back_to_back_go_with_the_end_of_the_body_in_the_reference_order():
    out = responses(32)

    class Servicer:
        async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
            await asyncio.sleep(0)  # the receive's wait for the broker
            for r in out:
                yield r

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    server = Server(receive_request())
    await asyncio.wait_for(app(scope(RECEIVE), server.receive, server.send), 10)
    assert server.body == reference_body(out)
    assert server.more_body_sends == 0  # no round trip to the server per message
    assert server.status == b"0"


async def test_a_frame_produced_after_a_wait_is_sent_before_the_handler_goes_on():
    out = responses(3)
    server = Server(frame(spb.TelemetryCommand().SerializeToString()))
    seen: list[int] = []

    class Servicer:
        async def Telemetry(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async for _ in requests:
                pass
            for r in out:
                yield r
                # the next one only once this one reached the server: held back, this would never end
                while len(server.body) < len(reference_body(out[:len(seen) + 1])):
                    server.sent.clear()
                    await server.sent.wait()
                seen.append(server.more_body_sends)

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    await asyncio.wait_for(app(scope(TELEMETRY), server.receive, server.send), 10)
    assert server.body == reference_body(out)
    assert seen == list(range(1, len(out) + 1))  # each its own send, before the next was produced
    assert server.status == b"0"


async def test_a_handler_that_outruns_its_client_waits_at_the_bound_and_the_body_keeps_its_order(monkeypatch):
    monkeypatch.setattr(asgi_endpoint, "STREAM_BODY_LIMIT", 4096)
    out = responses(200)
    server = Server(receive_request(), hold_sends=True)
    produced = 0

    class Servicer:
        async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
            nonlocal produced
            for r in out:
                await asyncio.sleep(0)  # each message after a wait: the writer gets to send in between
                produced += 1
                yield r

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    call = asyncio.ensure_future(app(scope(RECEIVE), server.receive, server.send))
    while not server.finished.is_set():
        server.sent.clear()
        await asyncio.wait_for(server.sent.wait(), 10)
        # the writer's send is in flight: what the handler queued meanwhile stays within the bound (+ the frame
        # that crossed it)
        queued = len(reference_body(out[:produced])) - len(server.body)
        assert queued <= 4096 + len(frame(out[1].SerializeToString()))
        server.complete_sends()
    await asyncio.wait_for(call, 10)
    assert produced == len(out)
    assert server.body == reference_body(out)
    assert 1 < server.more_body_sends < len(out)
    assert server.status == b"0"


async def test_a_stream_past_its_deadline_ends_with_its_status_though_its_client_stopped_reading():
    out = responses(1)
    server = Server(receive_request(), hold_sends=True)  # no more_body send ever completes

    class Servicer:
        async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
            yield out[0]
            await asyncio.sleep(0)  # the writer sends the first frame, which is never taken
            yield out[1]
            await asyncio.Event().wait()  # then nothing, until the deadline

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    s = scope(RECEIVE)
    s["headers"].append((b"grpc-timeout", b"100m"))
    await asyncio.wait_for(app(s, server.receive, server.send), 10)
    assert server.body == reference_body(out)  # the frame in flight, then the one still queued, in order
    assert server.status == b"4"  # DEADLINE_EXCEEDED


class EagerServer(Server):
    """pyvoy's receive (1.3.0): once the request has ended, every receive() is answered on the loop's next turn
    (pyvoy: through Envoy's worker and its executor thread) with an empty http.request while the client is there,
    and with http.disconnect once it has gone."""

    def __init__(self, request: bytes) -> None:
        super().__init__(request)
        self.after_end = 0  # receives after the request's end
        self.gone = False
        self.asked = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if self.request:
            body, self.request = self.request, b""
            return {"type": "http.request", "body": body, "more_body": False}
        self.after_end += 1
        self.asked.set()
        await asyncio.sleep(0)
        if self.gone:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": b"", "more_body": False}


async def test_a_long_poll_on_a_server_that_answers_every_receive_at_once_does_not_spin_on_it():
    out = responses(2)
    held_s = 0.3  # the broker's long poll

    class Servicer:
        async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
            await asyncio.sleep(held_s)
            for r in out:
                yield r

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    server = EagerServer(receive_request())
    await asyncio.wait_for(app(scope(RECEIVE), server.receive, server.send), 10)
    assert server.body == reference_body(out)
    assert server.status == b"0"
    # the watcher asks again after pauses doubling from DISCONNECT_POLL_FIRST_S: a handful of times in 0.3 s, where
    # asking again at once made it thousands of round trips through Envoy
    assert 1 <= server.after_end <= 12


async def test_a_stream_whose_client_goes_away_is_cancelled_on_a_server_that_answers_every_receive_at_once():
    cancelled = asyncio.Event()

    class Servicer:
        async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
            yield responses(0)[0]
            try:
                await asyncio.Event().wait()  # a long poll that nothing ends
            except asyncio.CancelledError:
                cancelled.set()
                raise

    app = GrpcAsgiApp(Servicer(), spb.DESCRIPTOR.services_by_name["MessagingService"], max_message_bytes=1 << 22)
    server = EagerServer(receive_request())
    call = asyncio.ensure_future(app(scope(RECEIVE), server.receive, server.send))
    await asyncio.wait_for(server.asked.wait(), 10)  # the watcher is asking
    server.gone = True
    await asyncio.wait_for(call, 10)
    assert cancelled.is_set()
    assert not any(e["type"] == "http.response.trailers" for e in server.events)  # nobody reads a status
