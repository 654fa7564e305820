"""Send-processor vocabulary: request/response codes, flags, put-status mapping, the response shapes.

Every send response carries msgId/queueId/queueOffset/MSG_REGION/TRACE_ON, errors included (the C++
client reads the send response header without a null check).
"""

from __future__ import annotations

from codec.codes import BROKER_VERSION, RPC_TYPE_RESPONSE
from codec.command import RemotingCommand
from storage.store_types import PutStatus

SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE = 10, 310, 320
SUCCESS, SYSTEM_ERROR, FLUSH_DISK_TIMEOUT = 0, 1, 10
MESSAGE_ILLEGAL, NO_PERMISSION, TOPIC_NOT_EXIST, SUBSCRIPTION_GROUP_NOT_EXIST = 13, 16, 17, 26
MULTI_TAGS_FLAG, TRANSACTION_MASK, TRANSACTION_PREPARED, TRANSACTION_COMMIT = 0x2, 0xC, 0x4, 0x8
V3_4_9 = 121
SYNC_FLUSH_TIMEOUT_S = 5.0

PUT_STATUS_CODES = {
    "PUT_OK": SUCCESS, "FLUSH_DISK_TIMEOUT": 10, "FLUSH_SLAVE_TIMEOUT": 12, "SLAVE_NOT_AVAILABLE": 11,
    "CREATE_MAPEDFILE_FAILED": 1, "CREATE_MAPPED_FILE_FAILED": 1, "MESSAGE_ILLEGAL": 13,
    "PROPERTIES_SIZE_EXCEEDED": 13, "SERVICE_NOT_AVAILABLE": 14, "OS_PAGECACHE_BUSY": 1,
    "WHEEL_TIMER_MSG_ILLEGAL": 13, "WHEEL_TIMER_FLOW_CONTROL": 1, "WHEEL_TIMER_NOT_ENABLE": 1,
}
PROPS_MAX = 32767
PUT_OK = PutStatus.PUT_OK


def ext_fields(msg_id: str = "", queue_id: int = 0, queue_offset: int = 0) -> dict[str, str]:
    return {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


def fail(cmd, code: int, remark: str, queue_id: int = 0):
    if cmd.is_oneway:
        return None
    return cmd.response(code=code, remark=remark, ext_fields=ext_fields("", queue_id, 0))


def ok(cmd, code: int, remark: str | None, ext: dict[str, str]) -> RemotingCommand:
    """`cmd.response(code, remark, ext)` for an ext dict that is already all strings."""
    return RemotingCommand(code, cmd.opaque, RPC_TYPE_RESPONSE, "JAVA", BROKER_VERSION, remark, ext, b"",
                           cmd.serialize_type)


def status_name(status) -> str:
    return getattr(status, "name", None) or str(status)


def put_fail_remark(status, remark: str | None) -> str:
    """A failed put's response remark: the status name, then the store's reason (e.g. the disk is full)."""
    name = status_name(status)
    return f"{name}: {remark}" if remark and remark != name else name


def int_or_zero(v) -> int:
    try:
        return int(v) if v not in (None, "") else 0
    except ValueError:
        return 0


def body_bytes(body) -> bytes:
    if isinstance(body, list):
        return b"".join(bytes(p) for p in body)
    return bytes(body or b"")
