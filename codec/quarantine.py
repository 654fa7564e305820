"""The quarantine copy of a scheduled record that could not be converted or delivered (sans-io).

`build_quarantine_record(raw, reason, stage, origin_offset, max_size)` -> (record, index keys): the
stored record (a schedule or timer record, as it is in the CommitLog) re-encoded for
rmq_sys_SCHEDULE_QUARANTINE queue 0 with its body, flags, hosts and properties, plus
QUARANTINE_REASON, QUARANTINE_STAGE (`level` / `timer_enqueue` / `timer_dequeue`),
QUARANTINE_ORIGIN_TOPIC, QUARANTINE_ORIGIN_OFFSET (its CommitLog offset) and QUARANTINE_ORIGIN_MSG_ID
(its offset msgId: `delaymq message --id` shows the original). It always fits:
- when the properties and the additions exceed 32,767 bytes, the body is the whole stored record
  (QUARANTINE_BODY=record: its own body and properties, byte for byte) and the properties keep the
  keys that identify the message (REAL_TOPIC, REAL_QID, UNIQ_KEY, KEYS, TAGS, DELAY, TIMER_*),
  each value cut to 256 characters;
- a copy still over `max_size` (maxMessageSize: a record within a few hundred bytes of it) keeps an
  empty body and says how long the body was (QUARANTINE_BODY_DROPPED); the original stays readable
  by its QUARANTINE_ORIGIN_MSG_ID until retention deletes its CommitLog segment;
- bytes that are not a well-formed record at all become the body of a fresh record.
The index keys are the record's KEYS and UNIQ_KEY, so QUERY_MESSAGE on the quarantine topic finds it.
"""

from __future__ import annotations

from codec.buffers import BytesLike
from codec.codes import SCHEDULE_QUARANTINE_TOPIC, SysFlag
from codec.errors import CodecError
from codec.msgid import offset_msg_id
from codec.properties import MessageConst as K
from codec.properties import index_keys, properties_to_string
from codec.record import MAX_PROPERTIES_BYTES, MessageRecord, decode_record, encode_record

REASON_MAX = 512
_KEEP = (K.REAL_TOPIC, K.REAL_QID, K.UNIQ_KEY, K.KEYS, K.TAGS, K.DELAY, K.TIMER_DELIVER_MS, K.TIMER_DELAY_SEC,
         K.TIMER_DELAY_MS, K.TIMER_OUT_MS, K.TIMER_ROLL_TIMES, K.TIMER_DEL_UNIQKEY)
_VALUE_MAX = 256


def _props_len(props: dict[str, str]) -> int:
    return len(properties_to_string(props).encode("utf-8", "replace"))


def build_quarantine_record(raw: BytesLike, reason: str, stage: str, origin_offset: int,
                            max_size: int) -> tuple[bytearray, tuple[str, ...]]:
    reason = reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 3] + "..."
    try:
        rec, _ = decode_record(bytes(raw))
        origin_topic = rec.topic
        origin_id = offset_msg_id(rec.store_host[0], rec.store_host[1], origin_offset)
    except (CodecError, ValueError):
        rec = MessageRecord(topic="", body=bytes(raw), properties={})
        origin_topic = origin_id = ""
        reason = f"{reason}; not a well-formed record: its bytes are the body"
    add = {K.QUARANTINE_REASON: reason, K.QUARANTINE_STAGE: stage, K.QUARANTINE_ORIGIN_TOPIC: origin_topic,
           K.QUARANTINE_ORIGIN_OFFSET: str(origin_offset), K.QUARANTINE_ORIGIN_MSG_ID: origin_id}
    props = {**rec.properties, **add}
    if _props_len(props) > MAX_PROPERTIES_BYTES:  # no room for the additions: the body carries everything
        kept = {k: v[:_VALUE_MAX] for k, v in rec.properties.items() if k in _KEEP}
        props = {**kept, **add, K.QUARANTINE_BODY: "record"}
        rec.body = bytes(raw)
        rec.sys_flag &= ~SysFlag.COMPRESSED
    rec.topic, rec.queue_id, rec.properties = SCHEDULE_QUARANTINE_TOPIC, 0, props
    rec.queue_offset = rec.commitlog_offset = rec.store_timestamp = 0
    out = encode_record(rec)
    if len(out) > max_size:
        props[K.QUARANTINE_BODY_DROPPED] = str(len(rec.body))
        rec.body = b""
        out = encode_record(rec)
    return out, index_keys(props.get(K.KEYS), props.get(K.UNIQ_KEY))


__all__ = ["REASON_MAX", "build_quarantine_record"]
