"""The `pyvoy_connect` echo of bench.grpc_echo: connect-python (`connectrpc`) serving the gRPC protocol over
ASGI, with the same SendMessage work as every other echo.

connectrpc's own codecs take messages of its `protobuf-py` runtime; delaymq's messages are google.protobuf
ones, so a small codec under connectrpc's "proto" name (the one `application/grpc` selects) parses and
serializes them. Imported by Envoy's embedded Python (pyvoy), not by the bench process.
"""

from __future__ import annotations

from typing import Any

from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.request import RequestContext
from connectrpc.server import ConnectASGIApplication, Endpoint

from bench.grpc_echo import SEND_METHOD, answer
from server.grpc.v2 import service_pb2 as spb

SERVICE = "apache.rocketmq.v2.MessagingService"


class GoogleProtobufCodec:
    def name(self) -> str:
        return "proto"

    def encode(self, message: Any) -> bytes:
        return message.SerializeToString()  # type: ignore[no-any-return]

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        return message_class.FromString(bytes(data))


async def send_message(req: spb.SendMessageRequest, ctx: RequestContext) -> spb.SendMessageResponse:
    return answer(req)


SEND = MethodInfo(name="SendMessage", service_name=SERVICE, input=spb.SendMessageRequest,
                  output=spb.SendMessageResponse, idempotency_level=IdempotencyLevel.UNKNOWN,
                  stream_type=StreamType.UNARY)


class EchoApp(ConnectASGIApplication[object]):
    @property
    def path(self) -> str:
        return f"/{SERVICE}"


app = EchoApp(service=object(), endpoints=lambda _svc: {SEND_METHOD: Endpoint.unary(SEND, send_message)},
              compressions=[], codecs=[GoogleProtobufCodec()])
