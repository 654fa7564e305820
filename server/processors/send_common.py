"""Send-processor vocabulary: request/response codes, flags, put-status mapping, the response shapes.

Every send response carries msgId/queueId/queueOffset/MSG_REGION/TRACE_ON, errors included (the C++
client reads the send response header without a null check).
"""

from __future__ import annotations

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

# A send checked and encoded, ready for the run's put_batch (SendProcessor._prepare_single): a plain tuple on
# this hot path (a NamedTuple costs ~10x a tuple to build), unpacked by name where it is read:
# (record bytes, store topic, store queue id, tagsCode, index keys, deliver delay ms or -1,
#  queue id to answer with, wait for flush / slave)
PreparedSend = tuple[bytes | bytearray, str, int, int, IndexKeys, int, int, bool]
PUT_OK = PutStatus.PUT_OK


def ext_fields(msg_id: str = "", queue_id: int = 0, queue_offset: int = 0) -> dict[str, str]:
    return {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
            _MSG_REGION: DEFAULT_REGION, _TRACE_ON: "true"}


def fail(cmd: RemotingCommand, code: int, remark: str, queue_id: int = 0) -> RemotingCommand | None:
    if cmd.is_oneway:
        return None
    return cmd.response(code=code, remark=remark, ext_fields=ext_fields("", queue_id, 0))


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
