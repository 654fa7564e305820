"""What apache.rocketmq.v2.MessagingService needs of the brokers behind it, declared once.

`server.grpc.service.MessagingService` is the gRPC face (authentication, validation, status mapping, protobuf
conversion, telemetry settings) and exists once; it reaches messages only through a `MessagingBackend`:

- `server.grpc.local_backend.LocalBackend`: the broker's own store, pop engine and send path (the in-broker
  endpoint, `grpcListenPort`);
- `server.proxy.backend.RemoteBackend`: brokers found through the name server, reached over 4.x remoting
  (`delaymq-proxy`).

Failures cross as `server.grpc.status.GrpcError` (a proto Code with a message) or `server.pop.model.PopError`;
the service turns either into the RPC's status. Values crossing are named records, never protobuf requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeAlias

from codec.record import MessageRecord
from server.grpc.telemetry import SessionBackend
from server.grpc.v2 import definition_pb2 as pb

MessageType: TypeAlias = "pb.MessageType.ValueType"
ALL_TYPES: tuple[MessageType, ...] = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
# a topic's message.type attribute (server.topic_attributes) -> the one type its queues accept
TYPE_OF_ATTRIBUTE = {pb.MessageType.Name(t): t for t in ALL_TYPES}


def accepted_types(message_type: str) -> tuple[MessageType, ...]:
    """Every type, unless the topic's message.type attribute names one (as Apache's proxy routes)."""
    t = TYPE_OF_ATTRIBUTE.get(message_type)
    return ALL_TYPES if t is None else (t,)


@dataclass(frozen=True, slots=True)
class RouteQueue:
    """One queue of a topic's route: its broker and what it allows."""

    broker_name: str
    queue_id: int
    readable: bool
    writable: bool


@dataclass(frozen=True, slots=True)
class TopicRoute:
    queues: list[RouteQueue]
    accepts: tuple[MessageType, ...]  # the message types the topic's queues take (its message.type attribute)


class Outgoing(NamedTuple):
    """One message of a SendMessage, as the remoting send path takes it (`convert.to_properties`). A NamedTuple
    (immutable, no instance dict) rather than a frozen dataclass: one per message, built without a
    `object.__setattr__` per field."""

    props: dict[str, str]
    sys_flag: int
    body: bytes
    born_ms: int


class Sent(NamedTuple):
    """A send's answer: a remoting response code (SUCCESS or why not) and where the message went (a
    NamedTuple, as `Outgoing`)."""

    code: int
    remark: str
    broker_name: str = ""
    queue_offset: int = 0
    transaction_id: str = ""  # a half message's: what EndTransaction names


@dataclass(frozen=True, slots=True)
class Received:
    """One message popped: its record, the receipt that acks it, its delivery attempt (1 = first)."""

    rec: MessageRecord
    handle: str
    attempt: int
    invisible_ms: int
    store_host: tuple[str, int]


@dataclass(frozen=True, slots=True)
class Pulled:
    records: list[MessageRecord]
    next_offset: int
    store_host: tuple[str, int]
    offset_illegal: str = ""  # non-empty: the asked offset is out of range (why)


@dataclass(frozen=True, slots=True)
class Filter:
    """A receive's / pull's filter as the client wrote it: TAG or SQL92 with its expression."""

    sql: bool
    expression: str


class MessagingBackend(SessionBackend, Protocol):
    """Beside what Telemetry uses (`telemetry.SessionBackend`: sessions, max body size, a group's policy)."""

    delay_levels: Sequence[int]  # the brokers' messageDelayLevel, ms
    timer_enabled: bool  # a delivery time goes as TIMER_DELIVER_MS (else: the nearest delay level)

    async def route(self, topic: str) -> TopicRoute: ...

    async def message_types(self, topic: str) -> tuple[MessageType, ...]:
        """The message types `topic` accepts (`accepted_types` of its message.type attribute), as its route says."""
        ...

    async def assignment(self, topic: str, group: str) -> tuple[list[str], tuple[MessageType, ...]]:
        """The brokers a simple consumer of `group` receives `topic` from, and the topic's message types."""
        ...

    async def send(self, topic: str, batch: list[Outgoing], peer: tuple[str, int]) -> list[Sent]: ...

    async def end_transaction(self, topic: str, transaction_id: str, message_id: str, commit: bool) -> None: ...

    async def recall(self, topic: str, broker_name: str, deliver_ms: int, message_id: str,
                     peer: tuple[str, int]) -> None: ...

    async def receive(self, group: str, topic: str, broker_name: str, batch: int, invisible_ms: int,
                      accept: Filter, deadline: float) -> list[Received]:
        """`deadline`: loop time to long-poll until when nothing is there."""
        ...

    async def ack(self, group: str, topic: str, handle: str) -> None: ...

    async def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str: ...

    async def forward_to_dlq(self, group: str, topic: str, handle: str, message_id: str,
                             max_attempts: int) -> None: ...

    async def update_offset(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int) -> None: ...

    async def get_offset(self, group: str, topic: str, broker_name: str, queue_id: int) -> int:
        """The group's committed offset; GrpcError OFFSET_NOT_FOUND when it has none."""
        ...

    async def query_offset(self, topic: str, broker_name: str, queue_id: int, policy: int, at_ms: int) -> int:
        """policy: pb.BEGINNING / pb.END / pb.TIMESTAMP (then `at_ms`)."""
        ...

    async def pull(self, group: str, topic: str, broker_name: str, queue_id: int, offset: int, batch: int,
                   accept: Filter, deadline: float) -> Pulled: ...
