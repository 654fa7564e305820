"""gRPC answers: the proto's status codes (apache.rocketmq.v2.Code) with a message.

`GrpcError(code, message)` is raised anywhere below an RPC and becomes that RPC's `Status`;
`from_remoting(code, remark)` maps a remoting response code (the send path's answers) to a Code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from codec.codes import ResponseCode
from server.grpc.v2 import definition_pb2 as pb
from server.pop.model import Failure, PopError

Code = pb.Code


class Context(Protocol):
    """What MessagingService reads of an RPC's call, whichever server stack serves it: grpc.aio's
    ServicerContext (server.grpc.endpoint, delaymq-proxy on grpcio) and server.grpc.asgi_endpoint's
    AsgiContext (delaymq-proxy on Envoy) both are one."""

    def invocation_metadata(self) -> Sequence[tuple[str, str | bytes]] | None:
        """The call's metadata: (key, text value), or bytes for a `-bin` key."""

    def peer(self) -> str:
        """The client's address as gRPC writes it: 'ipv4:HOST:PORT' / 'ipv6:[HOST]:PORT'."""

    def time_remaining(self) -> float | None:
        """Seconds until the call's deadline, None without one."""


Response = TypeVar("Response")  # an RPC's response message
_Answer = TypeVar("_Answer", covariant=True)


class StatusAnswer(Protocol[_Answer]):
    """A response message class, as an RPC builds its error answer: with just a status."""

    def __call__(self, *, status: pb.Status) -> _Answer: ...


class GrpcError(Exception):
    def __init__(self, code: pb.Code.ValueType, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: pb.Code.ValueType = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


OK = status()

# remoting ResponseCode -> Code (send path, END_TRANSACTION, put hooks)
_REMOTING: dict[int, pb.Code.ValueType] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_ERROR: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
}


def from_remoting(code: int, remark: str | None) -> pb.Status:
    c = _REMOTING.get(code, Code.INTERNAL_SERVER_ERROR)
    text = remark or f"remoting code {code}"
    if code == ResponseCode.MESSAGE_ILLEGAL and "body size exceeded" in text:
        c = Code.MESSAGE_BODY_TOO_LARGE
    elif code == ResponseCode.MESSAGE_ILLEGAL and "properties size exceeded" in text:
        c = Code.MESSAGE_PROPERTIES_TOO_LARGE
    elif code == ResponseCode.MESSAGE_ILLEGAL and "timer" in text.lower():
        c = Code.ILLEGAL_DELIVERY_TIME
    elif code == ResponseCode.SYSTEM_ERROR and "congested" in text:
        c = Code.TOO_MANY_REQUESTS
    return status(c, text)


def remoting_error(code: int, remark: str | None) -> GrpcError:
    """A remoting answer's refusal as the GrpcError a backend raises (the RPC's status)."""
    st = from_remoting(code, remark)
    return GrpcError(st.code, st.message)


# server.pop's failures -> Code (ReceiveMessage, AckMessage, ChangeInvisibleDuration, ...)
_POP: dict[Failure, pb.Code.ValueType] = {
    Failure.GROUP_NOT_FOUND: Code.CONSUMER_GROUP_NOT_FOUND,
    Failure.FORBIDDEN: Code.FORBIDDEN,
    Failure.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    Failure.BAD_REQUEST: Code.BAD_REQUEST,
    Failure.INVALID_RECEIPT: Code.INVALID_RECEIPT_HANDLE,
    Failure.INTERNAL: Code.INTERNAL_SERVER_ERROR,
}


def from_pop(e: PopError) -> pb.Status:
    return status(_POP[e.failure], e.message)
