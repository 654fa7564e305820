"""Wire-level constants and small helpers shared by the client rooms.

Request codes are kept here as plain ints (the values are fixed by RocketMQ 4.x), so the client
depends only on ``codec.command.RemotingCommand`` and the codec helpers for their shapes.
"""

from __future__ import annotations

import json
import re

from codec.command import RemotingCommand

# request codes (remoting-protocol.md §6.1)
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_MESSAGE = 12
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
UPDATE_AND_CREATE_TOPIC = 17
GET_BROKER_RUNTIME_INFO = 28
SEARCH_OFFSET_BY_TIMESTAMP = 29
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
GET_EARLIEST_MSG_STORETIME = 32
VIEW_MESSAGE_BY_ID = 33
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
CONSUMER_SEND_MSG_BACK = 36
GET_CONSUMER_LIST_BY_GROUP = 38
NOTIFY_CONSUMER_IDS_CHANGED = 40
LOCK_BATCH_MQ = 41
UNLOCK_BATCH_MQ = 42
GET_ROUTEINFO_BY_TOPIC = 105
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320

# response codes (§6.3)
SUCCESS = 0
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3
FLUSH_DISK_TIMEOUT = 10
SLAVE_NOT_AVAILABLE = 11
FLUSH_SLAVE_TIMEOUT = 12
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22

# pull sysFlag bits
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4

# message sysFlag bits
COMPRESSED_FLAG = 0x1

DEFAULT_TOPIC = "TBW102"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
CLIENT_VERSION = 409  # V4_9_8: what a 4.9.8 Java client announces

PERM_READ = 4
PERM_WRITE = 2

_UNQUOTED_KEY = re.compile(r'([{,])\s*(-?\d+)\s*:')


class MQClientError(Exception):
    """A request was answered with a non-success code (or could not be made at all)."""

    def __init__(self, code: int, remark: str | None, what: str = "") -> None:
        self.code = code
        self.remark = remark or ""
        text = self.remark or "request failed"
        if code >= 0:
            text = f"{text} (code {code})"
        super().__init__(f"{what}: {text}" if what else text)


def request(code: int, ext_fields: dict | None = None, body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext_fields or {}).items()}, body)
    cmd.version = CLIENT_VERSION
    return cmd


def loads_lenient(body: bytes | memoryview | str) -> object:
    """Parse a fastjson body, accepting the unquoted numeric map keys a stock namesrv may write."""
    text = body if isinstance(body, str) else bytes(body).decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_UNQUOTED_KEY.sub(r'\1"\2":', text))


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


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
