"""A small gRPC stub helper for tests that need exact control (kill -9, DLQ, auth, TLS). It uses the
generated stubs directly; the client-compatibility tests use Apache's real clients instead."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb
from server.grpc.v2 import service_pb2_grpc as sg


class RawClient:
    def __init__(self, addr: str, credentials: grpc.ChannelCredentials | None = None,
                 metadata: Iterable[tuple[str, str]] = ()) -> None:
        self.channel = (grpc.aio.secure_channel(addr, credentials) if credentials is not None
                        else grpc.aio.insecure_channel(addr))
        self.stub = sg.MessagingServiceStub(self.channel)
        self.metadata = tuple(metadata)
        self.n = 0

    async def close(self) -> None:
        await self.channel.close()

    async def send(self, topic: str, body: bytes, **sysprops: Any) -> spb.SendMessageResponse:
        self.n += 1
        m = pb.Message(topic=pb.Resource(name=topic), body=body)
        m.system_properties.message_id = sysprops.pop("message_id", f"RAW{self.n:08d}{id(self):x}")
        m.system_properties.message_type = sysprops.pop("message_type", pb.NORMAL)
        for k, v in sysprops.items():
            setattr(m.system_properties, k, v)
        return await self.stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=self.metadata, timeout=10)

    async def receive(self, group: str, topic: str, batch: int = 16, invisible_s: int = 30,
                      poll_s: float = 1.0) -> tuple[int | None, list[pb.Message]]:
        req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=batch,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1))
        req.invisible_duration.seconds = invisible_s
        req.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
        code, msgs = None, []
        async for r in self.stub.ReceiveMessage(req, metadata=self.metadata, timeout=poll_s + 5):
            if r.HasField("status"):
                code = r.status.code
            elif r.HasField("message"):
                msgs.append(r.message)
        return code, msgs

    async def ack(self, group: str, topic: str, *msgs: pb.Message) -> spb.AckMessageResponse:
        entries = [spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                       receipt_handle=m.system_properties.receipt_handle) for m in msgs]
        return await self.stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group),
                                                                topic=pb.Resource(name=topic), entries=entries),
                                          metadata=self.metadata, timeout=10)
