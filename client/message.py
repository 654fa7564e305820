"""Messages as the client sees them: what a producer sends, what a consumer receives, send results."""

from __future__ import annotations

import enum
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from codec.buffers import Body
from codec.codes import ResponseCode
from codec.msgid import offset_msg_id
from codec.properties import MessageConst
from codec.record import MessageRecord, decode_record

from ._wire import COMPRESSED_FLAG

# property keys (message-format.md §9): the client's short names for codec.properties.MessageConst
TAGS = MessageConst.TAGS
KEYS = MessageConst.KEYS
UNIQ_KEY = MessageConst.UNIQ_KEY
WAIT = MessageConst.WAIT
DELAY = MessageConst.DELAY
REAL_TOPIC = MessageConst.REAL_TOPIC
REAL_QID = MessageConst.REAL_QID
RETRY_TOPIC = MessageConst.RETRY_TOPIC
ORIGIN_MESSAGE_ID = MessageConst.ORIGIN_MESSAGE_ID
MIN_OFFSET = MessageConst.MIN_OFFSET
MAX_OFFSET = MessageConst.MAX_OFFSET
TIMER_DELIVER_MS = MessageConst.TIMER_DELIVER_MS
TIMER_DELAY_MS = MessageConst.TIMER_DELAY_MS
TIMER_DELAY_SEC = MessageConst.TIMER_DELAY_SEC
TIMER_OUT_MS = MessageConst.TIMER_OUT_MS
TIMER_DEL_UNIQKEY = MessageConst.TIMER_DEL_UNIQKEY


class MessageQueueJson(TypedDict):
    """fastjson's MessageQueue (LOCK_BATCH_MQ bodies, admin answers)."""

    brokerName: str
    queueId: int
    topic: str


class MessageJson(TypedDict):
    """A received message as the CLI prints it (``delaymq consume --output json``, ``message view``)."""

    topic: str
    msgId: str
    offsetMsgId: str
    queueId: int
    queueOffset: int
    tags: str | None
    keys: list[str]
    bornTimestamp: int
    storeTimestamp: int
    reconsumeTimes: int
    properties: dict[str, str]
    body: str  # UTF-8 text, else the hex of the bytes


@dataclass(slots=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __hash__(self) -> int:
        return hash((self.topic, self.broker_name, self.queue_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageQueue) and (self.topic, self.broker_name, self.queue_id) == (
            other.topic, other.broker_name, other.queue_id)

    def __lt__(self, other: MessageQueue) -> bool:
        return (self.topic, self.broker_name, self.queue_id) < (other.topic, other.broker_name, other.queue_id)

    def to_json(self) -> MessageQueueJson:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MessageQueue:
        """From decoded JSON as it arrives (queueId may be a string)."""
        return cls(d["topic"], d["brokerName"], int(d["queueId"]))


@dataclass(slots=True)
class Message:
    """A message to send. ``delay_level`` (1..18), ``deliver_at_ms`` (epoch ms), ``delay_ms`` and
    ``delay_sec`` map to DELAY, TIMER_DELIVER_MS, TIMER_DELAY_MS and TIMER_DELAY_SEC."""

    topic: str
    body: bytes = b""
    tags: str | None = None
    keys: str | list[str] | tuple[str, ...] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_at_ms: int | None = None
    delay_ms: int | None = None
    delay_sec: int | None = None
    flag: int = 0

    def build_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[TAGS] = self.tags
        if self.keys:
            props[KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level:
            props[DELAY] = str(int(self.delay_level))
        if self.deliver_at_ms is not None:
            props[TIMER_DELIVER_MS] = str(int(self.deliver_at_ms))
        if self.delay_ms is not None:
            props[TIMER_DELAY_MS] = str(int(self.delay_ms))
        if self.delay_sec is not None:
            props[TIMER_DELAY_SEC] = str(int(self.delay_sec))
        return props


class SendStatus(enum.Enum):
    """Java's SendStatus, each valued by the send response code it stands for."""

    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str  # UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # broker's offset msgId(s)
    queue: MessageQueue
    queue_offset: int


@dataclass(slots=True)
class MessageExt:
    """A received message (decoded stored record)."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    offset_msg_id: str
    stored_topic: str  # topic as stored (e.g. %RETRY%group); ``topic`` is restored from RETRY_TOPIC
    broker_name: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        k = self.properties.get(KEYS)
        return k.split(" ") if k else []

    @property
    def msg_id(self) -> str:
        return self.properties.get(UNIQ_KEY) or self.offset_msg_id

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(DELAY, "0") or 0)

    def to_dict(self) -> MessageJson:
        try:
            body: str = self.body.decode("utf-8")
        except UnicodeDecodeError:
            body = self.body.hex()
        return {
            "topic": self.topic, "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
            "queueId": self.queue_id, "queueOffset": self.queue_offset, "tags": self.tags,
            "keys": self.keys, "bornTimestamp": self.born_timestamp, "storeTimestamp": self.store_timestamp,
            "reconsumeTimes": self.reconsume_times, "properties": self.properties, "body": body,
        }


def _to_ext(rec: MessageRecord, broker_name: str) -> MessageExt:
    props = dict(rec.properties or {})
    body = bytes(rec.body)
    if rec.sys_flag & COMPRESSED_FLAG:
        try:
            body = zlib.decompress(body)
        except zlib.error:
            pass  # keep the raw bytes rather than dropping the message
    stored_topic = rec.topic
    topic = props.get(RETRY_TOPIC) or stored_topic
    store_ip, store_port = rec.store_host
    return MessageExt(
        topic=topic, body=body, properties=props, queue_id=rec.queue_id, queue_offset=rec.queue_offset,
        commitlog_offset=rec.commitlog_offset, sys_flag=rec.sys_flag, flag=rec.flag,
        born_timestamp=rec.born_timestamp, born_host=rec.born_host,
        store_timestamp=rec.store_timestamp, store_host=(store_ip, store_port),
        reconsume_times=rec.reconsume_times,
        offset_msg_id=offset_msg_id(store_ip, store_port, rec.commitlog_offset),
        stored_topic=stored_topic, broker_name=broker_name,
    )


def decode_messages(body: Body, broker_name: str = "") -> list[MessageExt]:
    """Decode concatenated stored records (pull / view / query payload: a command's body, which is
    bytes as decoded from the wire; a body assembled from pieces is joined first)."""
    out: list[MessageExt] = []
    if isinstance(body, memoryview):
        buf = body
    elif isinstance(body, bytes | bytearray):
        buf = memoryview(body)
    else:
        buf = memoryview(b"".join(body))
    pos, end = 0, len(buf)
    while pos < end:
        rec, pos = decode_record(buf, pos)
        out.append(_to_ext(rec, broker_name))
    return out
