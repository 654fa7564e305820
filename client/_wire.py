"""Wire-level names and small helpers shared by the client rooms.

Codes, flags and fixed names come from `codec.codes` and JSON bodies go through `codec.bodies`
(fastjson-compatible, lenient on unquoted integer keys), so client and broker agree by construction.
"""

from __future__ import annotations

from typing import Any

from codec.codes import CLIENT_INNER_PRODUCER_GROUP as CLIENT_INNER_PRODUCER
from codec.codes import (
    DEFAULT_TOPIC,
    DLQ_PREFIX,
    MQ_VERSION,
    RETRY_PREFIX,
    PermName,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SysFlag,
)
from codec.command import RemotingCommand
from codec.fastjson import dumps, loads_lenient

__all__ = ["CLIENT_INNER_PRODUCER", "DEFAULT_TOPIC", "DLQ_PREFIX", "RETRY_PREFIX", "dumps", "loads_lenient"]

# request codes (remoting-protocol.md §6.1)
SEND_MESSAGE = RequestCode.SEND_MESSAGE
PULL_MESSAGE = RequestCode.PULL_MESSAGE
QUERY_MESSAGE = RequestCode.QUERY_MESSAGE
QUERY_CONSUMER_OFFSET = RequestCode.QUERY_CONSUMER_OFFSET
UPDATE_CONSUMER_OFFSET = RequestCode.UPDATE_CONSUMER_OFFSET
UPDATE_AND_CREATE_TOPIC = RequestCode.UPDATE_AND_CREATE_TOPIC
GET_BROKER_RUNTIME_INFO = RequestCode.GET_BROKER_RUNTIME_INFO
PROMOTE_BROKER = RequestCode.PROMOTE_BROKER
SEARCH_OFFSET_BY_TIMESTAMP = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
GET_MAX_OFFSET = RequestCode.GET_MAX_OFFSET
GET_MIN_OFFSET = RequestCode.GET_MIN_OFFSET
GET_EARLIEST_MSG_STORETIME = RequestCode.GET_EARLIEST_MSG_STORETIME
VIEW_MESSAGE_BY_ID = RequestCode.VIEW_MESSAGE_BY_ID
HEART_BEAT = RequestCode.HEART_BEAT
CHECK_CLIENT_CONFIG = RequestCode.CHECK_CLIENT_CONFIG
UNREGISTER_CLIENT = RequestCode.UNREGISTER_CLIENT
CONSUMER_SEND_MSG_BACK = RequestCode.CONSUMER_SEND_MSG_BACK
GET_CONSUMER_LIST_BY_GROUP = RequestCode.GET_CONSUMER_LIST_BY_GROUP
NOTIFY_CONSUMER_IDS_CHANGED = RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
LOCK_BATCH_MQ = RequestCode.LOCK_BATCH_MQ
UNLOCK_BATCH_MQ = RequestCode.UNLOCK_BATCH_MQ
GET_ROUTEINFO_BY_TOPIC = RequestCode.GET_ROUTEINFO_BY_TOPIC
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2
SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE

# response codes (§6.3)
SUCCESS = ResponseCode.SUCCESS
SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
REQUEST_CODE_NOT_SUPPORTED = ResponseCode.REQUEST_CODE_NOT_SUPPORTED
FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE
FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT
TOPIC_NOT_EXIST = ResponseCode.TOPIC_NOT_EXIST
PULL_NOT_FOUND = ResponseCode.PULL_NOT_FOUND
PULL_RETRY_IMMEDIATELY = ResponseCode.PULL_RETRY_IMMEDIATELY
PULL_OFFSET_MOVED = ResponseCode.PULL_OFFSET_MOVED
QUERY_NOT_FOUND = ResponseCode.QUERY_NOT_FOUND

PULL_COMMIT_OFFSET = PullSysFlag.COMMIT_OFFSET
PULL_SUSPEND = PullSysFlag.SUSPEND
PULL_SUBSCRIPTION = PullSysFlag.SUBSCRIPTION
COMPRESSED_FLAG = SysFlag.COMPRESSED
PERM_READ = PermName.READ
PERM_WRITE = PermName.WRITE

# a decoded JSON object as a broker sent it (admin answers): read with .get, its values unchecked
JsonObject = dict[str, Any]

CLIENT_VERSION = MQ_VERSION  # what a 4.9.8 Java client announces
CLIENT_LANGUAGE = "PYTHON"  # LanguageCode.PYTHON: brokers and mqadmin consumerConnection show it


# MQClientError's code when no broker answered (MQClientException's responseCode -1): no ResponseCode
NO_CODE = -1


class MQClientError(Exception):
    """A request was answered with a non-success code (or could not be made at all)."""

    def __init__(self, code: int, remark: str | None, what: str = "") -> None:
        self.code = code
        self.remark = remark or ""
        text = self.remark or "request failed"
        if code != NO_CODE:
            text = f"{text} (code {code})"
        super().__init__(f"{what}: {text}" if what else text)


def request(code: int, ext_fields: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext_fields or {}).items()}, body)
    cmd.version = CLIENT_VERSION
    cmd.language = CLIENT_LANGUAGE
    return cmd


def describe(e: BaseException) -> str:
    """A short reason for a connection-level failure."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    cause = e.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    if isinstance(e, TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__


def check(resp: RemotingCommand, what: str, ok: tuple[int, ...] = (SUCCESS,)) -> RemotingCommand:
    if resp.code not in ok:
        raise MQClientError(resp.code, resp.remark, what)
    return resp
