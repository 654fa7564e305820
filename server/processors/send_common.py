"""Send-processor vocabulary: request/response codes, flags, put-status mapping, the send path's
collaborators (`SendDeps`) and what it reads of a connection (`SendConn`), the prepared send, the
response fields and the answers that wait (SYNC_FLUSH, SYNC_MASTER). The preparer (`send`) and the
run builder (`send_run`) both name these, so neither imports the other's module for them.

Every send response carries msgId/queueId/queueOffset/MSG_REGION/TRACE_ON, errors included (the C++
client reads the send response header without a null check): `send_ext` builds them, the one place
(`codec.send_response.SendResponseFrames` writes the same fields as bytes, given `SEND_EXT_EXTRA`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from codec.buffers import Body
from codec.codes import (
    BROKER_VERSION,
    DEFAULT_REGION,
    MQ_VERSION_V3_4_9,
    RPC_TYPE_RESPONSE,
    ResponseCode,
    SysFlag,
)
from codec.command import RemotingCommand
from codec.properties import MessageConst
from storage.store_types import IndexKeys, PutStatus

if TYPE_CHECKING:
    from server.cluster.ha.service import ReplicaAck, ReplicaRole
    from server.config import BrokerConfig
    from server.put_hooks import PutHooks
    from server.topics import TopicManager
    from storage.message_store import MessageStore
    from storage.store_types import PutResult
    from storage.subscription_group import SubscriptionGroupTable

# property names, bound once for the per-message path (codec.properties.MessageConst)
_MSG_REGION = MessageConst.MSG_REGION
_TRACE_ON = MessageConst.TRACE_ON

MULTI_TAGS_FLAG, TRANSACTION_MASK = SysFlag.MULTI_TAGS, SysFlag.TRANSACTION_MASK
TRANSACTION_PREPARED, TRANSACTION_COMMIT = SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE
V3_4_9 = MQ_VERSION_V3_4_9
SYNC_FLUSH_TIMEOUT_S = 5.0

# What a send answers for each store outcome (BrokerController / SendMessageProcessor.handlePutMessageResult).
PUT_STATUS_CODES: dict[PutStatus, ResponseCode] = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_ERROR,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
PROPS_MAX = 32767



@dataclass(frozen=True, slots=True)
class SendDeps:
    """What the send path uses (built by server.processor_wiring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupTable  # retry topics: the group's retryMaxTimes
    hooks: PutHooks  # delay level, timer
    replica: ReplicaRole  # SYNC_MASTER: answer once a slave has the bytes
    levels: Sequence[int]  # messageDelayLevel, ms
    on_put: Callable[[list[str], list[PutResult]], None]  # stored-message counters
    on_put_sizes: Callable[[list[str], list[int]], None]


class SendConn(Protocol):
    """What the send path reads of a connection (remoting's Connection, the gRPC endpoint's stand-in):
    the peer (born host) and per-connection attributes."""

    attrs: dict[str, Any]

    @property
    def remote_addr(self) -> tuple[str, int]: ...


class PreparedSend(NamedTuple):
    """A send checked and encoded, ready for the run's put_batch (`SendPreparer.prepare`). A NamedTuple
    (slotted: no instance dict) so that a run transposes with one `zip(*preps)`; the hot path builds it
    with `tuple.__new__(PreparedSend, (...))` (`new_prepared`): ~2,000 instructions to build and free
    under callgrind, where a plain tuple costs ~1,000 and the generated `PreparedSend(...)` ~3,400
    (bench/RESULTS.md, 2026-11-28/29); the names are worth the difference."""

    record: bytes | bytearray  # the encoded CommitLog record
    topic: str  # store topic (SCHEDULE_TOPIC_XXXX for a delay level, the DLQ, the half topic)
    queue_id: int  # store queue id
    tags_code: int
    keys: IndexKeys
    deliver_delay: int  # ms for a delay level, -1 otherwise
    reply_queue_id: int  # the queue id the response names
    wait: bool  # WAIT: answer once flushed (SYNC_FLUSH) / replicated (SYNC_MASTER)


new_prepared = tuple.__new__  # new_prepared(PreparedSend, (record, topic, ...)): see PreparedSend
PUT_OK = PutStatus.PUT_OK

# what every send response carries after msgId/queueId/queueOffset
SEND_EXT_EXTRA: dict[str, str] = {_MSG_REGION: DEFAULT_REGION, _TRACE_ON: "true"}


def send_ext(msg_id: str = "", queue_id: int = 0, queue_offset: int = 0) -> dict[str, str]:
    """A send response's extFields (SendMessageResponseHeader), success or error."""
    return {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset), **SEND_EXT_EXTRA}


def fail(cmd: RemotingCommand, code: int, remark: str, queue_id: int = 0) -> RemotingCommand | None:
    if cmd.is_oneway:
        return None
    return cmd.response(code=code, remark=remark, ext_fields=send_ext("", queue_id, 0))


def ok(cmd: RemotingCommand, code: int, remark: str | None, ext: dict[str, str]) -> RemotingCommand:
    """`cmd.response(code, remark, ext)` for an ext dict that is already all strings."""
    return RemotingCommand(code, cmd.opaque, RPC_TYPE_RESPONSE, "JAVA", BROKER_VERSION, remark, ext, b"",
                           cmd.serialize_type)


def put_fail_remark(status: PutStatus, remark: str | None) -> str:
    """A failed put's response remark: the status name, then the store's reason (e.g. the disk is full)."""
    name = status.name
    return f"{name}: {remark}" if remark and remark != name else name


def int_or_zero(v: str | None) -> int:
    try:
        return int(v) if v not in (None, "") else 0
    except ValueError:
        return 0


def body_bytes(body: Body) -> bytes:
    if isinstance(body, list | tuple):
        return b"".join(bytes(p) for p in body)
    return bytes(body or b"")


async def answer_when_flushed(cmd: RemotingCommand, pending: list[asyncio.Future[bool]],
                              ext: dict[str, str]) -> RemotingCommand:
    """SYNC_FLUSH with WAIT: the response once the group commit covers the records (FLUSH_DISK_TIMEOUT
    after SYNC_FLUSH_TIMEOUT_S; the message is stored either way)."""
    code, remark = ResponseCode.SUCCESS, None
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.gather(*pending)), SYNC_FLUSH_TIMEOUT_S)
    except TimeoutError:
        code, remark = ResponseCode.FLUSH_DISK_TIMEOUT, "FLUSH_DISK_TIMEOUT"
    return ok(cmd, code, remark, ext)


async def replicated_status(flushed: asyncio.Future[bool] | None,
                            replica: ReplicaAck | Awaitable[ReplicaAck]) -> ReplicaAck:
    """SYNC_MASTER: wait for the flush (if SYNC_FLUSH) and the slaves' ack; (code, remark) of the answer: a
    replica status that is not OK overrides (FLUSH_SLAVE_TIMEOUT 12, SLAVE_NOT_AVAILABLE 11). A future
    `replica` may be shared by several answers, so it is shielded; any other awaitable is this one's own."""
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    if flushed is not None:
        try:
            await asyncio.wait_for(asyncio.shield(flushed), SYNC_FLUSH_TIMEOUT_S)
        except TimeoutError:
            code, remark = ResponseCode.FLUSH_DISK_TIMEOUT, "FLUSH_DISK_TIMEOUT"
    if isinstance(replica, tuple):
        rcode, rremark = replica
    elif isinstance(replica, asyncio.Future):
        rcode, rremark = await asyncio.shield(replica)
    else:
        rcode, rremark = await replica
    if rcode != ResponseCode.SUCCESS:
        code, remark = rcode, rremark
    return code, remark


async def answer_when_replicated(cmd: RemotingCommand, flushed: asyncio.Future[bool] | None,
                                 replica: ReplicaAck | Awaitable[ReplicaAck], ext: dict[str, str]) -> RemotingCommand:
    """SYNC_MASTER, one request: its response once `replicated_status` is known; the message is stored
    either way. The reference of `send_run.answer_run_when_replicated` (one wait for a whole run)."""
    code, remark = await replicated_status(flushed, replica)
    return ok(cmd, code, remark, ext)
