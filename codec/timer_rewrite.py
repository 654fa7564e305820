"""The timer wheel's dequeue conversion (TimerMessageStore.convert + convertMessage) for a whole batch.

`edit_properties(pb, edits)`: set some properties on a stored properties string, editing the bytes
(replace a key's value in place, append a missing key at the end). The result is byte-identical to
`properties_to_string(parse_properties(pb) | edits).encode()`; strings where a byte edit could differ
from that round trip (not UTF-8, duplicate keys, empty or separator-less segments, a trailing
separator) take that dict path instead.

`build_timer_deliveries(raws, rolls, exact_ms, enqueue_ms, dequeue_ms, cancel)`: for each stored
rmq_sys_wheel_timer record the record to put and where (a `TimerDelivery`):
- final delivery: REAL_TOPIC / REAL_QID, TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS set, tagsCode and
  the index keys (KEYS split on spaces, then UNIQ_KEY);
- roll (a parked unit): back to rmq_sys_wheel_timer queue 0 with TIMER_ROLL_TIMES + 1,
  TIMER_DELIVER_MS = the exact deliver ms, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS;
- MISSING (record gone), CANCELLED (its `REAL_TOPIC+UNIQ_KEY` is in `cancel`), SKIPPED (a delete
  marker or no REAL_TOPIC: never delivered).
Head and body are copied as stored; only the topic field and the properties change (no decode of
the record, bytes.find on the properties).

`timer_put_run(deliveries)`: the converted records as one put run (`codec.put_run`) for the store.

`timer_delivery_reference`: the slow reference of one record's conversion (parse the properties into a
dict, edit, serialise, `rewrite_for_delivery`), as the dequeue did it per message before the batch
builder. Nothing hot calls it; tests/scheduler/timer/test_timer_rewrite.py checks the two agree.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

from codec.buffers import BytesLike
from codec.codes import TIMER_TOPIC
from codec.errors import CodecError
from codec.properties import (
    MessageConst,
    index_keys,
    parse_properties,
    properties_to_string,
    property_token,
    value_span,
)
from codec.put_run import PutRun, put_run
from codec.record import MAX_PROPERTIES_BYTES, POS_QUEUE_ID, POS_TOTAL, read_properties_bytes, topic_field
from codec.record_rewrite import _qid, _topic, rewrite_for_delivery, tags_code, tail_span
from codec.tags import tags_hash

MISSING, SKIPPED, CANCELLED = 0, 1, 2


@dataclass(slots=True)
class TimerDelivery:
    """One converted timer record: the record to put (topic field and properties rewritten, TOTALSIZE and
    QUEUEID set) and where it goes: the real topic and queue with its tagsCode and index keys, or for a
    roll rmq_sys_wheel_timer / 0 with tagsCode 0 and no keys. `keys`: bytes from the batch builder, str
    from the reference."""

    record: bytearray
    topic: str
    queue_id: int
    tags_code: int
    keys: tuple[bytes, ...] | tuple[str, ...]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NON_SEPARATORS = bytes(b for b in range(256) if b not in (1, 2))
_ALTERNATING = b"\x01\x02" * (MAX_PROPERTIES_BYTES // 2 + 1)

# the property names this conversion reads and writes, as bytes (the names are MessageConst's)
REAL_TOPIC, REAL_QID = MessageConst.REAL_TOPIC.encode(), MessageConst.REAL_QID.encode()
TAGS, KEYS, UNIQ_KEY = MessageConst.TAGS.encode(), MessageConst.KEYS.encode(), MessageConst.UNIQ_KEY.encode()
TIMER_DEL_UNIQKEY = MessageConst.TIMER_DEL_UNIQKEY.encode()
TIMER_ROLL_TIMES = MessageConst.TIMER_ROLL_TIMES.encode()
TIMER_DELIVER_MS = MessageConst.TIMER_DELIVER_MS.encode()
TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS = MessageConst.TIMER_ENQUEUE_MS.encode(), MessageConst.TIMER_DEQUEUE_MS.encode()
_APPEND_TIMES = property_token(TIMER_ENQUEUE_MS)  # b"\x02TIMER_ENQUEUE_MS\x01"
_APPEND_DEQUEUE = property_token(TIMER_DEQUEUE_MS)
_ROLL_TOPIC_FIELD = topic_field(TIMER_TOPIC)


def canonical_map(pb: bytes) -> dict[bytes, bytes] | None:
    """The properties as {name: value} bytes when pb is canonical (UTF-8; separators alternate
    \x01, \x02, ..., \x01, i.e. every segment is `name\x01value` and there is no trailing one; no
    empty name, value or segment; no duplicate name), i.e. when a byte edit equals the parse → dict →
    serialise round trip. None otherwise."""
    if not pb.isascii():
        try:
            pb.decode("utf-8")
        except UnicodeDecodeError:
            return None
    sep = pb.translate(None, _NON_SEPARATORS)
    if not len(sep) & 1 or not _ALTERNATING.startswith(sep):
        return None
    parts = pb.replace(b"\x01", b"\x02").split(b"\x02")
    if b"" in parts:
        return None
    it = iter(parts)
    d = dict(zip(it, it))  # noqa: B905 - len(parts) is even: an odd number of separators
    return d if len(d) << 1 == len(parts) else None


Edits = Iterable[tuple[bytes, bytes]]


def _edit_canonical(pb: bytes, edits: Edits) -> bytes:
    text = b"\x02" + pb  # a leading separator: tokens match at key boundaries only
    for name, value in edits:
        span = value_span(text, property_token(name))
        if span is None:
            text = text + b"\x02" + name + b"\x01" + value
        else:
            text = text[:span[0]] + value + text[span[1]:]
    return text[1:]


def _edit_dict(pb: bytes, edits: Edits) -> bytes:
    props = parse_properties(pb)
    for name, value in edits:
        props[name.decode()] = value.decode()
    return properties_to_string(props).encode()


def edit_properties(pb: bytes, edits: Edits) -> bytes:
    """`edits`: (name bytes, value bytes) pairs applied in order (a missing name is appended).
    Byte-identical to `properties_to_string(parse_properties(pb) | edits).encode()`."""
    if canonical_map(pb) is not None:
        return _edit_canonical(pb, edits)
    return _edit_dict(pb, edits)


def _int(b: bytes) -> int:
    """int() of a property value as the dict path does it on the decoded str (raises ValueError)."""
    return int(b) if b.isascii() else int(b.decode("utf-8", "replace"))


def _dict_map(pb: bytes) -> dict[bytes, bytes]:
    """The dict path's view as bytes (last duplicate wins, malformed segments dropped)."""
    return {k.encode(): v.encode() for k, v in parse_properties(pb).items()}


def build_timer_deliveries(raws: Sequence[BytesLike | None], rolls: Sequence[int], exact_ms: Sequence[int],
                           enqueue_ms: Sequence[int], dequeue_ms: int, cancel: Container[str] | None,
                           uniqs: list[bytes | None] | None = None) -> list[TimerDelivery | int]:
    """Per record: MISSING / SKIPPED / CANCELLED, or its TimerDelivery. Rolls go to rmq_sys_wheel_timer
    / 0 with tagsCode 0 and no keys. `uniqs`, when given, gets each record's UNIQ_KEY bytes (None
    for a roll or a record that is not delivered). `cancel`: set of `REAL_TOPIC+UNIQ_KEY` str (the
    slot's delete marker keys). Raises CodecError on a malformed record or properties over 32767
    bytes, ValueError on a non-numeric TIMER_ROLL_TIMES."""
    out: list[TimerDelivery | int] = []
    append = out.append
    keep_uniq = uniqs.append if uniqs is not None else None
    pack_i32 = _I32.pack_into
    pack_len = _I16.pack
    qid_of = _qid
    deq = str(dequeue_ms).encode()
    last_w, enq = None, b""
    for n, raw in enumerate(raws):
        uniq = None
        if raw is None:
            append(MISSING)
            if keep_uniq:
                keep_uniq(None)
            continue
        tpos, ppos, pend = tail_span(raw)
        pb = bytes(raw[ppos + 2:pend])
        cm = canonical_map(pb)
        canonical = cm is not None
        d = cm if cm is not None else _dict_map(pb)
        get = d.get
        w = enqueue_ms[n]
        if w != last_w:  # units of one burst share their enqueue write clock
            last_w, enq = w, str(w).encode()
        if rolls[n]:
            rt = get(TIMER_ROLL_TIMES)
            times = str((_int(rt) if rt else 0) + 1).encode()
            edits = ((TIMER_ROLL_TIMES, times), (TIMER_DELIVER_MS, str(exact_ms[n]).encode()),
                     (TIMER_ENQUEUE_MS, enq), (TIMER_DEQUEUE_MS, deq))
            props = _edit_canonical(pb, edits) if canonical else _edit_dict(pb, edits)
            keys: tuple[bytes, ...] = ()
            field, topic, qid, tcode = _ROLL_TOPIC_FIELD, TIMER_TOPIC, 0, 0
        else:
            rt = get(REAL_TOPIC)
            uniq = get(UNIQ_KEY)
            if cancel and uniq:
                t = rt.decode("utf-8", "replace") if rt else None
                if f"{t}+{uniq.decode('utf-8', 'replace')}" in cancel:
                    append(CANCELLED)
                    if keep_uniq:
                        keep_uniq(None)
                    continue
            if not rt or TIMER_DEL_UNIQKEY in d:
                append(SKIPPED)
                if keep_uniq:
                    keep_uniq(None)
                continue
            topic, field = _topic(rt)
            qid = qid_of(get(REAL_QID))
            tcode = tags_code(get(TAGS))
            keys = index_keys(get(KEYS), uniq)
            if not canonical:
                props = _edit_dict(pb, ((TIMER_ENQUEUE_MS, enq), (TIMER_DEQUEUE_MS, deq)))
            elif TIMER_ENQUEUE_MS in d or TIMER_DEQUEUE_MS in d:
                props = _edit_canonical(pb, ((TIMER_ENQUEUE_MS, enq), (TIMER_DEQUEUE_MS, deq)))
            else:  # the common case: neither is there yet, both go at the end
                props = pb + _APPEND_TIMES + enq + _APPEND_DEQUEUE + deq
        if len(props) > MAX_PROPERTIES_BYTES:
            raise CodecError(f"properties longer than {MAX_PROPERTIES_BYTES} bytes")
        rec = bytearray(raw[:tpos])
        rec += field
        rec += pack_len(len(props))
        rec += props
        pack_i32(rec, POS_TOTAL, len(rec))
        pack_i32(rec, POS_QUEUE_ID, qid)
        append(TimerDelivery(rec, topic, qid, tcode, keys))
        if keep_uniq:
            keep_uniq(uniq)
    return out


def timer_put_run(built: Sequence[TimerDelivery]) -> PutRun:
    """Converted records as `MessageStore.put_batch` takes them (one `codec.put_run.put_run`; no deliver
    delays: a roll goes back to the wheel's topic by its own TIMER_OUT_MS)."""
    return put_run([d.record for d in built], [(d.topic, d.queue_id) for d in built], [d.tags_code for d in built],
                   [d.keys for d in built])


def timer_delivery_reference(raw: BytesLike | None, roll: bool, exact_ms: int, enqueue_ms: int, dequeue_ms: int,
                             cancel: Container[str] | None) -> TimerDelivery | int:
    """`build_timer_deliveries([raw], [roll], [exact_ms], [enqueue_ms], dequeue_ms, cancel)[0]` the slow way:
    MISSING / CANCELLED / SKIPPED, or the TimerDelivery (index keys as str)."""
    if raw is None:
        return MISSING
    tail_span(raw)  # the same well-formedness check as the fast path (magic, every length): CodecError
    props = parse_properties(read_properties_bytes(raw))
    if roll:
        props[MessageConst.TIMER_ROLL_TIMES] = str(int(props.get(MessageConst.TIMER_ROLL_TIMES, "0") or 0) + 1)
        props[MessageConst.TIMER_DELIVER_MS] = str(exact_ms)
        props[MessageConst.TIMER_ENQUEUE_MS] = str(enqueue_ms)
        props[MessageConst.TIMER_DEQUEUE_MS] = str(dequeue_ms)
        rec = rewrite_for_delivery(raw, TIMER_TOPIC, 0, properties_bytes=properties_to_string(props).encode())
        return TimerDelivery(rec, TIMER_TOPIC, 0, 0, ())
    topic = props.get(MessageConst.REAL_TOPIC)
    uniq = props.get(MessageConst.UNIQ_KEY)
    if cancel and uniq and f"{topic}+{uniq}" in cancel:
        return CANCELLED
    if MessageConst.TIMER_DEL_UNIQKEY in props or not topic:
        return SKIPPED
    try:
        qid = int(props.get(MessageConst.REAL_QID, "0"))
    except ValueError:
        qid = 0
    if not 0 <= qid <= 2**31 - 1:  # not a queue id: queue 0, as the fast path (record_rewrite._qid)
        qid = 0
    props[MessageConst.TIMER_ENQUEUE_MS] = str(enqueue_ms)
    props[MessageConst.TIMER_DEQUEUE_MS] = str(dequeue_ms)
    rec = rewrite_for_delivery(raw, topic, qid, properties_bytes=properties_to_string(props).encode())
    keys = [k for k in (props.get(MessageConst.KEYS) or "").split(" ") if k]
    if uniq:
        keys.append(uniq)
    tags = props.get(MessageConst.TAGS)
    return TimerDelivery(rec, topic, qid, tags_hash(tags) if tags else 0, tuple(keys))
