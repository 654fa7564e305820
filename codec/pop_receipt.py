"""Apache RocketMQ 5's pop receipt ("extraInfo", ExtraInfoUtil) and the offset summaries of a POP_MESSAGE
response header, declared once: what a broker hands out with a popped message (the POP_CK property) and
reads back in ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME.

extraInfo = fields joined by MessageConst.KEY_SEPARATOR (one space):
  ckQueueOffset popTime invisibleTime reviveQid topicMark brokerName queueId [queueOffset]
topicMark "0" a normal topic, "1" a pop retry topic; reviveQid POP_ORDER_REVIVE_QUEUE (999) marks an
orderly (FIFO) pop. Apache's client rebuilds it after CHANGE_MESSAGE_INVISIBLETIME from the response
header (popTime, invisibleTime, reviveQid) with ckQueueOffset = the message's queue offset, so a broker
can only rely on popTime + invisibleTime (the time the delivery becomes visible) and the queue/offset.
Apache's proxy appends a ninth field (the commit log offset) in its own gRPC receipt handles.

Response header summaries (each entry `topicMark queueId value`, entries joined by ";"):
  startOffsetInfo  value = the queue's checkpoint start offset
  msgOffsetInfo    value = the popped queue offsets joined by ","
  orderCountInfo   value = how many times the queue's message was handed out before (orderly pops); in
                   Apache 5.x the queueId field may also be `qo<queueId>%<queueOffset>` (one message's count)
A client (or a proxy) reads them keyed `topicMark@queueId` (`parse_offset_info`) and builds each popped
message's extraInfo from them when the broker did not put POP_CK in the record (Apache's brokers do not):
ckQueueOffset = the queue's start offset, queueOffset = the message's (MQClientAPIImpl.processPopResponse).
A message popped from the pop retry topic (`pop_retry_topic`: %RETRY%<group>_<topic>) carries topicMark "1",
and its ACK / CHANGE names that retry topic (ReceiptHandle.getRealTopic).

BATCH_ACK_MESSAGE's JSON body (BatchAckMessageRequestBody / BatchAck): `decode_batch_ack` below.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from codec.codes import RETRY_PREFIX
from codec.errors import CodecError
from codec.fastjson import JsonBody, as_int, as_list, as_obj, as_str, dumps
from codec.properties import MessageConst

SEP = MessageConst.KEY_SEPARATOR
NORMAL_TOPIC_MARK = "0"
RETRY_TOPIC_MARK = "1"
POP_ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: the reviveQid of an orderly pop


class ConsumeInitMode:
    """PopMessageRequestHeader.initMode: where a group new to a queue starts."""

    MIN = 0  # the queue's first offset
    MAX = 1  # the queue's last message (max offset - 1)


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_mark: str
    broker_name: str
    queue_id: int
    queue_offset: int | None  # absent in the 7-field form

    @property
    def visible_ms(self) -> int:
        """When this delivery becomes visible again (the proxy's nextVisibleTime)."""
        return self.pop_time + self.invisible_time

    @property
    def order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    def encode(self) -> str:
        fields = [self.ck_queue_offset, self.pop_time, self.invisible_time, self.revive_qid, self.topic_mark,
                  self.broker_name, self.queue_id]
        if self.queue_offset is not None:
            fields.append(self.queue_offset)
        return SEP.join(str(f) for f in fields)


def parse_extra_info(text: str) -> ExtraInfo:
    """An extraInfo of 7 or more fields (a proxy's ninth and later are ignored); ValueError naming the
    problem otherwise."""
    parts = text.split(SEP)
    if len(parts) < 7:
        raise ValueError(f"extraInfo has {len(parts)} fields, at least 7 expected: {text!r}")
    try:
        return ExtraInfo(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4], parts[5],
                         int(parts[6]), int(parts[7]) if len(parts) > 7 else None)
    except ValueError:
        raise ValueError(f"extraInfo has a field that is not a number: {text!r}") from None


def pop_retry_topic(topic: str, group: str) -> str:
    """KeyBuilder.buildPopRetryTopic: where a pop consumer group's redeliveries of `topic` wait."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_mark(topic: str) -> str:
    """The extraInfo topicMark of a message popped from `topic` (a retry topic's: "1")."""
    return RETRY_TOPIC_MARK if topic.startswith(RETRY_PREFIX) else NORMAL_TOPIC_MARK


def offset_info_key(topic: str, queue_id: int) -> str:
    """The `topicMark@queueId` key of a popped message's entry in a parsed offset summary."""
    return f"{topic_mark(topic)}@{queue_id}"


def order_count_key(topic: str, queue_id: int, queue_offset: int) -> str:
    """The per-message key of a parsed orderCountInfo (`topicMark@qo<queueId>%<queueOffset>`)."""
    return f"{topic_mark(topic)}@qo{queue_id}%{queue_offset}"


def parse_offset_info(text: str | None) -> dict[str, str]:
    """A startOffsetInfo / msgOffsetInfo / orderCountInfo header as `topicMark@queueId` -> value (empty for
    none); CodecError for an entry that is not three fields."""
    out: dict[str, str] = {}
    for entry in (text or "").split(";"):
        if not entry:
            continue
        parts = entry.split(SEP)
        if len(parts) != 3:
            raise CodecError(f"offset info entry {entry!r} is not `topicMark queueId value`")
        out[f"{parts[0]}@{parts[1]}"] = parts[2]
    return out


def offset_info_entry(retry: bool, queue_id: int, value: str) -> str:
    """One `topicMark queueId value` entry of startOffsetInfo / msgOffsetInfo / orderCountInfo."""
    return SEP.join((RETRY_TOPIC_MARK if retry else NORMAL_TOPIC_MARK, str(queue_id), value))


def join_offset_info(entries: list[str]) -> str:
    return ";".join(entries)


# ---- BATCH_ACK_MESSAGE's body (BatchAckMessageRequestBody: {"brokerName", "acks": [BatchAck...]}) ------------
@dataclass(frozen=True, slots=True)
class BatchAck:
    """One BatchAck (fastjson short names c, t, r, so, q, rq, pt, it, b; long names accepted too): the
    acked queue offsets are start_offset + each set bit of the bitset (java.util.BitSet.toByteArray,
    little-endian, base64 in the JSON)."""

    consumer_group: str
    topic: str
    retry: str  # "1": a pop retry topic
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]

    @property
    def visible_ms(self) -> int:
        return self.pop_time + self.invisible_time


def _bits(raw: Any) -> list[int]:
    if raw is None:
        return []
    data = base64.b64decode(raw, validate=True) if isinstance(raw, str) else bytes(as_int(b, "bitSet") & 0xFF for b in raw)
    return [i * 8 + j for i, byte in enumerate(data) for j in range(8) if byte >> j & 1]


def _field(d: dict[str, Any], short: str, long: str) -> Any:
    return d[short] if short in d else d.get(long)


def decode_batch_ack(body: JsonBody) -> tuple[str, list[BatchAck]]:
    """(brokerName, acks); CodecError for a body that is not one."""
    d = as_obj(body, "BatchAckMessageRequestBody")
    acks = []
    for a in as_list(d, "acks"):
        if not isinstance(a, dict):
            raise CodecError("BatchAckMessageRequestBody: an ack is not an object")
        start = as_int(_field(a, "so", "startOffset"), "startOffset")
        try:
            bits = _bits(_field(a, "b", "bitSet"))
        except (ValueError, TypeError) as e:
            raise CodecError(f"BatchAckMessageRequestBody: bad bitSet: {e}") from None
        acks.append(BatchAck(as_str(_field(a, "c", "consumerGroup"), "consumerGroup"),
                             as_str(_field(a, "t", "topic"), "topic"), as_str(_field(a, "r", "retry"), "retry"),
                             start, as_int(_field(a, "q", "queueId"), "queueId"),
                             as_int(_field(a, "rq", "reviveQueueId"), "reviveQueueId"),
                             as_int(_field(a, "pt", "popTime"), "popTime"),
                             as_int(_field(a, "it", "invisibleTime"), "invisibleTime"),
                             tuple(start + i for i in bits)))
    return as_str(d.get("brokerName"), "brokerName"), acks


def encode_batch_ack(broker_name: str, acks: list[BatchAck]) -> bytes:
    out = []
    for a in acks:
        bits = bytearray()
        for off in a.offsets:
            i = off - a.start_offset
            while len(bits) <= i // 8:
                bits.append(0)
            bits[i // 8] |= 1 << (i % 8)
        out.append({"c": a.consumer_group, "t": a.topic, "r": a.retry, "so": a.start_offset, "q": a.queue_id,
                    "rq": a.revive_qid, "pt": a.pop_time, "it": a.invisible_time,
                    "b": base64.b64encode(bytes(bits)).decode()})
    return dumps({"acks": out, "brokerName": broker_name})
