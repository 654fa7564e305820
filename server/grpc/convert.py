"""apache.rocketmq.v2.Message <-> RocketMQ message properties and stored records.

A 5.x message becomes the same properties a 4.x producer would send (TAGS, KEYS, UNIQ_KEY, TRAN_MSG,
__SHARDINGKEY for the message group, PGROUP = the topic as Apache's proxy does, TIMER_DELIVER_MS or
DELAY for a delivery time), so everything after it (the send path, the put hooks, 4.x consumers)
sees one kind of message. A stored record becomes a proto Message with the system properties a 5.x
consumer reads (body digest MD5, message type, timestamps, hosts, queue id/offset).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from codec.codes import SysFlag
from codec.msgid import offset_msg_id
from codec.properties import MessageConst as K
from codec.record import MessageRecord
from server.grpc.status import OK, Code, GrpcError
from server.grpc.v2 import definition_pb2 as pb
from server.grpc.v2 import service_pb2 as spb

SHARDING_KEY = K.SHARDING_KEY
# every key the broker or a 4.x client gives a meaning to: a 5.x client may not set them as user properties
SYSTEM_KEYS = frozenset(v for k, v in vars(K).items() if k.isupper() and isinstance(v, str) and k != "KEY_SEPARATOR")
SYSTEM_KEYS |= {"BORN_HOST", "BORN_TIMESTAMP", "TRACE_CONTEXT", "__RECALL", "RECALL_HANDLE"}
COMPRESSED_FLAG = SysFlag.COMPRESSED
TRANSACTION_PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
MAX_USER_PROPERTIES = 128
RECALL_TAG = "_RECALL_TAG_"


def has_control_reference(s: str) -> bool:
    """A control character other than TAB in `s`: what RocketMQ's proxy refuses in names and values."""
    return any(ord(c) < 32 and c not in "\t" for c in s)


def _has_control(s: str) -> bool:
    """`has_control_reference`, without a per-character loop for the usual text: every character below 32
    is unprintable, so a printable string has none (tests/grpc/test_send_header_fast.py holds them equal)."""
    return not s.isprintable() and has_control_reference(s)


def delay_level_for(delay_ms: int, levels: list[int]) -> int:
    """The delay level (1-based) whose delay is `delay_ms` rounded up to a whole second, else 0:
    a 5.x client's delivery time that lands on a level goes through the level's queue (never early,
    at most 1 s late, the same as a 4.x delay-level send)."""
    for i, level_ms in enumerate(levels):
        if 0 <= level_ms - delay_ms < 1000:
            return i + 1
    return 0


def to_properties(msg: pb.Message, topic: str, now_ms: int, timer_wheel: bool,
                  levels: Sequence[int]) -> tuple[dict[str, str], int]:
    """(properties, sysFlag) of a message a 5.x producer sent; GrpcError for what RocketMQ's proxy rejects."""
    sp = msg.system_properties
    props: dict[str, str] = {}
    user = msg.user_properties  # each read of a map field builds its view: read once
    if user:
        if len(user) > MAX_USER_PROPERTIES:
            raise GrpcError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                            f"too many user properties, max is {MAX_USER_PROPERTIES}")
        for k, v in user.items():
            if k in SYSTEM_KEYS:
                raise GrpcError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
            if not k or _has_control(k) or _has_control(v) or "\x01" in k or "\x02" in v:
                raise GrpcError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                f"property {k!r} has an empty name or control characters")
            props[k] = v
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise GrpcError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or holds '|' or control characters")
        props[K.TAGS] = tag
    keys = sp.keys
    if keys:
        for key in keys:
            if not key.strip() or _has_control(key):
                raise GrpcError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is blank or holds control characters")
        props[K.KEYS] = " ".join(keys)
    message_id = sp.message_id
    if not message_id.strip():
        raise GrpcError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[K.UNIQ_KEY] = message_id
    props[K.PGROUP] = topic  # Apache's proxy: the topic is the transactional checker's group
    mtype = sp.message_type
    sys_flag = COMPRESSED_FLAG if sp.body_encoding == pb.GZIP else 0
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip() or _has_control(group) or len(group.encode()) >= 64:
            raise GrpcError(Code.ILLEGAL_MESSAGE_GROUP, "message group is blank, holds control characters or "
                                                         "is 64 bytes or longer")
        props[SHARDING_KEY] = group
    elif mtype == pb.FIFO:
        raise GrpcError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
    if mtype == pb.TRANSACTION:
        props[K.TRAN_MSG] = "true"
        sys_flag |= TRANSACTION_PREPARED
        if sp.HasField("orphaned_transaction_recovery_duration"):
            secs = sp.orphaned_transaction_recovery_duration.seconds
            if secs > 0:
                props[K.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(secs)
    if sp.HasField("delivery_timestamp"):
        if mtype == pb.TRANSACTION:
            raise GrpcError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message cannot have a "
                                                                       "delivery timestamp")
        ts = sp.delivery_timestamp
        deliver_ms = ts.seconds * 1000 + ts.nanos // 1_000_000
        if timer_wheel:  # the timer hook decides (a time already past is stored for delivery at once)
            props[K.TIMER_DELIVER_MS] = str(deliver_ms)
        elif deliver_ms > now_ms:
            level = delay_level_for(deliver_ms - now_ms, list(levels))
            if level:
                props[K.DELAY] = str(level)
            else:
                raise GrpcError(Code.ILLEGAL_DELIVERY_TIME, "timerWheelEnable is false and the delay "
                                f"{deliver_ms - now_ms} ms is no delay level (levels in ms: {list(levels)})")
    elif mtype == pb.DELAY:
        raise GrpcError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery timestamp")
    if sp.trace_context:
        props["TRACE_CONTEXT"] = sp.trace_context
    return props, sys_flag


def timestamp_ms(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# apache.rocketmq.v2.MessageType values (the proto enum's ValueType, as message_type_of returns them)
MT_NORMAL = pb.NORMAL
MT_FIFO = pb.FIFO
MT_DELAY = pb.DELAY
MT_TRANSACTION = pb.TRANSACTION


def message_type_of(props: dict[str, str]) -> pb.MessageType.ValueType:
    if props.get(K.TRAN_MSG, "").lower() == "true":
        return MT_TRANSACTION
    if SHARDING_KEY in props:
        return MT_FIFO
    if K.TIMER_DELIVER_MS in props or K.DELAY in props or K.TIMER_OUT_MS in props:
        return MT_DELAY
    return MT_NORMAL


def sent_type_of(props: dict[str, str]) -> pb.MessageType.ValueType:
    """The type a send's properties make of a message for the topic type check (Apache 5.1.3's
    TopicMessageType.parseFromMessageProperty, whose order differs from `message_type_of`'s: a FIFO
    message with a delivery time is DELAY)."""
    if props.get(K.TRAN_MSG) == "true":
        return MT_TRANSACTION
    if K.DELAY in props or K.TIMER_DELIVER_MS in props or K.TIMER_DELAY_SEC in props:
        return MT_DELAY
    if SHARDING_KEY in props:
        return MT_FIFO
    return MT_NORMAL


def to_proto(rec: MessageRecord, topic: str, store_host: tuple[str, int]) -> pb.Message:
    """The proto Message of a stored record as consumers see it (receipt handle etc. set by the caller)."""
    props = rec.properties
    body = bytes(rec.body)
    m = pb.Message()
    m.topic.name = topic
    for k, v in props.items():
        if k not in SYSTEM_KEYS:
            m.user_properties[k] = v
    sp = m.system_properties
    tag = props.get(K.TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(K.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    sp.message_id = props.get(K.UNIQ_KEY) or offset_msg_id(*store_host, rec.commitlog_offset)
    # MD5 as Apache's proxy does: the clients disagree on how CRC32 is written (Python "%08X", Node
    # decimal, Java hex unpadded), so a CRC32 digest marks every body corrupt in one of them
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = pb.GZIP if rec.sys_flag & COMPRESSED_FLAG else pb.IDENTITY
    sp.message_type = message_type_of(props)
    sp.born_timestamp.CopyFrom(timestamp_ms(rec.born_timestamp))
    sp.born_host = f"{rec.born_host[0]}:{rec.born_host[1]}"
    sp.store_timestamp.CopyFrom(timestamp_ms(rec.store_timestamp))
    sp.store_host = f"{rec.store_host[0]}:{rec.store_host[1]}"
    deliver = props.get(K.TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp_ms(int(deliver)))
    sp.queue_id = rec.queue_id
    sp.queue_offset = rec.queue_offset
    group = props.get(SHARDING_KEY)
    if group:
        sp.message_group = group
    trace = props.get("TRACE_CONTEXT")
    if trace:
        sp.trace_context = trace
    m.body = body
    return m


def endpoints(host: str, port: int) -> pb.Endpoints:
    scheme = pb.IPv6 if ":" in host else (pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME)
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


RECALL_HANDLE_VERSION = "v1"


def recall_handle(topic: str, broker_name: str, deliver_ms: int, message_id: str) -> str:
    """A scheduled message's recall handle (SendResultEntry.recall_handle): what RecallMessage needs back."""
    raw = " ".join((RECALL_HANDLE_VERSION, topic, broker_name, str(deliver_ms), message_id))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def parse_recall_handle(handle: str) -> tuple[str, str, int, str]:
    """(topic, broker name, delivery time ms, message id); ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(handle.encode() + b"==").decode()
        version, topic, broker, ts, uniq = raw.split(" ")[:5]
        deliver = int(ts)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("recall handle is invalid") from None
    if version != RECALL_HANDLE_VERSION:
        raise ValueError(f"recall handle version {version!r} is not {RECALL_HANDLE_VERSION}")
    return topic, broker, deliver, uniq


def recall_properties(topic: str, deliver_ms: int, message_id: str) -> dict[str, str]:
    """The properties of the marker a recall sends: it deletes the timer entry of `message_id` due at `deliver_ms`."""
    return {K.TIMER_DELIVER_MS: str(deliver_ms), K.TIMER_DEL_UNIQKEY: f"{topic}+{message_id}", K.UNIQ_KEY: message_id,
            K.TAGS: RECALL_TAG}


def sent_ok_response_reference(message_id: str, offset: int, transaction_id: str,
                               recall: str) -> spb.SendMessageResponse:
    """The SendMessageResponse of a one-message request the store took, built field by field ('' = not set):
    the reference `sent_ok_response` agrees with (tests/grpc/test_send_header_fast.py)."""
    entry = spb.SendResultEntry()
    entry.status.CopyFrom(OK)
    entry.message_id = message_id
    entry.offset = offset
    if transaction_id:
        entry.transaction_id = transaction_id
    if recall:
        entry.recall_handle = recall
    return spb.SendMessageResponse(status=OK, entries=[entry])


# that answer serialized once: parsing it back and setting the entry's own fields costs a fraction of
# building the messages (every message-typed field set or passed is a copy)
_ONE_SENT_OK = sent_ok_response_reference("", 0, "", "").SerializeToString()
_parse_send_response = spb.SendMessageResponse.FromString


def sent_ok_response(message_id: str, offset: int, transaction_id: str, recall: str) -> spb.SendMessageResponse:
    """`sent_ok_response_reference` from the serialized template (SendMessage's usual answer)."""
    r = _parse_send_response(_ONE_SENT_OK)
    entry = r.entries[0]
    entry.message_id = message_id
    entry.offset = offset
    if transaction_id:
        entry.transaction_id = transaction_id
    if recall:
        entry.recall_handle = recall
    return r
